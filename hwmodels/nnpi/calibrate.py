"""Calibrate a chip's NNP-I prior to its readings: bounded least squares on log latency.

The datasheet (:mod:`hwmodels.nnpi.prior`) gives the chip's bandwidths and compute
rate; the chip's readings say how far they hold. :func:`calibrate` fits, from maps read
on the chip and their latencies, each level's bandwidth, the compute rate, a set-up time
per transfer on each level, a compute efficiency per operator class and a bank-conflict
factor per on-chip level (:class:`~hwmodels.nnpi.figures.ChipFigures`: a node's
transfers that meet on a level slow each other) by ``scipy.optimize.least_squares`` with
bounds on ``log(model) - log(reading)``, starting at the prior's figures and pulled
towards them: beside the readings' sum of squares the pull is ``prior_weight / B *
sum((x - x0) ** 2)`` for ``B`` readings, ``x`` the log of each rate over the prior's,
``log(1 / efficiency)``, the set-up times in units of the time that, paid by every
transfer, would double the median reading, and the conflict factors themselves. So one reading moves the figures part of the
way (on ResNet-18, a DRAM bandwidth 1.7x off: 38% of the way in log), while 160 readings
recover the rates they exercise to 5% (``tests/test_calibration.py``); figures the
readings hardly touch stay at the prior's. The fit is not convex: it starts from the
prior's figures and from the run's last fit (``warm``), and one on at least as many
readings as figures that ends above ``RESTART_SPREAD`` starts again with each on-chip
level far slower (``SLOW_STARTS``); the least cost is kept. The fit goes through smooth
rooflines (``SHARPNESS``) before the max itself: at the datasheet a node's binding side
hides the other's gradient. The calibrated prior
(:meth:`Calibration.prior`) has per-node costs of the NNP-I form, so
:meth:`~hwmodels.nnpi.prior.NNPIPrior.solve` solves it exactly as it solves the
datasheet (bank conflicts priced per configuration of a layer's tensors). What this form
cannot say (transfers that share a level's bandwidth across levels, a weight streamed
during the previous layer) stays in the residual spread.

>>> cal = calibrate(prior, maps, latency_s)       # maps [B, N, H] as read on the chip
>>> cal.prior(target).solve(target.native_mapping(), time_limit_s=60)
>>> cal.save("calibration.json")   # hwmodel.params.prior={name: nnpi, calibration: ...}
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from hwmodels.base import Target
from hwmodels.nnpi.figures import (
    FORMAT,
    VECTOR,
    ChipFigures,
    host_transfers,
    load_figures,
    op_classes,
)
from hwmodels.nnpi.params import DRAM, FS_PER_S, LEVELS
from hwmodels.nnpi.prior import NNPIPrior, calibrated_prior

log = logging.getLogger(__name__)

#: a fitted bandwidth or compute rate stays within these factors of the starting one
RATE_RANGE = (1 / 20, 4.0)
#: a fitted efficiency is at least this share of peak
MIN_EFFICIENCY = 0.05
#: a fitted bank-conflict factor is at most this (each extra transfer on a level)
MAX_CONFLICT = 10.0
#: the levels whose bank conflicts are fitted (the on-chip ones)
CONFLICTING = (1, 2)
#: the smooth rooflines the fit goes through before the max itself (``_Fit.latency``)
SHARPNESS = (4.0, 16.0)
#: the datasheet's default pull (module docstring)
PRIOR_WEIGHT = 1.0
#: a fit whose log-latency spread stays above this starts again (:func:`calibrate`)
RESTART_SPREAD = 0.02
#: ... from the prior's figures with each on-chip level's bandwidth at these shares of
#: the prior's: a level far slower than its datasheet figure, with bank conflicts, is a
#: local minimum away from the datasheet (on 100 readings of chip-stream-resnet50, whose
#: SRAM reaches a fifth of its figure, the fit from the datasheet stopped at a spread of
#: 0.026, the best of these starts at 0.011)
SLOW_STARTS = (0.25, 0.0625)


@dataclass(frozen=True)
class Calibration:
    """Calibrated figures of a chip and how well they fit.

    Attributes:
        figures: the fitted bandwidths and compute rate (``figures.params``), set-up
            times and compute efficiencies.
        start: the figures the fit started from and was pulled towards (the datasheet).
        spread: standard deviation of ``log(model) - log(reading)`` over the readings at
            the fitted figures.
        start_spread: the same at the starting figures.
        readings: how many readings were fitted.
        prior_weight: the pull towards ``start``.
        starts: the points the fit started from (more than one: it started again).
    """

    figures: ChipFigures
    start: ChipFigures
    spread: float
    start_spread: float
    readings: int
    prior_weight: float
    starts: int = 1

    def prior(self, target: Target, **options) -> NNPIPrior:
        """The calibrated NNP-I prior bound to ``target``'s workload (any workload of the
        chip: the figures are per level and per operator class)."""
        return calibrated_prior(target, self.figures, **options)

    def prior_config(self, path: str | Path) -> dict:
        """``hwmodel.params.prior`` of a run that starts from this calibration saved at
        ``path``."""
        return {"name": "nnpi", "calibration": str(path)}

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "figures": self.figures.to_dict(),
            "start": self.start.to_dict(),
            "spread": self.spread,
            "start_spread": self.start_spread,
            "readings": self.readings,
            "prior_weight": self.prior_weight,
            "starts": self.starts,
        }

    def save(self, path: str | Path) -> Path:
        """Write the calibration as JSON (``format: egrl-calibration/1``); returns ``path``."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """The calibration :meth:`save` wrote (ValueError naming what is wrong)."""
        figures = load_figures(path)
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        try:
            return cls(
                figures=figures,
                start=ChipFigures.from_dict(data["start"]),
                spread=float(data["spread"]),
                start_spread=float(data["start_spread"]),
                readings=int(data["readings"]),
                prior_weight=float(data["prior_weight"]),
                starts=int(data.get("starts", 1)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{str(path)!r} is a malformed calibration: {exc!r}") from None


@dataclass(frozen=True)
class _Traffic:
    """What the maps move, per node and level, independent of the figures.

    Attributes:
        bytes_: float64 ``[B, N, L]``: bytes each node moves on each level.
        transfers: float64 ``[B, N, L]``: transfers each node makes on each level.
        macs: float64 ``[N]``; vector: float64 ``[N]``: the node's vector operations.
        mac_class: int64 ``[N]``: the class of the node's MACs (-1: none).
        classes: the class names (:func:`~hwmodels.nnpi.figures.op_classes`).
    """

    bytes_: np.ndarray
    transfers: np.ndarray
    macs: np.ndarray
    vector: np.ndarray
    mac_class: np.ndarray
    classes: list[str]

    @classmethod
    def of(cls, workload, levels: np.ndarray) -> _Traffic:
        """The traffic of NNP-I maps ``levels`` int64 ``[B, N, 2]`` on ``workload``."""
        b, n = levels.shape[:2]
        nl = len(LEVELS)
        w, o = workload.weight_bytes.astype(float), workload.output_bytes.astype(float)
        src, dst = workload.edge_index
        rows = np.arange(b)[:, None]
        nodes = np.broadcast_to(np.arange(n), (b, n))
        moved = np.zeros((b, n, nl))
        count = np.zeros((b, n, nl))
        for size, lv in ((w, levels[:, :, 0]), (o, levels[:, :, 1])):
            np.add.at(moved, (rows, nodes, lv), size[None])
            np.add.at(count, (rows, nodes, lv), (size > 0)[None].astype(float))
        producer = levels[:, src, 1]  # [B, E]
        np.add.at(moved, (rows, np.broadcast_to(dst, producer.shape), producer), o[src][None])
        np.add.at(count, (rows, np.broadcast_to(dst, producer.shape), producer), (o[src] > 0)[None])
        moved[:, :, DRAM] += workload.graph_input_bytes[None]
        count[:, :, DRAM] += host_transfers(workload)[None]
        classes, mac_class = op_classes(workload)
        return cls(
            moved,
            count,
            workload.macs.astype(float),
            workload.vector_ops.astype(float),
            mac_class,
            classes,
        )


class _Fit:
    """The model's log latency as a function of the fitted vector and its Jacobian.

    The vector ``x``: ``log`` of each level's seconds per byte over the start's ``[3]``,
    ``log`` of seconds per MAC over the start's ``[1]``, ``log(1 / efficiency)`` per
    class ``[K]``, each level's set-up time in units of ``setup_unit_s`` ``[3]``, and
    the conflict factor of each level of :data:`CONFLICTING` ``[2]``.
    """

    def __init__(self, traffic: _Traffic, start: ChipFigures, setup_unit_s: float) -> None:
        self.t = traffic
        self.start = start
        self.fs_per_byte0 = FS_PER_S / (np.asarray(start.params.bandwidths_gbps) * 1e9)
        self.fs_per_mac0 = FS_PER_S / (start.params.peak_tops * 1e12 / 2)
        self.unit_fs = setup_unit_s * FS_PER_S
        k = len(traffic.classes)
        self.k = k
        # ops [K, N]: the operations of each node that run at class k's efficiency
        ops = np.zeros((k, len(traffic.macs)))
        has = traffic.mac_class >= 0
        ops[traffic.mac_class[has], np.flatnonzero(has)] = traffic.macs[has]
        if VECTOR in traffic.classes:
            ops[traffic.classes.index(VECTOR)] += traffic.vector
        self.ops = ops
        self.peak_ops = traffic.macs + (0.0 if VECTOR in traffic.classes else traffic.vector)
        self.met = np.maximum(traffic.transfers - 1, 0)  # [B, N, L]: the others met there
        self.setups = 4 + k  # index of the first set-up time in x
        self.conflicts = self.setups + len(LEVELS)  # index of the first conflict factor

    def vector(self, figures: ChipFigures) -> np.ndarray:
        """The fitted vector of ``figures`` (the inverse of :meth:`figures`)."""
        bandwidths = np.asarray(figures.params.bandwidths_gbps, dtype=float)
        rates = np.log(np.asarray(self.start.params.bandwidths_gbps) / bandwidths)
        mac = np.log(self.start.params.peak_tops / figures.params.peak_tops)
        eff = [float(figures.efficiency.get(c, 1.0)) for c in self.t.classes]
        setup = np.asarray(figures.setup_s) * FS_PER_S / self.unit_fs
        conflict = np.asarray(figures.conflict)[list(CONFLICTING)]
        return np.concatenate([rates, [mac], -np.log(eff), setup, conflict])

    def slow(self, x0: np.ndarray, shares: tuple[float, ...]) -> list[np.ndarray]:
        """``x0`` with one on-chip level's bandwidth at a share of it, per share and level."""
        points = []
        for share in shares:
            for lv in CONFLICTING:
                x = x0.copy()
                x[lv] -= np.log(float(share))  # seconds per byte over the start's
                points.append(x)
        return points

    def bounds(self, x0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = np.log(1 / RATE_RANGE[1]), np.log(1 / RATE_RANGE[0])  # seconds per unit
        c = len(CONFLICTING)
        lower = np.concatenate([np.full(4, lo), np.zeros(self.k + len(LEVELS) + c)])
        upper = np.concatenate(
            [
                np.full(4, hi),
                np.full(self.k, -np.log(MIN_EFFICIENCY)),
                np.full(len(LEVELS), 1e3),
                np.full(c, MAX_CONFLICT),
            ]
        )
        lower[4:] = np.minimum(lower[4:], x0[4:])
        upper[4:] = np.maximum(upper[4:], x0[4:])
        return lower, upper

    def latency(self, x: np.ndarray, sharpness: float | None = None) -> tuple[np.ndarray, tuple]:
        """Model latency, fs ``[B]``, and what the Jacobian needs. ``sharpness`` ``p``:
        each node takes ``(compute ** p + memory ** p) ** (1 / p)``, a smooth roofline
        whose gradient reaches the side that does not bind (None: the max itself)."""
        fpb = self.fs_per_byte0 * np.exp(x[:3])  # [L]
        fpm = self.fs_per_mac0 * np.exp(x[3])
        ineff = np.exp(x[4 : self.setups])  # [K]
        setup = x[self.setups : self.conflicts] * self.unit_fs  # [L]
        by_class = fpm * ineff[:, None] * self.ops  # [K, N]
        compute = by_class.sum(axis=0) + fpm * (self.peak_ops - self.ops.sum(axis=0)).clip(0)
        plain = self.t.bytes_ * fpb + self.t.transfers * setup  # [B, N, L]
        conflict = np.zeros(len(LEVELS))
        conflict[list(CONFLICTING)] = x[self.conflicts :]
        factor = 1.0 + conflict * self.met  # [B, N, L]
        memory = (plain * factor).sum(axis=2)  # [B, N]
        compute = np.broadcast_to(compute[None], memory.shape)
        top = np.maximum(memory, compute)  # [B, N]
        parts = (fpb, compute, by_class, plain, factor)
        if sharpness is None:
            on_memory = (memory > compute).astype(float)
            return top.sum(axis=1), (*parts, on_memory, 1.0 - on_memory)
        p = float(sharpness)
        top = np.maximum(top, 1e-30)
        m, c = memory / top, compute / top
        node = top * (m**p + c**p) ** (1 / p)
        on_memory, on_compute = (memory / node) ** (p - 1), (compute / node) ** (p - 1)
        return node.sum(axis=1), (*parts, on_memory, on_compute)

    def jacobian(self, x: np.ndarray, parts: tuple, latency: np.ndarray) -> np.ndarray:
        """float64 ``[B, P]``: d log latency / d x."""
        fpb, compute, by_class, plain, factor, on_memory, on_compute = parts  # weights [B, N]
        m = on_memory[:, :, None] * factor  # [B, N, L]
        d_rate = (m * self.t.bytes_).sum(axis=1) * fpb  # [B, L]
        d_mac = (on_compute * compute).sum(axis=1, keepdims=True)  # [B, 1]
        d_class = on_compute @ by_class.T  # [B, K]
        d_setup = (m * self.t.transfers).sum(axis=1) * self.unit_fs  # [B, L]
        met = on_memory[:, :, None] * plain * self.met  # [B, N, L]
        d_conflict = met.sum(axis=1)[:, list(CONFLICTING)]  # [B, 2]
        return (
            np.concatenate([d_rate, d_mac, d_class, d_setup, d_conflict], axis=1) / latency[:, None]
        )

    def figures(self, x: np.ndarray) -> ChipFigures:
        rates = np.exp(-x[:3]) * np.asarray(self.start.params.bandwidths_gbps)
        params = replace(
            self.start.params,
            dram_gbps=float(rates[0]),
            llc_gbps=float(rates[1]),
            sram_gbps=float(rates[2]),
            peak_tops=float(self.start.params.peak_tops * np.exp(-x[3])),
        )
        eff = {c: float(np.exp(-v)) for c, v in zip(self.t.classes, x[4 : self.setups])}
        eff = {**self.start.efficiency, **eff}
        setup = x[self.setups : self.conflicts] * self.unit_fs / FS_PER_S
        conflict = [0.0] * len(LEVELS)
        for lv, f in zip(CONFLICTING, x[self.conflicts :]):
            conflict[lv] = float(f)
        return ChipFigures(
            params,
            tuple(float(s) for s in setup),  # type: ignore[arg-type]
            eff,
            tuple(conflict),  # type: ignore[arg-type]
        )


def _rms(values: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(values))))


def calibrate(
    prior: NNPIPrior,
    maps: np.ndarray,
    latency_s: np.ndarray,
    prior_weight: float = PRIOR_WEIGHT,
    max_evaluations: int = 200,
    warm: ChipFigures | None = None,
    restart_spread: float = RESTART_SPREAD,
    slow_starts: tuple[float, ...] = SLOW_STARTS,
) -> Calibration:
    """Fit ``prior``'s figures to the chip's readings (module docstring).

    Args:
        prior: the chip's prior (its datasheet, or a calibrated prior to start from).
        maps: int ``[B, N, H]``: maps as the chip ran them (its compiler's rectified
            maps), in the chip's choices.
        latency_s: float ``[B]``: their latencies (means where a map was read again).
        prior_weight: the pull towards the prior's figures (>= 0).
        max_evaluations: model evaluations the least squares may take (per start and
            roofline sharpness).
        warm: figures to start from too (a run's last fit; the pull is still towards
            the prior's). The fit is not convex: of the fits from every start, the least
            cost (the readings' squares and the pull) is kept.
        restart_spread: where the best fit's log-latency spread is above this (and
            there are at least as many readings as fitted figures), the fit also starts
            from each of ``slow_starts``.
        slow_starts: shares in (0, 1]: the prior's figures with one on-chip level's
            bandwidth at that share of the prior's, per share and level.

    Returns:
        The :class:`Calibration`; its :meth:`~Calibration.prior` is solved as the
        datasheet is.

    Raises:
        ValueError: maps of the wrong shape, latencies not positive and finite or not
            one per map, a negative ``prior_weight``.
    """
    maps = prior._choices(maps, "maps")
    latency_s = np.asarray(latency_s, dtype=np.float64).reshape(-1)
    if len(latency_s) != len(maps) or not len(maps):
        raise ValueError(
            f"calibrate needs one latency per map and at least one map, got {len(latency_s)} "
            f"latencies for {len(maps)} maps"
        )
    if not (np.isfinite(latency_s) & (latency_s > 0)).all():
        raise ValueError("calibrate needs latencies that are positive and finite")
    if not (prior_weight >= 0):
        raise ValueError(f"prior_weight must be >= 0, got {prior_weight!r}")
    if not all(0 < float(share) <= 1 for share in slow_starts):
        raise ValueError(f"slow_starts must be shares in (0, 1], got {slow_starts!r}")
    if not (restart_spread >= 0):
        raise ValueError(f"restart_spread must be >= 0, got {restart_spread!r}")
    workload = prior.target.workload
    traffic = _Traffic.of(workload, prior.nnpi_maps(maps))
    # the set-up unit: the time that, paid by every transfer, doubles a typical map
    per_map = traffic.transfers.sum(axis=(1, 2))
    unit_s = float(np.median(latency_s / np.maximum(per_map, 1)))
    fit = _Fit(traffic, prior.chip_figures, unit_s)
    x0 = fit.vector(fit.start)
    target_log = np.log(latency_s * FS_PER_S)
    pull = np.sqrt(prior_weight / len(maps))  # the datasheet's share falls as 1 / B**2

    def residuals(x, sharpness=None):
        latency, _ = fit.latency(x, sharpness)
        return np.concatenate([np.log(latency) - target_log, pull * (x - x0)])

    def jacobian(x, sharpness=None):
        latency, parts = fit.latency(x, sharpness)
        return np.concatenate([fit.jacobian(x, parts, latency), pull * np.eye(len(x))])

    lower, upper = fit.bounds(x0)
    evaluations = 0

    def fitted(first: np.ndarray) -> tuple[np.ndarray, float]:
        """The fit from ``first`` and its cost."""
        nonlocal evaluations
        x = np.clip(first, lower, upper)
        for sharpness in (*SHARPNESS, None):  # smooth first: the max's kinks trap the fit
            result = least_squares(
                residuals,
                x,
                jac=jacobian,
                bounds=(lower, upper),
                method="trf",
                max_nfev=int(max_evaluations),
                args=(sharpness,),
            )
            x, evaluations = result.x, evaluations + result.nfev
        return x, float(np.sum(np.square(residuals(x))))

    points = [x0] + ([fit.vector(warm)] if warm is not None else [])
    fits = [fitted(p) for p in points]
    x, _ = min(fits, key=lambda f: f[1])  # the least cost; the first of equals
    # with fewer readings than figures the pull decides, and a far start only overfits
    if len(maps) >= len(x0) and _rms(residuals(x)[: len(maps)]) > restart_spread:
        fits += [fitted(p) for p in fit.slow(x0, tuple(slow_starts))]
        x, _ = min(fits, key=lambda f: f[1])
    starts = len(fits)
    spread = _rms(residuals(x)[: len(maps)])
    start_spread = _rms(residuals(x0)[: len(maps)])
    figures = fit.figures(x)
    log.info(
        "%s: calibrated on %d readings in %d evaluations from %d starts: log-latency "
        "spread %.4f -> %.4f",
        workload.name,
        len(maps),
        evaluations,
        starts,
        start_spread,
        spread,
    )
    return Calibration(
        figures, fit.start, spread, start_spread, len(maps), float(prior_weight), starts
    )
