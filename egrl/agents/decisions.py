"""A map's decisions as named choices, for the optimisers that search over named
parameters (Optuna's trials, SMAC's configurations).

Decision ``(unit, head)`` is the parameter ``UNIT:HEAD``, in the map's row-major order;
its value is the head's choice label (``DRAM``, ``LLC``, ``SRAM`` on NNP-I) or, when
``labelled`` is off, the choice's index.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from egrl.env import Env


class Decisions:
    """The named decisions of ``env``'s maps (see the module docstring).

    Attributes:
        names: ``N * H`` parameter names, ``UNIT:HEAD`` in the map's row-major order.
        labels: each head's choice labels.
        counts: int64 ``[N * H]``, the number of choices of each decision.
        labelled: values are labels (True) or choice indices (False).
    """

    def __init__(self, env: Env, labelled: bool = True) -> None:
        self.shape = (env.num_units, env.num_heads)
        self.names = [f"{u}:{h}" for u in env.unit_names for h in env.heads]
        self.labels = [list(choices) for choices in env.heads.values()]
        self.counts = np.broadcast_to(env.num_choices, self.shape).reshape(-1).astype(np.int64)
        self.labelled = labelled

    def head(self, i: int) -> int:
        """The head of decision ``i``."""
        return i % self.shape[1]

    def values(self, mapping: np.ndarray) -> dict:
        """``{name: value}`` of an int ``[N, H]`` map."""
        flat = np.asarray(mapping, dtype=np.int64).reshape(-1).tolist()
        if not self.labelled:
            return dict(zip(self.names, flat))
        return {n: self.labels[self.head(i)][v] for i, (n, v) in enumerate(zip(self.names, flat))}

    def mapping(self, values: Mapping) -> np.ndarray:
        """The int64 ``[N, H]`` map of ``{name: value}``."""
        flat = [values[n] for n in self.names]
        if self.labelled:
            flat = [self.labels[self.head(i)].index(v) for i, v in enumerate(flat)]
        return np.asarray(flat, dtype=np.int64).reshape(self.shape)
