"""Physics first: the chip's datasheet model calibrated to its readings, a learned residual,
and the acquisition solved exactly inside a trust region (``agent=mbo`` with a prior).

One round of :class:`~egrl.agents.mbo.agent.ModelBasedAgent` in physics mode reads top
to bottom in :meth:`~egrl.agents.mbo.agent.ModelBasedAgent._physics_round`; the pieces it
uses live here:

- :class:`ChipReadings`: every map the chip ran and its latency, the mean of its readings
  on a noisy board (it subscribes to the run's record, the compiler's map, the search's
  and the confirmation's readings);
- :class:`PhysicsModel`: the prior calibrated to the readings
  (:func:`hwmodels.nnpi.calibrate.calibrate`: bandwidths, compute rate, set-up time per
  transfer and level, efficiency per operator class, bank conflicts per on-chip level,
  pulled towards the datasheet), and
  a residual of what the calibrated prior still misses on log latency: ``linear`` (ridge
  regression on the map's one-hot choices, which is again a per-unit, per-choice cost and
  goes into the solve) or ``forest`` (extra trees on the map's choices, which re-ranks the
  solver's maps);
- :func:`solve_batch`: distinct maps of the calibrated prior plus the linear residual
  solved exactly (:meth:`hwmodels.nnpi.prior.NNPIPrior.solve`) within ``radius`` units of
  the best maps read, each solution excluded from the next solve;
- :class:`TrustRegion`: the radius, grown after rounds whose best beat the best map read
  and shrunk after rounds that did not; below its least radius the round goes to the
  searchers from fresh starts and the radius starts again.

The residual is fitted on ``log(reading) - log(calibrated prior)``; a linear residual
``r(map) = sum w[n, h, map[n, h]]`` enters the solve as extra seconds ``w * L`` per
choice (``L``: the calibrated prior's latency of the best map read; the first-order term
of ``L * exp(r)``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from egrl.record import COMPILER, CONFIRM, SEARCH, Reading
from hwmodels.nnpi.calibrate import Calibration, calibrate
from hwmodels.nnpi.figures import ChipFigures
from hwmodels.nnpi.prior import NNPIPrior

log = logging.getLogger(__name__)

#: ridge penalties the linear residual chooses from by leave-one-out error
RIDGE_ALPHAS = (0.1, 1.0, 10.0, 100.0)
#: the fewest readings a residual is fitted on (fewer: no residual)
MIN_RESIDUAL = 4
#: random neighbours a solve's hint is the best of (:func:`neighbour_hint`)
HINT_NEIGHBOURS = 256
#: each solve's wall limit, as a multiple of its deterministic limit (``solve_time_s``):
#: one worker and a deterministic limit answer the same map for the same run on any
#: machine; the wall limit only stands behind it
WALL_FACTOR = 10.0


class ChipReadings:
    """Every map the chip ran (as its compiler ran it) and its mean latency.

    Subscribe :meth:`read` to the run's record (the search's and the confirmation's
    readings); the compiler's map, read when the target was bound, is the first.

    Args:
        env: the run's environment (its compiler's map and latency seed the readings).
    """

    #: the record's readings it keeps (:meth:`read`)
    kinds = (SEARCH, CONFIRM, COMPILER)

    def __init__(self, env) -> None:
        self.num_units, self.num_heads = env.num_units, env.num_heads
        #: map key -> [map int16 [N, H], sum of latencies, readings]
        self._rows: dict[bytes, list] = {}
        base = getattr(env, "baseline_measurement", None)
        if base is not None and np.isfinite(env.baseline_latency_s):
            self.add(np.asarray(base.rectified[:1]), np.array([env.baseline_latency_s]))

    def read(self, reading: Reading) -> None:
        """Keep the measured maps of one reading of the record (as the chip ran them)."""
        ev = reading.evaluation
        keep = reading.measured & np.isfinite(ev.latency_s) & (ev.latency_s > 0)
        if keep.any():
            self.add(np.asarray(ev.rectified)[keep], np.asarray(ev.latency_s)[keep])

    def add(self, maps: np.ndarray, latency_s: np.ndarray) -> None:
        """Add readings: maps int ``[B, N, H]`` as the chip ran them, latencies float ``[B]``."""
        for m, t in zip(np.asarray(maps).astype(np.int16), np.asarray(latency_s, float)):
            row = self._rows.setdefault(m.tobytes(), [m, 0.0, 0])
            row[1] += float(t)
            row[2] += 1

    def __len__(self) -> int:
        return len(self._rows)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Maps int64 ``[M, N, H]`` (in the order first read) and mean latencies float64 ``[M]``."""
        if not self._rows:
            return np.zeros((0, self.num_units, self.num_heads), np.int64), np.zeros(0)
        rows = list(self._rows.values())
        maps = np.stack([r[0] for r in rows]).astype(np.int64)
        return maps, np.array([r[1] / r[2] for r in rows])

    def latency_of(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[P]``: the mean latency read of each map ``[P, N, H]`` (NaN: not read)."""
        rows = np.asarray(maps).astype(np.int16)
        out = np.full(len(rows), np.nan)
        for i, m in enumerate(rows):
            row = self._rows.get(m.tobytes())
            if row is not None:
                out[i] = row[1] / row[2]
        return out

    def best(self, count: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``count`` fastest maps read ``[<= count, N, H]`` and their latencies."""
        maps, latency = self.arrays()
        order = np.argsort(latency, kind="stable")[: max(int(count), 0)]
        return maps[order], latency[order]

    def state_dict(self) -> dict:
        maps, _ = self.arrays()
        rows = list(self._rows.values())
        return {
            "maps": maps.astype(np.int16),
            "sums": np.array([r[1] for r in rows]),
            "counts": np.array([r[2] for r in rows], dtype=np.int64),
        }

    def load_state_dict(self, state: dict) -> None:
        self._rows = {}
        for m, s, c in zip(state["maps"], state["sums"], state["counts"]):
            m = np.asarray(m, dtype=np.int16)
            self._rows[m.tobytes()] = [m, float(s), int(c)]


def one_hot(maps: np.ndarray, num_choices: np.ndarray) -> np.ndarray:
    """float64 ``[B, N * H * C]``: each map's choices ``[B, N, H]`` one-hot (``C``: the
    most choices of any head; a head's missing choices are never set)."""
    maps = np.asarray(maps, dtype=np.int64)
    b, n, h = maps.shape
    c = int(np.max(num_choices))
    out = np.zeros((b, n, h, c))
    np.put_along_axis(out, maps[..., None], 1.0, axis=3)
    return out.reshape(b, -1)


@dataclass
class PhysicsModel:
    """The calibrated prior and its residual, fitted on one round's readings.

    Attributes:
        prior: the calibrated prior (the datasheet's when ``calibration`` is None).
        calibration: the fit of the figures (None: not calibrated).
        weights: float64 ``[N, H, C]``: the linear residual's per-choice log-latency terms
            (zeros without one).
        forest: the forest residual (None without one).
        num_choices: int64 ``[H]``.
        spread: standard deviation of ``log(reading) - log(model)`` on the readings
            after the residual.
    """

    prior: NNPIPrior
    calibration: Calibration | None
    weights: np.ndarray
    forest: object | None
    num_choices: np.ndarray
    spread: float

    def log_residual(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B]``: the residual's log-latency correction of maps ``[B, N, H]``."""
        maps = np.asarray(maps, dtype=np.int64)
        out = one_hot(maps, self.num_choices) @ self.weights.reshape(-1)
        if self.forest is not None:
            out = out + self.forest.predict(maps.reshape(len(maps), -1))
        return out

    def latency_s(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B]``: predicted latency of maps ``[B, N, H]`` (prior times residual)."""
        if not len(maps):
            return np.zeros(0)
        return self.prior.latency_s(maps) * np.exp(self.log_residual(maps))

    def extra_cost_s(self, scale_s: float) -> np.ndarray | None:
        """float64 ``[N, H, C]``: the linear residual as seconds per choice (``scale_s``:
        the latency it is linearised at); None without a linear residual."""
        if not np.any(self.weights):
            return None
        return self.weights * float(scale_s)


def fit_model(
    target,
    datasheet: NNPIPrior,
    maps: np.ndarray,
    latency_s: np.ndarray,
    num_choices: np.ndarray,
    calibrated: bool,
    residual: str,
    prior_weight: float,
    seed: int,
    warm: ChipFigures | None = None,
) -> PhysicsModel:
    """Calibrate ``datasheet`` (the prior of ``target``, the run's target) to the readings
    (maps int ``[M, N, H]``, latencies float ``[M]``; ``calibrated`` False: the datasheet
    as it is) and fit ``residual`` (one of
    :data:`~egrl.agents.mbo.options.RESIDUALS`) on what the calibrated prior misses;
    ``warm``: figures the calibration starts from too, beside the datasheet's (the last
    round's fit)."""
    calibration = None
    prior = datasheet
    if calibrated and len(maps):
        calibration = calibrate(datasheet, maps, latency_s, prior_weight=prior_weight, warm=warm)
        prior = calibration.prior(target)
    shape = (maps.shape[1], len(num_choices), int(np.max(num_choices)))
    weights, forest = np.zeros(shape), None
    misses = np.log(latency_s) - np.log(prior.latency_s(maps)) if len(maps) else np.zeros(0)
    if residual != "none" and len(maps) >= MIN_RESIDUAL:
        if residual == "linear":
            weights = _ridge(one_hot(maps, num_choices), misses).reshape(shape)
        else:
            forest = _forest(maps.reshape(len(maps), -1), misses, seed)
    model = PhysicsModel(prior, calibration, weights, forest, np.asarray(num_choices), 0.0)
    if len(maps):
        model.spread = float(np.std(np.log(latency_s) - np.log(model.latency_s(maps))))
    return model


def _ridge(features: np.ndarray, target: np.ndarray) -> np.ndarray:
    """float64 ``[F]``: ridge weights on ``features`` ``[M, F]``, penalty by leave-one-out;
    the intercept is fitted and dropped (a constant factor no map choice changes)."""
    from sklearn.linear_model import RidgeCV  # start-up time

    model = RidgeCV(alphas=RIDGE_ALPHAS, fit_intercept=True).fit(features, target)
    return np.asarray(model.coef_, dtype=np.float64)


def _forest(features: np.ndarray, target: np.ndarray, seed: int):
    """Extra trees on the maps' choices ``[M, N * H]`` predicting the log-latency miss."""
    from sklearn.ensemble import ExtraTreesRegressor  # start-up time

    return ExtraTreesRegressor(
        n_estimators=100, min_samples_leaf=2, random_state=int(seed), n_jobs=1
    ).fit(features, target)


@dataclass
class TrustRegion:
    """The radius (units a solved map may differ in from the nearest anchor) and its rule.

    Two rounds in a row whose best beat the best map read double it (at most ``high``);
    two that did not halve it; halved below ``low`` it starts again at ``start`` and
    :meth:`update` answers True: the next round goes to the searchers from fresh starts.
    """

    start: int
    low: int
    high: int
    radius: int = 0
    wins: int = 0
    losses: int = 0
    restarts: int = 0

    def __post_init__(self) -> None:
        if not self.radius:
            self.radius = self.start

    def update(self, improved: bool) -> bool:
        """Count one round; True when the region collapsed (and restarted)."""
        if improved:
            self.wins, self.losses = self.wins + 1, 0
            if self.wins >= 2:
                self.radius, self.wins = min(2 * self.radius, self.high), 0
            return False
        self.wins, self.losses = 0, self.losses + 1
        if self.losses < 2:
            return False
        self.losses = 0
        if self.radius // 2 < self.low:
            self.radius, self.restarts = self.start, self.restarts + 1
            return True
        self.radius //= 2
        return False

    def state_dict(self) -> dict:
        return dict(self.__dict__)


def window_units(num_units: int, window: int | None, rng: np.random.Generator) -> np.ndarray:
    """bool ``[N]``: the units one solve may change: ``window`` consecutive units (in the
    workload's order, so that producers and their consumers fall in one window) from a
    random start; every unit without a window or when it covers them all."""
    free = np.ones(num_units, dtype=bool)
    if window is None or window >= num_units:
        return free
    start = int(rng.integers(0, num_units - window + 1))
    free[:] = False
    free[start : start + window] = True
    return free


def neighbour_hint(
    model: PhysicsModel,
    centre: np.ndarray,
    radius: int | None,
    free: np.ndarray,
    excluded: set[bytes],
    rng: np.random.Generator,
    count: int = HINT_NEIGHBOURS,
) -> np.ndarray | None:
    """int64 ``[N, H]``: a solve's first map, the best by the model of ``count`` random
    neighbours of ``centre`` ``[N, H]`` (1 to ``radius`` of the ``free`` units, bool
    ``[N]``, given random choices; 1 to 4 without a radius) that the prior's compiler
    accepts and that are not ``excluded`` (keys of int16 maps); None if none is. The
    centre itself is a map read, excluded from the solve: hinted with it, CP-SAT found no
    map, or a poor one, within its time on ResNet-101 (0.93x of the centre by the prior's
    latency)."""
    h = centre.shape[1]
    units_free = np.flatnonzero(free)
    most = max(1, min(int(radius) if radius is not None else 4, len(units_free)))
    maps = np.repeat(centre[None], count, axis=0)
    changed = rng.integers(1, most + 1, size=count)
    for i, k in enumerate(changed):
        units = rng.choice(units_free, size=int(k), replace=False)
        maps[i, units] = rng.integers(0, model.num_choices[None], size=(int(k), h))
    nnpi = model.prior.nnpi_maps(maps)
    _, moved = model.prior.target.rectify(nnpi)
    keep = np.asarray(moved) == 0  # the prior's compiler moves no byte
    keep &= np.array([m.astype(np.int16).tobytes() not in excluded for m in maps])
    keep &= (maps != centre[None]).any(axis=(1, 2))
    if not keep.any():
        return None
    maps = maps[keep]
    return maps[int(np.argmin(model.latency_s(maps)))]


def solve_batch(
    model: PhysicsModel,
    base: np.ndarray,
    anchors: np.ndarray,
    radius: int | None,
    exclude: np.ndarray,
    count: int,
    time_limit_s: float,
    accept: Callable[[np.ndarray], np.ndarray],
    rng: np.random.Generator,
    window: int | None = None,
) -> tuple[np.ndarray, dict]:
    """Up to ``count`` distinct maps ``[<= count, N, H]`` of the calibrated prior plus the
    linear residual, solved exactly within ``radius`` units of ``anchors`` ``[A, N, H]``
    (None: anywhere), none of ``exclude`` ``[K, N, H]``.

    Each solve changes only a ``window`` of consecutive units of ``base`` ``[N, H]`` (the
    best map read; :func:`window_units`, ``rng``: a large-neighbourhood search whose every
    step is exact in its window; None: every unit), excludes the maps solved before it
    and is hinted with the best neighbour of ``base`` in the window
    (:func:`neighbour_hint`); it runs one CP-SAT worker
    for ``time_limit_s`` of deterministic time (:data:`WALL_FACTOR`). The
    chip's compiler (``accept``: maps ``[B, N, H]`` -> bool ``[B]``) is asked about each
    pass's maps at once; a refused map stays excluded and the next pass solves a
    replacement (three passes at most). A solve that finds no map (its window or the
    region exhausted, or nothing in time) is a miss: without a window the first ends the
    batch, with one the batch ends after ``count`` misses.

    Returns the maps and counts ``{"solves", "refused", "solve_s", "proven", "misses"}``.
    """
    scale = float(model.prior.latency_s(base[None])[0])
    extra = model.extra_cost_s(scale)
    excluded = [np.asarray(m, dtype=np.int64) for m in exclude]
    keys = {m.astype(np.int16).tobytes() for m in excluded}
    found: list[np.ndarray] = []
    info = {"solves": 0, "refused": 0, "solve_s": 0.0, "proven": 0, "misses": 0}
    trust = {} if radius is None else {"trust_maps": anchors, "trust_radius": int(radius)}
    exhausted = False
    for _ in range(3):
        solved: list[np.ndarray] = []
        while len(found) + len(solved) < count:
            start = time.perf_counter()
            free = window_units(len(base), window, rng)
            hint = neighbour_hint(model, base, radius, free, keys, rng)
            solution = model.prior.solve(
                base,
                time_limit_s=WALL_FACTOR * time_limit_s,
                workers=1,
                deterministic_s=time_limit_s,
                extra_cost_s=extra,
                exclude=np.stack(excluded) if excluded else None,
                hint=base if hint is None else hint,
                free_units=None if free.all() else free,
                quiet=True,
                **trust,
            )
            info["solves"] += 1
            info["solve_s"] += time.perf_counter() - start
            if solution.fell_back or solution.status == "infeasible":
                info["misses"] += 1
                exhausted = free.all() or info["misses"] >= count
                log.debug("physics: a solve found no map (%s)", solution.status)
                if exhausted:
                    break
                continue
            info["proven"] += int(solution.proven)
            solved.append(np.asarray(solution.mapping, dtype=np.int64))
            excluded.append(solved[-1])
            keys.add(solved[-1].astype(np.int16).tobytes())
        if solved:
            ok = np.asarray(accept(np.stack(solved)), dtype=bool)
            found.extend(m for m, keep in zip(solved, ok) if keep)
            info["refused"] += int((~ok).sum())
        if exhausted or len(found) >= count:
            break
    shape = (0, *base.shape)
    return (np.stack(found) if found else np.zeros(shape, np.int64)), info
