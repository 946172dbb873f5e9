"""The measuring ledger of a run: what is sent to the chip, what it answered, what it cost.

A :class:`Ledger` stands between an agent and the hardware. :meth:`Ledger.submit` sends a
batch of maps ``[B, N, H]`` through the measure cache and the budget
(:class:`~egrl.runtime.dispatch.Dispatcher`) to a runtime; :meth:`Ledger.collect` takes the
answers back and books each one:

- paid measurements (``iterations``, never past the budget), proposals (every map
  answered, paid or not) and failed maps are counted; a paid measurement is a board run,
  so a map a target reads ``R`` times (``Env.readings_per_map``: an external chip with
  ``repeats: R``) costs ``R`` of the budget;
- the :attr:`Ledger.archive` keeps every answered map with its reward and source, read
  back from checkpoints by reports and by ``screen.init_from`` (:func:`archive_state`);
- :attr:`Ledger.best` keeps the best map the chip ran;
- the learned screen, if any, learns from the paid maps that were measured;
- ``evaluations.csv`` gets every answered map (with ``record_evaluations``).

:meth:`Ledger.check` asks the target's compiler alone which maps it accepts (no board run,
never paid): counted in :attr:`Ledger.checks` and timed in its own phase.

:meth:`Ledger.evaluate` is submit-and-wait. The ledger knows nothing of generations or
policies: the clock it stamps the archive with is given to it. What an agent keeps of the
answers (EGRL's replay buffer) it takes from what :meth:`Ledger.collect` returns. The
counts a budget is spent on (:class:`Tally`) may be shared: a pre-training run gives each
workload a ledger of its own, all paid from one budget.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from egrl.env import Env, Evaluation
from egrl.evaluations import EvaluationLog
from egrl.measure_cache import MeasureCache
from egrl.replay import ReplayBuffer
from egrl.runtime import LocalRuntime, Runtime
from egrl.runtime.dispatch import Answered, Dispatcher, Ticket
from hwmodels.base import Check

log = logging.getLogger(__name__)

#: the phases of a generation whose wall time metrics.csv reports (``t_<phase>``)
PHASES = ("inference", "evaluation", "learner", "evolution")
#: the phase of a screening run spent fitting its model and choosing candidates; its
#: column comes after the other timings
SCREEN_PHASE = "screening"
#: the phase spent asking the target's compiler alone (:meth:`Ledger.check`)
CHECK_PHASE = "check"


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
    """Cumulative wall time per phase of the search loop: ``with timer("learner"): ...``."""

    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        """Add the wall time of the ``with`` block to ``phase``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.totals[phase] += time.perf_counter() - start


@dataclass
class Tally:
    """What a run's budget is spent on: board runs allowed (``budget``) and made
    (``iterations``), distinct maps paid for, maps answered (paid or not) and paid maps the
    runtime could not measure."""

    budget: int
    iterations: int = 0
    paid_maps: int = 0
    proposals: int = 0
    failed_maps: int = 0


def make_buffer(env: Env, capacity: int) -> ReplayBuffer:
    """An empty buffer of ``capacity`` (at least 1) answered maps of ``env`` (the run's
    archive, EGRL's replay buffer); once full, each new map overwrites the oldest."""
    return ReplayBuffer(max(int(capacity), 1), env.num_units, env.num_heads)


def measure_cache(env: Env, capacity: int, reread: int = 0) -> MeasureCache:
    """A cache of ``capacity`` maps for ``env`` that knows the compiler's map: binding the
    target measured it, so a run that proposes it is answered without paying again (a
    target that repairs from the policy's probabilities keys maps with them, and the
    compiler's map has none). On a noisy target (``env.deterministic`` false) a map
    proposed again is answered from the mean of its readings and read again as ``reread``
    says (:mod:`egrl.measure_cache`; ignored on a deterministic target); a run reads its
    best maps again at its end (:mod:`egrl.confirm`)."""
    cache = MeasureCache(capacity, env.max_choices, reread=0 if env.deterministic else reread)
    base = getattr(env, "baseline_measurement", None)
    if base is not None and not env.wants_probabilities:
        (key,) = cache.keys(env.baseline_mapping[None])
        cache.remember(
            key, base.rectified[0], base.valid[0], base.reassigned_ratio[0], base.latency_s[0]
        )
    return cache


def _tallied(name: str, doc: str) -> property:
    """A count of the ledger's that its :class:`Tally` holds."""
    return property(
        lambda self: getattr(self.tally, name),
        lambda self, v: setattr(self.tally, name, v),
        doc=doc,
    )


def archive_state(state: dict) -> dict:
    """The archive of answered maps in a checkpoint's state (``{}`` if it has none).

    Checkpoints written before the archive had its name kept it as ``"record"``, and
    before it had a key of its own, as the agent's replay buffer (``"buffer"``)."""
    return state.get("archive") or state.get("record") or state.get("buffer") or {}


class Ledger:
    """Measures, counts and archives the maps of one run (see the module docstring).

    Args:
        env: the environment its maps are checked, measured and scored on.
        budget: paid measurements allowed.
        cache: answers maps measured before without paying (disabled on a noisy target).
        record_size: most answered maps the archive holds (``cfg.record_size``).
        timer: where the time spent waiting for answers goes (phase ``"evaluation"``).
        evaluation_log: ``evaluations.csv`` (a disabled log without ``record_evaluations``).
        stamp: the generation an answer belongs to and the run's wall clock now.
        screen: the learned screen, told of every measured paid map (None: no screening).
        pool: candidates an agent proposes per map it wants measured (``screen.pool``).
        tally: the counts to spend the budget from, another ledger's to share its budget
            (None: a tally of its own, of ``budget``).
    """

    budget = _tallied("budget", "Board runs the search may pay for.")
    iterations = _tallied("iterations", "Board runs paid so far (never past the budget).")
    paid_maps = _tallied("paid_maps", "Distinct maps paid for (without re-readings).")
    proposals = _tallied("proposals", "Maps answered so far, paid or not.")
    failed_maps = _tallied("failed_maps", "Paid maps the runtime could not measure.")

    def __init__(
        self,
        env: Env,
        budget: int,
        cache: MeasureCache,
        record_size: int,
        timer: Timer,
        evaluation_log: EvaluationLog,
        stamp: Callable[[], tuple[int, float]],
        screen=None,
        pool: int = 1,
        tally: Tally | None = None,
    ) -> None:
        self.env = env
        self.tally = Tally(int(budget)) if tally is None else tally
        self.cache = cache
        self.archive = make_buffer(env, record_size)
        self.timer = timer
        self.evaluation_log = evaluation_log
        self.stamp = stamp
        self.screen = screen
        #: candidates an agent proposes per map it wants measured (1 without a screen)
        self.pool = 1 if screen is None else int(pool)
        if screen is not None:
            timer.totals.setdefault(SCREEN_PHASE, 0.0)
        self.best = Best()
        #: board runs one paid map costs (the budget and ``iterations`` count board runs)
        self.readings_per_map = env.readings_per_map
        #: evaluations answered since the agent emptied it (one generation's)
        self.batch: list[Evaluation] = []
        self.dispatcher: Dispatcher | None = None
        self.use_runtime(LocalRuntime(env.measure))
        #: maps the target's compiler was asked about alone (:meth:`check`), never paid
        self.checks = 0
        #: why :meth:`check` answers None (the target cannot be asked), once known
        self.unchecked: str | None = None

    # ----------------------------------------------------------------- budget
    @property
    def remaining(self) -> int:
        """Maps the budget still pays for (its board runs left over
        :attr:`readings_per_map`), maps in flight counted as paid."""
        return (self.budget - self.iterations) // self.readings_per_map - self.dispatcher.in_flight

    @property
    def budget_maps(self) -> int:
        """Maps the search may pay for: the budget's board runs (less those a noisy
        target's confirmation keeps) over the board runs one map costs, at least 1."""
        return max(1, self.budget // self.readings_per_map)

    @property
    def done(self) -> bool:
        """The budget cannot pay for another map (every paid map answered)."""
        return self.budget - self.iterations < self.readings_per_map

    def use_runtime(self, runtime: Runtime) -> None:
        """Measure through ``runtime`` from now on (nothing may be in flight)."""
        if self.dispatcher is not None and self.dispatcher.open:
            raise RuntimeError("cannot change the runtime while maps are in flight")
        self.runtime = runtime
        self.dispatcher = Dispatcher(self.cache, runtime)
        self._answered: dict[int, tuple[Ticket, Evaluation]] = {}

    # ------------------------------------------------------- what is measured
    def select(
        self, candidates, keep: int, groups=None, probs=None, free: bool = False
    ) -> np.ndarray:
        """:meth:`egrl.screening.screen.Screen.select`, timed; without a screen the first
        ``keep`` candidates."""
        if self.screen is None:
            return np.arange(min(int(keep), len(candidates)))
        with self.timer(SCREEN_PHASE):
            return self.screen.select(candidates, keep, groups, probs, free)

    def choose(self, pools, probs=None) -> np.ndarray:
        """:meth:`egrl.screening.screen.Screen.choose`, timed: one candidate of each group
        ``[G, K, N, H]``, int64 ``[G]``; without a screen candidate 0 of each."""
        if self.screen is None:
            return np.zeros(len(pools), dtype=np.int64)
        with self.timer(SCREEN_PHASE):
            return self.screen.choose(pools, probs)

    def refit_screen(self) -> None:
        """Refit the screen's model on what was paid so far (timed; nothing without one)."""
        if self.screen is not None:
            with self.timer(SCREEN_PHASE):
                self.screen.refit()

    def screen_metrics(self) -> dict:
        """The screen's metrics of the generation (timed; ``{}`` without one)."""
        if self.screen is None:
            return {}
        with self.timer(SCREEN_PHASE):
            return self.screen.take_metrics()

    # ------------------------------------------------------------- measuring
    def evaluate(self, maps, source: str, probs=None) -> Evaluation:
        """Submit a batch ``[B, N, H]`` and wait for its evaluation (see :meth:`submit`)."""
        ticket = self.submit(maps, source, probs)
        while ticket.id not in self._answered:
            with self.timer("evaluation"):
                self._collect(True, True)
        return self._answered.pop(ticket.id)[1]

    def submit(self, maps, source: str, probs=None) -> Ticket:
        """Send a batch of maps ``[B, N, H]`` without waiting; ``len(ticket)`` maps will be
        answered (the longest prefix the budget allows, see the dispatcher). ``probs``:
        None or float ``[B, N, H, C]``, the policy's probabilities, for targets that want
        them."""
        batch = self.env.check_maps(maps)
        if probs is not None:
            probs = self.env.check_probs(probs, len(batch))
        with self.timer("evaluation"):
            return self.dispatcher.submit(batch, probs, self.remaining, source)

    def collect(
        self, block: bool = False, ordered: bool = False
    ) -> list[tuple[Ticket, Evaluation]]:
        """The submissions answered since the last call, booked, in the order they were
        answered; with ``block``, wait until there is at least one (unless none is open).
        With ``ordered``, submissions are booked in the order they were submitted."""
        if block and not self._answered and self.dispatcher.open:
            with self.timer("evaluation"):
                self._collect(True, ordered)
        else:
            self._collect(False, ordered)
        out = list(self._answered.values())
        self._answered.clear()
        return out

    def _collect(self, block: bool, ordered: bool = False) -> None:
        for answered in self.dispatcher.collect(block, ordered):
            self._answered[answered.ticket.id] = (answered.ticket, self._book(answered))

    def _book(self, answered: Answered) -> Evaluation:
        """Score, count and archive one answered submission (see the module docstring)."""
        ticket, m = answered.ticket, answered.measurement
        ev = self.env.score(m.rectified, m.valid, m.reassigned_ratio, m.latency_s)
        self.archive.add(ticket.maps, ev.reward, ticket.source)
        # the screen learns from measurements: a failed map is paid, but its reward is
        # the penalty for a map the chip did not run, not what the chip answered
        measured = answered.paid & ~answered.failed
        if self.screen is not None and measured.any():
            self.screen.observe(ticket.maps[measured], ev.reward[measured])
        if self.screen is not None and not answered.paid.all():
            # a free map the screen has not seen: the compiler's, measured at binding
            free = ~answered.paid
            self.screen.observe_unseen(ticket.maps[free], ev.reward[free])
        paid_runs = self.readings_per_map * np.cumsum(answered.paid)
        self.best.update(ticket.maps, ev, self.iterations + paid_runs)
        generation, wall_s = self.stamp()
        self.evaluation_log.add(
            ticket.source,
            ev,
            answered.paid,
            (self.iterations, self.proposals),
            generation,
            wall_s,
        )
        self.iterations += self.readings_per_map * int(answered.paid.sum())
        new = answered.paid if answered.again is None else answered.paid & ~answered.again
        self.paid_maps += int(new.sum())
        self.proposals += len(ev)
        self.failed_maps += int(answered.failed.sum())
        self.batch.append(ev)
        return ev

    def check(self, maps) -> Check | None:
        """The target's compiler alone on a batch ``[B, N, H]`` (``Target.check``): which
        maps it accepts as they are and its repair of the others. Counted in
        :attr:`checks`, timed as :data:`CHECK_PHASE`, never paid.

        Returns None when the target cannot be asked (no compiler of its own, or a chip
        that refused the request); why is logged once and kept in :attr:`unchecked`.
        """
        batch = self.env.check_maps(maps)
        if self.unchecked is None and not self.env.target.checks:
            self._unchecked(f"{type(self.env.target).__name__} has no compiler to ask alone")
        if self.unchecked is not None:
            return None
        self.timer.totals.setdefault(CHECK_PHASE, 0.0)
        try:
            with self.timer(CHECK_PHASE):
                found = self.env.target.check(batch)
        except NotImplementedError as exc:  # a chip that refuses check requests
            self._unchecked(str(exc))
            return None
        self.checks += len(batch)
        return found

    def _unchecked(self, why: str) -> None:
        self.unchecked = why
        log.info("maps are checked by the model alone: %s", why)

    def read_again(
        self, maps, source: str = "confirm"
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One paid reading of each map of a batch ``[B, N, H]`` on this process's target,
        past the measure cache (a map it knows is read again): a noisy target's
        confirmation (:mod:`egrl.confirm`). Counted (``readings_per_map`` board runs each) and
        logged in ``evaluations.csv``, not added to the archive or the best (which keep the
        search's readings).

        Returns:
            latency_s float ``[B]``, ran bool ``[B]`` (the map earned a speedup), and the
            maps the chip ran int ``[B, N, H]``. A batch the chip failed to answer (the
            error is logged) comes back as not run, its readings still paid.
        """
        batch = self.env.check_maps(maps)
        try:
            with self.timer("evaluation"):
                m = self.env.measure(batch)
            ev = self.env.score(m.rectified, m.valid, m.reassigned_ratio, m.latency_s)
        except Exception as exc:  # a crashing chip: the readings are lost, not the run
            log.error("reading %d maps again failed: %s", len(batch), exc)
            self.iterations += self.readings_per_map * len(batch)
            self.failed_maps += len(batch)
            return np.full(len(batch), np.nan), np.zeros(len(batch), bool), batch
        generation, wall_s = self.stamp()
        before = (self.iterations, self.proposals)
        self.evaluation_log.add(source, ev, np.ones(len(ev), bool), before, generation, wall_s)
        self.iterations += self.readings_per_map * len(ev)
        self.proposals += len(ev)
        rectified = np.asarray(ev.rectified, dtype=np.int64).reshape(batch.shape)
        return np.asarray(ev.latency_s, np.float64), ev.speedup > 0, rectified

    def read_rewards(self, maps: np.ndarray, source: str) -> np.ndarray:
        """One more paid reading of maps ``[B, N, H]`` that a noisy target already answered,
        past the measure cache (:meth:`read_again`): how an agent checks a map it keeps on a
        lucky reading. Only the first ones the budget pays for are read.

        Returns:
            float64 ``[B']`` (``B' <= B``): each reading's reward, NaN where the chip did
            not run the map.
        """
        maps = np.asarray(maps, dtype=np.int64)[: max(self.remaining, 0)]
        if not len(maps):
            return np.zeros(0)
        latency_s, ran, rectified = self.read_again(maps, source)
        ev = self.env.score(rectified, ran, np.zeros(len(maps)), latency_s)
        return np.where(ran, ev.reward, np.nan)

    def metrics(self) -> dict:
        """The metrics row's counts and best map, and ``batch_best_reward``,
        ``batch_mean_reward`` and ``batch_valid_fraction`` of the maps answered since
        :attr:`batch` was emptied (absent if none was)."""
        out = {
            "iterations": self.iterations,
            "paid_maps": self.paid_maps,
            "proposals": self.proposals,
            "best_reward": self.best.reward,
            "best_speedup": self.best.speedup,
            "best_latency_s": self.best.latency_s,
        }
        if not self.batch:
            return out
        rewards = np.concatenate([ev.reward for ev in self.batch])
        valid = np.concatenate([ev.valid for ev in self.batch])
        if not len(rewards):
            return out
        return out | {
            "batch_best_reward": float(rewards.max()),
            "batch_mean_reward": float(rewards.mean()),
            "batch_valid_fraction": float(valid.mean()),
        }

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Counts, best map, archive, cache and, where kept, the best map by each value and
        the screen's paid maps."""
        state = {
            "iterations": self.iterations,
            "proposals": self.proposals,
            "paid_maps": self.paid_maps,
            "failed_maps": self.failed_maps,
            "checks": self.checks,
            "best": self.best.state_dict(),
            "archive": self.archive.state_dict(),
            "cache": self.cache.state_dict(),
        }
        if self.evaluation_log.enabled:
            state["evaluations"] = self.evaluation_log.state_dict()
        if self.screen is not None:
            state["screen"] = self.screen.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`; reads checkpoints written before the archive had
        its name (:func:`archive_state`)."""
        self.iterations = int(state["iterations"])
        self.proposals = int(state.get("proposals", self.iterations))
        self.failed_maps = int(state.get("failed_maps", 0))
        self.checks = int(state.get("checks", 0))
        self.paid_maps = int(state.get("paid_maps", self.iterations // self.readings_per_map))
        self.best = Best(**state["best"])
        self.archive.load_state_dict(archive_state(state))
        self.cache.load_state_dict(state.get("cache"))
        self.evaluation_log.load_state_dict(state.get("evaluations"))
        if self.screen is not None:
            self.screen.load_state_dict(state.get("screen"))
