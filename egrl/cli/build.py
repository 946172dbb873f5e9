"""The environment and the training record of one ``egrl-train`` config, built the same
way by the run (:func:`egrl.cli.train.run`) and by the checks before it
(:func:`egrl.cli.checks.build_problems`), so that what the checks accept the run can build.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from egrl.config import TrainConfig, from_mapping
from egrl.env import Env, make_env

#: top-level keys of a run's config that are not :class:`~egrl.config.TrainConfig`'s
NOT_TRAINING = ("hwmodel", "workload", "resume", "logger", "hydra")


def _plain(cfg: Any) -> dict:
    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True)
    return dict(cfg)


def hw_params(cfg: Any) -> dict:
    """The hardware model's parameters (``hwmodel.params``) as a plain dict."""
    return dict((_plain(cfg).get("hwmodel") or {}).get("params") or {})


def env_from_config(cfg: Any) -> Env:
    """The hardware model ``cfg.hwmodel`` bound to the workload ``cfg.workload`` (raises
    what :func:`egrl.env.make_env` raises: a workload that does not fit, ...)."""
    task = _plain(cfg)
    workload = task.get("workload") or {}
    return make_env(
        hwmodel=task["hwmodel"]["name"],
        workload=workload["name"],
        invalid_reward_scale=task.get("invalid_reward_scale", 1.0),
        reward=task.get("reward", "egrl"),
        eliminate_data_movement=bool(workload.get("eliminate_data_movement", False)),
        **hw_params(task),
    )


def train_config(cfg: Mapping | Any) -> TrainConfig:
    """The run's :class:`~egrl.config.TrainConfig` (values checked by ``from_mapping``)."""
    task = _plain(cfg)
    return from_mapping({k: v for k, v in task.items() if k not in NOT_TRAINING})
