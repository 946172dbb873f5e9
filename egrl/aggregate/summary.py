"""Final speedups grouped by setting: mean and standard deviation over seeds.

A *group* is one cell of a study: runs that differ in nothing but their seed (and keys
that do not change results: threads, device, progress, checkpoints, the logger...).
Seeds are the samples. :func:`grouping_keys` finds the keys: the hardware model, the
workload and the agent always, then every config key whose value still differs inside a
group, in this order: the keys asked for, the swept keys (the run overrides,
``.hydra/overrides.yaml``, that take more than one value), the target's identity (the
hardware model's parameters, the reward, the workload options), then any other. So runs
of different targets, rewards or workload files are never averaged together, and a
table shows every key in which its groups differ.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from egrl.aggregate.optimum import target_key
from egrl.runs import REFERENCE_AGENTS, RUN_LOCAL_KEYS, Problem, Run, format_value, is_run_local

#: the keys every group has: the hardware model (``hwmodel.name``), the workload
#: (``workload.name``: a zoo name or the file) and the agent (``agent.name``)
BASE_KEYS = ("hwmodel", "workload", "agent")
#: the keys a table always shows (the others only where groups differ in them)
SHOWN_KEYS = ("workload", "agent")
#: config keys (and prefixes) that say what a run was measured on and how it was scored,
#: tried before any other key when groups are split
IDENTITY_KEYS = ("reward", "invalid_reward_scale")
IDENTITY_PREFIXES = ("hwmodel.params.", "workload.")
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


#: the text of a value a run's config does not have
ABSENT = "-"
#: config keys that stand for a base key (``Run.value("hwmodel")`` is ``hwmodel.name``)
_BASE_NAMES = {f"{k}.name" for k in BASE_KEYS}


def _candidate(key: str) -> bool:
    """A config key that may split groups (not the seed, not a key that leaves results
    unchanged, not a base key's own name)."""
    return not (key in _NOT_GROUPING or is_run_local(key) or key in _BASE_NAMES)


def _identity_rank(key: str) -> int:
    if key.startswith(IDENTITY_PREFIXES[0]):
        return 0
    return 1 if key in IDENTITY_KEYS else 2 if key.startswith(IDENTITY_PREFIXES[1:]) else 3


def follows_seed(runs: Sequence[Run], key: str) -> bool:
    """Every run that has ``key`` has its seed there (``hwmodel.params.seed: ${seed}``): a
    part of the sample, not of the setting."""
    values = [(run.value(key), run.seed) for run in runs if run.value(key) != ABSENT]
    return bool(values) and all(v == str(seed) for v, seed in values)


def _splits(runs: Sequence[Run], keys: Sequence[str], key: str) -> bool:
    """Some group of ``keys`` holds runs with two different values of ``key`` (a run
    without the key, made before it existed, splits nothing)."""
    seen: dict[tuple[str, ...], str] = {}
    for run in runs:
        value = run.value(key)
        if value == ABSENT:
            continue
        group = group_key(run, keys)
        if seen.setdefault(group, value) != value:
            return True
    return False


def grouping_keys(runs: Sequence[Run], first: Sequence[str] = ()) -> tuple[str, ...]:
    """The keys that group ``runs`` so that no group mixes runs that differ in anything but
    their seed: :data:`BASE_KEYS`, then ``first`` (kept as asked), then each key that
    still splits a group (a key that holds each run's seed, :func:`follows_seed`, is the
    seed's), tried in order: the swept keys, the target's identity
    (:data:`IDENTITY_PREFIXES`, :data:`IDENTITY_KEYS`), every other config key (sorted).
    """
    keys = list(BASE_KEYS) + [k for k in dict.fromkeys(first) if k not in BASE_KEYS]
    swept = sorted({k for r in runs for k in r.overrides if _candidate(k)})
    rest = sorted(
        {k for r in runs for k in r.config if _candidate(k)}, key=lambda k: (_identity_rank(k), k)
    )
    for key in dict.fromkeys([*swept, *rest]):
        if key not in keys and not follows_seed(runs, key) and _splits(runs, keys, key):
            keys.append(key)
    return tuple(keys)


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
    #: the keys a table shows (workload, agent and the keys whose values differ between
    #: the groups of its summary); None: every key
    shown: tuple[str, ...] | None = None
    #: the hardware target of its runs (:func:`egrl.aggregate.optimum.target_key`): where
    #: its optimum is looked up
    target: str = ""

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
    def shown_keys(self) -> tuple[str, ...]:
        return self.keys if self.shown is None else self.shown

    @property
    def label(self) -> str:
        """The agent and the other shown values but the workload, e.g. ``ea
        population.size=10`` (``sa hwmodel=mcm`` where hardware models differ)."""
        extra = [
            f"{k}={v}"
            for k, v in zip(self.keys, self.values)
            if k in self.shown_keys and k not in SHOWN_KEYS
        ]
        return " ".join([self.get("agent"), *extra])


def summarize(runs: Sequence[Run], keys: Sequence[str] | None = None) -> list[GroupStats]:
    """One :class:`GroupStats` per distinct group of finished runs, in sorted order.

    Args:
        runs: finished runs (see :func:`egrl.runs.collect_runs`).
        keys: grouping keys; default :func:`grouping_keys` of ``runs``.
    """
    keys = tuple(keys) if keys is not None else grouping_keys(runs)
    groups: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(group_key(run, keys), []).append(run)
    shown = shown_keys(keys, list(groups))
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
                shown=shown,
                target=target_key(members[0]),
            )
        )
    return out


def shown_keys(keys: Sequence[str], values: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """:data:`SHOWN_KEYS` and the other ``keys`` whose ``values`` (one tuple per group)
    differ between groups, in ``keys`` order."""
    varying = {k for i, k in enumerate(keys) if len({v[i] for v in values}) > 1}
    return tuple(k for k in keys if k in SHOWN_KEYS or k in varying)


def constant_keys(groups: Sequence[GroupStats]) -> dict[str, str]:
    """The grouping keys every group has the same value of (``hwmodel`` ... ), in order:
    what a table does not show but the summary states."""
    if not groups:
        return {}
    shown = groups[0].shown_keys
    return {
        k: v for k, v in zip(groups[0].keys, groups[0].values) if k not in shown and v != ABSENT
    }


def group_order(setting: dict[str, str]) -> tuple:
    """Sort key: paper workloads, then paper agents in the paper's order, then the rest."""

    def rank(value: str, known: tuple[str, ...]) -> int:
        return known.index(value) if value in known else len(known)

    w, a, hw = setting.get("workload", ""), setting.get("agent", ""), setting.get("hwmodel", "")
    rest = tuple(v for k, v in setting.items() if k not in BASE_KEYS)
    return (rank(w, PAPER_WORKLOADS), w, hw, rank(a, PAPER_AGENTS), a, natural_key(rest))


def natural_key(values: tuple[str, ...]) -> tuple:
    """Numbers sort as numbers (population 10 before 20 before 100)."""

    def one(v: str):
        try:
            return (0, float(v), "")
        except ValueError:
            return (1, 0.0, v)

    return tuple(one(v) for v in values)


#: reason of a grid cell of a sweep with no run directory
MISSING = "missing: no run directory"


def missing_runs(
    runs: Sequence[Run], keys: Sequence[str], known_dirs: Sequence[Run] = (), where: str = ""
) -> list[Problem]:
    """Cells of the full grid (every observed value of every key x every seed) with no run.

    Meant for the runs of one sweep (a Hydra multirun is a full grid); call it once per
    sweep when several are merged. Runs that fill less than half of their grid are no
    sweep (a folder of unrelated runs, say): they give one problem, named ``where``,
    that says so, not one per empty cell.

    ``runs`` are the finished runs, ``known_dirs`` the other runs that have a readable
    config (failed or incomplete ones, already reported), which do not count as missing.
    A cell is named by workload, agent, the keys that take several values, and the seed.
    """
    every = [*runs, *known_dirs]
    if not every:
        return []
    axes = [sorted({r.value(k) for r in every}) for k in keys]
    seeds = sorted({r.seed for r in every})
    present = {(*group_key(r, keys), r.seed) for r in every}
    cells = math.prod(len(a) for a in axes) * len(seeds)
    if 2 * len(present) < cells:
        varying = [k for k, a in zip(keys, axes) if len(a) > 1]
        return [
            Problem(
                where or "<runs>",
                f"not one sweep: its {len(present)} runs fill {len(present)} of the {cells} "
                f"cells of {' x '.join([*varying, 'seed'])}; missing cells not listed",
            )
        ]
    named = [i for i, (k, a) in enumerate(zip(keys, axes)) if k in SHOWN_KEYS or len(a) > 1]
    out = []
    for cell in itertools.product(*axes, seeds):
        if cell not in present:
            parts = [f"{keys[i]}={cell[i]}" for i in named] + [f"seed={cell[-1]}"]
            out.append(Problem(f"<{', '.join(parts)}>", MISSING))
    return out


def split_reference(runs: Sequence[Run]) -> tuple[list[Run], list[Run]]:
    """(competing runs, reference runs such as the ``optimum`` agent)."""
    ref = [r for r in runs if r.agent in REFERENCE_AGENTS]
    return [r for r in runs if r.agent not in REFERENCE_AGENTS], ref


__all__ = [
    "BASE_KEYS",
    "SHOWN_KEYS",
    "GroupStats",
    "constant_keys",
    "format_value",
    "group_key",
    "group_order",
    "grouping_keys",
    "missing_runs",
    "natural_key",
    "shown_keys",
    "split_reference",
    "summarize",
    "swept_keys",
]
