"""The learner's cost: what EGRL's gradient steps buy, and what they cost in wall time.

Table 2 of the EGRL paper asks one gradient step per environment step on minibatches of
24, with a critic as large as the policy; on one core a learner step costs about as much
as the rest of a generation several times over. The plan (``configs/study/learner-cost.yaml``)
names the problems, each with its budget of paid measurements (``budget``, or its own in
``budgets``), and the variants as egrl-train overrides: the reference ``egrl``
(``learner=sac-table2``, Table 2's rate), the same at a lower ``learner.gradient_ratio``,
with a smaller critic (``learner.critic_hidden``, ``learner.critic_depth``) or minibatch,
with the critic choosing what is measured (``screen=critic``), and EA, the population
without a learner. Every variant runs on every problem for ``seeds`` seeds, in
``OUT/<problem>/<variant>/seed<S>``.

Each run is read against the problem's reference: the optimum of the cost model
(``env.optimum()``, cached in ``OUT/<problem>/optimum.json``) where the solver proves it,
else the best known value (solver or any run of the problem). The section gives, per
problem and variant: the final best speedup and its share of the reference, the paid
measurements to reach ``level`` (99%) of it, the wall time (final ``wall_s``) and the
learner's share of it (final ``t_learner`` over ``wall_s``), the gradient steps per paid
measurement, the median wall time as a multiple of the baseline's (EA) on the same
problem, and two-sided Mann-Whitney U tests of each variant against the reference on the
final speedup and on the samples to the level (never reached ranks last). Only runs that
spent the problem's budget are compared; the others are listed as left out.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from egrl.rundir import RunDir
from egrl.runs import Run
from studies.render import left_out, markdown_table, plot_median_curves, reproduce
from studies.runner import Page, RunSpec, StudyError, read_runs
from studies.stats import (
    best_known,
    compare,
    format_mean_std,
    format_samples,
    format_share,
    mann_whitney,
    median_range,
    samples_to_level,
    solver_optimum,
)

log = logging.getLogger(__name__)

SECTION = "learner-cost"


# ------------------------------------------------------------------ plan
def group(problem: str, variant: str) -> str:
    """A variant's directory under the study's output: ``<problem>/<variant>``."""
    return f"{problem}/{variant}"


def budget_of(cfg: DictConfig, problem: str) -> int:
    """A problem's budget of paid measurements: its own (``budgets``), else ``budget``."""
    return int((cfg.get("budgets") or {}).get(problem, cfg.budget))


def variants_of(cfg: DictConfig, problem: str) -> list[str]:
    """A problem's variants: its own (``problem_variants``), else ``variants``."""
    return list((cfg.get("problem_variants") or {}).get(problem, cfg.variants))


def check(cfg: DictConfig) -> None:
    """Every named problem and variant has its overrides; seeds and budgets >= 1."""
    if int(cfg.seeds) < 1:
        raise StudyError(f"learner-cost: seeds={cfg.seeds} is invalid: expected >= 1")
    for problem in cfg.problems:
        if budget_of(cfg, problem) < 1:
            raise StudyError(
                f"learner-cost: the budget of {problem} ({budget_of(cfg, problem)}) is "
                "invalid: expected >= 1"
            )
    for kind, names, table in (
        ("problem", cfg.problems, cfg.problem_overrides),
        ("variant", [v for p in cfg.problems for v in variants_of(cfg, p)], cfg.variant_overrides),
    ):
        for name in names:
            if name not in table:
                raise StudyError(f"learner-cost: {kind} {name!r} has no overrides in the plan")


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """One stage: every problem x variant x seed at the problem's budget."""
    check(cfg)
    specs = []
    for problem in cfg.problems:
        for variant in variants_of(cfg, problem):
            overrides = (
                *cfg.problem_overrides[problem],
                *cfg.variant_overrides[variant],
                f"budget={budget_of(cfg, problem)}",
            )
            specs += [
                RunSpec(group(problem, variant), seed, overrides) for seed in range(cfg.seeds)
            ]
    yield specs


# ------------------------------------------------------------------ analysis
@dataclass
class VariantResult:
    """One variant on one problem; arrays over its ``S`` runs (seeds).

    Attributes:
        final: best speedup over the compiler at the end of each run ``[S]``.
        to_level: paid measurements to reach ``level`` x the reference ``[S]`` (inf: never).
        wall_s: the run's wall time, its final ``wall_s`` ``[S]``.
        learner_share: the learner's share of it, final ``t_learner`` / ``wall_s`` ``[S]``
            (NaN: no ``t_learner`` column).
        updates: gradient steps per paid measurement (the ``gradient_steps`` column summed,
            over the final ``iterations``) ``[S]`` (NaN: no learner column).
        final_test: against the reference variant on ``final``: ``(U, p)``; None for the
            reference itself or without it.
        level_test: against the reference on ``to_level``: ``(U, p, share of pairs this
            variant got there first)``; None likewise.
    """

    variant: str
    runs: list[Run]
    final: np.ndarray
    to_level: np.ndarray
    wall_s: np.ndarray
    learner_share: np.ndarray
    updates: np.ndarray
    final_test: tuple[float, float] | None = None
    level_test: tuple[float, float, float] | None = None


@dataclass
class ProblemResult:
    """Every variant on one problem.

    Attributes:
        reference: what shares and levels divide by; ``source`` says where it comes from
            (:func:`studies.stats.best_known`).
        level: the share of the reference the samples are counted to.
        baseline_wall_s: the baseline variant's median wall time (NaN: no baseline run).
        left_out: one line per run that did not spend the problem's budget.
    """

    problem: str
    reference: float
    source: str
    budget: int
    level: float
    variants: list[VariantResult]
    baseline_wall_s: float = math.nan
    left_out: list[str] = field(default_factory=list)

    def wall_ratio(self, v: VariantResult) -> float:
        """``v``'s median wall time over the baseline's (NaN without either)."""
        mine = float(np.median(v.wall_s)) if len(v.wall_s) else math.nan
        return mine / self.baseline_wall_s if self.baseline_wall_s > 0 else math.nan

    def variant(self, name: str) -> VariantResult | None:
        return next((v for v in self.variants if v.variant == name), None)


def _number(value: str | None) -> float:
    try:
        return float(value) if value not in (None, "") else math.nan
    except ValueError:
        return math.nan


def learner_share(run: Run) -> float:
    """The learner's share of the run's wall time: final ``t_learner`` / ``wall_s``."""
    wall = run.final_wall_s
    t = _number(run.last_row.get("t_learner"))
    return t / wall if math.isfinite(t) and wall > 0 else math.nan


def updates_per_sample(run: Run) -> float:
    """Gradient steps over paid measurements (NaN: the run logs no ``gradient_steps``)."""
    rows = RunDir(run.path).read_metrics_rows()
    steps = [_number(r.get("gradient_steps")) for r in rows]
    steps = [s for s in steps if math.isfinite(s)]
    paid = int(run.iterations[-1]) if len(run.iterations) else 0
    return float(sum(steps)) / paid if steps and paid > 0 else math.nan


def variant_result(variant: str, runs: Sequence[Run], level: float) -> VariantResult:
    """A variant's arrays over its runs; ``level`` is an absolute speedup."""
    return VariantResult(
        variant=variant,
        runs=list(runs),
        final=np.array([r.final_speedup for r in runs]),
        to_level=np.array([samples_to_level(r.iterations, r.best_speedup, level) for r in runs]),
        wall_s=np.array([r.final_wall_s for r in runs]),
        learner_share=np.array([learner_share(r) for r in runs]),
        updates=np.array([updates_per_sample(r) for r in runs]),
    )


def finished_runs(root: Path, budget: int, notes: list[str]) -> list[Run]:
    """The runs under ``root`` (``<problem>/<variant>``) that spent ``budget``; a line for
    each of the others goes to ``notes``."""
    found = read_runs(root)
    for p in found.problems:
        log.warning("%s", p)
    runs = []
    for r in [*found.runs, *found.incomplete, *found.failed]:
        if r.budget == budget and r.complete:
            runs.append(r)
            continue
        paid = int(r.iterations[-1]) if len(r.iterations) else 0
        why = (
            f"budget {r.budget}, the plan's is {budget}"
            if r.budget != budget
            else f"{paid} of {budget} paid measurements"
        )
        notes.append(f"`{root.name}/{Path(r.path).name}`: {why}")
    return sorted(runs, key=lambda r: r.seed)


def reference_of(cfg: DictConfig, out: Path, problem: str, runs: list[Run]) -> tuple[float, str]:
    """The problem's reference: the proven optimum, else the best known value."""
    optimum, proven = solver_optimum(runs, out / problem, cfg.optimum_time_s)
    return best_known(optimum, proven, [r.final_speedup for r in runs])


def problem_result(cfg: DictConfig, out: Path, problem: str) -> ProblemResult | None:
    """Every variant on ``problem``; None when it has no finished run."""
    budget, notes = budget_of(cfg, problem), []
    by_variant = {
        v: finished_runs(out / group(problem, v), budget, notes) for v in variants_of(cfg, problem)
    }
    runs = [r for rs in by_variant.values() for r in rs]
    if not runs:
        log.warning("%s: no finished run", problem)
        return None
    reference, source = reference_of(cfg, out, problem, runs)
    level = float(cfg.level)
    results = [variant_result(v, rs, level * reference) for v, rs in by_variant.items() if rs]
    result = ProblemResult(problem, reference, source, budget, level, results, left_out=notes)
    base = result.variant(str(cfg.reference))
    for v in results:
        if base is not None and v is not base:
            v.final_test = mann_whitney(v.final, base.final)
            v.level_test = compare(v.to_level, base.to_level)
    baseline = result.variant(str(cfg.baseline))
    if baseline is not None:
        result.baseline_wall_s = float(np.median(baseline.wall_s))
    return result


def analyse(cfg: DictConfig, out: Path) -> list[ProblemResult]:
    """Read every problem's runs, its reference and every variant's figures."""
    results = [problem_result(cfg, Path(out), p) for p in cfg.problems]
    return [r for r in results if r is not None]


# ------------------------------------------------------------------ report
def reference_name(result: ProblemResult) -> str:
    """``optimum`` (proven) or ``best known``."""
    return "optimum" if result.source == "proven" else "best known"


def header(result: ProblemResult, reference: str, baseline: str) -> tuple[str, ...]:
    return (
        "variant",
        "runs",
        "final speedup",
        f"share of {reference_name(result)}",
        f"samples to {result.level:.0%}",
        f"against {reference}: final (p)",
        f"against {reference}: samples (p, first)",
        "wall s",
        "learner's share",
        f"wall vs {baseline}",
        "steps per paid map",
    )


def p_text(test: tuple[float, ...] | None, first: bool = False) -> str:
    """``p = 0.012`` (and ``, 80%``: the share of pairs the variant got there first)."""
    if test is None or not np.isfinite(test[1]):
        return ""
    return f"p = {test[1]:.3f}" + (f", {test[2]:.0%}" if first else "")


def ratio_text(ratio: float) -> str:
    return f"{ratio:.2f}x" if np.isfinite(ratio) else "-"


def table_markdown(result: ProblemResult, reference: str, baseline: str) -> str:
    """One row per variant."""
    rows = [
        (
            v.variant,
            len(v.runs),
            format_mean_std(v.final),
            format_mean_std(v.final / result.reference, "{:.2%}"),
            format_samples(v.to_level),
            p_text(v.final_test),
            p_text(v.level_test, first=True),
            median_range(v.wall_s, "{:.0f}"),
            format_share(v.learner_share, center="median"),
            ratio_text(result.wall_ratio(v)),
            median_range(v.updates, "{:.2f}"),
        )
        for v in result.variants
    ]
    return markdown_table(header(result, reference, baseline), rows)


def summary_markdown(results: Sequence[ProblemResult], baseline: str) -> str:
    """Per variant and problem: the median share of the reference and wall vs the baseline."""
    variants = list(dict.fromkeys(v.variant for r in results for v in r.variants))
    rows = []
    for name in variants:
        row = [name]
        for r in results:
            v = r.variant(name)
            if v is None:
                row.append("")
                continue
            share = float(np.median(v.final / r.reference))
            row.append(f"{share:.2%}, {ratio_text(r.wall_ratio(v))}")
        rows.append(row)
    return markdown_table(("variant", *(r.problem for r in results)), rows)


def target_text(cfg: DictConfig, results: Sequence[ProblemResult]) -> str:
    """The variants within the plan's ``wall_target`` (a multiple of the baseline's median
    wall time on one problem), or why that cannot be said."""
    target = cfg.get("wall_target")
    if not target:
        return ""
    ratio, problem = float(target.ratio), str(target.problem)
    lead = f"Target: wall time at most {ratio:.2f}x {cfg.baseline}'s on {problem}"
    result = next((r for r in results if r.problem == problem), None)
    if result is None or not np.isfinite(result.baseline_wall_s):
        return f"{lead}: no runs of {problem} and {cfg.baseline} to tell."
    learners = [v for v in result.variants if v.variant != str(cfg.baseline)]
    met = [
        f"{v.variant} ({ratio_text(result.wall_ratio(v))})"
        for v in learners
        if result.wall_ratio(v) <= ratio
    ]
    missed = [
        f"{v.variant} ({ratio_text(result.wall_ratio(v))})"
        for v in learners
        if not result.wall_ratio(v) <= ratio
    ]
    return (
        f"{lead}: met by {', '.join(met) or 'none'}; missed by {', '.join(missed) or 'none'} "
        "(median wall times)."
    )


def plot_problem(result: ProblemResult, reference: str, baseline: str, path: Path) -> Path:
    """Median best speedup against paid measurements: the reference solid black, the
    baseline dash-dotted grey, the other variants solid in colour."""
    from matplotlib import colormaps

    colours = colormaps["tab10"].colors
    series = []
    for i, v in enumerate(result.variants):
        if v.variant == reference:
            style, colour = "-", "black"
        elif v.variant == baseline:
            style, colour = "-.", "dimgrey"
        else:
            style, colour = "-", colours[i % 10]
        series.append((v.variant, v.runs, style, colour))
    refs = {
        "native compiler": 1.0,
        f"{result.level:.0%} of {reference_name(result)}": result.level * result.reference,
    }
    return plot_median_curves(series, refs, result.problem, path)


def parallel_runs(cfg: DictConfig) -> int | None:
    """How many runs go at once: the launcher's ``hydra.launcher.n_jobs`` (1 with Hydra's
    basic launcher) times the plan's ``groups_at_once``; None when the launcher says not."""
    launcher = [str(o) for o in cfg.get("launcher", [])]
    per_group = 1 if "hydra/launcher=basic" in launcher else None
    for override in launcher:
        match = re.fullmatch(r"hydra\.launcher\.n_jobs=(\d+)", override)
        if match:
            per_group = int(match.group(1))
    return per_group * int(cfg.get("groups_at_once", 1)) if per_group else None


def intro(cfg: DictConfig, machine: str) -> str:
    budgets = ", ".join(f"{p} {budget_of(cfg, p)}" for p in cfg.problems)
    jobs = parallel_runs(cfg)
    return (
        f"Each variant of EGRL's learner and {cfg.baseline} at the same budget of paid "
        f"measurements ({budgets}), {cfg.seeds} seeds per variant and problem"
        + (f", on {machine}" if machine else "")
        + (f", {jobs} runs at a time" if jobs else "")
        + f". `{cfg.reference}` is Table 2's update rate (`learner=sac-table2`: one gradient "
        "step per paid measurement, minibatches of 24, the critic as large as the policy); "
        "every other EGRL variant changes one or two things of it (its name says which). "
        "Speedups are over each target's "
        "native compiler; the reference is the proven optimum of the cost model "
        "(`env.optimum()`), else the best known value (the solver's or any run's, as the "
        "heading says). Samples to a level: median [min-max] over the runs that reached it "
        f"(how many did). `against {cfg.reference}`: two-sided Mann-Whitney U over seeds of "
        "the final speedup, and of the samples to the level (never reached ranks last) with "
        "the share of pairs where the variant got there first. `wall s`: the run's wall "
        "time, median [min-max]; `learner's share`: the learner's updates' part of it "
        f"(`t_learner` / `wall_s`, median); `wall vs {cfg.baseline}`: the median wall time "
        f"over {cfg.baseline}'s on the same problem; `steps per paid map`: the learner's "
        "gradient steps over the paid measurements."
    )


def problem_markdown(
    result: ProblemResult, figure: str, reference: str, baseline: str
) -> list[str]:
    """A problem's heading, table, figure and the runs left out."""
    name = "optimum" if result.source == "proven" else f"best known ({result.source})"
    return [
        f"### {result.problem} (budget {result.budget}, {name} {result.reference:.4f}x)",
        "",
        table_markdown(result, reference, baseline),
        "",
        f"![{result.problem}]({figure})",
        "",
        *left_out(result.left_out),
    ]


def render(cfg: DictConfig, result: list[ProblemResult], page: Page) -> str:
    """The ``learner-cost`` section; one figure per problem, ``learner-cost_<problem>.png``."""
    reference, baseline = str(cfg.reference), str(cfg.baseline)
    lines = ["## The learner's cost: update rate, critic and minibatch", ""]
    lines += [intro(cfg, page.machine), ""]
    if result:
        lines += [
            f"Median share of the reference and median wall time as a multiple of "
            f"{baseline}'s, per problem:",
            "",
            summary_markdown(result, baseline),
            "",
        ]
        target = target_text(cfg, result)
        lines += [target, ""] if target else []
    for r in result:
        png = plot_problem(r, reference, baseline, page.figure(f"learner-cost_{r.problem}.png"))
        lines += problem_markdown(r, page.link(png), reference, baseline)
    lines += reproduce(page.command)
    return "\n".join(lines)
