"""The NNP-I model as the prior of another chip: its datasheet read as NNP-I parameters.

An external chip with the NNP-I heads places the same tensors on the same kind of
levels, so the NNP-I target bound to the same workload can describe its maps, predict
their latency before the chip is paid to run them (:class:`NNPIPrior`, built with
:func:`nnpi_prior`) and be solved exactly (:meth:`NNPIPrior.solve`): the NNP-I optimum
on the prior's costs, hinted with the chip compiler's map, answered in the chip's own
choices. ``hwmodel.params.prior`` on ``external`` gives the figures
(:func:`check_prior`); the NNP-I target solves itself the same way
(:meth:`hwmodels.nnpi.NNPITarget.prior_solution`).

>>> prior = nnpi_prior(target, sram_mib=2, peak_tops=100)
>>> best = prior.solve(target.native_mapping(), time_limit_s=60)
>>> best.mapping  # int64 [N, H], the target's choices
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from hwmodels.base import PriorSolution, Target
from hwmodels.nnpi.cpmodel import Additions
from hwmodels.nnpi.figures import ChipFigures, load_figures
from hwmodels.nnpi.params import DRAM, FS_PER_S, LEVELS, NNPIParams

if TYPE_CHECKING:
    from hwmodels.nnpi.target import NNPITarget

log = logging.getLogger(__name__)

#: the key of an external chip's datasheet in a run's config
PRIOR_KEY = "hwmodel.params.prior"
#: the models a datasheet can be read as (``hwmodel.params.prior.name``)
PRIOR_NAMES = ("nnpi",)
#: the figures a datasheet may give: :class:`~hwmodels.nnpi.NNPIParams`' fields
PRIOR_FIELDS = tuple(f.name for f in fields(NNPIParams))
#: the key of a saved calibration in a datasheet: ``{name: nnpi, calibration: PATH}``
CALIBRATION_KEY = "calibration"
#: the largest extra cost of one unit and choice, femtoseconds (the CP model's objective
#: must stay well inside 64-bit integers)
MAX_EXTRA_FS = 2**50
#: a target's prior solved (``prior_solution``) also stops at this share of its wall limit
#: in CP-SAT's deterministic seconds, the workers' searches interleaved, so that one chip
#: and workload give one map on any machine unless the wall limit comes first. Measured on
#: a loaded 2-core machine, ResNet-101: three 60 s wall-limited solves answered three maps
#: (1.2727x, 1.2486x and 1.2611x on the chip); 8, 12 and 16 deterministic seconds took
#: 16-26 s of wall, each the same map twice, as fast by the prior as the wall-limited one
PRIOR_DETERMINISTIC_SHARE = 0.25


def check_prior(prior: Mapping, heads: Mapping[str, Sequence[str]]) -> dict[str, float | str]:
    """The NNP-I parameters of a datasheet ``{name: nnpi, sram_mib: 2, ...}``, checked.

    Args:
        prior: ``name`` (one of :data:`PRIOR_NAMES`) and any of :data:`PRIOR_FIELDS`;
            or ``name`` and ``calibration``, the path of a saved calibration
            (:meth:`hwmodels.nnpi.calibrate.Calibration.save`) whose figures the prior
            starts from (answered as ``{"calibration": path}``).
        heads: the chip's heads: ``weight`` and ``activation`` whose choices are NNP-I
            levels, DRAM among them (the prior's compiler repairs to DRAM).

    Raises:
        ValueError: naming the key: an unknown name, a field that is no NNP-I parameter,
            a figure that is not a positive number, figures the NNP-I model refuses, or
            heads that are not memory levels.
    """
    if not isinstance(prior, Mapping):
        raise ValueError(
            f"{PRIOR_KEY} must be a mapping such as {{name: nnpi, sram_mib: 2}}, got {prior!r}"
        )
    name = prior.get("name")
    if name not in PRIOR_NAMES:
        raise ValueError(f"{PRIOR_KEY}.name={name!r} is unknown: expected one of {PRIOR_NAMES}")
    params = {str(k): v for k, v in prior.items() if k != "name"}
    if CALIBRATION_KEY in params:
        return {CALIBRATION_KEY: _check_calibration(params, heads)}
    unknown = sorted(set(params) - set(PRIOR_FIELDS))
    if unknown:
        raise ValueError(
            f"{PRIOR_KEY}.{unknown[0]} is no NNP-I parameter: expected name and any of "
            f"{list(PRIOR_FIELDS)}"
        )
    for key, value in params.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{PRIOR_KEY}.{key}={value!r} must be a positive number")
    try:
        NNPIParams(**params)
    except ValueError as exc:
        raise ValueError(f"{PRIOR_KEY} is invalid: {exc}") from None
    try:
        _, levels = prior_columns(heads)
    except ValueError as exc:
        raise ValueError(f"{PRIOR_KEY} is invalid: {exc}") from None
    if not (levels == DRAM).any(axis=1).all():
        raise ValueError(
            f"{PRIOR_KEY} is invalid: the heads 'weight' and 'activation' must both offer "
            f"DRAM (the prior repairs a map there), got {dict(heads)}"
        )
    return {key: float(value) for key, value in params.items()}


def _check_calibration(params: Mapping, heads: Mapping[str, Sequence[str]]) -> str:
    """The path of ``{calibration: PATH}``, whose file holds calibrated figures."""
    path = params[CALIBRATION_KEY]
    others = sorted(set(params) - {CALIBRATION_KEY})
    if others:
        raise ValueError(
            f"{PRIOR_KEY}.{others[0]} cannot go with {PRIOR_KEY}.{CALIBRATION_KEY}: the "
            "calibration file holds every figure"
        )
    if not isinstance(path, str) or not path:
        raise ValueError(f"{PRIOR_KEY}.{CALIBRATION_KEY} must be a file path, got {path!r}")
    try:
        load_figures(path)
        _, levels = prior_columns(heads)
    except ValueError as exc:
        raise ValueError(f"{PRIOR_KEY}.{CALIBRATION_KEY} is invalid: {exc}") from None
    if not (levels == DRAM).any(axis=1).all():
        raise ValueError(f"{PRIOR_KEY} is invalid: the heads must offer DRAM, got {dict(heads)}")
    return path


def prior_columns(heads: Mapping[str, Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
    """How a chip's heads read as NNP-I's: ``columns`` int64 ``[2]`` (the heads read as
    ``weight`` and ``activation``) and ``levels`` int64 ``[2, K]`` (the NNP-I level of
    each of their choices, -1 past a head's own).

    Raises:
        ValueError: a head is missing or names a choice that is no NNP-I level.
    """
    names = list(heads)
    columns, levels = [], []
    for head in ("weight", "activation"):
        if head not in heads:
            raise ValueError(
                f"an NNP-I prior needs the heads 'weight' and 'activation'; the target has {names}"
            )
        choices = [str(c).upper() for c in heads[head]]
        unknown = [c for c in heads[head] if str(c).upper() not in LEVELS]
        if unknown:
            raise ValueError(
                f"an NNP-I prior reads head {head!r} choices as NNP-I levels {list(LEVELS)}; "
                f"{unknown} are none of them"
            )
        columns.append(names.index(head))
        levels.append([LEVELS.index(c) for c in choices])
    table = np.full((2, max(len(row) for row in levels)), -1, dtype=np.int64)
    for h, row in enumerate(levels):
        table[h, : len(row)] = row
    return np.array(columns, dtype=np.int64), table


@dataclass(frozen=True)
class NNPIPrior:
    """The NNP-I model's view of an external chip's maps: a free prior, never a measurement.

    An external chip with the NNP-I heads places the same tensors on the same kind of
    levels, so the NNP-I target bound to the same workload can describe its maps
    (:meth:`hwmodels.nnpi.NNPITarget.describe`), predict their latency before the chip
    is paid to run them, and be solved (:meth:`solve`). Build it with :func:`nnpi_prior`.

    Attributes:
        target: the NNP-I target bound to the external target's workload.
        columns: int64 ``[2]``: the external head read as NNP-I's ``weight`` and
            ``activation`` head.
        levels: int64 ``[2, K]``: the NNP-I level of each choice of those heads
            (``K`` = the most choices of either; -1 past a head's own choices).
        num_choices: int64 ``[H]``: the choices of each of the external target's heads.
        figures: the chip's figures beyond NNP-I's parameters (set-up times, compute
            efficiencies) that ``target``'s costs were built from
            (:meth:`~hwmodels.nnpi.figures.ChipFigures.bind`); None: ``target.params``
            alone. Where they are not plain, a solve runs without the exact symmetry and
            dominance cuts (which assume costs proportional to bytes).
    """

    target: NNPITarget
    columns: np.ndarray
    levels: np.ndarray
    num_choices: np.ndarray
    figures: ChipFigures | None = None

    @property
    def chip_figures(self) -> ChipFigures:
        """The figures of this prior's costs (``target.params`` alone if none given)."""
        return self.figures if self.figures is not None else ChipFigures(self.target.params)

    @property
    def description_names(self) -> list[str]:
        """Columns of :meth:`describe` (the NNP-I target's)."""
        return self.target.description_names

    @property
    def permitted(self) -> np.ndarray:
        """bool ``[2, L]``: the NNP-I levels the weight and the activation heads offer."""
        out = np.zeros((2, len(LEVELS)), dtype=bool)
        for h in range(2):
            out[h, self.levels[h][self.levels[h] >= 0]] = True
        return out

    def nnpi_maps(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B, N, 2]``: the external maps ``[B, N, H]`` in NNP-I's choices."""
        maps = np.asarray(maps, dtype=np.int64)
        picked = maps[:, :, self.columns]  # [B, N, 2]
        return self.levels[np.arange(2)[None, None, :], picked]

    def target_maps(self, nnpi_maps: np.ndarray, base: np.ndarray) -> np.ndarray:
        """int64 ``[B, N, H]``: NNP-I maps ``[B, N, 2]`` (levels the heads offer) in the
        external target's choices; heads other than weight and activation keep ``base``'s
        choices (``[N, H]``)."""
        nnpi_maps = np.asarray(nnpi_maps, dtype=np.int64)
        choice = np.full((2, len(LEVELS)), -1, dtype=np.int64)  # [head, level] -> choice
        for h in range(2):
            own = np.flatnonzero(self.levels[h] >= 0)
            choice[h, self.levels[h, own]] = own
        out = np.repeat(np.asarray(base, dtype=np.int64)[None], len(nnpi_maps), axis=0)
        out[:, :, self.columns] = choice[np.arange(2)[None, None, :], nnpi_maps]
        if (out < 0).any():
            raise ValueError("an NNP-I map uses a level the chip's heads do not offer")
        return out

    def describe(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B, F]``: the NNP-I description of the external maps ``[B, N, H]``."""
        return self.target.describe(self.nnpi_maps(maps))

    def latency_s(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B]``: the NNP-I cost model's latency of the external maps as given."""
        return self.target.latency_fs(self.nnpi_maps(maps)) / FS_PER_S

    def hint(self, base: np.ndarray) -> np.ndarray:
        """int64 ``[N, 2]``: the solver's first map: the chip compiler's map ``base``
        ``[N, H]`` in NNP-I's choices as the NNP-I compiler repairs it (a map the NNP-I
        model accepts), or the NNP-I compiler's own map on the datasheet's figures where
        the prior predicts that one faster (1.15x on ResNet-101 with the example chip's
        figures; CP-SAT then starts there). A level the heads do not offer goes to DRAM
        (which only frees the levels above)."""
        maps = np.stack([self.repaired(base), self.offered(self.target.native_mapping())])
        return maps[int(np.argmin(self.target.latency_fs(maps)))]

    def repaired(self, mapping: np.ndarray) -> np.ndarray:
        """int64 ``[N, 2]``: the external map ``mapping`` ``[N, H]`` in NNP-I's choices as
        the NNP-I compiler repairs it, on levels the heads offer (:meth:`offered`)."""
        rectified, _ = self.target.rectify(self.nnpi_maps(np.asarray(mapping)[None]))
        return self.offered(rectified[0])

    def offered(self, nnpi_map: np.ndarray) -> np.ndarray:
        """int64 ``[N, 2]``: the NNP-I map with each level the heads do not offer sent to
        DRAM (which only frees the levels above)."""
        ok = self.permitted[np.arange(2)[None, :], nnpi_map]
        return np.where(ok, nnpi_map, DRAM)

    def solve(
        self,
        base: np.ndarray,
        time_limit_s: float = 60.0,
        workers: int = 2,
        extra_cost_s: np.ndarray | None = None,
        trust_maps: np.ndarray | None = None,
        trust_radius: int | None = None,
        exclude: np.ndarray | None = None,
        hint: np.ndarray | None = None,
        free_units: np.ndarray | None = None,
        quiet: bool = False,
        deterministic_s: float | None = None,
    ) -> PriorSolution:
        """The NNP-I optimum on the prior's costs, hinted with ``base`` (the chip compiler's
        map ``[N, H]``, see :meth:`hint`), within ``time_limit_s`` (model building
        included). With the example chip's figures at 60 s on a shared 2-core machine
        (load average about 20): ResNet-101 feasible, 1.1531x over the compiler's map by
        the prior; BERT-base feasible, 1.0008x; ResNet-50 proven optimal in 39 s
        (``docs/external.md``, "The chip's datasheet as a prior").

        Args:
            base: int64 ``[N, H]``: the chip compiler's map: the hint, the choices of
                heads other than weight and activation, and the answer when no map is
                found in time (``fell_back``, logged).
            time_limit_s: wall seconds; the best map found so far is answered.
            workers: CP-SAT threads.
            extra_cost_s: float ``[N, H, C]``: seconds added to the objective when unit
                ``n`` takes choice ``c`` of head ``h`` (rounded to whole femtoseconds;
                costs of heads other than weight and activation are constants here).
            trust_maps: int ``[M, N, H]`` with ``trust_radius``: the map differs from
                one of them in at most ``trust_radius`` units.
            exclude: int ``[K, N, H]``: maps not to answer.
            hint: int ``[N, H]``: the solver's first map instead of :meth:`hint`'s (as
                the NNP-I compiler repairs it, :meth:`repaired`): a round of
                ``agent=mbo`` in physics mode hints with the best map read.
            free_units: bool ``[N]``: the units the solve may change; every other unit
                keeps ``base``'s choices (a neighbourhood of a large-neighbourhood search:
                CP-SAT's presolve removes the fixed units, and the solve is exact on the
                rest). None: every unit.
            quiet: the solver logs at DEBUG (:func:`hwmodels.nnpi.optimum.solve`).
            deterministic_s: CP-SAT's deterministic time limit besides ``time_limit_s``
                (the same answer on any machine unless the wall limit comes first; a
                target's ``prior_solution`` sets :func:`prior_solve_options`' share).

        Returns:
            The :class:`~hwmodels.base.PriorSolution` in the external target's choices;
            ``latency_s`` is the prior's latency (no extra costs). ``proven``: optimal on
            the prior's costs (with the extra costs, inside the trust region, outside the
            excluded maps). A trust region and exclusions no map satisfies answer
            ``base`` with status ``infeasible``.

        Raises:
            ValueError: an option of the wrong shape, out-of-range choices, a
                non-finite or too large extra cost, a negative radius.
        """
        from hwmodels.nnpi.optimum import solve

        start = time.perf_counter()
        base = np.asarray(base, dtype=np.int64)
        additions = self._additions(
            base, extra_cost_s, trust_maps, trust_radius, exclude, free_units
        )
        result = solve(
            self.target,
            time_limit_s=time_limit_s,
            workers=workers,
            hint=self.hint(base) if hint is None else self.repaired(self._choices(hint, "hint")[0]),
            permitted=self.permitted,
            additions=additions,
            whole_limit=True,
            quick_presolve=True,
            quiet=quiet,
            deterministic_s=deterministic_s,
        )
        name = self.target.workload.name
        fell_back = result.status not in ("OPTIMAL", "FEASIBLE")
        if fell_back:
            mapping = base.copy()
            log.warning(
                "%s: the prior's solve found no map (%s) in %.1f s: the chip compiler's map "
                "stands in",
                name,
                result.status,
                time.perf_counter() - start,
            )
        else:
            mapping = self.target_maps(result.mapping[None], base)[0]
        status = "infeasible" if result.status == "INFEASIBLE" else result.status.lower()
        return PriorSolution(
            mapping=mapping,
            latency_s=float(self.latency_s(mapping[None])[0]),
            proven=bool(result.proven),
            solve_s=time.perf_counter() - start,
            status="fallback" if fell_back and status != "infeasible" else status,
            fell_back=fell_back,
        )

    def _additions(
        self, base, extra_cost_s, trust_maps, trust_radius, exclude, free_units=None
    ) -> Additions:
        """The options of :meth:`solve` checked and read in NNP-I's levels."""
        others = np.ones(len(self.num_choices), dtype=bool)
        others[self.columns] = False  # heads the prior does not place: fixed to base
        extra_fs = None
        if extra_cost_s is not None:
            extra_fs = self._extra_fs(extra_cost_s)
        trust, radius = None, None
        if (trust_maps is None) != (trust_radius is None):
            raise ValueError("trust_maps and trust_radius go together (give both or neither)")
        if trust_maps is not None:
            if isinstance(trust_radius, bool) or int(trust_radius) != trust_radius:
                raise ValueError(f"trust_radius must be an integer, got {trust_radius!r}")
            if trust_radius < 0:
                raise ValueError(f"trust_radius must be >= 0, got {trust_radius}")
            maps = self._choices(trust_maps, "trust_maps")
            fixed = (maps[:, :, others] != base[None, :, others]).any(axis=2).sum(axis=1)  # [M]
            trust, radius = self.nnpi_maps(maps), int(trust_radius) - fixed
        excluded = None
        if exclude is not None:
            maps = self._choices(exclude, "exclude")
            reachable = ~(maps[:, :, others] != base[None, :, others]).any(axis=(1, 2))
            excluded = self.nnpi_maps(maps[reachable])
        if trust is not None and len(trust) == 0:
            raise ValueError("trust_maps holds no map")
        if extra_fs is None and not self.chip_figures.plain:  # no cuts: zero extra costs
            extra_fs = np.zeros((self.target.num_units, 2, len(LEVELS)), dtype=np.int64)
        fixed = None
        if free_units is not None:
            free = np.asarray(free_units)
            if free.shape != (self.target.num_units,) or free.dtype != bool:
                raise ValueError(
                    f"free_units must be a bool array of shape [{self.target.num_units}], "
                    f"got {free.dtype} {list(free.shape)}"
                )
            fixed = np.where(free[:, None], -1, self.nnpi_maps(base[None])[0])
        return Additions(
            extra_fs=extra_fs, trust_maps=trust, trust_radius=radius, exclude=excluded, fixed=fixed
        )

    def _choices(self, maps, what: str) -> np.ndarray:
        """int64 ``[M, N, H]``: ``maps`` checked against the external target's choices."""
        arr = np.asarray(maps)
        if arr.ndim == 2:
            arr = arr[None]
        shape = (self.target.num_units, len(self.num_choices))
        if arr.ndim != 3 or arr.shape[1:] != shape or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(
                f"{what} must be integer maps of shape [M, {shape[0]}, {shape[1]}], "
                f"got {arr.dtype} {list(arr.shape)}"
            )
        if ((arr < 0) | (arr >= self.num_choices)).any():
            raise ValueError(
                f"{what} holds a choice out of range (choices per head: "
                f"{self.num_choices.tolist()})"
            )
        return arr.astype(np.int64)

    def _extra_fs(self, extra_cost_s) -> np.ndarray:
        """int64 ``[N, 2, L]``: extra costs ``[N, H, C]`` (seconds) in femtoseconds per
        NNP-I level of the weight and the activation heads."""
        arr = np.asarray(extra_cost_s, dtype=np.float64)
        shape = (self.target.num_units, len(self.num_choices), int(self.num_choices.max()))
        if arr.shape != shape:
            raise ValueError(f"extra_cost_s must have shape {list(shape)}, got {list(arr.shape)}")
        if not np.isfinite(arr).all():
            raise ValueError("extra_cost_s must be finite")
        fs = np.round(arr * FS_PER_S)
        if np.abs(fs).max(initial=0) > MAX_EXTRA_FS:
            raise ValueError(
                f"extra_cost_s must be at most {MAX_EXTRA_FS / FS_PER_S:.0f} s in size (the "
                "CP model counts whole femtoseconds in 64-bit integers)"
            )
        out = np.zeros((shape[0], 2, len(LEVELS)), dtype=np.int64)
        for h in range(2):
            own = np.flatnonzero(self.levels[h] >= 0)
            out[:, h, self.levels[h, own]] = fs[:, self.columns[h], own].astype(np.int64)
        return out


def nnpi_prior(target: Target, calibration: str | None = None, **params) -> NNPIPrior:
    """The NNP-I model bound to ``target``'s workload, reading ``target``'s maps.

    Nothing is measured and the external command is not called: the NNP-I target is
    built from the workload alone (its compiler never runs). ``target`` needs the heads
    ``weight`` and ``activation`` (any order, beside other heads, which are ignored)
    whose choices are named after NNP-I levels (``DRAM``, ``LLC``, ``SRAM``, any case,
    any order or subset), as :data:`hwmodels.external.NNPI_HEADS` are.

    Args:
        target: an :class:`~hwmodels.external.ExternalTarget` (or any target with
            ``heads`` and ``workload``).
        calibration: the path of a saved calibration (``hwmodel.params.prior``'s
            ``calibration``): its figures replace ``params``' NNP-I fields.
        **params: NNP-I parameters (:class:`~hwmodels.nnpi.NNPIParams` fields,
            ``native``); the defaults model the EGRL paper's chip.

    Raises:
        ValueError: a head is missing or names a choice that is no NNP-I level; the
            workload does not fit NNP-I's DRAM.
    """
    from hwmodels.nnpi import NNPI  # the package: the NNP-I target solves itself here

    if calibration is not None:
        options = {k: v for k, v in params.items() if k not in PRIOR_FIELDS}
        return calibrated_prior(target, load_figures(calibration), **options)
    columns, levels = prior_columns(target.heads)
    nnpi = NNPI(**params).bind(target.workload)
    num_choices = np.array([len(c) for c in target.heads.values()], dtype=np.int64)
    return NNPIPrior(nnpi, columns, levels, num_choices)


def calibrated_prior(target: Target, figures: ChipFigures, **options) -> NNPIPrior:
    """The NNP-I model with ``figures`` (set-up times, efficiencies) bound to
    ``target``'s workload, reading ``target``'s maps (``options``: ``native``,
    ``native_passes``). Raises ValueError as :func:`nnpi_prior` does."""
    columns, levels = prior_columns(target.heads)
    nnpi = figures.bind(target.workload, **options)
    num_choices = np.array([len(c) for c in target.heads.values()], dtype=np.int64)
    return NNPIPrior(nnpi, columns, levels, num_choices, figures)


def own_prior(target: NNPITarget) -> NNPIPrior:
    """The NNP-I target read as its own prior (its heads are NNP-I's levels)."""
    columns, levels = prior_columns(target.heads)
    return NNPIPrior(target, columns, levels, target.num_choices)


def prior_solve_options(time_limit_s: float, options: dict) -> dict:
    """``options`` of :meth:`NNPIPrior.solve` for a target's ``prior_solution`` within
    ``time_limit_s``: a deterministic limit of :data:`PRIOR_DETERMINISTIC_SHARE` of it
    unless ``options`` set one."""
    return {"deterministic_s": PRIOR_DETERMINISTIC_SHARE * float(time_limit_s), **options}
