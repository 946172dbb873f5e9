"""The NNP-I hardware model and its binding to a workload.

>>> import hwmodels
>>> hw = hwmodels.make("nnpi", sram_mib=4)
>>> target = hw.bind(workload)
>>> m = target.measure(maps)  # maps: int [B, N, 2], columns (weight, activation)
"""

from __future__ import annotations

import logging
from functools import cached_property

import numpy as np

from hwmodels.base import (
    Check,
    HardwareModel,
    Measurement,
    OptimumResult,
    PriorSolution,
    Target,
    workload_graph,
)
from hwmodels.nnpi.compiler import (
    NATIVE_COMPILERS,
    levels_to_maps,
    native_levels,
    rectify,
    sequential_levels,
)
from hwmodels.nnpi.cost import NodeCosts
from hwmodels.nnpi.description import describe, description_names
from hwmodels.nnpi.occupancy import Tensors, check_fits_in_dram
from hwmodels.nnpi.params import DRAM, FS_PER_S, LEVELS, NNPIParams
from workloads.ir import Workload

log = logging.getLogger(__name__)


class NNPITarget(Target):
    """NNP-I bound to one workload: one decision unit per node, two heads.

    Args:
        params: the chip.
        workload: the workload; it must fit in DRAM with every tensor there.
        native_passes: passes of the native greedy (see
            :func:`hwmodels.nnpi.compiler.native_levels`).
        native: the native compiler, ``"density"`` (the benefit-density greedy) or
            ``"sequential"`` (:func:`hwmodels.nnpi.compiler.sequential_levels`).

    Raises:
        ValueError: the workload does not fit in DRAM.
    """

    #: the cost model is the measurement: the prior is the model itself, solved exactly
    has_prior = True

    def __init__(
        self,
        params: NNPIParams,
        workload: Workload,
        native_passes: int = 2,
        native: str = "density",
    ) -> None:
        self.params = params
        self.workload = workload
        self.heads = {"weight": list(LEVELS), "activation": list(LEVELS)}
        self.num_units = workload.num_nodes
        self.unit_names = list(workload.node_names)
        self.capacity = params.capacity_bytes
        self.tensors = Tensors.build(workload)
        check_fits_in_dram(workload, self.tensors, int(self.capacity[DRAM]))
        self.costs = NodeCosts.build(workload, params)
        self.native_passes = int(native_passes)
        self.native = check_native(native)

    @cached_property
    def graph(self):
        """PyG ``Data``: ``x`` float64 raw features ``[N, 19]``, ``edge_index``, names."""
        return workload_graph(self.workload)

    # ---------------------------------------------------------------- model
    def _levels(self, maps: np.ndarray) -> np.ndarray:
        """Check ``maps`` ``[B, N, 2]`` and flatten it to tensor levels int64 ``[B, T]``."""
        maps = np.asarray(maps)
        if maps.ndim != 3 or maps.shape[1:] != (self.num_units, 2):
            raise ValueError(
                f"nnpi maps for {self.workload.name!r} must have shape "
                f"[B, {self.num_units}, 2], got {list(maps.shape)}"
            )
        if maps.size and (maps.min() < 0 or maps.max() >= len(LEVELS)):
            raise ValueError(f"nnpi map choices must be in 0..{len(LEVELS) - 1} ({LEVELS})")
        return maps.astype(np.int64, copy=False).reshape(len(maps), 2 * self.num_units)

    def latency_fs(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B]``: latency in fs of ``maps`` ``[B, N, 2]`` as given (not rectified)."""
        levels = self._levels(maps)
        return self.costs.latency_fs(levels_to_maps(levels, self.num_units))

    def occupancy(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B, 3, N]``: bytes on each level at each step under ``maps``."""
        return self.tensors.occupancy(self._levels(maps))

    def is_valid(self, maps: np.ndarray) -> np.ndarray:
        """bool ``[B]``: no level exceeds its capacity at any step (direct check)."""
        return (self.occupancy(maps) <= self.capacity[None, :, None]).all(axis=(1, 2))

    def rectify(self, maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The compiler C on ``maps`` ``[B, N, 2]``.

        Returns:
            ``(rectified int64 [B, N, 2], reassigned_bytes int64 [B])``.
        """
        levels = self._levels(maps)
        fixed = rectify(levels, self.tensors, self.capacity)
        moved = ((fixed != levels) * self.tensors.nbytes).sum(axis=1)
        return levels_to_maps(fixed, self.num_units), moved

    def check(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Check:
        """The compiler C alone on ``maps`` ``[B, N, 2]``: valid where it moved no byte.

        ``probs`` is not used (the compiler is deterministic; ``wants_probabilities`` is
        false).
        """
        rectified, moved = self.rectify(maps)
        total = max(self.tensors.total_bytes, 1)
        return Check(rectified=rectified, valid=moved == 0, reassigned_ratio=moved / total)

    def measure(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Measurement:
        """Rectify ``maps`` ``[B, N, 2]`` (:meth:`check`), then model the latency of the
        rectified maps."""
        c = self.check(maps)
        latency_s = self.costs.latency_fs(c.rectified) / FS_PER_S
        return Measurement(c.rectified, c.valid, c.reassigned_ratio, latency_s)

    @property
    def description_names(self) -> list[str]:
        """Columns of :meth:`describe` (:func:`hwmodels.nnpi.description.description_names`)."""
        return description_names()

    def describe(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B, F]``: bytes per level, overflow, decisions in overflow and the
        cost model's latency of ``maps`` ``[B, N, 2]`` as given (no repair, no
        measurement); see :mod:`hwmodels.nnpi.description`."""
        return describe(self._levels(maps), self.tensors, self.capacity, self.costs)

    # ------------------------------------------------------------- answers
    @cached_property
    def _native(self) -> np.ndarray:
        if self.native == "sequential":
            levels = sequential_levels(self.tensors, self.capacity)
        else:
            levels = native_levels(self.costs, self.tensors, self.capacity, self.native_passes)
        return levels_to_maps(levels[None], self.num_units)[0]

    def native_mapping(self) -> np.ndarray:
        """int64 ``[N, 2]``: the native compiler's map (``native``: density or sequential)."""
        return self._native.copy()

    def initial_mapping(self) -> np.ndarray:
        """int64 ``[N, 2]``: all-DRAM, EGRL Table 2's initial mapping action (always valid:
        binding checks that the workload fits in DRAM)."""
        return np.full((self.num_units, 2), DRAM, dtype=np.int64)

    def optimum(self, time_limit_s: float = 600.0, workers: int = 2, **kwargs) -> OptimumResult:
        """Exact CP-SAT solve of this cost model; see :func:`hwmodels.nnpi.optimum.solve`."""
        from hwmodels.nnpi.optimum import solve

        return solve(self, time_limit_s=time_limit_s, workers=workers, **kwargs)

    def prior_solution(
        self, time_limit_s: float = 60.0, workers: int = 2, **options
    ) -> PriorSolution:
        """This cost model solved as its own prior, hinted with the native map, with the
        options of :meth:`hwmodels.nnpi.prior.NNPIPrior.solve` (extra costs, a trust
        region, maps to exclude)."""
        from hwmodels.nnpi.prior import own_prior, prior_solve_options

        return own_prior(self).solve(
            self.native_mapping(),
            time_limit_s,
            workers,
            **prior_solve_options(time_limit_s, options),
        )


class NNPI(HardwareModel):
    """Intel NNP-I memory placement: weight and activation of every layer to DRAM/LLC/SRAM.

    Keyword arguments are the fields of :class:`~hwmodels.nnpi.params.NNPIParams`
    (``dram_gib``, ``llc_mib``, ``sram_mib``, ``dram_gbps``, ``llc_gbps``,
    ``sram_gbps``, ``peak_tops``) plus ``native`` (the native compiler: ``"density"``,
    the default, or ``"sequential"``) and ``native_passes`` (passes of the density greedy).
    """

    name = "nnpi"

    def __init__(self, native_passes: int = 2, native: str = "density", **params) -> None:
        unknown = set(params) - set(NNPIParams.__dataclass_fields__)
        if unknown:
            raise TypeError(
                f"unknown nnpi parameter(s) {sorted(unknown)}; "
                f"expected {sorted(NNPIParams.__dataclass_fields__)}, native or native_passes"
            )
        self.params = NNPIParams(**params)
        if native_passes < 1:
            raise ValueError(f"native_passes must be at least 1, got {native_passes}")
        self.native_passes = int(native_passes)
        self.native = check_native(native)

    def bind(self, workload: Workload) -> NNPITarget:
        log.debug("binding nnpi %s to %r", self.params, workload.name)
        return NNPITarget(self.params, workload, self.native_passes, self.native)

    def __repr__(self) -> str:
        return f"NNPI({self.params}, native={self.native!r})"


def check_native(native: str) -> str:
    """``native`` if it names a native compiler, else a ``ValueError`` listing them."""
    if native not in NATIVE_COMPILERS:
        raise ValueError(
            f"unknown nnpi native compiler {native!r}; expected one of {NATIVE_COMPILERS}"
        )
    return native
