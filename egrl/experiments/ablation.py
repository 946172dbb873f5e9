"""The learner's ablation: what each half of EGRL contributes, at equal budget.

Variants (one Hydra multirun each, ``seed=range(S)``):

==================== =====================================================
``egrl``              the full agent: population, learner, migration
``egrl-paper-learner`` the same with EGRL's original learner (``learner=sac-paper``)
``ea``                the population alone (no learner)
``learner``           the learner alone (``agent=pg``: no population)
``egrl-no-boltzmann`` EGRL with a population of GNNs only
==================== =====================================================

on problems with room between the native compiler and the optimum (``PROBLEMS``). Each
run's best speedup is read against the problem's optimum (``env.optimum()``, cached in
``OUT/optimum.json``); the report gives the final share of the optimum, the paid samples to
reach 99% of the run's own final value and of the optimum, how often the population's
champion descends from a migrated learner or from a chromosome seeded from a GNN
(``champion_descent`` in ``metrics.csv``), and a two-sided Mann-Whitney U test of EGRL
against EA per problem, on the final speedup and on the mean best speedup over the budget
(the area under the curve, which rewards reaching a value with fewer samples).
"""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu

from egrl.experiments.curves import common_grid, mean_band, step_values
from egrl.experiments.launch import launch
from egrl.experiments.optimum import optimum_speedups
from egrl.experiments.runs import Run, collect_runs

log = logging.getLogger(__name__)

VARIANTS: dict[str, tuple[str, ...]] = {
    "egrl": ("agent=egrl",),
    "egrl-paper-learner": ("agent=egrl", "learner=sac-paper"),
    "ea": ("agent=ea",),
    "learner": ("agent=pg",),
    "egrl-no-boltzmann": ("agent=egrl", "population.boltzmann_fraction=0"),
}

PROBLEMS: dict[str, tuple[str, ...]] = {
    "nnpi-resnet101": ("hwmodel=nnpi", "workload=resnet101"),
    "nnpi-sequential-resnet101": ("hwmodel=nnpi-sequential", "workload=resnet101"),
    "mcm-mobilenet-d50-w50-k5-e4": (
        "hwmodel=mcm",
        "reward=repaired",
        "workload=mobilenet-d50-w50-k5-e4",
    ),
}


def run_ablation(
    out: str | Path,
    problems: Sequence[str],
    variants: Sequence[str],
    seeds: int,
    budget: int,
    n_jobs: int = 2,
    overrides: Sequence[str] = (),
) -> list[Path]:
    """Launch (or continue: ``continue_runs=true``) one multirun per problem and variant.

    Runs land in ``OUT/<problem>/<variant>/<override dirname>``.
    """
    roots = []
    for problem in problems:
        for variant in variants:
            root = Path(out) / problem / variant
            args = [
                *PROBLEMS[problem],
                *VARIANTS[variant],
                f"seed=range({seeds})",
                f"budget={budget}",
                "continue_runs=true",
                *overrides,
            ]
            launch("parallel", args, root, n_jobs)
            roots.append(root)
    return roots


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


def first_reaching(run: Run, level: float) -> float:
    """Paid samples when the run's best speedup first reaches ``level`` (inf: never)."""
    hit = np.flatnonzero(run.best_speedup >= level - 1e-12)
    return float(run.iterations[hit[0]]) if hit.size else math.inf


def descent_shares(run: Run) -> tuple[float, float]:
    """Share of generations whose champion descends from the learner / from seeding."""
    with open(run.path / "metrics.csv", newline="", encoding="utf-8") as f:
        labels = [r.get("champion_descent") or "" for r in csv.DictReader(f)]
    labels = [x for x in labels if x]
    if not labels:
        return math.nan, math.nan
    learner = np.mean(["learner" in x for x in labels])
    seeding = np.mean(["seeding" in x for x in labels])
    return float(learner), float(seeding)


def variant_result(variant: str, runs: Sequence[Run], optimum: float, budget: int) -> VariantResult:
    grid = np.linspace(0, budget, 201)
    final = np.array([r.final_speedup for r in runs])
    auc = np.array([step_values(r.iterations, r.best_speedup, grid).mean() for r in runs])
    shares = np.array([descent_shares(r) for r in runs]).reshape(-1, 2)
    return VariantResult(
        variant=variant,
        runs=list(runs),
        final=final,
        auc=auc,
        to_own99=np.array([first_reaching(r, 0.99 * r.final_speedup) for r in runs]),
        to_opt99=np.array([first_reaching(r, 0.99 * optimum) for r in runs]),
        from_learner=shares[:, 0],
        from_seeding=shares[:, 1],
    )


@dataclass
class ProblemResult:
    problem: str
    optimum: float
    optimum_proven: bool
    budget: int
    variants: dict[str, VariantResult]
    tests: dict[str, tuple[float, float]]  # "final"/"auc" -> (U statistic, p-value)


def mann_whitney(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sided Mann-Whitney U of ``a`` against ``b`` (NaN when either is empty)."""
    if len(a) == 0 or len(b) == 0:
        return math.nan, math.nan
    res = mannwhitneyu(a, b, alternative="two-sided")
    return float(res.statistic), float(res.pvalue)


def analyse(
    out: str | Path,
    problems: Sequence[str],
    variants: Sequence[str],
    optimum_time_s: float = 60.0,
) -> list[ProblemResult]:
    """Read every problem's runs, solve (or read) its optimum and summarise each variant."""
    results = []
    for problem in problems:
        by_variant: dict[str, list[Run]] = {}
        for variant in variants:
            found = collect_runs([Path(out) / problem / variant])
            for p in found.problems:
                log.warning("%s/%s: %s", problem, variant, p)
            by_variant[variant] = [r for r in found.runs if r.complete]
        runs = [r for rs in by_variant.values() for r in rs]
        if not runs:
            log.warning("%s: no finished run", problem)
            continue
        opt = optimum_speedups(runs, cache_dir=Path(out) / problem, time_limit_s=optimum_time_s)
        info = opt.get(runs[0].workload)
        optimum = reference_speedup(info, runs)
        budget = max(r.budget for r in runs)
        summary = {v: variant_result(v, rs, optimum, budget) for v, rs in by_variant.items() if rs}
        tests = {}
        if "egrl" in summary and "ea" in summary:
            tests = {
                key: mann_whitney(getattr(summary["egrl"], key), getattr(summary["ea"], key))
                for key in ("final", "auc")
            }
        results.append(
            ProblemResult(problem, optimum, bool(info and info.proven), budget, summary, tests)
        )
    return results


def reference_speedup(info, runs: Sequence[Run]) -> float:
    """What shares of the optimum divide by: the proven optimum, else the best known
    value, the higher of the solver's unproven answer and the best map any run found (a
    solver stopped by its time limit can be below a run: e.g. on ``nnpi`` with
    ``native=sequential`` it returned the compiler's own map)."""
    if info is not None and info.proven:
        return float(info.speedup)
    known = [r.final_speedup for r in runs] + ([info.speedup] if info is not None else [])
    return float(max(known))


def _mean_std(x: np.ndarray, fmt: str = "{:.4f}") -> str:
    x = x[np.isfinite(x)]
    if x.size == 0:
        return "-"
    std = x.std(ddof=1) if x.size > 1 else 0.0
    return f"{fmt.format(x.mean())} ± {fmt.format(std)}"


def _samples(x: np.ndarray) -> str:
    """Median over the runs that got there, and how many did."""
    reached = x[np.isfinite(x)]
    if reached.size == 0:
        return f"never (0/{x.size})"
    return f"{np.median(reached):.0f} ({reached.size}/{x.size})"


def _share(x: np.ndarray) -> str:
    x = x[np.isfinite(x)]
    return "-" if x.size == 0 else f"{100 * x.mean():.0f}%"


def table_markdown(result: ProblemResult) -> str:
    rows = [
        "| variant | runs | final speedup | share of optimum | mean over budget (AUC) "
        "| samples to 99% of own final | samples to 99% of optimum "
        "| champion from learner | champion from seeding |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in result.variants.values():
        rows.append(
            f"| {v.variant} | {len(v.runs)} | {_mean_std(v.final)} "
            f"| {_mean_std(v.final / result.optimum, '{:.2%}')} | {_mean_std(v.auc)} "
            f"| {_samples(v.to_own99)} | {_samples(v.to_opt99)} "
            f"| {_share(v.from_learner)} | {_share(v.from_seeding)} |"
        )
    return "\n".join(rows)


def plot_problem(result: ProblemResult, path: str | Path) -> Path:
    """Figure-3-style curves: mean ± std of the best speedup against paid samples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(6.5, 4.2), dpi=120)
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
    fig.savefig(path)
    plt.close(fig)
    return path


def report_markdown(
    results: Sequence[ProblemResult],
    figures: Mapping[str, str],
    seeds: int,
    commands: Sequence[str] = (),
    machine: str = "",
) -> str:
    lines = [
        "## The learner's contribution (ablation)",
        "",
        f"Each variant at the same budget of paid samples, {seeds} seeds per variant and "
        "problem" + (f", on {machine}" if machine else "") + ". Speedups are over each "
        "target's native compiler; `share of optimum` divides by the optimum of the same "
        "cost model (`env.optimum()`; 'best known' where not proven). Samples to a level: "
        "median over the runs that reached it (how many did). `champion from learner / "
        "seeding`: share of generations whose population champion descends from a migrated "
        "learner / from a chromosome seeded from a GNN. EGRL against EA: two-sided "
        "Mann-Whitney U over seeds.",
        "",
    ]
    for r in results:
        tests = ", ".join(
            f"{key}: U = {u:.1f}, p = {p:.3f}" for key, (u, p) in r.tests.items() if np.isfinite(p)
        )
        lines += [
            f"### {r.problem} (budget {r.budget}, "
            + (f"optimum {r.optimum:.4f}x" if r.optimum_proven else f"best known {r.optimum:.4f}x")
            + ")",
            "",
            table_markdown(r),
            "",
            f"EGRL against EA: {tests or 'not available'}.",
            "",
            f"![{r.problem}]({figures[r.problem]})",
            "",
        ]
    if commands:
        lines += ["Reproduce:", "", "```", *commands, "```", ""]
    return "\n".join(lines)
