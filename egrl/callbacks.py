"""What a search calls as it goes: the progress bar, ``metrics.csv``, the run's outputs, the
loggers, and a user's own.

:meth:`egrl.agents.base.SearchAgent.run` calls every :class:`Callback` of the run, in order,
at the run's start, after each checkpoint and policy snapshot the loop writes
(``checkpoint_every``, ``keep_checkpoints``; ``snapshot_every`` for agents with policies),
at the end of each generation, and at the run's end (also when it fails, with the error).
The agent's own (:func:`default_callbacks`) come first::

    ProgressBar        the tqdm bar (``progress``)
    MetricsFile        one metrics.csv row per generation             (with a run directory)
    BestMapFile        best_mapping.json at the end                   (with a run directory)
    SpeedupPlot        speedup.png at the end                         (with a run directory)

then the agent's own outputs (EGRL's learner entropy plot), the loggers of the ``logger``
group (:mod:`egrl.loggers`) and the callbacks given to ``run``. A callback reads the run
(:class:`RunView`) and never calls back into it. A callback of your own subclasses
:class:`Callback` and overrides what it needs::

    class PrintBest(Callback):
        def on_generation_end(self, agent, row):
            print(row["iterations"], row["best_speedup"])

    agent.run(callbacks=[PrintBest()])

A callback that raises stops the run (the others' ``on_run_end`` are still called).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from tqdm.auto import tqdm

from egrl import deploy
from egrl.env import Env
from egrl.ledger import Ledger
from egrl.rundir import RunDir

if TYPE_CHECKING:
    from egrl.confirm import Confirmation

log = logging.getLogger(__name__)


class RunView(Protocol):
    """What a callback reads of the running search (a
    :class:`~egrl.agents.base.SearchAgent` meets it); what was measured, paid and found is
    its ``ledger``'s (``ledger.iterations``, ``ledger.best``, ``ledger.done``, ...)."""

    name: str
    cfg: Any
    env: Env
    run_dir: Path | None
    generation: int
    ledger: Ledger
    rows: list[dict]
    columns: tuple[str, ...]
    stop_reason: str | None

    @property
    def finished(self) -> bool: ...

    def best_extras(self) -> dict: ...


class Callback:
    """Hooks of a search; each does nothing unless overridden.

    ``agent`` is the running search, to read (:class:`RunView`): its ``cfg``,
    ``run_dir`` (None without one), ``generation``, ``iterations``, ``best``, ``rows``
    (every metrics row so far) and ``stop_reason``.
    """

    def on_run_start(self, agent: RunView) -> None:
        """Before the first generation (of this process: a resumed run starts here too)."""

    def on_generation_end(self, agent: RunView, row: dict) -> None:
        """After each generation; ``row`` is its metrics row (``agent.columns``)."""

    def on_checkpoint(self, agent: RunView, path: Path) -> None:
        """After a checkpoint was written to ``path`` (``checkpoints/gen_XXXXXX``)."""

    def on_snapshot(self, agent: RunView, path: Path) -> None:
        """After a policy snapshot was written to ``path`` (``policies/iter_*.safetensors``)."""

    def on_run_end(self, agent: RunView, error: BaseException | None = None) -> None:
        """After the run's outputs are written; ``error`` is what stopped a failed run (it
        is raised again once every callback has been called)."""


class CallbackList(Callback):
    """Several callbacks called in order as one; :attr:`SearchAgent.callbacks` during a run."""

    def __init__(self, callbacks: Iterable[Callback] = ()) -> None:
        self.callbacks = list(callbacks)

    def __iter__(self):
        return iter(self.callbacks)

    def __len__(self) -> int:
        return len(self.callbacks)

    def on_run_start(self, agent: RunView) -> None:
        for c in self.callbacks:
            c.on_run_start(agent)

    def on_generation_end(self, agent: RunView, row: dict) -> None:
        for c in self.callbacks:
            c.on_generation_end(agent, row)

    def on_checkpoint(self, agent: RunView, path: Path) -> None:
        for c in self.callbacks:
            c.on_checkpoint(agent, path)

    def on_snapshot(self, agent: RunView, path: Path) -> None:
        for c in self.callbacks:
            c.on_snapshot(agent, path)

    def on_run_end(self, agent: RunView, error: BaseException | None = None) -> None:
        """Every callback's ``on_run_end``, even when one of them fails (the first failure
        is raised after the others have run)."""
        first: BaseException | None = None
        for c in self.callbacks:
            try:
                c.on_run_end(agent, error)
            except Exception as exc:  # noqa: BLE001 - every callback must get its call
                log.exception("callback %s failed at the run's end", type(c).__name__)
                first = first or exc
        if first is not None and error is None:
            raise first


def is_last_generation(agent: RunView) -> bool:
    """The generation just ended is the run's last (budget spent or stopped early)."""
    return agent.finished or agent.stop_reason is not None


class ProgressBar(Callback):
    """A tqdm bar of paid measurements against the budget, with the best speedup."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.bar = None
        self._seen = 0

    def on_run_start(self, agent: RunView) -> None:
        self._seen = agent.ledger.iterations
        self.bar = tqdm(
            total=agent.cfg.budget,
            initial=agent.ledger.iterations,
            desc=f"{agent.name} {agent.env.workload.name}",
            unit="eval",
            disable=not self.enabled,
        )

    def on_generation_end(self, agent: RunView, row: dict) -> None:
        if self.bar is None:
            return
        self.bar.update(agent.ledger.iterations - self._seen)
        self._seen = agent.ledger.iterations
        self.bar.set_postfix(best_speedup=f"{agent.ledger.best.speedup:.3f}", gen=agent.generation)

    def on_run_end(self, agent: RunView, error: BaseException | None = None) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class MetricsFile(Callback):
    """``metrics.csv``: one row per generation, in ``agent.columns`` order."""

    def on_generation_end(self, agent: RunView, row: dict) -> None:
        RunDir(agent.run_dir).append_metrics(agent.columns, row)


class BestMapFile(Callback):
    """``best_mapping.json`` at the end of a run that did not fail: the run's answer (its
    map keyed by unit name, speedup, latency, reward and iteration), the run's counts, why
    it stopped early (if it did), the compiler's latency, the best map by each of the
    target's values (``record_evaluations``), then what the agent adds (its
    ``best_extras()``: the solver's record, the snapshot that mapped).

    The answer is the best single reading's, except on a noisy target whose run confirmed
    its best (:mod:`egrl.confirm`): there it is the confirmed map, its speedup and interval
    (``speedup_low``, ``speedup_high``) and mean latency on the readings that scored it,
    with no reward or iteration of its own; the best single reading keeps its own key
    (``best_reading``) and the confirmation its details (``confirmed``).

    ``deployed`` is the map to deploy (:func:`egrl.deploy.of_run`): the answer where it
    beats the compiler's map, else the compiler's (or the prior's) map, with its
    ``source``; the answer keeps its own keys for the studies."""

    def on_run_end(self, agent: RunView, error: BaseException | None = None) -> None:
        if error is not None:
            return
        reading = best_reading(agent)
        found = getattr(agent, "confirmation", None)
        answer, confirmation = reading, {}
        if found is not None:
            answer = confirmed_answer(found, agent.env)
            confirmation = {
                "best_reading": reading,
                "confirmed": found.summary(agent.env.mapping_to_dict),
            }
        RunDir(agent.run_dir).write_best_map(
            {
                "agent": agent.name,
                "workload": agent.env.workload.name,
                **{k: v for k, v in answer.items() if k != "mapping"},
                "iterations": agent.ledger.iterations,
                "proposals": agent.ledger.proposals,
                "failed_maps": agent.ledger.failed_maps,
                "stopped_early": agent.stop_reason,
                "baseline_latency_s": agent.env.baseline_latency_s,
                "mapping": answer["mapping"],
                **agent.ledger.evaluation_log.best_by_value(),
                **confirmation,
                "deployed": deploy.of_run(agent).record(agent.env.mapping_to_dict),
                **agent.best_extras(),
            }
        )


def best_reading(agent: RunView) -> dict:
    """The best single reading of the run (:class:`~egrl.ledger.Best`): its speedup,
    latency, reward, iteration and map keyed by unit name (None if no map ran)."""
    best = agent.ledger.best
    return {
        "speedup": best.speedup,
        "latency_s": best.latency_s,
        "reward": best.reward,
        "iteration": best.iteration,
        "mapping": None if best.mapping is None else agent.env.mapping_to_dict(best.mapping),
    }


def confirmed_answer(found: Confirmation, env: Env) -> dict:
    """A confirmed run's answer: the confirmed map, its speedup and interval, and its mean
    latency on the readings that scored it (the compiler's mean over the speedup)."""
    best = found.best
    compiler_s = (
        float(np.mean(found.baseline_readings_s))
        if len(found.baseline_readings_s)
        else float("nan")
    )
    return {
        "speedup": best.speedup,
        "speedup_low": best.low,
        "speedup_high": best.high,
        "latency_s": compiler_s / best.speedup if best.speedup > 0 else float("nan"),
        "reward": None,
        "iteration": None,
        "mapping": env.mapping_to_dict(best.mapping),
    }


class SpeedupPlot(Callback):
    """``speedup.png`` at the end of a run that did not fail: the best speedup against
    paid measurements, the compiler at 1.0."""

    def on_run_end(self, agent: RunView, error: BaseException | None = None) -> None:
        if error is not None:
            return
        from egrl.plots import plot_speedup_curve  # start-up time: matplotlib, at the end

        plot_speedup_curve(
            agent.rows,
            RunDir(agent.run_dir).speedup_plot,
            title=f"{agent.name} on {agent.env.workload.name}",
        )


class EachGeneration(Callback):
    """A plain function called with each generation's metrics row (``run(on_generation=)``)."""

    def __init__(self, fn: Callable[[dict], None]) -> None:
        self.fn = fn

    def on_generation_end(self, agent: RunView, row: dict) -> None:
        self.fn(row)


def default_callbacks(progress: bool, run_dir: bool) -> list[Callback]:
    """A run's own callbacks: the progress bar, then with a run directory ``metrics.csv``,
    ``best_mapping.json`` and ``speedup.png``."""
    out: list[Callback] = [ProgressBar(progress)]
    if run_dir:
        out += [MetricsFile(), BestMapFile(), SpeedupPlot()]
    return out


__all__ = [
    "BestMapFile",
    "Callback",
    "CallbackList",
    "EachGeneration",
    "MetricsFile",
    "ProgressBar",
    "RunView",
    "SpeedupPlot",
    "default_callbacks",
    "is_last_generation",
]
