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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwmodels.tpu.game import Game
from hwmodels.tpu.observe import observe
from hwmodels.tpu.params import PS_PER_S
from hwmodels.tpu.program import Program

#: values per buffer row
ROW = 12
#: clip of relative times, in windows
TIME_CLIP = 8.0


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

    k: int = 5
    same: int = 5
    grid: int = 32
    window: int = 128
    profile_bins: int = 128
    supply_window: int = 64

    @property
    def vector_size(self) -> int:
        """Length of the feature vector."""
        rows = 1 + self.k + self.same
        return rows * ROW + self.profile_bins + self.supply_window + 3 * 4 + 4

    def __post_init__(self) -> None:
        for name in ("k", "same", "grid", "window", "profile_bins", "supply_window"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"encoder {name} must be an integer >= 1, got {value!r}")
        if self.grid % 4:
            raise ValueError(f"encoder grid must be a multiple of 4, got {self.grid}")


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

    def rows(self, raw: np.ndarray, t: int, tensor: float, alias: float) -> np.ndarray:
        """float32 ``[R, ROW]`` from Table 1 rows ``raw [R, 10]`` (all-zero rows: absent)."""
        w = float(self.spec.window)
        size = raw[:, 0]
        present = size > 0
        rel = np.clip((raw[:, [2, 5, 6]] - t) / w, -TIME_CLIP, TIME_CLIP)
        out = np.column_stack(
            [
                np.log2(size + 1) / 32,
                size / self.cap,
                raw[:, 1],
                rel,
                raw[:, 3] == tensor,
                raw[:, 4] == alias,
                np.log1p(raw[:, 7] / self.step_supply_s),
                raw[:, 8] / self.benefit_scale,
                np.log(np.maximum(raw[:, 9], 1)),
                present,
            ]
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
