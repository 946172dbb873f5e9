"""The NNP-I cost model written as a CP-SAT model, term for term, in integer femtoseconds.

* Booleans ``x[t, level]``, exactly one per free tensor. A tensor is fixed to DRAM (no
  boolean) when it has no bytes or when every layer it touches is compute-bound even
  with all of that layer's tensors in DRAM (its level cannot change any time); that
  loses no optimum since DRAM never hurts capacity. LLC or SRAM is allowed only if the
  tensor fits there alone.
* Each layer ``i`` whose time depends on the map is modelled by its local
  configurations: one boolean ``y[i, c]`` per joint placement ``c`` of the free tensors
  it touches (its weight, its output, its producers' outputs), exactly one true,
  linked to ``x`` by ``sum(y[i, c] for c placing t on l) == x[t, l]``, costing the
  layer's exact time ``max(compute_i, mem_i(c))``. The LP relaxation is then the convex
  hull of every layer's roofline, far tighter than ``t_i >= compute_i, t_i >= mem_i``
  (which leaves ResNet-101 at a 16% gap after five minutes). Layers with more than
  ``max_configs`` placements fall back to ``t_i = max(compute_i, mem_i)``.
* Bank conflicts (costs with ``conflict``, :class:`~hwmodels.nnpi.cost.NodeCosts`) are
  priced exactly in each configuration's time, so a layer keeps its configurations up
  to ``max_configs ** 2`` placements; beyond, its roofline gains one boolean per pair of
  its tensors on a conflicting level, each pair's cost rounded on its own
  (``CpModelParts.rounding_fs`` bounds how far the objective may then be from the
  latency).
* LLC and SRAM capacity: one row per level and maximal set of activations live at the
  same step (:meth:`~hwmodels.nnpi.occupancy.Tensors.maximal_live_sets`), all weights
  on the level included.
* Objective: the sum of layer times, i.e. the latency; a solve may add per-tensor,
  per-level costs, a Hamming trust region around given maps and maps to exclude
  (:class:`Additions`), and then fixes no tensor to DRAM.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from hwmodels.nnpi.params import DRAM, LEVELS


@dataclass
class LayerModel:
    """How one layer ``i`` is modelled.

    Attributes:
        tensors: the free tensors it touches, its own weight first if free.
        levels: int64 ``[C, k]``: the level of each of them in each configuration
            (empty when the layer uses the fallback).
        y: the configuration booleans ``[C]`` (empty for the fallback).
        context: the layer's memory time without its weight read (fs), a linear
            expression of the activation booleans.
    """

    tensors: list[int]
    levels: np.ndarray
    y: list
    context: cp_model.LinearExprT


@dataclass
class CpModelParts:
    """A built CP-SAT model and the handles needed to hint it and read it back.

    Attributes:
        model: the model.
        x: ``x[(t, level)]`` for free tensors (the others are in DRAM).
        layers: per node, its :class:`LayerModel`, or None if its time is constant.
        objective: the objective expression (latency in fs).
        weight_classes: groups of nodes ordered by :mod:`hwmodels.nnpi.symmetry`.
        rounding_fs: how far the objective may be from the latency (fs): the conflict
            terms of fallback layers, rounded one by one (0 without them).
    """

    model: cp_model.CpModel
    x: dict
    layers: list
    objective: cp_model.LinearExprT
    weight_classes: list = field(default_factory=list)
    rounding_fs: int = 0

    @property
    def num_booleans(self) -> int:
        return len(self.x) + sum(len(m.y) for m in self.layers if m is not None)

    def is_free(self, t: int) -> bool:
        return (t, DRAM) in self.x


@dataclass(frozen=True)
class Additions:
    """What a solve adds to the cost model, in NNP-I's levels (every field optional).

    Attributes:
        extra_fs: int64 ``[N, 2, L]``: femtoseconds added to the objective when unit
            ``n``'s weight (1: output) is on level ``l``.
        trust_maps: int64 ``[M, N, 2]``: maps of levels; with ``trust_radius`` int64
            ``[M]``, the map solved must differ from some ``trust_maps[m]`` in at most
            ``trust_radius[m]`` units (a unit differs when its weight or output does).
        exclude: int64 ``[K, N, 2]``: maps the solve must not return (no-good cuts).
        fixed: int64 ``[N, 2]``: the level each unit's weight and output must keep (-1:
            free to choose): a neighbourhood of a large-neighbourhood search.
    """

    extra_fs: np.ndarray | None = None
    trust_maps: np.ndarray | None = None
    trust_radius: np.ndarray | None = None
    exclude: np.ndarray | None = None
    fixed: np.ndarray | None = None

    @property
    def empty(self) -> bool:
        """Nothing is added: the plain cost model (whose exact cuts then hold)."""
        fields = (self.extra_fs, self.trust_maps, self.exclude, self.fixed)
        return all(f is None for f in fields)


def add_additions(parts: CpModelParts, additions: Additions) -> cp_model.LinearExprT:
    """Add ``additions``' trust region and exclusions to ``parts.model``; returns the
    extra cost expression (fs) to add to the objective (0 without ``extra_fs``)."""
    model, x = parts.model, parts.x
    n = len(parts.layers)

    def same(t: int, lv: int):
        """The literal "tensor ``t`` is on ``lv``": a boolean, or True/False when fixed."""
        if (t, lv) in x:
            return x[(t, lv)]
        return not parts.is_free(t) and lv == DRAM

    extra: cp_model.LinearExprT = 0
    if additions.extra_fs is not None:
        cost = np.asarray(additions.extra_fs, dtype=np.int64).reshape(2 * n, len(LEVELS))
        extra = int(sum(cost[t, DRAM] for t in range(2 * n) if not parts.is_free(t)))
        extra += sum(int(cost[t, lv]) * var for (t, lv), var in x.items() if cost[t, lv])
    if additions.trust_maps is not None:
        inside = []
        for m, (levels, radius) in enumerate(zip(additions.trust_maps, additions.trust_radius)):
            flat = np.asarray(levels, dtype=np.int64).reshape(-1)
            kept = []
            for u in range(n):
                a, b = same(2 * u, int(flat[2 * u])), same(2 * u + 1, int(flat[2 * u + 1]))
                if a is False or b is False:
                    continue
                if a is True and b is True:
                    kept.append(1)
                    continue
                keep = model.new_bool_var(f"same{m}_{u}")
                for lit in (a, b):
                    if lit is not True:
                        model.add_implication(keep, lit)
                kept.append(keep)
            ball = model.new_bool_var(f"ball{m}")
            model.add(n - sum(kept) <= int(radius)).only_enforce_if(ball)
            inside.append(ball)
        model.add_bool_or(inside if inside else [False])
    if additions.fixed is not None:
        for t, lv in enumerate(np.asarray(additions.fixed, dtype=np.int64).reshape(-1)):
            if lv < 0:
                continue
            lit = same(t, int(lv))
            if lit is False:
                model.add_bool_or([False])  # a level the model does not allow: infeasible
            elif lit is not True:
                model.add(lit == 1)
    if additions.exclude is not None:
        for levels in additions.exclude:
            flat = np.asarray(levels, dtype=np.int64).reshape(-1)
            lits = [same(t, int(lv)) for t, lv in enumerate(flat)]
            if any(lit is False for lit in lits):
                continue  # the map is excluded by the model already
            free = [lit for lit in lits if lit is not True]
            model.add_bool_or([lit.Not() for lit in free] if free else [False])
    return extra


def touched_nodes(workload) -> list[list[int]]:
    """For each tensor (``2i`` weight, ``2i + 1`` output of node ``i``), the nodes whose
    memory time depends on its level."""
    n = workload.num_nodes
    src, dst = workload.edge_index
    touched: list[list[int]] = [[t // 2] for t in range(2 * n)]
    for p, i in zip(src.tolist(), dst.tolist()):
        touched[2 * p + 1].append(i)
    return touched


def free_nodes(target) -> np.ndarray:
    """bool ``[N]``: nodes whose time can depend on the levels: memory-bound with every
    tensor they touch on its slowest level (DRAM where the levels are ordered by speed;
    a calibrated prior's set-up times can make an on-chip level slower for a small
    tensor, and a node compute-bound in DRAM then memory-bound there). With bank
    conflicts, every transfer may meet every other one on the most conflicting level."""
    costs = target.costs
    worst_output = costs.output_fs.max(axis=1)
    worst = (
        costs.weight_fs.max(axis=1)
        + worst_output
        + np.asarray(costs.consumers_of @ worst_output).reshape(-1)
        + costs.host_fs
    )
    if costs.conflict is not None:
        sent = (costs.output_fs.max(axis=1) > 0).astype(np.int64)
        count = (costs.weight_fs.max(axis=1) > 0) + sent + costs.consumers_of @ sent
        worst = worst * (1.0 + costs.conflict.max() * np.maximum(count - 1, 0))
    return worst > costs.compute_fs


def allowed_levels(
    target,
    touched: list[list[int]],
    free: np.ndarray,
    permitted: np.ndarray | None = None,
    every: bool = False,
) -> list[list[int]]:
    """Levels each tensor may take; ``[DRAM]`` alone for tensors fixed to DRAM.

    Args:
        permitted: bool ``[2, L]``: the levels the weights (row 0) and the outputs (row 1)
            may use (every level by default; DRAM always).
        every: fix no tensor to DRAM (a solve with :class:`Additions`, whose costs,
            trust region or exclusions may tell apart maps of equal latency).
    """
    nbytes, cap = target.tensors.nbytes, target.capacity
    permitted = np.ones((2, len(LEVELS)), dtype=bool) if permitted is None else permitted
    allowed = []
    for t, nodes in enumerate(touched):
        size = int(nbytes[t])
        faster = [lv for lv in range(1, len(LEVELS)) if size <= cap[lv] and permitted[t % 2, lv]]
        fixed = size == 0 or not free[nodes].any()
        allowed.append([DRAM] + (faster if every or not fixed else []))
    return allowed


def modelled_tensors(target, touched: list[list[int]], free: np.ndarray) -> np.ndarray:
    """bool ``[T]``: tensors whose level can change some layer's time (bytes, and a layer
    that is memory-bound with everything in DRAM)."""
    nbytes = target.tensors.nbytes
    return np.array([nbytes[t] > 0 and free[nodes].any() for t, nodes in enumerate(touched)])


def saving_fs(target) -> np.ndarray:
    """int64 ``[T, L]``: memory time saved (<= 0 added) by each tensor on each level."""
    costs = target.costs
    per_level = np.stack([costs.weight_fs, costs.output_fs], axis=1).reshape(-1, len(LEVELS))
    return per_level - per_level[:, DRAM : DRAM + 1]


def build_model(
    target,
    max_configs: int = 243,
    permitted: np.ndarray | None = None,
    additions: Additions | None = None,
) -> CpModelParts:
    """The CP-SAT model of ``target`` (an :class:`~hwmodels.nnpi.target.NNPITarget`).

    Args:
        max_configs: a layer with more joint placements is modelled by its roofline.
        permitted: bool ``[2, L]``, see :func:`allowed_levels`.
        additions: costs, a trust region and exclusions added to the model
            (:func:`add_additions`); then no tensor is fixed to DRAM.
    """
    costs, n = target.costs, target.num_units
    model = cp_model.CpModel()
    touched = touched_nodes(target.workload)
    free = free_nodes(target)
    every = additions is not None and not additions.empty
    allowed = allowed_levels(target, touched, free, permitted, every)
    modelled = modelled_tensors(target, touched, free)
    saving = saving_fs(target)
    all_dram = costs.memory_fs(np.zeros((1, n, 2), dtype=np.int64))[0]
    table_limit = max_configs if costs.conflict is None else max_configs**2
    rounding = 0

    x: dict[tuple[int, int], cp_model.IntVar] = {}
    for t, levels in enumerate(allowed):
        if len(levels) > 1:
            for lv in levels:
                x[(t, lv)] = model.new_bool_var(f"x{t}_{LEVELS[lv]}")
            model.add_exactly_one(x[(t, lv)] for lv in levels)
    touching: list[list[int]] = [[] for _ in range(n)]
    for t, nodes in enumerate(touched):
        if len(allowed[t]) > 1 and modelled[t]:
            for i in nodes:
                touching[i].append(t)

    objective: list = [int(costs.compute_fs[~free].sum())]
    layers: list = [None] * n
    for i in np.flatnonzero(free).tolist():
        mine = sorted(touching[i], key=lambda t, w=2 * i: t != w)  # own weight first
        base, compute = int(all_dram[i]), int(costs.compute_fs[i])
        context = (base - int(costs.weight_fs[i, DRAM])) + sum(
            int(saving[t, lv]) * x[(t, lv)]
            for t in mine
            if t != 2 * i
            for lv in allowed[t]
            if lv != DRAM
        )
        if math.prod(len(allowed[t]) for t in mine) <= table_limit:
            layer = _configurations(model, x, i, mine, allowed, context)
            memory = base + saving[mine, layer.levels].sum(axis=1)
            if costs.conflict is not None:
                memory = memory + _configuration_conflicts(costs, i, mine, layer.levels)
            time_fs = np.maximum(memory, compute)
            low = int(time_fs.min())
            objective.append(low)
            objective.extend(int(f - low) * v for f, v in zip(time_fs, layer.y) if f > low)
        else:
            layer = LayerModel(mine, np.zeros((0, len(mine)), dtype=np.int64), [], context)
            pairs, terms = _pair_conflicts(model, x, costs, i, mine, allowed)
            rounding += terms
            objective.append(
                _roofline_var(model, x, i, mine, allowed, saving, base, compute, pairs)
            )
        layers[i] = layer

    _add_capacity_rows(model, x, target.tensors, target.capacity)
    total = sum(objective)
    parts = CpModelParts(model, x, layers, total, rounding_fs=rounding)
    extra = add_additions(parts, additions) if every else 0
    model.minimize(total + extra)
    return parts


def _configurations(model, x, i, mine, allowed, context) -> LayerModel:
    """Configuration booleans of layer ``i``, linked to ``x``."""
    levels = np.array(list(itertools.product(*(allowed[t] for t in mine))), dtype=np.int64)
    levels = levels.reshape(len(levels), len(mine))
    y = [model.new_bool_var(f"y{i}_{c}") for c in range(len(levels))]
    model.add_exactly_one(y)
    for k, t in enumerate(mine):
        for lv in allowed[t]:
            model.add(sum(y[c] for c in np.flatnonzero(levels[:, k] == lv)) == x[(t, lv)])
    return LayerModel(mine, levels, y, context)


def tensor_transfers(costs, i: int, tensors: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """What each of ``tensors`` (touched by node ``i``) moves for ``i``: float64 ``[k, L]``
    its transfer time on each level (a producer's output once per read) and int64
    ``[k, L]`` its transfers there (:meth:`~hwmodels.nnpi.cost.NodeCosts.conflict_fs`)."""
    time = np.zeros((len(tensors), costs.weight_fs.shape[1]))
    for k, t in enumerate(tensors):
        node = t // 2
        if t == 2 * i:
            time[k] = costs.weight_fs[i]
        elif t == 2 * i + 1:
            time[k] = costs.output_fs[i]
        else:
            time[k] = costs.output_fs[node] * costs.consumers_of[i, node]
    reads = np.array([1 if t // 2 == i else costs.consumers_of[i, t // 2] for t in tensors])
    return time, (time > 0) * reads[:, None]


def _configuration_conflicts(costs, i: int, tensors: list[int], levels: np.ndarray) -> np.ndarray:
    """int64 ``[C]``: the conflicts node ``i`` pays in each configuration ``levels``
    ``[C, k]`` of its free ``tensors`` (the others sit in DRAM, which has none)."""
    time, count = tensor_transfers(costs, i, tensors)
    extra = np.zeros(len(levels))
    for lv in np.flatnonzero(costs.conflict > 0).tolist():
        on = levels == lv  # [C, k]
        extra += costs.conflict[lv] * (on @ time[:, lv]) * np.maximum(on @ count[:, lv] - 1, 0)
    return np.round(extra).astype(np.int64)


def _pair_conflicts(model, x, costs, i, tensors, allowed) -> tuple[list, int]:
    """The conflicts of node ``i`` as ``(coefficient, literal)`` terms: per level ``l``,
    ``T (K - 1) = sum_t time_t (n_t - 1) x_t + sum_{t<u} (time_t n_u + time_u n_t) x_t x_u``
    with one boolean per pair; returns the terms and how many were rounded."""
    terms: list = []
    if costs.conflict is None:
        return terms, 0
    time, count = tensor_transfers(costs, i, tensors)
    for lv in np.flatnonzero(costs.conflict > 0).tolist():
        f = float(costs.conflict[lv])
        on = [k for k, t in enumerate(tensors) if lv in allowed[t]]
        for k in on:
            if count[k, lv] > 1:
                terms.append((f * time[k, lv] * (count[k, lv] - 1), x[(tensors[k], lv)]))
        for a, b in itertools.combinations(on, 2):
            cost = f * (time[a, lv] * count[b, lv] + time[b, lv] * count[a, lv])
            if cost:
                both = model.new_bool_var(f"pair{i}_{tensors[a]}_{tensors[b]}_{lv}")
                xa, xb = x[(tensors[a], lv)], x[(tensors[b], lv)]
                model.add_implication(both, xa)
                model.add_implication(both, xb)
                model.add_bool_or([xa.Not(), xb.Not(), both])
                terms.append((cost, both))
    return [(int(round(c)), v) for c, v in terms], len(terms)


def _roofline_var(
    model, x, i, mine, allowed, saving, base, compute, conflicts=()
) -> cp_model.IntVar:
    """``t_i = max(compute_i, mem_i)`` for a layer with too many configurations
    (``conflicts``: ``(fs, literal)`` terms added to its memory time)."""
    expr = base + sum(
        int(saving[t, lv]) * x[(t, lv)] for t in mine for lv in allowed[t] if lv != DRAM
    )
    expr = expr + sum(c * v for c, v in conflicts)
    least = base + int(sum(saving[t, allowed[t]].min() for t in mine))
    most = base + int(sum(saving[t, allowed[t]].max() for t in mine))  # > base: a slow level
    most += int(sum(c for c, _ in conflicts))
    mem = model.new_int_var(min(0, least), most, f"mem{i}")
    model.add(mem == expr)
    ti = model.new_int_var(max(compute, least), max(compute, most), f"t{i}")
    model.add_max_equality(ti, [compute, mem])
    return ti


def _add_capacity_rows(model: cp_model.CpModel, x: dict, tensors, cap: np.ndarray) -> None:
    """One row per on-chip level and maximal live set of activations."""
    live_sets = tensors.maximal_live_sets() or [np.zeros(0, dtype=np.int64)]
    weights = np.flatnonzero(tensors.is_weight)
    for lv in range(1, len(LEVELS)):
        fixed = [(int(tensors.nbytes[t]), x[(t, lv)]) for t in weights if (t, lv) in x]
        for live in live_sets:
            row = fixed + [(int(tensors.nbytes[t]), x[(t, lv)]) for t in live if (t, lv) in x]
            if sum(b for b, _ in row) > cap[lv]:
                model.add(sum(b * v for b, v in row) <= int(cap[lv]))


def complete_hint(parts: CpModelParts, levels: np.ndarray, time_limit_s: float) -> bool:
    """Hint every variable of the model from tensor levels int64 ``[T]`` (a valid map):
    a copy with the map's booleans fixed is solved (the layers' configurations follow
    from them) and its whole solution becomes the hint, which the solver then holds as
    its first map. Hinting the booleans alone left CP-SAT without any map after 60 s on
    a 290-layer decode step. Returns False, and hints the booleans only
    (:func:`add_hint`), if the copy finds no solution within ``time_limit_s``."""
    fixed = parts.model.clone()
    for (t, lv), var in parts.x.items():
        fixed.add(fixed.get_bool_var_from_proto_index(var.index) == int(levels[t] == lv))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = 1
    if solver.solve(fixed) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        add_hint(parts, levels)
        return False
    parts.model.clear_hints()
    for index in range(len(parts.model.proto.variables)):
        value = solver.value(fixed.get_int_var_from_proto_index(index))
        parts.model.add_hint(parts.model.get_int_var_from_proto_index(index), value)
    return True


def add_hint(parts: CpModelParts, levels: np.ndarray) -> None:
    """Hint every boolean from tensor levels int64 ``[T]`` (a valid map)."""
    for (t, lv), var in parts.x.items():
        parts.model.add_hint(var, bool(levels[t] == lv))
    for layer in parts.layers:
        if layer is not None and layer.y:
            chosen = (layer.levels == levels[layer.tensors]).all(axis=1)
            for c, var in enumerate(layer.y):
                parts.model.add_hint(var, bool(chosen[c]))
