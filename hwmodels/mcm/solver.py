"""The compiler: the constraint solver of Xie et al. 2022 (Algorithms 1 and 2).

Both modes visit the nodes in a random order and fix one node at a time to a chip
of its current domain (:class:`~hwmodels.mcm.domains.Domains`), propagating after
every decision:

* ``fix`` (Algorithm 2): a first pass keeps the proposed chip ``y[u]`` whenever it is
  still in ``u``'s domain and leaves ``u`` open otherwise; a second pass gives every
  open node a chip drawn uniformly from its domain.
* ``sample`` (Algorithm 1): every node draws its chip from the policy's distribution
  ``p[u]`` restricted to its domain (uniform where ``p`` puts no mass on the domain).

No-skip is pruned from domains as far as a cheap necessary condition allows; a gap
that still opens is closed at the end by renumbering the used chips in order
(:func:`~hwmodels.mcm.domains.close_gaps`). A node whose domain is empty is a
conflict: the solver backtracks by releasing the fixed neighbours of the node (all its
fixed ancestors and descendants if it conflicts again), revisits the node first and
the released nodes next (in ``fix`` mode these take a random chip of their domain
rather than their proposed one, which would rebuild the conflict). After
``max_backtracks`` conflicts it starts again in a new random order, and after
``restarts`` attempts it gives up and the caller uses its fallback partition.
Every answer is checked against the static constraints.

A proposal that already meets the static constraints is returned unchanged in both
modes (it is the policy's own draw; Algorithm 2 keeps it whole).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

import numpy as np

from hwmodels.mcm.constraints import check
from hwmodels.mcm.dataflow import Dataflow
from hwmodels.mcm.domains import Domains, ancestors, close_gaps

log = logging.getLogger(__name__)

MODES: tuple[str, ...] = ("fix", "sample")


class ConstraintSolver:
    """Repairs partitions so that they meet the static constraints.

    Args:
        flow: the workload's arrays.
        fallback: int64 ``[N]``: a valid partition used when the search gives up.
        mode: ``"fix"`` or ``"sample"``.
        max_backtracks: conflicts allowed per attempt before starting again.
        restarts: attempts (each in a new random order) before giving up.
    """

    def __init__(
        self,
        flow: Dataflow,
        fallback: np.ndarray,
        mode: str = "fix",
        max_backtracks: int = 20,
        restarts: int = 5,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mcm solver mode {mode!r}; expected one of {MODES}")
        self.flow = flow
        self.fallback = np.asarray(fallback, dtype=np.int64)
        self.mode = mode
        self.max_backtracks = int(max_backtracks)
        self.restarts = max(int(restarts), 1)
        self.anc = ancestors(flow)
        self.gave_up = 0  # partitions answered with the fallback so far

    def repair(
        self,
        parts: np.ndarray,
        rng: np.random.Generator | Sequence[np.random.Generator],
        probs: np.ndarray | None = None,
        order: np.ndarray | None = None,
    ) -> np.ndarray:
        """int64 ``[B, N]``: each of ``parts [B, N]`` repaired (valid ones unchanged).

        Args:
            parts: proposed chip of every node.
            rng: source of the node orders and the draws: one generator for the batch,
                or one per map.
            probs: float ``[B, N, C]`` policy distribution (``sample`` mode; None: uniform).
            order: int ``[N]`` node order to use instead of a random one (tests).
        """
        parts = np.asarray(parts, dtype=np.int64)
        out = parts.copy()
        bad = np.flatnonzero(~check(self.flow, parts, memory=False).static_ok)
        for b in bad:
            p = None if probs is None else probs[b]
            gen = rng[b] if isinstance(rng, Sequence) else rng
            found = None
            for _ in range(self.restarts):
                visit = gen.permutation(self.flow.num_nodes) if order is None else order
                found = self.solve(parts[b], p, visit, gen)
                if found is not None:
                    break
            if found is None:
                self.gave_up += 1
                log.debug("mcm solver gave up after %d attempts", self.restarts)
                found = self.fallback
            out[b] = found
        if len(bad):
            ok = check(self.flow, out[bad], memory=False).static_ok
            if not ok.all():
                raise RuntimeError("mcm constraint solver returned a partition that breaks Eq. 5")
        return out

    def solve(
        self,
        proposal: np.ndarray,
        probs: np.ndarray | None,
        order: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray | None:
        """int64 ``[N]``: one partition by Algorithm 2 (fix) or 1 (sample), or None."""
        state = Domains(self.flow, self.anc)
        keep = self.mode == "fix"
        # (node, try to keep its proposed chip); the second pass fills the rest
        todo = deque((int(u), keep) for u in order)
        later: deque = deque()
        conflicts, conflicts_at = 0, {}
        while todo or later:
            u, keeping = todo.popleft() if todo else later.popleft()
            dom = state.domain(u)
            if not len(dom):
                conflicts += 1
                released = self._blockers(state, u, conflicts_at.get(u, 0))
                conflicts_at[u] = conflicts_at.get(u, 0) + 1
                if conflicts > self.max_backtracks or not len(released):
                    return None
                state.release(released)
                todo.extendleft((int(v), False) for v in released[::-1])
                todo.appendleft((u, keeping))
                continue
            if keeping:
                if proposal[u] in dom:
                    state.fix(u, int(proposal[u]))
                else:
                    later.append((u, False))
                continue
            state.fix(u, self._pick(dom, None if probs is None else probs[u], rng))
        return close_gaps(state.f)

    def _blockers(self, state: Domains, u: int, times: int) -> np.ndarray:
        """Fixed nodes to release on a conflict at ``u``: its fixed neighbours the first
        time, all its fixed ancestors and descendants after that."""
        near = np.zeros(self.flow.num_nodes, dtype=bool)
        if times == 0:
            near[state.preds(u)] = True
            near[state.succs(u)] = True
        if times > 0 or not (near & (state.f >= 0)).any():
            near = self.anc[u] | state.desc[u]
        return np.flatnonzero(near & (state.f >= 0))

    def _pick(self, dom: np.ndarray, p: np.ndarray | None, rng: np.random.Generator) -> int:
        """A chip of ``dom``: drawn from ``p`` restricted to it (``sample``), else uniform."""
        if self.mode == "sample":  # one draw path, so p=None gives the uniform p's draws
            w = np.ones(len(dom)) if p is None else np.asarray(p, dtype=np.float64)[dom]
            total = w.sum()
            if total > 0:
                return int(
                    dom[min(np.searchsorted(np.cumsum(w), rng.random() * total), len(dom) - 1)]
                )
        return int(dom[rng.integers(len(dom))])
