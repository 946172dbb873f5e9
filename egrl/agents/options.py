"""Agent parameters from ``cfg.agent.options``, and the starting maps of local searches.

Each agent declares its parameters as a dataclass whose fields carry the defaults and,
beside each, what it accepts (:func:`egrl.validation.ruled`); :func:`parse_options` fills
it from the keys the agent's YAML config (``configs/agent/<name>.yaml``) adds beyond
:class:`~egrl.config.AgentConfig`'s own and checks every value against its rule, so a
misspelt key or a value out of range is an error that names the agent and the key
(``agent 'sa': option chains=0 is invalid: expected an integer >= 1``) instead of being
ignored.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import TypeVar

import numpy as np

from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import ConfigError, Rule, check_fields

T = TypeVar("T")

#: where a local search starts: the target's initial map (EGRL Table 2's initial mapping
#: action: all-DRAM on NNP-I), a uniform random map, the native compiler's map, or the
#: target's fallback map (one it always accepts)
STARTS = ("initial", "random", "native", "fallback")
#: other accepted names of a start: ``dram`` is NNP-I's name for the initial map (the
#: name configs and results used before targets declared their initial maps)
START_ALIASES = {"dram": "initial"}


def start_rule(allowed: tuple[str, ...] = STARTS, optional: bool = False) -> Rule:
    """What a start option accepts: a name of ``allowed`` or an alias of one
    (:data:`START_ALIASES`; :func:`resolve_start` turns it into its name), or with
    ``optional`` null too."""
    aliases = {a: t for a, t in START_ALIASES.items() if t in allowed}
    pattern = "|".join(re.escape(name) for name in (*allowed, *aliases))
    words = ", ".join(allowed) + "".join(f" (alias {a} for {t})" for a, t in aliases.items())
    return Rule(str, pattern=pattern, describe=f"one of {words}", optional=optional)


def resolve_start(start: str) -> str:
    """``start`` with its alias resolved (:data:`START_ALIASES`)."""
    return START_ALIASES.get(start, start)


def parse_options(cls: type[T], cfg: TrainConfig) -> T:
    """An instance of the dataclass ``cls`` from ``cfg.agent.options``, every value checked
    against the rule its field carries (:func:`egrl.validation.ruled`).

    Raises:
        KeyError: a key that is not a field of ``cls`` (named with the agent).
        ConfigError: a value its rule does not accept, or fields that do not go together
            (one line each, naming the agent, the option and what it accepts).
    """
    options = dict(cfg.agent.options or {})
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - names)
    if unknown:
        raise KeyError(
            f"agent {cfg.agent.name!r} has no option(s) {unknown}; its options are {sorted(names)}"
        )
    parsed = cls(**options)
    check_fields(parsed, prefix=f"agent {cfg.agent.name!r}: option ")
    return parsed


def option_error(agent: str, text: str) -> ConfigError:
    """A bad agent option, named with its agent: a mistake in what the user typed, so
    ``egrl-train`` answers it with one line and exit status 2 (a ``ValueError`` too).
    For what the target or the run's files refuse (a rule of the option alone is its
    field's)."""
    return ConfigError([f"agent {agent!r}: {text}"])


def start_mappings(env: Env, start: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` starting maps, int64 ``[n, N, H]``, for ``start`` in :data:`STARTS` (or an
    alias of one)."""
    start = resolve_start(start)
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
