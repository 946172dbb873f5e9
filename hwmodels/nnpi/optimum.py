"""The exact optimum of the NNP-I cost model with OR-tools CP-SAT.

The CP-SAT model is the evaluator's model, term for term, in the same integer
femtoseconds:

* one boolean per tensor and allowed on-chip level (LLC, SRAM: allowed if the tensor
  fits it alone), at most one true per tensor (none: DRAM); zero-byte tensors and tensors that cannot change
  any layer's time (every layer they touch is compute-bound even with all of its
  tensors in DRAM) are fixed to DRAM, which loses no optimum;
* ``t_i >= compute_i`` (its domain) and ``t_i >= mem_i``, linear in the booleans;
* for LLC and SRAM, one capacity row per maximal set of activations live together:
  ``sum(weights there) + sum(live activations there) <= capacity``;
* minimise ``sum_i t_i``; the native compiler's map is the hint.

The implicit DRAM level is the one-hot over three levels with one boolean fewer.
"""

from __future__ import annotations

import logging
import time

import numpy as np
from ortools.sat.python import cp_model

from hwmodels.base import OptimumResult
from hwmodels.nnpi.params import DRAM, FS_PER_S, LEVELS

log = logging.getLogger(__name__)


class _Progress(cp_model.CpSolverSolutionCallback):
    """Logs every improving solution with the current bound."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.start = time.perf_counter()

    def on_solution_callback(self) -> None:
        log.info(
            "%s: solution %.6f ms, bound %.6f ms after %.1f s",
            self.name,
            self.ObjectiveValue() / 1e12,
            self.BestObjectiveBound() / 1e12,
            time.perf_counter() - self.start,
        )


def _touched_nodes(target) -> list[list[int]]:
    """For each tensor, the nodes whose memory time depends on its level."""
    n = target.num_units
    src, dst = target.workload.edge_index
    touched: list[list[int]] = [[t // 2] for t in range(2 * n)]
    for p, i in zip(src.tolist(), dst.tolist()):
        touched[2 * p + 1].append(i)
    return touched


def build_model(target) -> tuple[cp_model.CpModel, dict, list, int]:
    """The CP-SAT model of ``target`` (an :class:`~hwmodels.nnpi.target.NNPITarget`).

    Returns:
        ``(model, x, times, constant)``: ``x[(t, level)]`` the booleans,
        ``times[i]`` node ``i``'s time (an ``IntVar`` or an int), ``constant`` the part
        of the objective that no decision changes.
    """
    costs, tensors, cap = target.costs, target.tensors, target.capacity
    n = target.num_units
    model = cp_model.CpModel()
    all_dram = costs.memory_fs(np.zeros((1, n, 2), dtype=np.int64))[0]
    best_mem = costs.memory_fs(np.full((1, n, 2), len(LEVELS) - 1, dtype=np.int64))[0]
    free = all_dram > costs.compute_fs  # nodes whose time depends on the map
    per_level = np.stack([costs.weight_fs, costs.output_fs], axis=1).reshape(2 * n, -1)

    x: dict[tuple[int, int], cp_model.IntVar] = {}
    terms: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(n)]
    for t, nodes in enumerate(_touched_nodes(target)):
        size = int(tensors.nbytes[t])
        if size == 0 or not free[nodes].any():
            continue
        levels = [lv for lv in range(1, len(LEVELS)) if size <= cap[lv]]
        if not levels:
            continue
        for lv in levels:
            x[(t, lv)] = model.new_bool_var(f"x{t}_{LEVELS[lv]}")
        model.add_at_most_one(x[(t, lv)] for lv in levels)  # none true: DRAM
        for lv in levels:
            saving = int(per_level[t, lv] - per_level[t, DRAM])
            for i in nodes:
                terms[i].append((saving, x[(t, lv)]))

    times: list = []
    for i in range(n):
        compute = int(costs.compute_fs[i])
        if not free[i]:
            times.append(compute)
            continue
        low = max(compute, int(best_mem[i]))
        ti = model.new_int_var(low, int(all_dram[i]), f"t{i}")
        model.add(ti >= int(all_dram[i]) + sum(c * v for c, v in terms[i]))
        times.append(ti)

    _add_capacity_rows(model, x, tensors, cap)
    constant = sum(t for t in times if isinstance(t, int))
    model.minimize(sum(t for t in times if not isinstance(t, int)) + constant)
    return model, x, times, constant


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


def _configure_portfolio(params, workers: int) -> None:
    """Pick CP-SAT workers that move the lower bound.

    With few workers CP-SAT's default portfolio runs only ``default_lp``, whose bound
    stays at the trivial one on this model; ``max_lp`` (full LP with cuts) and
    ``reduced_costs`` prove optimality, and the LNS workers are interleaved with them.
    Larger budgets keep CP-SAT's default portfolio (which includes both).
    """
    params.num_workers = workers
    if workers <= 2:
        params.subsolvers.extend(["max_lp", "reduced_costs"][:workers])
        params.num_full_subsolvers = workers


def _add_hint(model: cp_model.CpModel, x: dict, times: list, target, mapping: np.ndarray) -> None:
    levels = mapping.reshape(-1)
    for (t, lv), var in x.items():
        model.add_hint(var, bool(levels[t] == lv))
    node_fs = target.costs.node_fs(mapping[None])[0]
    for ti, fs in zip(times, node_fs.tolist()):
        if not isinstance(ti, int):
            model.add_hint(ti, fs)


def solve(
    target,
    time_limit_s: float = 600.0,
    workers: int = 2,
    hint: np.ndarray | None = None,
    log_search: bool = False,
) -> OptimumResult:
    """Minimise the latency of ``target`` over all valid maps with CP-SAT.

    Args:
        target: an :class:`~hwmodels.nnpi.target.NNPITarget`.
        time_limit_s: solver wall-time limit.
        workers: solver threads.
        hint: int ``[N, 2]`` starting map (the native compiler's map by default).
        log_search: forward CP-SAT's own search log to this module's logger (DEBUG).

    Returns:
        The best map found, its latency, the proven lower bound and the gap.

    Raises:
        RuntimeError: the solver's map does not measure to the solver's objective.
    """
    name = target.workload.name
    hint = target.native_mapping() if hint is None else np.asarray(hint, dtype=np.int64)
    start = time.perf_counter()
    model, x, times, constant = build_model(target)
    _add_hint(model, x, times, target, hint)
    log.info(
        "%s: CP-SAT model with %d booleans, %d constraints (%.2f s to build)",
        name,
        len(x),
        len(model.proto.constraints),
        time.perf_counter() - start,
    )
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    _configure_portfolio(solver.parameters, int(workers))
    if log_search:
        solver.parameters.log_search_progress = True
        solver.parameters.log_to_stdout = False
        solver.log_callback = log.debug
    status = solver.solve(model, _Progress(name))
    wall = solver.wall_time
    status_name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError(f"{name}: CP-SAT found no map ({status_name}) in {wall:.1f} s")

    mapping = np.zeros(2 * target.num_units, dtype=np.int64)
    for (t, lv), var in x.items():
        if solver.boolean_value(var):
            mapping[t] = lv
    mapping = mapping.reshape(target.num_units, 2)
    objective = constant + sum(solver.value(t) for t in times if not isinstance(t, int))
    _check_against_measure(target, mapping, objective)

    proven = status == cp_model.OPTIMAL
    bound = objective if proven else min(objective, int(np.ceil(solver.best_objective_bound)))
    result = OptimumResult(
        mapping=mapping,
        latency_s=objective / FS_PER_S,
        bound_s=bound / FS_PER_S,
        gap=(objective - bound) / objective if objective else 0.0,
        proven=proven,
        status=status_name,
        wall_s=wall,
        info={"latency_fs": int(objective), "bound_fs": int(bound), "booleans": len(x)},
    )
    log.info(
        "%s: %s latency %.6f ms, bound %.6f ms, gap %.4f%% in %.1f s",
        name,
        status_name,
        result.latency_s * 1e3,
        result.bound_s * 1e3,
        100 * result.gap,
        wall,
    )
    return result


def _check_against_measure(target, mapping: np.ndarray, objective: int) -> None:
    """The evaluator must accept the solver's map unchanged at the solver's latency."""
    _, moved = target.rectify(mapping[None])
    measured = int(target.latency_fs(mapping[None])[0])
    if moved[0] != 0 or measured != objective:
        raise RuntimeError(
            f"{target.workload.name}: the CP-SAT map and the evaluator disagree: compiler "
            f"re-assigned {int(moved[0])} bytes, evaluator latency {measured} fs, solver "
            f"objective {objective} fs"
        )
