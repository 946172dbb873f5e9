"""What every agent shares: the search loop, its stop rules and its checkpoints.

A subclass implements :meth:`SearchAgent.step` (one generation: propose maps, have them
measured by ``self.ledger``, learn) and :meth:`SearchAgent.agent_state` /
:meth:`SearchAgent.load_agent_state`. What is measured, paid and archived is the
:class:`~egrl.ledger.Ledger`'s; what is written as the run goes the callbacks'
(:mod:`egrl.callbacks`); a noisy target's confirmation is :mod:`egrl.confirm`'s and the
screen's checks :mod:`egrl.screening.capability`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from egrl import confirm
from egrl.callbacks import Callback, CallbackList, EachGeneration, default_callbacks
from egrl.config import AgentConfig, TrainConfig
from egrl.env import Env
from egrl.evaluations import EvaluationLog
from egrl.ledger import PHASES, SCREEN_PHASE, Best, Ledger, Timer, measure_cache
from egrl.rundir import RunDir
from egrl.screening import capability
from egrl.screening.screen import SCREEN_COLUMNS, make_screen

log = logging.getLogger(__name__)

#: metrics.csv columns shared by every agent; agents may add their own (``extra_columns``).
#: The ``wall_s`` and ``t_*`` columns are wall-clock timings, the rest is a deterministic
#: function of the seed.
METRIC_COLUMNS = (
    "generation",
    "iterations",
    "proposals",
    "wall_s",
    "best_reward",
    "best_speedup",
    "best_latency_s",
    "batch_best_reward",
    "batch_mean_reward",
    "batch_valid_fraction",
)
#: metrics.csv column of the distinct maps paid for, where ``iterations`` (board runs)
#: differs: a chip that reads each map several times, or a run that confirms its best
PAID_MAPS_COLUMN = "paid_maps"
#: how :attr:`SearchAgent.stop_reason` of a run stopped by ``time_limit_s`` begins
TIME_LIMIT_REACHED = "time limit reached"
#: the wall-clock columns: the run's and each phase's (:data:`egrl.ledger.PHASES`)
TIMING_COLUMNS = ("wall_s", *(f"t_{phase}" for phase in PHASES))
#: a screening run's time fitting its model and choosing candidates, after the timings
SCREEN_TIMING_COLUMN = f"t_{SCREEN_PHASE}"


class SearchAgent:
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
        #: measures, counts and archives the run's maps (:class:`~egrl.ledger.Ledger`)
        self.ledger = Ledger(
            env,
            cfg.budget,
            cache,
            cfg.record_size,
            self.timer,
            EvaluationLog(env, self.run_dir if cfg.record_evaluations else None),
            lambda: (self.generation + 1, self.elapsed_s()),
            make_screen(cfg.screen, env, cache, cfg.seed),
            pool=cfg.screen.pool,
        )
        #: board runs kept from the search for the confirmation of a noisy target's best
        self.confirm_reserve = confirm.reserve(env, cfg.confirm, cfg.budget)
        self.ledger.budget -= self.confirm_reserve
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
        screen = self.ledger.screen
        return bool(self.search_generations) and screen is not None and screen.active

    @property
    def finished(self) -> bool:
        """The search has nothing left to do: its budget is spent (``ledger.done``), or
        the agent says so (the optimum agent, once its one map is measured)."""
        return self.ledger.done

    @property
    def columns(self) -> tuple[str, ...]:
        """metrics.csv's columns; a screening run adds :data:`SCREEN_COLUMNS` and
        :data:`SCREEN_TIMING_COLUMN`."""
        confirmed = confirm.COLUMNS if self.confirm_reserve else ()
        # board runs are not maps: a chip read R times, a confirmation, a kept map read again
        if self.confirm_reserve or self.ledger.readings_per_map > 1 or self.ledger.cache.reread:
            confirmed = (PAID_MAPS_COLUMN, *confirmed)
        timings = TIMING_COLUMNS[1:]
        if self.ledger.screen is not None:
            timings = SCREEN_COLUMNS + timings + (SCREEN_TIMING_COLUMN,)
        return METRIC_COLUMNS + self.extra_columns + confirmed + timings

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
        """End the generation under way: its metrics row (``extra``, then the ledger's
        counts and best map and the timings) kept in :attr:`rows` and returned."""
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
        or whose wall time (:attr:`wall_s`, across resumes) passes ``cfg.time_limit_s``,
        stops early (:attr:`stop_reason`). Callbacks: the :meth:`default_callbacks`, then
        ``callbacks``, then ``on_generation`` (called with each metrics row); a generation's
        snapshot and checkpoint are announced before its ``on_generation_end``. On a noisy
        target the run ends by confirming its best (:meth:`_confirm_best`)."""
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
        """Read the best maps of a noisy target again (:func:`egrl.confirm.confirm_best`)
        from the budget reserved for it: one more metrics row (its ``confirmed_*`` columns
        filled) and a checkpoint."""
        self._open_row()
        found = confirm.confirm_best(self.ledger, self.cfg.confirm.top, self.confirm_reserve)
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

    def _save_due(self) -> None:
        """With a run directory, the policy snapshot and checkpoint this generation owes
        (each every so many generations and at the end), each announced to the callbacks."""
        if self.run_dir is None:
            return
        done = self.finished
        if self.snapshots and (self.generation % max(1, self.cfg.snapshot_every) == 0 or done):
            self.callbacks.on_snapshot(self, self.save_policy_snapshot())
        if self.generation % max(1, self.cfg.checkpoint_every) == 0 or done or self.stop_reason:
            self.callbacks.on_checkpoint(self, self.save_checkpoint())

    def _check_time_limit(self) -> None:
        """Stop if the run's wall time has reached ``cfg.time_limit_s``."""
        limit = self.cfg.time_limit_s
        if limit is not None and self.stop_reason is None and self.wall_s >= limit:
            self.stop_time_limit()

    def stop_time_limit(self) -> None:
        """Stop on ``cfg.time_limit_s`` (a finished run: ``stopped_early`` in
        ``best_mapping.json`` starts with :data:`TIME_LIMIT_REACHED`)."""
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

    # ------------------------------------------------------------ checkpoints
    def save_policy_snapshot(self) -> Path:
        """Write the agent's policies for ``egrl-transfer`` (agents with :attr:`snapshots`)."""
        raise NotImplementedError(f"agent {self.name!r} has no policies to snapshot")

    def agent_state(self) -> dict:
        """The subclass's own state (tensors, arrays and plain data)."""
        return {}

    def load_agent_state(self, state: dict) -> None:  # inverse of agent_state
        pass

    def state_dict(self) -> dict:
        """Everything needed to continue the run bit for bit."""
        state = {
            **self.ledger.state_dict(),
            "generation": self.generation,
            "wall_s": self.wall_s,
            "timer": dict(self.timer.totals),
            "rng": self.rng.bit_generator.state,
            "generator": self.generator.get_state(),
            "rows": self.rows,
            "agent": self.agent_state(),
        }
        if self.confirmation is not None:
            state["confirmation"] = self.confirmation.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.ledger.load_state_dict(state)
        self.generation = int(state["generation"])
        self.wall_s = float(state["wall_s"])
        self.timer.totals.update(dict(state["timer"]))
        self.rng.bit_generator.state = state["rng"]
        self.generator.set_state(state["generator"])
        self.rows = list(state["rows"])
        self.load_agent_state(state["agent"])
        if state.get("confirmation") is not None:
            self.confirmation = confirm.resumed(
                state["confirmation"], self.ledger, self.cfg.budget, self.confirm_reserve
            )

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/gen_XXXXXX`` atomically and prune old ones."""
        files = RunDir(self.run_dir)
        return files.save_checkpoint(self.state_dict(), self.generation, self.cfg.keep_checkpoints)

    def resume(self) -> bool:
        """Continue from the newest intact checkpoint in ``run_dir`` (damaged ones are
        skipped with a warning); False if there is none. Raises
        :class:`egrl.checkpoint.CheckpointError` if checkpoints exist but all are damaged."""
        files = RunDir(self.run_dir)
        found = files.load_latest_checkpoint()
        if found is None:
            return False
        ckpt, state = found
        self.load_state_dict(state)
        files.rewrite_metrics(self.columns, self.rows)
        log.info("resumed %s from %s at generation %d", self.run_dir, ckpt.name, self.generation)
        return True
