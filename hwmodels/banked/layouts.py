"""Bank layouts: which dimension of a tensor is spread across the banks.

A tensor's *bank axes* are its dimensions with the batch dimension dropped (the
leading dimension of a tensor of rank 2 or more, when it equals the workload's batch;
the rule of :func:`workloads.ir.fmap_xyz`). A layout names one of the first three bank
axes; every tensor has the same three choices, :data:`LAYOUTS`:

===========  ======================  ==================  =====================
layout       ``[B, C, H, W]`` (conv)  ``[B, S, D]``        ``[B, heads, S, d]``
===========  ======================  ==================  =====================
``axis1``    channels ``C``           tokens ``S``        heads
``axis2``    rows ``H``               features ``D``      tokens ``S``
``axis3``    columns ``W``            (none)              features ``d``
===========  ======================  ==================  =====================

Element ``i`` of the chosen axis lives in bank ``i mod num_banks``; the other axes
address the elements inside a bank, so a bank reads them in sequence (the paper's
"outer dimensions to different banks, inner dimensions to address different elements
in the same bank"). A layout is *valid* for a tensor when its axis exists and has more
than one element; a tensor with no such axis (all extents 1) accepts ``axis1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: the choices of the ``layout`` head, in order
LAYOUTS: tuple[str, ...] = ("axis1", "axis2", "axis3")
#: number of layouts
L = len(LAYOUTS)
#: a requirement no layout of the producer meets: the consumer reads a re-shaped tensor
#: along an axis the producer does not have, so a copy is always needed
FOREIGN = L


def bank_axes(shape: Sequence[int], batch: int) -> tuple[int, ...]:
    """The extents of a tensor's bank axes: ``shape`` without its batch dimension."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > 1 and shape[0] == batch:
        return shape[1:]
    return shape


def valid_layouts(axes: Sequence[int]) -> list[int]:
    """Indices of :data:`LAYOUTS` valid for a tensor with bank axes ``axes``."""
    valid = [a for a in range(min(L, len(axes))) if axes[a] > 1]
    return valid or [0]


def axis_map(src: Sequence[int], dst: Sequence[int]) -> list[int | None]:
    """For each axis of ``dst``, the axis of ``src`` holding the same elements in the same
    banks, or ``None``.

    ``dst`` is the same data as ``src`` seen through a reshape (e.g. a flatten of
    ``[2048, 1, 1]`` to ``[2048]``). Axis ``j`` of ``dst`` matches axis ``i`` of ``src``
    when both have the same extent and the same outer volume (the product of the
    extents before them), so that spreading either over the banks puts every element
    in the same bank. A split or merged axis matches nothing.
    """
    src, dst = list(src), list(dst)
    outer = {}
    for i, extent in enumerate(src):
        outer.setdefault((math.prod(src[:i]), extent), i)
    return [outer.get((math.prod(dst[:j]), extent)) for j, extent in enumerate(dst)]
