"""A finished (or partial) memory layout: where and when each buffer sits in CMEM.

A :class:`Layout` is what a game leaves behind (:meth:`hwmodels.tpu.game.Game.layout`):
per buffer the action, the CMEM offset (-1: HBM) and the allocation interval, the copy
steps, and the copy time spent in each instruction. From it come the program's latency
(:meth:`Layout.latency_s`) and a check that no two allocations share bytes at the same
time (:meth:`Layout.overlaps`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.tpu.cost import program_latency_s
from hwmodels.tpu.program import Program


@dataclass
class Layout:
    """Offsets and intervals of a program's buffers (arrays ``[N]`` unless said).

    Attributes:
        program: the program.
        action: int64: 0 Drop, 1 Copy, 2 NoCopy, -1 undecided.
        offset: int64: CMEM offset, -1 in HBM.
        start, end: int64: allocation interval, inclusive (``end < start``: the buffer
            reuses an allocation that already covers its time).
        copy_start, copy_end: int64: copy steps, inclusive (-1: no copy).
        copy_ps: int64 ``[T]``: copy time spent in each instruction, ps.
        ret: the game's return for this layout.
    """

    program: Program
    action: np.ndarray
    offset: np.ndarray
    start: np.ndarray
    end: np.ndarray
    copy_start: np.ndarray
    copy_end: np.ndarray
    copy_ps: np.ndarray
    ret: float

    @property
    def in_cmem(self) -> np.ndarray:
        """bool ``[N]``: the buffer is read or written in CMEM."""
        return self.offset >= 0

    @property
    def allocated(self) -> np.ndarray:
        """bool ``[N]``: the buffer holds CMEM over an interval of its own."""
        return self.in_cmem & (self.end >= self.start)

    def latency_s(self, contention: bool = True) -> float:
        """The program's latency with this layout (see :mod:`hwmodels.tpu.cost`).

        Args:
            contention: copies share HBM bandwidth with the instructions they overlap.
                ``False`` gives exactly the all-HBM latency minus the game's return.
        """
        p = self.program
        return program_latency_s(
            p.compute_s,
            p.time,
            p.size,
            self.in_cmem,
            self.copy_ps if contention else None,
            p.params,
        )

    def overlaps(self) -> list[tuple[int, int]]:
        """Pairs of buffers of different alias groups holding the same bytes at the same
        time (an empty list for any layout the game produced)."""
        idx = np.flatnonzero(self.allocated)
        size, alias = self.program.size, self.program.alias
        bad = []
        for j, a in enumerate(idx):
            rest = idx[j + 1 :]
            hit = (
                (self.start[rest] <= self.end[a])
                & (self.end[rest] >= self.start[a])
                & (self.offset[rest] < self.offset[a] + size[a])
                & (self.offset[rest] + size[rest] > self.offset[a])
                & (alias[rest] != alias[a])
            )
            bad += [(int(a), int(b)) for b in rest[hit]]
        return bad

    def to_dict(self) -> dict[str, list]:
        """Plain lists, keyed by field (for JSON)."""
        keys = ("action", "offset", "start", "end", "copy_start", "copy_end")
        return {k: getattr(self, k).tolist() for k in keys} | {"ret": self.ret}
