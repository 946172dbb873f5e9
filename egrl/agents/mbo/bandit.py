"""Which searcher gets how much of the next round's model calls: a bandit over searchers.

Each round a searcher's picks (the maps of the paid batch it found first) are scored on
the board; a pick is a *hit* if its measured reward is in the top quarter of the batch's
or beats the best reward paid before the batch. Every searcher keeps discounted counts of
its hits and picks (``discount`` per round, so that a searcher whose moves stop paying
loses its share), and the next round's shares are proportional to ``hits + 1`` (the
searcher that finds most of what pays gets most of the model calls; a hit *rate* would
reward a searcher for having few picks), with a floor ``min_share`` each, so that no
searcher is starved of the chance to show it pays again.
"""

from __future__ import annotations

import numpy as np


class SearcherBandit:
    """Shares of the model calls per searcher (see the module docstring).

    Args:
        names: the searchers, in the order their shares are given.
        min_share: the least share any searcher gets, in ``[0, 1 / len(names)]``.
        discount: weight of the past per round, in ``(0, 1]``.
    """

    def __init__(self, names: list[str], min_share: float = 0.1, discount: float = 0.8) -> None:
        self.names = list(names)
        self.min_share = float(min_share)
        self.discount = float(discount)
        self.hits = np.zeros(len(self.names))
        self.picks = np.zeros(len(self.names))

    def shares(self) -> np.ndarray:
        """float64 ``[S]``: each searcher's share of the next round, summing to 1."""
        credit = self.hits + 1.0
        floor = min(self.min_share, 1.0 / len(self.names))
        shares = floor + (1.0 - floor * len(self.names)) * credit / credit.sum()
        return shares / shares.sum()

    def update(self, owners: np.ndarray, rewards: np.ndarray, best_before: float) -> None:
        """Learn from a paid batch: ``owners`` int ``[B]`` (the searcher that found each
        map; -1: none, an exploration draw's finder is still its owner) and the measured
        ``rewards`` float ``[B]`` (NaN: not measured)."""
        self.hits *= self.discount
        self.picks *= self.discount
        ran = np.isfinite(rewards) & (owners >= 0)
        if not ran.any():
            return
        top = np.quantile(rewards[ran], 0.75)
        hit = ran & ((rewards >= top) | (rewards > best_before))
        np.add.at(self.picks, owners[ran], 1.0)
        np.add.at(self.hits, owners[hit], 1.0)

    def state_dict(self) -> dict:
        return {"hits": self.hits.copy(), "picks": self.picks.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.hits = np.asarray(state["hits"], dtype=np.float64).copy()
        self.picks = np.asarray(state["picks"], dtype=np.float64).copy()
