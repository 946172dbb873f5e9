"""Best-speedup-vs-iterations curves: the long-format table and the common iteration grid.

A run's curve is a step function: after ``iterations[g]`` evaluations the best speedup
is ``best_speedup[g]`` until the next generation improves it; before its first
generation a run has found nothing (speedup 0, the paper's value of "no valid map").
Curves of different runs (different generation sizes) are compared on a common grid by
reading that step function, never by drawing lines between generations.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from egrl.runs import Run

CURVE_COLUMNS = ("agent", "workload", "seed", "iterations", "best_speedup", "wall_s")


def step_values(iterations: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """A step function sampled on ``grid``.

    Args:
        iterations: int ``[G]``, increasing: where the function takes ``values [G]``.
        grid: ``[M]`` points.

    Returns:
        float64 ``[M]``: ``values[g]`` for the last ``g`` with ``iterations[g] <= x``, 0 before
        the first.
    """
    idx = np.searchsorted(iterations, grid, side="right") - 1
    out = np.where(idx >= 0, np.asarray(values, dtype=np.float64)[np.maximum(idx, 0)], 0.0)
    return out


def common_grid(runs: Sequence[Run], points: int = 200) -> np.ndarray:
    """int64 ``[<=points]``: from the earliest first generation to the largest budget."""
    start = min(int(r.iterations[0]) for r in runs)
    stop = max(int(r.iterations[-1]) for r in runs)
    return np.unique(np.linspace(start, stop, points).round().astype(np.int64))


def mean_band(runs: Sequence[Run], grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample standard deviation (``ddof=1``; 0 for one run) over runs, ``[M]`` each."""
    curves = np.stack([step_values(r.iterations, r.best_speedup, grid) for r in runs])
    std = curves.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(len(grid))
    return curves.mean(axis=0), std


def write_curves(runs: Sequence[Run], path: str | Path, extra_keys: Sequence[str] = ()) -> Path:
    """Every run's curve in long format: one row per (run, generation).

    Columns: :data:`CURVE_COLUMNS`, then ``extra_keys`` (swept settings), ``complete`` and
    ``run`` (the run directory).
    """
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*CURVE_COLUMNS, *extra_keys, "complete", "run"])
        for run in sorted(runs, key=lambda r: (r.workload, r.agent, r.seed, str(r.path))):
            extra = [run.value(k) for k in extra_keys]
            for it, sp, wall in zip(run.iterations, run.best_speedup, run.wall_s):
                writer.writerow(
                    [
                        run.agent,
                        run.workload,
                        run.seed,
                        int(it),
                        repr(float(sp)),
                        f"{wall:.3f}",
                        *extra,
                        int(run.complete),
                        str(run.path),
                    ]
                )
    return path
