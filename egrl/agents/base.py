"""What every agent shares: the search loop, its stop rules and its checkpoints.

A subclass implements :meth:`SearchAgent.step` (one generation: propose maps, have them
measured by ``self.ledger``, learn) and :meth:`SearchAgent.agent_state` /
:meth:`SearchAgent.load_agent_state`. What is measured, paid and recorded is the
:class:`~egrl.ledger.Ledger`'s, what is written as the run goes the callbacks', a noisy
target's confirmation :mod:`egrl.confirm`'s, the metrics columns :mod:`egrl.agents.columns`'.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from egrl import confirm
from egrl.agents.checkpoints import Checkpoints
from egrl.agents.columns import (
    METRIC_COLUMNS,
    PAID_MAPS_COLUMN,
    SCREEN_TIMING_COLUMN,
    TIMING_COLUMNS,
    metric_columns,
)
from egrl.callbacks import Callback, CallbackList, EachGeneration, default_callbacks
from egrl.config import AgentConfig, TrainConfig
from egrl.env import Env
from egrl.evaluations import EvaluationLog
from egrl.ledger import Ledger, measure_cache
from egrl.record import Best
from egrl.screening import capability
from egrl.screening.screen import make_screen
from egrl.timing import SCREEN_PHASE, Timer

log = logging.getLogger(__name__)

#: how :attr:`SearchAgent.stop_reason` of a run stopped by ``time_limit_s`` begins
TIME_LIMIT_REACHED = "time limit reached"
#: kept importable from here (:mod:`egrl.agents.columns`, :mod:`egrl.timing`)
__all__ = ["METRIC_COLUMNS", "PAID_MAPS_COLUMN", "SCREEN_PHASE", "SCREEN_TIMING_COLUMN"]
__all__ += ["TIMING_COLUMNS", "TIME_LIMIT_REACHED", "Best", "SearchAgent"]


class SearchAgent(Checkpoints):
    """Base class of all agents (see the module docstring).

    Args:
        env: the environment (hardware target bound to a workload).
        cfg: the run's configuration (``cfg.budget``, ``cfg.seed``, ``cfg.agent``, ...).
        run_dir: where outputs and checkpoints go (None: nowhere).
    """

    #: agent-specific metrics.csv columns, after :data:`METRIC_COLUMNS`
    extra_columns: tuple[str, ...] = ()
    #: the agent has GNN policies that ``cfg.init_from`` can start from a trained one
    accepts_init_from: bool = False
    #: what the agent can do with a screen (:mod:`egrl.screening.capability`): propose
    #: candidates for it to choose from, search its model with its operators between paid
    #: batches (:meth:`searches_model` for a configuration), and the generations of that
    #: search ``screen.search=auto`` gives it (0 re-ranks a pool; docs/screening.md)
    screens: bool = False
    model_search: bool = False
    default_search: int = 0
    #: the agent searches the screen's model itself (``agent=mbo``): it needs a model, and
    #: ``screen.search`` is not its; the option that sets how deep it searches, in words
    needs_model: str = ""
    #: the agent writes policy snapshots (:meth:`save_policy_snapshot`)
    snapshots: bool = False
    #: the agent's section of the run config, with the options and sections it owns
    config_class: type[AgentConfig] = AgentConfig

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        if cfg.init_from and not self.accepts_init_from:
            raise ValueError(
                f"init_from={cfg.init_from} is invalid: agent {cfg.agent.name!r} has no GNN "
                "policy to start from it (egrl, ea and pg have)"
            )
        capability.refuse(type(self), cfg)
        self.cfg, self.env, self.name = cfg, env, cfg.agent.name
        self.run_dir = Path(run_dir) if run_dir is not None else None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.rng = np.random.default_rng(cfg.seed)
        self.generator = torch.Generator(device="cpu").manual_seed(cfg.seed)
        self.timer = Timer()
        cache = measure_cache(env, cfg.cache_size, cfg.confirm.reread)
        #: the run's screen (None: ``screen=none``), learning from the ledger's record
        self.screen = make_screen(cfg.screen, env, cache, cfg.seed)
        #: measures, counts and records the run's maps (:class:`~egrl.ledger.Ledger`)
        self.ledger = Ledger(
            env,
            cfg.budget,
            cache,
            cfg.record_size,
            self.timer,
            EvaluationLog(env, self.run_dir if cfg.record_evaluations else None),
            lambda: (self.generation + 1, self.elapsed_s()),
            self.screen,
            pool=cfg.screen.pool,
        )
        #: board runs kept from the search for the confirmation of a noisy target's best
        self.confirm_reserve = confirm.reserve(env, cfg.confirm, cfg.budget)
        self.ledger.budget.hold(self.confirm_reserve)
        #: the confirmed best (:mod:`egrl.confirm`), once the run has read it again
        self.confirmation: confirm.Confirmation | None = None
        #: steps of the agent's operators on the screen's model between paid batches
        self.search_generations = capability.search_generations(type(self), cfg)
        self.stop_reason: str | None = None
        #: ``time.perf_counter()`` at which the generation under way reaches
        #: ``cfg.time_limit_s`` (None: no limit); game agents stop inside a game there
        self.time_limit_deadline: float | None = None
        self.generation = 0
        self.wall_s = 0.0
        self._generation_start: float | None = None
        self.rows: list[dict] = []
        #: the callbacks of the run under way (:meth:`run`); none outside a run
        self.callbacks = CallbackList()

    @classmethod
    def has_critic(cls, agent: dict) -> bool:  # the ``agent`` section's, for screen=critic
        return False

    @classmethod
    def searches_model(cls, agent: dict) -> bool:  # the ``agent`` section's; screen.search
        return cls.model_search

    @property
    def searching(self) -> bool:
        """This generation searches the screen's model (``screen.search``, a model fitted)."""
        screen = self.screen
        return bool(self.search_generations) and screen is not None and screen.active

    @property
    def finished(self) -> bool:
        """The budget is spent (``ledger.done``), or the agent says it is done."""
        return self.ledger.done

    @property
    def columns(self) -> tuple[str, ...]:
        """metrics.csv's columns (:func:`egrl.agents.columns.metric_columns`)."""
        reads_again = self.ledger.readings_per_map > 1 or bool(self.ledger.cache.reread)
        confirms = bool(self.confirm_reserve)
        return metric_columns(self.extra_columns, confirms, reads_again, self.screen is not None)

    # ------------------------------------------------------------- the search
    def step(self) -> dict:
        """One generation: propose maps, measure them (``self.ledger``), learn; extra metrics."""
        raise NotImplementedError

    def elapsed_s(self) -> float:
        """The run's wall clock: :attr:`wall_s` and the generation under way."""
        start = self._generation_start
        return self.wall_s + (0.0 if start is None else time.perf_counter() - start)

    def _open_row(self) -> None:
        """Start a metrics row: the clock of the generation under way, its batch empty."""
        self._generation_start = time.perf_counter()
        self.ledger.batch = []

    def _close_row(self, extra: dict) -> dict:
        """End the generation under way: its metrics row (``extra``, the ledger's counts
        and best map, the timings), kept in :attr:`rows`."""
        self.generation += 1
        self.wall_s += time.perf_counter() - self._generation_start
        self._generation_start = None
        row: dict = dict.fromkeys(self.columns, float("nan")) | extra | self.ledger.metrics()
        row.update(generation=self.generation, wall_s=self.wall_s)
        row.update({f"t_{k}": v for k, v in self.timer.totals.items()})
        self.rows.append(row)
        return row

    def _generation(self) -> dict:
        """One generation (:meth:`step`), the screen refitted before it; its metrics row."""
        self._open_row()
        self.ledger.refit_screen()
        row = self.step()
        return self._close_row(row | self.ledger.screen_metrics())

    def run(
        self,
        on_generation: Callable[[dict], None] | None = None,
        callbacks: Sequence[Callback] = (),
    ) -> Best:
        """Search until the budget is spent; returns the best valid map.

        A search that pays nothing in ``cfg.max_stale_generations`` generations in a row,
        or whose wall time (across resumes) passes ``cfg.time_limit_s``, stops early
        (:attr:`stop_reason`). Callbacks: the defaults, ``callbacks``, ``on_generation``
        (each metrics row); a generation's snapshot and checkpoint are announced before its
        ``on_generation_end``. A noisy target's run ends by confirming its best."""
        extra = [EachGeneration(on_generation)] if on_generation is not None else []
        self.callbacks = CallbackList([*self.default_callbacks(), *callbacks, *extra])
        self.callbacks.on_run_start(self)
        stale = 0
        self._check_time_limit()
        try:
            while not self.finished and self.stop_reason is None:
                before = self.ledger.iterations
                if self.cfg.time_limit_s is not None:
                    left = self.cfg.time_limit_s - self.wall_s
                    self.time_limit_deadline = time.perf_counter() + left
                row = self._generation()
                stale = stale + 1 if self.ledger.iterations == before else 0
                if stale >= self.cfg.max_stale_generations:
                    self._stop(
                        f"no new map in {stale} generations (max_stale_generations="
                        f"{self.cfg.max_stale_generations})",
                        logging.WARNING,
                    )
                self._check_time_limit()
                self._save_due()
                self.callbacks.on_generation_end(self, row)
            if self.confirm_reserve and self.confirmation is None:
                self._confirm_best()
        except BaseException as exc:
            self.callbacks.on_run_end(self, exc)
            raise
        self.callbacks.on_run_end(self)
        return self.ledger.best

    def _confirm_best(self) -> None:
        """Read a noisy target's best maps again (:func:`egrl.confirm.confirm_best`): one
        more metrics row (its ``confirmed_*`` columns) and a checkpoint."""
        self._open_row()
        found = confirm.confirm_best(self.ledger, self.cfg.confirm.top)
        if found is None:
            self._generation_start = None
            return
        self.confirmation = found
        row = self._close_row(found.metrics())
        if self.run_dir is not None:
            self.callbacks.on_checkpoint(self, self.save_checkpoint())
        self.callbacks.on_generation_end(self, row)

    def default_callbacks(self) -> list[Callback]:
        """The run's own callbacks (:func:`egrl.callbacks.default_callbacks`)."""
        return default_callbacks(self.cfg.progress, self.run_dir is not None)

    def _check_time_limit(self) -> None:
        """Stop if the run's wall time has reached ``cfg.time_limit_s``."""
        limit = self.cfg.time_limit_s
        if limit is not None and self.stop_reason is None and self.wall_s >= limit:
            self.stop_time_limit()

    def stop_time_limit(self) -> None:
        """Stop on ``cfg.time_limit_s`` (:data:`TIME_LIMIT_REACHED`)."""
        self._stop(f"{TIME_LIMIT_REACHED} (time_limit_s={self.cfg.time_limit_s:g})")

    def _stop(self, why: str, level: int = logging.INFO) -> None:
        """Record (:attr:`stop_reason`) and log why the search stops early."""
        self.stop_reason = (
            f"{why}: stopped after {self.ledger.iterations} of {self.cfg.budget} paid "
            f"measurements and {self.ledger.proposals} proposals"
        )
        log.log(level, "agent %r on %s: %s", self.name, self.env.workload.name, self.stop_reason)

    def best_extras(self) -> dict:  # what the agent adds to best_mapping.json, after the rest
        return {}
