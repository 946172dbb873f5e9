"""Physics first: the chip's datasheet, solved and paid first, then calibrated to every
reading, corrected by a residual and solved again in a trust region (``agent=mbo`` where
the chip has ``hwmodel.params.prior``), against the searchers.

The plan (``configs/study/physics.yaml``) has the prior study's shape
(:func:`studies.agent_runs.plan_by_agent`): every problem's prior solved and its map read
once first (``OUT/<problem>/prior.json``, :mod:`studies.prior_map`), then agent by agent
(the plan's order: physics first) every problem x seed at one ``budget``, in
``OUT/<problem>/<agent>/seed<S>``; the runs get the prior as ``hwmodel.params.prior`` and
record every map they were answered (``record_evaluations=true``).

Each run is read at exact board runs (:func:`board_curve`: its ``evaluations.csv``, else
its ``metrics.csv``, one point a round): the best speedup among its first ``k`` board runs
for each ``k`` of ``reads`` (:func:`read_at`), the board runs to ``level`` of the best known
map (the best of every run, the prior's map and the compiler's) and to the prior's map.
Per problem, the pairs of ``tests`` are held against each other (two-sided Mann-Whitney U
on the reads at the budget and on the samples to the level; never reached ranks last), and
the agents with a physics model give its seconds (``t_fit`` + ``t_solve`` of their last
round) per round and per paid map. The targets (``targets``) are read from those figures.
A problem whose runs are not all there is reported from what exists, and the section says
what is missing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from egrl.rundir import RunDir
from egrl.runs import Run
from studies import agent_runs, cells, prior_map
from studies.agent_runs import PriorResult
from studies.cells import test_text
from studies.prior_map import PriorReading, prior_line
from studies.render import left_out, markdown_table, reproduce
from studies.runner import CommandSpec, Page, RunSpec, StudyError, script_label
from studies.stats import (
    REACH_TOLERANCE,
    compare,
    format_mean_std,
    format_samples,
    mean_std,
    median_range,
    samples_to_level,
)

SECTION = "physics"
#: every run records every map it was answered: the reads at exact board runs
RECORD = ("record_evaluations=true",)
#: the metrics columns of the physics model's cumulative seconds (calibration and
#: residual; the solves)
MODEL_COLUMNS = ("t_fit", "t_solve")
#: reads level to the section's 4 decimals count as equal
DECIMALS = 4
ROLES = ("physics", "ea", "mbo")


# ------------------------------------------------------------------ plan
def reads_of(cfg: DictConfig) -> list[int]:
    """The board runs each run is read at (``reads``) within the budget, the budget last."""
    budget = int(cfg.budget)
    ks = sorted({int(k) for k in cfg.get("reads") or [] if 1 <= int(k) <= budget} | {budget})
    return ks


def pairs(cfg: DictConfig) -> list[tuple[str, str]]:
    """``(agent, against)``: the plan's ``tests``."""
    return [(str(a), str(b)) for a, b in cfg.get("tests") or []]


def role(cfg: DictConfig, name: str) -> str:
    """The agent that plays ``name`` (``physics``, ``ea``, ``mbo``) in the targets."""
    return str((cfg.get("roles") or {}).get(name, name))


def check(cfg: DictConfig) -> None:
    """The peers study's checks, and: every problem has a prior to read; every agent of
    ``tests`` and ``roles`` is an agent of the plan (a role may be missing: its target
    is then not measured); ``reads`` are board runs."""
    agent_runs.check(cfg)
    prior_map.check_priors(cfg)
    agent_runs.check_pairs(cfg, "tests", "[AGENT, AGAINST]", cfg.agent_overrides)
    bad = [k for k in cfg.get("reads") or [] if int(k) < 1]
    if bad:
        raise StudyError(f"{cfg.study}: reads has {bad[0]}: expected board runs >= 1")


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec | CommandSpec]]:
    """One stage: every problem's prior read, then agent by agent (the plan's order) every
    problem x seed, each recording its evaluations."""
    check(cfg)
    yield from agent_runs.plan_by_agent(cfg, out, RECORD)


# ------------------------------------------------------------------ reads
@dataclass(frozen=True)
class Curve:
    """A run's best speedup so far against board runs.

    Attributes:
        iterations: int64 ``[M]``: board runs once each point was answered (non-decreasing).
        best: float64 ``[M]``: the best valid speedup so far (NaN: no valid map yet).
        exact: read map by map from ``evaluations.csv`` (else one point a round from
            ``metrics.csv``).
        paid: the maps paid (``evaluations.csv``'s paid ones, else the board runs).
    """

    iterations: np.ndarray
    best: np.ndarray
    exact: bool
    paid: int


def evaluations_curve(rec: dict[str, np.ndarray]) -> Curve:
    """The curve of a run's record (:meth:`egrl.rundir.RunDir.read_evaluations`): the best
    valid speedup over every map answered so far, map by map."""
    speedup = np.where(rec["valid"] > 0, rec["speedup"], -np.inf)
    best = np.maximum.accumulate(speedup) if len(speedup) else speedup
    best = np.where(np.isfinite(best), best, np.nan)
    iterations = rec["iterations"].astype(np.int64)
    return Curve(iterations, best.astype(np.float64), True, int((rec["paid"] > 0).sum()))


def board_curve(run: Run) -> Curve:
    """The run's curve from its ``evaluations.csv``, else (absent or empty) from its
    ``metrics.csv`` (one point a round)."""
    files = RunDir(run.path)
    if files.evaluations.exists():
        rec = files.read_evaluations()
        if len(rec.get("iterations", ())):
            return evaluations_curve(rec)
    iterations = np.asarray(run.iterations, np.int64)
    best = np.asarray(run.best_speedup, np.float64)
    return Curve(iterations, best, False, int(iterations[-1]) if len(iterations) else 0)


def read_at(curve: Curve, k: int) -> float:
    """The best speedup among the first ``k`` board runs (NaN: no valid map by then)."""
    seen = np.flatnonzero(curve.iterations <= k)
    return float(curve.best[seen[-1]]) if len(seen) else math.nan


def samples_to(curve: Curve, value: float) -> float:
    """Board runs until the curve first reached ``value`` (inf: never)."""
    return samples_to_level(curve.iterations, curve.best, value, rtol=REACH_TOLERANCE)


def model_seconds(run: Run, curve: Curve) -> tuple[float, float]:
    """The physics model's seconds (``t_fit`` + ``t_solve`` of the last round) per round and
    per paid map (``curve.paid``); NaN for a run without a physics model."""
    row = run.last_row
    if any(row.get(c) in (None, "", "nan") for c in MODEL_COLUMNS):
        return math.nan, math.nan
    total = sum(float(row[c]) for c in MODEL_COLUMNS)
    rounds, paid = len(run.iterations), curve.paid
    return total / max(rounds, 1), total / max(paid, 1)


# ------------------------------------------------------------------ analysis
@dataclass
class AgentReads:
    """One agent on one problem; arrays over its ``S`` runs (seeds).

    Attributes:
        reads: float ``[S, K]``: the best speedup among the first ``k`` board runs, for
            each ``k`` of the study's reads (the budget last).
        to_level: board runs to ``level`` of the best known ``[S]`` (inf: never).
        to_prior: board runs to the prior's map ``[S]`` (None: the prior not read).
        s_per_round, s_per_map: the physics model's seconds ``[S]`` (NaN: no model).
        exact: runs read map by map (the rest from ``metrics.csv``).
    """

    agent: str
    runs: list[Run]
    curves: list[Curve]
    reads: np.ndarray
    to_level: np.ndarray
    to_prior: np.ndarray | None
    s_per_round: np.ndarray
    s_per_map: np.ndarray
    exact: int

    @property
    def final(self) -> np.ndarray:
        """float ``[S]``: the reads at the budget."""
        return self.reads[:, -1]

    @property
    def has_model(self) -> bool:
        return bool(np.isfinite(self.s_per_map).any())


@dataclass
class PhysicsResult:
    """One problem: the prior study's figures (its reading and runs) and every agent's
    reads; ``tests``: ``(agent, against) -> {"final": (U, p, share higher), "level": (U,
    p, share first)}``."""

    base: PriorResult
    ks: list[int]
    level: float
    agents: dict[str, AgentReads]
    tests: dict[tuple[str, str], dict[str, tuple[float, float, float]]] = field(
        default_factory=dict
    )

    @property
    def problem(self) -> str:
        return self.base.problem

    @property
    def prior(self) -> PriorReading | None:
        return self.base.prior

    @property
    def reference(self) -> float:
        return self.base.reference

    @property
    def source(self) -> str:
        return self.base.source

    def read(self, agent: str, k: int) -> np.ndarray | None:
        """float ``[S]``: ``agent``'s reads at ``k`` (None: no runs or ``k`` not read)."""
        a = self.agents.get(agent)
        return None if a is None or k not in self.ks else a.reads[:, self.ks.index(k)]


def agent_reads(
    name: str, runs: Sequence[Run], ks: Sequence[int], level: float, prior: PriorReading | None
) -> AgentReads:
    """:class:`AgentReads` of an agent's finished runs."""
    curves = [board_curve(r) for r in runs]
    seconds = np.array(
        [model_seconds(r, c) for r, c in zip(runs, curves)], dtype=np.float64
    ).reshape(-1, 2)
    return AgentReads(
        agent=name,
        runs=list(runs),
        curves=curves,
        reads=np.array([[read_at(c, k) for k in ks] for c in curves], dtype=np.float64),
        to_level=np.array([samples_to(c, level) for c in curves]),
        to_prior=None
        if prior is None
        else np.array([samples_to(c, prior.speedup) for c in curves]),
        s_per_round=seconds[:, 0],
        s_per_map=seconds[:, 1],
        exact=sum(c.exact for c in curves),
    )


def add_tests(cfg: DictConfig, result: PhysicsResult) -> None:
    """The plan's pairs where both agents ran: finals (higher better) and samples to the
    level (first better)."""
    for mine, theirs in pairs(cfg):
        a, b = result.agents.get(mine), result.agents.get(theirs)
        if a is None or b is None:
            continue
        result.tests[(mine, theirs)] = {
            "final": agent_runs.higher(a.final, b.final),
            "level": compare(a.to_level, b.to_level),
        }


def problem_result(cfg: DictConfig, out: Path, problem: str) -> PhysicsResult | None:
    """The problem's reading, runs and reads; None when it has neither reading nor run."""
    base = agent_runs.prior_result(cfg, out, problem)
    if base is None:
        return None
    ks, level = reads_of(cfg), float(cfg.level) * base.reference
    agents = {}
    for a in [] if base.agents is None else base.agents.agents:
        agents[a.agent] = agent_reads(a.agent, a.cell.runs, ks, level, base.prior)
    result = PhysicsResult(base, ks, float(cfg.level), agents)
    add_tests(cfg, result)
    return result


def analyse(cfg: DictConfig, out: Path) -> list[PhysicsResult]:
    """Every problem's reading, runs, reads and tests."""
    results = [problem_result(cfg, Path(out), p) for p in cfg.problems]
    return [r for r in results if r is not None]


# ------------------------------------------------------------------ tables
def median_samples(samples: np.ndarray | None) -> float:
    """The median samples over seeds (inf: most never got there; NaN: none)."""
    if samples is None or not len(samples):
        return math.nan
    return float(np.median(samples))


def summary_markdown(cfg: DictConfig, results: Sequence[PhysicsResult]) -> str:
    """Per problem: the compiler's map, the prior's (read once), its solve, the best known,
    and the physics agent at 1 board run and at the budget, with its samples to the
    level."""
    physics = role(cfg, "physics")
    rows = []
    for r in results:
        p, a = r.prior, r.agents.get(physics)
        rows.append(
            (
                r.problem,
                "1.0000",
                "-" if p is None else f"{p.speedup:.4f}",
                "-" if p is None else p.solve_text,
                f"{r.reference:.4f} ({r.source})",
                "" if a is None else read_text(a.reads[:, 0]),
                "" if a is None else read_text(a.final),
                "" if a is None else format_samples(a.to_level, False),
            )
        )
    first, budget = reads_of(cfg)[0], int(cfg.budget)
    head = (
        "problem",
        "compiler's map",
        "prior's map, one board run",
        "the prior's solve",
        "best known",
        f"{physics} at {first}",
        f"{physics} at {budget}",
        f"{physics}: samples to {float(cfg.level):.0%}",
    )
    return markdown_table(head, rows)


def seconds_text(values: np.ndarray, fmt: str = "{:.3f}") -> str:
    """``0.120 [0.100-0.150]``: median [range] of the finite seconds; empty when none."""
    return median_range(values, fmt, "")


def read_text(reads: np.ndarray) -> str:
    """``1.2010 ± 0.0010`` over the runs with a valid map by then, ``(n/S)`` after it where
    some had none; ``-`` where none had."""
    n = int(np.isfinite(reads).sum())
    text = format_mean_std(reads)
    return text if n in (0, len(reads)) else f"{text} ({n}/{len(reads)})"


def reads_markdown(result: PhysicsResult) -> str:
    """One row per agent: its reads, its samples to the level and to the prior's map,
    and its model's seconds."""
    rows = []
    for a in result.agents.values():
        rows.append(
            (
                a.agent,
                len(a.runs),
                *(read_text(a.reads[:, i]) for i in range(len(result.ks))),
                format_samples(a.to_level, False),
                "-" if a.to_prior is None else format_samples(a.to_prior, False),
                seconds_text(a.s_per_round),
                seconds_text(a.s_per_map),
            )
        )
    head = (
        "agent",
        "runs",
        *(f"at {k}" for k in result.ks),
        f"samples to {result.level:.0%}",
        "samples to the prior's",
        "model s per round",
        "model s per paid map",
    )
    return markdown_table(head, rows)


def tests_markdown(cfg: DictConfig, results: Sequence[PhysicsResult]) -> str:
    """Per problem and pair of ``tests``: both finals and samples, and the tests."""
    budget, rows = int(cfg.budget), []
    for r in results:
        for (mine, theirs), t in r.tests.items():
            a, b = r.agents[mine], r.agents[theirs]
            rows.append(
                (
                    r.problem,
                    mine,
                    theirs,
                    read_text(a.final),
                    read_text(b.final),
                    test_text(t["final"]),
                    format_samples(a.to_level, False),
                    format_samples(b.to_level, False),
                    test_text(t["level"]),
                )
            )
    level = f"{float(cfg.level):.0%}"
    head = (
        "problem",
        "agent",
        "against",
        f"agent at {budget}",
        f"against at {budget}",
        "final (p, higher)",
        f"agent: samples to {level}",
        f"against: samples to {level}",
        "samples (p, first)",
    )
    return markdown_table(head, rows)


# ------------------------------------------------------------------ targets
def verdict(met: bool | None, detail: str) -> str:
    """``**met** (detail)``, ``**not met** (...)`` or ``**not measured** (...)``."""
    word = {True: "met", False: "not met", None: "not measured"}[met]
    return f"**{word}**" + (f" ({detail})" if detail else "")


def by_problem(results: Sequence[PhysicsResult], names: Sequence[str]) -> list[PhysicsResult]:
    found = {r.problem: r for r in results}
    return [found[p] for p in names if p in found]


def first_map_target(cfg: DictConfig, results: Sequence[PhysicsResult]) -> str:
    """Every physics run's read at 1 board run is the prior's map (to 4 decimals)."""
    physics, wrong, runs = role(cfg, "physics"), [], 0
    for r in results:
        a = r.agents.get(physics)
        if a is None or r.prior is None or r.ks[0] != 1:
            continue
        runs += len(a.runs)
        off = int((np.round(a.reads[:, 0], DECIMALS) != round(r.prior.speedup, DECIMALS)).sum())
        if off:
            wrong.append(f"{r.problem}: {off}/{len(a.runs)}")
    if not runs:
        return verdict(None, f"no {physics} run beside a read prior")
    return verdict(not wrong, "; ".join(wrong) if wrong else f"{runs} runs")


def samples_target(cfg: DictConfig, results: Sequence[PhysicsResult]) -> str:
    """Physics' median samples to the level: within ``original_samples`` on at least
    ``original_least`` of the original problems, within ``departing_samples`` on every
    departing one."""
    t, physics = cfg.targets, role(cfg, "physics")

    def medians(names):
        rs = by_problem(results, names)
        return {
            r.problem: median_samples(r.agents[physics].to_level) for r in rs if physics in r.agents
        }

    original, least = medians(t.original), int(t.original_least)
    hits = sum(v <= int(t.original_samples) for v in original.values())
    if hits >= least:
        first = True
    elif hits + len(t.original) - len(original) < least:
        first = False
    else:
        first = None
    departing = medians(t.departing)
    over = [p for p, v in departing.items() if not v <= int(t.departing_samples)]
    second = False if over else (True if len(departing) == len(t.departing) else None)
    met = False if False in (first, second) else (None if None in (first, second) else True)
    texts = [f"{p} {v:.0f}" for p, v in {**original, **departing}.items()]
    detail = (
        f"within {t.original_samples} on {hits}/{len(t.original)} original "
        f"({len(original)} measured), within {t.departing_samples} on "
        f"{len(departing) - len(over)}/{len(t.departing)} departing ({len(departing)} measured)"
    )
    return verdict(met, detail + ("; medians: " + ", ".join(texts) if texts else ""))


def early_target(cfg: DictConfig, results: Sequence[PhysicsResult]) -> str:
    """Physics' mean read at ``early`` >= every other agent's mean read at the budget (to
    4 decimals), on every problem."""
    physics, early, budget = role(cfg, "physics"), int(cfg.early), int(cfg.budget)
    below, measured = [], 0
    for r in results:
        mine = r.read(physics, early)
        if mine is None:
            continue
        measured += 1
        ours = round(mean_std(mine).mean, DECIMALS)
        for name in r.agents:
            theirs = round(mean_std(r.read(name, budget)).mean, DECIMALS)
            if name != physics and theirs > ours:
                below.append(f"{r.problem}: {name} {theirs:.4f} > {ours:.4f}")
    if not measured:
        return verdict(None, f"no {physics} run read at {early}")
    return verdict(
        not below, "; ".join(below) if below else f"on {measured} of {len(results)} problems"
    )


def mean_curve(curves: Sequence[Curve], ks: np.ndarray) -> np.ndarray:
    """float ``[K]``: the mean over runs of the best speedup among the first ``k`` board
    runs, for each ``k`` (NaN where no run has a valid map by then)."""
    reads = np.array([[read_at(c, int(k)) for k in ks] for c in curves])
    return np.array([mean_std(column).mean for column in reads.T])


def misleading_target(cfg: DictConfig, results: Sequence[PhysicsResult]) -> str:
    """Where the datasheet misleads: physics' mean best at every board run from
    ``from_runs`` to the budget is never below plain EA's (to 4 decimals)."""
    physics, ea = role(cfg, "physics"), role(cfg, "ea")
    start, budget = int(cfg.targets.from_runs), int(cfg.budget)
    below, measured = [], []
    for r in by_problem(results, cfg.targets.misleading):
        a, b = r.agents.get(physics), r.agents.get(ea)
        if a is None or b is None or start > budget:
            continue
        ks = np.arange(start, budget + 1)
        gap = np.round(mean_curve(a.curves, ks), DECIMALS) - np.round(
            mean_curve(b.curves, ks), DECIMALS
        )
        measured.append(r.problem)
        if (gap < 0).any():
            first = int(ks[np.flatnonzero(gap < 0)[0]])
            below.append(f"{r.problem}: first at {first}, by up to {-gap.min():.4f}")
    if not measured:
        return verdict(None, f"no {physics} and {ea} runs on {', '.join(cfg.targets.misleading)}")
    return verdict(not below, "; ".join(below) if below else ", ".join(measured))


def model_target(cfg: DictConfig, results: Sequence[PhysicsResult]) -> str:
    """Physics' median model seconds per paid map within ``model_s`` on the problems of
    ``model_workload``."""
    t, physics = cfg.targets, role(cfg, "physics")
    texts, slow = [], []
    for r in results:
        a = r.agents.get(physics)
        if not r.problem.endswith(str(t.model_workload)) or a is None or not a.has_model:
            continue
        s = float(np.nanmedian(a.s_per_map))
        texts.append(f"{r.problem} {s:.3f} s")
        if not s <= float(t.model_s):
            slow.append(r.problem)
    if not texts:
        return verdict(None, f"no {physics} run with a model on {t.model_workload}")
    return verdict(not slow, "; ".join(texts))


def target_lines(cfg: DictConfig, results: Sequence[PhysicsResult]) -> list[str]:
    """Whether each target holds, from the figures, with the problems that decide it."""
    t, physics = cfg.targets, role(cfg, "physics")
    return [
        f"- `{physics}`'s first paid map is the prior's (its read at 1 board run is the "
        f"prior's map): {first_map_target(cfg, results)}.",
        f"- `{physics}`'s samples to {float(cfg.level):.0%} within {t.original_samples} on at "
        f"least {t.original_least} of {', '.join(t.original)}, and within "
        f"{t.departing_samples} on {', '.join(t.departing)}: {samples_target(cfg, results)}.",
        f"- `{physics}` at {cfg.early} board runs at least every other agent at {cfg.budget}: "
        f"{early_target(cfg, results)}.",
        f"- `{physics}` never below `{role(cfg, 'ea')}` at equal board runs from "
        f"{t.from_runs} on where the datasheet misleads ({', '.join(t.misleading)}): "
        f"{misleading_target(cfg, results)}.",
        f"- `{physics}`'s model side within {t.model_s} s per paid map on {t.model_workload}: "
        f"{model_target(cfg, results)}.",
    ]


# ------------------------------------------------------------------ the section
def missing_notes(cfg: DictConfig, results: Sequence[PhysicsResult]) -> list[str]:
    """The prior study's notes, and the runs read from ``metrics.csv`` (no record)."""
    notes = agent_runs.prior_missing_notes(cfg, [r.base for r in results])
    for r in results:
        loose = [
            f"{a.agent} {len(a.runs) - a.exact}" for a in r.agents.values() if a.exact < len(a.runs)
        ]
        if loose:
            notes.append(
                f"{r.problem}: runs without evaluations.csv, read a round at a time: "
                + ", ".join(loose)
            )
    return notes


def intro(cfg: DictConfig, machine: str) -> str:
    agents = ", ".join(f"`{a}`: {' '.join(cfg.agent_overrides[a])}" for a in cfg.agents)
    return (
        "Physics first: where the chip has a datasheet (`hwmodel.params.prior`: "
        f"{prior_map.figures_text(cfg)}), `agent=mbo` pays the prior's solved map first, "
        "then each round calibrates the prior to every map read, fits a residual and "
        "solves the two in a trust region of the best maps read; against it the searchers "
        "from the compiler's map and from the prior's, `agent=mbo` on the screen's model "
        f"alone and the physics agent's ablations, as the plan names them: {cfg.seeds} "
        f"seeds, {cfg.budget} board runs each"
        + (f", on {machine}" if machine else "")
        + f". The agents: {agents}. "
        "Speedups are over the chip's compiler; `at k`: the best speedup among a run's "
        "first k board runs (mean ± std over seeds); the best known is the best map any run "
        "or the prior read (the compiler's when none beat it); samples: board runs to "
        f"{float(cfg.level):.0%} of it and to the prior's map (median over the runs that "
        "got there, and how many did). Tests: two-sided Mann-Whitney U, with the share of "
        "pairs where the agent ended higher (finals) or got there first (samples). The "
        "model side: the physics model's seconds (calibration and residual, and the "
        "solves) per round and per paid map, median [min-max] over seeds. The prior's map is solved at most "
        f"{prior_map.time_limit_of(cfg):.0f} s. The chip: `{script_label(cfg.chip)}` "
        "(docs/external.md)" + cells.problem_chips_text(cfg) + "."
    )


def problem_block(result: PhysicsResult, figure: str | None) -> list[str]:
    """A problem's heading, the prior's line, its reads table and its figure."""
    r = result
    lines = [
        f"### {r.problem} (budget {r.base.agents.budget}, best known ({r.source}) "
        f"{r.reference:.4f}x)",
        "",
    ]
    if r.prior is not None:
        lines += [prior_line(r), ""]
    lines += [reads_markdown(r), ""]
    if figure is not None:
        lines += [f"![{r.problem}]({figure})", ""]
    return lines


def render(cfg: DictConfig, result: list[PhysicsResult], page: Page) -> str:
    """The ``physics`` section; one figure per problem with runs, ``physics_<problem>.png``."""
    lines = ["## Physics first: the calibrated datasheet, solved, against the searchers", ""]
    lines += [intro(cfg, page.machine), ""]
    if result:
        lines += ["The targets, from the figures below:", "", *target_lines(cfg, result), ""]
        lines += [
            "Per problem, the compiler's map and the solved prior's, each read once, and the "
            "physics agent's reads:",
            "",
            summary_markdown(cfg, result),
            "",
        ]
        tests = tests_markdown(cfg, result)
        if tests.count("\n") > 1:  # a row beyond the head
            lines += ["The tests (the plan's pairs):", "", tests, ""]
    lines += left_out(missing_notes(cfg, result))
    for r in result:
        if r.base.agents is None:
            continue
        png = agent_runs.plot_problem(r.base.agents, page.figure(f"physics_{r.problem}.png"))
        lines += problem_block(r, page.link(png))
    lines += reproduce(page.command)
    return "\n".join(lines)
