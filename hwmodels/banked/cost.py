"""The cost of bank layouts: copies on and off chip, and the memory time they make.

For a batch of layouts ``lay`` int ``[B, N]`` (one allowed layout per tensor):

* every read of tensor ``p`` by node ``c`` requires a layout of ``p``: nothing
  (``any`` reads), a fixed axis (``axis`` reads) or the layout of ``c``'s own output
  (``same`` reads);
* a copy of ``p`` is inserted for every distinct required layout other than ``p``'s
  own (one copy serves all the readers that need it), and one per read of an axis ``p``
  does not have (a reshaped read, :data:`~hwmodels.banked.layouts.FOREIGN`);
* a tensor that does not fit in the banks in its layout is spilled: stored off chip
  once and loaded by each reader, and the loads deliver each reader's layout, so it
  needs no copy;
* a copy of a tensor that fits is on chip (bank to bank) when the copy fits too, and
  goes through off-chip memory (out and back in, twice its bytes) when it does not.

The memory time (the primary objective) adds the off-chip traffic at the off-chip
bandwidth (spills, copies through off-chip memory, and the weights, graph inputs and
outputs every map moves), the on-chip copies at the copy bandwidth, and every write
and read of a tensor at the bandwidth of the banks it is spread over.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.banked.layouts import FOREIGN, L
from hwmodels.banked.params import FS_PER_S
from hwmodels.banked.problem import AXIS, SAME, BankProblem


@dataclass
class Cost:
    """Copies and memory time of ``B`` maps.

    Attributes:
        onchip_bytes: int64 ``[B]``: bytes copied bank to bank on chip.
        offchip_bytes: int64 ``[B]``: bytes of activations moved off chip and back by
            the map (spills and copies through off-chip memory; not the traffic every
            map moves).
        copies: int64 ``[B]``: number of copies inserted (on and off chip).
        spilled: int64 ``[B]``: number of tensors that do not fit in the banks.
        latency_fs: int64 ``[B]``: memory time in femtoseconds.
    """

    onchip_bytes: np.ndarray
    offchip_bytes: np.ndarray
    copies: np.ndarray
    spilled: np.ndarray
    latency_fs: np.ndarray

    @property
    def latency_s(self) -> np.ndarray:
        """float64 ``[B]``: memory time in seconds."""
        return self.latency_fs / FS_PER_S


def required(problem: BankProblem, lay: np.ndarray) -> np.ndarray:
    """int64 ``[B, E]``: the layout each read requires of its producer (-1: none)."""
    req = np.full((len(lay), len(problem.src)), -1, dtype=np.int64)
    axis, same = problem.kind == AXIS, problem.kind == SAME
    req[:, axis] = problem.static_req[axis]
    cols = np.flatnonzero(same)
    req[:, same] = problem.same_req[cols, lay[:, problem.dst[same]]]
    return req


def copies_needed(problem: BankProblem, lay: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The copies a batch of layouts inserts, fitting or not.

    Returns:
        bool ``[B, N, L]``: tensor ``p`` is copied to layout ``a`` (some reader requires
        ``a`` and ``p`` is in another one); int64 ``[B, N]``: reshaped copies of ``p``.
    """
    b, n = lay.shape
    req = required(problem, lay)
    rows = np.broadcast_to(np.arange(b)[:, None], req.shape)
    cols = np.broadcast_to(problem.src, req.shape)
    real = (req >= 0) & (req < L)
    need = np.zeros((b, n, L), dtype=bool)
    need[rows[real], cols[real], req[real]] = True
    need[np.arange(b)[:, None], np.arange(n), lay] = False
    foreign = np.zeros((b, n), dtype=np.int64)
    hit = req == FOREIGN
    np.add.at(foreign, (rows[hit], cols[hit]), 1)
    return need, foreign


def evaluate(problem: BankProblem, lay: np.ndarray) -> Cost:
    """The copies and memory time of layouts ``lay`` int ``[B, N]``, all allowed."""
    lay = np.asarray(lay, dtype=np.int64)
    units = np.arange(problem.num_units)
    fit = problem.fits[units, lay]  # [B, N]
    need, foreign = copies_needed(problem, lay)
    on = need & fit[..., None] & problem.fits[None]
    off = need & fit[..., None] & ~problem.fits[None]
    n_on = on.sum(axis=2) + foreign * fit  # [B, N]
    n_off = off.sum(axis=2)
    same = np.flatnonzero(problem.kind == SAME)
    latency = (
        problem.fixed_fs
        + problem.write_fs[units, lay].sum(axis=1)
        + problem.read_any_fs[units, lay].sum(axis=1)
        + problem.read_fs[same, lay[:, problem.dst[same]]].sum(axis=1)
        + problem.spill_fs[units, lay].sum(axis=1)
        + (n_on * problem.copy_on_fs).sum(axis=1)
        + (n_off * problem.copy_off_fs).sum(axis=1)
    )
    return Cost(
        onchip_bytes=(n_on * problem.size).sum(axis=1),
        offchip_bytes=(2 * n_off * problem.size).sum(axis=1)
        + (~fit * problem.spill_bytes).sum(axis=1),
        copies=(n_on + n_off).sum(axis=1),
        spilled=(~fit).sum(axis=1),
        latency_fs=latency,
    )
