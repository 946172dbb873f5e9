"""Agents behind one interface: pick one with ``agent=NAME`` in ``egrl-train``.

Every agent is a :class:`~egrl.agents.base.SearchAgent`: it counts hardware evaluations
the same way, never exceeds the budget, and writes the same run directory. EGRL and its
ablations (``ea``: population only, ``pg``: learner only) are
:class:`egrl.agents.egrl.agent.EGRLAgent` with halves switched off by their configs
(``configs/agent/``); everything EGRL's own lives in :mod:`egrl.agents.egrl`.

>>> from egrl.agents import make_agent, names
>>> agent = make_agent(env, cfg, run_dir)   # cfg.agent.name picks the class
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from egrl import config
from egrl.config import AgentConfig, TrainConfig, from_mapping
from egrl.env import plain_config
from egrl.validation import Rule

if TYPE_CHECKING:
    from egrl.agents.base import Best, SearchAgent

_REGISTRY: dict[str, Callable[..., SearchAgent]] = {}
#: modules whose import registers agents
_BUILTIN_MODULES = (
    "egrl.agents.egrl.agent",
    "egrl.agents.random_search",
    "egrl.agents.greedy_dp",
    "egrl.agents.annealing",
    "egrl.agents.genetic",
    "egrl.agents.mbo.agent",
    "egrl.agents.nevergrad_search",
    "egrl.agents.optuna_search",
    "egrl.agents.smac_search",
    "egrl.agents.optimum_agent",
    "egrl.agents.evolution_strategies",
    "egrl.agents.random_legal",
    "egrl.agents.muzero",
    "egrl.agents.zero_shot",
)


def register_agent(*agent_names: str) -> Callable:
    """Register an agent class under one or more names."""

    def deco(cls):
        for name in agent_names:
            if name in _REGISTRY and _REGISTRY[name] is not cls:
                raise ValueError(f"agent {name!r} is already registered")
            _REGISTRY[name] = cls
        return cls

    return deco


def _load_builtins() -> None:
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)


def names() -> list[str]:
    """Names of the registered agents."""
    _load_builtins()
    return sorted(_REGISTRY)


def agent_class(name: str) -> type[SearchAgent]:
    """The class registered as ``name``; ``KeyError`` naming the registered ones if none."""
    _load_builtins()
    if name not in _REGISTRY:
        raise KeyError(f"unknown agent {name!r}; registered: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def train_config(cfg: Any) -> TrainConfig:
    """A run's :class:`~egrl.config.TrainConfig` from its nested mapping (a resolved Hydra
    config, or a plain dict), the agent section built by the agent's own config class (its
    ``config_class``: EGRL's owns the ``policy``, ``population`` and ``learner``
    sections); values are checked against the run's and the agent's rules."""
    return from_mapping(cfg, config_class(_agent_name(cfg)))


def config_class(name: str) -> type[AgentConfig]:
    """The config class of the agent registered as ``name`` (the plain
    :class:`~egrl.config.AgentConfig` for an unknown name: the agent is refused where it
    is built)."""
    try:
        return agent_class(name).config_class
    except KeyError:
        return AgentConfig


def run_rules(name: str | None = None) -> dict[str, Rule]:
    """Every rule of a run of agent ``name`` (:func:`egrl.config.run_rules`); without a
    name, of a run of any registered agent (a sweep may sweep the agent)."""
    if name is not None:
        return config.run_rules(config_class(name))
    rules: dict[str, Rule] = {}
    for agent in names():
        rules.update(config.run_rules(config_class(agent)))
    return rules


def _agent_name(cfg: Any) -> str:
    return str(dict(plain_config(cfg).get("agent") or {}).get("name", AgentConfig.name))


def make_agent(env, cfg, run_dir: str | Path | None = None) -> SearchAgent:
    """The agent ``cfg.agent.name`` on ``env``."""
    return agent_class(cfg.agent.name)(env, cfg, run_dir)


def __getattr__(name: str) -> Any:
    """``Best`` and ``SearchAgent``, imported on first use: the registry itself imports no
    agent, so the modules below it (configs, the run directory) can import it freely."""
    if name in ("Best", "SearchAgent"):
        from egrl.agents import base  # start-up time

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Best",
    "SearchAgent",
    "agent_class",
    "config_class",
    "make_agent",
    "names",
    "register_agent",
    "run_rules",
    "train_config",
]
