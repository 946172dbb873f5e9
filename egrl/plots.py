"""Plots of training runs (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from egrl.report.layout import fit_title  # noqa: E402

#: title font size of the run plots, points (long titles wrap to the figure's width)
TITLE_SIZE = 11


def plot_speedup_curve(rows: Sequence[dict], path: str | Path, title: str = "") -> Path:
    """Best speedup over the native compiler against iterations, with the compiler at 1.0.

    Args:
        rows: metrics rows with ``iterations`` and ``best_speedup``.
        path: PNG file to write.
    """
    path = Path(path)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    its = [r["iterations"] for r in rows]
    ax.plot(its, [r["best_speedup"] for r in rows], label="best valid map so far")
    ax.axhline(1.0, color="grey", linestyle="--", label="native compiler")
    return _finish(fig, ax, path, "speedup over the compiler", title, "lower right")


def plot_learner_entropy(
    rows: Sequence[dict], path: str | Path, uniform: float | None = None, title: str = ""
) -> Path:
    """The learner's policy entropy (mean over decisions, nats) against iterations.

    Args:
        rows: metrics rows with ``iterations`` and ``entropy`` (generations without a
            learner update, NaN, are skipped).
        path: PNG file to write.
        uniform: the entropy of the uniform policy (drawn as a reference), if known.
    """
    path = Path(path)
    points = [
        (float(r["iterations"]), float(r["entropy"]))
        for r in rows
        if r.get("entropy") not in (None, "") and float(r["entropy"]) == float(r["entropy"])
    ]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    if points:
        its, ent = zip(*points)
        ax.plot(its, ent, label="learner policy")
    if uniform is not None:
        ax.axhline(uniform, color="grey", linestyle="--", label="uniform policy")
    ax.set_yscale("symlog", linthresh=1e-3)
    return _finish(fig, ax, path, "entropy per decision (nats)", title, "lower left")


def _finish(fig, ax, path: Path, ylabel: str, title: str, legend_loc: str) -> Path:
    """Label an iterations x-axis, add legend and grid, write ``path`` and close ``fig``."""
    ax.set_xlabel("iterations (hardware evaluations)")
    ax.set_ylabel(ylabel)
    ax.set_title(fit_title(title, 0.9 * fig.get_figwidth(), TITLE_SIZE), fontsize=TITLE_SIZE)
    ax.legend(loc=legend_loc)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def save_figure(fig, path: str | Path, dpi: int | None = None) -> Path:
    """Write ``fig`` to ``path`` (its folder made) and close it; every figure of the
    toolkit and its studies is saved here."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if dpi is None:
        fig.savefig(path)
    else:
        fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
