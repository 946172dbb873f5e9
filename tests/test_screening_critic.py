"""``screen=critic``: the learner's twin-Q critic ranks the candidates of ``egrl`` and ``pg``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from egrl import make_env
from egrl.agents import make_agent
from egrl.agents.egrl.sac import SACConfig, SACDiscrete
from egrl.config import ScreenConfig
from egrl.measure_cache import MeasureCache
from egrl.replay import ReplayBuffer
from egrl.screening.critic import CriticModel, LearnerCritic
from egrl.screening.models import Domain, Measured, build_model
from egrl.screening.screen import SCREEN_COLUMNS, Screen, spearman
from egrl.validation import ConfigError
from tests.support.command_line import assert_refused, egrl_train, egrl_train_in_process
from tests.support.egrl_runs import TINY_POLICY
from tests.support.metrics import read_metrics
from tests.support.screening import assert_resumes_identically, run_config

pytestmark = pytest.mark.usefixtures("one_thread")

EGRL = {"name": "egrl"}
PG = {"name": "pg", "use_population": False, "migration": False}


def config(agent: dict, budget: int, seed: int = 0, **screen):
    """A run on resnet18 with a critic screen (small pool, warmup and policies)."""
    screen = {"name": "critic", "pool": 3, "explore": 0.25, "warmup": 12, **screen}
    return run_config(agent, budget, screen, seed)


def trained_learner(env, maps: np.ndarray, rewards: np.ndarray, updates: int) -> SACDiscrete:
    """A small learner whose critic made ``updates`` updates on ``(maps, rewards)``."""
    learner = SACDiscrete.build(
        int(env.graph.x.shape[1]),
        [int(c) for c in env.num_choices],
        seed=0,
        config=SACConfig(batch_size=32, lr_critic=3e-3),
        **TINY_POLICY,
    )
    buffer = ReplayBuffer(len(maps), env.num_units, env.num_heads)
    buffer.add(maps, rewards, "learner")
    if updates:
        learner.train_steps([(env.graph, buffer)], updates, np.random.default_rng(0))
    return learner


def test_the_critic_model_ranks_by_the_learners_q():
    env = make_env("nnpi", "resnet18")
    rng = np.random.default_rng(0)
    maps = env.random_mappings(300, rng)
    rewards = (maps[:, :, 0] == 0).mean(axis=1)  # a reward the critic can learn
    learner = trained_learner(env, maps[:200], rewards[:200], 150)
    critic = LearnerCritic([learner], env.graph, chunk=7)  # chunks of 7 maps
    domain = Domain.of(env)
    model = build_model("critic", 0, {}, critic)
    assert isinstance(model, CriticModel)
    model.fit([Measured(domain, maps[:200], rewards[:200])])
    predicted = model.predict(domain, maps[200:])
    assert predicted.shape == (100,) and predicted.dtype == np.float64
    # min(Q1, Q2) of the clean one-hot maps, as the learner's critic computes it
    with torch.no_grad():
        one_hot = F.one_hot(torch.as_tensor(maps[200:]), learner.mask.shape[-1]).float()
        q1, q2 = learner.critic(env.graph.x, env.graph.edge_index, one_hot * learner.mask)
    np.testing.assert_allclose(predicted, torch.minimum(q1, q2).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(critic(maps[200:]), predicted)
    assert spearman(predicted, rewards[200:]) > 0.6  # maps it never saw
    # the model is the critic as it was at fit: the learner's later updates do not move it
    buffer = ReplayBuffer(200, env.num_units, env.num_heads)
    buffer.add(maps[:200], -rewards[:200], "learner")
    learner.train_steps([(env.graph, buffer)], 5, np.random.default_rng(1))
    np.testing.assert_array_equal(model.predict(domain, maps[200:]), predicted)
    assert not np.array_equal(critic(maps[200:]), predicted)


def test_the_screen_waits_for_the_critic_and_refits_when_it_changed():
    env = make_env("nnpi", "resnet18")
    rng = np.random.default_rng(0)
    maps = env.random_mappings(40, rng)
    learner = trained_learner(env, maps, rng.random(40), 0)
    cfg = ScreenConfig(name="critic", pool=2, warmup=10)
    screen = Screen(cfg, Domain.of(env), MeasureCache(0, 3), seed=0)
    screen.attach_critic(LearnerCritic([learner], env.graph))
    screen.observe(maps[:20], rng.random(20))
    assert not screen.refit() and not screen.active  # past the warmup, the critic untrained
    first = screen.select(maps[20:], keep=3)
    assert first.tolist() == [0, 1, 2]  # the agent's first proposals
    buffer = ReplayBuffer(40, env.num_units, env.num_heads)
    buffer.add(maps, rng.random(40), "learner")
    learner.train_steps([(env.graph, buffer)], 2, rng)
    assert screen.refit() and screen.active and not screen.refit()
    learner.train_steps([(env.graph, buffer)], 1, rng)
    assert screen.refit()  # the critic changed, no new measurement
    with pytest.raises(ValueError, match="none was attached"):
        bare = Screen(cfg, Domain.of(env), MeasureCache(0, 3), seed=0)
        bare.observe(maps[:20], rng.random(20))
        bare.refit()


@pytest.mark.parametrize(("agent", "budget"), [(EGRL, 60), (PG, 40)])
def test_critic_screened_runs_log_the_model_and_resume_identically(agent, budget, tmp_path):
    env = make_env("nnpi", "resnet18")
    reference = tmp_path / "reference"
    run = make_agent(env, config(agent, budget), reference)
    assert run.ledger.screen.critic is not None
    run.run()
    assert (
        run.ledger.iterations == budget == env.num_evaluations and len(run.ledger.screen) == budget
    )
    rows = read_metrics(reference)
    assert set(SCREEN_COLUMNS) <= set(rows[0])
    quality = np.array([float(r["screen_spearman"]) for r in rows])
    # no model until the learner has trained; then it ranks the generations' paid maps
    assert np.isnan(quality[0]) and np.isfinite(quality).sum() >= 3

    assert_resumes_identically(reference, tmp_path / "resumed", config(agent, budget), 12)


def test_agents_without_a_critic_refuse_it():
    """The agent refuses; the command line's check (below) names the agents that have one."""
    with pytest.raises(ConfigError, match="screen=critic is invalid: agent 'ea' has no critic"):
        make_agent(make_env("nnpi", "resnet18"), config({"name": "ea", "use_learner": False}, 10))


@pytest.mark.parametrize(
    ("agent", "train"),
    [pytest.param("ea", egrl_train, marks=pytest.mark.slow), ("random", egrl_train_in_process)],
    ids=["ea", "random-in-process"],
)
def test_the_command_line_refuses_a_critic_screen_without_a_critic(tmp_path, agent, train):
    out = train("workload=resnet18", "budget=20", f"agent={agent}", "screen=critic", cwd=tmp_path)
    line = f"screen=critic is invalid: agent '{agent}' has no critic (agents with one: egrl, pg)"
    assert_refused(out, line)
    assert list(tmp_path.iterdir()) == []
