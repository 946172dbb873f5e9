"""Figure 6 of the EGRL paper: how the best map moved tensors away from the compiler's.

Top (:func:`plot_transitions`): per decision head, a transition matrix whose row ``i``
is the fraction of the decisions the compiler put on choice ``i`` that the best map
put on each choice ``j`` (rows sum to 1; cells show counts). Bottom
(:func:`plot_maps`): both maps decision by decision, units in execution order.

Inert decisions (:func:`egrl.report.selection.active_decisions`: e.g. the weight head of
a layer without weights) are left out of the counts and blank in the strip chart.

Both scale (:mod:`egrl.report.layout`): a head of many choices (36 chips) shows the
choices either map uses, without cell numbers, with thinned ticks and distinct hues;
thousands of units are paged into rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.colors import BoundaryNorm
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from egrl.report.layout import (
    ORDERED_MAX,
    choice_colours,
    fit_title,
    legend_columns,
    matrix_layout,
    strip_layout,
)
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


def _suptitle(fig: Figure, run: RunArtifacts, width_in: float) -> None:
    title = f"{run.label}: compiler's map vs the best map ({run.best_speedup:.3f}x)"
    fig.suptitle(fit_title(title, width_in, 11), fontsize=11)


def plot_transitions(run: RunArtifacts, path: str | Path) -> Path:
    """Write the per-head transition matrices (Figure 6, top) as a PNG.

    A head of up to :data:`~egrl.report.layout.CELL_TEXT_MAX` choices shows every choice
    with fraction and count per cell; a head with more (mcm's chips) shows the choices
    either map uses, colour only, with thinned ticks (:func:`~egrl.report.layout.matrix_layout`).
    """
    counts = run_transitions(run)
    heads = run.env.heads
    layouts = [matrix_layout(cnt) for cnt in counts]
    path = Path(path)
    width = sum(lay.side_in for lay in layouts) + 1.2
    height = max(lay.side_in for lay in layouts)
    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    axes = fig.subplots(1, len(heads), squeeze=False)[0]
    image = None
    for ax, (head, names), cnt, lay in zip(axes, heads.items(), counts, layouts):
        shown = np.ix_(lay.shown, lay.shown)
        frac = row_fractions(cnt)[shown]
        image = ax.imshow(np.ma.masked_invalid(frac), cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_facecolor("0.9")
        if lay.cell_text:
            _cell_text(ax, frac, cnt[shown], 9 if len(names) <= 4 else 7)
        pos, labels = lay.ticks(names)
        ax.set_xticks(pos, labels, rotation=0 if lay.cell_text else 90)
        ax.set_yticks(pos, labels)
        ax.set_xlabel("best map's choice")
        title = f"{head} ({int(cnt.sum())} decisions)"
        if lay.scaled:
            title += f"\n{len(lay.shown)} of {len(names)} choices shown"
            title += f" ({lay.hidden} used by neither map)" if lay.hidden else ""
            ax.set_xlabel("best map's choice (grey rows: not used by the compiler)", fontsize=9)
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("compiler's choice")
    fig.colorbar(image, ax=list(axes), fraction=0.025, label="fraction of the row")
    _suptitle(fig, run, width)
    fig.savefig(path)
    return path


def _cell_text(ax, frac: np.ndarray, cnt: np.ndarray, size: int) -> None:
    """Fraction and count in every cell; a row the compiler never chose says so."""
    for i, j in np.ndindex(cnt.shape):
        if np.isnan(frac[i, j]):
            if j == 0:
                ax.text(
                    cnt.shape[1] / 2 - 0.5,
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


def plot_maps(run: RunArtifacts, path: str | Path) -> Path:
    """Write the compiler's and the best map decision by decision (Figure 6, bottom) as a PNG.

    One panel per head: x = unit in execution order, row 0 the compiler's map, row 1
    the best map, colour = choice; a tick between the rows marks a changed decision.
    Many choices get distinct hues and a legend of the choices either map uses, in
    columns; thousands of units are paged into rows (:mod:`egrl.report.layout`).
    """
    if run.best_mapping is None:
        raise ValueError(f"run directory {run.run_dir}: the run found no valid map")
    heads = run.env.heads
    active = active_decisions(run.env)
    both = np.stack([run.compiler_mapping, run.best_mapping])  # [2, N, H]
    n = run.env.num_units
    strip = strip_layout(n)
    rows = len(heads) * len(strip.pages)
    path = Path(path)
    fig = Figure(figsize=(strip.width_in, 1.25 * rows + 1.2), dpi=110, layout="constrained")
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    for h, (head, names) in enumerate(heads.items()):
        cmap = choice_colours(len(names))
        norm = BoundaryNorm(np.arange(len(names) + 1) - 0.5, cmap.N)
        changed = np.flatnonzero((both[0, :, h] != both[1, :, h]) & active[:, h])
        head_axes = axes[h * len(strip.pages) : (h + 1) * len(strip.pages)]
        for ax, (lo, hi) in zip(head_axes, strip.pages):
            keep = active[lo:hi, h]
            grid = np.ma.masked_array(both[:, lo:hi, h], mask=~np.broadcast_to(keep, (2, hi - lo)))
            extent = (lo - 0.5, hi - 0.5, 1.5, -0.5)
            ax.imshow(
                grid, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest", extent=extent
            )
            page = changed[(changed >= lo) & (changed < hi)]
            ax.scatter(page, np.full(len(page), 0.5), marker="|", s=70, c="red", linewidths=1.2)
            ax.set_xlim(lo - 0.5, lo - 0.5 + (strip.pages[0][1] - strip.pages[0][0]))
            ax.set_yticks([0, 1], ["compiler", "best"])
        title = f"{head}: {len(changed)} of {int(active[:, h].sum())} decisions changed"
        if strip.paged:
            title += f" (units in rows of {strip.pages[0][1] - strip.pages[0][0]})"
        head_axes[0].set_title(title, fontsize=10)
        used = np.unique(both[:, active[:, h], h])
        shown = used if len(names) > ORDERED_MAX else np.arange(len(names))
        handles = [Patch(color=cmap(int(i)), label=names[int(i)]) for i in shown]
        if not active[:, h].all():
            handles.append(Patch(facecolor="white", edgecolor="0.6", label="no tensor"))
        height = 1.25 * len(strip.pages)
        head_axes[0].legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.002, 1.05),
            fontsize=8 if len(handles) <= 8 else 7,
            ncol=legend_columns(len(handles), height),
            frameon=False,
            title=None if len(shown) == len(names) else f"{len(shown)} of {len(names)} used",
            title_fontsize=7,
        )
    axes[-1].set_xlabel("unit (execution order)")
    _suptitle(fig, run, strip.width_in)
    fig.savefig(path)
    return path
