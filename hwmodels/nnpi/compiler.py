"""The NNP-I compiler model: the rectifier C of Algorithm 1 and the native heuristic.

Both are built on one primitive, :func:`first_fit`: tensors asking for a level are
admitted one by one in a given priority order if they fit there at every step of
their lifetime next to those already admitted; the others are refused.

* :func:`rectify` (the compiler C) runs it for SRAM, then for LLC, in execution order
  (for each node its weight, then its activation). Refused SRAM requests are demoted
  to LLC and join the LLC pass; refused LLC requests are demoted to DRAM.
* :func:`native_levels` (the compiler's own map) asks for every tensor that helps,
  SRAM first in decreasing order of latency saved per byte, then LLC with the rest.
* :func:`sequential_levels` is a plainer compiler, for studies that want more room
  above the baseline: tensor by tensor in execution order, the fastest level where it
  still fits, whether or not its layer gains anything there.
"""

from __future__ import annotations

import numpy as np

from hwmodels.nnpi.cost import NodeCosts
from hwmodels.nnpi.occupancy import Tensors
from hwmodels.nnpi.params import DRAM, LLC, SRAM


def first_fit(
    requests: np.ndarray, order: np.ndarray, tensors: Tensors, capacity: int
) -> np.ndarray:
    """Admit requested tensors to one level in priority order, first fit.

    Args:
        requests: bool ``[T, B]``: tensor ``t`` of map ``b`` asks for the level.
        order: int ``[K]``: tensor indices in priority order (tensors not listed are
            never admitted).
        tensors: sizes and lifetimes.
        capacity: bytes of the level.

    Returns:
        bool ``[T, B]``: admitted tensors.
    """
    num_maps = requests.shape[1]
    admitted = np.zeros_like(requests)
    weights = np.zeros(num_maps, dtype=np.int64)  # bytes of admitted weights
    acts = np.zeros((tensors.num_steps, num_maps), dtype=np.int64)  # live activation bytes
    peak = np.zeros(num_maps, dtype=np.int64)  # max over steps of ``acts``
    for t in order:
        asked = requests[t]
        size = tensors.nbytes[t]
        if size == 0:
            admitted[t] = asked
            continue
        if size > capacity or not asked.any():
            continue
        if tensors.is_weight[t]:
            fits = asked & (weights + peak <= capacity - size)
            weights += size * fits
        else:
            span = acts[tensors.start[t] : tensors.end[t] + 1]
            high = span.max(axis=0)
            fits = asked & (weights + high <= capacity - size)
            span += size * fits
            np.maximum(peak, (high + size) * fits, out=peak)
        admitted[t] = fits
    return admitted


def rectify(levels: np.ndarray, tensors: Tensors, capacity: np.ndarray) -> np.ndarray:
    """The compiler C: the nearest executable map under first-fit demotion.

    Args:
        levels: int64 ``[B, T]``: requested level of every tensor.
        tensors: sizes and lifetimes.
        capacity: int64 ``[3]``: bytes of DRAM, LLC, SRAM.

    Returns:
        int64 ``[B, T]``: the rectified levels. A valid map is returned unchanged.
    """
    order = np.arange(len(tensors.nbytes))
    asked = np.ascontiguousarray(levels.T)  # [T, B]
    sram_asked = asked == SRAM
    in_sram = first_fit(sram_asked, order, tensors, int(capacity[SRAM]))
    llc_asked = (asked == LLC) | (sram_asked & ~in_sram)
    in_llc = first_fit(llc_asked, order, tensors, int(capacity[LLC]))
    out = np.where(in_sram, SRAM, np.where(in_llc, LLC, DRAM))
    return np.ascontiguousarray(out.T)


def density_order(savings: np.ndarray, tensors: Tensors) -> np.ndarray:
    """Indices of the tensors that save time, in decreasing saving per byte (stable)."""
    useful = np.flatnonzero((savings > 0) & (tensors.nbytes > 0))
    density = savings[useful] / tensors.nbytes[useful]
    return useful[np.argsort(-density, kind="stable")]


def greedy_fill(
    costs: NodeCosts, tensors: Tensors, capacity: np.ndarray, base: np.ndarray
) -> np.ndarray:
    """Fill SRAM, then LLC, by decreasing benefit density measured against ``base``.

    The saving of a tensor at a level is measured by moving it alone from DRAM to that
    level, every other tensor keeping its place in ``base`` (int64 ``[T]``; all DRAM
    for the first pass). The map is built from scratch: SRAM takes the useful
    tensors first-fit in decreasing saving per byte, LLC the useful rest likewise.

    Returns:
        int64 ``[T]``: the level of every tensor.
    """
    num = len(tensors.nbytes)
    start = np.where(np.eye(num, dtype=bool), DRAM, base[None, :])  # each tensor in DRAM
    placed = np.ascontiguousarray(levels_to_maps(start, costs.num_nodes))
    at_dram = costs.latency_fs(placed)
    levels = np.full(num, DRAM, dtype=np.int64)
    taken = np.zeros(num, dtype=bool)
    for level in (SRAM, LLC):
        moved = placed.reshape(num, num).copy()
        moved[np.arange(num), np.arange(num)] = level
        savings = at_dram - costs.latency_fs(levels_to_maps(moved, costs.num_nodes))
        order = density_order(np.where(taken, 0, savings), tensors)
        requests = np.zeros((num, 1), dtype=bool)
        requests[order] = True
        admitted = first_fit(requests, order, tensors, int(capacity[level]))[:, 0]
        levels[admitted] = level
        taken |= admitted
    return levels


def native_levels(
    costs: NodeCosts, tensors: Tensors, capacity: np.ndarray, passes: int = 2
) -> np.ndarray:
    """The native compiler's map: benefit-density greedy, refined ``passes - 1`` times.

    Pass 1 measures each tensor's saving against the all-DRAM map. Each further pass
    re-measures the savings against the best map so far (a tensor whose layer became
    compute-bound stops looking useful) and refills; the compiler keeps the fastest
    map it built (its own cost model decides).

    Returns:
        int64 ``[T]``: the level of every tensor (always a valid map).
    """
    num = len(tensors.nbytes)
    best = np.full(num, DRAM, dtype=np.int64)
    best_fs = costs.latency_fs(levels_to_maps(best[None], costs.num_nodes))[0]
    for _ in range(passes):
        levels = greedy_fill(costs, tensors, capacity, best)
        fs = costs.latency_fs(levels_to_maps(levels[None], costs.num_nodes))[0]
        if fs >= best_fs:
            break
        best, best_fs = levels, fs
    return best


def sequential_levels(tensors: Tensors, capacity: np.ndarray) -> np.ndarray:
    """Each tensor, in execution order, on the fastest level where it still fits.

    This is the rectifier applied to the map that asks for SRAM everywhere: the SRAM
    pass admits in execution order, and what it refuses tries LLC in the same order.

    Returns:
        int64 ``[T]``: the level of every tensor (always a valid map).
    """
    everything_in_sram = np.full((1, len(tensors.nbytes)), SRAM, dtype=np.int64)
    return rectify(everything_in_sram, tensors, capacity)[0]


#: the native compilers :class:`~hwmodels.nnpi.target.NNPI` can model (``native=...``)
NATIVE_COMPILERS = ("density", "sequential")


def levels_to_maps(levels: np.ndarray, num_nodes: int) -> np.ndarray:
    """int ``[B, T]`` tensor levels -> int ``[B, N, 2]`` maps (weight, activation)."""
    return levels.reshape(len(levels), num_nodes, 2)
