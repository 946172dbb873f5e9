"""A workload's totals, the same at every granularity."""

from __future__ import annotations

from workloads.ir import Workload


def totals(w: Workload) -> tuple[int, int, int]:
    """Sums of MACs, weight bytes and vector ops: the same at every granularity."""
    return int(w.macs.sum()), int(w.total_weight_bytes), int(w.vector_ops.sum())
