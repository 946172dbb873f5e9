"""Agents behind one interface: pick one with ``agent=NAME`` in ``egrl-train``.

Every agent is a :class:`~egrl.agents.base.SearchAgent`: it counts hardware evaluations
the same way, never exceeds the budget, and writes the same run directory. EGRL and its
ablations (``ea``: population only, ``pg``: learner only) are
:class:`egrl.agents.egrl.trainer.Trainer` with halves switched off by their configs
(``configs/agent/``); everything EGRL's own lives in :mod:`egrl.agents.egrl`.

>>> from egrl.agents import make_agent, names
>>> agent = make_agent(env, cfg, run_dir)   # cfg.agent.name picks the class
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from egrl.agents.base import Best, SearchAgent

_REGISTRY: dict[str, Callable[..., SearchAgent]] = {}
#: modules whose import registers agents
_BUILTIN_MODULES = (
    "egrl.agents.egrl.trainer",
    "egrl.agents.random_search",
    "egrl.agents.greedy_dp",
    "egrl.agents.annealing",
    "egrl.agents.genetic",
    "egrl.agents.ngopt",
    "egrl.agents.optimum_agent",
    "egrl.agents.game_search",
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


def make_agent(env, cfg, run_dir: str | Path | None = None) -> SearchAgent:
    """The agent ``cfg.agent.name`` on ``env``."""
    return agent_class(cfg.agent.name)(env, cfg, run_dir)


def __getattr__(name: str) -> Any:
    """``Best`` and ``SearchAgent``, imported on first use: the registry itself imports no
    agent, so the modules below it (configs, the run directory) can import it freely."""
    if name in ("Best", "SearchAgent"):
        from egrl.agents import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Best", "SearchAgent", "agent_class", "make_agent", "names", "register_agent"]
