"""Chips of the tests: the external model's example chip, the toy chip of
``docs/hwmodels.md`` and one small, capacity-bound instance of every hardware model."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import hwmodels
from hwmodels.external import ExternalModel
from hwmodels.mcm import MCM
from hwmodels.nnpi import NNPI
from tests.nnpi_workloads import random_dag
from tests.support.paths import PY, ROOT
from workloads.ir import Node, TensorInfo, Workload

#: the external model's example chip (``examples/external_chip.py``)
CHIP = str(ROOT / "examples" / "external_chip.py")
#: small capacities so that :func:`tiny_workload` overflows them
CHIP_ARGS = ["--sram-kib", "1", "--llc-kib", "8"]
#: the toy chip of ``docs/hwmodels.md``, loaded from its file
TOY = str(ROOT / "examples" / "toy_chip.py")


def tiny_workload() -> Workload:
    """Four nodes: conv -> conv -> add (reads both) -> linear; weights 216 / 576 / 0 / 5120 B."""
    a = (1, 8, 8, 8)
    nodes = [
        Node("c1", "conv", ["x"], [(1, 3, 8, 8)], a, weight_bytes=216, macs=13824),
        Node("c2", "conv", ["c1"], [a], a, weight_bytes=576, macs=36864),
        Node("add", "eltwise", ["c1", "c2"], [a, a], a, vector_ops=512),
        Node("fc", "linear", ["add"], [a], (1, 10), weight_bytes=5120, macs=5120),
    ]
    return Workload("tiny", nodes, [TensorInfo("x", (1, 3, 8, 8), 192)])


def external_chip() -> ExternalModel:
    """The example chip, with capacities :func:`tiny_workload` overflows."""
    return ExternalModel([PY, CHIP, *CHIP_ARGS])


#: one small, capacity-bound instance of every model (a new registered model must add one)
MODELS: dict[str, Callable[[], hwmodels.HardwareModel]] = {
    "nnpi": lambda: NNPI(llc_mib=8000 / 2**20, sram_mib=3000 / 2**20),
    "external": external_chip,
    "toy": lambda: hwmodels.make("toy", module=TOY, capacity_kib=[4, 1024]),
    "mcm": lambda: MCM(num_chips=3, sram_mib=20000 / 2**20),
    "mcm-sample": lambda: MCM(num_chips=3, sram_mib=20000 / 2**20, mode="sample"),
    "banked": lambda: hwmodels.make("banked", num_banks=4, bank_kib=1),
    "tpu-cmem": lambda: hwmodels.make("tpu-cmem", cmem_mib=8 / 1024),
}


def contract_workload() -> Workload:
    """The small workload every model of :data:`MODELS` is bound to."""
    return random_dag(8, np.random.default_rng(11), max_bytes=4096)
