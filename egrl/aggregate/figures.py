"""Figure 3 of the EGRL paper: best speedup over the compiler against iterations.

One figure per workload; one line per group (agent, plus any swept setting) with the mean
over seeds and a band of one standard deviation on a common iteration grid; the compiler
at 1.0 and the optimum as horizontal lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from egrl.aggregate.curves import common_grid, mean_band  # noqa: E402
from egrl.aggregate.optimum import OptimumInfo  # noqa: E402
from egrl.aggregate.summary import PAPER_AGENTS, group_key, group_order  # noqa: E402
from egrl.plots import save_figure  # noqa: E402
from egrl.runs import Run  # noqa: E402


def agent_colors(agents: Sequence[str]) -> dict[str, tuple]:
    """A fixed colour per agent (same colour in every figure of a study)."""
    ordered = [a for a in PAPER_AGENTS if a in agents] + sorted(set(agents) - set(PAPER_AGENTS))
    cmap = plt.get_cmap("tab10")
    return {a: cmap(i % 10) for i, a in enumerate(ordered)}


def plot_workload(
    runs: Sequence[Run],
    keys: Sequence[str],
    path: str | Path,
    optimum: OptimumInfo | Sequence[OptimumInfo] | None = None,
    colors: dict[str, tuple] | None = None,
    points: int = 200,
    shown: Sequence[str] | None = None,
) -> Path:
    """Figure-3 panel for the runs of one workload.

    Args:
        runs: finished runs, all on one workload.
        keys: grouping keys (``hwmodel``, ``workload``, ``agent``, ...): one line per group.
        path: PNG to write.
        optimum: the reference line, or one per hardware target (None: not drawn).
        colors: agent -> colour (default: :func:`agent_colors`).
        points: size of the common iteration grid.
        shown: the keys a line's label names (default: every key); the workload is the
            title's.
    """
    path = Path(path)
    workload = runs[0].workload
    groups: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(group_key(run, keys), []).append(run)
    colors = colors or agent_colors(sorted({r.agent for r in runs}))
    styles = ("-", "--", ":", "-.")
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    seen: dict[str, int] = {}
    for values in sorted(groups, key=lambda v: group_order(dict(zip(keys, v)))):
        members = groups[values]
        setting = dict(zip(keys, values))
        agent = setting["agent"]
        grid = common_grid(members, points)
        mean, std = mean_band(members, grid)
        style = styles[seen.get(agent, 0) % len(styles)]
        seen[agent] = seen.get(agent, 0) + 1
        extra = " ".join(
            f"{k}={v}"
            for k, v in setting.items()
            if k not in ("workload", "agent") and (shown is None or k in shown)
        )
        label = f"{agent} {extra}".strip() + f" (n={len(members)})"
        color = colors.get(agent)
        ax.plot(grid, mean, style, color=color, label=label, linewidth=1.5)
        ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.15, linewidth=0)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="native compiler")
    optima = [optimum] if isinstance(optimum, OptimumInfo) else list(optimum or [])
    for i, opt in enumerate(optima):
        where = f"{opt.hwmodel} " if len(optima) > 1 else ""
        ax.axhline(
            opt.speedup,
            color="black",
            linestyle=(":", "-.", "--")[i % 3],
            linewidth=1.2,
            label=f"optimum {where}{opt.speedup:.3f} ({opt.tag})",
        )
    ax.set_xlabel("iterations (hardware evaluations)")
    ax.set_ylabel("best speedup over the compiler")
    ax.set_title(f"{workload}: mean ± 1 std over seeds")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)
