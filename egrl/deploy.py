"""The map a run deploys: never slower than a map the run has read and knows to be faster.

A search's own best (``best_mapping.json``'s ``mapping``, ``speedup``, ``latency_s``...,
which the studies read) can be slower than the native compiler's map, which the run
read when its environment was made (speedup 1 by definition): a short EA run on a
problem where the compiler's map is optimal ends below it. The map to deploy is the
best of the maps the run knows:

- ``search``: the search's best, where it beats the compiler's map;
- ``compiler``: the compiler's own map, where no map the search found beats it;
- ``prior``: the prior's solved map (``agent.start=prior``: the first map the run paid,
  :func:`checked_prior`), where it is the best the run read.

On a noisy target whose run confirmed its best (:mod:`egrl.confirm`) the search's best
is the confirmed map and its speedup the confirmed one (its mean over the compiler's
mean on the confirmation's rounds); where that is not above 1 the compiler's map is
deployed. :func:`of_run` picks it; ``best_mapping.json`` keeps it under ``deployed``
(:meth:`Deployed.record`) and ``egrl-train``'s summary line names it
(:meth:`Deployed.summary`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from egrl.env import Env

log = logging.getLogger(__name__)

SEARCH, COMPILER, PRIOR = "search", "compiler", "prior"
#: where a deployed map comes from (``deployed.source`` in ``best_mapping.json``)
SOURCES = (SEARCH, COMPILER, PRIOR)
#: agent options that name where a search starts (nevergrad's ``init`` is its ``start``)
START_KEYS = ("start", "init")


@dataclass(frozen=True)
class Deployed:
    """The map a run deploys.

    Attributes:
        source: one of :data:`SOURCES`.
        mapping: int64 ``[N, H]``: the map.
        speedup: its speedup over the compiler's map (1 for the compiler's own).
        latency_s: its latency, seconds (the compiler's: as the run read it).
        search_speedup: the search's own best speedup (0 when it found none).
    """

    source: str
    mapping: np.ndarray
    speedup: float
    latency_s: float
    search_speedup: float

    def record(self, mapping_to_dict: Callable[[np.ndarray], dict]) -> dict:
        """``best_mapping.json``'s ``deployed``: plain JSON values, the map keyed by unit."""
        return {
            "source": self.source,
            "speedup": float(self.speedup),
            "latency_s": float(self.latency_s),
            "mapping": mapping_to_dict(self.mapping),
        }

    def summary(self) -> str:
        """What ``egrl-train``'s summary line says of it."""
        if self.source == SEARCH:
            return f"deployed: the search's best ({self.speedup:.4f})"
        if self.source == PRIOR:
            return (
                f"deployed: the prior's map ({self.speedup:.4f}, paid first; no later map beat it)"
            )
        return (
            f"deployed: the compiler's map ({self.speedup:.4f}; no map the search found beat "
            f"it, its best {self.search_speedup:.4f})"
        )


def choose(
    env: Env,
    mapping: np.ndarray | None,
    speedup: float,
    latency_s: float,
    prior: np.ndarray | None = None,
    compiler_latency_s: float | None = None,
) -> Deployed:
    """The map to deploy from the search's best and the compiler's map.

    Args:
        env: the run's environment (its ``baseline_mapping``).
        mapping: int64 ``[N, H]``: the search's best map (None: it found none).
        speedup, latency_s: that map's speedup over the compiler's and its latency.
        prior: int64 ``[N, H]``: the prior's map the run started from (None: it did not);
            the deployed map is named ``prior`` when it is this one.
        compiler_latency_s: the compiler's latency to report (default the one the
            environment read, ``env.baseline_latency_s``).
    """
    base = env.baseline_latency_s if compiler_latency_s is None else compiler_latency_s
    compiler = np.asarray(env.baseline_mapping, dtype=np.int64)
    found = mapping is not None and speedup > 1.0
    if found and not np.array_equal(mapping, compiler):
        chosen = np.asarray(mapping, dtype=np.int64)
        deployed = Deployed(SEARCH, chosen, float(speedup), float(latency_s), float(speedup))
    else:
        deployed = Deployed(COMPILER, compiler, 1.0, float(base), float(speedup))
    if deployed.source == SEARCH and prior is not None and np.array_equal(mapping, prior):
        return replace(deployed, source=PRIOR)
    return deployed


def checked_prior(env: Env, time_limit_s: float) -> np.ndarray:
    """int64 ``[N, H]``: the prior's solved map (``Env.prior_solution``, cached on the env)
    as the target's compiler accepts it: the map itself, or the compiler's repair of it
    where it refuses it (a target without a compiler to ask: the map as solved).

    Raises:
        ValueError: the target has no prior (``Env.has_prior`` false).
    """
    solution = env.prior_solution(time_limit_s)
    mapping = np.asarray(solution.mapping, dtype=np.int64)
    if not env.target.checks:
        return mapping
    check = env.target.check(mapping[None])
    if not bool(check.valid[0]):
        log.info(
            "the prior's map is refused by the compiler: starting from its repair "
            "(%.1f%% of its decisions moved)",
            100 * float(check.reassigned_ratio[0]),
        )
    return np.asarray(check.rectified[0], dtype=np.int64)


def started_from_prior(options: dict[str, Any]) -> bool:
    """An agent's options (``cfg.agent.options``) start its search from the prior."""
    return any(options.get(key) == PRIOR for key in START_KEYS)


def of_run(agent: Any) -> Deployed:
    """The map a finished run deploys (``agent``: a :class:`~egrl.callbacks.RunView`):
    its confirmed best where it confirmed one, else its best reading, against the
    compiler's map; the prior's map named where the run started from it."""
    env, cfg = agent.env, agent.cfg
    prior = None
    if started_from_prior(dict(cfg.agent.options or {})) and env.has_prior:
        prior = checked_prior(env, cfg.prior_time_limit_s)
    found = getattr(agent, "confirmation", None)
    if found is None:
        best = agent.ledger.best
        return choose(env, best.mapping, best.speedup, best.latency_s, prior)
    readings = np.asarray(found.baseline_readings_s, dtype=np.float64)
    base = float(readings.mean()) if len(readings) else env.baseline_latency_s
    c = found.best
    latency = base / c.speedup if c.speedup > 0 else float("nan")
    return choose(env, c.mapping, c.speedup, latency, prior, base)
