"""The exact optimum of the bank-mapping cost model: OR-tools CP-SAT, and brute force.

The CP-SAT model has one Boolean ``x[i, a]`` per tensor and allowed layout (exactly one
per tensor) and adds, in the evaluator's integer femtoseconds:

* per ``x[i, a]``: writing ``i``, its ``any`` reads, its spill traffic where it does
  not fit, and its reshaped copies (fixed-axis reads of an axis it lacks) where it
  fits;
* per ``x[c, a]``: the ``same`` reads of ``c`` in layout ``a``, and a reshaped copy
  ``z >= x[c, a] + fits(p) - 1`` where ``a`` maps to an axis producer ``p`` lacks;
* ``r[p, l]``: some reader requires layout ``l`` of ``p`` (1 for a fixed-axis read,
  ``>= x[c, a]`` for a ``same`` read whose layout ``a`` maps to ``l``), and the copy
  ``y[p, a, l] >= x[p, a] + r[p, l] - 1`` for ``a != l``, priced on or off chip by
  whether ``p`` fits in ``a`` and in ``l``.

``r``, ``y`` and ``z`` are only forced up, so the optimum of the model is the optimum
of the evaluator; every answer is re-measured by it.
"""

from __future__ import annotations

import itertools
import logging
import time

import numpy as np
from ortools.sat.python import cp_model

from hwmodels.banked.cost import evaluate
from hwmodels.banked.layouts import FOREIGN, L
from hwmodels.banked.params import FS_PER_S
from hwmodels.banked.problem import ANY, AXIS, BankProblem
from hwmodels.base import OptimumResult

log = logging.getLogger(__name__)

#: the most maps :func:`brute_force` enumerates, and how many it evaluates at a time
MAX_MAPS, CHUNK = 2**20, 2**12


def _copy_fs(problem: BankProblem, p: int, a: int, target: int) -> int:
    """Time of copying tensor ``p`` from layout ``a`` to ``target`` (0 when spilled)."""
    if a == target or not problem.fits[p, a]:
        return 0
    if problem.fits[p, target]:
        return int(problem.copy_on_fs[p])
    return int(problem.copy_off_fs[p])


def solve(
    problem: BankProblem,
    time_limit_s: float = 60.0,
    workers: int = 2,
    hint: np.ndarray | None = None,
    name: str = "workload",
) -> OptimumResult:
    """Minimise the memory time over all allowed layouts.

    Args:
        problem: the cost tables.
        time_limit_s: solver wall-time limit.
        workers: solver threads.
        hint: int ``[N]`` allowed layouts to start from (the answer when the solver
            finds nothing better in time).
        name: the workload's name, for messages.

    Raises:
        RuntimeError: the evaluator finds the solver's answer slower than its objective.
    """
    n = problem.num_units
    m = cp_model.CpModel()
    x = {
        (i, a): m.new_bool_var(f"x{i}_{a}")
        for i in range(n)
        for a in range(L)
        if problem.allowed[i, a]
    }
    for i in range(n):
        m.add_exactly_one(x[i, a] for a in range(L) if (i, a) in x)
    terms: list = []

    def add(coef: int, var) -> None:
        if coef:
            terms.append(int(coef) * var)

    foreign_static = np.zeros(n, dtype=np.int64)
    for e in np.flatnonzero((problem.kind == AXIS) & (problem.static_req == FOREIGN)):
        foreign_static[problem.src[e]] += 1
    for (i, a), var in x.items():
        cost = problem.write_fs[i, a] + problem.read_any_fs[i, a] + problem.spill_fs[i, a]
        if problem.fits[i, a]:
            cost += foreign_static[i] * problem.copy_on_fs[i]
        add(cost, var)
    requires: dict[tuple[int, int], list] = {}
    for e in np.flatnonzero(problem.kind != ANY):
        p, c = int(problem.src[e]), int(problem.dst[e])
        if problem.kind[e] == AXIS:
            if problem.static_req[e] < L:
                requires.setdefault((p, int(problem.static_req[e])), []).append(1)
            continue
        for a in range(L):
            if (c, a) not in x:
                continue
            add(problem.read_fs[e, a], x[c, a])
            target = int(problem.same_req[e, a])
            if target < L:
                requires.setdefault((p, target), []).append(x[c, a])
                continue
            fitting = [x[p, b] for b in range(L) if (p, b) in x and problem.fits[p, b]]
            if fitting:
                z = m.new_bool_var(f"z{e}_{a}")
                m.add(z >= x[c, a] + sum(fitting) - 1)
                add(problem.copy_on_fs[p], z)
    for (p, target), causes in requires.items():
        always = any(isinstance(cause, int) for cause in causes)
        if not always:
            r = m.new_bool_var(f"r{p}_{target}")
            for cause in causes:
                m.add_implication(cause, r)
        for a in range(L):
            coef = _copy_fs(problem, p, a, target)
            if (p, a) not in x or not coef:
                continue
            if always:
                add(coef, x[p, a])
            else:
                y = m.new_bool_var(f"y{p}_{a}_{target}")
                m.add(y >= x[p, a] + r - 1)
                add(coef, y)
    m.minimize(sum(terms))
    hint = problem.preferred if hint is None else np.asarray(hint, dtype=np.int64)
    for (i, a), var in x.items():
        m.add_hint(var, int(hint[i]) == a)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit_s)
    solver.parameters.num_workers = int(workers)
    status = solver.solve(m)
    status_name = solver.status_name(status)
    hinted = int(evaluate(problem, hint[None]).latency_fs[0])
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        lay = np.array(
            [next(a for a in range(L) if (i, a) in x and solver.value(x[i, a])) for i in range(n)]
        )
        objective = int(round(solver.objective_value)) + problem.fixed_fs
        measured = int(evaluate(problem, lay[None]).latency_fs[0])
        if measured > objective:
            raise RuntimeError(
                f"{name}: the CP-SAT layouts and the evaluator disagree "
                f"(evaluator {measured} fs, solver {objective} fs)"
            )
    else:
        log.warning("%s: CP-SAT found no layouts (%s); answering the hint", name, status_name)
        lay, measured = hint.copy(), hinted
    if hinted < measured:
        lay, measured = hint.copy(), hinted
    proven = status == cp_model.OPTIMAL
    bound = measured
    if not proven:
        bound = min(measured, int(np.ceil(solver.best_objective_bound)) + problem.fixed_fs)
    return OptimumResult(
        mapping=lay.astype(np.int64)[:, None],
        latency_s=measured / FS_PER_S,
        bound_s=bound / FS_PER_S,
        gap=(measured - bound) / measured if measured else 0.0,
        proven=proven,
        status=status_name,
        wall_s=solver.wall_time,
        info={"latency_fs": measured, "bound_fs": bound, "method": "cp-sat"},
    )


def brute_force(problem: BankProblem) -> OptimumResult:
    """Every allowed layout map, evaluated; the product of the tensors' allowed counts
    must be at most :data:`MAX_MAPS`."""
    choices = [np.flatnonzero(problem.allowed[i]) for i in range(problem.num_units)]
    total = int(np.prod([len(c) for c in choices], dtype=np.float64))
    if total > MAX_MAPS:
        raise ValueError(f"banked brute force: {total} maps is more than {MAX_MAPS}")
    start = time.perf_counter()
    best, best_fs = None, None
    maps = itertools.product(*choices)
    while chunk := list(itertools.islice(maps, CHUNK)):
        lay = np.array(chunk, dtype=np.int64)
        cost = evaluate(problem, lay).latency_fs
        i = int(np.argmin(cost))
        if best_fs is None or cost[i] < best_fs:
            best, best_fs = lay[i], int(cost[i])
    return OptimumResult(
        mapping=best[:, None],
        latency_s=best_fs / FS_PER_S,
        bound_s=best_fs / FS_PER_S,
        gap=0.0,
        proven=True,
        status="OPTIMAL",
        wall_s=time.perf_counter() - start,
        info={"latency_fs": best_fs, "maps": total, "method": "brute-force"},
    )
