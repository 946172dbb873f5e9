"""The asks and tells of an external ask/tell optimizer, kept for an exact resume.

Optimizers such as Nevergrad's and SMAC's keep state that the toolkit's checkpoints
(plain data and tensors, no pickle) cannot hold. Their agents record how many candidates
were asked each generation and the values told back; a resumed run rebuilds the
optimizer from its seed and replays the record (no measurement is made again), which
gives it the state it had.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class AskTellHistory:
    """Candidates asked and values told, per generation.

    Args:
        values_key: the name its values take in a checkpoint (``losses``, ``costs``).
    """

    def __init__(self, values_key: str) -> None:
        self.values_key = values_key
        self.asked: list[int] = []  # candidates asked per generation
        self.told: list[np.ndarray] = []  # float64 values told per generation

    def add(self, asked: int, values: np.ndarray) -> None:
        """One generation: ``asked`` candidates, told ``values`` float ``[asked]``."""
        self.asked.append(int(asked))
        self.told.append(np.asarray(values, dtype=np.float64).copy())

    def state_dict(self) -> dict:
        """``asked`` int ``[G]``, the values ``[sum(asked)]`` and ``told`` int ``[G]``."""
        return {
            "asked": np.array(self.asked, dtype=np.int64),
            self.values_key: np.concatenate(self.told) if self.told else np.zeros(0),
            "told": np.array([len(x) for x in self.told], dtype=np.int64),
        }

    def replay(
        self,
        state: dict,
        ask: Callable[[], Any],
        tell: Callable[[list, np.ndarray], None],
    ) -> None:
        """Replay a :meth:`state_dict` on a rebuilt optimizer: each generation's asks,
        then its tells, as the run made them; the record becomes the state's."""
        values = np.asarray(state[self.values_key], dtype=np.float64)
        bounds = np.concatenate([[0], np.cumsum(state["told"])])
        self.asked, self.told = [], []
        for g, n in enumerate(np.asarray(state["asked"]).tolist()):
            told = values[bounds[g] : bounds[g + 1]]
            tell([ask() for _ in range(n)], told)
            self.add(n, told)
