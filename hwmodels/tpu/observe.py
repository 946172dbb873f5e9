"""What a planner sees of a game state (Wang et al., arXiv:2305.07440, section 4.3.1).

:func:`observe` returns the pieces of the paper's state representation as NumPy arrays:
the current buffer and the next ``k`` (Table 1 features, the current benefit in place of
the initial one for the current buffer), the next ``same`` buffers of the same tensor (the paper's ``l``), a
down-sampled window of the occupancy grid ``M_t`` centred on the current target time,
the full-resolution (here: ``profile_bins``) occupancy at that time, a window of the
supply ``W_t``, per-action features (legality, interval, offset) and global features
(move number, buffer index, rank in its alias group, buffers left in the group).
"""

from __future__ import annotations

import numpy as np

from hwmodels.tpu.game import ACTIONS, Game
from hwmodels.tpu.params import PS_PER_S


def buffer_rows(game: Game, index: np.ndarray) -> np.ndarray:
    """float32 ``[len(index), F]``: Table 1 features of buffers ``index`` (-1: zeros)."""
    feats = game.program.features
    out = np.zeros((len(index), feats.shape[1]), dtype=np.float32)
    ok = index >= 0
    out[ok] = feats[index[ok]]
    return out


def next_of_tensor(game: Game, b: int, count: int) -> np.ndarray:
    """int64 ``[count]``: the next ``count`` buffers of ``b``'s tensor (-1 past the last)."""
    nxt = game.program.next_same_tensor
    out = np.full(count, -1, dtype=np.int64)
    for i in range(count):
        b = int(nxt[b]) if b >= 0 else -1
        if b < 0:
            break
        out[i] = b
    return out


def occupancy_grid(game: Game, t0: int, t1: int, shape: tuple[int, int]) -> np.ndarray:
    """uint8 ``shape`` (time cells, offset cells): cell is 1 where any byte of CMEM is
    held at any step of it; time window ``[t0, t1)``, offsets ``[0, capacity)``."""
    rec = game.records()
    cap = game.program.params.cmem_bytes
    nt, no = shape
    keep = (rec["start"] < t1) & (rec["end"] >= t0)
    s = np.clip(rec["start"][keep], t0, t1 - 1) - t0
    e = np.clip(rec["end"][keep], t0, t1 - 1) - t0
    lo = rec["offset"][keep]
    hi = lo + rec["size"][keep] - 1
    width = t1 - t0
    ts, te = s * nt // width, e * nt // width + 1
    os_, oe = lo * no // cap, hi * no // cap + 1
    diff = np.zeros((nt + 1, no + 1), dtype=np.int64)
    np.add.at(diff, (ts, os_), 1)
    np.add.at(diff, (ts, oe), -1)
    np.add.at(diff, (te, os_), -1)
    np.add.at(diff, (te, oe), 1)
    return (diff.cumsum(0).cumsum(1)[:nt, :no] > 0).astype(np.uint8)


def observe(
    game: Game,
    k: int = 5,
    same: int = 5,
    grid: tuple[int, int] = (128, 128),
    window: int = 128,
    profile_bins: int = 1024,
    supply_window: int = 128,
) -> dict[str, np.ndarray]:
    """The observation of ``game``'s current state.

    Returns:
        ``buffers`` float32 ``[1 + k, F]``; ``same_tensor`` float32 ``[same, F]``; ``grid``
        uint8 ``grid`` over ``window`` steps around the target time; ``profile`` uint8
        ``[profile_bins]``; ``supply`` float32 ``[supply_window]`` (seconds, 0 outside
        the program); ``actions`` float32 ``[3, 4]`` (legal, start, end, offset for
        Drop, Copy, NoCopy; -1 where undefined); ``globals`` float32 ``[4]``. A finished
        game gives zeros.
    """
    n = game.num_buffers
    b = min(game.position, n - 1)
    t = int(game.program.time[b])
    idx = np.arange(b, b + 1 + k)
    idx[idx >= n] = -1
    rows = buffer_rows(game, idx)
    col = 8  # benefit_s
    rows[0, col] = game.benefit() if not game.done else 0.0
    t0 = t - window // 2
    g = occupancy_grid(game, t0, t0 + window, grid)
    prof = occupancy_grid(game, t, t + 1, (1, profile_bins))[0]
    sup = np.zeros(supply_window, dtype=np.float32)
    s0 = t - supply_window // 2
    w = game.supply()
    lo, hi = max(s0, 0), min(s0 + supply_window, len(w))
    sup[lo - s0 : hi - s0] = w[lo:hi] / PS_PER_S
    act = np.full((len(ACTIONS), 4), -1.0, dtype=np.float32)
    if not game.done:
        for a in range(len(ACTIONS)):
            pl = game.placement(a)
            act[a] = (float(pl.legal), pl.start, pl.end, pl.offset)
    p = game.program
    glob = np.array(
        [
            game.moves,
            game.position,
            p.group_rank[b],
            p.group_size[p.alias[b]] - p.group_rank[b] - 1,
        ],
        dtype=np.float32,
    )
    return {
        "buffers": rows,
        "same_tensor": buffer_rows(game, next_of_tensor(game, b, same)),
        "grid": g,
        "profile": prof,
        "supply": sup,
        "actions": act,
        "globals": glob,
    }
