"""Figure 5 and Table 2 of the multi-chip study as numbers: geomean curves, levels, limits.

For one method and one seed, the *geomean curve* is the geometric mean over the test
graphs of each graph's best improvement over the greedy heuristic (``best_speedup``) after
``x`` paid samples. Every run's curve is a step function of its iterations
(:func:`egrl.aggregate.curves.step_values`), so the geomean curve is one too, changing only
where some run finished a generation: it is read exactly on the union of those points.
Before a graph's first generation (or while its best is 0) nothing is known about it and
the geomean is undefined (NaN). Over seeds: mean and sample standard deviation
(:func:`studies.stats.mean_std`) on the union of the seeds' points, defined where every
seed is.

Table 2: the samples a method needs to reach an improvement level, read off its mean
curve (the paper's definition; :func:`studies.stats.samples_to_level`), and how many seeds
reach it on their own curves; the reduction against a reference method (RL from scratch)
is the reference's samples over the method's. The levels are relative to what the test
graphs allow: the contiguous DP's and the CP-SAT optimum's improvement over greedy
(:func:`limits`, solved once per graph and cached).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from egrl.aggregate.curves import step_values
from egrl.env import make_env
from egrl.runs import Problem, Run
from studies.stats import MeanStd, mean_std, samples_to_level

log = logging.getLogger(__name__)


#: agent of the zero-shot runs; suffix of a method whose GNNs started from the snapshot
ZERO_SHOT = "zero-shot"
FINETUNE = "-finetune"
#: each method's label, in the order of the figure legend and the table
METHOD_LABELS = {
    "random": "Random (solver-repaired)",
    "sa": "SA (solver-repaired)",
    "pg": "RL from scratch (pg)",
    "egrl": "EGRL from scratch",
    ZERO_SHOT: "RL zero-shot (pretrained policy, sampled)",
    "pg" + FINETUNE: "RL fine-tuning (pg)",
    "egrl" + FINETUNE: "EGRL fine-tuning",
}
METHOD_ORDER = tuple(METHOD_LABELS)


# ------------------------------------------------------------------ curves
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


@dataclass
class SeedCurve:
    """One method's geomean curve for one seed: ``y[i]`` after ``x[i]`` paid samples."""

    method: str
    seed: int
    x: np.ndarray
    y: np.ndarray


def seed_curve(method: str, seed: int, runs: Sequence[Run]) -> SeedCurve:
    """The geomean over ``runs`` (one per test graph) of their best-speedup step functions."""
    x = np.unique(np.concatenate([r.iterations for r in runs])).astype(np.int64)
    per_graph = [step_values(r.iterations, r.best_speedup, x) for r in runs]
    stacked = np.stack([np.where(v > 0, v, np.nan) for v in per_graph])
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.exp(np.log(stacked).mean(axis=0))  # NaN wherever a graph is NaN
    return SeedCurve(method, int(seed), x, y)


def seed_curves(runs: Sequence[Run], test: Sequence[str]) -> tuple[list[SeedCurve], list[Problem]]:
    """Every (method, seed) with a finished run on each test graph; one missing some graph
    is left out (a geomean over fewer graphs is not comparable) as a :class:`Problem`."""
    wanted = set(test)
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
            why = f"no finished run on {', '.join(missing)}; left out"
            problems.append(Problem(f"{method} seed {seed}", why))
            continue
        curves.append(seed_curve(method, seed, [by_graph[w] for w in sorted(wanted)]))
    return curves, problems


@dataclass
class MethodCurve:
    """Mean and sample std (0 for one seed) of a method's seed curves, ``[M]`` each."""

    method: str
    x: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    curves: list[SeedCurve]

    @property
    def samples(self) -> int:
        """Paid samples at the end of the curve (the largest over the seeds)."""
        return int(self.x[-1]) if len(self.x) else 0


def method_curves(curves: Sequence[SeedCurve]) -> list[MethodCurve]:
    """One :class:`MethodCurve` per method, in :func:`method_rank` order; mean and std are
    NaN where some seed is not defined yet."""
    by_method: dict[str, list[SeedCurve]] = {}
    for c in curves:
        by_method.setdefault(c.method, []).append(c)
    out = []
    for method in sorted(by_method, key=method_rank):
        members = sorted(by_method[method], key=lambda c: c.seed)
        x = np.unique(np.concatenate([c.x for c in members])).astype(np.int64)
        ys = np.stack([np.where(x >= c.x[0], step_values(c.x, c.y, x), np.nan) for c in members])
        stats = [mean_std(col) if np.all(np.isfinite(col)) else None for col in ys.T]
        mean = np.array([s.mean if s else np.nan for s in stats])
        std = np.array([s.std if s else np.nan for s in stats])
        out.append(MethodCurve(method, x, mean, std, members))
    return out


# ------------------------------------------------------------------ Table 2
@dataclass
class LevelCell:
    """Samples for the mean curve to reach a level (None: never), seeds that reach it on
    their own, and the reduction against the reference (a lower bound when ``bound``)."""

    samples: int | None
    reached: int
    seeds: int
    reduction: float | None = None
    bound: bool = False


@dataclass
class LevelRow:
    method: str
    cells: list[LevelCell]
    final: MeanStd
    samples: int


def first_reach(x: np.ndarray, y: np.ndarray, level: float) -> int | None:
    """Samples when the step curve ``y`` first reaches ``level``; None if never."""
    s = samples_to_level(x, y, level)
    return int(s) if math.isfinite(s) else None


def level_cell(curve: MethodCurve, level: float, ref: MethodCurve | None) -> LevelCell:
    """The cell of ``curve`` at ``level``: reduction ``ref samples / samples``; when the
    reference never gets there, its whole budget over the samples is a lower bound."""
    s = first_reach(curve.x, curve.mean, level)
    reached = sum(first_reach(c.x, c.y, level) is not None for c in curve.curves)
    cell = LevelCell(s, reached, len(curve.curves))
    if s is not None and ref is not None:
        rs = first_reach(ref.x, ref.mean, level)
        cell.reduction, cell.bound = (rs / s, False) if rs is not None else (ref.samples / s, True)
    return cell


def level_table(
    curves: Sequence[MethodCurve], levels: Sequence[float], reference: str
) -> list[LevelRow]:
    """Table 2: per method and level, samples to reach it and the reduction against ``reference``."""
    ref = next((c for c in curves if c.method == reference), None)
    rows = []
    for c in curves:
        n = len(c.curves)
        last = (
            (float(c.mean[-1]), float(c.std[-1]) if n > 1 else math.nan)
            if len(c.x)
            else (math.nan,) * 2
        )
        cells = [level_cell(c, level, ref) for level in levels]
        rows.append(LevelRow(c.method, cells, MeanStd(*last, n), c.samples))
    return rows


def default_levels(dp: float, optimum: float) -> list[tuple[str, float]]:
    """Half and 90% of the way from the heuristic (1.0) to the optimum's geomean, the DP's
    and the optimum's: named, rounded to 4 decimals, duplicates dropped, ascending."""
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


# ------------------------------------------------------------------ limits
def limit_key(workload: str, hw_params: dict, time_limit_s: float) -> str:
    return f"{workload}?{json.dumps(hw_params, sort_keys=True)}&t={time_limit_s:g}"


def measure_limits(workload: str, hw_params: dict, time_limit_s: float, workers: int) -> dict:
    """Greedy, contiguous DP and CP-SAT optimum latencies of ``workload`` and the DP's and
    the optimum's throughput ratios over greedy, with the solver's status and bound."""
    params = {k: v for k, v in hw_params.items() if k != "native"}
    greedy = make_env("mcm", workload, native="greedy", **params)
    dp = make_env("mcm", workload, native="contiguous-dp", **params)
    opt = greedy.optimum(time_limit_s=time_limit_s, workers=workers)
    g = greedy.baseline_latency_s
    return {
        "workload": workload,
        "nodes": greedy.num_units,
        "greedy_s": g,
        "dp_s": dp.baseline_latency_s,
        "optimum_s": opt.latency_s,
        "dp": g / dp.baseline_latency_s,
        "optimum": g / opt.latency_s,
        "bound": g / opt.bound_s if opt.bound_s > 0 else float("inf"),
        "proven": bool(opt.proven),
        "status": str(opt.status),
        "solve_wall_s": float(opt.wall_s),
        "time_limit_s": float(time_limit_s),
    }


def limits(
    test: Sequence[str], cache: Path, hw_params: dict, time_limit_s: float, workers: int
) -> dict[str, dict]:
    """``{graph: measure_limits(...)}``, read from the JSON ``cache`` or solved and added."""
    stored = json.loads(cache.read_text(encoding="utf-8")) if cache.exists() else {}
    out = {}
    for w in test:
        key = limit_key(w, hw_params, time_limit_s)
        if key not in stored or "bound" not in stored[key]:
            log.info("solving the optimum of %s (limit %g s)", w, time_limit_s)
            stored[key] = measure_limits(w, hw_params, time_limit_s, workers)
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(stored, indent=1, sort_keys=True), encoding="utf-8")
        out[w] = stored[key]
    return out
