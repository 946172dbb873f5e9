"""Parameters of the multi-chip module and their integer cost units.

Every time of the model is an integer number of picoseconds (ps) so that the fast
evaluator (:mod:`hwmodels.mcm.cost`), the contiguous-split dynamic programme
(:mod:`hwmodels.mcm.native`) and the exact CP-SAT model (:mod:`hwmodels.mcm.optimum`)
compute the very same number for the same partition.

Defaults follow the platform of Xie et al., "A Transferable Approach for Partitioning
Machine Learning Models on Multi-Chip-Modules" (MLSys 2022), section 3: a 36-chiplet
edge-TPU package on a uni-directional ring, "tens of MBs" of SRAM per chip and
inter-chip links of "tens of GB/s"; ``docs/mcm.md`` lists every value and its source.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

#: picoseconds per second
PS_PER_S = 10**12

_MIB = 2**20


@dataclass(frozen=True)
class MCMParams:
    """The package: number of chips, per-chip SRAM and compute, ring link bandwidth.

    Attributes:
        num_chips: chiplets on the ring (36).
        sram_mib: SRAM of each chip, MiB (32: "tens of MBs").
        link_gbps: bandwidth of each uni-directional ring link, GB/s (20: "tens of GB/s").
        peak_tops: int8 peak of each chip, tera-operations/s, two operations per MAC (4).
    """

    num_chips: int = 36
    sram_mib: float = 32.0
    link_gbps: float = 20.0
    peak_tops: float = 4.0

    def __post_init__(self) -> None:
        if int(self.num_chips) != self.num_chips or self.num_chips < 1:
            raise ValueError(f"mcm num_chips must be a positive integer, got {self.num_chips!r}")
        for name, value in asdict(self).items():
            if not np.isfinite(value) or value <= 0:
                raise ValueError(f"mcm parameter {name} must be a positive number, got {value!r}")
        if self.ps_per_byte < 1:
            raise ValueError(
                f"mcm link_gbps={self.link_gbps} is too high for the 1 ps/byte resolution"
            )

    @property
    def sram_bytes(self) -> int:
        """SRAM capacity of one chip in bytes."""
        return round(self.sram_mib * _MIB)

    @property
    def ps_per_byte(self) -> int:
        """Picoseconds to move one byte over one ring link, rounded (50 at 20 GB/s)."""
        return round(PS_PER_S / (self.link_gbps * 1e9))

    @property
    def ps_per_op(self) -> float:
        """Picoseconds per operation at peak (0.25 at 4 TOPS; a MAC is two operations)."""
        return PS_PER_S / (self.peak_tops * 1e12)

    @property
    def chip_names(self) -> list[str]:
        """``["chip0", ..., "chip{C-1}"]``: the choices of the ``chip`` head."""
        return [f"chip{c}" for c in range(self.num_chips)]
