"""The multi-chip hardware model and its binding to a workload.

>>> import hwmodels
>>> hw = hwmodels.make("mcm", num_chips=36, mode="fix")
>>> target = hw.bind(workload)
>>> m = target.measure(maps)  # maps: int [B, N, 1], the chip of every node
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import fields
from functools import cached_property

import numpy as np

from hwmodels.base import (
    Check,
    HardwareModel,
    Measurement,
    OptimumResult,
    Target,
    workload_graph,
)
from hwmodels.mcm import cost, description
from hwmodels.mcm.constraints import Violations, check
from hwmodels.mcm.dataflow import Dataflow
from hwmodels.mcm.native import NATIVE_COMPILERS, dp_split, greedy_split
from hwmodels.mcm.params import PS_PER_S, MCMParams
from hwmodels.mcm.solver import MODES, ConstraintSolver
from workloads.ir import Workload

log = logging.getLogger(__name__)

#: what a screen's description reads of a proposal: the partition after the solver's
#: repair (what runs) or the proposal as given
DESCRIPTIONS: tuple[str, ...] = ("repaired", "proposed")
#: repairs a ``fix``-mode target remembers (int16 rows, 2 N bytes each, up to 32,767 chips)
REPAIR_CACHE = 1 << 16


class MCMTarget(Target):
    """A multi-chip package bound to one workload: one unit per node, one ``chip`` head.

    Args:
        params: the package.
        workload: the workload (the zoo's fused graphs or any imported one).
        native: the native compiler, ``"greedy"`` or ``"contiguous-dp"``.
        mode: the constraint solver's mode, ``"fix"`` or ``"sample"``.
        seed: seed of the solver's node orders and draws.
        max_backtracks: conflicts the solver allows per attempt before it starts again
            in a new order (after 5 attempts it answers with the native partition).
        description: what :meth:`describe` reads: ``"repaired"`` (the default), the
            partition the solver makes of the proposal, which is the one the package runs,
            or ``"proposed"``, the proposal as given (no solver run).

    Raises:
        ValueError: no contiguous split of the workload fits the chips' SRAM.
    """

    #: the cost model is the measurement: the prior is the model itself, solved exactly
    has_prior = True

    def __init__(
        self,
        params: MCMParams,
        workload: Workload,
        native: str = "greedy",
        mode: str = "fix",
        seed: int = 0,
        max_backtracks: int = 20,
        description: str = "repaired",
    ) -> None:
        self.params = params
        self.workload = workload
        self.heads = {"chip": params.chip_names}
        self.num_units = workload.num_nodes
        self.unit_names = list(workload.node_names)
        self.flow = Dataflow.build(workload, params)
        self.native = check_choice("native compiler", native, NATIVE_COMPILERS)
        self.mode = check_choice("solver mode", mode, MODES)
        self.description = check_choice("description", description, DESCRIPTIONS)
        self.wants_probabilities = self.mode == "sample"
        # FIX repairs a proposal the same way every time (see _generators); SAMPLE draws
        # from the policy's distribution, which the proposal alone does not determine.
        self.deterministic = self.mode == "fix"
        self.seed = int(seed)
        self._greedy = greedy_split(self.flow)
        self._native = self._build_native()
        if not check(self.flow, self._greedy[None]).ok[0]:
            self._greedy = self._native
        self.solver = ConstraintSolver(self.flow, self._native, self.mode, max_backtracks)
        self._repaired: dict[bytes, np.ndarray] = {}  # proposal bytes -> chips [N]
        self._chip_dtype = np.int16 if params.num_chips <= np.iinfo(np.int16).max else np.int64

    def _build_native(self) -> np.ndarray:
        """The native compiler's split; the other compiler's where it overflows an SRAM."""
        greedy_ok = check(self.flow, self._greedy[None]).ok[0]
        if self.native == "greedy" and greedy_ok:
            return self._greedy
        best = dp_split(self.flow)
        if best is not None:
            if self.native == "greedy":
                log.warning(
                    "mcm: the greedy split of %r overflows an SRAM; using the contiguous DP",
                    self.workload.name,
                )
            return best
        parts = self._greedy
        v = check(self.flow, parts[None])
        if not v.ok[0]:
            raise ValueError(
                f"mcm: {self.workload.name!r} does not fit {self.params.num_chips} chips of "
                f"{self.params.sram_mib} MiB with the {self.native} compiler: "
                + "; ".join(v.describe(0, self.flow, parts[None], self.unit_names))
            )
        return parts

    @cached_property
    def graph(self):
        """PyG ``Data``: raw EGRL Table 1 features ``x [N, 19]``, ``edge_index [2, E]``."""
        return workload_graph(self.workload)

    # ---------------------------------------------------------------- model
    def _parts(self, maps: np.ndarray) -> np.ndarray:
        """Check ``maps`` ``[B, N, 1]`` and return the chips int64 ``[B, N]``."""
        maps = np.asarray(maps)
        if maps.ndim != 3 or maps.shape[1:] != (self.num_units, 1):
            raise ValueError(
                f"mcm maps for {self.workload.name!r} must have shape "
                f"[B, {self.num_units}, 1], got {list(maps.shape)}"
            )
        c = self.params.num_chips
        if maps.size and (maps.min() < 0 or maps.max() >= c):
            raise ValueError(f"mcm map choices must be chips 0..{c - 1}")
        return maps[:, :, 0].astype(np.int64)

    def violations(self, maps: np.ndarray) -> Violations:
        """Which constraints of Equation 5 (and memory) each map ``[B, N, 1]`` breaks."""
        return check(self.flow, self._parts(maps))

    def latency_ps(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B]``: slowest-chip time in ps of ``maps`` ``[B, N, 1]`` as given."""
        return cost.latency_ps(self.flow, self._parts(maps))

    @property
    def description_names(self) -> list[str]:
        """Columns of :meth:`describe`: :func:`hwmodels.mcm.description.description_names`,
        then ``repaired_share`` when the description reads the repaired partition."""
        names = description.description_names(self.params.num_chips)
        return [*names, "repaired_share"] if self.description == "repaired" else names

    def describe(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B, F]``: per-chip compute, memory, overflow, link and time loads, the
        slowest chip, cut edges and the constraints broken (see
        :mod:`hwmodels.mcm.description`), never measured.

        With ``description="repaired"`` they describe the partition the solver makes of
        ``maps`` ``[B, N, 1]`` (``sample`` mode: from uniform probabilities), the one the
        package runs, followed by the share of nodes the repair moved (``F = 5 C + 13``);
        with ``"proposed"``, ``maps`` as given (``F = 5 C + 12``). A repair costs
        milliseconds per invalid map and nothing on a valid one.
        """
        parts = self._parts(maps)
        if self.description == "proposed":
            return description.describe(self.flow, parts)
        fixed = self.rectify(parts)
        moved = (fixed != parts).mean(axis=1)
        return np.column_stack([description.describe(self.flow, fixed), moved])

    def _generators(self, parts: np.ndarray, probs: np.ndarray | None) -> list:
        """One generator per map, seeded by ``seed`` and the map's bytes (and its ``probs``).

        The repair is then a function of what is measured: the same proposal gets the
        same repair in any batch, after a resume, or from a cache, with no solver state
        to checkpoint.
        """
        gens = []
        for b in range(len(parts)):
            h = hashlib.blake2b(parts[b].tobytes(), digest_size=16)
            if probs is not None:
                h.update(np.ascontiguousarray(probs[b]).tobytes())
            words = np.frombuffer(h.digest(), dtype=np.uint32).tolist()
            gens.append(np.random.default_rng([self.seed, *words]))
        return gens

    def measure(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Measurement:
        """Repair ``maps`` ``[B, N, 1]`` with the constraint solver, then model them.

        A repaired partition that overflows an SRAM (the solver enforces the static
        constraints only) is replaced by the native partition, so every rectified map
        is one the target accepts unchanged. ``valid``: the map came back unchanged.
        ``reassigned_ratio``: the share of nodes whose chip changed. ``latency_s``: the
        slowest chip of the rectified map. ``probs`` ``[B, N, 1, C]`` is used in
        ``sample`` mode (None: uniform).
        """
        c = self.check(maps, probs)
        latency_s = cost.latency_ps(self.flow, c.rectified[:, :, 0]) / PS_PER_S
        return Measurement(c.rectified, c.valid, c.reassigned_ratio, latency_s)

    def check(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Check:
        """The constraint solver's repair of ``maps`` ``[B, N, 1]`` alone (:meth:`rectify`):
        valid where the partition came back unchanged; no latency is modelled."""
        parts = self._parts(maps)
        fixed = self.rectify(parts, probs)
        moved = (fixed != parts).mean(axis=1)
        return Check(rectified=fixed[:, :, None], valid=moved == 0, reassigned_ratio=moved)

    def rectify(self, parts: np.ndarray, probs: np.ndarray | None = None) -> np.ndarray:
        """int64 ``[B, N]``: the partition the package runs for each of ``parts`` ``[B, N]``.

        The constraint solver repairs it (valid ones unchanged); one that still overflows
        an SRAM (the solver enforces the static constraints only) becomes the native
        partition. ``probs`` ``[B, N, 1, C]`` is read in ``sample`` mode (None: uniform).
        In ``fix`` mode a repair is a function of the proposal alone (:meth:`_generators`),
        so the last :data:`REPAIR_CACHE` repairs are remembered by the proposal's bytes: a
        map described, then measured, or described again as a screen refits, is repaired
        once.
        """
        parts = np.asarray(parts, dtype=np.int64)
        if self.wants_probabilities:
            if probs is None:
                probs = self.uniform_probabilities(len(parts))
            return self._repair(parts, np.asarray(probs, dtype=np.float64)[:, :, 0, :])
        if not len(parts):
            return parts.copy()
        keys = [row.tobytes() for row in parts]
        todo = [b for b, key in enumerate(keys) if key not in self._repaired]
        if todo:
            fixed = self._repair(parts[todo], None)
            for b, row in zip(todo, fixed):
                self._repaired[keys[b]] = row.astype(self._chip_dtype)
            while len(self._repaired) > REPAIR_CACHE:
                del self._repaired[next(iter(self._repaired))]  # the oldest
        return np.stack([self._repaired[key] for key in keys]).astype(np.int64).reshape(parts.shape)

    def _repair(self, parts: np.ndarray, probs: np.ndarray | None) -> np.ndarray:
        """int64 ``[B, N]``: the solver's repair of ``parts``, overflow to the native."""
        fixed = self.solver.repair(parts, self._generators(parts, probs), probs)
        overflow = check(self.flow, fixed).memory_chip >= 0
        fixed[overflow] = self._native
        return fixed

    # ------------------------------------------------------------- answers
    def native_mapping(self) -> np.ndarray:
        """int64 ``[N, 1]``: the native compiler's partition (``greedy`` or ``contiguous-dp``)."""
        return self._native[:, None].copy()

    def initial_mapping(self) -> np.ndarray:
        """int64 ``[N, 1]``: the greedy heuristic's partition (EGRL's initial action).

        Where the greedy split overflows an SRAM, the native partition instead.
        """
        return self._greedy[:, None].copy()

    def optimum(self, time_limit_s: float = 600.0, workers: int = 2, **kwargs) -> OptimumResult:
        """Exact CP-SAT solve of this cost model; see :func:`hwmodels.mcm.optimum.solve`."""
        from hwmodels.mcm.optimum import solve

        return solve(self, time_limit_s=time_limit_s, workers=workers, **kwargs)


class MCM(HardwareModel):
    """Multi-chip partitioning: every node of a workload to one chip of a ring package.

    Its runs are scored by the repaired partition (``default_reward = "repaired"``), as the
    multi-chip paper scores them: a random proposal over dozens of chips is practically
    never a valid partition, so under ``reward=egrl`` a run rarely sees a positive reward.

    Keyword arguments are the fields of :class:`~hwmodels.mcm.params.MCMParams`
    (``num_chips``, ``sram_mib``, ``link_gbps``, ``peak_tops``) plus ``native``
    (``"greedy"``, the default, or ``"contiguous-dp"``), ``mode`` (the solver's
    ``"fix"``, the default, or ``"sample"``), ``seed``, ``max_backtracks`` and
    ``description`` (what a screen reads: ``"repaired"``, the default, or ``"proposed"``).
    """

    default_reward = "repaired"

    name = "mcm"

    def __init__(
        self,
        native: str = "greedy",
        mode: str = "fix",
        seed: int = 0,
        max_backtracks: int = 20,
        description: str = "repaired",
        **params,
    ) -> None:
        known = {f.name for f in fields(MCMParams)}
        unknown = set(params) - known
        if unknown:
            raise TypeError(
                f"unknown mcm parameter(s) {sorted(unknown)}; expected {sorted(known)}, "
                "native, mode, seed, max_backtracks or description"
            )
        self.params = MCMParams(**params)
        self.native = check_choice("native compiler", native, NATIVE_COMPILERS)
        self.mode = check_choice("solver mode", mode, MODES)
        self.seed = int(seed)
        self.max_backtracks = int(max_backtracks)
        self.description = check_choice("description", description, DESCRIPTIONS)

    def bind(self, workload: Workload) -> MCMTarget:
        log.debug("binding mcm %s to %r", self.params, workload.name)
        return MCMTarget(
            self.params,
            workload,
            self.native,
            self.mode,
            self.seed,
            self.max_backtracks,
            self.description,
        )

    def __repr__(self) -> str:
        return f"MCM({self.params}, native={self.native!r}, mode={self.mode!r})"


def check_choice(what: str, value: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of ``choices``, else a ``ValueError`` listing them."""
    if value not in choices:
        raise ValueError(f"unknown mcm {what} {value!r}; expected one of {choices}")
    return value
