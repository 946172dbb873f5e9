"""The per-node arrays of a workload that the multi-chip model reads.

A partition assigns every node (in execution order) to a chip. What crosses the ring
is each node's output tensor: it leaves the producer's chip once and travels down the
ring to the farthest chip that reads it, dropping a copy at every consumer on the way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.mcm.params import MCMParams
from workloads.ir import Workload


@dataclass(frozen=True)
class Dataflow:
    """Node sizes, costs and edges of one workload for one package.

    Attributes:
        num_nodes: ``N``.
        num_chips: ``C``.
        src: int64 ``[E]``: producer of each edge, sorted (then by ``dst``).
        dst: int64 ``[E]``: consumer of each edge; ``src < dst``.
        out_bytes: int64 ``[N]``: bytes of each node's output tensor.
        resident_bytes: int64 ``[N]``: bytes a node holds on its own chip: its weights,
            its output tensor and the host tensors it reads.
        compute_ps: int64 ``[N]``: compute time of each node on one chip, ps.
        last_use: int64 ``[N]``: index of each node's last consumer (itself if none).
        producers: int64 ``[P]``: nodes with at least one consumer, ascending.
        group_start: int64 ``[P]``: first edge of each producer in ``src``/``dst``.
        capacity: SRAM bytes of one chip.
        ps_per_byte: ps to move one byte over one link.
    """

    num_nodes: int
    num_chips: int
    src: np.ndarray
    dst: np.ndarray
    out_bytes: np.ndarray
    resident_bytes: np.ndarray
    compute_ps: np.ndarray
    last_use: np.ndarray
    producers: np.ndarray
    group_start: np.ndarray
    capacity: int
    ps_per_byte: int

    @classmethod
    def build(cls, workload: Workload, params: MCMParams) -> Dataflow:
        """The arrays of ``workload`` on the package ``params``."""
        src, dst = (np.asarray(a, dtype=np.int64) for a in workload.edge_index)
        order = np.lexsort((dst, src))
        src, dst = src[order], dst[order]
        ops = 2 * workload.macs.astype(np.float64) + workload.vector_ops
        producers, group_start = np.unique(src, return_index=True)
        return cls(
            num_nodes=workload.num_nodes,
            num_chips=int(params.num_chips),
            src=src,
            dst=dst,
            out_bytes=workload.output_bytes.astype(np.int64),
            resident_bytes=(
                workload.weight_bytes + workload.output_bytes + workload.graph_input_bytes
            ).astype(np.int64),
            compute_ps=np.round(ops * params.ps_per_op).astype(np.int64),
            last_use=workload.last_use.astype(np.int64),
            producers=producers.astype(np.int64),
            group_start=group_start.astype(np.int64),
            capacity=int(params.sram_bytes),
            ps_per_byte=int(params.ps_per_byte),
        )

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def farthest_reader(self, parts: np.ndarray) -> np.ndarray:
        """int64 ``[B, N]``: the highest chip that holds each node's output under ``parts``.

        That is the node's own chip or the highest chip of its consumers, whichever is
        higher (a consumer below the producer breaks acyclic dataflow and is ignored).
        """
        far = parts.copy()
        if self.num_edges:
            reach = np.maximum.reduceat(parts[:, self.dst], self.group_start, axis=1)
            far[:, self.producers] = np.maximum(far[:, self.producers], reach)
        return far
