"""Parameters of the NNP-I memory hierarchy and their integer cost units.

Every cost of the model is an integer number of femtoseconds (fs) so that the fast
evaluator (:mod:`hwmodels.nnpi.cost`) and the exact CP-SAT model
(:mod:`hwmodels.nnpi.optimum`) compute the very same number for the same map.

Defaults are the Intel NNP-I 1000 "Spring Hill" figures (Hot Chips 31, Wechsler et
al. 2019) with the SRAM capacity the EGRL paper models (4 MiB, one ICE's deep SRAM);
``docs/nnpi.md`` lists the sources.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

#: Memory levels, slowest first; a level's index is its choice in a mapping.
LEVELS: tuple[str, ...] = ("DRAM", "LLC", "SRAM")
DRAM, LLC, SRAM = 0, 1, 2

#: femtoseconds per second
FS_PER_S = 10**15

_GIB = 2**30
_MIB = 2**20


@dataclass(frozen=True)
class NNPIParams:
    """Capacities, bandwidths and compute rate of the chip.

    Attributes:
        dram_gib: DRAM capacity, GiB (LPDDR4x: 32).
        llc_mib: last-level cache capacity, MiB (8 slices x 3 MiB: 24).
        sram_mib: deep-SRAM capacity a map may use, MiB (EGRL models 4; the chip has
            4 per ICE, 48 in all).
        dram_gbps: DRAM bandwidth, GB/s (67.2).
        llc_gbps: LLC bandwidth, GB/s (~680).
        sram_gbps: SRAM bandwidth, GB/s (~6800).
        peak_tops: int8 peak, tera-operations/s, two operations per MAC (50).
    """

    dram_gib: float = 32.0
    llc_mib: float = 24.0
    sram_mib: float = 4.0
    dram_gbps: float = 67.2
    llc_gbps: float = 680.0
    sram_gbps: float = 6800.0
    peak_tops: float = 50.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not np.isfinite(value) or value <= 0:
                raise ValueError(f"nnpi parameter {name} must be a positive number, got {value!r}")
        fs = [FS_PER_S / (bw * 1e9) for bw in self.bandwidths_gbps]
        if min(fs) < 0.5:
            raise ValueError(
                f"nnpi bandwidths {self.bandwidths_gbps} GB/s are too high for the 1 fs/byte "
                "resolution of the cost model"
            )
        if FS_PER_S / (self.peak_tops * 1e12 / 2) < 0.5:
            raise ValueError(f"nnpi peak_tops={self.peak_tops} is too high for 1 fs/MAC resolution")

    @property
    def bandwidths_gbps(self) -> tuple[float, float, float]:
        return (self.dram_gbps, self.llc_gbps, self.sram_gbps)

    @property
    def capacity_bytes(self) -> np.ndarray:
        """int64 ``[3]``: capacity of DRAM, LLC and SRAM in bytes."""
        return np.array(
            [
                round(self.dram_gib * _GIB),
                round(self.llc_mib * _MIB),
                round(self.sram_mib * _MIB),
            ],
            dtype=np.int64,
        )

    @property
    def on_chip_bytes(self) -> int:
        """Bytes the levels above DRAM (LLC and SRAM) hold at once."""
        return int(self.capacity_bytes[1:].sum())

    def on_chip_share(self, moved_bytes: int) -> float:
        """The share of ``moved_bytes`` (``Workload.moved_bytes``) LLC and SRAM hold, at most 1."""
        return min(self.on_chip_bytes / max(moved_bytes, 1), 1.0)

    @property
    def fs_per_byte(self) -> np.ndarray:
        """int64 ``[3]``: femtoseconds to move one byte from/to each level, rounded.

        Defaults: DRAM 14881, LLC 1471, SRAM 147.
        """
        return np.array(
            [round(FS_PER_S / (bw * 1e9)) for bw in self.bandwidths_gbps], dtype=np.int64
        )

    @property
    def fs_per_mac(self) -> int:
        """Femtoseconds per MAC (or vector operation) at peak: 40 for 50 TOPS."""
        return round(FS_PER_S / (self.peak_tops * 1e12 / 2))
