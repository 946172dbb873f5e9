"""CERL's learner portfolio: UCB1 allocation of rollouts."""

from __future__ import annotations

import numpy as np
import pytest

from egrl.agents.egrl.portfolio import LearnerPortfolio
from egrl.checkpoint import load_state, save_state


def _run(
    portfolio: LearnerPortfolio, means: list[float], generations: int, seed: int
) -> np.ndarray:
    """Allocate 6 rollouts per generation, reward them ``N(mean_i, 0.2)``; total counts ``[L]``."""
    rng = np.random.default_rng(seed)
    totals = np.zeros(len(portfolio), dtype=np.int64)
    for _ in range(generations):
        counts = portfolio.allocate(6, rng)
        assert counts.sum() == 6
        for i, n in enumerate(counts):
            if n:
                portfolio.update(i, rng.normal(means[i], 0.2, size=n))
        totals += counts
    return totals


def test_one_learner_always_gets_every_rollout():
    portfolio = LearnerPortfolio(["sac"], ucb_c=1.0, window=5)
    rng = np.random.default_rng(0)
    for n in (0, 1, 7):
        assert portfolio.allocate(n, rng).tolist() == [n]
        portfolio.update(0, np.ones(n))


def test_untried_learners_go_first():
    portfolio = LearnerPortfolio(["a", "b", "c"], ucb_c=1.0, window=5)
    portfolio.update(1, [3.0])
    counts = portfolio.allocate(2, np.random.default_rng(0))
    assert counts.tolist() == [1, 0, 1]


def test_the_better_learner_gets_more_and_both_are_explored():
    portfolio = LearnerPortfolio(["good", "bad"], ucb_c=1.0, window=10)
    totals = _run(portfolio, means=[1.0, 0.0], generations=40, seed=1)
    assert totals[0] > 2 * totals[1]
    assert totals[1] >= 5
    scores = portfolio.ucb_scores()
    assert scores[0] > scores[1]


def test_the_window_forgets_old_results():
    portfolio = LearnerPortfolio(["a", "b"], ucb_c=0.0, window=3)
    portfolio.update(0, [10.0, 10.0, 10.0])
    portfolio.update(1, [5.0, 5.0, 5.0])
    assert portfolio.values().tolist() == [10.0, 5.0]
    portfolio.update(0, [0.0, 0.0, 0.0])  # learner 0 got worse: its old rewards are gone
    assert portfolio.values().tolist() == [0.0, 5.0]
    assert portfolio.ucb_scores()[1] > portfolio.ucb_scores()[0]
    assert portfolio.visits.tolist() == [6, 3]


def test_max_statistic():
    portfolio = LearnerPortfolio(["a"], window=4, statistic="max")
    portfolio.update(0, [1.0, 3.0, 2.0])
    assert portfolio.values().tolist() == [3.0]


def test_state_round_trip(tmp_path):
    portfolio = LearnerPortfolio(["a", "b"], ucb_c=0.5, window=4)
    _run(portfolio, means=[0.2, 0.4], generations=5, seed=3)
    save_state(portfolio.state_dict(), tmp_path / "portfolio")
    restored = LearnerPortfolio(["a", "b"], ucb_c=9.0, window=1)
    restored.load_state_dict(load_state(tmp_path / "portfolio"))
    assert np.array_equal(restored.ucb_scores(), portfolio.ucb_scores())
    a = restored.allocate(10, np.random.default_rng(5))
    b = portfolio.allocate(10, np.random.default_rng(5))
    assert np.array_equal(a, b)


@pytest.mark.parametrize(
    "kwargs, message",
    [({"ucb_c": -1.0}, "ucb_c"), ({"window": 0}, "window"), ({"statistic": "median"}, "statistic")],
)
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LearnerPortfolio(["a"], **kwargs)


def test_bad_records_are_named():
    portfolio = LearnerPortfolio(["a", "b"])
    with pytest.raises(IndexError, match="learner index 2"):
        portfolio.update(2, [1.0])
    with pytest.raises(ValueError, match="finite"):
        portfolio.update(0, [np.inf])
