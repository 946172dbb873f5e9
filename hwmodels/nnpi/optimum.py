"""The exact optimum of the NNP-I cost model with OR-tools CP-SAT.

The model (:mod:`hwmodels.nnpi.cpmodel`) is the evaluator's cost model in the same
integer femtoseconds, with the exact weight-ordering cut of
:mod:`hwmodels.nnpi.symmetry`; the native compiler's map, sorted to satisfy that cut,
is the hint. Every answer is checked: the evaluator must accept the solver's map
unchanged at exactly the solver's latency, and a certified optimum can be no slower
than the hint.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
from ortools.sat.python import cp_model

from hwmodels.base import OptimumResult
from hwmodels.nnpi.cpmodel import Additions, build_model, complete_hint
from hwmodels.nnpi.dominance import add_maximality, levels_are_monotone, maximize
from hwmodels.nnpi.params import FS_PER_S
from hwmodels.nnpi.symmetry import add_weight_order, canonical_levels

log = logging.getLogger(__name__)


class _Progress(cp_model.CpSolverSolutionCallback):
    """Logs every improving solution with the current bound."""

    def __init__(self, name: str, level: int = logging.INFO) -> None:
        super().__init__()
        self.name = name
        self.level = level
        self.start = time.perf_counter()

    def on_solution_callback(self) -> None:
        log.log(
            self.level,
            "%s: solution %.6f ms, bound %.6f ms after %.1f s",
            self.name,
            self.ObjectiveValue() / 1e12,
            self.BestObjectiveBound() / 1e12,
            time.perf_counter() - self.start,
        )


def configure(params, workers: int) -> None:
    """CP-SAT parameters for this model.

    With two workers CP-SAT's default portfolio runs ``default_lp`` only, whose bound
    stays at the trivial one here; ``max_lp`` (full LP with cuts) and ``reduced_costs``
    move it. Larger budgets keep the default portfolio, which includes both.
    """
    params.num_workers = workers
    # OR-tools 9.15 presolve can certify a wrong optimum through its inclusion
    # detection (google/or-tools#5293); on ResNet-50 it claimed 0.1916 ms optimal with
    # a 0.1651 ms map at hand. Switching that family off keeps the rest of presolve.
    params.presolve_inclusion_work_limit = 0
    if workers <= 2:
        params.subsolvers.extend(["max_lp", "reduced_costs"][:workers])
        params.num_full_subsolvers = workers


def solve(
    target,
    time_limit_s: float = 600.0,
    workers: int = 2,
    hint: np.ndarray | None = None,
    log_search: bool = False,
    permitted: np.ndarray | None = None,
    additions: Additions | None = None,
    whole_limit: bool = False,
    quick_presolve: bool = False,
    quiet: bool = False,
    deterministic_s: float | None = None,
) -> OptimumResult:
    """Minimise the latency of ``target`` over all valid maps with CP-SAT.

    Args:
        target: an :class:`~hwmodels.nnpi.target.NNPITarget`.
        time_limit_s: solver wall-time limit.
        workers: solver threads.
        hint: int ``[N, 2]`` valid starting map (the native compiler's map by default).
        log_search: forward CP-SAT's own search log to this module's logger (DEBUG).
        permitted: bool ``[2, L]``: the levels weights and outputs may use
            (:func:`~hwmodels.nnpi.cpmodel.allowed_levels`; all by default).
        additions: extra costs, a trust region, maps to exclude
            (:class:`~hwmodels.nnpi.cpmodel.Additions`): the exact symmetry and dominance
            cuts are then off (they hold for the latency alone over every valid map) and
            the objective is the latency plus the extra costs (``info["extra_fs"]``).
        whole_limit: ``time_limit_s`` covers building and hinting the model too (the
            solver gets what is left).
        quick_presolve: no probing in presolve (``cp_model_probing_level=0``): on a
            loaded 2-core machine the default presolve alone took 30 of 53 s on
            ResNet-101 and stopped with no map; without probing the search starts and
            improves on the hint within the limit.
        quiet: log the model, each solution and the result at DEBUG, not INFO (many
            short solves: a physics round of ``agent=mbo``).
        deterministic_s: CP-SAT's deterministic time limit besides the wall limit
            (``max_deterministic_time``): the same model answers the same map on any
            machine, unless the wall limit comes first (with more than one worker the
            workers' searches are interleaved, ``interleave_search``, which is what
            makes a parallel search deterministic).

    Returns:
        The best map found, its latency, the proven lower bound and the gap (of the
        objective, latency plus extra costs, under ``additions``).

    Raises:
        RuntimeError: the solver's map does not measure to its objective, or it
            certified an optimum slower than the hint. (A solver that finds no map in
            time answers the hint, with the solver's bound, logged.)
    """
    name = target.workload.name
    level = logging.DEBUG if quiet else logging.INFO
    hint = target.native_mapping() if hint is None else np.asarray(hint, dtype=np.int64)
    start = time.perf_counter()
    plain = additions is None or additions.empty
    parts = build_model(target, permitted=permitted, additions=None if plain else additions)
    start_levels = hint.reshape(-1)
    if not plain:
        log.log(level, "%s: extra costs, a trust region or exclusions: no symmetry cuts", name)
    elif target.costs.conflict is not None:
        log.log(level, "%s: bank conflicts: no symmetry or dominance cuts", name)
    elif levels_are_monotone(target):
        add_weight_order(target, parts)
        add_maximality(target, parts)
        start_levels = canonical_levels(target, parts, maximize(target, parts, start_levels))
    else:
        log.info("%s: levels not ordered by speed; symmetry and dominance cuts off", name)
    complete_hint(parts, start_levels, time_limit_s)
    log.log(
        level,
        "%s: CP-SAT model with %d booleans, %d constraints, %d weight classes (%.2f s)",
        name,
        parts.num_booleans,
        len(parts.model.proto.constraints),
        len(parts.weight_classes),
        time.perf_counter() - start,
    )
    solver = cp_model.CpSolver()
    left = time_limit_s - (time.perf_counter() - start) if whole_limit else time_limit_s
    solver.parameters.max_time_in_seconds = max(float(left), 0.01)
    configure(solver.parameters, int(workers))
    if quick_presolve:
        solver.parameters.cp_model_probing_level = 0
    if deterministic_s is not None:
        solver.parameters.max_deterministic_time = float(deterministic_s)
        solver.parameters.interleave_search = int(workers) > 1
    if log_search:
        solver.parameters.log_search_progress = True
        solver.parameters.log_to_stdout = False
        solver.log_callback = log.debug
    status = solver.solve(parts.model, _Progress(name, level))
    wall = solver.wall_time
    status_name = solver.status_name(status)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        mapping = np.zeros(2 * target.num_units, dtype=np.int64)
        for (t, lv), var in parts.x.items():
            if solver.boolean_value(var):
                mapping[t] = lv
        mapping = mapping.reshape(target.num_units, 2)
        objective = int(solver.value(parts.objective))
        extra_fs = int(round(solver.objective_value)) - objective
    else:  # no map within the limit (presolve alone can take it): the hint is the best known
        log.warning(
            "%s: CP-SAT found no map (%s) in %.1f s; the hint (the native compiler's map) is "
            "the best known, bounded by the solver's bound",
            name,
            status_name,
            wall,
        )
        mapping, objective = hint, int(target.latency_fs(hint[None])[0])
        extra_fs = 0
    proven = status == cp_model.OPTIMAL
    _check_against_measure(target, mapping, objective, parts.rounding_fs)
    if parts.rounding_fs:  # report the latency itself, not its rounded model
        objective = int(target.latency_fs(mapping[None])[0])
    if plain:
        _check_against_hint(target, hint, objective, proven)

    found = solver.best_objective_bound  # NaN or infinite when the search never started
    found = math.ceil(found) - extra_fs if math.isfinite(found) else 0
    bound = objective if proven else min(objective, max(0, found))
    result = OptimumResult(
        mapping=mapping,
        latency_s=objective / FS_PER_S,
        bound_s=bound / FS_PER_S,
        gap=(objective - bound) / objective if objective else 0.0,
        proven=proven,
        status=status_name,
        wall_s=wall,
        info={
            "latency_fs": objective,
            "bound_fs": bound,
            "booleans": parts.num_booleans,
            "extra_fs": extra_fs,
            "solve_s": time.perf_counter() - start,
        },
    )
    log.log(
        level,
        "%s: %s latency %.6f ms, bound %.6f ms, gap %.4f%% in %.1f s",
        name,
        status_name,
        result.latency_s * 1e3,
        result.bound_s * 1e3,
        100 * result.gap,
        wall,
    )
    return result


def _check_against_measure(
    target, mapping: np.ndarray, objective: int, rounding_fs: int = 0
) -> None:
    """The evaluator must accept the solver's map unchanged at the solver's latency
    (within ``rounding_fs``: conflict terms the model rounded one by one)."""
    measured = target.measure(mapping[None])
    latency_fs = int(target.latency_fs(measured.rectified)[0])
    if not measured.valid[0] or abs(latency_fs - objective) > rounding_fs:
        raise RuntimeError(
            f"{target.workload.name}: the CP-SAT map and the evaluator disagree: valid "
            f"{bool(measured.valid[0])}, evaluator latency {latency_fs} fs, solver "
            f"objective {objective} fs"
        )


def _check_against_hint(target, hint: np.ndarray, objective: int, proven: bool) -> None:
    """A certified optimum can be no slower than the valid map the solver was given."""
    measured = target.measure(hint[None])
    hint_fs = int(target.latency_fs(hint[None])[0])
    if proven and measured.valid[0] and objective > hint_fs:
        raise RuntimeError(
            f"{target.workload.name}: CP-SAT certified {objective} fs optimal but the valid "
            f"hint map takes {hint_fs} fs: the solver's proof is wrong"
        )
