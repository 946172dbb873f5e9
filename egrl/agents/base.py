"""What every agent shares: the search loop, its stop rules and its checkpoints.

A subclass implements :meth:`SearchAgent.step` (one generation: propose maps, have them
measured with :meth:`~egrl.ledger.Ledger.evaluate` or ``submit`` / ``collect``, learn) and
:meth:`SearchAgent.agent_state` / :meth:`SearchAgent.load_agent_state`. What is measured,
paid and recorded is the :class:`~egrl.ledger.Ledger`'s; what is written as the run goes
(``metrics.csv``, ``best_mapping.json``, plots, loggers) the callbacks' (:mod:`egrl.callbacks`).
The loop runs generations until the budget is spent, the search stops paying, or the wall
time passes ``time_limit_s``, and writes checkpoints and policy snapshots at their cadence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from egrl import confirm
from egrl.callbacks import Callback, CallbackList, EachGeneration, default_callbacks
from egrl.config import AgentConfig, TrainConfig
from egrl.env import Env
from egrl.evaluations import EvaluationLog
from egrl.ledger import Best, Ledger, Timer, measure_cache
from egrl.rundir import RunDir
from egrl.screening.base import CRITIC_MODELS, resolve_search
from egrl.screening.screen import SCREEN_COLUMNS, make_screen
from egrl.validation import ConfigError

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
TIMING_COLUMNS = ("wall_s", "t_inference", "t_evaluation", "t_learner", "t_evolution")
#: the phase of a screening run spent fitting its model and choosing candidates; its
#: column comes after the other timings
SCREEN_PHASE = "screening"
SCREEN_TIMING_COLUMN = f"t_{SCREEN_PHASE}"


def _ledger_attr(name: str, doc: str, settable: bool = True) -> property:
    """An attribute (or method) of the agent that is its ledger's."""
    setter = (lambda self, value: setattr(self.ledger, name, value)) if settable else None
    return property(lambda self: getattr(self.ledger, name), setter, doc=doc)


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
    #: the agent proposes candidates for a learned screen (``cfg.screen``) to choose from
    screens: bool = False
    #: its operators can search the screen's model between paid batches (``screen.search``;
    #: :meth:`searches_model` says whether a configuration of it does)
    model_search: bool = False
    #: generations of model search that ``screen.search=auto`` (``screen=forest``'s and
    #: ``screen=gnn``'s default) gives this agent: 0 re-ranks a pool (docs/screening.md,
    #: "Model search", says which agents the study found model search pays for)
    default_search: int = 0
    #: the agent writes policy snapshots (:meth:`save_policy_snapshot`)
    snapshots: bool = False
    #: the agent's section of the run config, with the options and sections it owns
    config_class: type[AgentConfig] = AgentConfig

    env = _ledger_attr("env", "The environment maps are measured on.")
    iterations = _ledger_attr("iterations", "Paid measurements so far.")
    proposals = _ledger_attr("proposals", "Maps answered so far, paid or not.")
    failed_maps = _ledger_attr("failed_maps", "Paid maps the runtime could not measure.")
    best = _ledger_attr("best", "The best map the chip ran (:class:`~egrl.ledger.Best`).")
    record = _ledger_attr("record", "Every answered map, its reward and source.")
    cache = _ledger_attr("cache", "Answers of maps measured before.")
    dispatcher = _ledger_attr("dispatcher", "The cache and budget in front of the runtime.")
    screen = _ledger_attr("screen", "The learned screen (``cfg.screen``), None without.")
    pool = _ledger_attr("pool", "Candidates proposed per map to measure (``screen.pool``).")
    runtime = _ledger_attr("runtime", "Where maps are measured (:mod:`egrl.runtime`).", False)
    remaining = _ledger_attr("remaining", "Paid measurements left, in flight counted.", False)
    done = _ledger_attr("done", "The budget is spent (every paid map answered).", False)
    evaluate = _ledger_attr("evaluate", "Submit maps and wait for the answer.", False)
    submit = _ledger_attr("submit", "Send maps without waiting.", False)
    collect = _ledger_attr("collect", "The submissions answered since the last call.", False)
    select = _ledger_attr("select", "The screen's pick of candidates to pay for.", False)
    choose = _ledger_attr("choose", "The screen's pick of one candidate per group.", False)
    use_runtime = _ledger_attr("use_runtime", "Measure through a runtime from now on.", False)
    evaluation_log = _ledger_attr("evaluation_log", "``evaluations.csv``.")

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        self._refuse(cfg)
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.rng = np.random.default_rng(cfg.seed)
        self.generator = torch.Generator(device="cpu").manual_seed(cfg.seed)
        self.timer = Timer()
        cache = measure_cache(env, cfg.cache_size, cfg.confirm.reread)
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
        if self.screen is not None:
            self.timer.totals[SCREEN_PHASE] = 0.0
        #: board runs kept from the search for the confirmation of a noisy target's best
        self.confirm_reserve = self._reserve(env, cfg)
        self.ledger.budget -= self.confirm_reserve
        #: the confirmed best (:mod:`egrl.confirm`), once the run has read it again
        self.confirmation: confirm.Confirmation | None = None
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

    def _refuse(self, cfg: TrainConfig) -> None:
        """Refuse what this agent cannot do: ``init_from`` without GNN policies, a screen
        for an agent that does not screen, a critic screen without a critic (the command
        line's checks name the agents that can: :mod:`egrl.cli.checks`)."""
        if cfg.init_from and not self.accepts_init_from:
            raise ValueError(
                f"init_from={cfg.init_from} is invalid: agent {cfg.agent.name!r} has no GNN "
                "policy to start from it (egrl, ea and pg have)"
            )
        screen, agent = cfg.screen.name, cfg.agent.name
        search = resolve_search(cfg.screen.search)  # auto, the agent's own: never refused
        if screen == "none" and search:
            why = f"screen.search={search} is invalid: screen=none has no model to search"
        elif screen != "none" and not self.screens:
            why = f"screen={screen} is invalid: agent {agent!r} does not screen its proposals"
        elif screen in CRITIC_MODELS and not self.has_critic(asdict(cfg.agent)):
            why = f"screen={screen} is invalid: agent {agent!r} has no critic"
        elif screen != "none" and search and not self.searches_model(asdict(cfg.agent)):
            why = f"screen.search={search} is invalid: agent {agent!r} cannot search the model"
        else:
            return
        raise ConfigError([why])

    @staticmethod
    def _reserve(env: Env, cfg: TrainConfig) -> int:
        """Board runs the confirmation of a noisy target's best needs (0 on a deterministic
        one); a budget that leaves the search less than one map is refused."""
        if env.deterministic:
            return 0
        c = cfg.confirm
        reserve = confirm.reserved_readings(c.top, c.repeats, env.readings_per_map)
        if reserve and cfg.budget - reserve < env.readings_per_map:
            raise ConfigError(
                [
                    f"confirm.top={c.top} is invalid: with confirm.repeats={c.repeats} the "
                    f"confirmation reserves {reserve} of budget={cfg.budget} board runs and "
                    "leaves the search none (raise the budget or set confirm.top=0)"
                ]
            )
        return reserve

    @classmethod
    def has_critic(cls, agent: dict) -> bool:
        """Whether the agent its ``agent`` section configures has a critic for ``screen=critic``."""
        return False

    @classmethod
    def searches_model(cls, agent: dict) -> bool:
        """Whether the agent its ``agent`` section configures can search the screen's model
        (``screen.search``): :attr:`model_search` unless the agent says otherwise."""
        return cls.model_search

    @property
    def search_budget(self) -> int:
        """Maps the search may pay for: the budget's board runs less those a noisy target's
        confirmation keeps, over the board runs one map costs (``cfg.budget`` on a
        deterministic target that reads a map once)."""
        return max(1, self.ledger.budget // self.env.readings_per_map)

    def read_rewards(self, maps: np.ndarray, source: str) -> np.ndarray:
        """One more paid reading of maps ``[B, N, H]`` that a noisy target already answered,
        past the measure cache (:meth:`egrl.ledger.Ledger.read_again`): how an agent checks a
        map it keeps on a lucky reading. Only the first ones the budget pays for are read.

        Returns:
            float64 ``[B']`` (``B' <= B``): each reading's reward, NaN where the chip did
            not run the map.
        """
        maps = np.asarray(maps, dtype=np.int64)[: max(self.ledger.remaining, 0)]
        if not len(maps):
            return np.zeros(0)
        latency_s, ran, rectified = self.ledger.read_again(maps, source)
        ev = self.env.score(rectified, ran, np.zeros(len(maps)), latency_s)
        return np.where(ran, ev.reward, np.nan)

    @property
    def search_generations(self) -> int:
        """Steps of the agent's operators on the screen's model between paid batches:
        ``screen.search``, or with ``auto`` the agent's :attr:`default_search` where it can
        search the model (0 without a screen: nothing to search)."""
        screen = self.cfg.screen
        can = screen.name != "none" and self.searches_model(asdict(self.cfg.agent))
        return resolve_search(screen.search, self.default_search if can else 0)

    @property
    def searching(self) -> bool:
        """This generation searches the screen's model (``screen.search``, a model fitted)."""
        return bool(self.search_generations) and self.screen is not None and self.screen.active

    @property
    def name(self) -> str:
        return self.cfg.agent.name

    @property
    def columns(self) -> tuple[str, ...]:
        """metrics.csv's columns; a screening run adds :data:`SCREEN_COLUMNS` and
        :data:`SCREEN_TIMING_COLUMN`."""
        confirmed = confirm.COLUMNS if self.confirm_reserve else ()
        # board runs are not maps: a chip read R times, a confirmation, a kept map read again
        if self.confirm_reserve or self.ledger.readings > 1 or self.ledger.cache.reread:
            confirmed = (PAID_MAPS_COLUMN, *confirmed)
        if self.screen is None:
            return METRIC_COLUMNS + self.extra_columns + confirmed + TIMING_COLUMNS[1:]
        screening = SCREEN_COLUMNS + TIMING_COLUMNS[1:] + (SCREEN_TIMING_COLUMN,)
        return METRIC_COLUMNS + self.extra_columns + confirmed + screening

    # ------------------------------------------------------- measuring (ledger)
    # ------------------------------------------------------------- the search
    def step(self) -> dict:
        """One generation: propose maps, :meth:`evaluate` them, learn. Returns extra metrics."""
        raise NotImplementedError

    def elapsed_s(self) -> float:
        """The run's wall clock: :attr:`wall_s` and the generation under way."""
        if self._generation_start is None:
            return self.wall_s
        return self.wall_s + time.perf_counter() - self._generation_start

    def _generation(self) -> dict:
        start = self._generation_start = time.perf_counter()
        self.ledger.batch = []
        row: dict = dict.fromkeys(self.columns, float("nan"))
        if self.screen is not None:
            self.timer.measure(SCREEN_PHASE, self.screen.refit)
        row.update(self.step())
        if self.screen is not None:
            row.update(self.timer.measure(SCREEN_PHASE, self.screen.take_metrics))
        self.generation += 1
        self.wall_s += time.perf_counter() - start
        self._generation_start = None
        row.update(self.ledger.metrics(), generation=self.generation, wall_s=self.wall_s)
        row.update({f"t_{k}": v for k, v in self.timer.totals.items()})
        self.rows.append(row)
        return row

    def run(
        self,
        on_generation: Callable[[dict], None] | None = None,
        callbacks: Sequence[Callback] = (),
    ) -> Best:
        """Search until the budget is spent; returns the best valid map.

        A search that pays nothing in ``cfg.max_stale_generations`` generations in a row,
        or whose wall time (:attr:`wall_s`, across resumes) passes ``cfg.time_limit_s``,
        stops early; :attr:`stop_reason` and ``best_mapping.json`` say why. Callbacks: the
        :meth:`default_callbacks`, then ``callbacks`` (loggers, a user's own), then
        ``on_generation`` (called with each metrics row). A generation's policy snapshot
        and checkpoint are written and announced before its ``on_generation_end``.
        """
        extra = [EachGeneration(on_generation)] if on_generation is not None else []
        self.callbacks = CallbackList([*self.default_callbacks(), *callbacks, *extra])
        self.callbacks.on_run_start(self)
        stale = 0
        self._check_time_limit()
        try:
            while not self.done and self.stop_reason is None:
                before = self.iterations
                if self.cfg.time_limit_s is not None:
                    left = self.cfg.time_limit_s - self.wall_s
                    self.time_limit_deadline = time.perf_counter() + left
                row = self._generation()
                stale = stale + 1 if self.iterations == before else 0
                if stale >= self.cfg.max_stale_generations:
                    self._stop_stale(stale)
                self._check_time_limit()
                self._save_due()
                self.callbacks.on_generation_end(self, row)
            if self.confirm_reserve and self.confirmation is None:
                self._confirm_best()
        except BaseException as exc:
            self.callbacks.on_run_end(self, exc)
            raise
        self.callbacks.on_run_end(self)
        return self.best

    def _confirm_best(self) -> None:
        """Read the best maps of a noisy target again (:mod:`egrl.confirm`) from the budget
        reserved for it: one more metrics row (its ``confirmed_*`` columns filled) and a
        checkpoint. Fewer candidates than ``confirm.top`` get more rounds each."""
        rows = self.record.in_order()  # oldest first, so a map's last row is its latest answer
        maps = self.record.actions[rows].astype(np.int64)
        speedups = np.sqrt(np.maximum(self.record.rewards[rows].astype(np.float64), 0.0))
        last = confirm.latest(maps)  # each map's mean so far, not its luckiest reading
        chosen = last[confirm.top_maps(maps[last], speedups[last], self.cfg.confirm.top)]
        if not len(chosen):
            log.warning("confirm: no map earned a speedup; nothing to read again")
            return
        start = self._generation_start = time.perf_counter()
        self.ledger.batch = []
        self.ledger.budget += self.confirm_reserve
        readings = self.env.readings_per_map
        rounds = self.confirm_reserve // ((len(chosen) + 1) * readings)
        self.confirmation = found = confirm.confirm(
            self.ledger.read_again,
            self.env.baseline_mapping,
            maps[chosen],
            speedups[chosen],
            rounds,
            readings,
        )
        best = found.best
        log.info(
            "confirm: best speedup %.4f [%.4f, %.4f] (%d%%) from %d readings of %d maps beside "
            "the compiler's; its search reading said %.4f; noise estimate %.2f%%",
            best.speedup,
            best.low,
            best.high,
            round(100 * confirm.LEVEL),
            rounds,
            len(chosen),
            best.search_speedup,
            100 * found.noise_cv,
        )
        self.generation += 1
        self.wall_s += time.perf_counter() - start
        self._generation_start = None
        row: dict = dict.fromkeys(self.columns, float("nan"))
        row.update(self.ledger.metrics(), generation=self.generation, wall_s=self.wall_s)
        row.update(found.metrics())
        row.update({f"t_{k}": v for k, v in self.timer.totals.items()})
        self.rows.append(row)
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
        last = self.done or self.stop_reason is not None
        if self.snapshots and (self.generation % max(1, self.cfg.snapshot_every) == 0 or self.done):
            self.callbacks.on_snapshot(self, self.save_policy_snapshot())
        if self.generation % max(1, self.cfg.checkpoint_every) == 0 or last:
            self.callbacks.on_checkpoint(self, self.save_checkpoint())

    def _stop_stale(self, generations: int) -> None:
        """Record and log that the search stopped proposing new maps."""
        self.stop_reason = (
            f"no new map in {generations} generations (max_stale_generations="
            f"{self.cfg.max_stale_generations}): stopped after {self.iterations} of "
            f"{self.cfg.budget} paid measurements and {self.proposals} proposals"
        )
        log.warning("agent %r on %s: %s", self.name, self.env.workload.name, self.stop_reason)

    def _check_time_limit(self) -> None:
        """Stop if the run's wall time has reached ``cfg.time_limit_s``."""
        limit = self.cfg.time_limit_s
        if limit is not None and self.stop_reason is None and self.wall_s >= limit:
            self.stop_time_limit()

    def stop_time_limit(self) -> None:
        """Record and log that the run stopped on ``cfg.time_limit_s`` (a finished run:
        ``stopped_early`` in ``best_mapping.json`` starts with :data:`TIME_LIMIT_REACHED`)."""
        self.stop_reason = (
            f"{TIME_LIMIT_REACHED} (time_limit_s={self.cfg.time_limit_s:g}): stopped after "
            f"{self.iterations} of {self.cfg.budget} paid measurements and "
            f"{self.proposals} proposals"
        )
        log.info("agent %r on %s: %s", self.name, self.env.workload.name, self.stop_reason)

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
        if self.screen is not None:
            state["screen"] = self.screen.state_dict()
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
        if self.screen is not None:
            self.screen.load_state_dict(state.get("screen"))
        if state.get("confirmation") is not None:
            # a run resumed after its confirmation is done, unless its budget has room
            # for more search and another confirmation (then it searches on)
            room = self.cfg.budget - self.iterations - self.confirm_reserve
            if room < self.env.readings_per_map:
                self.confirmation = confirm.Confirmation.from_state(state["confirmation"])
                self.ledger.budget = self.iterations

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
