"""Stable-Baselines3 on the gymnasium env as it is: PPO trains on resnet18 under NNP-I."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium.wrappers import FlattenObservation

from egrl.gym_env import RecordBest, make_gym_env

sb3 = pytest.importorskip("stable_baselines3")


def test_sb3_checker_accepts_the_flattened_env():
    from stable_baselines3.common.env_checker import check_env

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(FlattenObservation(make_gym_env("nnpi", "resnet18")))
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert not [m for m in messages if "render" not in m], messages


def test_ppo_trains_and_the_env_confirms_its_best_map():
    env = RecordBest(make_gym_env("nnpi", "resnet18"))  # as it is: obs [N, F], action [N * H]
    problem = env.unwrapped.env
    model = sb3.PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=4, seed=0, device="cpu")
    model.learn(total_timesteps=256)
    assert env.num_steps == 256 and problem.num_evaluations >= 256

    # the best map PPO proposed, evaluated again by the env, earns what it earned then
    best = env.best_map
    assert best.shape == (problem.num_units, problem.num_heads)
    fresh = make_gym_env("nnpi", "resnet18")
    fresh.reset(seed=0)
    _, reward, terminated, _, info = fresh.step(best.reshape(-1))
    assert terminated and reward == pytest.approx(env.best_reward)
    assert info["valid"] and info["speedup"] == pytest.approx(env.best_info["speedup"])
    assert info["speedup"] > 0.5

    # the trained policy's own answer is a map of the problem
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == (problem.num_units * problem.num_heads,)
    assert np.all(problem.evaluate(action.reshape(problem.num_units, -1)).speedup >= 0)
