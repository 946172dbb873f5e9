"""What a screen's cost model reads of a map: its one-hot choices and the target's description.

A map int ``[B, N, H]`` becomes float32 ``[B, N * sum(C_h)]``: for every unit, the
one-hot of its choice of each head (head ``h`` has ``C_h`` choices), unit-major. When the
target describes maps without measuring them (``Target.describe`` and
``Target.description_names``: bytes per memory level and overflow on NNP-I, per-chip loads
and cut edges on mcm), its ``[B, F]`` description follows, as ``sign(x) * log1p(|x|)``
(byte counts and picoseconds span many orders of magnitude). A prior (``screen.prior``:
another model of the same chip that describes its maps for free, such as the NNP-I model
of an external chip with the NNP-I heads) adds its description after the target's. A
target without either gives the one-hot alone.

The one-hot block depends on the workload (its width is ``N * sum(C_h)``);
:meth:`Featurizer.shared` gives the workload-independent view a model trained on several
workloads of one target reads instead: the share of units at each choice of each head,
then the descriptions.
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


def choice_shares(maps: np.ndarray, num_choices: np.ndarray) -> np.ndarray:
    """float32 ``[B, sum(num_choices)]``: the share of units at each choice of each head."""
    maps = np.asarray(maps, dtype=np.int64)
    b, n, _ = maps.shape
    width = int(np.sum(num_choices))
    return (
        one_hot(maps, num_choices).reshape(b, n, width).mean(axis=1)
        if n
        else np.zeros((b, width), np.float32)
    )


class Featurizer:
    """Maps to the cost model's inputs for one target (see the module docstring).

    Args:
        target: the bound hardware target (``env.target``); its ``describe`` is used when
            it has one.
        num_choices: int ``[H]``: choices of each head.
        prior: another description of the same maps (``describe(maps) -> [B, F']`` and
            ``description_names``), e.g. :func:`hwmodels.external.nnpi_prior`; its
            columns follow the target's, named ``prior_<name>``.
    """

    def __init__(self, target, num_choices: np.ndarray, prior=None) -> None:
        self.num_choices = np.asarray(num_choices, dtype=np.int64)
        self._describers = []
        #: names of the description columns after the one-hot block
        self.description_names: list[str] = []
        if getattr(target, "describe", None) is not None:
            self._describers.append(target.describe)
            self.description_names += list(getattr(target, "description_names", None) or [])
        if prior is not None:
            self._describers.append(prior.describe)
            self.description_names += [f"prior_{n}" for n in prior.description_names]

    def describe(self, maps: np.ndarray) -> np.ndarray:
        """float32 ``[B, F]``: the descriptions as ``sign(x) * log1p(|x|)`` (``F`` may be 0)."""
        maps = np.asarray(maps, dtype=np.int64)
        parts = [np.zeros((len(maps), 0), np.float64)]
        for describe in self._describers:
            described = np.asarray(describe(maps), np.float64)
            if described.ndim != 2 or len(described) != len(maps):
                raise ValueError(
                    f"describe(maps [{len(maps)}, ...]) must give [B, F], "
                    f"got {list(described.shape)}"
                )
            parts.append(described)
        described = np.concatenate(parts, axis=1)
        return np.nan_to_num(signed_log1p(described), nan=0.0, posinf=0.0, neginf=0.0).astype(
            np.float32
        )

    def __call__(self, maps: np.ndarray) -> np.ndarray:
        """float32 ``[B, N * sum(C_h) + F]`` for maps int ``[B, N, H]``."""
        return np.concatenate([one_hot(maps, self.num_choices), self.describe(maps)], axis=1)

    def shared(self, maps: np.ndarray) -> np.ndarray:
        """float32 ``[B, sum(C_h) + F]``: the same columns for every workload of the target
        (choice shares, then the descriptions)."""
        return np.concatenate([choice_shares(maps, self.num_choices), self.describe(maps)], axis=1)
