"""Final speedups grouped by setting: mean and standard deviation over seeds.

A *group* is one cell of a study: a workload, an agent and the values of any other
swept keys (``population.size`` ...). Seeds are the samples. The swept keys are the
run overrides (``.hydra/overrides.yaml``) that take more than one value across the runs;
runs without a Hydra record fall back to the config keys that differ between them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from egrl.runs import REFERENCE_AGENTS, RUN_LOCAL_KEYS, Problem, Run, format_value, is_run_local

BASE_KEYS = ("workload", "agent")
#: the EGRL paper's workloads and agents in its order; others follow alphabetically
PAPER_WORKLOADS = ("resnet50", "resnet101", "bert-base")
PAPER_AGENTS = ("egrl", "ea", "greedy-dp", "pg")
#: keys never used to group (the sample index, and keys that do not change results)
_NOT_GROUPING = {"seed", "threads", "device", *RUN_LOCAL_KEYS}


def _groupable(key: str) -> bool:
    top = key.split(".", 1)[0]
    if key in _NOT_GROUPING or is_run_local(key):
        return False
    return top not in BASE_KEYS and top != "hwmodel"


def swept_keys(runs: Sequence[Run]) -> list[str]:
    """Dotted keys besides workload and agent whose value differs between runs (sorted)."""
    with_overrides = [r for r in runs if r.overrides]
    if with_overrides:
        candidates = sorted({k for r in with_overrides for k in r.overrides if _groupable(k)})
    else:
        candidates = sorted({k for r in runs for k in r.config if _groupable(k)})
    return [k for k in candidates if len({r.value(k) for r in runs}) > 1]


def group_key(run: Run, keys: Sequence[str]) -> tuple[str, ...]:
    return tuple(run.value(k) for k in keys)


@dataclass
class GroupStats:
    """Final speedups of one group over its seeds.

    ``std`` is the sample standard deviation (``ddof=1``; NaN for a single seed).
    """

    keys: tuple[str, ...]
    values: tuple[str, ...]
    seeds: tuple[int, ...]
    finals: np.ndarray  # float64 [n]
    wall_s: np.ndarray  # float64 [n]
    budget: int

    @property
    def n(self) -> int:
        return len(self.finals)

    @property
    def mean(self) -> float:
        return float(self.finals.mean())

    @property
    def std(self) -> float:
        return float(self.finals.std(ddof=1)) if self.n > 1 else float("nan")

    @property
    def wall_mean(self) -> float:
        return float(np.nanmean(self.wall_s)) if self.n else float("nan")

    def get(self, key: str) -> str:
        return self.values[self.keys.index(key)]

    @property
    def label(self) -> str:
        """The agent and any extra swept values, e.g. ``ea population.size=10``."""
        extra = [f"{k}={v}" for k, v in zip(self.keys, self.values) if k not in BASE_KEYS]
        return " ".join([self.get("agent"), *extra])


def summarize(runs: Sequence[Run], keys: Sequence[str] | None = None) -> list[GroupStats]:
    """One :class:`GroupStats` per distinct group of finished runs, in sorted order.

    Args:
        runs: finished runs (see :func:`egrl.runs.collect_runs`).
        keys: grouping keys; default ``("workload", "agent") + swept_keys(runs)``.
    """
    keys = tuple(keys) if keys is not None else BASE_KEYS + tuple(swept_keys(runs))
    groups: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(group_key(run, keys), []).append(run)
    out = []
    for values in sorted(groups, key=lambda v: group_order(dict(zip(keys, v)))):
        members = sorted(groups[values], key=lambda r: r.seed)
        out.append(
            GroupStats(
                keys=keys,
                values=values,
                seeds=tuple(r.seed for r in members),
                finals=np.array([r.final_speedup for r in members]),
                wall_s=np.array([r.final_wall_s for r in members]),
                budget=max(r.budget for r in members),
            )
        )
    return out


def group_order(setting: dict[str, str]) -> tuple:
    """Sort key: paper workloads, then paper agents in the paper's order, then the rest."""

    def rank(value: str, known: tuple[str, ...]) -> int:
        return known.index(value) if value in known else len(known)

    w, a = setting.get("workload", ""), setting.get("agent", "")
    rest = tuple(v for k, v in setting.items() if k not in BASE_KEYS)
    return (rank(w, PAPER_WORKLOADS), w, rank(a, PAPER_AGENTS), a, natural_key(rest))


def natural_key(values: tuple[str, ...]) -> tuple:
    """Numbers sort as numbers (population 10 before 20 before 100)."""

    def one(v: str):
        try:
            return (0, float(v), "")
        except ValueError:
            return (1, 0.0, v)

    return tuple(one(v) for v in values)


def missing_runs(
    runs: Sequence[Run], keys: Sequence[str], known_dirs: Sequence[Run] = ()
) -> list[Problem]:
    """Cells of the full grid (every observed value of every key x every seed) with no run.

    Meant for the runs of one sweep (a Hydra multirun is a full grid); call it once per
    sweep when several are merged.

    ``runs`` are the finished runs, ``known_dirs`` the other runs that have a readable
    config (failed or incomplete ones, already reported), which do not count as missing.
    """
    every = [*runs, *known_dirs]
    if not every:
        return []
    axes = [sorted({r.value(k) for r in every}) for k in keys]
    seeds = sorted({r.seed for r in every})
    present = {(*group_key(r, keys), r.seed) for r in every}
    out = []
    for cell in itertools.product(*axes, seeds):
        if cell not in present:
            what = ", ".join(f"{k}={v}" for k, v in zip((*keys, "seed"), cell))
            out.append(Problem(f"<{what}>", "missing: no run directory"))
    return out


def split_reference(runs: Sequence[Run]) -> tuple[list[Run], list[Run]]:
    """(competing runs, reference runs such as the ``optimum`` agent)."""
    ref = [r for r in runs if r.agent in REFERENCE_AGENTS]
    return [r for r in runs if r.agent not in REFERENCE_AGENTS], ref


__all__ = [
    "BASE_KEYS",
    "GroupStats",
    "format_value",
    "group_key",
    "group_order",
    "missing_runs",
    "natural_key",
    "split_reference",
    "summarize",
    "swept_keys",
]
