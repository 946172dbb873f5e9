"""The record of a run: every reading the chip gave it, in order, and the views it needs.

A :class:`RunRecord` is appended to, never rewritten: each answered batch becomes one
:class:`Reading` (the maps, the answer, which maps were paid and failed, the board-run
index of each map once answered, the round, and what asked for it, :data:`KINDS`:
the search, a noisy target's confirmation, or the compiler's map read when the target
was bound). The record keeps the views every run needs:

- :attr:`RunRecord.best`: the best map the chip ran for the search;
- :attr:`RunRecord.archive`: every map the search was answered, with its reward and
  source (the last ``record_size``), which checkpoints keep (:func:`archive_state` reads
  old ones) and from which :meth:`RunRecord.latest` gives each map's latest answer (on a
  noisy target the mean of its readings so far);
- :attr:`RunRecord.batch`: the round's evaluations, for its metrics row;
- the counts: board runs, paid maps, answers and failures in its :class:`~egrl.budget.Budget`,
  and the maps answered of each kind (:attr:`RunRecord.counts`).

Everything else that keeps readings subscribes (:meth:`RunRecord.subscribe`) and is told
of each reading once, in order: the evaluation log (``evaluations.csv``) and the screen's
training data (both wired by :class:`egrl.ledger.Ledger`), EGRL's replay buffer (by the
EGRL agent).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from egrl import distinct
from egrl.budget import Budget
from egrl.env import Env, Evaluation
from egrl.replay import ReplayBuffer

#: what asked for a reading: the search (paid or answered from the cache), a noisy
#: target's confirmation (paid re-readings past the cache), the compiler's map (read when
#: the target was bound, outside the budget)
SEARCH, CONFIRM, COMPILER = "search", "confirm", "compiler"
KINDS = (SEARCH, CONFIRM, COMPILER)

#: a reader of the record: told of each reading of the kinds it subscribed to
Reader = Callable[["Reading"], None]


@dataclass(frozen=True)
class Reading:
    """One answered batch of ``B`` maps.

    Attributes:
        kind: what asked for it (:data:`KINDS`).
        source: who proposed the maps (the replay buffer's tag: ``pop``, ``sa``, ...).
        maps: int ``[B, N, H]``: the maps as proposed.
        evaluation: their :class:`~egrl.env.Evaluation` ``[B]``.
        paid: bool ``[B]``: the map was read on the board for this batch (counts in the budget).
        failed: bool ``[B]``: a paid map the chip could not measure.
        again: bool ``[B]``: a paid map the run had read before (a noisy target's re-reading).
        runs: int64 ``[B]``: board runs paid once each map was answered.
        runs_before: board runs paid before the batch; ``answered_before``: maps answered.
        round: the generation under way (from 1; 0 for the compiler's map).
        wall_s: the run's wall clock when it was answered.
    """

    kind: str
    source: str
    maps: np.ndarray
    evaluation: Evaluation
    paid: np.ndarray
    failed: np.ndarray
    again: np.ndarray
    runs: np.ndarray
    runs_before: int
    answered_before: int
    round: int
    wall_s: float

    def __len__(self) -> int:
        return len(self.paid)

    @property
    def measured(self) -> np.ndarray:
        """bool ``[B]``: paid and measured (a failed map's reward is a penalty, not a reading)."""
        return self.paid & ~self.failed


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

        ``iterations`` int ``[B]``: the board runs paid when each map was answered. The
        kept map is the one the chip ran, ``ev.rectified``: the proposal itself when it was
        valid, its repair when the environment scores repaired maps.
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


def make_buffer(env: Env, capacity: int) -> ReplayBuffer:
    """An empty buffer of ``capacity`` (at least 1) answered maps of ``env`` (the run's
    archive, EGRL's replay buffer); once full, each new map overwrites the oldest."""
    return ReplayBuffer(max(int(capacity), 1), env.num_units, env.num_heads)


def archive_state(state: dict) -> dict:
    """The archive of answered maps in a checkpoint's state (``{}`` if it has none).

    Checkpoints written before the archive had its name kept it as ``"record"``, and
    before it had a key of its own, as the agent's replay buffer (``"buffer"``)."""
    return state.get("archive") or state.get("record") or state.get("buffer") or {}


class RunRecord:
    """Every reading of one run and its views (see the module docstring).

    Args:
        env: the environment the readings are scored on.
        budget: the counts the paid readings are spent from (shared by a pre-training
            run's ledgers).
        archive_size: most search answers the archive holds (``cfg.record_size``).
        stamp: the round a reading belongs to and the run's wall clock now.
    """

    def __init__(
        self,
        env: Env,
        budget: Budget,
        archive_size: int,
        stamp: Callable[[], tuple[int, float]],
    ) -> None:
        self.env = env
        self.budget = budget
        self.stamp = stamp
        self.archive = make_buffer(env, archive_size)
        self.best = Best()
        #: evaluations of the search answered since the agent emptied it (one round's)
        self.batch: list[Evaluation] = []
        #: maps answered of each kind, in this process
        self.counts: Counter[str] = Counter()
        self._readers: list[tuple[Reader, frozenset[str]]] = []
        base = getattr(env, "baseline_measurement", None)
        if base is not None:  # the first reading: the compiler's map, read at binding
            ev = env.score(base.rectified, base.valid, base.reassigned_ratio, base.latency_s)
            self.add(COMPILER, COMPILER, env.baseline_mapping[None], ev, np.zeros(1, bool))

    def subscribe(self, reader: Reader, kinds: Iterable[str] = (SEARCH,)) -> None:
        """Tell ``reader`` of every later reading of ``kinds``, in order, after the views."""
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown reading kind(s) {sorted(unknown)}; known: {KINDS}")
        self._readers.append((reader, frozenset(kinds)))

    def add(
        self,
        kind: str,
        source: str,
        maps: np.ndarray,
        ev: Evaluation,
        paid: np.ndarray,
        failed: np.ndarray | None = None,
        again: np.ndarray | None = None,
    ) -> Reading:
        """Append one answered batch of ``B`` maps (``paid``, ``failed``, ``again``: bool
        ``[B]``, None: none): the views first, then the readers, then the counts. A search
        reading enters the archive, the best and the round's batch; the compiler's map is
        counted nowhere in the budget."""
        paid = np.asarray(paid, dtype=bool)
        failed = np.zeros(len(paid), bool) if failed is None else np.asarray(failed, bool)
        again = np.zeros(len(paid), bool) if again is None else np.asarray(again, bool)
        per_map = self.env.readings_per_map
        before = (self.budget.spent, self.budget.proposals)
        runs = before[0] + per_map * np.cumsum(paid, dtype=np.int64)
        round_, wall_s = self.stamp() if kind != COMPILER else (0, 0.0)
        reading = Reading(
            kind, source, maps, ev, paid, failed, again, runs, *before, round_, wall_s
        )
        if kind == SEARCH:
            self.archive.add(maps, ev.reward, source)
            self.best.update(maps, ev, runs)
            self.batch.append(ev)
        for reader, kinds in self._readers:
            if kind in kinds:
                reader(reading)
        self.counts[kind] += len(paid)
        if kind != COMPILER:
            new = int((paid & ~again).sum()) if kind == SEARCH else 0
            self.budget.spend(per_map * int(paid.sum()), new, len(paid), int(failed.sum()))
        return reading

    def latest(self) -> tuple[np.ndarray, np.ndarray]:
        """Each distinct map of the archive at its latest answer, oldest first: maps int64
        ``[M, N, H]`` and rewards float64 ``[M]`` (on a noisy target the latest answer of a
        map is the mean of its readings so far, :mod:`egrl.measure_cache`)."""
        rows = self.archive.in_order()
        maps = self.archive.actions[rows].astype(np.int64)
        last = distinct.last_rows(maps)
        return maps[last], self.archive.rewards[rows][last].astype(np.float64)

    def metrics(self) -> dict:
        """The metrics row's counts and best map, and ``batch_best_reward``,
        ``batch_mean_reward`` and ``batch_valid_fraction`` of the search's maps answered
        since :attr:`batch` was emptied (absent if none was)."""
        budget, best = self.budget, self.best
        out = {
            "iterations": budget.spent,
            "paid_maps": budget.paid_maps,
            "proposals": budget.proposals,
            "best_reward": best.reward,
            "best_speedup": best.speedup,
            "best_latency_s": best.latency_s,
        }
        if not sum(len(ev) for ev in self.batch):
            return out
        rewards = np.concatenate([ev.reward for ev in self.batch])
        valid = np.concatenate([ev.valid for ev in self.batch])
        return out | {
            "batch_best_reward": float(rewards.max()),
            "batch_mean_reward": float(rewards.mean()),
            "batch_valid_fraction": float(valid.mean()),
        }

    def state_dict(self) -> dict:
        """The best map and the archive (checkpoint keys ``best`` and ``archive``)."""
        return {"best": self.best.state_dict(), "archive": self.archive.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`; reads checkpoints of every age (:func:`archive_state`)."""
        self.best = Best(**state["best"])
        self.archive.load_state_dict(archive_state(state))
