"""The constraints of Equation 5, checked on a batch of partitions ``[B, N]``.

Static constraints (Xie et al. 2022, section 3):

* acyclic dataflow (Eq. 2): ``f(u) <= f(v)`` on every edge ``(u, v)``: the ring only
  carries data from a chip to higher chips;
* no skipped chips (Eq. 3): the chips in use are ``0 .. k-1`` for some ``k``;
* chip triangle dependency (Eq. 4): in the chip graph ``G_D`` (an edge ``a -> b`` for
  every workload edge ``(u, v)`` with ``f(u) = a != f(v) = b``) no edge ``a -> b`` may
  co-exist with a longer path ``a -> ... -> b``.

The dynamic constraint the paper leaves to the compiler backend is, here, memory:
the bytes a chip holds (:func:`hwmodels.mcm.cost.memory_bytes`) fit its SRAM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.mcm.cost import memory_bytes
from hwmodels.mcm.dataflow import Dataflow


@dataclass
class Violations:
    """Which constraints each of ``B`` partitions breaks, and where (-1: nowhere).

    Attributes:
        acyclic_edge: int64 ``[B]``: first edge ``e`` with ``f(src[e]) > f(dst[e])``.
        skipped_chip: int64 ``[B]``: lowest unused chip below a used one.
        triangle_edge: int64 ``[B]``: first edge whose chip-graph edge ``a -> b`` also
            has a longer path ``a -> ... -> b``.
        memory_chip: int64 ``[B]``: lowest chip whose bytes exceed its SRAM.
        memory: int64 ``[B, C]``: bytes held by each chip.
    """

    acyclic_edge: np.ndarray
    skipped_chip: np.ndarray
    triangle_edge: np.ndarray
    memory_chip: np.ndarray
    memory: np.ndarray

    @property
    def static_ok(self) -> np.ndarray:
        """bool ``[B]``: acyclic, no skipped chip, no triangle dependency."""
        return (self.acyclic_edge < 0) & (self.skipped_chip < 0) & (self.triangle_edge < 0)

    @property
    def ok(self) -> np.ndarray:
        """bool ``[B]``: every constraint holds, memory included."""
        return self.static_ok & (self.memory_chip < 0)

    def describe(self, i: int, flow: Dataflow, parts: np.ndarray, names: list[str]) -> list[str]:
        """Messages naming the broken constraints of partition ``i`` (``parts [B, N]``)."""
        f = parts[i]
        out = []
        if (e := self.acyclic_edge[i]) >= 0:
            u, v = flow.src[e], flow.dst[e]
            out.append(
                f"acyclic dataflow: {names[u]!r} on chip {f[u]} feeds {names[v]!r} on "
                f"lower chip {f[v]}"
            )
        if (c := self.skipped_chip[i]) >= 0:
            out.append(f"no skipped chips: chip {c} is empty but chip {f.max()} is used")
        if (e := self.triangle_edge[i]) >= 0:
            u, v = flow.src[e], flow.dst[e]
            out.append(
                f"triangle dependency: {names[u]!r} -> {names[v]!r} links chip {f[u]} "
                f"directly to chip {f[v]}, which it also reaches through another chip"
            )
        if (c := self.memory_chip[i]) >= 0:
            out.append(f"memory: chip {c} holds {self.memory[i, c]} bytes, SRAM is {flow.capacity}")
        return out


def _first(mask: np.ndarray) -> np.ndarray:
    """int64 ``[B]``: index of the first True of each row of ``mask [B, K]``, else -1."""
    if mask.shape[1] == 0:
        return np.full(len(mask), -1, dtype=np.int64)
    return np.where(mask.any(axis=1), mask.argmax(axis=1), -1).astype(np.int64)


def chip_graph(flow: Dataflow, parts: np.ndarray) -> np.ndarray:
    """bool ``[B, C, C]``: ``G_D``: ``[b, a, c]`` when some edge goes from chip a to chip c != a."""
    b = len(parts)
    c = flow.num_chips
    graph = np.zeros((b, c, c), dtype=bool)
    fu, fv = parts[:, flow.src], parts[:, flow.dst]
    rows = np.broadcast_to(np.arange(b)[:, None], fu.shape)
    cross = fu != fv
    graph[rows[cross], fu[cross], fv[cross]] = True
    return graph


def longer_paths(graph: np.ndarray) -> np.ndarray:
    """bool ``[B, C, C]``: pairs joined by a path of two or more edges of ``graph``."""
    reach = graph.astype(np.float32)
    for _ in range(int(np.ceil(np.log2(max(graph.shape[1], 2))))):
        reach = np.minimum(reach + reach @ reach, 1.0)
    return (graph.astype(np.float32) @ reach) > 0


def skipped_chips(parts: np.ndarray, num_chips: int) -> np.ndarray:
    """int64 ``[B]``: lowest empty chip below the highest used chip, else -1."""
    used = np.zeros((len(parts), num_chips), dtype=bool)
    used[np.arange(len(parts))[:, None], parts] = True
    below_top = np.arange(num_chips)[None, :] < parts.max(axis=1, keepdims=True)
    return _first(~used & below_top)


def check(flow: Dataflow, parts: np.ndarray, memory: bool = True) -> Violations:
    """Check ``parts`` int ``[B, N]`` (chip of every node) against Equation 5.

    Args:
        flow: the workload's arrays.
        parts: partitions, values in ``0 .. C-1``.
        memory: also compute per-chip memory (otherwise ``memory_chip`` is all -1).
    """
    parts = np.asarray(parts, dtype=np.int64)
    fu, fv = parts[:, flow.src], parts[:, flow.dst]
    graph = chip_graph(flow, parts)
    bad_pair = graph & longer_paths(graph)
    rows = np.arange(len(parts))[:, None]
    if memory:
        held = memory_bytes(flow, parts)
        memory_chip = _first(held > flow.capacity)
    else:
        held = np.zeros((len(parts), flow.num_chips), dtype=np.int64)
        memory_chip = np.full(len(parts), -1, dtype=np.int64)
    return Violations(
        acyclic_edge=_first(fu > fv),
        skipped_chip=skipped_chips(parts, flow.num_chips),
        triangle_edge=_first(bad_pair[rows, fu, fv] & (fu != fv)),
        memory_chip=memory_chip,
        memory=held,
    )
