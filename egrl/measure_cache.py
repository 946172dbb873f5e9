"""Pay once per map: an LRU of hardware measurements keyed by the map's bytes.

On a deterministic target (``Target.deterministic``) measuring a map again returns the
same answer, so :class:`MeasureCache` answers a map measured before from memory and only
the new maps of a batch reach the hardware. On a noisy one it answers a repeat from the
mean of its readings, and with ``reread`` R > 0 a map answered from memory R times per
reading it has is not answered but paid again (:meth:`MeasureCache.lookup`), its new
reading averaged in (:meth:`MeasureCache.remember`): a map an agent keeps proposing, an
elite, is read at its 1st, (R+2)th, (3R+3)th ... proposal, so one lucky reading does not
hold it (a run also reads its best maps again at its end: :mod:`egrl.confirm`). The key
is a 16-byte BLAKE2b digest of the
map as small integers (int8 when every head has at most 127 choices, else int16), and of
the policy's probabilities when the target repairs maps from them (its answer then
depends on both). The value is the target's :class:`~hwmodels.base.Measurement` row:
the rectified map (stored as small integers), valid, the re-assigned ratio and the
latency.

:meth:`MeasureCache.answer` answers the longest prefix of a batch that fits a budget of
paid measurements: cached maps are free, a map repeated inside the batch is measured
once, and new maps are paid until the budget runs out; the first new map past the
budget and every map after it are left unanswered (the caller sees a shorter answer, as
when a batch is cut at the end of the budget). With the cache disabled
(``capacity`` 0) every map is paid.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hwmodels.base import Measurement

#: bytes of a key (BLAKE2b digest size)
KEY_BYTES = 16

#: one cached answer: rectified map (small ints ``[N, H]``), valid, reassigned ratio, latency
Entry = tuple[np.ndarray, bool, float, float]


@dataclass(frozen=True)
class Answer:
    """What :meth:`MeasureCache.answer` gives for the first ``A`` maps of a batch.

    Attributes:
        measurement: the :class:`Measurement` of the ``A`` answered maps, in batch order.
        paid: bool ``[A]``: this map reached the hardware (its first occurrence in the
            batch, not answered from the cache).
    """

    measurement: Measurement
    paid: np.ndarray

    def __len__(self) -> int:
        return len(self.paid)


def map_dtype(max_choices: int) -> np.dtype:
    """The smallest signed integer type that holds every choice of a map."""
    return np.dtype(np.int8 if max_choices <= 127 else np.int16)


class MeasureCache:
    """LRU of at most ``capacity`` measurements of maps int ``[N, H]`` (see the module docstring).

    Args:
        capacity: most maps remembered; the least recently used is forgotten first.
            0 disables the cache.
        max_choices: the most choices of any head (sets the key's integer type).
        enabled: False: nothing is remembered, every map is paid.
        reread: a noisy target's re-reading (see the module docstring); 0: never, as on
            a deterministic target.
    """

    def __init__(
        self, capacity: int, max_choices: int, enabled: bool = True, reread: int = 0
    ) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        if reread < 0:
            raise ValueError(f"reread must be >= 0, got {reread}")
        self.capacity = int(capacity)
        self.enabled = bool(enabled) and self.capacity > 0
        self.dtype = map_dtype(max_choices)
        self.reread = int(reread)
        self._entries: OrderedDict[bytes, Entry] = OrderedDict()
        #: with ``reread``: key -> [readings averaged, answers from memory since the last]
        self._reads: dict[bytes, list[int]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self, maps: np.ndarray, probs: np.ndarray | None = None) -> list[bytes]:
        """One key per map of ``maps`` int ``[B, N, H]`` (and its probabilities
        ``[B, N, H, C]`` if given)."""
        small = np.ascontiguousarray(maps, dtype=self.dtype)
        keys = []
        for b in range(len(small)):
            digest = hashlib.blake2b(small[b].tobytes(), digest_size=KEY_BYTES)
            if probs is not None:
                digest.update(np.ascontiguousarray(probs[b], dtype=np.float64).tobytes())
            keys.append(digest.digest())
        return keys

    def answer(
        self,
        maps: np.ndarray,
        probs: np.ndarray | None,
        measure: Callable[[np.ndarray, np.ndarray | None], Measurement],
        budget: int,
    ) -> Answer:
        """Answer the longest prefix of ``maps`` int64 ``[B, N, H]`` within ``budget`` paid maps.

        Args:
            maps: the batch, already checked.
            probs: ``None`` or float ``[B, N, H, C]``, handed to ``measure`` (and part of
                the key) with the maps it belongs to.
            measure: ``measure(maps [M, N, H], probs [M, N, H, C] | None) -> Measurement``,
                called once with the new distinct maps (not called when there are none).
            budget: the most maps that may be paid.
        """
        budget = max(int(budget), 0)
        if not self.enabled:
            todo = np.arange(min(len(maps), budget))
            m = self._measure(measure, maps, probs, todo)
            return Answer(m, np.ones(len(todo), dtype=bool))
        keys = self.keys(maps, probs)
        known: dict[bytes, Entry] = {}
        todo: list[int] = []
        answered = len(maps)
        for i, key in enumerate(keys):
            if key in known:
                continue
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                known[key] = entry
            elif len(todo) < budget:
                known[key] = None  # measured below
                todo.append(i)
            else:
                answered = i
                break
        m = self._measure(measure, maps, probs, np.array(todo, dtype=np.int64))
        for j, i in enumerate(todo):
            entry = (
                m.rectified[j].astype(self.dtype),
                bool(m.valid[j]),
                float(m.reassigned_ratio[j]),
                float(m.latency_s[j]),
            )
            known[keys[i]] = entry
            self._put(keys[i], entry)
        paid = np.zeros(answered, dtype=bool)
        paid[todo] = True
        return Answer(self._assemble([known[k] for k in keys[:answered]], maps.shape[1:]), paid)

    def __contains__(self, key: bytes) -> bool:
        """The cache remembers ``key`` (its least-recently-used order is left as it is)."""
        return self.enabled and key in self._entries

    def lookup(self, key: bytes) -> Entry | None:
        """The answer remembered for ``key`` (now the most recently used), None if none,
        or, with ``reread``, if it is due to be read again (:meth:`due`)."""
        entry = self._entries.get(key) if self.enabled else None
        if entry is None:
            return None
        self._entries.move_to_end(key)
        if self.reread:
            reads = self._reads.setdefault(key, [1, 0])
            if self._due(reads):
                return None
            reads[1] += 1
        return entry

    def _due(self, reads: list[int]) -> bool:
        """A map of ``reads`` (readings, answers from memory since) is to be read again."""
        return reads[1] >= self.reread * reads[0]

    def peek(self, key: bytes) -> Entry | None:
        """The answer remembered for ``key`` (None if none), nothing counted or reordered."""
        return self._entries.get(key) if self.enabled else None

    def due(self, key: bytes) -> bool:
        """``key`` is remembered but due to be read again: :meth:`lookup` said None."""
        reads = self._reads.get(key)
        return bool(self.reread) and key in self and reads is not None and self._due(reads)

    def readings(self, key: bytes) -> int:
        """Readings averaged into the answer remembered for ``key`` (0: none remembered)."""
        if key not in self:
            return 0
        return self._reads.get(key, [1, 0])[0]

    def remember(self, key: bytes, rectified, valid, reassigned_ratio, latency_s) -> Entry | None:
        """Remember the measurement of the map of ``key`` (rectified ``[N, H]``) and return
        the answer now remembered for it. With ``reread``, a reading of a map remembered
        valid with a latency is averaged into its latency (a map whose validity differs
        keeps its first answer)."""
        if not self.enabled:
            return None
        entry = (
            np.asarray(rectified).astype(self.dtype),
            bool(valid),
            float(reassigned_ratio),
            float(latency_s),
        )
        old = self._entries.get(key) if self.reread else None
        if old is not None:
            reads = self._reads.setdefault(key, [1, 0])
            if old[1] == entry[1] and np.isfinite(old[3]) and np.isfinite(entry[3]):
                mean = (old[3] * reads[0] + entry[3]) / (reads[0] + 1)
                entry = (old[0], old[1], old[2], mean)
                reads[0] += 1
            else:
                entry = old
            reads[1] = 0
        elif self.reread:
            self._reads[key] = [1, 0]
        self._put(key, entry)
        return entry

    @staticmethod
    def _measure(measure, maps, probs, todo: np.ndarray) -> Measurement:
        if len(todo) == 0:
            n, h = maps.shape[1:]
            return Measurement(np.zeros((0, n, h), np.int64), np.zeros(0, bool), *np.zeros((2, 0)))
        return measure(maps[todo], None if probs is None else probs[todo])

    @staticmethod
    def _assemble(entries: list[Entry], shape: tuple[int, ...]) -> Measurement:
        """A :class:`Measurement` ``[A]`` from ``A`` entries."""
        if not entries:
            return Measurement(
                np.zeros((0, *shape), np.int64), np.zeros(0, bool), *np.zeros((2, 0))
            )
        rectified, valid, ratio, latency = zip(*entries)
        return Measurement(
            rectified=np.stack(rectified).astype(np.int64),
            valid=np.array(valid, dtype=bool),
            reassigned_ratio=np.array(ratio, dtype=np.float64),
            latency_s=np.array(latency, dtype=np.float64),
        )

    def _put(self, key: bytes, entry: Entry) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            gone, _ = self._entries.popitem(last=False)
            self._reads.pop(gone, None)

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """The entries as arrays, least recently used first (for :mod:`egrl.checkpoint`).

        ``keys`` uint8 ``[M, 16]``, ``rectified`` small int ``[M, N, H]``, ``valid`` bool
        ``[M]``, ``reassigned_ratio`` and ``latency_s`` float64 ``[M]``; with ``reread``
        also ``reads`` int64 ``[M, 2]`` (readings averaged, answers from memory since).
        """
        if not self._entries:
            return {"size": 0}
        rectified, valid, ratio, latency = zip(*self._entries.values())
        keys = np.frombuffer(b"".join(self._entries), dtype=np.uint8).reshape(-1, KEY_BYTES)
        state = {
            "size": len(self._entries),
            "keys": keys.copy(),
            "rectified": np.stack(rectified),
            "valid": np.array(valid, dtype=bool),
            "reassigned_ratio": np.array(ratio, dtype=np.float64),
            "latency_s": np.array(latency, dtype=np.float64),
        }
        if self.reread:
            reads = [self._reads.get(k, [1, 0]) for k in self._entries]
            state["reads"] = np.array(reads, dtype=np.int64).reshape(-1, 2)
        return state

    def load_state_dict(self, state: dict | None) -> None:
        """Inverse of :meth:`state_dict` (``None``, from a checkpoint without a cache: empty).

        Only the ``capacity`` most recently used entries are kept.
        """
        self._entries.clear()
        self._reads.clear()
        if not state or not int(state["size"]):
            return
        keys = np.asarray(state["keys"], dtype=np.uint8)
        rectified = np.asarray(state["rectified"]).astype(self.dtype)
        reads = state.get("reads")
        for i in range(len(keys)):
            entry = (
                rectified[i],
                bool(state["valid"][i]),
                float(state["reassigned_ratio"][i]),
                float(state["latency_s"][i]),
            )
            self._put(keys[i].tobytes(), entry)
            if self.reread:
                counts = [1, 0] if reads is None else [int(x) for x in reads[i]]
                self._reads[keys[i].tobytes()] = counts


def for_env(env, capacity: int, reread: int = 0) -> MeasureCache:
    """A cache of ``capacity`` maps for ``env`` (an :class:`egrl.env.Env`) that knows the
    compiler's map: binding the target measured it, so a run that proposes it is answered
    without paying again (a target that repairs from the policy's probabilities keys maps
    with them, and the compiler's map has none). On a noisy target (``env.deterministic``
    false) a map proposed again is answered from the mean of its readings and read again
    as ``reread`` says (ignored on a deterministic target); a run reads its best maps again
    at its end (:mod:`egrl.confirm`)."""
    cache = MeasureCache(capacity, env.max_choices, reread=0 if env.deterministic else reread)
    base = getattr(env, "baseline_measurement", None)
    if base is not None and not env.wants_probabilities:
        (key,) = cache.keys(env.baseline_mapping[None])
        cache.remember(
            key, base.rectified[0], base.valid[0], base.reassigned_ratio[0], base.latency_s[0]
        )
    return cache
