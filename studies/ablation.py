"""The learner's ablation: what each half of EGRL contributes, at equal budget.

The plan (``configs/study/ablation.yaml``) names the variants (``egrl``, its paper learner,
``ea`` the population alone, ``learner`` the learner alone, EGRL without Boltzmann
chromosomes) and the problems (targets with room between the native compiler and the
optimum), each as egrl-train overrides; every variant runs on every problem for ``seeds``
seeds at one ``budget``, in ``OUT/<problem>/<variant>/seed<S>``. Runs made by the old
script, in Hydra's ``override_dirname`` directories under the same
``OUT/<problem>/<variant>``, are read as well and not run again.

Each run's best speedup is read against the problem's optimum (``env.optimum()``, cached in
``OUT/<problem>/optimum.json``; the best known value where it is not proven); the section
gives the final share of the optimum, the paid samples to reach 99% of the run's own final
value and of the optimum, how often the population's champion descends from a migrated
learner or from a chromosome seeded from a GNN (``champion_descent`` in the metrics), and a
two-sided Mann-Whitney U test of EGRL against EA per problem, on the final speedup and on
the mean best speedup over the budget (the area under the curve, which rewards reaching a
value with fewer samples). Only runs that spent their whole budget are compared.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from egrl.aggregate.curves import common_grid, mean_band, step_values
from egrl.rundir import RunDir
from egrl.runs import Run, collect_runs
from studies.render import markdown_table, pyplot, reproduce, save_figure
from studies.runner import Page, RunSpec, read_runs
from studies.stats import (
    best_known,
    format_mean_std,
    format_samples,
    format_share,
    mann_whitney,
    samples_to_level,
    solver_optimum,
)

log = logging.getLogger(__name__)

SECTION = "ablation"
#: the variants EGRL is tested against (two-sided Mann-Whitney U over seeds)
TESTED = ("egrl", "ea")
#: the quantities the test compares
TEST_KEYS = ("final", "auc")


# ------------------------------------------------------------------ plan
def group(problem: str, variant: str) -> str:
    """A variant's directory under the study's output: ``<problem>/<variant>``."""
    return f"{problem}/{variant}"


def old_layout_seeds(root: Path, budget: int) -> set[int]:
    """Seeds with a finished run of ``budget`` under ``root`` outside ``seed<S>``: the old
    script's runs, kept in Hydra's ``override_dirname`` directories."""
    if not root.is_dir():
        return set()
    runs = collect_runs([root]).runs
    return {r.seed for r in runs if r.budget == budget and r.path.name != f"seed{r.seed}"}


def plan(cfg: DictConfig, out: Path) -> Iterator[list[RunSpec]]:
    """One stage: every problem x variant x seed at the plan's budget."""
    specs = []
    for problem in cfg.problems:
        for variant in cfg.variants:
            name = group(problem, variant)
            overrides = (
                *cfg.problem_overrides[problem],
                *cfg.variant_overrides[variant],
                f"budget={cfg.budget}",
            )
            done = old_layout_seeds(out / name, int(cfg.budget))
            specs += [
                RunSpec(name, seed, overrides) for seed in range(cfg.seeds) if seed not in done
            ]
    yield specs


# ------------------------------------------------------------------ analysis
@dataclass
class VariantResult:
    """One variant on one problem; arrays over its ``S`` runs (seeds).

    Attributes:
        final: best speedup over the compiler at the end of each run ``[S]``.
        auc: mean best speedup over the budget ``[S]`` (step curve on a common grid).
        to_own99: samples to reach 99% of the run's own final value ``[S]``.
        to_opt99: samples to reach 99% of the optimum ``[S]`` (inf: never).
        from_learner, from_seeding: share of generations whose population champion
            descends from a migrated learner / a seeded chromosome ``[S]`` (NaN: no
            population).
    """

    variant: str
    runs: list[Run]
    final: np.ndarray
    auc: np.ndarray
    to_own99: np.ndarray
    to_opt99: np.ndarray
    from_learner: np.ndarray
    from_seeding: np.ndarray


@dataclass
class ProblemResult:
    """Every variant on one problem.

    Attributes:
        optimum: what shares of the optimum divide by (the optimum, else the best known).
        tests: ``"final"``/``"auc"`` -> EGRL against EA ``(U, p)``; empty without both.
    """

    problem: str
    optimum: float
    optimum_proven: bool
    budget: int
    variants: dict[str, VariantResult]
    tests: dict[str, tuple[float, float]]


def reaching(run: Run, level: float) -> float:
    """Paid samples when the run's best speedup first reached ``level`` (inf: never)."""
    return samples_to_level(run.iterations, run.best_speedup, level)


def descent_shares(run: Run) -> tuple[float, float]:
    """Share of generations whose champion descends from the learner / from seeding."""
    rows = RunDir(run.path).read_metrics_rows()
    labels = [x for x in (r.get("champion_descent") or "" for r in rows) if x]
    if not labels:
        return math.nan, math.nan
    learner = np.mean(["learner" in x for x in labels])
    seeding = np.mean(["seeding" in x for x in labels])
    return float(learner), float(seeding)


def variant_result(variant: str, runs: Sequence[Run], optimum: float, budget: int) -> VariantResult:
    """A variant's arrays over its runs; the AUC is read on 201 points of ``[0, budget]``."""
    grid = np.linspace(0, budget, 201)
    shares = np.array([descent_shares(r) for r in runs]).reshape(-1, 2)
    return VariantResult(
        variant=variant,
        runs=list(runs),
        final=np.array([r.final_speedup for r in runs]),
        auc=np.array([step_values(r.iterations, r.best_speedup, grid).mean() for r in runs]),
        to_own99=np.array([reaching(r, 0.99 * r.final_speedup) for r in runs]),
        to_opt99=np.array([reaching(r, 0.99 * optimum) for r in runs]),
        from_learner=shares[:, 0],
        from_seeding=shares[:, 1],
    )


def finished_runs(root: Path) -> list[Run]:
    """The runs under ``root`` that spent their budget (the others are logged, left out)."""
    found = read_runs(root)
    for p in found.problems:
        log.warning("%s", p)
    runs = [r for r in found.runs if r.complete]
    for r in found.runs:
        if not r.complete:
            log.warning("%s: stopped early; left out (the ablation compares full budgets)", r.path)
    return runs


def problem_result(cfg: DictConfig, out: Path, problem: str) -> ProblemResult | None:
    """Every variant's result on ``problem``; None when it has no finished run."""
    by_variant = {v: finished_runs(out / group(problem, v)) for v in cfg.variants}
    runs = [r for rs in by_variant.values() for r in rs]
    if not runs:
        log.warning("%s: no finished run", problem)
        return None
    solved, proven = solver_optimum(runs, out / problem, cfg.optimum_time_s)
    finals = [r.final_speedup for r in runs]
    optimum, _ = best_known(solved, proven, finals)
    budget = max(r.budget for r in runs)
    summary = {v: variant_result(v, rs, optimum, budget) for v, rs in by_variant.items() if rs}
    tests = {}
    if all(v in summary for v in TESTED):
        a, b = (summary[v] for v in TESTED)
        tests = {key: mann_whitney(getattr(a, key), getattr(b, key)) for key in TEST_KEYS}
    return ProblemResult(problem, optimum, proven, budget, summary, tests)


def analyse(cfg: DictConfig, out: Path) -> list[ProblemResult]:
    """Read every problem's runs, solve (or read) its optimum and summarise each variant."""
    results = [problem_result(cfg, Path(out), p) for p in cfg.problems]
    return [r for r in results if r is not None]


# ------------------------------------------------------------------ report
HEADER = (
    "variant",
    "runs",
    "final speedup",
    "share of optimum",
    "mean over budget (AUC)",
    "samples to 99% of own final",
    "samples to 99% of optimum",
    "champion from learner",
    "champion from seeding",
)


def table_markdown(result: ProblemResult) -> str:
    """One row per variant."""
    rows = [
        (
            v.variant,
            len(v.runs),
            format_mean_std(v.final),
            format_mean_std(v.final / result.optimum, "{:.2%}"),
            format_mean_std(v.auc),
            format_samples(v.to_own99, spread=False),
            format_samples(v.to_opt99, spread=False),
            format_share(v.from_learner),
            format_share(v.from_seeding),
        )
        for v in result.variants.values()
    ]
    return markdown_table(HEADER, rows)


def plot_problem(result: ProblemResult, path: str | Path) -> Path:
    """Figure-3-style curves: mean ± std of the best speedup against paid samples."""
    fig, ax = pyplot().subplots(figsize=(6.5, 4.2), dpi=120)
    for v in result.variants.values():
        grid = common_grid(v.runs)
        mean, std = mean_band(v.runs, grid)
        (line,) = ax.plot(grid, mean, label=f"{v.variant} ({len(v.runs)})")
        ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.15)
    ax.axhline(1.0, color="grey", linestyle="--", label="native compiler")
    label = "optimum" if result.optimum_proven else "best known"
    ax.axhline(result.optimum, color="black", linestyle=":", label=label)
    ax.set_xlabel("paid samples (hardware evaluations)")
    ax.set_ylabel("best speedup over the compiler")
    ax.set_title(result.problem)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return save_figure(fig, path)


def intro(seeds: int, machine: str) -> str:
    return (
        f"Each variant at the same budget of paid samples, {seeds} seeds per variant and "
        "problem" + (f", on {machine}" if machine else "") + ". Speedups are over each "
        "target's native compiler; `share of optimum` divides by the optimum of the same "
        "cost model (`env.optimum()`; 'best known' where not proven). Samples to a level: "
        "median over the runs that reached it (how many did). `champion from learner / "
        "seeding`: share of generations whose population champion descends from a migrated "
        "learner / from a chromosome seeded from a GNN. EGRL against EA: two-sided "
        "Mann-Whitney U over seeds."
    )


def problem_markdown(result: ProblemResult, figure: str) -> list[str]:
    """A problem's heading, table, test and figure."""
    tests = ", ".join(
        f"{key}: U = {u:.1f}, p = {p:.3f}" for key, (u, p) in result.tests.items() if np.isfinite(p)
    )
    kind = "optimum" if result.optimum_proven else "best known"
    return [
        f"### {result.problem} (budget {result.budget}, {kind} {result.optimum:.4f}x)",
        "",
        table_markdown(result),
        "",
        f"EGRL against EA: {tests or 'not available'}.",
        "",
        f"![{result.problem}]({figure})",
        "",
    ]


def render(cfg: DictConfig, result: list[ProblemResult], page: Page) -> str:
    """The ``ablation`` section; one figure per problem, ``ablation_<problem>.png``."""
    lines = ["## The learner's contribution (ablation)", "", intro(cfg.seeds, page.machine), ""]
    for r in result:
        png = plot_problem(r, page.figure(f"ablation_{r.problem}.png"))
        lines += problem_markdown(r, page.link(png))
    lines += reproduce(page.command)
    return "\n".join(lines)
