"""A cheap description of NNP-I maps, read without measuring them (``Target.describe``).

Every feature is computed on the map as proposed (before the compiler's repair) from
the target's own vectorised pieces: the occupancy of :mod:`~hwmodels.nnpi.occupancy`
and the roofline of :mod:`~hwmodels.nnpi.cost`. The rectifier itself is not run: on
this model it *is* the measurement (repair plus cost model), so describing a map with
it would answer the screen's question for free. Features, in column order:

* ``weight_bytes_<LEVEL>`` (3): bytes of weights placed on DRAM, LLC, SRAM;
* ``activation_bytes_<LEVEL>`` (3): bytes of activations placed on each level
  (the six sum to the workload's bytes);
* ``overflow_bytes_<LEVEL>`` (LLC, SRAM): bytes beyond the level's capacity at its
  fullest step (weights plus live activations), 0 if the level fits; what triggers the
  compiler's rectification (DRAM is left out: binding checks that everything fits it);
* ``overflow_steps_<LEVEL>`` (LLC, SRAM): execution steps at which the level overflows;
* ``decisions_in_overflow``, ``bytes_in_overflow``: tensors (and their bytes) placed
  on LLC or SRAM and live at a step where that level overflows; the candidates the
  compiler may move (it moves some of them, first fit in execution order);
* ``latency_s``: the cost model's latency of the map as given (without repair); the
  measured latency for a valid map.
"""

from __future__ import annotations

import numpy as np

from hwmodels.nnpi.cost import NodeCosts
from hwmodels.nnpi.occupancy import Tensors
from hwmodels.nnpi.params import DRAM, FS_PER_S, LEVELS

#: the on-chip levels (those with a capacity a map can exceed)
ON_CHIP: tuple[int, ...] = tuple(lv for lv in range(len(LEVELS)) if lv != DRAM)


def description_names() -> list[str]:
    """Names of the columns of :func:`describe`, in order."""
    on_chip = [LEVELS[lv] for lv in ON_CHIP]
    return [
        *(f"weight_bytes_{name}" for name in LEVELS),
        *(f"activation_bytes_{name}" for name in LEVELS),
        *(f"overflow_bytes_{name}" for name in on_chip),
        *(f"overflow_steps_{name}" for name in on_chip),
        "decisions_in_overflow",
        "bytes_in_overflow",
        "latency_s",
    ]


def describe(
    levels: np.ndarray, tensors: Tensors, capacity: np.ndarray, costs: NodeCosts
) -> np.ndarray:
    """The description of every map.

    Args:
        levels: int64 ``[B, T]``: the level of every tensor (maps ``[B, N, 2]`` flattened).
        tensors: sizes and lifetimes.
        capacity: int64 ``[L]``: bytes of each level.
        costs: the roofline of the same workload.

    Returns:
        float64 ``[B, F]`` in the order of :func:`description_names`.
    """
    num_maps = len(levels)
    on_level = levels[:, None, :] == np.arange(len(LEVELS))[None, :, None]  # [B, L, T]
    placed = on_level * tensors.nbytes  # [B, L, T]
    weight_bytes = placed[:, :, tensors.is_weight].sum(axis=2)  # [B, L]
    activation_bytes = placed[:, :, ~tensors.is_weight].sum(axis=2)  # [B, L]

    occupancy = tensors.occupancy(levels)  # [B, L, S]
    excess = occupancy - capacity[None, :, None]  # [B, L, S]
    chip = list(ON_CHIP)
    overflow_bytes = np.maximum(excess[:, chip].max(axis=2, initial=0), 0)  # [B, 2]
    overflowing = excess > 0  # [B, L, S]
    overflow_steps = overflowing[:, chip].sum(axis=2)  # [B, 2]

    # a tensor is in overflow when its level overflows at a step where it is live
    live = tensors.live().astype(np.float64)  # [T, S]
    steps_over = overflowing.astype(np.float64) @ live.T  # [B, L, T]
    own = np.take_along_axis(steps_over, levels[:, None, :], axis=1)[:, 0]  # [B, T]
    in_overflow = (own > 0) & (levels != DRAM) & (tensors.nbytes > 0)

    latency = costs.latency_fs(levels.reshape(num_maps, costs.num_nodes, 2)) / FS_PER_S
    return np.column_stack(
        [
            weight_bytes,
            activation_bytes,
            overflow_bytes,
            overflow_steps,
            in_overflow.sum(axis=1),
            (in_overflow * tensors.nbytes).sum(axis=1),
            latency,
        ]
    ).astype(np.float64)
