"""The banked-memory hardware model and its binding to a workload.

>>> import hwmodels
>>> hw = hwmodels.make("banked", num_banks=128, bank_kib=192)
>>> target = hw.bind(workload)
>>> m = target.measure(maps)  # maps: int [B, N, 1], the layout of every node's output
"""

from __future__ import annotations

import logging
from functools import cached_property

import numpy as np

from hwmodels.banked import compilers, optimum
from hwmodels.banked.cost import Cost, evaluate
from hwmodels.banked.layouts import LAYOUTS
from hwmodels.banked.params import BankedParams
from hwmodels.banked.problem import BankProblem
from hwmodels.base import (
    Check,
    HardwareModel,
    Measurement,
    OptimumResult,
    Target,
    workload_graph,
)
from workloads.ir import Workload

log = logging.getLogger(__name__)


class BankedTarget(Target):
    """A banked on-chip memory bound to one workload: one unit per node (its output
    tensor), one head ``layout`` (:data:`~hwmodels.banked.layouts.LAYOUTS`).

    The compiler repairs a map with :func:`~hwmodels.banked.compilers.rectify`; the
    latency of a map is its memory time (:mod:`hwmodels.banked.cost`). The native map
    is the global mapping, the initial map every tensor in ``axis1`` where its producer
    accepts it (the paper's outer dimension across the banks), repaired.
    """

    #: the cost model is the measurement: the prior is the model itself, solved exactly
    has_prior = True

    def __init__(self, params: BankedParams, workload: Workload) -> None:
        self.params = params
        self.workload = workload
        self.heads = {"layout": list(LAYOUTS)}
        self.num_units = workload.num_nodes
        self.unit_names = list(workload.node_names)
        self.problem = BankProblem.build(workload, params)

    @cached_property
    def graph(self):
        return workload_graph(self.workload)

    def cost(self, maps: np.ndarray) -> Cost:
        """Copies and memory time of allowed maps int ``[B, N, 1]`` (or layouts ``[B, N]``)."""
        maps = np.asarray(maps, dtype=np.int64)
        return evaluate(self.problem, maps[..., 0] if maps.ndim == 3 else maps)

    def check(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Check:
        """The compiler alone on layouts ``[B, N, 1]``: each layout an operator does not
        allow is replaced (:func:`~hwmodels.banked.compilers.rectify`)."""
        lay, broken = compilers.rectify(self.problem, np.asarray(maps)[:, :, 0])
        size = self.problem.size
        return Check(
            rectified=lay[..., None],
            valid=~broken.any(axis=1),
            reassigned_ratio=(broken * size).sum(axis=1) / max(int(size.sum()), 1),
        )

    def measure(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Measurement:
        c = self.check(maps)
        latency_s = evaluate(self.problem, c.rectified[..., 0]).latency_s
        return Measurement(c.rectified, c.valid, c.reassigned_ratio, latency_s)

    @cached_property
    def _native(self) -> np.ndarray:
        return compilers.global_mapping(self.problem)

    def native_mapping(self) -> np.ndarray:
        return self._native[:, None].copy()

    def local_mapping(self) -> np.ndarray:
        """int64 ``[N, 1]``: the baseline, every operator's own layout."""
        return compilers.local_mapping(self.problem)[:, None]

    def initial_mapping(self) -> np.ndarray:
        outer = np.zeros((1, self.num_units), dtype=np.int64)
        return compilers.rectify(self.problem, outer)[0][0][:, None]

    def optimum(self, time_limit_s: float = 600.0, workers: int = 2, **kwargs) -> OptimumResult:
        """CP-SAT over all allowed layouts, started from the native map; ``method=
        "brute-force"`` enumerates them instead (small workloads)."""
        if kwargs.get("method") == "brute-force":
            return optimum.brute_force(self.problem)
        return optimum.solve(
            self.problem, time_limit_s, workers, hint=self._native, name=self.workload.name
        )


class Banked(HardwareModel):
    """An on-chip memory of ``num_banks`` banks; see :class:`BankedParams` for the
    parameters and ``docs/banked.md`` for the model."""

    name = "banked"

    def __init__(self, **params) -> None:
        self.params = BankedParams(**params)

    def bind(self, workload: Workload) -> BankedTarget:
        return BankedTarget(self.params, workload)
