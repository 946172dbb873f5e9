"""Parameters of the TPU memory-mapping model and the units of its clock.

Defaults are TPUv4i-like: 128 MiB of CMEM and 614 GB/s of HBM bandwidth as stated by
Wang et al., "Optimizing Memory Mapping Using Deep Reinforcement Learning" (DeepMind,
2023, arXiv:2305.07440), section 5, and 138 TFLOPS of peak compute (Jouppi et al.,
"Ten Lessons From Three Generations Shaped Google's TPUv4i", ISCA 2021). The CMEM read
bandwidth has no published figure we rely on: it is an assumption (4x HBM) and, like
every value here, configurable. ``docs/tpu.md`` lists each value and its source.

Supply and demand (the copy-time budget of Appendix A) are integer picoseconds, so that
the game compares them exactly and the same actions always give the same layout.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

#: picoseconds per second
PS_PER_S = 10**12
_MIB = 2**20


@dataclass(frozen=True)
class TPUParams:
    """The chip: fast-memory size, bandwidths and peak compute.

    Attributes:
        cmem_mib: fast memory (CMEM) capacity, MiB (128).
        hbm_gbps: HBM bandwidth seen by an instruction, GB/s (614).
        cmem_gbps: CMEM bandwidth seen by an instruction, GB/s (2456: an assumption,
            4x HBM).
        copy_gbps: bandwidth of an HBM <-> CMEM copy, GB/s (614: a copy streams from or
            to HBM, so HBM bounds it).
        peak_tflops: peak compute, tera-operations/s; a MAC is two operations (138).
    """

    cmem_mib: float = 128.0
    hbm_gbps: float = 614.0
    cmem_gbps: float = 4 * 614.0
    copy_gbps: float = 614.0
    peak_tflops: float = 138.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
                raise ValueError(
                    f"tpu-cmem parameter {name} must be a positive number, got {value!r}"
                )
        if self.cmem_bytes >= 2**31:
            raise ValueError(
                f"tpu-cmem cmem_mib={self.cmem_mib} is too large: the game keeps offsets below 2 GiB"
            )

    @property
    def cmem_bytes(self) -> int:
        """CMEM capacity in bytes."""
        return int(round(self.cmem_mib * _MIB))

    @property
    def copy_ps_per_byte(self) -> float:
        """Picoseconds to copy one byte between HBM and CMEM."""
        return PS_PER_S / (self.copy_gbps * 1e9)
