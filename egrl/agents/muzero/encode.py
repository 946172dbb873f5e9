"""The planner's input: a game state as one feature vector and one occupancy image.

:func:`hwmodels.tpu.observe.observe` gives the paper's state representation (Wang et al.,
arXiv:2305.07440, section 4.3.1); :class:`Encoder` scales it for a network:

* buffer rows (the current buffer and the next ``k``, then the next ``same`` buffers of
  its tensor), each :data:`ROW` values: log size, size over CMEM, is_output, times
  (target time, live start and end) relative to the current target time in windows,
  same tensor / same alias group as the current buffer, copy demand in steps of mean
  supply, benefit over the program's mean positive benefit, log alias-group size, and a
  flag for a row that exists;
* the occupancy profile at the target time (``profile_bins``), the supply window over
  the largest supply, per action its legality, interval relative to the target time and
  offset over the CMEM size, and the global features (move and buffer index over ``N``,
  rank in the alias group, buffers left in it);
* the down-sampled occupancy grid ``M_t`` around the target time, ``grid x grid``.

:meth:`Encoder.batch` encodes many games at once (the planner's parallel self-play and
batched search): the same numbers, bit for bit, as :meth:`Encoder.__call__` game by
game, with the arithmetic vectorised over the games (only what each game must answer
itself, its placements, current benefit, CMEM records and supply, is asked game by game).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from egrl.validation import at_least, check_fields, ruled
from hwmodels.tpu.game import ACTIONS, Game
from hwmodels.tpu.observe import observe
from hwmodels.tpu.params import PS_PER_S
from hwmodels.tpu.program import Program

#: values per buffer row
ROW = 12
#: clip of relative times, in windows
TIME_CLIP = 8.0


def grid_fits(spec: EncoderSpec | Any) -> str | None:
    """Why ``spec.grid`` (an :class:`EncoderSpec`'s or the agent's option) is not a multiple
    of 4 (the networks halve it twice), or None."""
    if spec.grid % 4:
        return f"grid={spec.grid} is invalid: expected a multiple of 4"
    return None


@dataclass(frozen=True)
class EncoderSpec:
    """Sizes of the observation (the paper's values where it gives them: ``k = 5``;
    a 128 x 128 grid and a full-resolution profile, here scaled down for CPU).

    Attributes:
        k: next buffers after the current one.
        same: next buffers of the same tensor (the paper's ``l``).
        grid: side of the occupancy image.
        window: logical steps the image spans, centred on the target time.
        profile_bins: resolution of the occupancy profile at the target time.
        supply_window: steps of the supply profile.
    """

    k: int = ruled(at_least(1), 5)
    same: int = ruled(at_least(1), 5)
    grid: int = ruled(at_least(1), 32)
    window: int = ruled(at_least(1), 128)
    profile_bins: int = ruled(at_least(1), 128)
    supply_window: int = ruled(at_least(1), 64)

    #: the checks of fields that go together (:func:`egrl.validation.field_problems`)
    RELATIONS = (grid_fits,)

    @property
    def vector_size(self) -> int:
        """Length of the feature vector."""
        rows = 1 + self.k + self.same
        return rows * ROW + self.profile_bins + self.supply_window + 3 * 4 + 4

    def __post_init__(self) -> None:
        check_fields(self, prefix="encoder ")


class Encoder:
    """Turns game states of one program into network inputs (see the module docstring).

    Args:
        program: the program every encoded game plays.
        spec: the observation's sizes.
    """

    def __init__(self, program: Program, spec: EncoderSpec | None = None) -> None:
        self.program = program
        self.spec = spec or EncoderSpec()
        p = program
        self.cap = float(p.params.cmem_bytes)
        positive = p.benefit_s[p.benefit_s > 0]
        self.benefit_scale = float(positive.mean()) if positive.size else 1.0
        supply_s = p.supply_ps / PS_PER_S
        self.step_supply_s = max(float(supply_s.mean()), 1e-15)
        self.max_supply_s = max(float(supply_s.max()), 1e-15)
        self.n = float(p.num_buffers)
        self.cap_bytes = int(p.params.cmem_bytes)

    def rows(self, raw: np.ndarray, t, tensor, alias) -> np.ndarray:
        """float32 ``[..., R, ROW]`` from Table 1 rows ``raw [..., R, 10]`` (all-zero
        rows: absent) relative to the current buffer's time ``t``, tensor and alias group
        (scalars, or ``[..., 1]`` arrays for a batch)."""
        w = float(self.spec.window)
        size = raw[..., 0]
        present = size > 0
        rel = np.clip((raw[..., [2, 5, 6]] - np.expand_dims(t, -1)) / w, -TIME_CLIP, TIME_CLIP)
        out = np.concatenate(
            [
                (np.log2(size + 1) / 32)[..., None],
                (size / self.cap)[..., None],
                raw[..., 1:2],
                rel,
                (raw[..., 3] == tensor)[..., None],
                (raw[..., 4] == alias)[..., None],
                np.log1p(raw[..., 7] / self.step_supply_s)[..., None],
                (raw[..., 8] / self.benefit_scale)[..., None],
                np.log(np.maximum(raw[..., 9], 1))[..., None],
                present[..., None],
            ],
            axis=-1,
        )
        out[~present] = 0.0
        return out.astype(np.float32)

    def __call__(self, game: Game) -> tuple[np.ndarray, np.ndarray]:
        """``(vector float32 [vector_size], grid uint8 [grid, grid])`` of ``game``'s state."""
        s = self.spec
        obs = observe(
            game,
            k=s.k,
            same=s.same,
            grid=(s.grid, s.grid),
            window=s.window,
            profile_bins=s.profile_bins,
            supply_window=s.supply_window,
        )
        cur = obs["buffers"][0]
        t = int(cur[2])
        rows = np.concatenate([obs["buffers"], obs["same_tensor"]])
        buffers = self.rows(rows.astype(np.float64), t, cur[3], cur[4])
        act = obs["actions"].astype(np.float64)
        legal = act[:, 0]
        interval = np.clip((act[:, 1:3] - t) / s.window, -TIME_CLIP, TIME_CLIP)
        offset = np.where(act[:, 3] >= 0, act[:, 3] / self.cap, -1.0)
        actions = np.column_stack([legal, interval * legal[:, None], offset])
        g = obs["globals"].astype(np.float64)
        glob = np.array([g[0] / self.n, g[1] / self.n, np.log1p(g[2]), np.log1p(g[3])])
        vector = np.concatenate(
            [
                buffers.ravel(),
                obs["profile"],
                obs["supply"] / self.max_supply_s,
                actions.ravel(),
                glob,
            ]
        ).astype(np.float32)
        return vector, obs["grid"]

    def batch(self, games: list[Game]) -> tuple[np.ndarray, np.ndarray]:
        """``(vectors float32 [B, vector_size], grids uint8 [B, grid, grid])`` of the
        states of ``B`` games of this program: row ``i`` is ``self(games[i])``, bit for
        bit (:func:`~hwmodels.tpu.observe.observe`'s pieces, vectorised over games)."""
        s, p = self.spec, self.program
        n, count = p.num_buffers, len(games)
        pos = np.array([g.position for g in games], dtype=np.int64)
        b = np.minimum(pos, n - 1)
        # the current buffer, the next k, the next `same` of its tensor: Table 1 rows
        idx = b[:, None] + np.arange(1 + s.k)
        idx[idx >= n] = -1
        nxt = p.next_same_tensor
        same = np.full((count, s.same), -1, dtype=np.int64)
        cur = b.copy()
        for i in range(s.same):
            cur = np.where(cur >= 0, nxt[np.maximum(cur, 0)], -1)
            same[:, i] = cur
        idx = np.concatenate([idx, same], axis=1)
        raw = np.where((idx >= 0)[..., None], p.features[np.maximum(idx, 0)], 0.0)
        raw = raw.astype(np.float32)
        benefit = [0.0 if g.done else g.benefit() for g in games]
        raw[:, 0, 8] = np.array(benefit, dtype=np.float32)
        # times and identities of the current buffer as its float32 row holds them
        cur_row = raw[:, 0]
        t = cur_row[:, 2].astype(np.int64)
        buffers = self.rows(raw.astype(np.float64), t[:, None], cur_row[:, 3:4], cur_row[:, 4:5])
        # occupancy: the grid around the target time, the profile at it
        records = [g.records() for g in games]
        t_obs = p.time[b].astype(np.int64)
        t0 = t_obs - s.window // 2
        grids = occupancy_grids(records, t0, t0 + s.window, (s.grid, s.grid), self.cap_bytes)
        prof = occupancy_grids(records, t_obs, t_obs + 1, (1, s.profile_bins), self.cap_bytes)
        # the supply window
        sup = np.zeros((count, s.supply_window), dtype=np.float32)
        s0 = t_obs - s.supply_window // 2
        steps = p.num_instructions
        for i, g in enumerate(games):
            lo, hi = max(int(s0[i]), 0), min(int(s0[i]) + s.supply_window, steps)
            sup[i, lo - s0[i] : hi - s0[i]] = g.supply(lo, hi) / PS_PER_S
        # per action: legal, interval, offset (-1 where undefined)
        act = np.full((count, len(ACTIONS), 4), -1.0, dtype=np.float32)
        for i, g in enumerate(games):
            if not g.done:
                for a in range(len(ACTIONS)):
                    pl = g.placement(a)
                    act[i, a] = (float(pl.legal), pl.start, pl.end, pl.offset)
        act = act.astype(np.float64)
        legal = act[:, :, 0]
        interval = np.clip((act[:, :, 1:3] - t[:, None, None]) / s.window, -TIME_CLIP, TIME_CLIP)
        offset = np.where(act[:, :, 3] >= 0, act[:, :, 3] / self.cap, -1.0)
        actions = np.concatenate(
            [legal[..., None], interval * legal[..., None], offset[..., None]], axis=2
        )
        moves = np.array([g.moves for g in games], dtype=np.int64)
        rank = p.group_rank[b]
        left = p.group_size[p.alias[b]] - rank - 1
        glob = np.stack([moves, pos, rank, left], axis=1).astype(np.float32).astype(np.float64)
        glob = np.stack(
            [glob[:, 0] / self.n, glob[:, 1] / self.n, np.log1p(glob[:, 2]), np.log1p(glob[:, 3])],
            axis=1,
        )
        vectors = np.concatenate(
            [
                buffers.reshape(count, -1),
                prof[:, 0],
                sup / self.max_supply_s,
                actions.reshape(count, -1),
                glob,
            ],
            axis=1,
        ).astype(np.float32)
        return vectors, grids


def occupancy_grids(
    records: list[dict[str, np.ndarray]],
    t0: np.ndarray,
    t1: np.ndarray,
    shape: tuple[int, int],
    cap: int,
) -> np.ndarray:
    """uint8 ``[B, *shape]``: :func:`hwmodels.tpu.observe.occupancy_grid` of ``B`` games
    at once (their ``records``, time windows ``[t0, t1)`` int64 ``[B]``)."""
    count = len(records)
    nt, no = shape
    sizes = [len(r["start"]) for r in records]
    game = np.repeat(np.arange(count), sizes)
    start = np.concatenate([r["start"] for r in records]) if count else np.zeros(0, np.int64)
    end = np.concatenate([r["end"] for r in records]) if count else np.zeros(0, np.int64)
    off = np.concatenate([r["offset"] for r in records]) if count else np.zeros(0, np.int64)
    size = np.concatenate([r["size"] for r in records]) if count else np.zeros(0, np.int64)
    a, z = t0[game], t1[game]
    keep = (start < z) & (end >= a)
    game, a, z = game[keep], a[keep], z[keep]
    s = np.clip(start[keep], a, z - 1) - a
    e = np.clip(end[keep], a, z - 1) - a
    lo = off[keep]
    hi = lo + size[keep] - 1
    width = z - a
    ts, te = s * nt // width, e * nt // width + 1
    os_, oe = lo * no // cap, hi * no // cap + 1
    cells = (nt + 1) * (no + 1)
    base = game * cells
    total = count * cells
    diff = (
        np.bincount(base + ts * (no + 1) + os_, minlength=total)
        - np.bincount(base + ts * (no + 1) + oe, minlength=total)
        - np.bincount(base + te * (no + 1) + os_, minlength=total)
        + np.bincount(base + te * (no + 1) + oe, minlength=total)
    ).reshape(count, nt + 1, no + 1)
    return (diff.cumsum(1).cumsum(2)[:, :nt, :no] > 0).astype(np.uint8)
