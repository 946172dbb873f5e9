"""What a search calls as it goes: the progress bar, ``metrics.csv``, snapshots, checkpoints,
the loggers, and a user's own.

:meth:`egrl.agents.base.SearchAgent.run` calls every :class:`Callback` of the run, in order,
at the run's start, at the end of each generation, after each checkpoint and policy
snapshot, and at the run's end (also when it fails, with the error). The agent's own
(:meth:`~egrl.agents.base.SearchAgent.default_callbacks`) come first::

    ProgressBar        the tqdm bar (``progress``)
    MetricsFile        one metrics.csv row per generation             (with a run directory)
    PolicySnapshots    policies/iter_XXXXXX.safetensors (EGRL, EA, PG: ``snapshot_every``)
    Checkpointer       checkpoints/gen_XXXXXX (``checkpoint_every``, ``keep_checkpoints``)

then the loggers of the ``logger`` group (:mod:`egrl.loggers`) and the callbacks given to
``run``. A callback of your own subclasses :class:`Callback` and overrides what it needs::

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
from typing import TYPE_CHECKING

from egrl.rundir import RunDir

if TYPE_CHECKING:
    from egrl.agents.base import SearchAgent

log = logging.getLogger(__name__)


class Callback:
    """Hooks of a search; each does nothing unless overridden.

    ``agent`` is the running :class:`~egrl.agents.base.SearchAgent`: its ``cfg``,
    ``run_dir`` (None without one), ``generation``, ``iterations``, ``best``, ``rows``
    (every metrics row so far) and ``stop_reason`` are there to read.
    """

    def on_run_start(self, agent: SearchAgent) -> None:
        """Before the first generation (of this process: a resumed run starts here too)."""

    def on_generation_end(self, agent: SearchAgent, row: dict) -> None:
        """After each generation; ``row`` is its metrics row (``agent.columns``)."""

    def on_checkpoint(self, agent: SearchAgent, path: Path) -> None:
        """After a checkpoint was written to ``path`` (``checkpoints/gen_XXXXXX``)."""

    def on_snapshot(self, agent: SearchAgent, path: Path) -> None:
        """After a policy snapshot was written to ``path`` (``policies/iter_*.safetensors``)."""

    def on_run_end(self, agent: SearchAgent, error: BaseException | None = None) -> None:
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

    def on_run_start(self, agent: SearchAgent) -> None:
        for c in self.callbacks:
            c.on_run_start(agent)

    def on_generation_end(self, agent: SearchAgent, row: dict) -> None:
        for c in self.callbacks:
            c.on_generation_end(agent, row)

    def on_checkpoint(self, agent: SearchAgent, path: Path) -> None:
        for c in self.callbacks:
            c.on_checkpoint(agent, path)

    def on_snapshot(self, agent: SearchAgent, path: Path) -> None:
        for c in self.callbacks:
            c.on_snapshot(agent, path)

    def on_run_end(self, agent: SearchAgent, error: BaseException | None = None) -> None:
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


def is_last_generation(agent: SearchAgent) -> bool:
    """The generation just ended is the run's last (budget spent or stopped early)."""
    return agent.done or agent.stop_reason is not None


class ProgressBar(Callback):
    """A tqdm bar of paid measurements against the budget, with the best speedup."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.bar = None
        self._seen = 0

    def on_run_start(self, agent: SearchAgent) -> None:
        from tqdm.auto import tqdm

        self._seen = agent.iterations
        self.bar = tqdm(
            total=agent.cfg.budget,
            initial=agent.iterations,
            desc=f"{agent.name} {agent.env.workload.name}",
            unit="eval",
            disable=not self.enabled,
        )

    def on_generation_end(self, agent: SearchAgent, row: dict) -> None:
        if self.bar is None:
            return
        self.bar.update(agent.iterations - self._seen)
        self._seen = agent.iterations
        self.bar.set_postfix(best_speedup=f"{agent.best.speedup:.3f}", gen=agent.generation)

    def on_run_end(self, agent: SearchAgent, error: BaseException | None = None) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class MetricsFile(Callback):
    """``metrics.csv``: one row per generation, in ``agent.columns`` order."""

    def on_generation_end(self, agent: SearchAgent, row: dict) -> None:
        RunDir(agent.run_dir).append_metrics(agent.columns, row)


class PolicySnapshots(Callback):
    """Every ``every`` generations and at the end, the agent's GNN policies
    (``agent.save_policy_snapshot()``: :class:`egrl.agents.egrl.trainer.Trainer`) for ``egrl-transfer``."""

    def __init__(self, every: int) -> None:
        self.every = max(1, int(every))

    def on_generation_end(self, agent: SearchAgent, row: dict) -> None:
        if agent.generation % self.every == 0 or agent.done:
            path = agent.save_policy_snapshot()
            agent.callbacks.on_snapshot(agent, path)


class Checkpointer(Callback):
    """Every ``every`` generations and at the last, ``agent.save_checkpoint()`` (which keeps
    the newest ``keep_checkpoints``)."""

    def __init__(self, every: int) -> None:
        self.every = max(1, int(every))

    def on_generation_end(self, agent: SearchAgent, row: dict) -> None:
        if agent.generation % self.every == 0 or is_last_generation(agent):
            path = agent.save_checkpoint()
            agent.callbacks.on_checkpoint(agent, path)


class EachGeneration(Callback):
    """A plain function called with each generation's metrics row (``run(on_generation=)``)."""

    def __init__(self, fn: Callable[[dict], None]) -> None:
        self.fn = fn

    def on_generation_end(self, agent: SearchAgent, row: dict) -> None:
        self.fn(row)


__all__ = [
    "Callback",
    "CallbackList",
    "Checkpointer",
    "EachGeneration",
    "MetricsFile",
    "PolicySnapshots",
    "ProgressBar",
    "is_last_generation",
]
