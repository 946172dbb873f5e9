"""Hand-made run directories for the studies' tests: what egrl-train writes, through
:class:`egrl.rundir.RunDir`, for a curve given point by point."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from egrl.aggregate.optimum import CACHE_FILE
from egrl.rundir import RunDir

COLUMNS = ("generation", "iterations", "proposals", "wall_s", "best_speedup")


def write_run(
    path: Path,
    agent: str,
    workload: str,
    seed: int,
    curve: Sequence[tuple[int, float]],
    budget: int = 100,
    start: str | None = "initial",
    init_from: str | None = None,
    proposals: float = 1.25,
    stopped_early: str | None = None,
    descent: Sequence[str] | None = None,
    wall_s: Sequence[float] | None = None,
    columns: Mapping[str, Sequence] | None = None,
) -> Path:
    """A run directory on NNP-I.

    Args:
        curve: (paid samples, best speedup) per generation.
        start: the config's ``agent.start`` (None: none).
        proposals: proposals per paid sample (the ``proposals`` column).
        stopped_early: the best map's ``stopped_early`` (None: ran its budget).
        descent: the ``champion_descent`` column, one label per generation.
        wall_s: the ``wall_s`` column, one value per generation (None: the generation's
            number).
        columns: more columns (``t_learner``, ``gradient_steps``, ...), one value per
            generation each.
    """
    path.mkdir(parents=True)
    files = RunDir(path)
    agent_cfg = {"name": agent} if start is None else {"name": agent, "start": start}
    files.write_config(
        {
            "seed": seed,
            "budget": budget,
            "agent": agent_cfg,
            "workload": {"name": workload},
            "hwmodel": {"name": "nnpi", "params": {}},
            "init_from": init_from,
        }
    )
    extra = dict(columns or {})
    names = COLUMNS if descent is None else (*COLUMNS, "champion_descent")
    names = (*names, *extra)
    for g, (it, sp) in enumerate(curve, 1):
        wall = g if wall_s is None else wall_s[g - 1]
        row = dict(zip(COLUMNS, (g, it, int(it * proposals), wall, sp)))
        if descent is not None:
            row["champion_descent"] = descent[g - 1]
        row |= {name: values[g - 1] for name, values in extra.items()}
        files.append_metrics(names, row)
    files.write_best_map({"speedup": curve[-1][1], "stopped_early": stopped_early})
    return path


def write_optimum(
    root: Path, workload: str, speedup: float, proven: bool, hwmodel: str = "nnpi"
) -> Path:
    """``root/optimum.json`` holding the optimum of ``workload`` on ``hwmodel``."""
    entry = {"workload": workload, "hwmodel": hwmodel, "params": {}, "speedup": speedup}
    entry |= {"proven": proven, "gap": 0.0 if proven else 0.05, "source": "test"}
    path = root / CACHE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({f"{hwmodel}/{workload}": entry}), encoding="utf-8")
    return path
