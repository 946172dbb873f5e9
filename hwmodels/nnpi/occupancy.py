"""Tensors, their lifetimes and the capacity rule of the on-chip levels.

A workload of ``N`` nodes has ``T = 2N`` tensors in a fixed order: for each node in
execution order, its weight (tensor ``2i``) then its activation (tensor ``2i + 1``).
This is the row-major flattening of a mapping ``[N, 2]``, so ``maps.reshape(B, T)``
gives the level of every tensor.

Weights occupy their level for the whole inference; activation ``i`` occupies its level
from step ``i`` to ``last_use[i]`` inclusive. A map is invalid iff at some step the
weights on LLC or SRAM plus the activations live there exceed that level's capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.nnpi.params import DRAM, LEVELS
from workloads.ir import Workload

#: sums of bytes below this are exact in float64
_EXACT_FLOAT = 2**53


@dataclass(frozen=True)
class Tensors:
    """The ``T = 2N`` tensors of a workload.

    Attributes:
        nbytes: int64 ``[T]``: size.
        start: int64 ``[T]``: first step the tensor is live (0 for weights).
        end: int64 ``[T]``: last step it is live, inclusive (``N - 1`` for weights).
        is_weight: bool ``[T]``.
        num_steps: ``N``, the number of execution steps.
    """

    nbytes: np.ndarray
    start: np.ndarray
    end: np.ndarray
    is_weight: np.ndarray
    num_steps: int

    @classmethod
    def build(cls, workload: Workload) -> Tensors:
        n = workload.num_nodes
        steps = np.arange(n, dtype=np.int64)
        return cls(
            nbytes=np.stack([workload.weight_bytes, workload.output_bytes], axis=1).ravel(),
            start=np.stack([np.zeros(n, dtype=np.int64), steps], axis=1).ravel(),
            end=np.stack([np.full(n, n - 1, dtype=np.int64), workload.last_use], axis=1).ravel(),
            is_weight=np.tile(np.array([True, False]), n),
            num_steps=n,
        )

    @property
    def total_bytes(self) -> int:
        return int(self.nbytes.sum())

    def live(self) -> np.ndarray:
        """bool ``[T, N]``: tensor ``t`` occupies its level at step ``s``."""
        steps = np.arange(self.num_steps)
        return (self.start[:, None] <= steps[None, :]) & (steps[None, :] <= self.end[:, None])

    def occupancy(self, levels: np.ndarray) -> np.ndarray:
        """int64 ``[B, L, N]``: bytes held on each level at each step.

        Args:
            levels: int ``[B, T]``: level of every tensor.
        """
        onehot = levels[:, None, :] == np.arange(len(LEVELS))[None, :, None]  # [B, L, T]
        if self.total_bytes >= _EXACT_FLOAT:  # beyond float64's integers: integer matmul
            return (onehot * self.nbytes) @ self.live().astype(np.int64)
        # float64 matmul (BLAS) is exact on integers below 2**53 and ~3x faster
        sums = (onehot * self.nbytes.astype(np.float64)) @ self.live().astype(np.float64)
        return np.rint(sums).astype(np.int64)

    def maximal_live_sets(self) -> list[np.ndarray]:
        """Indices of the activations live together at some step, maximal sets only.

        A capacity row for a subset of another step's live set is implied by that
        step's row (sizes are non-negative), so only steps whose live set is maximal by
        inclusion (deduplicated) need a constraint. Zero-byte tensors are left out.
        """
        acts = np.flatnonzero(~self.is_weight & (self.nbytes > 0))
        if len(acts) == 0:
            return []
        cols = np.unique(self.live()[acts].T, axis=0)  # [S, A] distinct live sets
        cols = cols[cols.any(axis=1)]
        inter = cols.astype(np.int64) @ cols.T.astype(np.int64)  # |S_a & S_b|
        size = cols.sum(axis=1)
        # S_a is a strict subset of S_b iff |S_a & S_b| == |S_a| < |S_b|
        dominated = ((inter == size[:, None]) & (size[None, :] > size[:, None])).any(axis=1)
        return [acts[row] for row in cols[~dominated]]


def check_fits_in_dram(workload: Workload, tensors: Tensors, dram_bytes: int) -> None:
    """Raise ``ValueError`` if even the all-DRAM map overflows DRAM."""
    levels = np.full((1, len(tensors.nbytes)), DRAM, dtype=np.int64)
    peak = int(tensors.occupancy(levels)[0, DRAM].max())
    if peak > dram_bytes:
        raise ValueError(
            f"workload {workload.name!r} does not fit in DRAM even with every tensor there: "
            f"it needs {peak} bytes at its peak step (weights {workload.total_weight_bytes} "
            f"bytes plus live activations), DRAM holds {dram_bytes} bytes"
        )
