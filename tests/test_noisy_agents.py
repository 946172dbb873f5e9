"""Agents on a noisy target: a map an agent keeps on one lucky reading is read again, and
the agent carries the mean of its readings; a deterministic target is never read again."""

from __future__ import annotations

import numpy as np
import pytest

from egrl.agents import config_class, make_agent
from egrl.config import ConfirmConfig, TrainConfig
from tests.support.envs import noisy_env, small_env


def sa_config(budget: int = 120, reread: int = 5) -> TrainConfig:
    """SA, two chains, the confirmation off (the search's own readings only)."""
    agent = config_class("sa")(name="sa", options={"chains": 2, "steps": 5})
    confirm = ConfirmConfig(top=0, reread=reread)
    return TrainConfig(seed=0, budget=budget, progress=False, agent=agent, confirm=confirm)


@pytest.fixture
def sa_on_noise():
    return make_agent(noisy_env(cv=0.05), sa_config())


def test_a_chain_that_stood_is_read_again_and_carries_the_mean(sa_on_noise):
    agent = sa_on_noise
    agent.step()  # the starts
    agent.reward[:] = [4.0, 1.5]  # chain 0 on a lucky reading
    agent.stood[:] = [5, 4]  # chain 0 has stood reread (5) x 1 reading moves
    before = agent.ledger.iterations
    agent.ledger.read_rewards = lambda maps, source: np.array([2.0] * len(maps))
    agent._reread()
    assert agent.reward.tolist() == [3.0, 1.5]
    assert agent.readings.tolist() == [2, 1] and agent.stood.tolist() == [0, 4]
    agent.stood[:] = [9, 4]  # twice the readings: ten moves before the next one
    agent._reread()
    assert agent.readings.tolist() == [2, 1] and agent.ledger.iterations == before


def test_re_readings_are_paid_and_the_budget_holds(sa_on_noise):
    agent = sa_on_noise
    agent.run()
    assert agent.rereads > 0
    assert agent.ledger.iterations == 120 >= agent.ledger.paid_maps + agent.rereads


def test_a_deterministic_target_is_never_read_again():
    rows = []
    for reread in (5, 0):
        env = small_env(reward="repaired")
        agent = make_agent(env, sa_config(reread=reread))
        agent.run()
        assert agent.rereads == 0
        rows.append(
            [{k: v for k, v in r.items() if not k.startswith(("t_", "wall"))} for r in agent.rows]
        )
    assert repr(rows[0]) == repr(rows[1])  # NaN columns compare as text


def test_a_fixed_budget_optimizer_plans_for_the_maps_the_search_may_pay_for():
    """NGOpt is built for the budget less the confirmation's reserve (3 maps x 5 rounds
    beside the compiler's: 20 board runs), not for the whole budget."""
    pytest.importorskip("nevergrad")
    agent = config_class("nevergrad")(name="nevergrad", options={"batch": 4})
    cfg = TrainConfig(seed=0, budget=100, progress=False, agent=agent)
    noisy = make_agent(noisy_env(), cfg)
    assert noisy.confirm_reserve == 20 and noisy.ledger.budget_maps == 80
    assert noisy.optimizer.budget == 80
