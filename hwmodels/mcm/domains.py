"""Domains of a partial partition and their propagation (the solver state ``S``).

The paper's solver (Xie et al. 2022, section 4.2) keeps, for every node, the chips it
may still take, and prunes them whenever a node is fixed. This class does that for the
static constraints with NumPy:

* acyclic dataflow: fixing ``u`` to ``c`` raises the lower bound of every descendant
  of ``u`` to ``c`` and lowers the upper bound of every ancestor to ``c``;
* triangle rule: a chip ``c`` is removed from ``u``'s domain when the chip-graph edges
  it would add (to and from the chips of ``u``'s fixed neighbours) would make an edge
  co-exist with a longer path;
* no skipped chips: a chip ``c`` is removed (unless that empties the domain, see
  :meth:`Domains.domain`) when a chip that would then be empty
  below the highest used one cannot be filled: not enough unfixed nodes are left, or
  no unfixed node whose bounds (after fixing ``u`` to ``c``) still contain it.

The ancestor relation is a dense ``[N, N]`` boolean table (4 MB at 2000 nodes).
"""

from __future__ import annotations

import numpy as np

from hwmodels.mcm.constraints import longer_paths
from hwmodels.mcm.dataflow import Dataflow


def ancestors(flow: Dataflow) -> np.ndarray:
    """bool ``[N, N]``: ``[v, a]`` when ``a`` is a strict ancestor of ``v``."""
    n = flow.num_nodes
    anc = np.zeros((n, n), dtype=bool)
    order = np.argsort(flow.dst, kind="stable")
    srcs, ptr = flow.src[order], np.searchsorted(flow.dst[order], np.arange(n + 1))
    for v in range(n):
        preds = srcs[ptr[v] : ptr[v + 1]]
        if len(preds):
            anc[v, preds] = True
            anc[v] |= anc[preds].any(axis=0)
    return anc


class Domains:
    """A partial partition ``f`` (-1: not fixed) with bounds and the chip graph so far.

    Args:
        flow: the workload's arrays.
        anc: :func:`ancestors` of ``flow``.
    """

    def __init__(self, flow: Dataflow, anc: np.ndarray) -> None:
        self.flow = flow
        self.anc = anc
        self.desc = anc.T
        n, c = flow.num_nodes, flow.num_chips
        order = np.argsort(flow.dst, kind="stable")
        self._in_src = flow.src[order]
        self._in_ptr = np.searchsorted(flow.dst[order], np.arange(n + 1))
        self._out_ptr = np.searchsorted(flow.src, np.arange(n + 1))
        self.f = np.full(n, -1, dtype=np.int64)
        self.lo = np.zeros(n, dtype=np.int64)
        self.hi = np.full(n, c - 1, dtype=np.int64)
        self.graph = np.zeros((c, c), dtype=np.int64)  # edge multiplicities of G_D
        self.used = np.zeros(c, dtype=np.int64)

    def preds(self, u: int) -> np.ndarray:
        return self._in_src[self._in_ptr[u] : self._in_ptr[u + 1]]

    def succs(self, u: int) -> np.ndarray:
        return self.flow.dst[self._out_ptr[u] : self._out_ptr[u + 1]]

    def domain(self, u: int) -> np.ndarray:
        """int64 ``[K]``: the chips ``u`` may take now, ascending (empty: a conflict).

        When the no-skip pruning would empty a domain that acyclic dataflow and the
        triangle rule leave open, the no-skip pruning is dropped for this node: the
        solver closes any gap left at the end by renumbering the used chips
        (:func:`close_gaps`), which keeps the other two constraints.
        """
        cand = np.arange(self.lo[u], self.hi[u] + 1)
        cand = cand[self._triangle_ok(u, cand)]
        strict = cand[self._no_skip_ok(u, cand)] if len(cand) else cand
        return strict if len(strict) else cand

    def _triangle_ok(self, u: int, cand: np.ndarray) -> np.ndarray:
        pf, sf = self.f[self.preds(u)], self.f[self.succs(u)]
        pf, sf = pf[pf >= 0], sf[sf >= 0]
        if not len(pf) and not len(sf):
            return np.ones(len(cand), dtype=bool)
        k = len(cand)
        graph = np.broadcast_to(self.graph > 0, (k, *self.graph.shape)).copy()
        rows = np.arange(k)[:, None]
        graph[rows, pf[None, :], cand[:, None]] = True
        graph[rows, cand[:, None], sf[None, :]] = True
        diag = np.arange(self.flow.num_chips)
        graph[:, diag, diag] = False
        return ~(graph & longer_paths(graph)).any(axis=(1, 2))

    def _no_skip_ok(self, u: int, cand: np.ndarray) -> np.ndarray:
        c = self.flow.num_chips
        free = self.f < 0
        free[u] = False
        top = np.maximum(self.f.max(), cand)  # [K]
        chips = np.arange(c)
        missing = (self.used[None, :] == 0) & (chips[None, :] < top[:, None])
        missing &= chips[None, :] != cand[:, None]  # [K, C]
        # after u := c, descendants start at >= c and ancestors end at <= c
        below = _covered(self.lo, self.hi, free & ~self.desc[u], c)
        above = _covered(self.lo, self.hi, free & ~self.anc[u], c)
        lower = chips[None, :] < cand[:, None]
        covered = np.where(lower, below[None, :], above[None, :])
        return (~missing | covered).all(axis=1) & (missing.sum(axis=1) <= free.sum())

    def fix(self, u: int, chip: int) -> None:
        """Set ``f[u] = chip`` (a chip of :meth:`domain`) and propagate."""
        self.f[u] = chip
        self.lo[self.desc[u]] = np.maximum(self.lo[self.desc[u]], chip)
        self.hi[self.anc[u]] = np.minimum(self.hi[self.anc[u]], chip)
        pf, sf = self.f[self.preds(u)], self.f[self.succs(u)]
        pf, sf = pf[(pf >= 0) & (pf != chip)], sf[(sf >= 0) & (sf != chip)]
        np.add.at(self.graph, (pf, chip), 1)
        np.add.at(self.graph, (chip, sf), 1)
        self.used[chip] += 1

    def release(self, nodes: np.ndarray) -> None:
        """Un-fix ``nodes`` and recompute bounds and the chip graph from the rest."""
        f = self.f
        f[nodes] = -1
        fixed = f >= 0
        c = self.flow.num_chips
        self.lo = np.where(self.anc & fixed[None, :], f[None, :], 0).max(axis=1)
        self.hi = np.where(self.desc & fixed[None, :], f[None, :], c - 1).min(axis=1)
        self.used = np.bincount(f[fixed], minlength=c)
        fu, fv = f[self.flow.src], f[self.flow.dst]
        both = (fu >= 0) & (fv >= 0) & (fu != fv)
        self.graph = np.zeros((c, c), dtype=np.int64)
        np.add.at(self.graph, (fu[both], fv[both]), 1)


def _covered(lo: np.ndarray, hi: np.ndarray, mask: np.ndarray, num_chips: int) -> np.ndarray:
    """bool ``[C]``: chips inside ``[lo[w], hi[w]]`` for some ``w`` in ``mask``."""
    delta = np.bincount(lo[mask], minlength=num_chips + 1)[: num_chips + 1]
    delta = delta - np.bincount(hi[mask] + 1, minlength=num_chips + 1)[: num_chips + 1]
    return np.cumsum(delta)[:num_chips] > 0


def close_gaps(parts: np.ndarray) -> np.ndarray:
    """int64 ``[N]``: ``parts`` with its used chips renumbered ``0 .. k-1`` in order.

    The renumbering keeps the order of chips, so it keeps acyclic dataflow and maps the
    chip graph onto an isomorphic one (the triangle rule holds if it held).
    """
    used = np.unique(parts)
    return np.searchsorted(used, parts).astype(np.int64)
