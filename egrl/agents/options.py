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
from egrl.deploy import checked_prior
from egrl.env import Env, Evaluation
from egrl.ledger import Ledger
from egrl.validation import ConfigError, Rule, check_fields

T = TypeVar("T")

#: the most seconds the solve of a ``prior`` start takes (``prior_time_limit_s``)
DEFAULT_PRIOR_TIME_LIMIT_S = 60.0

#: where a local search starts: the target's initial map (EGRL Table 2's initial mapping
#: action: all-DRAM on NNP-I), a uniform random map, the native compiler's map, the
#: target's fallback map (one it always accepts), or its prior's solved map (``prior``:
#: :func:`egrl.deploy.checked_prior`, on a target with a prior, ``Env.has_prior``)
STARTS = ("initial", "random", "native", "fallback", "prior")
#: the start of a target's prior, paid as the run's first map (:func:`pay_prior_first`)
PRIOR = "prior"
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


def resolve_start(
    start: str, env: Env | None = None, agent: str = "", allowed: tuple[str, ...] = STARTS
) -> str:
    """``start`` with its alias resolved (:data:`START_ALIASES`).

    Raises:
        ConfigError: with ``env``, ``start`` is ``prior`` and the target has no prior
            (``Env.has_prior`` false): one line naming the agent, the option and the
            other starts of ``allowed``.
    """
    resolved = START_ALIASES.get(start, start)
    if resolved == PRIOR and env is not None and not env.has_prior:
        others = ", ".join(name for name in allowed if name != PRIOR)
        raise option_error(
            agent,
            f"option start=prior is invalid: {type(env.target).__name__} on "
            f"{env.workload.name!r} has no prior to solve (the built-in nnpi, mcm and "
            "banked models are their own; an external chip takes "
            f"hwmodel.params.prior={{name: nnpi, ...}}); expected one of {others}",
        )
    return resolved


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


def start_mappings(
    env: Env,
    start: str,
    n: int,
    rng: np.random.Generator,
    prior_time_limit_s: float = DEFAULT_PRIOR_TIME_LIMIT_S,
) -> np.ndarray:
    """``n`` starting maps, int64 ``[n, N, H]``, for ``start`` in :data:`STARTS` (or an
    alias of one); ``prior``: the prior solved within ``prior_time_limit_s`` (cached on
    the env), as the target's compiler accepts it (:func:`egrl.deploy.checked_prior`)."""
    start = resolve_start(start)
    if start == "random":
        return env.random_mappings(n, rng).astype(np.int64)
    if start == PRIOR:
        return np.repeat(checked_prior(env, prior_time_limit_s)[None], n, axis=0)
    fixed = {
        "initial": env.initial_mapping,
        "native": env.baseline_mapping,
        "fallback": env.fallback_mapping,
    }
    if start not in fixed:
        raise ValueError(f"unknown start {start!r}; expected one of {STARTS}")
    return np.repeat(fixed[start][None], n, axis=0).astype(np.int64)


def pay_prior_first(ledger: Ledger, start: str, mapping: np.ndarray | None) -> Evaluation | None:
    """Pay ``mapping`` ``[N, H]`` alone (source ``prior``) where the run starts from the
    prior (``start``) and has been answered nothing yet, so that the prior's map is the
    run's first reading; None otherwise (another start, or a resumed run)."""
    if start != PRIOR or ledger.proposals:
        return None
    return ledger.evaluate(np.asarray(mapping, dtype=np.int64)[None], PRIOR)
