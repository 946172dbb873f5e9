"""The compilers of the banked memory: the rectifier, local mapping, global propagation.

* :func:`rectify`: a layout the producer's requirement does not accept (an operator
  requirement broken, or an axis the tensor does not have) is replaced by the
  producer's own choice; the tensor counts as re-assigned.
* :func:`local_mapping`: every operator picks the layout of its output alone, the one
  that spreads it over the most banks (the paper's baseline, "local bank mapping",
  which maximises the memory-access parallelism of one loop nest); readers that need
  another layout get copies.
* :func:`global_mapping`: the paper's global mapping. The layouts the restricted
  operators need are propagated along the data dependencies (:func:`seed_mapping`:
  a tensor takes the layout its readers require, or the one its same-layout inputs
  have), then a fixed-point iteration (:func:`fixed_point`) re-chooses the layout of
  each tensor, and of each chain of tensors tied by same-layout reads, while that
  lowers the memory time; it runs from the propagated layouts and from the local
  ones, and the cheaper fixed point is the answer, so it is never worse than local.
"""

from __future__ import annotations

import numpy as np

from hwmodels.banked.cost import evaluate
from hwmodels.banked.layouts import L
from hwmodels.banked.problem import AXIS, SAME, BankProblem


def rectify(problem: BankProblem, lay: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Repair layouts ``lay`` int ``[B, N]``.

    Returns:
        int64 ``[B, N]``: the repaired layouts; bool ``[B, N]``: the tensors re-assigned.
    """
    lay = np.asarray(lay, dtype=np.int64)
    broken = ~problem.allowed[np.arange(problem.num_units), lay]
    return np.where(broken, problem.preferred, lay), broken


def local_mapping(problem: BankProblem) -> np.ndarray:
    """int64 ``[N]``: every tensor in its producer's own, most parallel layout."""
    return problem.preferred.copy()


def seed_mapping(problem: BankProblem) -> np.ndarray:
    """int64 ``[N]``: the restricted operators' layouts propagated along the graph.

    Tensors whose producer accepts one layout start with it. Then, until nothing
    changes, every other tensor takes the layout most of its bytes are asked for in:
    by its readers (a fixed axis, or the layout of a same-layout reader already
    chosen) and by its same-layout inputs already chosen. What is still open at the
    end takes its producer's own choice.
    """
    n = problem.num_units
    lay = np.where(problem.allowed.sum(axis=1) == 1, problem.preferred, -1)
    out_reads = [np.flatnonzero(problem.src == i) for i in range(n)]
    in_reads = [np.flatnonzero((problem.dst == i) & (problem.kind == SAME)) for i in range(n)]
    changed = True
    while changed:
        changed = False
        for i in np.flatnonzero(lay < 0):
            votes = np.zeros(L + 1)
            for e in out_reads[i]:
                if problem.kind[e] == AXIS:
                    votes[problem.static_req[e]] += problem.size[i]
                elif problem.kind[e] == SAME and lay[problem.dst[e]] >= 0:
                    votes[problem.same_req[e, lay[problem.dst[e]]]] += problem.size[i]
            for e in in_reads[i]:
                if lay[problem.src[e]] >= 0:
                    match = np.flatnonzero(problem.same_req[e] == lay[problem.src[e]])
                    votes[match] += problem.size[problem.src[e]]
            votes = np.where(problem.allowed[i], votes[:L], 0)
            if votes.max() > 0:
                lay[i] = int(np.argmax(votes))
                changed = True
    return np.where(lay < 0, problem.preferred, lay)


def chains(problem: BankProblem) -> list[np.ndarray]:
    """Groups of two or more tensors tied by same-layout reads (connected components)."""
    parent = np.arange(problem.num_units)

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    same = problem.kind == SAME
    for a, b in zip(problem.src[same].tolist(), problem.dst[same].tolist()):
        parent[root(a)] = root(b)
    roots = np.array([root(i) for i in range(problem.num_units)])
    groups = [np.flatnonzero(roots == r) for r in np.unique(roots)]
    return [g for g in groups if len(g) > 1]


def fixed_point(problem: BankProblem, lay: np.ndarray, max_sweeps: int = 1000) -> np.ndarray:
    """int64 ``[N]``: re-choose layouts of single tensors and of chains while that lowers
    the memory time, from ``lay`` int ``[N]`` (allowed) until no move does.

    Each sweep tries, for every tensor with a choice and then every chain, all ``L``
    layouts at once (a chain's members that do not accept a layout keep theirs) and
    takes the best when it is strictly cheaper, so the time never rises and the
    iteration ends.
    """
    lay = np.asarray(lay, dtype=np.int64).copy()
    free = [np.array([i]) for i in np.flatnonzero(problem.allowed.sum(axis=1) > 1)]
    groups = free + chains(problem)
    current = int(evaluate(problem, lay[None]).latency_fs[0])
    for _ in range(max_sweeps):
        improved = False
        for group in groups:
            cand = np.repeat(lay[None], L, axis=0)
            for a in range(L):
                members = group[problem.allowed[group, a]]
                cand[a, members] = a
            cost = evaluate(problem, cand).latency_fs
            best = int(np.argmin(cost))
            if cost[best] < current:
                lay, current, improved = cand[best], int(cost[best]), True
        if not improved:
            return lay
    raise RuntimeError(f"banked fixed point: no fixed point after {max_sweeps} sweeps")


def global_mapping(problem: BankProblem) -> np.ndarray:
    """int64 ``[N]``: the cheaper fixed point from the propagated and the local layouts."""
    starts = [
        fixed_point(problem, seed_mapping(problem)),
        fixed_point(problem, local_mapping(problem)),
    ]
    cost = evaluate(problem, np.stack(starts)).latency_fs
    return starts[int(np.argmin(cost))]
