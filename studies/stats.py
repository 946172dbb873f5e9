"""The numbers every study reports, each computed in one place.

- :func:`samples_to_level`: paid measurements until a best-so-far curve first reaches a
  level (the samples a user pays to get there);
- :func:`format_samples`: samples to a level over seeds as text (median, range, how many
  got there);
- :func:`mann_whitney` and :func:`first_share`: the significance test between two agents
  over seeds, and the share of pairs where the first got there first; :func:`compare`: both;
- :func:`best_known`: the value a share of the optimum divides by (proven, else best known);
  :func:`solver_optimum`: the solver's answer for a problem's runs; :func:`room_taken`: how
  much of the room between the native compiler and that value a run took;
- :func:`mean_std`, :func:`format_mean_std`, :func:`median_range`, :func:`geomean`: mean and
  spread over seeds; :func:`format_share`: a share over seeds as a percentage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import mannwhitneyu

from egrl.aggregate.stats import MeanStd, finite, format_mean_std, mean_std

__all__ = [  # mean and spread are the library's (egrl.aggregate.stats), shared with its tables
    "MeanStd",
    "best_known",
    "compare",
    "finite",
    "first_share",
    "format_mean_std",
    "format_samples",
    "format_share",
    "geomean",
    "mann_whitney",
    "mean_std",
    "median_range",
    "room_taken",
    "samples_to_level",
]

#: absolute slack of a level comparison (a value equal to the level up to rounding reaches it)
LEVEL_SLACK = 1e-12
#: relative tolerance of "reached" in the studies' tables: float noise never hides a level
#: that was reached (``samples_to_level(..., rtol=REACH_TOLERANCE)``)
REACH_TOLERANCE = 1e-9


def samples_to_level(
    iterations: np.ndarray, values: np.ndarray, level: float, rtol: float = 0.0
) -> float:
    """Paid measurements when the step curve ``values`` first reached ``level``.

    Args:
        iterations: int ``[G]``, paid measurements after each generation.
        values: float ``[G]``, the best value so far (NaN: not defined yet).
        level: the level to reach.
        rtol: relative tolerance below ``level`` that still counts as reaching it.

    Returns:
        The iterations of the first generation at or above the level; ``inf`` if never.
    """
    y = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=-np.inf)
    hit = np.flatnonzero(y >= level * (1.0 - rtol) - LEVEL_SLACK)
    return float(np.asarray(iterations)[hit[0]]) if hit.size else math.inf


def format_samples(samples: Sequence[float], spread: bool = True) -> str:
    """Samples to a level over ``S`` runs (``inf``: never) as text.

    ``"1100 [800-1900] (4/5)"``: the median [min-max] over the runs that got there and how
    many did (``spread=False``: ``"1100 (4/5)"``, the median alone); ``"never (0/5)"``.
    """
    a = np.asarray(samples, dtype=np.float64)
    reached = a[np.isfinite(a)]
    counts = f"({reached.size}/{a.size})"
    if reached.size == 0:
        return f"never {counts}"
    center = median_range(reached, "{:.0f}") if spread else f"{np.median(reached):.0f}"
    return f"{center} {counts}"


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U of ``a [S_a]`` against ``b [S_b]``: ``(U of a, p)``.

    ``inf`` (never reached) ranks above every finite value; NaN when either side is empty.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.size == 0 or b.size == 0:
        return math.nan, math.nan
    res = mannwhitneyu(a, b, alternative="two-sided")
    return float(res.statistic), float(res.pvalue)


def first_share(u: float, n_a: int, n_b: int) -> float:
    """Share of (a, b) pairs where ``a`` had the smaller value (ties half), from ``a``'s U."""
    return 1.0 - u / (n_a * n_b) if n_a and n_b else math.nan


def compare(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """:func:`mann_whitney` of samples ``a [S_a]`` against ``b [S_b]`` (``inf``: never, ranked
    last): ``a``'s U, the p-value, and the share of pairs where ``a`` got there first."""
    u, p = mann_whitney(a, b)
    return u, p, first_share(u, len(a), len(b))


def best_known(optimum: float | None, proven: bool, finals: Sequence[float]) -> tuple[float, str]:
    """The value shares of the optimum divide by, and where it comes from.

    Args:
        optimum: the solver's answer (None: no solver answer).
        proven: the solver proved it optimal.
        finals: the runs' final best speedups over the native compiler ``[R]`` (at least
            one).

    Returns:
        ``(value, source)``: the proven ``optimum`` (``"proven"``); else the best known map:
        the higher of a finite unproven ``optimum`` (``"solver"``, ties included), the best
        final (``"run"``, or ``"runs"`` when there is no finite answer) and the native
        compiler's own map, speedup 1 (``"compiler"``: no map found beat it).
    """
    if optimum is not None and proven:
        return float(optimum), "proven"
    best = max(float(v) for v in finals)
    if optimum is not None and math.isfinite(optimum) and optimum >= best:
        best, source = float(optimum), "solver"
    else:
        source = "run" if optimum is not None and math.isfinite(optimum) else "runs"
    return (best, source) if best >= 1.0 else (1.0, "compiler")


def room_taken(finals: Sequence[float], reference: float, base: float = 1.0) -> np.ndarray:
    """float64 ``[R]``: the share of the room between ``base`` (the native compiler's map,
    speedup 1, or the solved prior's) and ``reference`` that each final best speedup took,
    ``(final - base) / (reference - base)``: 1 at the reference, 0 at the base or below it
    (a run below the base took none of the room; how far below is its final's to say, not a
    share of the room, which can be a few percent wide). All NaN when the reference is not
    above the base (no room)."""
    finals = np.asarray(finals, dtype=np.float64)
    if not reference > base:
        return np.full(finals.shape, np.nan)
    return np.maximum(finals - base, 0.0) / (reference - base)


def median_range(values: Sequence[float], fmt: str = "{:.4f}", empty: str = "-") -> str:
    """``"median [min-max]"`` of the finite ``values``; one value alone; ``empty`` when none."""
    a = finite(values)
    if a.size == 0:
        return empty
    if a.size == 1:
        return fmt.format(a[0])
    lo, mid, hi = (fmt.format(v) for v in (a.min(), np.median(a), a.max()))
    return f"{mid} [{lo}-{hi}]"


def format_share(values: Sequence[float], center: str = "mean", empty: str = "-") -> str:
    """``"36%"``: the mean (or ``center="median"``) of the finite shares ``values``."""
    a = finite(values)
    if a.size == 0:
        return empty
    value = np.median(a) if center == "median" else a.mean()
    return f"{100 * value:.0f}%"


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of ``values`` (NaN if any is missing or not positive)."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0 or not np.all(np.isfinite(a)) or np.any(a <= 0):
        return math.nan
    return float(np.exp(np.log(a).mean()))


def solver_optimum(runs: Sequence, cache_dir, time_limit_s: float) -> tuple[float | None, bool]:
    """The solver's optimum speedup of the runs of one problem and whether it is proven
    (``(None, False)`` when it found no map in its time).

    Runs of one problem share one cost model, but their target keys may differ in a
    parameter the optimum ignores: mcm's ``hwmodel.params.seed`` is the run's seed (its
    repair's draws). Each key is solved (or read from ``cache_dir``'s ``optimum.json``)
    and the best proven answer serves, else the best unproven one.
    """
    import logging

    from egrl.aggregate.optimum import optimum_by_target

    try:
        found = optimum_by_target(runs, cache_dir=cache_dir, time_limit_s=time_limit_s)
    except RuntimeError as exc:  # the solver found no map in its time
        logging.getLogger(__name__).warning("no optimum (%s); the best known value instead", exc)
        return None, False
    infos = sorted(found.values(), key=lambda i: (bool(i.proven), i.speedup))
    return (infos[-1].speedup, bool(infos[-1].proven)) if infos else (None, False)
