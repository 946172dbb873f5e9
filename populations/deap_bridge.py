"""Running DEAP's operators without global random state.

DEAP's operators draw from Python's module-level :mod:`random`. :func:`seeded_random`
seeds that module from the population's ``np.random.Generator`` for the duration of one
call and restores the previous state afterwards, so a DEAP operator is reproducible from
the population's generator and leaves the interpreter's random state as it found it.
(The module-level state is shared by threads: do not evolve two populations concurrently
in threads of one process.)
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from deap import base


class MaxFitness(base.Fitness):
    """Single-objective fitness, maximised."""

    weights = (1.0,)


class Aspirant:
    """A member as DEAP's selection operators see it: an ``index`` and a ``fitness``."""

    __slots__ = ("index", "fitness")

    def __init__(self, index: int, fitness: float):
        self.index = int(index)
        self.fitness = MaxFitness((float(fitness),))


@contextmanager
def seeded_random(rng: np.random.Generator) -> Iterator[None]:
    """Seed :mod:`random` from ``rng`` inside the block; restore the old state on exit."""
    saved = random.getstate()
    random.seed(int(rng.integers(0, 2**63)))
    try:
        yield
    finally:
        random.setstate(saved)
