"""Parameters of the banked on-chip memory and their integer cost units.

Every time of the model is an integer number of femtoseconds (fs): the cost tables of
:mod:`hwmodels.banked.problem` are rounded once, and the evaluator
(:mod:`hwmodels.banked.cost`) and the exact CP-SAT model
(:mod:`hwmodels.banked.optimum`) add up the very same integers for the same map.

Defaults: the bank structure of an AWS NeuronCore. The paper this model follows
(Zheng et al., "Optimizing Memory-Access Patterns for Deep Learning Accelerators",
2020) ran on the first Inferentia chip, whose on-chip memory figures are not public;
the defaults are the published figures of its successor core (NeuronCore-v2, in
Inferentia2 and Trainium), from the AWS Neuron documentation. ``docs/banked.md`` lists
each value, its source, and which values are assumptions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

#: femtoseconds per second
FS_PER_S = 10**15

_KIB = 1024


@dataclass(frozen=True)
class BankedParams:
    """The on-chip memory: banks, their size and bandwidth; the off-chip bandwidth.

    Attributes:
        num_banks: banks with disjoint address spaces, one per row of the systolic
            array (128: the 128 partitions of a NeuronCore-v2 state buffer).
        bank_kib: capacity of one bank, KiB (192: 24 MiB over 128 partitions).
        bank_gbps: read or write bandwidth of one bank, GB/s (16: an assumption,
            2 TB/s over all 128 banks).
        copy_gbps: bandwidth of an on-chip bank-to-bank copy, GB/s (500: half the
            1 TB/s DMA bandwidth of an Inferentia2 device, which has two cores).
        dram_gbps: off-chip (device memory) bandwidth, GB/s (410: half the 820 GB/s of
            an Inferentia2 device).
        element_bytes: bytes per tensor element; 0 keeps the workload's own.
    """

    num_banks: int = 128
    bank_kib: float = 192.0
    bank_gbps: float = 16.0
    copy_gbps: float = 500.0
    dram_gbps: float = 410.0
    element_bytes: int = 0

    def __post_init__(self) -> None:
        if int(self.num_banks) != self.num_banks or self.num_banks < 1:
            raise ValueError(f"banked num_banks must be a positive integer, got {self.num_banks!r}")
        if int(self.element_bytes) != self.element_bytes or self.element_bytes < 0:
            raise ValueError(
                f"banked element_bytes must be 0 (the workload's) or a positive integer, "
                f"got {self.element_bytes!r}"
            )
        for name, value in asdict(self).items():
            if name in ("num_banks", "element_bytes"):
                continue
            if not np.isfinite(value) or value <= 0:
                raise ValueError(
                    f"banked parameter {name} must be a positive number, got {value!r}"
                )

    @property
    def bank_bytes(self) -> float:
        """Capacity of one bank in bytes."""
        return self.bank_kib * _KIB

    def fs_per_byte(self, gbps: float) -> float:
        """Femtoseconds to move one byte at ``gbps`` GB/s."""
        return FS_PER_S / (gbps * 1e9)
