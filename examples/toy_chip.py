"""A toy multi-core chip: the hardware model of ``docs/hwmodels.md``, in one file.

Every node of the workload runs on one of C cores (one head, ``core``). A core runs
``gmacs`` GMAC/s and holds the weights of the nodes it runs in ``capacity_kib`` KiB; an
edge between nodes on different cores costs its activation's bytes over the link. The
latency of a map is the sum over nodes of ``macs / speed`` plus the cross-core traffic.

* compiler (repair): an over-full core keeps the nodes the policy is surest of (highest
  probability of the core they were put on; execution order on ties, and without
  probabilities) while they fit; the others move to the roomiest core, which must hold
  every weight (checked at bind), so every repaired map is valid.
* native compiler: every node on the fastest core, repaired.
* initial map (EGRL's initial mapping action): every node on the roomiest core; the
  fallback is the base class's default, the native map.
* optimum: brute force over all ``C ** N`` maps, for small workloads.

Load it without touching the package: ``hwmodels.make("toy", module="examples/toy_chip.py")``
or ``egrl-train hwmodel=toy`` (``configs/hwmodel/toy.yaml``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property

import numpy as np

import hwmodels
from hwmodels.base import HardwareModel, Measurement, OptimumResult, Target, workload_graph
from workloads.ir import Workload

#: the most maps :meth:`ToyTarget.optimum` enumerates, and how many at a time
MAX_MAPS, CHUNK = 2**22, 2**16


class ToyTarget(Target):
    """The toy chip bound to one workload: units are nodes, one head ``core``."""

    wants_probabilities = True

    def __init__(self, chip: ToyChip, workload: Workload) -> None:
        self.workload = workload
        self.heads = {"core": list(chip.cores)}
        self.num_units = workload.num_nodes
        self.unit_names = list(workload.node_names)
        self.speed = np.asarray(chip.gmacs, dtype=np.float64) * 1e9  # MAC/s [C]
        self.capacity = np.asarray(chip.capacity_kib, dtype=np.float64) * 1024  # bytes [C]
        self.link = chip.link_gbps * 1e9  # bytes/s
        self.weights = workload.weight_bytes.astype(np.float64)  # [N]
        self.macs = workload.macs.astype(np.float64)  # [N]
        self.src, self.dst = workload.edge_index  # [E] each
        self.edge_bytes = workload.output_bytes[self.src].astype(np.float64)  # [E]
        self.roomy = int(np.argmax(self.capacity))
        if self.weights.sum() > self.capacity[self.roomy]:
            raise ValueError(
                f"toy chip: the weights of {workload.name!r} ({self.weights.sum():.0f} B) "
                f"do not fit on its roomiest core ({self.capacity[self.roomy]:.0f} B)"
            )

    @cached_property
    def graph(self):
        return workload_graph(self.workload)

    def latency_s(self, cores: np.ndarray) -> np.ndarray:
        """float64 ``[B]``: latency of core assignments ``cores`` int ``[B, N]``."""
        compute = (self.macs / self.speed[cores]).sum(axis=1)
        cross = cores[:, self.src] != cores[:, self.dst]  # [B, E]
        return compute + (cross * self.edge_bytes).sum(axis=1) / self.link

    def overflow(self, cores: np.ndarray, probs: np.ndarray) -> np.ndarray:
        """bool ``[B, N]``: nodes that do not fit on their core when each core keeps the
        nodes with the highest ``probs`` ``[B, N, C]`` of their core first."""
        sure = np.take_along_axis(probs, cores[..., None], axis=2)[..., 0]  # [B, N]
        order = np.argsort(-sure, axis=1, kind="stable")
        on = np.take_along_axis(cores, order, axis=1)[..., None] == np.arange(len(self.speed))
        load = np.cumsum(on * self.weights[order][..., None], axis=1)  # [B, N, C]
        over = np.empty_like(sure, dtype=bool)
        np.put_along_axis(over, order, (on & (load > self.capacity)).any(axis=2), axis=1)
        return over

    def measure(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Measurement:
        probs = self.uniform_probabilities(len(maps)) if probs is None else probs
        cores = maps[:, :, 0]
        over = self.overflow(cores, probs[:, :, 0])
        fixed = np.where(over, self.roomy, cores)
        return Measurement(
            rectified=fixed[..., None],
            valid=~over.any(axis=1),
            reassigned_ratio=(over * self.weights).sum(axis=1) / max(self.weights.sum(), 1.0),
            latency_s=self.latency_s(fixed),
        )

    def native_mapping(self) -> np.ndarray:
        fastest = np.full((1, self.num_units, 1), int(np.argmax(self.speed)))
        return self.measure(fastest).rectified[0]

    def initial_mapping(self) -> np.ndarray:
        return np.full((self.num_units, 1), self.roomy, dtype=np.int64)

    def optimum(self, time_limit_s: float = 600.0, workers: int = 2, **kwargs) -> OptimumResult:
        """Brute force over every map (proven optimal); ``C ** N`` must be at most
        :data:`MAX_MAPS`."""
        c, n = len(self.speed), self.num_units
        if c**n > MAX_MAPS:
            raise NotImplementedError(f"toy optimum: {c}**{n} maps is too many to enumerate")
        start = time.perf_counter()
        best, best_s = None, np.inf
        for first in range(0, c**n, CHUNK):
            index = np.arange(first, min(first + CHUNK, c**n))
            cores = index[:, None] // c ** np.arange(n) % c  # [chunk, N]
            on = cores[..., None] == np.arange(c)
            fits = ((on * self.weights[:, None]).sum(axis=1) <= self.capacity).all(axis=1)
            latency = np.where(fits, self.latency_s(cores), np.inf)
            i = int(np.argmin(latency))
            if latency[i] < best_s:
                best, best_s = cores[i], float(latency[i])
        return OptimumResult(
            mapping=best[:, None].astype(np.int64),
            latency_s=best_s,
            bound_s=best_s,
            gap=0.0,
            proven=True,
            status="OPTIMAL",
            wall_s=time.perf_counter() - start,
        )


@hwmodels.register("toy")
class ToyChip(HardwareModel):
    """C cores with speeds (GMAC/s) and weight capacities (KiB), and a link (GB/s)."""

    name = "toy"

    def __init__(
        self,
        cores: Sequence[str] = ("big", "little"),
        gmacs: Sequence[float] = (8.0, 1.0),
        capacity_kib: Sequence[float] = (4096.0, 2**20),
        link_gbps: float = 0.5,
    ) -> None:
        if not len(cores) == len(gmacs) == len(capacity_kib) >= 2:
            raise ValueError("toy chip: give at least two cores, each a speed and a capacity")
        self.cores, self.gmacs, self.capacity_kib = list(cores), gmacs, capacity_kib
        self.link_gbps = float(link_gbps)

    def bind(self, workload: Workload) -> ToyTarget:
        return ToyTarget(self, workload)
