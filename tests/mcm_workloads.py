"""Small hand-built workloads and brute-force helpers for the multi-chip tests (no tests here)."""

from __future__ import annotations

import itertools

import numpy as np

from hwmodels.mcm.dataflow import Dataflow
from hwmodels.mcm.params import MCMParams
from tests.nnpi_workloads import layer
from workloads.ir import TensorInfo, Workload


def figure2() -> Workload:
    """The five-node graph of the paper's Figure 2a: 0->1, 0->2, 1->3, 2->4, 3->4."""
    nodes = [
        layer("n0", ["x"], [8], 10, weight_bytes=100, macs=50),
        layer("n1", ["n0"], [10], 20, weight_bytes=200, macs=100),
        layer("n2", ["n0"], [10], 30, weight_bytes=300, macs=150),
        layer("n3", ["n1"], [20], 40, weight_bytes=400, macs=200),
        layer("n4", ["n2", "n3"], [30, 40], 50, weight_bytes=500, macs=250),
    ]
    return Workload("figure2", nodes, [TensorInfo("x", (1, 8), 8)])


def flow_of(workload: Workload, sram_bytes: int = 2**30, num_chips: int = 3) -> Dataflow:
    """Arrays of ``workload`` on a package with 1 ps/op compute and 1 ps/byte links."""
    params = MCMParams(
        num_chips=num_chips, sram_mib=sram_bytes / 2**20, link_gbps=1000.0, peak_tops=1.0
    )
    return Dataflow.build(workload, params)


def all_partitions(num_nodes: int, num_chips: int) -> np.ndarray:
    """int64 ``[C**N, N]``: every map of ``N`` nodes to ``C`` chips."""
    return np.array(list(itertools.product(range(num_chips), repeat=num_nodes)), dtype=np.int64)


def contiguous_partitions(num_nodes: int, num_chips: int) -> np.ndarray:
    """int64 ``[K, N]``: every split of the execution order into 1..C non-empty ranges."""
    out = []
    for k in range(1, min(num_chips, num_nodes) + 1):
        for cuts in itertools.combinations(range(1, num_nodes), k - 1):
            bounds = (0, *cuts, num_nodes)
            out.append(np.repeat(np.arange(k), np.diff(bounds)))
    return np.array(out, dtype=np.int64)
