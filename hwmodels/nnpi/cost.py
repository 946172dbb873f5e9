"""The NNP-I latency model: an integer roofline per layer, layers run one after another.

For node ``i`` with weight level ``wl_i`` and activation (output) level ``al_i``::

    compute_i = fs_per_mac * (macs_i + vector_ops_i)
    mem_i     = w_i * fs[wl_i]                      # read its weights
              + sum_{p in producers(i)} out_p * fs[al_p]   # read each producer's output once
              + host_i * fs[DRAM]                   # read graph inputs (they live in DRAM)
              + out_i * fs[al_i]                    # write its output
    t_i       = max(compute_i, mem_i)               # compute overlaps the DMA path
    latency   = sum_i t_i                           # batch 1, one layer at a time

All quantities are int64 femtoseconds; ``latency_s = latency_fs / 1e15``.

A chip whose on-chip levels are banked may also slow a node's transfers that meet on one
level (:class:`~hwmodels.nnpi.figures.ChipFigures` ``conflict``): with ``k_il`` of node
``i``'s transfers on level ``l`` taking ``T_il`` in all, ``mem_i`` gains
``round(sum_l F_l * T_il * max(k_il - 1, 0))``. The NNP-I datasheet has ``F = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hwmodels.nnpi.params import DRAM, NNPIParams
from workloads.ir import Workload

#: heads of a mapping, in column order
WEIGHT, ACTIVATION = 0, 1


@dataclass(frozen=True)
class NodeCosts:
    """Per-node integer costs of one workload on one chip (``N`` nodes, ``L`` levels).

    Attributes:
        compute_fs: int64 ``[N]``: compute time at peak.
        weight_fs: int64 ``[N, L]``: time to read the node's weights from each level.
        output_fs: int64 ``[N, L]``: time of one transfer of the node's output at each
            level (paid once for the write and once per consumer read).
        host_fs: int64 ``[N]``: time to read the node's graph inputs from DRAM.
        consumers_of: CSR int64 ``[N, N]``: ``[i, p] = 1`` if node ``i`` reads node ``p``.
        conflict: float64 ``[L]``: each level's conflict factor ``F_l`` (module
            docstring; DRAM's 0), or None: no conflicts (the NNP-I model itself).
    """

    compute_fs: np.ndarray
    weight_fs: np.ndarray
    output_fs: np.ndarray
    host_fs: np.ndarray
    consumers_of: sp.csr_matrix
    conflict: np.ndarray | None = None

    @classmethod
    def build(cls, workload: Workload, params: NNPIParams) -> NodeCosts:
        fs = params.fs_per_byte
        n = workload.num_nodes
        src, dst = workload.edge_index
        reads = sp.csr_matrix(
            (np.ones(len(src), dtype=np.int64), (dst, src)), shape=(n, n), dtype=np.int64
        )
        return cls(
            compute_fs=params.fs_per_mac * (workload.macs + workload.vector_ops),
            weight_fs=workload.weight_bytes[:, None] * fs[None, :],
            output_fs=workload.output_bytes[:, None] * fs[None, :],
            host_fs=workload.graph_input_bytes * fs[DRAM],
            consumers_of=reads,
        )

    @property
    def num_nodes(self) -> int:
        return len(self.compute_fs)

    def memory_fs(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B, N]``: data-movement time of every node under ``maps`` ``[B, N, 2]``."""
        n, levels = self.weight_fs.shape
        base = np.arange(n, dtype=np.int64) * levels
        weight = self.weight_fs.ravel()[base + maps[:, :, WEIGHT]]
        output = self.output_fs.ravel()[base + maps[:, :, ACTIVATION]]
        reads = np.asarray(self.consumers_of @ output.T).T
        memory = weight + output + reads + self.host_fs
        if self.conflict is not None:
            memory = memory + self.conflict_fs(maps)
        return memory

    def conflict_fs(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B, N]``: what the transfers that meet on a level add to every node's
        memory time under ``maps`` ``[B, N, 2]`` (zeros without :attr:`conflict`)."""
        b, n = maps.shape[:2]
        extra = np.zeros((b, n))
        if self.conflict is None:
            return extra.astype(np.int64)
        rows = np.arange(n)[None, :]
        for lv in np.flatnonzero(self.conflict > 0).tolist():
            w_on, o_on = maps[:, :, WEIGHT] == lv, maps[:, :, ACTIVATION] == lv  # [B, N]
            out = np.where(o_on, self.output_fs[rows, lv], 0)  # [B, N]
            time = np.where(w_on, self.weight_fs[rows, lv], 0) + out
            time = time + np.asarray(self.consumers_of @ out.T).T
            sent = o_on & (self.output_fs[rows, lv] > 0)
            count = (w_on & (self.weight_fs[rows, lv] > 0)) + sent.astype(np.int64)
            count = count + np.asarray(self.consumers_of @ sent.T.astype(np.int64)).T
            extra += self.conflict[lv] * time * np.maximum(count - 1, 0)
        return np.round(extra).astype(np.int64)

    def node_fs(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B, N]``: time of every node (roofline max of compute and memory)."""
        return np.maximum(self.memory_fs(maps), self.compute_fs)

    def latency_fs(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B]``: latency of each map in ``maps`` ``[B, N, 2]`` (taken as given)."""
        return self.node_fs(maps).sum(axis=1)
