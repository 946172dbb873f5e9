"""The hardware-model protocol.

A :class:`HardwareModel` is a chip (or a compiler for it) with its parameters.
Binding it to a workload (Algorithm 1, line 3: the graph transform G) gives a
:class:`Target`: the decision units, the decision heads, the decision graph the
policies read, the native compiler's map and a way to measure a batch of maps.

``Target.measure`` is the whole hardware side of one evaluation (Algorithm 1,
lines 6-9): the compiler C repairs each map, and the repaired map is run (or
modelled) to get its latency. Rewards are computed from that by the environment
(:mod:`egrl.env`), so a new target only has to say what the chip would do.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from workloads.ir import Workload


@dataclass
class Measurement:
    """What the hardware says about a batch of ``B`` maps over ``N`` units and ``H`` heads.

    Attributes:
        rectified: int64 ``[B, N, H]``: the maps as the compiler repaired them.
        valid: bool ``[B]``: the compiler did not have to change the map.
        reassigned_ratio: float64 ``[B]``: re-assigned bytes over all mappable bytes
            (0 for a valid map).
        latency_s: float64 ``[B]``: latency of the rectified map in seconds (NaN where
            the target did not run it).
    """

    rectified: np.ndarray
    valid: np.ndarray
    reassigned_ratio: np.ndarray
    latency_s: np.ndarray


@dataclass
class OptimumResult:
    """An exact (or bounded) solution of a target's cost model.

    Attributes:
        mapping: int64 ``[N, H]``: the best map found.
        latency_s: its latency.
        bound_s: proven lower bound on the latency of any valid map.
        gap: relative optimality gap ``(latency - bound) / latency`` (0 when proven).
        proven: the solver proved optimality.
        status: solver status name.
        wall_s: solver wall time.
    """

    mapping: np.ndarray
    latency_s: float
    bound_s: float
    gap: float
    proven: bool
    status: str
    wall_s: float
    info: dict = field(default_factory=dict)


class Target(ABC):
    """A hardware model bound to one workload."""

    #: decision heads and the names of their choices; choice 0 is slowest and always valid
    heads: dict[str, list[str]]
    #: number of decision units (rows of a mapping)
    num_units: int
    #: names of the decision units, in row order
    unit_names: list[str]

    @property
    def head_names(self) -> list[str]:
        return list(self.heads)

    @property
    @abstractmethod
    def graph(self):
        """The decision graph (``torch_geometric.data.Data``) the policies read."""

    @abstractmethod
    def measure(self, maps: np.ndarray) -> Measurement:
        """Compile and run a batch of maps ``[B, N, H]``."""

    @abstractmethod
    def native_mapping(self) -> np.ndarray:
        """The native compiler's own map ``[N, H]``."""

    def optimum(self, time_limit_s: float = 600.0, workers: int = 2, **kwargs) -> OptimumResult:
        """Solve the cost model exactly where the target allows it."""
        raise NotImplementedError(f"{type(self).__name__} has no exact solver")


class HardwareModel(ABC):
    """A chip with its parameters; :meth:`bind` specialises it to a workload."""

    name: str = "hardware"

    @abstractmethod
    def bind(self, workload: Workload) -> Target:
        """The graph transform G: the target for ``workload``."""
