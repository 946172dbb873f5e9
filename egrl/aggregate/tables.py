"""Tables of final speedups: markdown for people, CSV for programs."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

from egrl.aggregate.optimum import OptimumInfo
from egrl.aggregate.stats import MeanStd, format_mean_std
from egrl.aggregate.summary import BASE_KEYS, GroupStats, group_order
from egrl.runs import Problem

FINAL_COLUMNS = (
    "n",
    "seeds",
    "budget",
    "mean",
    "std",
    "min",
    "max",
    "wall_s_mean",
    "optimum_speedup",
)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]], align: str = "") -> str:
    """A markdown table.

    Args:
        header: the column titles.
        rows: one sequence of cells per row (``str()`` of each).
        align: one letter per column, ``l`` (``---``) or ``r`` (``---:``); missing letters
            mean ``l`` for the first column and ``r`` for the others.
    """
    marks = []
    for i in range(len(header)):
        side = align[i] if i < len(align) else ("l" if i == 0 else "r")
        marks.append("---:" if side == "r" else "---")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def mean_std(mean: float, std: float, digits: int = 3) -> str:
    """``1.234 ± 0.056``; a single sample (NaN std) has no ± part; ``–`` for no mean."""
    return format_mean_std(MeanStd(mean, std, 1), f"{{:.{digits}f}}", "–")


def _optimum_cell(opt: OptimumInfo | None) -> str:
    return "not computed" if opt is None else f"{opt.speedup:.3f} ({opt.tag})"


def final_table(groups: Sequence[GroupStats], optimum: dict[str, OptimumInfo]) -> str:
    """Markdown: one row per group with mean ± std over seeds, n, wall time, the optimum."""
    if not groups:
        return "_no finished runs_"
    keys = groups[0].keys
    extra = [k for k in keys if k not in BASE_KEYS]
    head = [
        "workload",
        "agent",
        *extra,
        "budget",
        "n",
        "final speedup (mean ± std)",
        "min – max",
        "wall s (mean)",
        "optimum",
        "% of optimum",
    ]
    rows = []
    for g in groups:
        opt = optimum.get(g.get("workload"))
        share = f"{100 * g.mean / opt.speedup:.1f}%" if opt is not None else "–"
        cells = [
            g.get("workload"),
            g.get("agent"),
            *[g.get(k) for k in extra],
            str(g.budget),
            str(g.n),
            mean_std(g.mean, g.std),
            f"{g.finals.min():.3f} – {g.finals.max():.3f}",
            f"{g.wall_mean:.1f}",
            _optimum_cell(opt),
            share,
        ]
        rows.append(cells)
    return markdown_table(head, rows, "ll" + "l" * len(extra))


def pivot_table(
    groups: Sequence[GroupStats],
    optimum: dict[str, OptimumInfo],
    workloads: Sequence[str],
    value: str = "speedup",
) -> str:
    """Markdown: one row per agent (and setting), one column per workload.

    ``value="speedup"``: mean ± std (n) of the final speedup, with an ``optimum`` row;
    ``value="wall"``: mean wall seconds per run.
    """
    labels = list(dict.fromkeys(g.label for g in groups))
    cell = {(g.label, g.get("workload")): g for g in groups}
    rows = []
    for label in labels:
        row = [label]
        for w in workloads:
            g = cell.get((label, w))
            if g is None:
                row.append("–")
            elif value == "wall":
                row.append(f"{g.wall_mean:.1f}")
            else:
                row.append(f"{mean_std(g.mean, g.std)} (n={g.n})")
        rows.append(row)
    if value == "speedup":
        rows.append(["**optimum**", *(_optimum_cell(optimum.get(w)) for w in workloads)])
    return markdown_table(["agent", *workloads], rows)


def optimum_table(optimum: dict[str, OptimumInfo]) -> str:
    """Markdown: the optimum per workload with its proof status and source."""
    rows = []
    for w in sorted(optimum, key=lambda w: group_order({"workload": w})):
        o = optimum[w]
        wall = f"{o.wall_s:.1f}" if math.isfinite(o.wall_s) else "–"
        rows.append([w, f"{o.speedup:.4f}", o.tag, wall, o.source])
    head = ["workload", "optimum speedup", "proven / gap", "solver wall s", "source"]
    return markdown_table(head, rows, "lrlrl")


def problems_list(problems: Sequence[Problem]) -> str:
    """Markdown bullet list of the runs left out (or "none")."""
    if not problems:
        return "none"
    return "\n".join(f"- `{p.path}`: {p.reason}" for p in problems)


def write_final_csv(
    groups: Sequence[GroupStats], optimum: dict[str, OptimumInfo], path: str | Path
) -> Path:
    """One row per group: its keys, then :data:`FINAL_COLUMNS`."""
    path = Path(path)
    keys = groups[0].keys if groups else tuple(BASE_KEYS)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*keys, *FINAL_COLUMNS])
        for g in groups:
            opt = optimum.get(g.get("workload"))
            writer.writerow(
                [
                    *g.values,
                    g.n,
                    " ".join(map(str, g.seeds)),
                    g.budget,
                    repr(g.mean),
                    repr(g.std),
                    repr(float(g.finals.min())),
                    repr(float(g.finals.max())),
                    f"{g.wall_mean:.3f}",
                    "" if opt is None else repr(opt.speedup),
                ]
            )
    return path
