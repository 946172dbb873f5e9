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

T = TypeVar("T")

#: where a local search starts: choice 0 everywhere (EGRL Table 2's initial mapping
#: action, DRAM on NNP-I), a uniform random map, or the native compiler's map
STARTS = ("dram", "random", "native")


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


def check_positive(agent: str, **values: float) -> None:
    """Raise a ``ValueError`` naming the agent and the option if a value is not > 0."""
    for key, value in values.items():
        if not value > 0:
            raise ValueError(f"agent {agent!r}: option {key} must be > 0, got {value!r}")


def check_choice(agent: str, key: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise a ``ValueError`` naming the agent and the option if ``value`` is not allowed."""
    if value not in allowed:
        raise ValueError(f"agent {agent!r}: option {key} must be one of {allowed}, got {value!r}")


def start_mappings(env: Env, start: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` starting maps, int64 ``[n, N, H]``, for ``start`` in :data:`STARTS`."""
    if start == "dram":
        return np.zeros((n, env.num_units, env.num_heads), dtype=np.int64)
    if start == "random":
        return env.random_mappings(n, rng).astype(np.int64)
    if start == "native":
        return np.repeat(env.baseline_mapping[None], n, axis=0).astype(np.int64)
    raise ValueError(f"unknown start {start!r}; expected one of {STARTS}")
