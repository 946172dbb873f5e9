"""What every agent shares: the budget, the record of evaluations, outputs and checkpoints.

An agent searches for a good map of one environment under a budget of paid hardware
measurements. Subclasses implement :meth:`SearchAgent.step` (one generation / iteration
batch, calling :meth:`SearchAgent.evaluate` for every map they want measured) and the
checkpoint hooks :meth:`SearchAgent.agent_state` / :meth:`SearchAgent.load_agent_state`.
The base class answers maps measured before from a :class:`~egrl.measure_cache.MeasureCache`
on a deterministic target, counts paid measurements (``iterations``, never past the
budget) and proposals (every map answered, paid or not), records every answered map in a
:class:`~egrl.replay.ReplayBuffer`, keeps the best valid map, times the phases, stops a
search that has paid nothing for ``max_stale_generations`` generations, and writes the run
directory: ``metrics.csv``, ``best_mapping.json``, ``speedup.png``, ``checkpoints/``, and
with ``record_evaluations`` every answered map in ``evaluations.csv``
(:mod:`egrl.evaluations`).

Maps are measured by a runtime (:mod:`egrl.runtime`): in this process by default, or by
a pool of Ray actors (:meth:`SearchAgent.use_runtime`). :meth:`SearchAgent.evaluate` waits
for its answer; :meth:`SearchAgent.submit` and :meth:`SearchAgent.collect` let an agent
keep working while maps are in flight, with the same bookkeeping.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from egrl.callbacks import (
    Callback,
    CallbackList,
    Checkpointer,
    EachGeneration,
    MetricsFile,
    ProgressBar,
)
from egrl.checkpoint import prune_checkpoints, save_state
from egrl.config import TrainConfig
from egrl.env import Env, Evaluation
from egrl.evaluations import EvaluationLog
from egrl.measure_cache import MeasureCache
from egrl.replay import ReplayBuffer
from egrl.rundir import RunDir, append_metrics_row  # noqa: F401 (re-exported)
from egrl.runtime import LocalRuntime, Runtime
from egrl.runtime.dispatch import Answered, Dispatcher, Ticket
from egrl.screening.models import CRITIC_MODELS
from egrl.screening.screen import SCREEN_COLUMNS, Screen, make_screen
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
PHASES = ("inference", "evaluation", "learner", "evolution")
#: how :attr:`SearchAgent.stop_reason` of a run stopped by ``time_limit_s`` begins
TIME_LIMIT_REACHED = "time limit reached"
TIMING_COLUMNS = ("wall_s",) + tuple(f"t_{p}" for p in PHASES)
#: the phase of a screening run (``screen`` other than ``none``) spent fitting its model
#: and choosing candidates; its column comes after the other timings
SCREEN_PHASE = "screening"
SCREEN_TIMING_COLUMN = f"t_{SCREEN_PHASE}"


@dataclass
class Best:
    """The best map the chip ran so far (a valid proposal, or under ``reward=repaired`` the
    compiler's repair of any proposal)."""

    reward: float = -np.inf
    speedup: float = 0.0
    latency_s: float = float("nan")
    iteration: int = 0
    mapping: np.ndarray | None = None

    def update(self, maps: np.ndarray, ev: Evaluation, iterations: np.ndarray) -> None:
        """Keep the best map of a batch that earned a speedup (ties keep the earlier one).

        ``iterations`` int ``[B]``: the paid measurements made when each map was answered.

        The kept map is the one the chip ran, ``ev.rectified``: the proposal itself when it
        was valid, its repair when the environment scores repaired maps.
        """
        ran = np.flatnonzero(ev.speedup > 0)
        if len(ran) == 0:
            return
        i = ran[np.argmax(ev.speedup[ran])]
        if ev.speedup[i] > self.speedup:
            self.reward = float(ev.reward[i])
            self.speedup = float(ev.speedup[i])
            self.latency_s = float(ev.latency_s[i])
            self.iteration = int(iterations[i])
            self.mapping = np.asarray(ev.rectified[i], dtype=np.int64).copy()

    def state_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Timer:
    """Cumulative wall time per phase of the search loop."""

    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def measure(self, phase: str, fn: Callable, *args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.totals[phase] += time.perf_counter() - start
        return out


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

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        if cfg.init_from and not self.accepts_init_from:
            raise ValueError(
                f"init_from={cfg.init_from} is invalid: agent {cfg.agent.name!r} has no GNN "
                "policy to start from it (egrl, ea and pg have)"
            )
        if cfg.screen.name != "none" and not self.screens:
            raise ConfigError([screen_refusal(cfg.screen.name, cfg.agent.name)])
        if cfg.screen.name in CRITIC_MODELS and not self.has_critic(asdict(cfg.agent)):
            raise ConfigError([critic_refusal(cfg.screen.name, cfg.agent.name)])
        self.env = env
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.rng = np.random.default_rng(cfg.seed)
        self.generator = torch.Generator(device="cpu").manual_seed(cfg.seed)
        self.buffer = replay_buffer(env, cfg.learner.buffer_size)
        self.cache = measure_cache(env, cfg.cache_size)
        #: the learned screen (``cfg.screen``), None without screening: see :meth:`choose`
        self.screen: Screen | None = make_screen(cfg.screen, env, self.cache, cfg.seed)
        self.best = Best()
        self.iterations = 0
        self.proposals = 0
        self.failed_maps = 0
        self.use_runtime(LocalRuntime(env.measure))
        self.stop_reason: str | None = None
        #: ``time.perf_counter()`` at which the generation under way reaches
        #: ``cfg.time_limit_s`` (None: no limit); game agents stop inside a game there
        self.time_limit_deadline: float | None = None
        self.generation = 0
        self.wall_s = 0.0
        self._generation_start: float | None = None
        self.evaluation_log = EvaluationLog(env, self.run_dir if cfg.record_evaluations else None)
        self.timer = Timer()
        if self.screen is not None:
            self.timer.totals[SCREEN_PHASE] = 0.0
        self.rows: list[dict] = []
        self._batch: list[Evaluation] = []
        #: the callbacks of the run under way (:meth:`run`); none outside a run
        self.callbacks = CallbackList()

    @classmethod
    def has_critic(cls, agent: Mapping[str, Any]) -> bool:
        """Whether the agent its ``agent`` section configures (a mapping of
        :class:`~egrl.config.AgentConfig`'s keys) trains a critic that ranks candidates
        for ``screen=critic``; it then attaches it to its screen
        (:meth:`egrl.screening.screen.Screen.attach_critic`)."""
        return False

    # ----------------------------------------------------------------- budget
    @property
    def name(self) -> str:
        return self.cfg.agent.name

    @property
    def columns(self) -> tuple[str, ...]:
        """metrics.csv's columns; a screening run adds :data:`SCREEN_COLUMNS` and
        :data:`SCREEN_TIMING_COLUMN`."""
        if self.screen is None:
            return METRIC_COLUMNS + self.extra_columns + TIMING_COLUMNS[1:]
        return (
            METRIC_COLUMNS
            + self.extra_columns
            + SCREEN_COLUMNS
            + TIMING_COLUMNS[1:]
            + (SCREEN_TIMING_COLUMN,)
        )

    @property
    def pool(self) -> int:
        """Candidates an agent proposes per map it wants measured (``screen.pool``; 1
        without screening)."""
        return 1 if self.screen is None else int(self.cfg.screen.pool)

    def select(
        self, candidates, keep: int, groups=None, probs=None, free: bool = False
    ) -> np.ndarray:
        """:meth:`egrl.screening.screen.Screen.select`, timed; without a screen the first
        ``keep`` candidates."""
        if self.screen is None:
            return np.arange(min(int(keep), len(candidates)))
        return self.timer.measure(
            SCREEN_PHASE, self.screen.select, candidates, keep, groups, probs, free
        )

    def choose(self, pools, probs=None) -> np.ndarray:
        """:meth:`egrl.screening.screen.Screen.choose`, timed: one candidate of each group
        ``[G, K, N, H]``, int64 ``[G]``; without a screen candidate 0 of each."""
        if self.screen is None:
            return np.zeros(len(pools), dtype=np.int64)
        return self.timer.measure(SCREEN_PHASE, self.screen.choose, pools, probs)

    @property
    def remaining(self) -> int:
        """Paid measurements the budget still allows, maps in flight counted as paid."""
        return self.cfg.budget - self.iterations - self.dispatcher.in_flight

    @property
    def done(self) -> bool:
        """The budget is spent (every paid map answered)."""
        return self.cfg.budget - self.iterations <= 0

    def use_runtime(self, runtime: Runtime) -> None:
        """Measure through ``runtime`` from now on (nothing may be in flight). The caller
        owns it and closes it; the agent's default is a :class:`LocalRuntime`."""
        if getattr(self, "dispatcher", None) is not None and self.dispatcher.open:
            raise RuntimeError("cannot change the runtime while maps are in flight")
        self.runtime = runtime
        self.dispatcher = Dispatcher(self.cache, runtime)
        self._answered: dict[int, tuple[Ticket, Evaluation]] = {}

    def evaluate(self, maps, source: str, probs=None) -> Evaluation:
        """Evaluate, record and count a batch of maps ``[B, N, H]``; waits for the answer.

        ``probs`` (``None`` or float ``[B, N, H, C]``, the policy's probabilities the maps
        were drawn from) goes to :meth:`egrl.env.Env.measure`, which hands it to targets
        that want it. On a deterministic target a map measured before (or earlier in the
        batch, or still in flight) is answered from :attr:`cache` and not paid. New maps
        are paid until the budget is spent: the returned evaluation covers the longest
        prefix of the batch that could be answered, ``B`` maps unless the budget ran out
        (then it stops before the first new map past the budget). Every answered map goes
        to the replay buffer. A map the runtime could not measure (:mod:`egrl.runtime.jobs`)
        is paid, answered as an invalid map and not cached.
        """
        ticket = self.submit(maps, source, probs)
        while ticket.id not in self._answered:
            self.timer.measure("evaluation", self._collect, True, True)
        return self._answered.pop(ticket.id)[1]

    def submit(self, maps, source: str, probs=None) -> Ticket:
        """Send a batch of maps ``[B, N, H]`` to the runtime without waiting (arguments as
        :meth:`evaluate`); ``len(ticket)`` maps will be answered. Its evaluation comes from
        :meth:`collect`, recorded (iterations, replay, best map) when it is answered."""
        batch = self.env.check_maps(maps)
        if probs is not None:
            probs = self.env.check_probs(probs, len(batch))
        return self.timer.measure(
            "evaluation", self.dispatcher.submit, batch, probs, self.remaining, source
        )

    def collect(
        self, block: bool = False, ordered: bool = False
    ) -> list[tuple[Ticket, Evaluation]]:
        """The submissions answered since the last call, recorded, in the order they were
        answered; with ``block``, wait until there is at least one (unless none is open).
        With ``ordered``, submissions are recorded in the order they were submitted (a
        submission answered early waits for the earlier ones), which makes the records of
        a generation independent of the order a remote runtime answers in."""
        if block and not self._answered and self.dispatcher.open:
            self.timer.measure("evaluation", self._collect, True, ordered)
        else:
            self._collect(False, ordered)
        out = list(self._answered.values())
        self._answered.clear()
        return out

    def _collect(self, block: bool, ordered: bool = False) -> None:
        for answered in self.dispatcher.collect(block, ordered):
            self._answered[answered.ticket.id] = (answered.ticket, self._record(answered))

    def _record(self, answered: Answered) -> Evaluation:
        """Count, buffer and keep the best of one answered submission; its paid maps
        that were measured (not failed) go to the screen."""
        ticket, m = answered.ticket, answered.measurement
        ev = self.env.score(m.rectified, m.valid, m.reassigned_ratio, m.latency_s)
        self.buffer.add(ticket.maps, ev.reward, ticket.source)
        # the screen learns from measurements: a failed map is paid, but its reward is
        # the penalty for a map the chip did not run, not what the chip answered
        measured = answered.paid & ~answered.failed
        if self.screen is not None and measured.any():
            self.screen.observe(ticket.maps[measured], ev.reward[measured])
        self.best.update(ticket.maps, ev, self.iterations + np.cumsum(answered.paid))
        self.evaluation_log.add(
            ticket.source,
            ev,
            answered.paid,
            (self.iterations, self.proposals),
            self.generation + 1,
            self.elapsed_s(),
        )
        self.iterations += int(answered.paid.sum())
        self.proposals += len(ev)
        self.failed_maps += int(answered.failed.sum())
        self._batch.append(ev)
        return ev

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
        self._batch = []
        row: dict = dict.fromkeys(self.columns, float("nan"))
        if self.screen is not None:
            self.timer.measure(SCREEN_PHASE, self.screen.refit)
        row.update(self.step())
        if self.screen is not None:
            row.update(self.timer.measure(SCREEN_PHASE, self.screen.take_metrics))
        self.generation += 1
        self.wall_s += time.perf_counter() - start
        self._generation_start = None
        if self._batch:
            rewards = np.concatenate([ev.reward for ev in self._batch])
            valid = np.concatenate([ev.valid for ev in self._batch])
            if len(rewards):
                row.update(
                    batch_best_reward=float(rewards.max()),
                    batch_mean_reward=float(rewards.mean()),
                    batch_valid_fraction=float(valid.mean()),
                )
        row.update(
            generation=self.generation,
            iterations=self.iterations,
            proposals=self.proposals,
            wall_s=self.wall_s,
            best_reward=self.best.reward,
            best_speedup=self.best.speedup,
            best_latency_s=self.best.latency_s,
            **{f"t_{k}": v for k, v in self.timer.totals.items()},
        )
        self.rows.append(row)
        return row

    def run(
        self,
        on_generation: Callable[[dict], None] | None = None,
        callbacks: Sequence[Callback] = (),
    ) -> Best:
        """Search until the budget is spent; returns the best valid map.

        A search that pays no measurement in ``cfg.max_stale_generations`` generations in
        a row (it proposes only maps measured before, or nothing) stops early with a
        warning; :attr:`stop_reason` and ``best_mapping.json`` say why. So does a run whose
        wall time (:attr:`wall_s`, across resumes) has passed ``cfg.time_limit_s``, after
        the generation under way (a resumed one already past it runs none).

        The progress bar, ``metrics.csv``, policy snapshots and checkpoints are the
        :meth:`default_callbacks`; ``callbacks`` (loggers, a user's own:
        :mod:`egrl.callbacks`) come after them, then ``on_generation`` (called with each
        generation's metrics row). They are :attr:`callbacks` while the run lasts.
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
                self.callbacks.on_generation_end(self, row)
            if self.run_dir is not None:
                self.write_outputs()
        except BaseException as exc:
            self.callbacks.on_run_end(self, exc)
            raise
        self.callbacks.on_run_end(self)
        return self.best

    def default_callbacks(self) -> list[Callback]:
        """The run's own callbacks: the progress bar, then with a run directory
        ``metrics.csv`` and the checkpoints (:mod:`egrl.callbacks`)."""
        out: list[Callback] = [ProgressBar(self.cfg.progress)]
        if self.run_dir is not None:
            out += [MetricsFile(), Checkpointer(self.cfg.checkpoint_every)]
        return out

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

    # ---------------------------------------------------------------- outputs
    def _append_metrics(self, row: dict) -> None:
        RunDir(self.run_dir).append_metrics(self.columns, row)

    def write_outputs(self) -> None:
        """The best map as JSON keyed by unit name, and the speedup-vs-iterations plot."""
        from egrl.plots import plot_speedup_curve

        best = {
            "agent": self.name,
            "workload": self.env.workload.name,
            "speedup": self.best.speedup,
            "latency_s": self.best.latency_s,
            "reward": self.best.reward,
            "iteration": self.best.iteration,
            "iterations": self.iterations,
            "proposals": self.proposals,
            "failed_maps": self.failed_maps,
            "stopped_early": self.stop_reason,
            "baseline_latency_s": self.env.baseline_latency_s,
            "mapping": None
            if self.best.mapping is None
            else self.env.mapping_to_dict(self.best.mapping),
            **self.evaluation_log.best_record(),
        }
        files = RunDir(self.run_dir)
        files.write_best_map(best)
        plot_speedup_curve(
            self.rows,
            files.speedup_plot,
            title=f"{self.name} on {self.env.workload.name}",
        )

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        """The subclass's own state (tensors, arrays and plain data)."""
        return {}

    def load_agent_state(self, state: dict) -> None:
        """Inverse of :meth:`agent_state`."""

    def state_dict(self) -> dict:
        """Everything needed to continue the run bit for bit."""
        state = {
            "iterations": self.iterations,
            "proposals": self.proposals,
            "failed_maps": self.failed_maps,
            "generation": self.generation,
            "wall_s": self.wall_s,
            "timer": dict(self.timer.totals),
            "rng": self.rng.bit_generator.state,
            "generator": self.generator.get_state(),
            "best": self.best.state_dict(),
            "buffer": self.buffer.state_dict(),
            "cache": self.cache.state_dict(),
            "rows": self.rows,
            "agent": self.agent_state(),
        }
        if self.evaluation_log.enabled:
            state["evaluations"] = self.evaluation_log.state_dict()
        if self.screen is not None:
            state["screen"] = self.screen.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.iterations = int(state["iterations"])
        self.proposals = int(state.get("proposals", self.iterations))
        self.failed_maps = int(state.get("failed_maps", 0))
        self.generation = int(state["generation"])
        self.wall_s = float(state["wall_s"])
        self.timer.totals = {**self.timer.totals, **dict(state["timer"])}
        self.rng.bit_generator.state = state["rng"]
        self.generator.set_state(state["generator"])
        self.best = Best(**state["best"])
        self.buffer.load_state_dict(state["buffer"])
        self.cache.load_state_dict(state.get("cache"))
        self.rows = list(state["rows"])
        self.load_agent_state(state["agent"])
        self.evaluation_log.load_state_dict(state.get("evaluations"))
        if self.screen is not None:
            self.screen.load_state_dict(state.get("screen"))

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/gen_XXXXXX`` atomically and prune old ones."""
        files = RunDir(self.run_dir)
        path = save_state(self.state_dict(), files.checkpoint(self.generation))
        prune_checkpoints(files.checkpoints, self.cfg.keep_checkpoints, path)
        return path

    def resume(self) -> bool:
        """Continue from the newest intact checkpoint in ``run_dir``; False if there is none.

        Damaged checkpoints are skipped with a warning (:func:`egrl.checkpoint.load_latest`).

        Raises:
            egrl.checkpoint.CheckpointError: checkpoints exist but all are damaged.
        """
        files = RunDir(self.run_dir)
        found = files.load_latest_checkpoint()
        if found is None:
            return False
        ckpt, state = found
        self.load_state_dict(state)
        files.clear_metrics()
        for row in self.rows:
            self._append_metrics(row)
        log.info(
            "resumed %s from %s at generation %d (%d iterations)",
            self.run_dir,
            ckpt.name,
            self.generation,
            self.iterations,
        )
        return True


def screen_refusal(screen: str, agent: str) -> str:
    """The line that refuses ``screen`` for an agent that does not screen its proposals."""
    from egrl.agents import agent_class, names

    screening = [n for n in names() if agent_class(n).screens]
    return (
        f"screen={screen} is invalid: agent {agent!r} does not screen its proposals "
        f"(agents that do: {', '.join(screening)})"
    )


def critic_agents() -> list[str]:
    """The agents that have a critic as their config (``configs/agent/<name>.yaml``) sets
    them up: those ``screen=critic`` is for."""
    from omegaconf import OmegaConf

    from egrl.agents import agent_class, names
    from egrl.cli.overrides import group_path

    out = []
    for name in names():
        path = group_path("agent", name)
        section = OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else {}
        if agent_class(name).has_critic(section):
            out.append(name)
    return out


def critic_refusal(screen: str, agent: str) -> str:
    """The line that refuses a critic screen (``screen=critic``) for an agent without a
    critic (:meth:`SearchAgent.has_critic`): the ones with a critic as configured by
    default are named (an agent among them was configured without it)."""
    with_one = critic_agents()
    how = " as configured" if agent in with_one else ""
    return (
        f"screen={screen} is invalid: agent {agent!r} has no critic{how} "
        f"(agents with one: {', '.join(with_one)})"
    )


def replay_buffer(env: Env, capacity: int) -> ReplayBuffer:
    """An empty replay buffer of ``capacity`` (at least 1) transitions for ``env``'s maps."""
    return ReplayBuffer(max(int(capacity), 1), env.num_units, env.num_heads)


def measure_cache(env: Env, capacity: int) -> MeasureCache:
    """An empty cache of ``capacity`` maps for ``env`` (disabled on a non-deterministic target)."""
    return MeasureCache(capacity, env.max_choices, enabled=env.deterministic)


def to_numpy_maps(maps) -> np.ndarray:
    """Maps from a policy (tensor or array) as int64 numpy."""
    if isinstance(maps, torch.Tensor):
        return maps.detach().cpu().numpy().astype(np.int64)
    return np.asarray(maps, dtype=np.int64)
