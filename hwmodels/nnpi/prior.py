"""The NNP-I model as the prior of another chip: its datasheet read as NNP-I parameters.

An external chip with the NNP-I heads places the same tensors on the same kind of
levels, so the NNP-I target bound to the same workload can describe its maps, predict
their latency before the chip is paid to run them (:class:`NNPIPrior`, built with
:func:`nnpi_prior`) and be solved exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.base import Target
from hwmodels.nnpi.params import FS_PER_S, LEVELS
from hwmodels.nnpi.target import NNPI, NNPITarget


@dataclass(frozen=True)
class NNPIPrior:
    """The NNP-I model's view of an external chip's maps: a free prior, never a measurement.

    An external chip with the NNP-I heads places the same tensors on the same kind of
    levels, so the NNP-I target bound to the same workload can describe its maps
    (:meth:`hwmodels.nnpi.NNPITarget.describe`) or predict their latency before the chip
    is paid to run them. Build it with :func:`nnpi_prior`.

    Attributes:
        target: the NNP-I target bound to the external target's workload.
        columns: int64 ``[2]``: the external head read as NNP-I's ``weight`` and
            ``activation`` head.
        levels: int64 ``[2, K]``: the NNP-I level of each choice of those heads
            (``K`` = the most choices of either; -1 past a head's own choices).
    """

    target: NNPITarget
    columns: np.ndarray
    levels: np.ndarray

    @property
    def description_names(self) -> list[str]:
        """Columns of :meth:`describe` (the NNP-I target's)."""
        return self.target.description_names

    def nnpi_maps(self, maps: np.ndarray) -> np.ndarray:
        """int64 ``[B, N, 2]``: the external maps ``[B, N, H]`` in NNP-I's choices."""
        maps = np.asarray(maps, dtype=np.int64)
        picked = maps[:, :, self.columns]  # [B, N, 2]
        return self.levels[np.arange(2)[None, None, :], picked]

    def describe(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B, F]``: the NNP-I description of the external maps ``[B, N, H]``."""
        return self.target.describe(self.nnpi_maps(maps))

    def latency_s(self, maps: np.ndarray) -> np.ndarray:
        """float64 ``[B]``: the NNP-I cost model's latency of the external maps as given."""
        return self.target.latency_fs(self.nnpi_maps(maps)) / FS_PER_S


def nnpi_prior(target: Target, **params) -> NNPIPrior:
    """The NNP-I model bound to ``target``'s workload, reading ``target``'s maps.

    Nothing is measured and the external command is not called: the NNP-I target is
    built from the workload alone (its compiler never runs). ``target`` needs the heads
    ``weight`` and ``activation`` (any order, beside other heads, which are ignored)
    whose choices are named after NNP-I levels (``DRAM``, ``LLC``, ``SRAM``, any case,
    any order or subset), as :data:`NNPI_HEADS` are.

    Args:
        target: an :class:`ExternalTarget` (or any target with ``heads`` and ``workload``).
        **params: NNP-I parameters (:class:`~hwmodels.nnpi.NNPIParams` fields,
            ``native``); the defaults model the EGRL paper's chip.

    Raises:
        ValueError: a head is missing or names a choice that is no NNP-I level; the
            workload does not fit NNP-I's DRAM.
    """
    heads = list(target.heads)
    columns, levels = [], []
    for head in ("weight", "activation"):
        if head not in target.heads:
            raise ValueError(
                f"an NNP-I prior needs the heads 'weight' and 'activation'; the target has {heads}"
            )
        choices = [c.upper() for c in target.heads[head]]
        unknown = [c for c in target.heads[head] if c.upper() not in LEVELS]
        if unknown:
            raise ValueError(
                f"an NNP-I prior reads head {head!r} choices as NNP-I levels {list(LEVELS)}; "
                f"{unknown} are none of them"
            )
        columns.append(heads.index(head))
        levels.append([LEVELS.index(c) for c in choices])
    width = max(len(row) for row in levels)
    table = np.full((2, width), -1, dtype=np.int64)
    for h, row in enumerate(levels):
        table[h, : len(row)] = row
    nnpi = NNPI(**params).bind(target.workload)
    return NNPIPrior(nnpi, np.array(columns, dtype=np.int64), table)
