"""Figure 6 of the EGRL paper: how the best map moved tensors away from the compiler's.

Top (:func:`plot_transitions`): per decision head, a transition matrix whose row ``i``
is the fraction of the decisions the compiler put on choice ``i`` that the best map
put on each choice ``j`` (rows sum to 1; cells show counts). Bottom
(:func:`plot_maps`): both maps decision by decision, units in execution order.

Inert decisions (:func:`egrl.report.selection.active_decisions`: e.g. the weight head of
a layer without weights) are left out of the counts and blank in the strip chart.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from egrl.report.runs import RunArtifacts
from egrl.report.selection import active_decisions


def transition_counts(
    source: np.ndarray,
    target: np.ndarray,
    num_choices: np.ndarray,
    active: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Per head ``h``, int64 ``[C_h, C_h]``: decisions with choice ``i`` in ``source`` and ``j`` in ``target``.

    Args:
        source, target: int ``[N, H]`` maps (the compiler's, the best).
        num_choices: int ``[H]``: choices of each head.
        active: bool ``[N, H]``: decisions to count (None: all).
    """
    source, target = np.asarray(source), np.asarray(target)
    if source.shape != target.shape or source.ndim != 2:
        raise ValueError(f"maps must both be [N, H], got {source.shape} and {target.shape}")
    if active is None:
        active = np.ones(source.shape, dtype=bool)
    out = []
    for h, c in enumerate(int(c) for c in num_choices):
        keep = active[:, h]
        flat = source[keep, h] * c + target[keep, h]
        out.append(np.bincount(flat, minlength=c * c).reshape(c, c).astype(np.int64))
    return out


def row_fractions(counts: np.ndarray) -> np.ndarray:
    """float64 ``[C, C]``: ``counts`` over their row sums; NaN rows where a row is empty."""
    totals = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(totals > 0, counts / totals, np.nan)


def run_transitions(run: RunArtifacts) -> list[np.ndarray]:
    """:func:`transition_counts` from the compiler's map to the run's best map."""
    if run.best_mapping is None:
        raise ValueError(f"run directory {run.run_dir}: the run found no valid map")
    return transition_counts(
        run.compiler_mapping, run.best_mapping, run.env.num_choices, active_decisions(run.env)
    )


def _suptitle(fig: Figure, run: RunArtifacts) -> None:
    fig.suptitle(
        f"{run.label}: compiler's map vs the best map ({run.best_speedup:.3f}x)", fontsize=11
    )


def plot_transitions(run: RunArtifacts, path: str | Path) -> Path:
    """Write the per-head transition matrices (Figure 6, top) as a PNG."""
    counts = run_transitions(run)
    heads = run.env.heads
    path = Path(path)
    fig = Figure(figsize=(4.2 * len(heads) + 1.2, 4.2), dpi=110, layout="constrained")
    axes = fig.subplots(1, len(heads), squeeze=False)[0]
    image = None
    for ax, (head, names), cnt in zip(axes, heads.items(), counts):
        frac = row_fractions(cnt)
        image = ax.imshow(np.ma.masked_invalid(frac), cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_facecolor("0.9")
        size = 9 if len(names) <= 4 else 7
        for i, j in np.ndindex(cnt.shape):
            if np.isnan(frac[i, j]):
                if j == 0:
                    ax.text(
                        len(names) / 2 - 0.5,
                        i,
                        "not used by the compiler",
                        ha="center",
                        va="center",
                        fontsize=size,
                        color="0.35",
                    )
                continue
            ax.text(
                j,
                i,
                f"{frac[i, j]:.2f}\n({cnt[i, j]})",
                ha="center",
                va="center",
                fontsize=size,
                color="white" if frac[i, j] > 0.6 else "black",
            )
        ax.set_xticks(range(len(names)), names)
        ax.set_yticks(range(len(names)), names)
        ax.set_xlabel("best map's choice")
        ax.set_title(f"{head} ({int(cnt.sum())} decisions)", fontsize=10)
    axes[0].set_ylabel("compiler's choice")
    fig.colorbar(image, ax=list(axes), fraction=0.025, label="fraction of the row")
    _suptitle(fig, run)
    fig.savefig(path)
    return path


def _level_colours(n: int) -> ListedColormap:
    """``n`` colours, slowest choice (0) dark, fastest light."""
    from matplotlib import colormaps

    return ListedColormap(colormaps["viridis"](np.linspace(0.05, 0.95, max(n, 1))))


def plot_maps(run: RunArtifacts, path: str | Path) -> Path:
    """Write the compiler's and the best map decision by decision (Figure 6, bottom) as a PNG.

    One panel per head: x = unit in execution order, row 0 the compiler's map, row 1
    the best map, colour = choice; a tick between the rows marks a changed decision.
    """
    if run.best_mapping is None:
        raise ValueError(f"run directory {run.run_dir}: the run found no valid map")
    heads = run.env.heads
    active = active_decisions(run.env)
    both = np.stack([run.compiler_mapping, run.best_mapping])  # [2, N, H]
    n = run.env.num_units
    path = Path(path)
    width = min(22.0, max(8.0, 0.075 * n + 2.5))
    fig = Figure(figsize=(width, 1.25 * len(heads) + 1.0), dpi=110, layout="constrained")
    axes = fig.subplots(len(heads), 1, squeeze=False)[:, 0]
    for h, (ax, (head, names)) in enumerate(zip(axes, heads.items())):
        cmap = _level_colours(len(names))
        norm = BoundaryNorm(np.arange(len(names) + 1) - 0.5, cmap.N)
        grid = np.ma.masked_array(both[:, :, h], mask=~np.broadcast_to(active[:, h], (2, n)))
        ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
        changed = np.flatnonzero((both[0, :, h] != both[1, :, h]) & active[:, h])
        ax.scatter(changed, np.full(len(changed), 0.5), marker="|", s=70, c="red", linewidths=1.2)
        ax.set_yticks([0, 1], ["compiler", "best"])
        ax.set_title(
            f"{head}: {len(changed)} of {int(active[:, h].sum())} decisions changed", fontsize=10
        )
        handles = [Patch(color=cmap(i), label=name) for i, name in enumerate(names)]
        if not active[:, h].all():
            handles.append(Patch(facecolor="white", edgecolor="0.6", label="no tensor"))
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.002, 1.05),
            fontsize=8,
            frameon=False,
        )
    axes[-1].set_xlabel("unit (execution order)")
    _suptitle(fig, run)
    fig.savefig(path)
    return path
