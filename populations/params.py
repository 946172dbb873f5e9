"""Hyperparameters of one generation of the mixed population, with their sources.

Defaults come from Intel's EGRL code (``parameters.py``, ``algos/egrl/neuroevolution.py``
``MixedSSNE``, ``models/models.py`` ``BoltzmannChromosome``), which carries CERL's
``SSNE`` operators over to the mixed population; ``docs/populations.md`` explains each.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

MIGRATION_TARGETS = ("gnn", "any")


@dataclass(frozen=True)
class EvolutionParams:
    """Selection, crossover, mutation, seeding and migration settings.

    Attributes:
        elite_fraction: share of the population kept unchanged (EGRL ``elite_fraction`` 0.1;
            at least ``min_elites``).
        min_elites: floor on the number of elites (EGRL ``MixedSSNE.epoch``: 2).
        tournament_size: aspirants per tournament (EGRL ``selection_tournament``: 3).
        crossover_prob: chance that a child is a crossover with a same-encoding elite
            (EGRL ``crossover_prob`` 0.3).
        mutation_prob: chance that a non-elite child is mutated (EGRL ``mutation_prob`` 0.85).
        mutation_frac: chance that one GNN weight of a matrix is perturbed (EGRL
            ``num_mutation_frac`` 0.05).
        vector_mutation_scale: factor on ``mutation_frac`` for 1-D tensors (biases, norms)
            (EGRL: 0.04, "low probability of mutation here").
        mutation_std: relative noise of an ordinary perturbation, ``w += N(0, std * |w|)``
            (EGRL ``mut_strength`` 0.1).
        super_mutation_prob: share of perturbations that are super mutations (EGRL 0.05).
        super_mutation_std: relative noise of a super mutation (EGRL ``super_mut_strength`` 10).
        reset_prob: share of perturbations that redraw the weight (EGRL: 0.02).
        reset_std: standard deviation of a redrawn weight, ``w = N(0, reset_std)`` (EGRL: 0.1).
        weight_limit: clamp on every mutated weight (EGRL ``weight_magnitude_limit`` 1e7).
        prior_mutation_std: noise ``N(0, std)`` added to the chromosome prior, a log-score,
            i.e. its probabilities multiplied by ``exp(N(0, std))`` (EGRL multiplies its
            probability prior by ``N(1, 0.1)``: 0.1).
        temperature_mutation_mean: chromosome temperature multiplied by
            ``N(mean, temperature_mutation_std)`` (EGRL ``mut_mean`` 0.95).
        temperature_mutation_std: see above (EGRL: 0.1).
        min_temperature, max_temperature: temperatures are clipped to this range (EGRL
            ``BoltzmannChromosome.normalize``: 0.1 and 10).
        init_temperature: initial chromosome temperature, one value or ``(low, high)`` of a
            uniform draw per unit and head (EGRL: uniform in 0.1 .. 10).
        seed_prob: chance that a Boltzmann child whose elite mate is a GNN has its prior
            seeded from that GNN's posterior (EGRL seeds every such pair: 1.0).
        gnn_greedy: GNN members act with the argmax of their distribution (EGRL evaluates
            population members with ``clean_action``, the argmax) instead of a sample.
        migration_target: ``"gnn"``: the learner replaces the weakest GNN member;
            ``"any"``: the weakest member of either encoding, a chromosome being seeded
            from the learner's posterior (EGRL ``MixedSSNE.clone``).
    """

    elite_fraction: float = 0.1
    min_elites: int = 2
    tournament_size: int = 3
    crossover_prob: float = 0.3
    mutation_prob: float = 0.85
    mutation_frac: float = 0.05
    vector_mutation_scale: float = 0.04
    mutation_std: float = 0.1
    super_mutation_prob: float = 0.05
    super_mutation_std: float = 10.0
    reset_prob: float = 0.02
    reset_std: float = 0.1
    weight_limit: float = 1e7
    prior_mutation_std: float = 0.1
    temperature_mutation_mean: float = 0.95
    temperature_mutation_std: float = 0.1
    min_temperature: float = 0.1
    max_temperature: float = 10.0
    init_temperature: float | tuple[float, float] = (0.1, 10.0)
    seed_prob: float = 1.0
    gnn_greedy: bool = True
    migration_target: str = "gnn"

    def __post_init__(self) -> None:
        for name in (
            "elite_fraction",
            "crossover_prob",
            "mutation_prob",
            "mutation_frac",
            "vector_mutation_scale",
            "super_mutation_prob",
            "reset_prob",
            "seed_prob",
        ):
            _check_probability(name, getattr(self, name))
        if self.super_mutation_prob + self.reset_prob > 1.0:
            raise ValueError(
                "super_mutation_prob + reset_prob must be <= 1, got "
                f"{self.super_mutation_prob} + {self.reset_prob}"
            )
        if self.min_elites < 0:
            raise ValueError(f"min_elites must be >= 0, got {self.min_elites}")
        if self.tournament_size < 1:
            raise ValueError(f"tournament_size must be >= 1, got {self.tournament_size}")
        for name in (
            "mutation_std",
            "super_mutation_std",
            "reset_std",
            "prior_mutation_std",
            "temperature_mutation_std",
        ):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)}")
        if not self.weight_limit > 0:
            raise ValueError(f"weight_limit must be > 0, got {self.weight_limit}")
        if not 0 < self.min_temperature <= self.max_temperature:
            raise ValueError(
                "temperatures need 0 < min_temperature <= max_temperature, got "
                f"{self.min_temperature} and {self.max_temperature}"
            )
        bounds = self.init_temperature
        low, high = (bounds, bounds) if isinstance(bounds, int | float) else bounds
        low, high = float(low), float(high)
        if not self.min_temperature <= low <= high <= self.max_temperature:
            raise ValueError(
                f"init_temperature {self.init_temperature} must lie within "
                f"[{self.min_temperature}, {self.max_temperature}] with low <= high"
            )
        object.__setattr__(self, "init_temperature", (low, high))
        if self.migration_target not in MIGRATION_TARGETS:
            raise ValueError(
                f"migration_target must be one of {MIGRATION_TARGETS}, got {self.migration_target!r}"
            )

    def num_elites(self, size: int) -> int:
        """Elites among ``size`` members: ``max(min_elites, int(elite_fraction*size))``, < size."""
        return max(0, min(size - 1, max(self.min_elites, int(self.elite_fraction * size))))

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-ready)."""
        data = asdict(self)
        data["init_temperature"] = list(self.init_temperature)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvolutionParams:
        """Inverse of :meth:`to_dict`; unknown keys are an error naming them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise TypeError(f"unknown population option(s) {unknown}; known: {sorted(known)}")
        values = dict(data)
        bounds = values.get("init_temperature")
        if bounds is not None and not isinstance(bounds, int | float):
            values["init_temperature"] = tuple(bounds)
        return cls(**values)


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value}")
