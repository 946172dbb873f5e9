"""Which maps a report shows: distinct maps, their groups, a seeded subsample, the encoding.

Groups follow the EGRL paper's Figure 5: *compiler-competitive* maps are valid maps whose
speedup over the compiler is within ``competitive_tol`` of 1.0; *best* maps are the valid
maps within ``best_within`` of the run's best speedup (or its ``top`` fastest). A map in
both groups counts as best.

Maps are encoded one-hot per unit and head (``[N * sum(C_h)]`` zeros and ones), so the
Euclidean distance between two encodings is ``sqrt(2 * d)`` where ``d`` is the number of
decisions on which the maps differ (their Hamming distance): every choice is a category,
none is "between" two others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from egrl import distinct
from egrl.env import Env


@dataclass
class MapSet:
    """The distinct maps of a run, in order of first evaluation.

    Attributes:
        maps: int64 ``[U, N, H]``.
        count: int64 ``[U]``: how often each map was evaluated.
        first_iteration: int64 ``[U]``: the iteration that evaluated it first.
        speedup: float64 ``[U]`` (0 if invalid).
        valid: bool ``[U]``.
        competitive: bool ``[U]``: compiler-competitive and not best.
        best: bool ``[U]``.
    """

    maps: np.ndarray
    count: np.ndarray
    first_iteration: np.ndarray
    speedup: np.ndarray
    valid: np.ndarray
    competitive: np.ndarray
    best: np.ndarray

    def __len__(self) -> int:
        return len(self.maps)

    def index_of(self, mapping: np.ndarray) -> int | None:
        """Position of ``mapping`` ``[N, H]`` in :attr:`maps`, or None."""
        hit = np.flatnonzero((self.maps == mapping[None]).all(axis=(1, 2)))
        return int(hit[0]) if len(hit) else None


def distinct_maps(
    maps: np.ndarray, speedup: np.ndarray, valid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Deduplicate ``maps`` ``[M, N, H]`` keeping first occurrences, in their order.

    Returns:
        ``(first, count, speedup, valid)``: int64 ``[U]`` positions in ``maps`` of the
        first occurrence of each distinct map, int64 ``[U]`` counts, and the speedup and
        validity of each (an evaluation is deterministic, so any occurrence's values).
    """
    if len(maps) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0), np.zeros(0, dtype=bool)
    first = distinct.first_rows(maps)
    return first, distinct.counts(maps, first), speedup[first], valid[first]


def best_mask(
    speedup: np.ndarray, valid: np.ndarray, best_within: float = 0.02, top: int | None = None
) -> np.ndarray:
    """bool ``[U]``: the best valid maps.

    Args:
        speedup, valid: float64 / bool ``[U]``.
        best_within: relative distance to the best speedup (0.02: within 2%).
        top: if given, the ``top`` fastest valid maps instead (earlier maps win ties).
    """
    out = np.zeros(len(speedup), dtype=bool)
    if not valid.any():
        return out
    if top is not None:
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top}")
        key = np.where(valid, speedup, -np.inf)
        order = np.argsort(-key, kind="stable")[:top]
        out[order[valid[order]]] = True
        return out
    if not 0 <= best_within < 1:
        raise ValueError(f"best_within must be in [0, 1), got {best_within}")
    return valid & (speedup >= (1.0 - best_within) * speedup[valid].max())


def competitive_mask(speedup: np.ndarray, valid: np.ndarray, tol: float = 0.05) -> np.ndarray:
    """bool ``[U]``: valid maps with ``|speedup - 1| <= tol``."""
    if tol < 0:
        raise ValueError(f"competitive tolerance must be >= 0, got {tol}")
    return valid & (np.abs(speedup - 1.0) <= tol)


def map_set(
    maps: np.ndarray,
    iteration: np.ndarray,
    speedup: np.ndarray,
    valid: np.ndarray,
    competitive_tol: float = 0.05,
    best_within: float = 0.02,
    top: int | None = None,
) -> MapSet:
    """The distinct maps of ``maps`` ``[M, N, H]`` with their groups (see the module docstring)."""
    first, count, sp, ok = distinct_maps(maps, speedup, valid)
    best = best_mask(sp, ok, best_within, top)
    return MapSet(
        maps=maps[first],
        count=count,
        first_iteration=iteration[first],
        speedup=sp,
        valid=ok,
        competitive=competitive_mask(sp, ok, competitive_tol) & ~best,
        best=best,
    )


def subsample(ms: MapSet, max_maps: int, rng: np.random.Generator) -> np.ndarray:
    """At most ``max_maps`` positions into ``ms``, sorted.

    The best maps are always kept (their fastest ``max_maps // 2`` if there are more);
    the rest is a uniform draw from the other maps, so the groups keep their proportions.
    """
    if max_maps < 1:
        raise ValueError(f"max_maps must be >= 1, got {max_maps}")
    if len(ms) <= max_maps:
        return np.arange(len(ms))
    best = np.flatnonzero(ms.best)
    if len(best) > max_maps // 2:
        best = best[np.argsort(-ms.speedup[best], kind="stable")[: max_maps // 2]]
    rest = np.setdiff1d(np.arange(len(ms)), best)
    drawn = rng.choice(rest, size=min(len(rest), max_maps - len(best)), replace=False)
    return np.sort(np.concatenate([best, drawn]))


def one_hot(maps: np.ndarray, num_choices: np.ndarray) -> np.ndarray:
    """float32 ``[B, N * sum(C_h)]``: each choice of ``maps`` ``[B, N, H]`` one-hot."""
    parts = [np.eye(int(c), dtype=np.float32)[maps[:, :, h]] for h, c in enumerate(num_choices)]
    return np.concatenate(parts, axis=2).reshape(len(maps), -1)


def active_decisions(env: Env) -> np.ndarray:
    """bool ``[N, H]``: decisions that place bytes somewhere.

    When the decision units are the workload's layers and a head is named ``"weight"``
    or ``"activation"`` (the NNP-I model), a layer without weights (an add, a pooling)
    or without output has nothing to place on that head; its choice is inert and the
    report leaves it out. Every other decision counts.
    """
    active = np.ones((env.num_units, env.num_heads), dtype=bool)
    w = env.workload
    if list(env.unit_names) != list(w.node_names):
        return active
    sizes = {"weight": w.weight_bytes, "activation": w.output_bytes}
    for h, head in enumerate(env.head_names):
        if head in sizes:
            active[:, h] = np.asarray(sizes[head]) > 0
    return active
