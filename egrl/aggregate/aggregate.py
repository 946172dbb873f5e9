"""One study's outputs from its run directories: curves, final table, Figure 3, optimum.

    agg = aggregate(["multirun/compare/20261121-101500"], out_dir="results/compare")

writes into ``out_dir``:

* ``curves.csv``: every run's best speedup against iterations (long format);
* ``final.csv``: per group (hardware model, workload, agent and every key in which runs
  differ but the seed: :func:`~egrl.aggregate.summary.grouping_keys`), final speedup
  mean/std over seeds;
* ``summary.md``: the same as markdown, the optimum per target, the runs left out;
* ``figure3_<workload>.png``: mean ± one std over seeds against iterations;
* ``optimum.json``: the cached optimum solves.

Runs of different hardware models, hardware parameters, rewards or workload files are
never averaged together; a folder of unrelated runs is no sweep, and gives one line
saying so instead of a line per empty cell of its grid.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from egrl.aggregate.curves import write_curves
from egrl.aggregate.figures import agent_colors, plot_workload
from egrl.aggregate.optimum import OptimumInfo, optimum_by_target, target_key
from egrl.aggregate.summary import (
    PAPER_WORKLOADS,
    SHOWN_KEYS,
    GroupStats,
    constant_keys,
    grouping_keys,
    missing_runs,
    split_reference,
    summarize,
)
from egrl.aggregate.tables import (
    final_table,
    optimum_table,
    problems_list,
    problems_summary,
    write_final_csv,
)
from egrl.rundir import workload_label
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
    #: the optimum of each hardware target (:func:`egrl.aggregate.optimum.target_key`)
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
        """The grouping keys besides workload and agent (``hwmodel`` first)."""
        return [k for k in self.keys if k not in SHOWN_KEYS]

    @property
    def constant(self) -> dict[str, str]:
        """The grouping keys every group shares, with their value (``hwmodel``: ``nnpi``)."""
        return constant_keys(self.groups)

    def optima_of(self, workload: str) -> list[OptimumInfo]:
        """The optimum of every target of ``workload``'s runs."""
        keys = dict.fromkeys(target_key(r) for r in self.runs if r.workload == workload)
        return [self.optimum[k] for k in keys if k in self.optimum]


def aggregate(
    roots: Sequence[str | Path],
    out_dir: str | Path | None = None,
    keys: Sequence[str] | None = None,
    optimum_time_s: float = 60.0,
    solve_optimum: bool = True,
    optimum_workers: int = 2,
    figures: bool = True,
    figure_dir: str | Path | None = None,
    leave_out: Callable[[Run], str | None] | None = None,
) -> Aggregate:
    """Read every run under ``roots`` and (if ``out_dir``) write the study's outputs.

    Args:
        roots: multirun directories, run directories, or any folder above them.
        out_dir: where the outputs go (None: compute only).
        keys: grouping keys to use first besides hardware model, workload and agent; the
            keys in which runs of a group still differ are added after them.
        optimum_time_s: solver limit per workload when the optimum is not known yet.
        solve_optimum: solve missing optima (else they are "not computed").
        optimum_workers: solver threads for those solves.
        figures: draw the Figure-3 panels.
        figure_dir: where the PNGs go (default ``out_dir``).
        leave_out: says why a finished run does not belong (a study's plan: another
            hardware model, say), or None; such runs are left out with that reason.
    """
    found = collect_runs(roots)
    problems = list(found.problems)
    if leave_out is not None:
        kept = []
        for run in found.runs:
            why = leave_out(run)
            if why is None:
                kept.append(run)
            else:
                problems.append(Problem(run.path, why))
        found.runs = kept
    runs, reference = split_reference(found.runs)
    group_keys = grouping_keys(runs, keys or ())
    groups = summarize(runs, group_keys)
    known = split_reference(found.incomplete + found.failed)[0]
    for root in map(Path, roots):  # each sweep is its own grid
        mine = [r for r in runs if _under(r.path, root)]
        others = [r for r in known if _under(r.path, root)]
        if is_one_sweep([*mine, *others]):
            problems += missing_runs(mine, group_keys, others, where=str(root))
    out = Path(out_dir) if out_dir is not None else None
    optimum = optimum_by_target(
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
    if problems:
        log.warning("%s (listed in summary.md)", problems_summary(problems))
    if out is None:
        return agg
    out.mkdir(parents=True, exist_ok=True)
    write_curves([*runs, *reference, *found.incomplete], out / "curves.csv", agg.extra_keys)
    write_final_csv(groups, optimum, out / "final.csv")
    if figures and runs:
        agg.figures = draw_figures(agg, Path(figure_dir) if figure_dir is not None else out)
    (out / "summary.md").write_text(summary_markdown(agg), encoding="utf-8")
    return agg


def is_one_sweep(runs: Sequence[Run]) -> bool:
    """The runs are the jobs of one sweep: their directories sit side by side in one
    directory (Hydra's ``hydra.sweep.dir``). Runs in ``runs/<hwmodel>/<workload>/...``
    are not, and have no grid of their own to miss cells of."""
    return len({r.path.parent for r in runs}) <= 1


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def draw_figures(agg: Aggregate, figure_dir: Path) -> dict[str, Path]:
    """One Figure-3 panel per workload: ``figure_dir/figure3_<workload>.png`` (a workload
    file by its name, :func:`egrl.rundir.workload_label`), one optimum line per target."""
    figure_dir.mkdir(parents=True, exist_ok=True)
    colors = agent_colors(agg.agents)
    shown = agg.groups[0].shown_keys if agg.groups else None
    out = {}
    for w in agg.workloads:
        members = [r for r in agg.runs if r.workload == w]
        path = figure_dir / f"figure3_{workload_label(w)}.png"
        out[w] = plot_workload(members, agg.keys, path, agg.optima_of(w), colors, shown=shown)
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
        *same_in_every_group(agg),
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
    lines += ["## Runs left out", ""]
    if agg.problems:
        lines += [problems_summary(agg.problems) + ".", ""]
    lines += [problems_list(agg.problems), ""]
    return "\n".join(lines)


def same_in_every_group(agg: Aggregate) -> list[str]:
    """The line naming the grouping keys all groups share (not columns of the table)."""
    same = agg.constant
    if not same:
        return []
    return ["Same in every group: " + ", ".join(f"{k}={v}" for k, v in same.items()) + "."]
