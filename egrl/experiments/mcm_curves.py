"""Figure 5 and Table 2 of the multi-chip paper, as numbers: geomean curves over test graphs.

For one method and one seed, the *geomean curve* is the geometric mean over the test
graphs of each graph's best throughput improvement over the greedy heuristic
(``best_speedup`` of ``metrics.csv``) after ``x`` paid samples. Every run's curve is a
step function of its iterations (:func:`egrl.experiments.curves.step_values`), so the
geomean curve is a step function too, changing only where some run finished a
generation: it is evaluated exactly on the union of those points. Before a graph's first
generation (or while its best is 0) nothing is known about it and the geomean is
undefined (NaN). Over seeds: mean and sample standard deviation on the union of the seeds'
points, defined where every seed is.

Table 2: the samples a method needs to reach an improvement level, read off its mean
curve (the paper's definition), and how many seeds reach it on their own curves; the
reduction against a reference method (RL from scratch) is the reference's samples over
the method's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from egrl.experiments.runs import Problem, Run

log = logging.getLogger(__name__)

#: agent name of the zero-shot sampling runs (:mod:`egrl.experiments.mcm_zero_shot`)
ZERO_SHOT = "zero-shot"
#: suffix of a method whose GNNs started from a pretrained policy (``init_from``)
FINETUNE = "-finetune"
#: methods in the order of the figure legend and the table
METHOD_ORDER = (
    "random",
    "sa",
    "pg",
    "egrl",
    ZERO_SHOT,
    "pg" + FINETUNE,
    "egrl" + FINETUNE,
)
METHOD_LABELS = {
    "random": "Random (solver-repaired)",
    "sa": "SA (solver-repaired)",
    "pg": "RL from scratch (pg)",
    "egrl": "EGRL from scratch",
    ZERO_SHOT: "RL zero-shot (pretrained policy, sampled)",
    "pg" + FINETUNE: "RL fine-tuning (pg)",
    "egrl" + FINETUNE: "EGRL fine-tuning",
}


def method_of(run: Run) -> str:
    """The study's method of a run: its agent, with ``-finetune`` if it had ``init_from``."""
    if run.agent == ZERO_SHOT:
        return ZERO_SHOT
    init = run.config.get("init_from")
    return run.agent + (FINETUNE if init not in (None, "", "None", "null") else "")


def method_label(method: str) -> str:
    return METHOD_LABELS.get(method, method)


def method_rank(method: str) -> tuple[int, str]:
    """Sort key: :data:`METHOD_ORDER`, unknown methods after, by name."""
    return (METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)


def geomean(values: Sequence[float] | np.ndarray) -> float:
    """Geometric mean of positive values; NaN if empty or any value is not positive/NaN."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0 or np.any(~np.isfinite(v)) or np.any(v <= 0):
        return math.nan
    return float(np.exp(np.log(v).mean()))


def step_nan(x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Step function ``y`` at points ``x`` read on ``grid``; NaN before ``x[0]``."""
    idx = np.searchsorted(np.asarray(x), grid, side="right") - 1
    y = np.asarray(y, dtype=np.float64)
    return np.where(idx >= 0, y[np.maximum(idx, 0)] if len(y) else np.nan, np.nan)


@dataclass
class SeedCurve:
    """One method's geomean curve for one seed: ``y[i]`` after ``x[i]`` paid samples."""

    method: str
    seed: int
    x: np.ndarray
    y: np.ndarray
    workloads: tuple[str, ...]


def seed_curve(method: str, seed: int, runs: Sequence[Run]) -> SeedCurve:
    """The geomean over ``runs`` (one per test graph) of their best-speedup step functions."""
    x = np.unique(np.concatenate([r.iterations for r in runs])).astype(np.int64)
    per_graph = []
    for r in runs:
        values = step_nan(r.iterations, r.best_speedup, x)
        per_graph.append(np.where(values > 0, values, np.nan))
    stacked = np.stack(per_graph)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.exp(np.log(stacked).mean(axis=0))  # NaN wherever a graph is NaN
    return SeedCurve(method, int(seed), x, y, tuple(sorted(r.workload for r in runs)))


def seed_curves(
    runs: Sequence[Run], workloads: Sequence[str]
) -> tuple[list[SeedCurve], list[Problem]]:
    """Every (method, seed) with a finished run on each of ``workloads``.

    A (method, seed) missing some graph is left out (a geomean over fewer graphs is not
    comparable) and reported as a :class:`Problem`; runs on other workloads are ignored.
    """
    wanted = set(workloads)
    cells: dict[tuple[str, int], dict[str, Run]] = {}
    for run in runs:
        if run.workload in wanted:
            cells.setdefault((method_of(run), run.seed), {})[run.workload] = run
    curves: list[SeedCurve] = []
    problems: list[Problem] = []
    for (method, seed), by_graph in sorted(
        cells.items(), key=lambda kv: (method_rank(kv[0][0]), kv[0][1])
    ):
        missing = sorted(wanted - set(by_graph))
        if missing:
            problems.append(
                Problem(
                    f"{method} seed {seed}", f"no finished run on {', '.join(missing)}; left out"
                )
            )
            continue
        curves.append(seed_curve(method, seed, [by_graph[w] for w in sorted(wanted)]))
    return curves, problems


@dataclass
class MethodCurve:
    """Mean and sample std (``ddof=1``; 0 for one seed) of a method's seed curves."""

    method: str
    x: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    seeds: tuple[int, ...]
    curves: list[SeedCurve] = field(default_factory=list, repr=False)

    @property
    def final_mean(self) -> float:
        return float(self.mean[-1]) if len(self.mean) else math.nan

    @property
    def final_std(self) -> float:
        return float(self.std[-1]) if len(self.std) else math.nan

    @property
    def samples(self) -> int:
        """Paid samples at the end of the curve (the largest over the seeds)."""
        return int(self.x[-1]) if len(self.x) else 0


def method_curves(curves: Sequence[SeedCurve]) -> list[MethodCurve]:
    """One :class:`MethodCurve` per method, in :func:`method_rank` order."""
    by_method: dict[str, list[SeedCurve]] = {}
    for c in curves:
        by_method.setdefault(c.method, []).append(c)
    out = []
    for method in sorted(by_method, key=method_rank):
        members = sorted(by_method[method], key=lambda c: c.seed)
        x = np.unique(np.concatenate([c.x for c in members])).astype(np.int64)
        ys = np.stack([step_nan(c.x, c.y, x) for c in members])
        defined = np.all(np.isfinite(ys), axis=0)
        mean = np.where(defined, ys.mean(axis=0), np.nan)
        std = ys.std(axis=0, ddof=1) if len(members) > 1 else np.zeros(len(x))
        std = np.where(defined, std, np.nan)
        out.append(MethodCurve(method, x, mean, std, tuple(c.seed for c in members), members))
    return out


def samples_to_level(x: np.ndarray, y: np.ndarray, level: float) -> int | None:
    """The first ``x`` where the step curve ``y`` is at least ``level``; None if never."""
    hit = np.flatnonzero(np.nan_to_num(np.asarray(y, dtype=np.float64), nan=-np.inf) >= level)
    return int(x[hit[0]]) if len(hit) else None


@dataclass
class LevelCell:
    """Table 2 cell: samples to reach a level on the mean curve, and seeds that reach it."""

    samples: int | None
    reached: int
    seeds: int
    reduction: float | None = None  # reference samples / these samples
    reduction_bound: bool = False  # the reference never reached it: reduction is a lower bound


@dataclass
class LevelRow:
    method: str
    cells: list[LevelCell]
    final_mean: float
    final_std: float
    samples: int
    seeds: int


def level_table(
    curves: Sequence[MethodCurve], levels: Sequence[float], reference: str | None = "pg"
) -> list[LevelRow]:
    """Table 2: per method and level, samples to reach it and the reduction against ``reference``.

    The reduction is ``reference samples / method samples``. When the reference never
    reaches a level and the method does, the reference needs more than its whole budget:
    the reduction is at least ``reference budget / method samples`` (``reduction_bound``).
    """
    ref = next((c for c in curves if c.method == reference), None)
    ref_samples = [samples_to_level(ref.x, ref.mean, lv) if ref else None for lv in levels]
    rows = []
    for curve in curves:
        cells = []
        for level, rs in zip(levels, ref_samples):
            s = samples_to_level(curve.x, curve.mean, level)
            reached = sum(samples_to_level(c.x, c.y, level) is not None for c in curve.curves)
            cell = LevelCell(s, reached, len(curve.curves))
            if s is not None and ref is not None:
                if rs is not None:
                    cell.reduction = rs / s
                else:
                    cell.reduction, cell.reduction_bound = ref.samples / s, True
            cells.append(cell)
        rows.append(
            LevelRow(
                curve.method,
                cells,
                curve.final_mean,
                curve.final_std,
                curve.samples,
                len(curve.curves),
            )
        )
    return rows


def default_levels(dp: float, optimum: float) -> list[tuple[str, float]]:
    """Improvement levels relative to what is reachable, named.

    ``dp`` and ``optimum``: geomean improvements over greedy of the contiguous DP and of the
    CP-SAT optimum. Levels: half and 90% of the way from the heuristic (1.0) to the
    optimum, the DP, and the optimum itself (rounded to 4 decimals, duplicates dropped).
    """
    room = optimum - 1.0
    named = [
        ("50% of optimum's room", 1.0 + 0.5 * room),
        ("90% of optimum's room", 1.0 + 0.9 * room),
        ("contiguous DP", dp),
        ("optimum", optimum),
    ]
    out: list[tuple[str, float]] = []
    for name, value in sorted(named, key=lambda nv: nv[1]):
        value = round(float(value), 4)
        if math.isfinite(value) and all(abs(value - v) > 1e-9 for _, v in out):
            out.append((name, value))
    return out


def limit_geomeans(limits: Mapping[str, Mapping[str, float]], workloads: Sequence[str]) -> dict:
    """Geomean over ``workloads`` of each limit's improvement over greedy (``dp``, ``optimum``)."""
    keys = ("dp", "optimum")
    return {k: geomean([limits[w][k] for w in workloads]) for k in keys}
