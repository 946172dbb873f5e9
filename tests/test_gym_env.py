"""The gymnasium wrapper, on the external model's example chip and a tiny workload."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import egrl
from egrl.gym_env import ENV_ID, FEATURE_BOUND, MappingEnv, RecordBest, make_gym_env
from tests.support.chips import external_chip, tiny_workload
from workloads.ir import Node, Workload

#: the checker's warnings (unbounded spaces, odd dtypes) are errors here
CHECKED = "error::UserWarning"

#: every test measures through the example chip, a process per call
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def problem() -> egrl.Env:
    return egrl.make_env(external_chip(), tiny_workload())


@pytest.mark.filterwarnings(CHECKED)
@pytest.mark.parametrize("flat_actions", [True, False])
@pytest.mark.parametrize("observe_edges", [False, True])
def test_check_env_passes(observe_edges, flat_actions):
    env = gym.make(
        ENV_ID,
        hwmodel=external_chip(),
        workload=tiny_workload(),
        observe_edges=observe_edges,
        flat_actions=flat_actions,
    )
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.filterwarnings(CHECKED)
def test_check_env_passes_without_edges_in_the_graph():
    lone = Workload("lone", [Node("fc", "linear", [], [], (1, 10), weight_bytes=640, macs=640)])
    env = gym.make(ENV_ID, hwmodel=external_chip(), workload=lone, observe_edges=True).unwrapped
    assert env.observation_space["edge_index"].shape == (2, 0)
    check_env(env, skip_render_check=True)


def test_spaces_follow_the_problem(problem):
    env = MappingEnv(problem)
    assert env.observation_space.shape == (4, 19) and env.observation_space.dtype == np.float32
    assert env.observation_space.high.max() == np.float32(FEATURE_BOUND) == np.float32(709.7827)
    assert env.observation_space.low.min() == -np.float32(FEATURE_BOUND)
    np.testing.assert_array_equal(env.action_space.nvec, np.full(8, 3))
    assert env.action_space.nvec.ndim == 1  # what Stable-Baselines3 accepts
    np.testing.assert_array_equal(
        MappingEnv(problem, flat_actions=False).action_space.nvec, np.full((4, 2), 3)
    )
    obs, info = env.reset(seed=0)
    np.testing.assert_array_equal(obs, problem.graph.x.numpy())
    assert info == {}
    edges = MappingEnv(problem, observe_edges=True).reset()[0]["edge_index"]
    np.testing.assert_array_equal(edges, problem.workload.edge_index)


def test_step_is_one_evaluation(problem):
    env = MappingEnv(problem)
    before = problem.num_evaluations
    env.reset()
    obs, reward, terminated, truncated, info = env.step(problem.baseline_mapping)
    assert (terminated, truncated) == (True, False)
    assert problem.num_evaluations == before + 1
    assert reward == pytest.approx(1.0) and info["speedup"] == pytest.approx(1.0)
    assert info["valid"] and info["reassigned_ratio"] == 0.0
    assert info["latency_s"] == pytest.approx(problem.baseline_latency_s)
    np.testing.assert_array_equal(info["rectified"], problem.baseline_mapping)

    env.reset()
    _, reward, _, _, info = env.step(np.full((4, 2), 2))  # all SRAM overflows the chip
    assert not info["valid"] and info["latency_s"] is None and info["speedup"] == 0.0
    assert reward == pytest.approx(-info["reassigned_ratio"]) and reward < 0


def test_make_gym_env_passes_env_options():
    env = make_gym_env(external_chip(), tiny_workload(), invalid_reward_scale=2.0)
    env.reset()
    _, reward, _, _, info = env.step(np.full((4, 2), 2))
    assert reward == pytest.approx(-2.0 * info["reassigned_ratio"])


def test_episode_must_be_reset(problem):
    env = MappingEnv(problem)
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.zeros((4, 2), dtype=np.int64))
    env.reset()
    env.step(np.zeros((4, 2), dtype=np.int64))
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(np.zeros((4, 2), dtype=np.int64))


def test_bad_action_is_named(problem):
    env = MappingEnv(problem)
    env.reset()
    with pytest.raises(
        ValueError, match=r"flat array of length 8 .* map of shape \[4, 2\], got shape \[3, 2\]"
    ):
        env.step(np.zeros((3, 2), dtype=np.int64))
    env.reset()
    with pytest.raises(ValueError, match="expected 0..2"):
        env.step(np.full(8, 3))


@pytest.mark.parametrize("flat_actions", [True, False])
def test_flat_and_map_actions_are_the_same_map(problem, flat_actions):
    env = MappingEnv(problem, flat_actions=flat_actions)
    env.action_space.seed(0)
    action = env.action_space.sample()
    assert action.shape == ((8,) if flat_actions else (4, 2))
    as_map = action.reshape(4, 2)
    np.testing.assert_array_equal(env.to_map(action), as_map)
    env.reset()
    _, by_action, _, _, _ = env.step(action)
    env.reset()
    _, by_map, _, _, _ = env.step(as_map)  # a map [N, H] is always accepted
    env.reset()
    _, by_flat, _, _, _ = env.step(as_map.reshape(-1))
    assert by_action == by_map == by_flat == problem.evaluate(as_map).reward[0]


def test_record_best_keeps_the_best_map(problem):
    env = RecordBest(MappingEnv(problem))
    assert env.best_map is None and env.best_reward == -np.inf
    env.action_space.seed(1)
    rewards = []
    for _ in range(5):
        env.reset()
        rewards.append(env.step(env.action_space.sample())[1])
    env.reset()
    rewards.append(env.step(problem.baseline_mapping.reshape(-1))[1])
    assert env.num_steps == 6 and env.best_reward == max(rewards)
    assert env.best_map.shape == (4, 2)
    assert problem.evaluate(env.best_map).reward[0] == env.best_reward
    assert env.best_info["speedup"] == problem.evaluate(env.best_map).speedup[0]


def rollouts(env: MappingEnv, seed: int, episodes: int) -> list[tuple]:
    """A random agent: ``episodes`` one-step episodes, actions from the seeded space."""
    env.action_space.seed(seed)
    out = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        action = env.action_space.sample()
        _, reward, terminated, _, info = env.step(action)
        assert terminated
        out.append((action.tolist(), reward, info["valid"]))
    return out


def test_random_agent_is_reproducible(problem):
    a = rollouts(MappingEnv(problem), seed=3, episodes=6)
    b = rollouts(MappingEnv(problem), seed=3, episodes=6)
    c = rollouts(MappingEnv(problem), seed=4, episodes=6)
    assert a == b
    assert [x[0] for x in a] != [x[0] for x in c]
    for _, reward, valid in a:
        assert (reward > 0) == valid
