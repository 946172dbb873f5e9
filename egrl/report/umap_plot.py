"""Figure 5 of the EGRL paper: a 2-D UMAP projection of the maps a run evaluated.

Each distinct map is encoded one-hot (:func:`egrl.report.selection.one_hot`) and
projected with UMAP (McInnes et al., 2018; ``umap-learn``, seeded, one thread). The
panel marks the compiler-competitive maps, the best maps and the compiler's own map
(star, pointed at by an arrow).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from egrl.report.layout import fit_title
from egrl.report.runs import RunArtifacts
from egrl.report.selection import map_set, one_hot, subsample

log = logging.getLogger(__name__)

#: UMAP needs a few points for its spectral initialisation; fewer are laid out by PCA
MIN_UMAP_POINTS = 4
#: width of one panel, inches (a long run label wraps to it)
PANEL_WIDTH_IN = 5.2


@dataclass
class UmapPanel:
    """What one Figure 5 panel draws (``K`` projected maps).

    Attributes:
        title: panel title.
        maps: int64 ``[K, N, H]``: the projected maps.
        coords: float32 ``[K, 2]``.
        valid, competitive, best: bool ``[K]`` (groups as in :class:`~egrl.report.selection.MapSet`).
        compiler: row of ``coords`` holding the compiler's map.
        compiler_evaluated: the run itself evaluated the compiler's map.
        num_distinct: distinct maps the run evaluated (``K`` or more, before subsampling).
        best_speedup: the highest valid speedup among them.
        competitive_tol, best_rule: the thresholds, for the legend.
    """

    title: str
    maps: np.ndarray
    coords: np.ndarray
    valid: np.ndarray
    competitive: np.ndarray
    best: np.ndarray
    compiler: int
    compiler_evaluated: bool
    num_distinct: int
    best_speedup: float
    competitive_tol: float
    best_rule: str


def embed(features: np.ndarray, seed: int = 0, n_neighbors: int = 15, min_dist: float = 0.1):
    """float32 ``[K, 2]``: UMAP of ``features`` ``[K, D]`` (PCA below :data:`MIN_UMAP_POINTS`)."""
    k = len(features)
    if k < MIN_UMAP_POINTS:
        centred = features - features.mean(axis=0, keepdims=True)
        _, _, vt = np.linalg.svd(centred, full_matrices=False)
        out = np.zeros((k, 2), dtype=np.float32)
        proj = centred @ vt[:2].T
        out[:, : proj.shape[1]] = proj
        return out
    try:
        import umap  # optional dependency
    except ImportError as exc:
        raise ImportError("the UMAP figure needs umap-learn: pip install 'egrl[report]'") from exc
    reducer = umap.UMAP(
        n_components=2,
        n_neighbors=max(2, min(n_neighbors, k - 1)),
        min_dist=min_dist,
        metric="euclidean",
        random_state=seed,
        n_jobs=1,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        coords = reducer.fit_transform(features)
    for w in caught:
        log.debug("umap: %s", w.message)
    return np.asarray(coords, dtype=np.float32)


def umap_panel(
    run: RunArtifacts,
    max_maps: int = 3000,
    competitive_tol: float = 0.05,
    best_within: float = 0.02,
    top: int | None = None,
    seed: int = 0,
) -> UmapPanel:
    """Project the distinct maps of ``run`` (at most ``max_maps``, seeded) and the compiler's."""
    ms = map_set(run.maps, run.iteration, run.speedup, run.valid, competitive_tol, best_within, top)
    keep = subsample(ms, max_maps, np.random.default_rng(seed))
    compiler = run.compiler_mapping
    at = ms.index_of(compiler)
    evaluated = at is not None
    maps = ms.maps[keep]
    valid, comp, best = ms.valid[keep], ms.competitive[keep], ms.best[keep]
    if evaluated and at in keep:
        row = int(np.searchsorted(keep, at))
    else:
        flags = (np.zeros(1, dtype=bool),) * 3  # not drawn as a map of the run
        if evaluated:
            flags = (ms.valid[[at]], ms.competitive[[at]], ms.best[[at]])
        maps = np.concatenate([maps, compiler[None]])
        valid, comp, best = (np.concatenate(p) for p in zip((valid, comp, best), flags))
        row = len(maps) - 1
    coords = embed(one_hot(maps, run.env.num_choices), seed=seed)
    rule = f"top {top}" if top is not None else f"within {best_within:.0%} of the best"
    return UmapPanel(
        title=run.label,
        maps=maps,
        coords=coords,
        valid=valid,
        competitive=comp,
        best=best,
        compiler=row,
        compiler_evaluated=evaluated,
        num_distinct=len(ms),
        best_speedup=float(ms.speedup[ms.valid].max()) if ms.valid.any() else 0.0,
        competitive_tol=competitive_tol,
        best_rule=rule,
    )


def _arrow_text_position(xy: np.ndarray, point: np.ndarray) -> np.ndarray:
    """Where the arrow's label goes: a fifth of the plot's span from ``point``, inwards."""
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    inwards = np.where(point <= (lo + hi) / 2, 1.0, -1.0)
    return point + 0.2 * span * inwards


def draw_umap(ax: Axes, panel: UmapPanel) -> None:
    """Draw one Figure 5 panel on ``ax`` (legend below the axes)."""
    xy = panel.coords
    run_maps = np.ones(len(xy), dtype=bool)  # rows the run evaluated
    run_maps[panel.compiler] = panel.compiler_evaluated
    other = panel.valid & ~panel.competitive & ~panel.best
    layers = (
        (~panel.valid, "invalid", dict(s=5, c="0.75")),
        (other, "valid", dict(s=7, c="tab:blue", alpha=0.45)),
        (
            panel.competitive,
            f"compiler-competitive (±{panel.competitive_tol:.0%})",
            dict(s=14, c="tab:orange"),
        ),
        (
            panel.best,
            f"best ({panel.best_rule}; {panel.best_speedup:.3f}x)",
            dict(s=22, c="tab:red"),
        ),
    )
    handles = []
    for mask, label, style in layers:
        mask = mask & run_maps
        ax.scatter(xy[mask, 0], xy[mask, 1], linewidths=0, **style)
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                ls="",
                color=style["c"],
                markersize=5,
                label=f"{label}: {int(mask.sum())}",
            )
        )
    point = xy[panel.compiler]
    star = dict(marker="*", color="gold", markeredgecolor="black", markeredgewidth=0.8)
    ax.plot(*point, ls="", markersize=17, zorder=5, **star)
    note = "" if panel.compiler_evaluated else " (not evaluated by the run)"
    handles.append(Line2D([], [], ls="", markersize=10, label="compiler's map" + note, **star))
    ax.annotate(
        "compiler",
        xy=tuple(point),
        xytext=tuple(_arrow_text_position(xy, point)),
        color="red",
        fontsize=9,
        ha="center",
        arrowprops=dict(arrowstyle="-|>", color="red", lw=1.6, shrinkB=7),
        zorder=6,
    )
    shown = len(xy) - (0 if panel.compiler_evaluated else 1)
    title = fit_title(panel.title, 0.9 * PANEL_WIDTH_IN, 10)
    ax.set_title(f"{title}\n{shown} of {panel.num_distinct} distinct maps", fontsize=10)
    ax.set_xlabel("UMAP 1")
    ax.set_ylabel("UMAP 2")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.07),
        ncol=2,
        fontsize=7,
        frameon=False,
    )


def plot_umap(panels: Sequence[UmapPanel], path: str | Path, ncols: int = 3) -> Path:
    """Write the panels side by side (up to ``ncols`` per row) as a PNG."""
    if not panels:
        raise ValueError("no UMAP panel to plot")
    path = Path(path)
    ncols = min(ncols, len(panels))
    nrows = -(-len(panels) // ncols)
    fig = Figure(figsize=(PANEL_WIDTH_IN * ncols, 5.3 * nrows), dpi=110, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, panel in zip(axes, panels):
        draw_umap(ax, panel)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    fig.savefig(path)
    return path
