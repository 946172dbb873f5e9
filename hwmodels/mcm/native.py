"""The native compilers: contiguous splits of the execution order.

A contiguous split gives chip ``d`` the nodes ``bounds[d] .. bounds[d+1]-1`` of the
execution order, for chips ``0 .. k-1``. Because the order is topological and no range
is empty, it always meets acyclic dataflow and uses no chip twice or skips none. It
can still break the triangle rule: an edge from range ``a`` into range ``b > a+1``
jumps the ranges between, and with a path through them that is a violation. Both
compilers therefore only split where no edge jumps a whole range: an edge from a node
before ``i`` to a node at or after ``j`` jumps range ``[i, j)``; with none, every
transfer goes to the next chip, ``G_D`` is a chain and the triangle rule holds.

* :func:`greedy_split`, the O(N + E) heuristic: walk the execution order and fill chip
  ``d`` until its compute reaches the remaining compute over the remaining chips, or
  the next node would overflow its SRAM, then move to ``d+1``.
* :func:`dp_split`, the exact dynamic programme: over all such splits, the one with the
  lowest slowest-chip time (compute, ring traffic and memory included), in
  ``O(C N^2)`` vectorised NumPy.
"""

from __future__ import annotations

import logging

import numpy as np

from hwmodels.mcm.dataflow import Dataflow

log = logging.getLogger(__name__)

#: time of an infeasible range in the dynamic programme
INFEASIBLE = np.iinfo(np.int64).max // 4

NATIVE_COMPILERS: tuple[str, ...] = ("greedy", "contiguous-dp")


def parts_from_bounds(bounds: list[int] | np.ndarray, num_nodes: int) -> np.ndarray:
    """int64 ``[N]``: chip of every node for range starts ``bounds`` (``bounds[0] = 0``)."""
    ends = np.append(np.asarray(bounds[1:], dtype=np.int64), num_nodes)
    return np.repeat(np.arange(len(ends), dtype=np.int64), np.diff(np.append(0, ends)))


def cut_bytes(flow: Dataflow) -> np.ndarray:
    """int64 ``[N+1]``: bytes produced before position ``p`` and read at or after it.

    Under a contiguous split with a boundary at ``p``, this is what crosses that link.
    """
    n = flow.num_nodes
    u = np.arange(n)
    live = flow.last_use > u
    delta = np.zeros(n + 2, dtype=np.int64)
    np.add.at(delta, u[live] + 1, flow.out_bytes[live])
    np.add.at(delta, flow.last_use[live] + 1, -flow.out_bytes[live])
    return np.cumsum(delta)[: n + 1]


def reach_before(flow: Dataflow) -> np.ndarray:
    """int64 ``[N+1]``: last consumer of any node before position ``i`` (-1 for ``i = 0``).

    Range ``[i, j)`` is jumped by some edge exactly when ``reach_before[i] >= j``.
    """
    return np.maximum.accumulate(np.concatenate([[-1], flow.last_use]))


def range_memory(flow: Dataflow) -> np.ndarray:
    """int64 ``[N+1, N+1]``: bytes held by a chip running range ``[i, j)`` (``i < j``).

    Resident bytes of its nodes plus every tensor produced before ``i`` and read in
    ``[i, j)``. A tensor of ``u`` whose consumers are ``v_1 < v_2 < ...`` is read in
    ``[i, j)`` for ``v_{k-1} < i <= v_k < j`` (``v_0 = u``): one rectangle of the
    ``(i, j)`` table per edge, summed with a 2-D prefix sum.
    """
    n = flow.num_nodes
    table = np.zeros((n + 2, n + 2), dtype=np.int64)
    if flow.num_edges:
        first = np.zeros(flow.num_edges, dtype=bool)
        first[flow.group_start] = True
        prev = np.where(first, flow.src, np.roll(flow.dst, 1))
        size = flow.out_bytes[flow.src]
        np.add.at(table, (prev + 1, flow.dst + 1), size)
        np.add.at(table, (flow.dst + 1, flow.dst + 1), -size)
        table = table.cumsum(axis=0).cumsum(axis=1)
    resident = np.concatenate([[0], np.cumsum(flow.resident_bytes)])
    return table[: n + 1, : n + 1] + resident[None, :] - resident[:, None]


def range_time(flow: Dataflow, memory: bool = True) -> np.ndarray:
    """int64 ``[N+1, N+1]``: time of a chip running range ``[i, j)``, else :data:`INFEASIBLE`.

    Compute of the range plus the bytes on its input link (``cut[i]``) and output link
    (``cut[j]``); infeasible where ``i >= j``, an edge jumps the range, or (with
    ``memory``) the range overflows the SRAM.
    """
    n = flow.num_nodes
    work = np.concatenate([[0], np.cumsum(flow.compute_ps)])
    cut = cut_bytes(flow) * flow.ps_per_byte
    time = work[None, :] - work[:, None] + cut[:, None] + cut[None, :]
    i, j = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    bad = (i >= j) | (reach_before(flow)[:, None] >= j)
    if memory:
        bad |= range_memory(flow) > flow.capacity
    return np.where(bad, INFEASIBLE, time)


def dp_split(flow: Dataflow, memory: bool = True) -> np.ndarray | None:
    """int64 ``[N]``: the contiguous split with the lowest slowest-chip time, or None.

    ``best[k][j]`` is the lowest slowest-chip time of nodes ``0 .. j-1`` on chips
    ``0 .. k-1``; ``best[k][j] = min_i max(best[k-1][i], time[i, j])``, one vectorised
    ``[N+1, N+1]`` step per chip. The answer is the best ``best[k][N]`` over ``k <= C``
    (fewest chips among ties). None when no split is feasible.
    """
    n = flow.num_nodes
    time = range_time(flow, memory)
    best = np.full(n + 1, INFEASIBLE, dtype=np.int64)
    best[0] = 0
    parents, finals = [], []
    for _ in range(min(flow.num_chips, n)):
        cand = np.maximum(best[:, None], time)
        parent = cand.argmin(axis=0)
        best = cand[parent, np.arange(n + 1)]
        parents.append(parent)
        finals.append(best[n])
    k = int(np.argmin(finals)) + 1
    if finals[k - 1] >= INFEASIBLE:
        return None
    bounds, j = [], n
    for d in range(k - 1, -1, -1):
        j = int(parents[d][j])
        bounds.append(j)
    return parts_from_bounds(bounds[::-1], n)


def greedy_split(flow: Dataflow) -> np.ndarray:
    """int64 ``[N]``: the balanced greedy split along the execution order.

    Node ``j`` closes the current range (and opens chip ``d+1``) when all hold: the
    range is not empty, ``d < C-1``, no edge jumps the range ``[start, j)``, and either
    the range's compute plus half of node ``j``'s reaches the target (compute of the
    nodes from ``start`` on, over the chips from ``d`` on) or node ``j`` would overflow
    the SRAM. A range that cannot close where memory asks it to overflows; the caller
    checks memory.
    """
    n, c = flow.num_nodes, flow.num_chips
    work = flow.compute_ps.astype(np.float64)
    remaining = np.cumsum(work[::-1])[::-1]
    reach = reach_before(flow)
    order = np.argsort(flow.dst, kind="stable")
    in_src = flow.src[order]
    in_ptr = np.searchsorted(flow.dst[order], np.arange(n + 1))
    seen = np.full(n, -1, dtype=np.int64)  # range start that already counted a tensor
    parts = np.zeros(n, dtype=np.int64)
    start, d, load, held = 0, 0, 0.0, 0
    target = remaining[0] / c

    def bytes_added(j: int, begin: int) -> int:
        srcs = in_src[in_ptr[j] : in_ptr[j + 1]]
        new = srcs[(srcs < begin) & (seen[srcs] != begin)]
        return int(flow.resident_bytes[j] + flow.out_bytes[new].sum())

    for j in range(n):
        can_close = j > start and d < c - 1 and reach[start] < j
        if can_close and (
            load + work[j] / 2 >= target or held + bytes_added(j, start) > flow.capacity
        ):
            start, d, load, held = j, d + 1, 0.0, 0
            target = remaining[j] / (c - d)
        srcs = in_src[in_ptr[j] : in_ptr[j + 1]]
        held += bytes_added(j, start)
        seen[srcs[srcs < start]] = start
        load += work[j]
        parts[j] = d
    return parts
