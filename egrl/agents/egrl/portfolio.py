"""CERL's portfolio of learners: share a generation's learner rollouts by UCB1.

CERL (Khadka et al. 2019) trains several policy-gradient learners (e.g. with different
discounts) on the same replay buffer and lets each generation's rollouts go mostly to
the learners whose recent rollouts scored best, while still trying the others. EGRL runs
one learner (the portfolio then always picks it); :class:`LearnerPortfolio` keeps the
general case.

Scores: for learner ``i`` with ``n_i`` recorded rollouts out of ``n`` in all, its value
``v_i`` is the mean (or max) of its last ``window`` rewards, min-max normalised over the
learners to ``[0, 1]``, and its UCB1 score is ``u_i = v_i + c * sqrt(ln(n) / n_i)``.
Learners never tried get one rollout each first; the rest are drawn from a categorical
with probabilities proportional to ``u_i`` (CERL's roulette wheel), so the better learner
gets more rollouts and every learner keeps a chance.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

STATISTICS = ("mean", "max")


class LearnerPortfolio:
    """UCB1 allocation of rollouts among learners.

    Args:
        learners: the learners (any objects; :class:`egrl.agents.egrl.sac.SACDiscrete` in EGRL).
        ucb_c: exploration coefficient ``c`` (>= 0).
        window: rewards per learner that its value is computed from (>= 1).
        statistic: ``"mean"`` or ``"max"`` of the windowed rewards.
    """

    def __init__(
        self, learners: Sequence, ucb_c: float = 1.0, window: int = 10, statistic: str = "mean"
    ):
        if len(learners) < 1:
            raise ValueError("a learner portfolio needs at least one learner")
        if ucb_c < 0:
            raise ValueError(f"ucb_c must be >= 0, got {ucb_c}")
        if int(window) < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
        self.learners = list(learners)
        self.ucb_c = float(ucb_c)
        self.window = int(window)
        self.statistic = statistic
        self._recent = [deque(maxlen=self.window) for _ in self.learners]
        self.visits = np.zeros(len(self.learners), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.learners)

    # ------------------------------------------------------------------ record
    def update(self, learner_idx: int, rewards) -> None:
        """Add the rewards ``[R]`` (or one float) of rollouts made by learner ``learner_idx``."""
        if not 0 <= int(learner_idx) < len(self):
            raise IndexError(f"learner index {learner_idx} out of range 0..{len(self) - 1}")
        values = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(values)):
            raise ValueError(f"rewards of learner {learner_idx} are not all finite: {values}")
        self._recent[int(learner_idx)].extend(values.tolist())
        self.visits[int(learner_idx)] += values.size

    # ------------------------------------------------------------------ scores
    def values(self) -> np.ndarray:
        """float ``[L]``: windowed statistic of each learner's rewards (NaN if none yet)."""
        reduce = np.mean if self.statistic == "mean" else np.max
        return np.array([reduce(r) if r else np.nan for r in self._recent], dtype=np.float64)

    def ucb_scores(self) -> np.ndarray:
        """float ``[L]``: ``v_i + c sqrt(ln n / n_i)`` with normalised values; ``inf`` if untried."""
        values = self.values()
        tried = self.visits > 0
        scores = np.full(len(self), np.inf)
        if not tried.any():
            return scores
        v = values[tried]
        spread = v.max() - v.min()
        normalised = (v - v.min()) / spread if spread > 0 else np.zeros_like(v)
        total = self.visits.sum()
        bonus = self.ucb_c * np.sqrt(np.log(total) / self.visits[tried])
        scores[tried] = normalised + bonus
        return scores

    # -------------------------------------------------------------- allocation
    def allocate(self, num_rollouts: int, rng: np.random.Generator) -> np.ndarray:
        """int64 ``[L]``: how many of ``num_rollouts`` each learner makes this generation."""
        if int(num_rollouts) < 0:
            raise ValueError(f"num_rollouts must be >= 0, got {num_rollouts}")
        counts = np.zeros(len(self), dtype=np.int64)
        remaining = int(num_rollouts)
        if len(self) == 1:
            counts[0] = remaining
            return counts
        scores = self.ucb_scores()
        untried = np.flatnonzero(np.isinf(scores))
        first = untried[:remaining]
        counts[first] += 1
        remaining -= len(first)
        if remaining == 0:
            return counts
        finite = np.where(np.isinf(scores), 0.0, scores)
        probs = finite / finite.sum() if finite.sum() > 0 else np.full(len(self), 1.0 / len(self))
        counts += rng.multinomial(remaining, probs)
        return counts

    # ------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        """Recent rewards per learner and visit counts (plain lists and ints)."""
        return {
            "recent": [list(r) for r in self._recent],
            "visits": self.visits.tolist(),
            "ucb_c": self.ucb_c,
            "window": self.window,
            "statistic": self.statistic,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` of a portfolio with as many learners."""
        if len(state["visits"]) != len(self):
            raise ValueError(
                f"portfolio checkpoint has {len(state['visits'])} learners, this one {len(self)}"
            )
        self.ucb_c = float(state["ucb_c"])
        self.window = int(state["window"])
        self.statistic = str(state["statistic"])
        self._recent = [deque((float(v) for v in r), maxlen=self.window) for r in state["recent"]]
        self.visits = np.asarray(state["visits"], dtype=np.int64)
