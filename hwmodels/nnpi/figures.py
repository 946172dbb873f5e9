"""A chip's figures beyond the NNP-I datasheet: set-up times, compute efficiencies and
bank conflicts.

The NNP-I cost model (:mod:`hwmodels.nnpi.cost`) takes one bandwidth per level and one
compute rate (:class:`~hwmodels.nnpi.NNPIParams`). A chip often also has a fixed set-up
time per transfer on each level, a compute efficiency per operator class and banked
on-chip memories whose bandwidth a node's transfers share, which no NNP-I parameter
expresses. All give per-node integer costs the CP-SAT model reads term for term
(:class:`~hwmodels.nnpi.cost.NodeCosts`; a conflict is priced per configuration of a
layer's tensors), so a target bound with :func:`bind` is evaluated and solved exactly as
the plain model is:

* ``weight_fs[i, l] = w_i / bw_l + setup_l`` (a weight is one transfer), likewise
  ``output_fs`` (paid at the write and at each consumer's read) and ``host_fs``
  (one DRAM transfer per graph input);
* ``compute_fs[i] = (macs_i / eff[op_type_i] + vector_ops_i / eff["vector"]) / rate``:
  the classes are the workload's op types of nodes with MACs, and ``vector`` for every
  node's fused vector operations (:func:`op_classes`);
* ``conflict[l] = F_l``: a node with ``k`` transfers on on-chip level ``l`` takes
  ``1 + F_l * (k - 1)`` times their time there (the banks they share; DRAM's is 0).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from hwmodels.nnpi.cost import NodeCosts
from hwmodels.nnpi.params import DRAM, FS_PER_S, LEVELS, NNPIParams
from workloads.ir import Workload

if TYPE_CHECKING:
    from hwmodels.nnpi.target import NNPITarget

#: the efficiency class of every node's fused vector operations
VECTOR = "vector"
#: the format tag of a saved calibration (``Calibration.save``)
FORMAT = "egrl-calibration/1"


def op_classes(workload: Workload) -> tuple[list[str], np.ndarray]:
    """The compute classes of ``workload``: ``names`` (op types of nodes with MACs, in
    the workload's order of first use, then ``vector`` if any node has vector
    operations) and int64 ``[N]``: each node's class of its MACs (-1: none)."""
    macs = np.asarray(workload.macs)
    names: list[str] = []
    for op, m in zip(workload.op_types, macs):
        if m > 0 and op not in names:
            names.append(op)
    index = np.array([names.index(op) if m > 0 else -1 for op, m in zip(workload.op_types, macs)])
    if (np.asarray(workload.vector_ops) > 0).any():
        names.append(VECTOR)
    return names, index.astype(np.int64)


def host_transfers(workload: Workload) -> np.ndarray:
    """int64 ``[N]``: graph inputs each node reads (one DRAM transfer each)."""
    hosted = {t.name for t in workload.graph_inputs}
    return np.array([sum(s in hosted for s in n.inputs) for n in workload.nodes], dtype=np.int64)


@dataclass(frozen=True)
class ChipFigures:
    """NNP-I parameters plus what they cannot say.

    Attributes:
        params: capacities, bandwidths and the peak compute rate.
        setup_s: seconds ``[3]`` every transfer pays on DRAM, LLC and SRAM.
        efficiency: share of peak per compute class (:func:`op_classes`; classes not
            named run at peak), each in (0, 1].
        conflict: ``[3]`` factors >= 0 by which each extra transfer of a node on a
            level slows its transfers there (module docstring); DRAM's must be 0.
    """

    params: NNPIParams = field(default_factory=NNPIParams)
    setup_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    efficiency: Mapping[str, float] = field(default_factory=dict)
    conflict: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        if len(self.setup_s) != len(LEVELS) or not all(
            math.isfinite(s) and s >= 0 for s in self.setup_s
        ):
            raise ValueError(f"setup_s must be {len(LEVELS)} seconds >= 0, got {self.setup_s!r}")
        bad = {k: v for k, v in self.efficiency.items() if not (0 < float(v) <= 1)}
        if bad:
            raise ValueError(f"efficiency must be in (0, 1] per class, got {bad}")
        if (
            len(self.conflict) != len(LEVELS)
            or not all(math.isfinite(f) and f >= 0 for f in self.conflict)
            or self.conflict[DRAM] != 0
        ):
            raise ValueError(
                f"conflict must be {len(LEVELS)} factors >= 0 (DRAM's 0), got {self.conflict!r}"
            )

    @property
    def plain(self) -> bool:
        """No set-up time, every class at peak, no conflicts: the NNP-I model itself."""
        return (
            not any(self.setup_s)
            and all(v == 1 for v in self.efficiency.values())
            and not any(self.conflict)
        )

    def to_dict(self) -> dict:
        """JSON-ready: ``params`` (every NNP-I field), ``setup_s`` ``[3]``, ``efficiency``,
        ``conflict`` ``[3]``."""
        return {
            "params": asdict(self.params),
            "setup_s": [float(s) for s in self.setup_s],
            "efficiency": {k: float(v) for k, v in self.efficiency.items()},
            "conflict": [float(f) for f in self.conflict],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> ChipFigures:
        """The figures :meth:`to_dict` wrote (ValueError naming what is wrong)."""
        try:
            setup = tuple(float(s) for s in data.get("setup_s", (0.0,) * len(LEVELS)))
            conflict = tuple(float(f) for f in data.get("conflict", (0.0,) * len(LEVELS)))
            return cls(
                NNPIParams(**dict(data["params"])),
                setup,  # type: ignore[arg-type]
                {str(k): float(v) for k, v in dict(data.get("efficiency", {})).items()},
                conflict,  # type: ignore[arg-type]
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"chip figures are malformed: {exc!r}") from None

    def node_costs(self, workload: Workload) -> NodeCosts:
        """The per-node integer costs of ``workload`` under these figures (the NNP-I
        model's own, :meth:`NodeCosts.build`, when :attr:`plain`)."""
        base = NodeCosts.build(workload, self.params)
        if self.plain:
            return base
        fs_per_byte = FS_PER_S / (np.asarray(self.params.bandwidths_gbps) * 1e9)  # [L]
        setup_fs = np.asarray(self.setup_s) * FS_PER_S  # [L]
        w, o = workload.weight_bytes, workload.output_bytes
        weight = w[:, None] * fs_per_byte + (w > 0)[:, None] * setup_fs
        output = o[:, None] * fs_per_byte + (o > 0)[:, None] * setup_fs
        host = workload.graph_input_bytes * fs_per_byte[DRAM]
        host = host + host_transfers(workload) * setup_fs[DRAM]
        return NodeCosts(
            compute_fs=np.round(self.compute_fs(workload)).astype(np.int64),
            weight_fs=np.round(weight).astype(np.int64),
            output_fs=np.round(output).astype(np.int64),
            host_fs=np.round(host).astype(np.int64),
            consumers_of=sp.csr_matrix(base.consumers_of),
            conflict=np.asarray(self.conflict, dtype=np.float64) if any(self.conflict) else None,
        )

    def compute_fs(self, workload: Workload) -> np.ndarray:
        """float64 ``[N]``: each node's compute time under the class efficiencies."""
        names, index = op_classes(workload)
        eff = np.array([float(self.efficiency.get(c, 1.0)) for c in names] + [1.0])
        fs_per_mac = FS_PER_S / (self.params.peak_tops * 1e12 / 2)
        vector = float(self.efficiency.get(VECTOR, 1.0))
        return fs_per_mac * (workload.macs / eff[index] + workload.vector_ops / vector)

    def bind(self, workload: Workload, **options) -> NNPITarget:
        """The NNP-I target of ``workload`` whose costs are these figures' (``options``:
        ``native``, ``native_passes``)."""
        from hwmodels.nnpi import NNPI  # the package: the target class lives above

        target = NNPI(**asdict(self.params), **options).bind(workload)
        if not self.plain:
            target.costs = self.node_costs(workload)
        return target


def load_figures(path: str | Path) -> ChipFigures:
    """The calibrated figures of a saved calibration (``Calibration.save``).

    Raises:
        ValueError: the file is missing, not JSON, not a calibration, or malformed.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read a calibration from {str(path)!r}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is no calibration (expected format {FORMAT!r})")
    return ChipFigures.from_dict(data.get("figures", {}))
