"""Ordering the weights of interchangeable layers: an exact symmetry cut.

Two layers ``i`` and ``j`` are *weight-interchangeable* when their weights have the
same size and the same allowed levels and the layers have the same compute time.
Write a layer's time as ``g(W + A)`` with ``g(s) = max(compute, s)``, ``W`` its weight
read time (a function of its weight level only, the same for both) and ``A`` its
context: the rest of its memory time (activations and host inputs).

Exchange argument: for contexts ``A_j <= A_i`` and weight times ``w_fast <= w_slow``,
the four sums satisfy ``w_fast + A_j <= {w_fast + A_i, w_slow + A_j} <= w_slow + A_i``
with equal totals, so by convexity of ``g``
``g(w_slow + A_i) + g(w_fast + A_j) >= g(w_fast + A_i) + g(w_slow + A_j)``: giving the
faster weight to the layer with the larger context never hurts. Swapping the levels
of two equal-size weights changes no capacity row (weights occupy every step) and no
other layer's time. Hence sorting, within every class, the layers by (context
descending, index ascending) and handing out the weight levels fastest first maps any
optimum to an optimum, which therefore satisfies, for ``i < j`` of one class:

* ``level_i < level_j  =>  A_i < A_j``
* ``level_i > level_j  =>  A_i >= A_j``

These are the constraints added here. ResNet stages repeat identical blocks, and the
solver otherwise has to refute every choice of which blocks keep their weights in DRAM.
The cut only bites between layers whose contexts are known, so it works together with
the dominance cut of :mod:`hwmodels.nnpi.dominance` (with this cut alone, ResNet-101 was
still 0.014% from its bound after 25 minutes on 2 threads; with both it is proven).
"""

from __future__ import annotations

import logging

import numpy as np

from hwmodels.nnpi.cpmodel import CpModelParts, saving_fs
from hwmodels.nnpi.params import LEVELS

log = logging.getLogger(__name__)


def weight_classes(target, parts: CpModelParts) -> list[list[int]]:
    """Groups (ascending, size >= 2) of weight-interchangeable layers modelled by their
    configurations with a free weight."""
    groups: dict = {}
    for i, layer in enumerate(parts.layers):
        if layer is None or not layer.y or not parts.is_free(2 * i):
            continue
        allowed = tuple(lv for lv in range(len(LEVELS)) if (2 * i, lv) in parts.x)
        key = (int(target.tensors.nbytes[2 * i]), int(target.costs.compute_fs[i]), allowed)
        groups.setdefault(key, []).append(i)
    return [nodes for nodes in groups.values() if len(nodes) > 1]


def config_contexts(target, layer) -> np.ndarray:
    """int64 ``[C]``: the context ``A`` (fs) of a layer in each of its configurations."""
    i = layer.tensors[0] // 2
    base = target.costs.memory_fs(np.zeros((1, target.num_units, 2), dtype=np.int64))[0, i]
    saving = saving_fs(target)
    context = np.full(len(layer.levels), base - target.costs.weight_fs[i, 0], dtype=np.int64)
    for k, t in enumerate(layer.tensors[1:], start=1):
        context += saving[t, layer.levels[:, k]]
    return context


def add_weight_order(target, parts: CpModelParts, max_terms: int = 4_000_000) -> None:
    """Add the ordering of the module docstring for every class.

    For layers ``i < j`` of a class and each configuration ``c`` of ``i`` (which fixes
    its weight level and context), the configurations ``d`` of ``j`` that would break
    the order are excluded together: ``y[i, c] + sum(y[j, d] for d in conflict(c)) <= 1``.
    """
    model, added = parts.model, 0
    for nodes in weight_classes(target, parts):
        tables = {
            i: (parts.layers[i].levels[:, 0], config_contexts(target, parts.layers[i]))
            for i in nodes
        }
        rows = []
        for a, i in enumerate(nodes):
            wi, ai = tables[i]
            for j in nodes[a + 1 :]:
                wj, aj = tables[j]
                conflict = ((wi[:, None] < wj[None, :]) & (ai[:, None] >= aj[None, :])) | (
                    (wi[:, None] > wj[None, :]) & (ai[:, None] < aj[None, :])
                )
                rows.extend((i, j, c, np.flatnonzero(conflict[c])) for c in range(len(wi)))
        terms = sum(len(d) + 1 for *_, d in rows)
        if added + terms > max_terms:
            log.info("weight ordering skipped for a class of %d layers", len(nodes))
            continue
        parts.weight_classes.append(nodes)
        added += terms
        for i, j, c, ds in rows:
            if len(ds):
                yj = parts.layers[j].y
                model.add(parts.layers[i].y[c] + sum(yj[d] for d in ds) <= 1)


def canonical_levels(target, parts: CpModelParts, levels: np.ndarray) -> np.ndarray:
    """int64 ``[T]``: ``levels`` with fixed tensors in DRAM and every class's weights
    sorted as the constraints require; never slower, same validity."""
    levels = levels.copy()
    fixed = [t for t in range(len(levels)) if not parts.is_free(t)]
    levels[fixed] = 0
    maps = levels.reshape(1, -1, 2)
    context = (
        target.costs.memory_fs(maps)[0]
        - target.costs.weight_fs[np.arange(target.num_units), maps[0, :, 0]]
    )
    for nodes in parts.weight_classes:
        order = sorted(nodes, key=lambda i: (-int(context[i]), i))
        weights = [2 * i for i in order]
        levels[weights] = np.sort(levels[weights])[::-1]
    return levels
