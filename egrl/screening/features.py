"""What a screen's cost model reads of a map: its one-hot choices and the target's description.

A map int ``[B, N, H]`` becomes float32 ``[B, N * sum(C_h)]``: for every unit, the
one-hot of its choice of each head (head ``h`` has ``C_h`` choices), unit-major. When the
target describes maps without measuring them (``Target.describe`` and
``Target.description_names``: bytes per memory level and overflow on NNP-I, per-chip loads
and cut edges on mcm), its ``[B, F]`` description follows, as ``sign(x) * log1p(|x|)``
(byte counts and picoseconds span many orders of magnitude). A target without one (or
whose description is empty) gives the one-hot alone.
"""

from __future__ import annotations

import numpy as np

from egrl.features import signed_log1p


def one_hot(maps: np.ndarray, num_choices: np.ndarray) -> np.ndarray:
    """float32 ``[B, N * sum(num_choices)]``: each (unit, head) choice as a one-hot block.

    Args:
        maps: int ``[B, N, H]``, choice ``maps[b, n, h]`` in ``0 .. num_choices[h] - 1``.
        num_choices: int ``[H]``.
    """
    maps = np.asarray(maps, dtype=np.int64)
    b, n, h = maps.shape
    num_choices = np.asarray(num_choices, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(num_choices)[:-1]])  # [H]
    width = int(num_choices.sum())
    columns = (np.arange(n)[:, None] * width + offsets[None, :])[None] + maps  # [B, N, H]
    out = np.zeros((b, n * width), dtype=np.float32)
    np.put_along_axis(out, columns.reshape(b, n * h), 1.0, axis=1)
    return out


class Featurizer:
    """Maps to the cost model's inputs for one target (see the module docstring).

    Args:
        target: the bound hardware target (``env.target``); its ``describe`` is used when
            it has one.
        num_choices: int ``[H]``: choices of each head.
    """

    def __init__(self, target, num_choices: np.ndarray) -> None:
        self.num_choices = np.asarray(num_choices, dtype=np.int64)
        self._describe = getattr(target, "describe", None)
        names = list(getattr(target, "description_names", None) or [])
        #: names of the description columns after the one-hot block
        self.description_names: list[str] = names if self._describe is not None else []

    def __call__(self, maps: np.ndarray) -> np.ndarray:
        """float32 ``[B, N * sum(C_h) + F]`` for maps int ``[B, N, H]``."""
        onehot = one_hot(maps, self.num_choices)
        if self._describe is None:
            return onehot
        described = np.asarray(self._describe(np.asarray(maps, dtype=np.int64)), np.float64)
        if described.ndim != 2 or len(described) != len(onehot):
            raise ValueError(
                f"describe(maps [{len(onehot)}, ...]) must give [B, F], got {list(described.shape)}"
            )
        if described.shape[1] == 0:
            return onehot
        described = np.nan_to_num(signed_log1p(described), nan=0.0, posinf=0.0, neginf=0.0)
        return np.concatenate([onehot, described.astype(np.float32)], axis=1)
