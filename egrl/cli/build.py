"""The environment and the training record of one ``egrl-train`` config, built the same
way by the run (:func:`egrl.cli.train.run`) and by the checks before it
(:func:`egrl.cli.checks.build_problems`), so that what the checks accept the run can build
(:func:`egrl.env.env_from_config`, :func:`egrl.agents.train_config`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from egrl import env as environment
from egrl.agents import train_config as agent_train_config
from egrl.config import TrainConfig
from egrl.env import Env, hw_params, plain_config

__all__ = ["NOT_TRAINING", "env_from_config", "hw_params", "train_config"]

#: top-level keys of a run's config that are not :class:`~egrl.config.TrainConfig`'s
NOT_TRAINING = ("hwmodel", "workload", "resume", "logger", "hydra")
#: the keys that say which environment a config binds
TARGET_KEYS = ("hwmodel", "workload", "reward", "invalid_reward_scale")

#: the environment the checks bound, by its target's keys, kept for the run of the same
#: config in the same process: binding a chip measures the compiler's map, once a command
_kept: dict[str, Env] = {}


def env_from_config(cfg: Mapping | Any, keep: bool = False) -> Env:
    """:func:`egrl.env.env_from_config`, or the environment the checks bound for the same
    target and kept (``keep=True``; it is handed over once)."""
    task = plain_config(cfg)
    key = json.dumps({k: task.get(k) for k in TARGET_KEYS}, sort_keys=True, default=str)
    env = _kept.pop(key, None) or environment.env_from_config(task)
    if keep:
        _kept[key] = env
    return env


def train_config(cfg: Mapping | Any) -> TrainConfig:
    """The run's :class:`~egrl.config.TrainConfig`, its agent's section built by the
    agent's own config class (values checked: :func:`egrl.agents.train_config`)."""
    task = plain_config(cfg)
    return agent_train_config({k: v for k, v in task.items() if k not in NOT_TRAINING})
