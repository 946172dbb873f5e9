"""Tables of final speedups: markdown for people, CSV for programs."""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from egrl.aggregate.optimum import OptimumInfo
from egrl.aggregate.stats import MeanStd, format_mean_std
from egrl.aggregate.summary import BASE_KEYS, SHOWN_KEYS, GroupStats, group_order
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


def group_optimum(g: GroupStats, optimum: dict[str, OptimumInfo]) -> OptimumInfo | None:
    """The optimum of a group's target (keyed by target, :func:`optimum_by_target`), or of
    its workload (keyed by workload, :func:`~egrl.aggregate.optimum.optimum_speedups`)."""
    found = optimum.get(g.target) if g.target else None
    return found if found is not None else optimum.get(g.get("workload"))


def final_table(groups: Sequence[GroupStats], optimum: dict[str, OptimumInfo]) -> str:
    """Markdown: one row per group with mean ± std over seeds, n, wall time, the optimum.

    Columns: workload, agent and every other grouping key whose values differ between
    the groups (the hardware model where several are there), then the numbers; the
    budget is a key column when groups differ in it, else a column of its own.
    """
    if not groups:
        return "_no finished runs_"
    shown = groups[0].shown_keys
    extra = [k for k in shown if k not in SHOWN_KEYS]
    budget = [] if "budget" in extra else ["budget"]
    head = [
        "workload",
        "agent",
        *extra,
        *budget,
        "n",
        "final speedup (mean ± std)",
        "min – max",
        "wall s (mean)",
        "optimum",
        "% of optimum",
    ]
    rows = []
    for g in groups:
        opt = group_optimum(g, optimum)
        share = f"{100 * g.mean / opt.speedup:.1f}%" if opt is not None else "–"
        cells = [
            g.get("workload"),
            g.get("agent"),
            *[g.get(k) for k in extra],
            *([str(g.budget)] if budget else []),
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
        optima = []
        for w in workloads:
            found = {
                id(o): o
                for g in groups
                if g.get("workload") == w
                for o in [group_optimum(g, optimum)]
                if o is not None
            }
            optima.append(_optimum_cell(next(iter(found.values()))) if len(found) == 1 else "–")
        rows.append(["**optimum**", *optima])
    return markdown_table(["agent", *workloads], rows)


def optimum_table(optimum: dict[str, OptimumInfo]) -> str:
    """Markdown: the optimum per workload with its proof status and source; with a
    hardware-model column (its name and parameters) when the optima are of several."""

    def hardware(o: OptimumInfo) -> str:
        params = ", ".join(f"{k}={v}" for k, v in sorted(o.params.items()))
        return f"{o.hwmodel} ({params})" if params else o.hwmodel

    several = len({hardware(o) for o in optimum.values()}) > 1
    rows = []
    order = sorted(
        optimum,
        key=lambda k: (hardware(optimum[k]), group_order({"workload": optimum[k].workload})),
    )
    for key in order:
        o = optimum[key]
        wall = f"{o.wall_s:.1f}" if math.isfinite(o.wall_s) else "–"
        where = [hardware(o)] if several else []
        rows.append([*where, o.workload, f"{o.speedup:.4f}", o.tag, wall, o.source])
    head = ["workload", "optimum speedup", "proven / gap", "solver wall s", "source"]
    if several:
        return markdown_table(["hardware model", *head], rows, "llrlrl")
    return markdown_table(head, rows, "lrlrl")


def problem_kind(problem: Problem) -> str:
    """What kind of problem left a run out: its reason up to the first detail
    (``incomplete``, ``missing``, ``no metrics.csv``, ``duplicate``, ``not one sweep``)."""
    reason = problem.reason
    if reason.startswith("duplicate"):
        return "duplicate"
    return re.split(r"[:(;]", reason, maxsplit=1)[0].strip()


def problem_counts(problems: Sequence[Problem]) -> list[tuple[str, int]]:
    """``(kind, count)`` of the runs left out, most frequent first."""
    counts = Counter(problem_kind(p) for p in problems)
    return sorted(counts.items(), key=lambda kc: (-kc[1], kc[0]))


def problems_summary(problems: Sequence[Problem]) -> str:
    """One line: how many runs were left out, by kind (``3 incomplete, 1 duplicate``)."""
    if not problems:
        return "none left out"
    kinds = ", ".join(f"{n} {kind}" for kind, n in problem_counts(problems))
    return f"{len(problems)} left out: {kinds}"


def problems_list(problems: Sequence[Problem], limit: int | None = None) -> str:
    """Markdown bullet list of the runs left out (or "none"); with ``limit``, the first
    ``limit`` of each kind and a count of the rest."""
    if not problems:
        return "none"
    lines, shown = [], Counter()
    for p in problems:
        kind = problem_kind(p)
        shown[kind] += 1
        if limit is None or shown[kind] <= limit:
            lines.append(f"- `{p.path}`: {p.reason}")
    if limit is not None:
        for kind, n in problem_counts(problems):
            if n > limit:
                lines.append(f"- ... and {n - limit} more {kind}")
    return "\n".join(lines)


def write_final_csv(
    groups: Sequence[GroupStats], optimum: dict[str, OptimumInfo], path: str | Path
) -> Path:
    """One row per group: every grouping key (shown in the tables or not), then
    :data:`FINAL_COLUMNS`."""
    path = Path(path)
    keys = groups[0].keys if groups else tuple(BASE_KEYS)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*keys, *FINAL_COLUMNS])
        for g in groups:
            opt = group_optimum(g, optimum)
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
