"""Agent parameters from ``cfg.agent.options``, and the starting maps of local searches.

Each baseline agent declares its parameters as a dataclass whose fields carry the
defaults; :func:`parse_options` fills it from the keys the agent's YAML config
(``configs/agent/<name>.yaml``) adds beyond :class:`~egrl.config.AgentConfig`'s own, so
a misspelt key is an error that names the agent and the key instead of being ignored.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TypeVar

import numpy as np

from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import ConfigError

T = TypeVar("T")

#: where a local search starts: the target's initial map (EGRL Table 2's initial mapping
#: action: all-DRAM on NNP-I), a uniform random map, the native compiler's map, or the
#: target's fallback map (one it always accepts)
STARTS = ("initial", "random", "native", "fallback")
#: other accepted names of a start: ``dram`` is NNP-I's name for the initial map (the
#: name configs and results used before targets declared their initial maps)
START_ALIASES = {"dram": "initial"}


def parse_options(cls: type[T], cfg: TrainConfig) -> T:
    """An instance of the dataclass ``cls`` from ``cfg.agent.options``.

    Raises:
        KeyError: a key that is not a field of ``cls`` (named with the agent).
    """
    options = dict(cfg.agent.options or {})
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise KeyError(
            f"agent {cfg.agent.name!r} has no option(s) {unknown}; its options are {sorted(names)}"
        )
    return cls(**options)


def option_error(agent: str, text: str) -> ConfigError:
    """A bad agent option, named with its agent: a mistake in what the user typed, so
    ``egrl-train`` answers it with one line and exit status 2 (a ``ValueError`` too)."""
    return ConfigError([f"agent {agent!r}: {text}"])


def check_positive(agent: str, **values: float) -> None:
    """Raise a ``ValueError`` naming the agent and the option if a value is not > 0."""
    for key, value in values.items():
        if not value > 0:
            raise option_error(agent, f"option {key} must be > 0, got {value!r}")


def check_choice(agent: str, key: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise a ``ValueError`` naming the agent and the option if ``value`` is not allowed."""
    if value not in allowed:
        raise option_error(agent, f"option {key} must be one of {allowed}, got {value!r}")


def check_start(agent: str, key: str, value: str, allowed: tuple[str, ...] = STARTS) -> str:
    """The start ``value`` with its alias resolved (:data:`START_ALIASES`).

    Raises:
        ValueError: ``value`` is neither in ``allowed`` nor an alias of one (names the
            agent and the option).
    """
    resolved = START_ALIASES.get(value, value)
    if resolved not in allowed:
        aliases = {a: t for a, t in START_ALIASES.items() if t in allowed}
        raise option_error(
            agent, f"option {key} must be one of {allowed} (aliases: {aliases}), got {value!r}"
        )
    return resolved


def start_mappings(env: Env, start: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` starting maps, int64 ``[n, N, H]``, for ``start`` in :data:`STARTS` (or an
    alias of one)."""
    start = START_ALIASES.get(start, start)
    if start == "random":
        return env.random_mappings(n, rng).astype(np.int64)
    fixed = {
        "initial": env.initial_mapping,
        "native": env.baseline_mapping,
        "fallback": env.fallback_mapping,
    }
    if start not in fixed:
        raise ValueError(f"unknown start {start!r}; expected one of {STARTS}")
    return np.repeat(fixed[start][None], n, axis=0).astype(np.int64)
