"""Reading run directories for aggregation: each run's ``config.yaml`` and ``metrics.csv``.

A run directory is any directory holding a ``config.yaml``, a ``metrics.csv`` or a
``.hydra/`` record (what ``egrl-train`` writes, alone or as one job of a multirun). A
directory that cannot be read as a finished run (no config, no metrics, a half-written
file, fewer iterations than its budget) is not an error: it becomes a :class:`Problem`
that names it and says why, and the rest is aggregated. The files are read through
:mod:`egrl.rundir`.
"""

from __future__ import annotations

import csv
import logging
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from egrl.rundir import CONFIG_FILE, METRICS_FILE, SUBDIRS, RunDir, is_run_dir

log = logging.getLogger(__name__)

#: agents that give a reference rather than compete (one solve: finished with one row)
REFERENCE_AGENTS = ("optimum",)


@dataclass
class Problem:
    """A run directory that was left out of the aggregate, and why."""

    path: Path | str  # a directory, or a description of a grid cell with no directory
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class Run:
    """One run: who ran what, and its best-speedup curve.

    Attributes:
        path: the run directory.
        agent, workload, hwmodel, seed, budget: from ``config.yaml``.
        config: ``config.yaml`` flattened to dotted keys (``population.size`` ...).
        overrides: the command-line / sweep overrides of the run (``.hydra/overrides.yaml``),
            dotted key -> value string, without ``+``/``~`` prefixes; empty if unknown.
        iterations: int64 ``[G]``: hardware evaluations so far after each generation.
        best_speedup: float64 ``[G]``: best valid speedup over the compiler so far.
        wall_s: float64 ``[G]``: wall seconds so far.
        last_row: the last metrics row as strings (agent-specific columns included).
    """

    path: Path
    agent: str
    workload: str
    hwmodel: str
    seed: int
    budget: int
    config: dict
    overrides: dict[str, str]
    iterations: np.ndarray
    best_speedup: np.ndarray
    wall_s: np.ndarray
    last_row: dict = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """The run spent its whole budget, down to less than one map's board runs, or
        confirmed its best (a reference agent: it recorded its answer)."""
        if len(self.iterations) == 0:
            return False
        readings = int(self.config.get("hwmodel.params.repeats") or 1)
        left = self.budget - int(self.iterations[-1])
        return self.agent in REFERENCE_AGENTS or left < readings or self.confirmed

    @property
    def confirmed(self) -> bool:
        """The run read its best again (a noisy target's last step, which may leave a few
        board runs of the budget unspent: whole rounds only)."""
        value = self.last_row.get("confirmed_speedup", "")
        return value not in ("", "nan")

    @property
    def final_speedup(self) -> float:
        return float(self.best_speedup[-1]) if len(self.best_speedup) else float("nan")

    @property
    def final_wall_s(self) -> float:
        return float(self.wall_s[-1]) if len(self.wall_s) else float("nan")

    def value(self, key: str) -> str:
        """The run's value of a dotted config key, as text (overrides first, then config)."""
        if key == "agent":
            return self.agent
        if key == "workload":
            return self.workload
        if key == "hwmodel":
            return self.hwmodel
        if key in self.config:
            return format_value(self.config[key])
        return self.overrides.get(key, "-")


def format_value(value) -> str:
    """Config values as the table and the group labels show them."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def flatten(tree: dict, prefix: str = "") -> dict:
    """Nested mapping -> ``{"a.b.c": leaf}``."""
    out: dict = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def read_overrides(run_dir: Path) -> dict[str, str]:
    """``.hydra/overrides.yaml`` as ``{dotted key: value}`` (``+``, ``++``, ``~`` stripped)."""
    out: dict[str, str] = {}
    for item in RunDir(run_dir).read_overrides():
        key, sep, value = item.partition("=")
        if not sep:
            continue
        key = key.lstrip("+~").strip()
        if key.startswith("hydra.") or key in ("hydra", "experiment"):
            continue
        out[key] = value.strip()
    return out


def _parse_float(text: str | None) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def read_metrics(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """``iterations [G]``, ``best_speedup [G]``, ``wall_s [G]`` and the last row of a metrics.csv.

    A row that cannot be parsed (e.g. cut short by a killed process) ends the curve.
    """
    its: list[int] = []
    speed: list[float] = []
    wall: list[float] = []
    last: dict = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {"iterations", "best_speedup"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: no column {sorted(missing)}")
        for row in reader:
            it = _parse_float(row.get("iterations"))
            sp = _parse_float(row.get("best_speedup"))
            if math.isnan(it) or math.isnan(sp) or None in row.values():
                log.warning("%s: unreadable row %d; the curve stops there", path, len(its) + 1)
                break
            its.append(int(it))
            speed.append(sp)
            wall.append(_parse_float(row.get("wall_s")))
            last = row
    return (
        np.asarray(its, dtype=np.int64),
        np.asarray(speed, dtype=np.float64),
        np.asarray(wall, dtype=np.float64),
        last,
    )


def load_config(run_dir: str | Path) -> Run:
    """A run with its ``config.yaml`` read and an empty curve; ``ValueError`` if unreadable."""
    files = RunDir(run_dir)
    run_dir = files.path
    if not files.config.exists():
        raise ValueError(f"no {CONFIG_FILE} (the run never started)")
    try:
        cfg = files.read_config()
        agent = str(cfg["agent"]["name"])
        workload = str(cfg["workload"]["name"])
        seed = int(cfg["seed"])
        budget = int(cfg["budget"])
    except yaml.YAMLError as err:
        raise ValueError(f"unreadable {CONFIG_FILE}: {err}") from err
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"{CONFIG_FILE} lacks agent.name/workload.name/seed/budget ({err})"
        ) from err
    empty = np.zeros(0)
    return Run(
        path=run_dir,
        agent=agent,
        workload=workload,
        hwmodel=str((cfg.get("hwmodel") or {}).get("name", "?")),
        seed=seed,
        budget=budget,
        config=flatten(cfg),
        overrides=read_overrides(run_dir),
        iterations=empty.astype(np.int64),
        best_speedup=empty,
        wall_s=empty,
    )


def load_run(run_dir: str | Path) -> Run:
    """Read one run directory; raises ``ValueError`` saying what is wrong if it cannot."""
    run = load_config(run_dir)
    metrics = RunDir(run.path).metrics
    if not metrics.exists():
        raise ValueError(f"no {METRICS_FILE} (the run failed or stopped before one generation)")
    run.iterations, run.best_speedup, run.wall_s, run.last_row = read_metrics(metrics)
    if len(run.iterations) == 0:
        raise ValueError(f"{METRICS_FILE} has no complete row")
    return run


def run_dirs(roots: Iterable[str | Path]) -> list[Path]:
    """Every run directory under ``roots`` (a root may itself be one), sorted."""
    found: list[Path] = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(f"no directory {root}")
        for dirpath, dirnames, _ in os.walk(root):
            here = Path(dirpath)
            if is_run_dir(here):
                found.append(here)
                dirnames.clear()
            else:
                dirnames[:] = [d for d in dirnames if d not in SUBDIRS]
    return sorted(set(found))


@dataclass
class RunSet:
    """Runs that could be read and finished (``runs``), and the directories left out.

    ``incomplete`` are readable runs short of their budget, ``failed`` the runs with a
    readable config but no curve; both are also in ``problems``.
    """

    runs: list[Run]
    problems: list[Problem]
    incomplete: list[Run] = field(default_factory=list)
    failed: list[Run] = field(default_factory=list)


def collect_runs(roots: Iterable[str | Path]) -> RunSet:
    """Read every run under ``roots``; unreadable, failed and unfinished runs become problems.

    Two finished runs with the same settings and seed keep the newer one (by the
    modification time of its metrics.csv); the other is listed as a problem.
    """
    runs: list[Run] = []
    problems: list[Problem] = []
    incomplete: list[Run] = []
    failed: list[Run] = []
    for path in run_dirs(roots):
        try:
            run = load_run(path)
        except (OSError, ValueError) as err:
            problems.append(Problem(path, str(err)))
            try:
                failed.append(load_config(path))
            except (OSError, ValueError):
                pass
            continue
        if run.complete:
            runs.append(run)
        else:
            incomplete.append(run)
            problems.append(
                Problem(path, f"incomplete: {int(run.iterations[-1])} of {run.budget} iterations")
            )
    runs, dup = _drop_duplicates(runs)
    return RunSet(runs, problems + dup, incomplete, failed)


def _identity(run: Run) -> tuple:
    settings = {k: v for k, v in run.config.items() if not is_run_local(k)}
    return tuple(sorted((k, format_value(v)) for k, v in settings.items()))


#: config keys that do not change what a run computes
RUN_LOCAL_KEYS = frozenset(
    {
        "resume",
        "continue_runs",
        "progress",
        "checkpoint_every",
        "keep_checkpoints",
        "snapshot_every",
        "record_evaluations",
    }
)
#: config groups whose keys do not change what a run computes (``logger.*``: what
#: records it)
RUN_LOCAL_GROUPS = frozenset({"logger"})


def is_run_local(key: str) -> bool:
    """A dotted config key that does not change what a run computes."""
    return key in RUN_LOCAL_KEYS or key.split(".", 1)[0] in RUN_LOCAL_GROUPS


def _drop_duplicates(runs: list[Run]) -> tuple[list[Run], list[Problem]]:
    newest: dict[tuple, Run] = {}
    problems: list[Problem] = []
    for run in sorted(runs, key=lambda r: RunDir(r.path).metrics.stat().st_mtime):
        key = _identity(run)
        if key in newest:
            old = newest[key]
            problems.append(Problem(old.path, f"duplicate of the newer run {run.path}; left out"))
        newest[key] = run
    kept = set(id(r) for r in newest.values())
    return [r for r in runs if id(r) in kept], problems


__all__ = [
    "REFERENCE_AGENTS",
    "RUN_LOCAL_GROUPS",
    "RUN_LOCAL_KEYS",
    "Problem",
    "Run",
    "RunSet",
    "collect_runs",
    "flatten",
    "format_value",
    "is_run_dir",
    "is_run_local",
    "load_config",
    "load_run",
    "read_metrics",
    "read_overrides",
    "run_dirs",
]
