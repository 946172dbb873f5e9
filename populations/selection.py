"""Ranking, elitism and tournament selection (Algorithm 2, lines 10-12)."""

from __future__ import annotations

import numpy as np
from deap import tools

from populations.deap_bridge import Aspirant, seeded_random


def check_fitness(fitness: np.ndarray, size: int) -> np.ndarray:
    """Return ``fitness`` as float64 ``[size]``.

    ``-inf`` is allowed (a member that could not be evaluated ranks last); NaN and ``+inf``
    raise an error naming the members.
    """
    values = np.asarray(fitness, dtype=np.float64)
    if values.shape != (size,):
        raise ValueError(f"fitness must have shape [{size}], got {list(values.shape)}")
    bad = np.flatnonzero(np.isnan(values) | (values == np.inf))
    if bad.size:
        raise ValueError(
            f"fitness of member(s) {bad.tolist()} is NaN or +inf: {values[bad].tolist()}"
        )
    return values


def rank(fitness: np.ndarray) -> np.ndarray:
    """Member indices, best first; ties keep member order. ``fitness [P]`` -> long ``[P]``."""
    return np.argsort(-np.asarray(fitness, dtype=np.float64), kind="stable")


def elites(fitness: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` best members (line 11), best first: ``[count]``."""
    return rank(fitness)[:count]


def tournament(
    fitness: np.ndarray,
    candidates: np.ndarray,
    k: int,
    tournament_size: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``k`` winners of tournaments among ``candidates`` (with replacement, line 12).

    Uses :func:`deap.tools.selTournament`; its draws come from ``rng`` through
    :func:`~populations.deap_bridge.seeded_random`. ``fitness [P]`` indexes all members,
    ``candidates [M]`` are the eligible member indices; returns member indices ``[k]``.
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    if candidates.size == 0:
        raise ValueError("tournament selection needs at least one candidate")
    aspirants = [Aspirant(i, fitness[i]) for i in candidates]
    with seeded_random(rng):
        winners = tools.selTournament(aspirants, k, tournament_size)
    return np.array([w.index for w in winners], dtype=np.int64)
