"""The memory-layout figure (like Figures 1 and 8 of Wang et al., arXiv:2305.07440):
every CMEM allocation a rectangle, logical time across, offset up, one colour per tensor."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hwmodels.tpu.layout import Layout


def plot_layout(layout: Layout, path: str | Path | None = None, ax=None, title: str | None = None):
    """Draw ``layout``; save it to ``path`` if given.

    Each allocated buffer is a rectangle from its interval's start to its end + 1 (steps)
    and from its offset to offset + size (MiB); copies are hatched strips under it.

    Returns:
        The matplotlib ``Figure``.
    """
    import matplotlib

    if ax is None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    p = layout.program
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 4.5))
    else:
        fig = ax.figure
    mib = 2**20
    idx = np.flatnonzero(layout.allocated)
    cmap = plt.get_cmap("tab20")
    rects, colours = [], []
    for b in idx:
        rects.append(
            Rectangle(
                (layout.start[b], layout.offset[b] / mib),
                layout.end[b] - layout.start[b] + 1,
                p.size[b] / mib,
            )
        )
        colours.append(cmap(int(p.tensor[b]) % cmap.N))
    ax.add_collection(
        PatchCollection(rects, facecolor=colours, edgecolor="black", linewidth=0.3, alpha=0.9)
    )
    copies = np.flatnonzero(layout.copy_start >= 0)
    for b in copies:
        ax.add_patch(
            Rectangle(
                (layout.copy_start[b], layout.offset[b] / mib),
                layout.copy_end[b] - layout.copy_start[b] + 1,
                p.size[b] / mib,
                fill=False,
                hatch="///",
                linewidth=0,
                edgecolor="grey",
            )
        )
    ax.set_xlim(0, p.num_instructions)
    ax.set_ylim(0, p.params.cmem_bytes / mib)
    ax.set_xlabel("logical time (instruction)")
    ax.set_ylabel("CMEM offset (MiB)")
    in_cmem = int(layout.in_cmem.sum())
    ax.set_title(
        title
        or f"{p.name}: {in_cmem}/{p.num_buffers} buffers in CMEM, return {layout.ret * 1e6:.1f} us, "
        f"latency {layout.latency_s() * 1e6:.1f} us"
    )
    if path is not None:
        fig.savefig(path, dpi=150, bbox_inches="tight")
    return fig
