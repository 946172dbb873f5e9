"""A cheap description of multi-chip partitions, read without measuring them (``Target.describe``).

Every feature is computed on the partition as proposed (before the constraint
solver's repair) with the vectorised pieces of :mod:`~hwmodels.mcm.cost` and
:mod:`~hwmodels.mcm.constraints`; the solver is never run. The measured latency is the
slowest chip *after* repair, so these say how far the proposal is from a partition the
chip runs (the violations) and what it would cost if it ran as is (the loads).
Features, in column order, for chips ``d = 0 .. C-1``:

* ``compute_ps_chip<d>`` (C): compute time of the chip's nodes, ps (sum: the
  workload's compute);
* ``memory_bytes_chip<d>`` (C): bytes the chip holds (resident bytes of its nodes plus
  one buffer per tensor it receives);
* ``overflow_bytes_chip<d>`` (C): bytes beyond the chip's SRAM, 0 if it fits;
* ``link_bytes_chip<d>`` (C): bytes on the chip's input and output ring links;
* ``time_ps_chip<d>`` (C): compute plus link time, the chip's share of the objective;
* ``slowest_chip_ps``: the largest ``time_ps_chip<d>``: the cost model's latency of
  the partition as given (the measured latency when it needs no repair);
* ``max_compute_ps``, ``max_memory_bytes``, ``max_link_bytes``: the largest per-chip
  value of each;
* ``ring_bytes``: bytes crossing all links (a tensor counts once per link it crosses);
* ``chips_used``, ``cut_edges`` (edges between two chips);
* constraint violations the repair has to fix: ``backward_edges`` (acyclic dataflow:
  edges to a lower chip), ``skipped_chips`` (empty chips below the highest used one),
  ``triangle_edges`` (edges with a longer chip path beside them), ``overflow_chips``
  (chips over their SRAM) and ``overflow_bytes`` (their excess in all).
"""

from __future__ import annotations

import numpy as np

from hwmodels.mcm import cost
from hwmodels.mcm.constraints import chip_graph, longer_paths
from hwmodels.mcm.dataflow import Dataflow

#: the per-chip features, in column order (each ``C`` columns, ``<name>_chip<d>``)
PER_CHIP: tuple[str, ...] = (
    "compute_ps",
    "memory_bytes",
    "overflow_bytes",
    "link_bytes",
    "time_ps",
)
#: the per-map features after the per-chip ones
SUMMARY: tuple[str, ...] = (
    "slowest_chip_ps",
    "max_compute_ps",
    "max_memory_bytes",
    "max_link_bytes",
    "ring_bytes",
    "chips_used",
    "cut_edges",
    "backward_edges",
    "skipped_chips",
    "triangle_edges",
    "overflow_chips",
    "overflow_bytes",
)


def description_names(num_chips: int) -> list[str]:
    """Names of the columns of :func:`describe` for ``num_chips`` chips, in order."""
    per_chip = [f"{name}_chip{d}" for name in PER_CHIP for d in range(num_chips)]
    return [*per_chip, *SUMMARY]


def describe(flow: Dataflow, parts: np.ndarray) -> np.ndarray:
    """The description of every partition.

    Args:
        flow: the workload's arrays on the package.
        parts: int64 ``[B, N]``: the chip of every node.

    Returns:
        float64 ``[B, 5 C + 12]`` in the order of :func:`description_names`.
    """
    num_maps = len(parts)
    c = flow.num_chips
    compute = cost.compute_ps(flow, parts)  # [B, C]
    memory = cost.memory_bytes(flow, parts)  # [B, C]
    overflow = np.maximum(memory - flow.capacity, 0)  # [B, C]
    traffic = cost.chip_traffic_bytes(flow, parts)  # [B, C]
    time = cost.chip_time_ps(flow, parts)  # [B, C]

    used = np.zeros((num_maps, c), dtype=bool)
    used[np.arange(num_maps)[:, None], parts] = True
    below_top = np.arange(c)[None, :] < parts.max(axis=1, keepdims=True, initial=0)
    fu, fv = parts[:, flow.src], parts[:, flow.dst]  # [B, E]
    graph = chip_graph(flow, parts)  # [B, C, C]
    bad_pair = graph & longer_paths(graph)
    rows = np.arange(num_maps)[:, None]
    triangle = bad_pair[rows, fu, fv] & (fu != fv)  # [B, E]

    summary = [
        time.max(axis=1, initial=0),
        compute.max(axis=1, initial=0),
        memory.max(axis=1, initial=0),
        traffic.max(axis=1, initial=0),
        cost.link_bytes(flow, parts).sum(axis=1),
        used.sum(axis=1),
        (fu != fv).sum(axis=1),
        (fu > fv).sum(axis=1),
        (~used & below_top).sum(axis=1),
        triangle.sum(axis=1),
        (overflow > 0).sum(axis=1),
        overflow.sum(axis=1),
    ]
    return np.concatenate(
        [compute, memory, overflow, traffic, time, np.column_stack(summary)], axis=1
    ).astype(np.float64)
