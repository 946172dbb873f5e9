"""Figure 5 (PNG) and Table 2 (markdown section) of the multi-chip study.

:func:`write_report` reads finished runs (any roots :func:`egrl.experiments.collect_runs`
accepts), builds the geomean curves of :mod:`egrl.experiments.mcm_curves` over the given
test graphs and writes ``figure5.png``, ``curves.csv`` (every method's mean curve) and
``mcm_study.md`` (Table 2, the limits, the runs left out) into one directory.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from egrl.experiments.mcm_curves import (  # noqa: E402
    LevelRow,
    MethodCurve,
    default_levels,
    level_table,
    limit_geomeans,
    method_curves,
    method_label,
    seed_curves,
)
from egrl.experiments.runs import Problem, collect_runs  # noqa: E402


def plot_figure5(
    curves: Sequence[MethodCurve], path: str | Path, limits: Mapping[str, float], title: str = ""
) -> Path:
    """Geomean improvement over greedy against paid samples (log x), mean ± 1 std over seeds."""
    path = Path(path)
    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=120)
    cmap = plt.get_cmap("tab10")
    for i, c in enumerate(curves):
        ok = [j for j in range(len(c.x)) if math.isfinite(c.mean[j])]
        x, mean, std = c.x[ok], c.mean[ok], c.std[ok]
        label = f"{method_label(c.method)} (n={len(c.seeds)})"
        ax.step(x, mean, where="post", color=cmap(i % 10), label=label, linewidth=1.5)
        ax.plot(x[-1:], mean[-1:], "o", color=cmap(i % 10), markersize=3)  # end of the budget
        ax.fill_between(x, mean - std, mean + std, step="post", color=cmap(i % 10), alpha=0.15)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="greedy heuristic")
    styles = {"dp": ("-.", "contiguous DP"), "optimum": (":", "CP-SAT optimum")}
    for key, (style, name) in styles.items():
        value = limits.get(key, math.nan)
        if math.isfinite(value):
            ax.axhline(
                value, color="black", linestyle=style, linewidth=1, label=f"{name} {value:.3f}"
            )
    ax.set_xscale("log")
    ax.set_xlabel("paid samples (hardware evaluations)")
    ax.set_ylabel("geomean throughput improvement over greedy")
    ax.set_title(title or "test graphs: mean ± 1 std over seeds")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="best", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_mean_curves(curves: Sequence[MethodCurve], path: str | Path) -> Path:
    """``method, samples, mean, std, seeds``: one row per point of each mean curve."""
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "samples", "geomean_mean", "geomean_std", "seeds"])
        for c in curves:
            for x, m, s in zip(c.x, c.mean, c.std):
                writer.writerow([c.method, int(x), repr(float(m)), repr(float(s)), len(c.seeds)])
    return path


def _cell(cell) -> str:
    if cell.samples is None:
        return f"N.A. ({cell.reached}/{cell.seeds})"
    if cell.reduction is None:
        red = "-"
    else:
        red = f"{'>' if cell.reduction_bound else ''}{cell.reduction:.2f}x"
    return f"{cell.samples} ({red}; {cell.reached}/{cell.seeds})"


def table2_markdown(
    rows: Sequence[LevelRow], levels: Sequence[tuple[str, float]], reference: str
) -> str:
    """Table 2 in markdown: one row per method, one column per level, and the final geomean."""
    head = " | ".join(f">= {v:.4f}x ({name})" for name, v in levels)
    lines = [
        f"| method | {head} | geomean at end (mean ± std) | samples | seeds |",
        "|---|" + "---:|" * (len(levels) + 3),
    ]
    for r in rows:
        cells = " | ".join(_cell(c) for c in r.cells)
        std = f" ± {r.final_std:.4f}" if r.seeds > 1 and math.isfinite(r.final_std) else ""
        lines.append(
            f"| {method_label(r.method)} | {cells} | {r.final_mean:.4f}{std} | {r.samples} | {r.seeds} |"
        )
    return "\n".join(lines)


def limits_markdown(limits: Mapping[str, Mapping], workloads: Sequence[str]) -> str:
    lines = [
        "| test graph | nodes | contiguous DP / greedy | optimum / greedy | bound / greedy "
        "| optimum status | solver s |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for w in workloads:
        r = limits[w]
        lines.append(
            f"| {w} | {r['nodes']} | {r['dp']:.4f} | {r['optimum']:.4f} | "
            f"{r.get('bound', math.nan):.4f} | {str(r['status']).lower()} | "
            f"{r['solve_wall_s']:.1f} |"
        )
    return "\n".join(lines)


@dataclass
class StudyReport:
    """What :func:`write_report` computed and where it wrote it."""

    curves: list[MethodCurve]
    rows: list[LevelRow]
    levels: list[tuple[str, float]]
    limit_geomean: dict
    problems: list[Problem] = field(default_factory=list)
    paths: dict[str, Path] = field(default_factory=dict)


def write_report(
    roots: Sequence[str | Path],
    workloads: Sequence[str],
    limits: Mapping[str, Mapping],
    out_dir: str | Path,
    reference: str = "pg",
    levels: Sequence[tuple[str, float]] | None = None,
    banner: str = "",
    commands: Sequence[str] = (),
) -> StudyReport:
    """Figure 5, Table 2 and the mean curves of the runs under ``roots`` on ``workloads``.

    Args:
        roots: directories holding the runs (sweeps, zero-shot runs).
        workloads: the test graphs every geomean is taken over.
        limits: per workload ``{"dp": ..., "optimum": ..., ...}`` (:mod:`mcm_limits`).
        out_dir: where ``figure5.png``, ``curves.csv`` and ``mcm_study.md`` go.
        reference: the method the reductions are relative to (RL from scratch).
        levels: ``(name, value)`` improvement levels (default :func:`default_levels`).
        banner: a line stated under the heading (e.g. the scale of the study).
        commands: the commands that made the runs, stated under "Reproduce".
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    found = collect_runs(roots)
    seeds, missing = seed_curves(found.runs, workloads)
    curves = method_curves(seeds)
    geo = limit_geomeans(limits, workloads)
    levels = list(levels) if levels else default_levels(geo["dp"], geo["optimum"])
    rows = level_table(curves, [v for _, v in levels], reference)
    paths = {
        "png": plot_figure5(curves, out_dir / "figure5.png", geo),
        "csv": write_mean_curves(curves, out_dir / "curves.csv"),
    }
    problems = [*found.problems, *missing]
    text = [
        "## Multi-chip partitioning: sample efficiency on the mcm87 test graphs",
        "",
        *([f"> {banner}", ""] if banner else []),
        f"Geomean over {len(workloads)} test graphs of the best throughput improvement over "
        "the greedy heuristic (`best_speedup`) against paid samples; mean ± 1 std over seeds "
        "(the multi-chip paper's Figure 5). Every proposal is repaired by the constraint "
        "solver and scored by its repair (`reward=repaired`).",
        "",
        "![Figure 5](figure5.png)",
        "",
        "Samples to reach each geomean level on the mean curve (the paper's Table 2); in "
        f"brackets the reduction against {method_label(reference)} (its samples over the "
        "method's; `>`: it never reached the level, so its whole budget is a lower bound) "
        "and how many seeds reach the level on their own curve. N.A.: the mean curve never "
        "reaches it. Levels: half and 90% of the optimum's room above greedy, the contiguous "
        "DP's and the optimum's geomean.",
        "",
        table2_markdown(rows, levels, reference),
        "",
        f"Limits (geomean over the test graphs): contiguous DP {geo['dp']:.4f}x, "
        f"CP-SAT optimum {geo['optimum']:.4f}x the greedy heuristic. Where a solve is not "
        "proven (status `feasible`), the optimum column is only the best partition CP-SAT "
        "found in its time, and `bound` its upper bound on the improvement.",
        "",
        limits_markdown(limits, workloads),
        "",
    ]
    if commands:
        text += ["### Reproduce", "", "```bash", *commands, "```", ""]
    text += ["### Runs left out", ""]
    text += [f"- {p}" for p in problems] or ["none"]
    md = out_dir / "mcm_study.md"
    md.write_text("\n".join(text) + "\n", encoding="utf-8")
    paths["md"] = md
    return StudyReport(curves, rows, levels, geo, problems, paths)
