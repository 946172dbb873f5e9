"""Maximal maps: an exact dominance cut.

Moving one tensor to a faster level that still fits at every step of its lifetime keeps
the map valid and never slows any layer (each level is faster per byte than the one
below). Repeating such moves ends (levels only rise), so some optimum is *maximal*: no
free tensor can move to a faster allowed level. Sorting interchangeable weights
(:mod:`hwmodels.nnpi.symmetry`) permutes equal-size weights between levels, which leaves
every level's occupancy unchanged and so keeps a map maximal; some optimum is therefore
maximal and sorted at once.

Maximality is written with the slack of each capacity row (one per level and maximal set
of live activations): a tensor below level ``L`` must not fit there, i.e. the smallest
slack of the rows of ``L`` that contain it (all rows, for a weight) is below its size.
Without it, the many placements that differ only by a tensor sitting in LLC while SRAM
has room (or in DRAM while LLC has) are all near-optimal and the weight-ordering cut
cannot tell their contexts apart.
"""

from __future__ import annotations

import numpy as np

from hwmodels.nnpi.cpmodel import CpModelParts
from hwmodels.nnpi.params import LEVELS


def levels_are_monotone(target) -> bool:
    """Each level is strictly faster per byte than the one below (the cuts need it)."""
    return bool(np.all(np.diff(target.params.fs_per_byte) < 0))


def add_maximality(target, parts: CpModelParts) -> None:
    """Require every free tensor below a faster allowed level not to fit there."""
    tensors, cap, model, x = target.tensors, target.capacity, parts.model, parts.x
    live_sets = tensors.maximal_live_sets() or [np.zeros(0, dtype=np.int64)]
    weights = np.flatnonzero(tensors.is_weight)
    for lv in range(1, len(LEVELS)):
        slacks, lows = [], []
        for r, live in enumerate(live_sets):
            members = [int(t) for t in np.concatenate([weights, live]) if (t, lv) in x]
            used = sum(int(tensors.nbytes[t]) * x[(t, lv)] for t in members)
            low = int(cap[lv]) - int(sum(tensors.nbytes[t] for t in members))
            slack = model.new_int_var(low, int(cap[lv]), f"slack{lv}_{r}")
            model.add(slack == int(cap[lv]) - used)
            slacks.append(slack)
            lows.append(low)
        holders = {t: [r for r, live in enumerate(live_sets) if t in live] for t in _free(parts)}
        for t in _free(parts):
            if (t, lv) not in x:
                continue
            rows = range(len(live_sets)) if tensors.is_weight[t] else holders[t]
            tight = model.new_int_var(min(lows[r] for r in rows), int(cap[lv]), f"m{t}_{lv}")
            model.add_min_equality(tight, [slacks[r] for r in rows])
            below = [x[(t, low)] for low in range(lv) if (t, low) in x]
            for var in below:
                model.add(tight <= int(tensors.nbytes[t]) - 1).only_enforce_if(var)


def _free(parts: CpModelParts) -> list[int]:
    return sorted({t for t, _ in parts.x})


def maximize(target, parts: CpModelParts, levels: np.ndarray) -> np.ndarray:
    """int64 ``[T]``: ``levels`` (a valid map) with free tensors raised while they fit."""
    free = _free(parts)
    levels = np.where(np.isin(np.arange(len(levels)), free), levels, 0)
    live = target.tensors.live()
    changed = True
    while changed:
        changed = False
        occupancy = target.tensors.occupancy(levels[None])[0]  # [L, N]
        for t in free:
            for lv in range(len(LEVELS) - 1, levels[t], -1):
                if (t, lv) not in parts.x:
                    continue
                need = occupancy[lv, live[t]] + target.tensors.nbytes[t]
                if (need <= target.capacity[lv]).all():
                    occupancy[levels[t], live[t]] -= target.tensors.nbytes[t]
                    occupancy[lv, live[t]] += target.tensors.nbytes[t]
                    levels[t] = lv
                    changed = True
                    break
    return levels
