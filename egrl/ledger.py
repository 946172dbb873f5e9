"""The measuring ledger of a run: what is sent to the chip, what it answered, what it cost.

A :class:`Ledger` stands between an agent and the hardware; every call to the target goes
through its runtime (:mod:`egrl.runtime`). :meth:`Ledger.submit` sends maps ``[B, N, H]``
through the measure cache and the :class:`~egrl.budget.Budget` (a paid map costs
``Env.readings_per_map`` board runs, never past it); :meth:`Ledger.collect` appends each
answer to the run's record (:class:`~egrl.record.RunRecord`), whose views and readers (the
evaluation log, the screen, EGRL's replay buffer) take it from there. :meth:`Ledger.check`
asks the compiler alone (never paid, counted in :attr:`Ledger.checks`);
:meth:`Ledger.read_again` reads maps again past the cache (a noisy target's confirmation).
The ledger knows nothing of generations or policies: the clock it stamps readings with is
given to it. A pre-training run gives each workload a ledger, all paid from one budget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from egrl.budget import Budget
from egrl.env import Env, Evaluation
from egrl.evaluations import EvaluationLog
from egrl.measure_cache import MeasureCache, for_env
from egrl.record import CONFIRM, SEARCH, Best, RunRecord, archive_state, make_buffer
from egrl.runtime import LocalRuntime, Runtime
from egrl.runtime.dispatch import Answered, Dispatcher, Ticket
from egrl.timing import CHECK_PHASE, PHASES, SCREEN_PHASE, Timer
from hwmodels.base import Check, CheckRefused

if TYPE_CHECKING:
    from egrl.screening.screen import Screen

log = logging.getLogger(__name__)

#: kept importable from here: the best map and archive are :mod:`egrl.record`'s, the
#: phases :mod:`egrl.timing`'s, an environment's cache :mod:`egrl.measure_cache`'s
__all__ = ["CHECK_PHASE", "PHASES", "SCREEN_PHASE", "Best", "Budget", "Ledger", "Timer"]
__all__ += ["archive_state", "make_buffer", "measure_cache"]
measure_cache = for_env


def _held(holder: str, name: str, doc: str) -> property:
    """An attribute of the ledger's that its budget or its record (``holder``) holds."""
    return property(
        lambda self: getattr(getattr(self, holder), name),
        lambda self, v: setattr(getattr(self, holder), name, v),
        doc=doc,
    )


class Ledger:
    """Measures, counts and records the maps of one run (see the module docstring).

    Args:
        env: the environment its maps are checked, measured and scored on.
        budget: board runs allowed, or the :class:`~egrl.budget.Budget` to spend from
            (another ledger's, to share it).
        cache: answers maps measured before without paying (disabled on a noisy target).
        record_size: most answered maps the archive holds (``cfg.record_size``).
        timer: where the time spent waiting for answers goes (phase ``"evaluation"``).
        evaluation_log: ``evaluations.csv`` (a disabled log without ``record_evaluations``).
        stamp: the generation an answer belongs to and the run's wall clock now.
        screen: the learned screen (None: none): reads the record, chooses candidates.
        pool: candidates an agent proposes per map it wants measured (``screen.pool``).
    """

    iterations = _held("budget", "spent", "Board runs paid so far (never past the budget).")
    paid_maps = _held("budget", "paid_maps", "Distinct maps paid for (without re-readings).")
    proposals = _held("budget", "proposals", "Maps answered so far, paid or not.")
    failed_maps = _held("budget", "failed_maps", "Paid maps the runtime could not measure.")
    archive = _held("record", "archive", "Every map the search was answered (its record's).")
    best = _held("record", "best", "The best map the chip ran (its record's :class:`Best`).")
    batch = _held("record", "batch", "The search's evaluations of the generation under way.")

    def __init__(
        self,
        env: Env,
        budget: int | Budget,
        cache: MeasureCache,
        record_size: int,
        timer: Timer,
        evaluation_log: EvaluationLog,
        stamp: Callable[[], tuple[int, float]],
        screen: Screen | None = None,
        pool: int = 1,
    ) -> None:
        self.env = env
        #: the board runs of the run: never reassigned (:mod:`egrl.budget`)
        self.budget = budget if isinstance(budget, Budget) else Budget(int(budget))
        self.cache = cache
        self.timer = timer
        self.evaluation_log = evaluation_log
        self.stamp = stamp
        self.screen = screen
        #: every reading of the run and its views (:mod:`egrl.record`)
        self.record = RunRecord(env, self.budget, record_size, stamp)
        # who reads the record besides its own views: the evaluation log (every paid or
        # answered map, re-readings included) and the screen (the search's answers)
        self.record.subscribe(evaluation_log.read, (SEARCH, CONFIRM))
        if screen is not None:
            self.record.subscribe(screen.read)
            timer.totals.setdefault(SCREEN_PHASE, 0.0)
        #: candidates an agent proposes per map it wants measured (1 without a screen)
        self.pool = 1 if screen is None else int(pool)
        #: board runs one paid map costs (the budget and ``iterations`` count board runs)
        self.readings_per_map = env.readings_per_map
        self.dispatcher: Dispatcher | None = None
        self.use_runtime(LocalRuntime.of(env))
        #: maps the target's compiler was asked about alone (:meth:`check`), never paid
        self.checks = 0
        #: why :meth:`check` answers None (the target cannot be asked), once known
        self.unchecked: str | None = None

    # ----------------------------------------------------------------- budget
    @property
    def remaining(self) -> int:
        """Maps the budget still pays for, maps in flight counted as paid."""
        return self.budget.left // self.readings_per_map - self.dispatcher.in_flight

    @property
    def budget_maps(self) -> int:
        """Maps the search may pay for (less a confirmation's reserve), at least 1."""
        return max(1, self.budget.limit // self.readings_per_map)

    @property
    def done(self) -> bool:
        """The budget cannot pay for another map (every paid map answered)."""
        return self.budget.left < self.readings_per_map

    def use_runtime(self, runtime: Runtime) -> None:
        """Measure, check and read again through ``runtime`` (nothing may be in flight)."""
        if self.dispatcher is not None and self.dispatcher.open:
            raise RuntimeError("cannot change the runtime while maps are in flight")
        self.runtime = runtime
        self.dispatcher = Dispatcher(self.cache, runtime)
        self._answered: dict[int, tuple[Ticket, Evaluation]] = {}

    # ------------------------------------- what is measured (the screen, timed)
    def select(self, candidates, keep: int, groups=None, probs=None, free=False) -> np.ndarray:
        """:meth:`~egrl.screening.screen.Screen.select`; no screen: the first ``keep``."""
        if self.screen is None:
            return np.arange(min(int(keep), len(candidates)))
        with self.timer(SCREEN_PHASE):
            return self.screen.select(candidates, keep, groups, probs, free)

    def choose(self, pools, probs=None) -> np.ndarray:
        """:meth:`~egrl.screening.screen.Screen.choose` of ``[G, K, N, H]``, int64 ``[G]``;
        no screen: candidate 0 of each."""
        if self.screen is None:
            return np.zeros(len(pools), dtype=np.int64)
        with self.timer(SCREEN_PHASE):
            return self.screen.choose(pools, probs)

    def refit_screen(self) -> None:
        """Refit the screen's model on what was paid so far (nothing without one)."""
        if self.screen is not None:
            with self.timer(SCREEN_PHASE):
                self.screen.refit()

    def screen_metrics(self) -> dict:
        """The screen's metrics of the generation (``{}`` without one)."""
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
        """The submissions answered since the last call, recorded, in the order they were
        answered; with ``block``, wait until there is at least one (unless none is open).
        With ``ordered``, submissions are recorded in the order they were submitted."""
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
        """Score one answered submission and append it to the record."""
        ticket, m = answered.ticket, answered.measurement
        ev = self.env.score(m.rectified, m.valid, m.reassigned_ratio, m.latency_s)
        paid, failed, again = answered.paid, answered.failed, answered.again
        self.record.add(SEARCH, ticket.source, ticket.maps, ev, paid, failed, again)
        return ev

    def check(self, maps) -> Check | None:
        """The compiler alone on maps ``[B, N, H]`` (``Target.check`` on the runtime's
        workers), counted in :attr:`checks`, timed as :data:`CHECK_PHASE`, never paid; None
        when the target cannot be asked (no compiler, or a chip that refused): why is
        logged once and kept in :attr:`unchecked`."""
        if self.unchecked is not None:
            return None
        batch = self.env.check_maps(maps)
        self.timer.totals.setdefault(CHECK_PHASE, 0.0)
        try:
            with self.timer(CHECK_PHASE):
                found = self.runtime.check(batch)
        except CheckRefused as exc:  # a chip that refuses check requests
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
        """One paid reading of each map ``[B, N, H]`` through the runtime, past the cache (a
        noisy target's confirmation, :mod:`egrl.confirm`), recorded as
        :data:`~egrl.record.CONFIRM` readings (paid, logged; not in the archive or the best).

        Returns latency_s float ``[B]``, ran bool ``[B]`` (the map earned a speedup) and the
        maps the chip ran int ``[B, N, H]``; a failed reading is paid and not run."""
        batch = self.env.check_maps(maps)
        with self.timer("evaluation"):
            outcome = self.runtime.measure(batch)
        m = outcome.measurement
        ev = self.env.score(m.rectified, m.valid, m.reassigned_ratio, m.latency_s)
        paid = np.ones(len(batch), dtype=bool)
        self.record.add(CONFIRM, source, batch, ev, paid, outcome.failed)
        rectified = np.asarray(ev.rectified, dtype=np.int64).reshape(batch.shape)
        return np.asarray(ev.latency_s, np.float64), ev.speedup > 0, rectified

    def read_rewards(self, maps: np.ndarray, source: str) -> np.ndarray:
        """One more paid reading (:meth:`read_again`) of the first maps ``[B, N, H]`` the
        budget pays for: how an agent checks a map it keeps on a lucky reading. Returns
        float64 ``[B' <= B]``, each reading's reward (NaN: the chip did not run it)."""
        maps = np.asarray(maps, dtype=np.int64)[: max(self.remaining, 0)]
        if not len(maps):
            return np.zeros(0)
        latency_s, ran, rectified = self.read_again(maps, source)
        ev = self.env.score(rectified, ran, np.zeros(len(maps)), latency_s)
        return np.where(ran, ev.reward, np.nan)

    def metrics(self) -> dict:
        """The metrics row's counts and best map (:meth:`egrl.record.RunRecord.metrics`)."""
        return self.record.metrics()

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Counts, best map, archive, cache, the best map by each value, the screen's data."""
        state = {
            **self.budget.state_dict(),
            "checks": self.checks,
            **self.record.state_dict(),
            "cache": self.cache.state_dict(),
        }
        if self.evaluation_log.enabled:
            state["evaluations"] = self.evaluation_log.state_dict()
        if self.screen is not None:
            state["screen"] = self.screen.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`, of checkpoints of every age (:mod:`egrl.record`)."""
        self.budget.load_state_dict(state, self.readings_per_map)
        self.checks = int(state.get("checks", 0))
        self.record.load_state_dict(state)
        self.cache.load_state_dict(state.get("cache"))
        self.evaluation_log.load_state_dict(state.get("evaluations"))
        if self.screen is not None:
            self.screen.load_state_dict(state.get("screen"))
