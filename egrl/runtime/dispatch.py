"""The measure cache and the budget in front of a runtime: what an agent submits and collects.

:meth:`Dispatcher.submit` takes a batch of maps and sends only what must be measured:

* on a deterministic target (the cache enabled) a map the cache remembers is answered
  from it, a map repeated in the batch is sent once, and a map still *in flight* (sent by
  an earlier submission not yet answered) is not sent again: its answer is shared when it
  comes back. None of these is paid.
* every other map is new and paid, while the budget given lasts; the batch is cut before
  the first new map past it (the submission covers the longest prefix that could be
  answered, as :meth:`egrl.measure_cache.MeasureCache.answer` does).
* with the cache disabled (a noisy chip) every map is sent and paid.

:meth:`Dispatcher.collect` returns the submissions whose answers are complete, each once,
in submission order among those completing together; results come back from the runtime
in any order. A submission's new maps enter the cache when it is answered, in batch
order, except failed maps (:mod:`egrl.runtime.jobs`): they are never cached, so a later
proposal of the same map is sent (and paid) again. A failed map is paid: the hardware
was asked, and the budget bounds what is asked of it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from egrl.measure_cache import MeasureCache
from egrl.runtime.base import Runtime
from egrl.runtime.jobs import Outcome
from hwmodels.base import Measurement

#: one answered map: rectified ``[N, H]``, valid, re-assigned ratio, latency, failed, reason
Row = tuple[np.ndarray, bool, float, float, bool, str]


@dataclass
class Ticket:
    """One submission: the answered prefix of a batch (``A`` maps) and where each row's
    answer comes from.

    Attributes:
        id: submission number (0, 1, ...).
        source: the replay-buffer tag the caller gave.
        maps: int64 ``[A, N, H]``; ``probs``: float ``[A, N, H, C]`` or None.
        keys: the cache key of each row (None with the cache disabled).
        first: int64 ``[A]``: the row whose answer each row takes (its first occurrence).
        sent: int64 ``[S]``: rows sent to the runtime, each paid.
        cached: row -> answer the cache gave at submission.
        waits: rows whose map was in flight from an earlier submission.
        again: sent rows whose map the cache knew but had due to be read again (a noisy
            target's re-reading, :mod:`egrl.measure_cache`).
        job: the runtime job of the sent rows (None if nothing was sent).
    """

    id: int
    source: str
    maps: np.ndarray
    probs: np.ndarray | None
    keys: list[bytes] | None
    first: np.ndarray
    sent: np.ndarray
    cached: dict[int, tuple] = field(default_factory=dict)
    waits: list[int] = field(default_factory=list)
    again: list[int] = field(default_factory=list)
    job: int | None = None
    outcome: Outcome | None = None

    def __len__(self) -> int:
        return len(self.maps)


@dataclass
class Answered:
    """A complete submission.

    Attributes:
        ticket: the submission.
        measurement: :class:`Measurement` ``[A]``.
        paid: bool ``[A]``: the map was sent by this submission (counts in the budget).
        failed: bool ``[A]``: the map could not be measured (see the module docstring).
        reasons: ``A`` strings, why each failed map failed.
        again: bool ``[A]``: a paid map the run had read before (a re-reading: its answer
            is the mean of its readings); None: none was.
    """

    ticket: Ticket
    measurement: Measurement
    paid: np.ndarray
    failed: np.ndarray
    reasons: list[str]
    again: np.ndarray | None = None


class Dispatcher:
    """Submissions of one agent to ``runtime`` through ``cache`` (see the module docstring)."""

    def __init__(self, cache: MeasureCache, runtime: Runtime) -> None:
        self.cache = cache
        self.runtime = runtime
        self._next = 0
        self._open: dict[int, Ticket] = {}
        self._by_job: dict[int, Ticket] = {}
        self._flying: dict[bytes, int] = {}  # key -> submission that sent it
        self._results: dict[bytes, Row] = {}  # answers of keys in flight, once arrived
        self._refs: Counter[bytes] = Counter()  # open submissions that need each result

    @property
    def in_flight(self) -> int:
        """Paid maps sent and not yet answered."""
        return sum(len(t.sent) for t in self._open.values())

    @property
    def open(self) -> int:
        """Submissions not yet collected."""
        return len(self._open)

    # ------------------------------------------------------------------ submit
    def submit(
        self, maps: np.ndarray, probs: np.ndarray | None, budget: int, source: str
    ) -> Ticket:
        """Send what ``maps`` int64 ``[B, N, H]`` (checked) need, paying at most ``budget``."""
        budget = max(int(budget), 0)
        if not self.cache.enabled:
            count = min(len(maps), budget)
            rows = np.arange(count)
            ticket = Ticket(self._next, source, maps[:count], _rows(probs, count), None, rows, rows)
        else:
            ticket = self._plan(maps, probs, budget, source)
        self._next += 1
        self._open[ticket.id] = ticket
        if len(ticket.sent):
            sent_probs = None if ticket.probs is None else ticket.probs[ticket.sent]
            ticket.job = self.runtime.submit(ticket.maps[ticket.sent], sent_probs)
            self._by_job[ticket.job] = ticket
        return ticket

    def _plan(self, maps: np.ndarray, probs: np.ndarray | None, budget: int, source: str):
        keys = self.cache.keys(maps, probs)
        seen: dict[bytes, int] = {}
        first = np.arange(len(maps))
        sent: list[int] = []
        cached: dict[int, tuple] = {}
        waits: list[int] = []
        again: list[int] = []
        answered = len(maps)
        for i, key in enumerate(keys):
            if key in seen:
                first[i] = seen[key]
                continue
            entry = self.cache.lookup(key)
            if entry is not None:
                cached[i] = entry
            elif key in self._flying:
                waits.append(i)
            elif len(sent) < budget:
                sent.append(i)
                if self.cache.due(key):
                    again.append(i)
            else:
                answered = i
                break
            seen[key] = i
        ticket = Ticket(
            self._next,
            source,
            maps[:answered],
            _rows(probs, answered),
            keys[:answered],
            first[:answered],
            np.array(sent, dtype=np.int64),
            cached,
            waits,
            again,
        )
        for i in sent:
            self._flying[keys[i]] = ticket.id
            self._refs[keys[i]] += 1
        for i in waits:
            self._refs[keys[i]] += 1
        return ticket

    # ----------------------------------------------------------------- collect
    def collect(self, block: bool = True, ordered: bool = False) -> list[Answered]:
        """Complete submissions (each returned once); with ``block``, wait until at least
        one is complete unless none is open. With ``ordered`` a submission is returned only
        once every earlier one has been: answers come back in submission order, as if each
        had been waited for in turn."""
        while True:
            for outcome in self.runtime.poll():
                self._arrive(outcome)
            done = self._resolve(ordered)
            if done or not block or not self._open:
                return done
            if not self.runtime.pending:
                raise RuntimeError(
                    f"{len(self._open)} submission(s) wait on answers nothing will send"
                )
            for outcome in self.runtime.wait_any():
                self._arrive(outcome)

    def _arrive(self, outcome: Outcome) -> None:
        ticket = self._by_job.pop(outcome.job)
        ticket.outcome = outcome
        if ticket.keys is None:
            return
        for j, row in enumerate(ticket.sent):
            self._results[ticket.keys[row]] = _row(outcome, j)

    def _ready(self, ticket: Ticket) -> bool:
        if ticket.job is not None and ticket.outcome is None:
            return False
        return all(ticket.keys[i] in self._results for i in ticket.waits)

    def _resolve(self, ordered: bool = False) -> list[Answered]:
        done = []
        for ticket in self._open.values():  # in submission order
            if self._ready(ticket):
                done.append(ticket)
            elif ordered:
                break
        return [self._answer(t) for t in done]

    def _answer(self, ticket: Ticket) -> Answered:
        """Assemble a complete submission, cache its new maps, release what it held."""
        del self._open[ticket.id]
        rows: dict[int, Row] = {i: (*entry, False, "") for i, entry in ticket.cached.items()}
        for j, i in enumerate(ticket.sent):
            rows[int(i)] = _row(ticket.outcome, j)
        keys = ticket.keys or []
        for i in ticket.waits:
            rows[i] = self._results[keys[i]]
            if self.cache.reread:  # the mean of its readings, the one it waited for included
                rows[i] = _remembered(self.cache.peek(keys[i]), rows[i])
        for i in ticket.sent:
            rectified, valid, ratio, latency, failed, _ = rows[int(i)]
            if keys and not failed:
                kept = self.cache.remember(keys[i], rectified, valid, ratio, latency)
                if self.cache.reread:  # the mean of its readings
                    rows[int(i)] = _remembered(kept, rows[int(i)])
        for i in [*ticket.sent.tolist(), *ticket.waits] if keys else []:
            self._release(keys[i], ticket.id)
        ordered = [rows[int(f)] for f in ticket.first]
        paid = np.zeros(len(ticket), dtype=bool)
        paid[ticket.sent] = True
        again = None
        if ticket.again:
            again = np.zeros(len(ticket), dtype=bool)
            again[ticket.again] = True
        measurement = _measurement(ordered, ticket.maps)
        return Answered(ticket, measurement, paid, *_failures(ordered), again=again)

    def _release(self, key: bytes, ticket_id: int) -> None:
        if self._flying.get(key) == ticket_id:
            del self._flying[key]
        self._refs[key] -= 1
        if self._refs[key] <= 0:
            del self._refs[key]
            self._results.pop(key, None)


def _remembered(entry: tuple | None, row: Row) -> Row:
    """``row`` answered as the cache's ``entry`` now remembers its map (unchanged if none)."""
    if entry is None:
        return row
    return (entry[0].astype(np.int64), *entry[1:], *row[4:])


def _rows(probs: np.ndarray | None, count: int) -> np.ndarray | None:
    return None if probs is None else probs[:count]


def _row(outcome: Outcome, j: int) -> Row:
    m = outcome.measurement
    return (
        m.rectified[j],
        bool(m.valid[j]),
        float(m.reassigned_ratio[j]),
        float(m.latency_s[j]),
        bool(outcome.failed[j]),
        outcome.reasons[j],
    )


def _measurement(rows: list[Row], maps: np.ndarray) -> Measurement:
    """The :class:`Measurement` ``[A]`` of ``A`` answered rows (maps ``[A, N, H]``)."""
    if not rows:
        return Measurement(
            np.zeros((0, *maps.shape[1:]), np.int64), np.zeros(0, bool), *np.zeros((2, 0))
        )
    rectified, valid, ratio, latency, _, _ = zip(*rows)
    return Measurement(
        rectified=np.stack(rectified).astype(np.int64),
        valid=np.array(valid, dtype=bool),
        reassigned_ratio=np.array(ratio, dtype=np.float64),
        latency_s=np.array(latency, dtype=np.float64),
    )


def _failures(rows: list[Row]) -> tuple[np.ndarray, list[str]]:
    return np.array([r[4] for r in rows], dtype=bool), [r[5] for r in rows]
