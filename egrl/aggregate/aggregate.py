"""One study's outputs from its run directories: curves, final table, Figure 3, optimum.

    agg = aggregate(["multirun/compare/20261121-101500"], out_dir="results/compare")

writes into ``out_dir``:

* ``curves.csv``: every run's best speedup against iterations (long format);
* ``final.csv``: per group (workload, agent, swept keys), final speedup mean/std over seeds;
* ``summary.md``: the same as markdown, the optimum per workload, the runs left out;
* ``figure3_<workload>.png``: mean ± one std over seeds against iterations;
* ``optimum.json``: the cached optimum solves.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from egrl.aggregate.curves import write_curves
from egrl.aggregate.figures import agent_colors, plot_workload
from egrl.aggregate.optimum import OptimumInfo, optimum_speedups
from egrl.aggregate.summary import (
    BASE_KEYS,
    PAPER_WORKLOADS,
    GroupStats,
    missing_runs,
    split_reference,
    summarize,
    swept_keys,
)
from egrl.aggregate.tables import (
    final_table,
    optimum_table,
    problems_list,
    write_final_csv,
)
from egrl.runs import Problem, Run, collect_runs

log = logging.getLogger(__name__)


@dataclass
class Aggregate:
    """Everything a study's report is made of."""

    roots: list[Path]
    runs: list[Run]  # finished runs of competing agents
    reference: list[Run]  # finished runs of reference agents (``optimum``)
    incomplete: list[Run]
    problems: list[Problem]
    keys: tuple[str, ...]
    groups: list[GroupStats]
    optimum: dict[str, OptimumInfo]
    figures: dict[str, Path] = field(default_factory=dict)
    out_dir: Path | None = None

    @property
    def workloads(self) -> list[str]:
        present = {r.workload for r in self.runs}
        return [w for w in PAPER_WORKLOADS if w in present] + sorted(present - set(PAPER_WORKLOADS))

    @property
    def agents(self) -> list[str]:
        return sorted({r.agent for r in self.runs})

    @property
    def budgets(self) -> list[int]:
        return sorted({r.budget for r in self.runs})

    @property
    def seeds(self) -> list[int]:
        return sorted({r.seed for r in self.runs})

    @property
    def extra_keys(self) -> list[str]:
        return [k for k in self.keys if k not in BASE_KEYS]


def aggregate(
    roots: Sequence[str | Path],
    out_dir: str | Path | None = None,
    keys: Sequence[str] | None = None,
    optimum_time_s: float = 60.0,
    solve_optimum: bool = True,
    optimum_workers: int = 2,
    figures: bool = True,
    figure_dir: str | Path | None = None,
) -> Aggregate:
    """Read every run under ``roots`` and (if ``out_dir``) write the study's outputs.

    Args:
        roots: multirun directories, run directories, or any folder above them.
        out_dir: where the outputs go (None: compute only).
        keys: extra grouping keys besides workload and agent (default: the swept ones).
        optimum_time_s: solver limit per workload when the optimum is not known yet.
        solve_optimum: solve missing optima (else they are "not computed").
        optimum_workers: solver threads for those solves.
        figures: draw the Figure-3 panels.
        figure_dir: where the PNGs go (default ``out_dir``).
    """
    found = collect_runs(roots)
    runs, reference = split_reference(found.runs)
    extra = list(keys) if keys is not None else swept_keys(runs)
    group_keys = (*BASE_KEYS, *[k for k in extra if k not in BASE_KEYS])
    groups = summarize(runs, group_keys)
    known = split_reference(found.incomplete + found.failed)[0]
    problems = list(found.problems)
    for root in map(Path, roots):  # each sweep is its own grid
        mine = [r for r in runs if _under(r.path, root)]
        problems += missing_runs(mine, group_keys, [r for r in known if _under(r.path, root)])
    out = Path(out_dir) if out_dir is not None else None
    optimum = optimum_speedups(
        runs,
        reference,
        cache_dir=out,
        time_limit_s=optimum_time_s,
        solve=solve_optimum,
        workers=optimum_workers,
    )
    agg = Aggregate(
        roots=[Path(r) for r in roots],
        runs=runs,
        reference=reference,
        incomplete=found.incomplete,
        problems=problems,
        keys=group_keys,
        groups=groups,
        optimum=optimum,
        out_dir=out,
    )
    for p in problems:
        log.warning("left out %s", p)
    if out is None:
        return agg
    out.mkdir(parents=True, exist_ok=True)
    write_curves([*runs, *reference, *found.incomplete], out / "curves.csv", agg.extra_keys)
    write_final_csv(groups, optimum, out / "final.csv")
    if figures and runs:
        agg.figures = draw_figures(agg, Path(figure_dir) if figure_dir is not None else out)
    (out / "summary.md").write_text(summary_markdown(agg), encoding="utf-8")
    return agg


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def draw_figures(agg: Aggregate, figure_dir: Path) -> dict[str, Path]:
    """One Figure-3 panel per workload: ``figure_dir/figure3_<workload>.png``."""
    figure_dir.mkdir(parents=True, exist_ok=True)
    colors = agent_colors(agg.agents)
    out = {}
    for w in agg.workloads:
        members = [r for r in agg.runs if r.workload == w]
        out[w] = plot_workload(
            members, agg.keys, figure_dir / f"figure3_{w}.png", agg.optimum.get(w), colors
        )
    return out


def summary_markdown(agg: Aggregate) -> str:
    """``summary.md``: what was aggregated, the final table, the optimum, what is missing."""
    seeds = ", ".join(map(str, agg.seeds)) or "none"
    lines = [
        "# Study summary",
        "",
        f"Runs under: {', '.join(f'`{r}`' for r in agg.roots)}",
        f"Finished runs: {len(agg.runs)} (+ {len(agg.reference)} optimum-agent runs); "
        f"left out: {len(agg.problems)}.",
        f"Budgets: {', '.join(map(str, agg.budgets)) or 'none'}; seeds: {seeds}; "
        f"grouped by: {', '.join(agg.keys)}.",
        "",
        "## Final speedup over the compiler",
        "",
        "Mean ± sample standard deviation over seeds of each run's best speedup at the end "
        "of its budget.",
        "",
        final_table(agg.groups, agg.optimum),
        "",
        "## Optimum",
        "",
        optimum_table(agg.optimum) if agg.optimum else "not computed",
        "",
    ]
    if agg.figures:
        lines += ["## Figures", ""]
        for w, path in agg.figures.items():
            rel = path.relative_to(agg.out_dir) if agg.out_dir in path.parents else path
            lines += [f"![{w}]({rel.as_posix()})", ""]
    lines += ["## Runs left out", "", problems_list(agg.problems), ""]
    return "\n".join(lines)
