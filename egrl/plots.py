"""Plots of training runs (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


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
    ax.set_xlabel("iterations (hardware evaluations)")
    ax.set_ylabel("speedup over the compiler")
    ax.set_title(title)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
