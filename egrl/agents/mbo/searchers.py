"""The searchers model-based optimisation runs on the cost model: the toolkit's own moves.

Each searcher is the variation of one of the toolkit's agents, on integer maps ``[P, N, H]``
and asked and told in lock-step (like an ask-and-tell optimiser), so that a round of
model search makes one call of the compiler and one of the model per step for all of them:

- ``ea``: EGRL's EA on its Boltzmann chromosomes (EGRL Appendix E,
  :mod:`populations.boltzmann_ops`): each member is a categorical distribution per unit and
  head, ``softmax(prior / temperature)``, seeded from a start map; a step samples one map
  per member; the next generation keeps the elites, and breeds the rest from tournaments,
  crossed over units with an elite (probability 0.3) and mutated (probability 0.85: the
  prior's log-scores get ``N(0, 0.1)`` noise, the temperature is multiplied by
  ``N(0.95, 0.1)``), with EGRL's defaults (:class:`populations.params.EvolutionParams`);
- ``ga``: the GA agent's breeding (DEAP's ``eaSimple`` with elites, as
  :mod:`egrl.agents.genetic`): tournament of 3, two-point crossover of the flattened map
  with probability 0.5, uniform integer mutation with probability 0.5 (each gene
  ``1 / (N H)``), the best individual kept;
- ``sa``: the SA agent's chains (:mod:`egrl.agents.annealing`): one neighbour per chain
  (two entries changed), accepted by the Metropolis rule on a geometric temperature
  schedule that runs its course within the round;
- ``egrl``: EGRL's mixed population itself (:class:`populations.MixedPopulation`: Graph
  U-Net policies and Boltzmann chromosomes), built afresh each round with the EA's
  defaults: the GNNs random, the chromosomes seeded from the starts (the best paid maps
  first); a step is one generation (each member's map, then EGRL's selection, crossover
  and mutation). Its GNNs read the workload graph, so similar units tend to get similar
  choices: the inductive bias that makes EA beat GA and SA on the example chip.

A searcher starts from ``[P, N, H]`` maps and their values, proposes ``P`` maps per step
(:meth:`Searcher.ask`) and is told what the model says of them (:meth:`Searcher.tell`):
the maps as the compiler would run them (its repair) and their values. Values are
maximised; ``-inf`` marks a map the search must not keep (outside a trust region). Add a
searcher by registering a class in :data:`SEARCHERS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from egrl.agents.annealing import metropolis, neighbours
from populations.params import EvolutionParams

#: the SA searcher's temperatures at the first and last step of a round, in reward units
#: (the SA agent's defaults)
SA_T_START, SA_T_END = 0.02, 1e-4


def tournament(values: np.ndarray, count: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """int64 ``[count]``: the winner of each of ``count`` tournaments of ``size`` entrants
    drawn with replacement from ``values`` ``[P]`` (the highest value; ties: the first)."""
    entrants = rng.integers(0, len(values), size=(count, size))
    return entrants[np.arange(count), np.argmax(values[entrants], axis=1)]


@dataclass(frozen=True)
class Context:
    """What a searcher may read of the problem and the round.

    Attributes:
        num_choices: int64 ``[H]``.
        steps: the steps this round will make (a schedule may read it).
        graph: the decision graph the policies read (``egrl``).
        make_gnn: a new, randomly initialised GNN policy (``egrl``).
        generator: the run's torch generator (GNN initialisation and sampling).
    """

    num_choices: np.ndarray
    steps: int
    graph: Any = None
    make_gnn: Callable[[], torch.nn.Module] | None = None
    generator: torch.Generator | None = None


class Searcher:
    """One searcher's population and its moves (see the module docstring).

    Args:
        maps: int64 ``[P, N, H]``, the round's starts (as the compiler runs them).
        values: float64 ``[P]``, what the model says of them.
        context: the problem and the round.
        rng: the run's generator.
    """

    def __init__(
        self, maps: np.ndarray, values: np.ndarray, context: Context, rng: np.random.Generator
    ) -> None:
        self.maps, self.values = maps.copy(), values.astype(np.float64).copy()
        self.num_choices = np.asarray(context.num_choices, dtype=np.int64)
        self.steps = max(int(context.steps), 1)
        self.step = 0

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        """int64 ``[P, N, H]``: the step's proposals."""
        raise NotImplementedError

    def tell(self, maps: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> None:
        """What the model says of the proposals (``maps`` as the compiler runs them)."""
        raise NotImplementedError


class BoltzmannSearch(Searcher):
    """``ea``: EGRL's EA on Boltzmann chromosomes (see the module docstring)."""

    params = EvolutionParams()
    #: the probability a seeded chromosome gives its start map's choice
    seed_prob = 0.9

    def __init__(
        self, maps: np.ndarray, values: np.ndarray, context: Context, rng: np.random.Generator
    ) -> None:
        super().__init__(maps, values, context, rng)
        count, units, heads = maps.shape
        width = int(self.num_choices.max())
        self.missing = np.arange(width)[None, :] >= self.num_choices[:, None]  # [H, C]
        other = (1 - self.seed_prob) / np.maximum(self.num_choices - 1, 1)  # [H]
        probs = np.broadcast_to(other[None, None, :, None], (count, units, heads, width)).copy()
        np.put_along_axis(probs, maps[..., None], self.seed_prob, axis=-1)
        with np.errstate(divide="ignore"):
            self.prior = np.where(self.missing, -np.inf, np.log(probs))  # [P, N, H, C]
        self.temperature = np.ones((count, units, heads))

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        logits = self.prior / self.temperature[..., None]
        gumbel = -np.log(-np.log(rng.random(logits.shape)))
        return np.argmax(logits + gumbel, axis=-1)

    def tell(self, maps: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> None:
        p = self.params
        self.maps, self.values = maps.copy(), values.astype(np.float64).copy()
        count, units = len(maps), maps.shape[1]
        elites = max(p.min_elites, int(math.ceil(p.elite_fraction * count)))
        order = np.argsort(-self.values, kind="stable")
        keep, rest = order[:elites], count - min(elites, count)
        parent = tournament(self.values, rest, p.tournament_size, rng)
        prior, temperature = self.prior[parent], self.temperature[parent]
        cross = rng.random(rest) < p.crossover_prob
        mate = keep[rng.integers(0, len(keep), size=rest)]
        cut = rng.integers(1, max(units, 2), size=rest)
        from_mate = cross[:, None] & (np.arange(units)[None, :] >= cut[:, None])  # [R, N]
        prior = np.where(from_mate[:, :, None, None], self.prior[mate], prior)
        temperature = np.where(from_mate[:, :, None], self.temperature[mate], temperature)
        mutate = (rng.random(rest) < p.mutation_prob)[:, None, None]
        noise = p.prior_mutation_std * rng.standard_normal(prior.shape)
        prior = np.where(mutate[..., None] & ~self.missing, prior + noise, prior)
        scale = p.temperature_mutation_mean + p.temperature_mutation_std * rng.standard_normal(
            temperature.shape
        )
        temperature = np.where(
            mutate, np.clip(temperature * scale, p.min_temperature, p.max_temperature), temperature
        )
        self.prior = np.concatenate([self.prior[keep], prior])
        self.temperature = np.concatenate([self.temperature[keep], temperature])


class GeneticSearch(Searcher):
    """``ga``: the GA agent's generation (tournament, two-point crossover, uniform integer
    mutation, one elite), vectorised."""

    cxpb = mutpb = 0.5

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        count = len(self.maps)
        shape = self.maps.shape
        genes = self.maps[tournament(self.values, count, 3, rng)].reshape(count, -1).copy()
        length = genes.shape[1]
        pairs = count // 2
        mate = rng.random(pairs) < self.cxpb
        low = rng.integers(1, max(length, 2), size=pairs)
        high = rng.integers(1, max(length - 1, 2), size=pairs)
        high = np.where(high >= low, high + 1, high)
        low, high = np.minimum(low, high), np.maximum(low, high)
        span = (np.arange(length)[None] >= low[:, None]) & (np.arange(length)[None] < high[:, None])
        swap = span & mate[:, None]  # [pairs, L]
        a, b = genes[0 : 2 * pairs : 2], genes[1 : 2 * pairs : 2]
        genes[0 : 2 * pairs : 2] = np.where(swap, b, a)
        genes[1 : 2 * pairs : 2] = np.where(swap, a, b)
        children = genes.reshape(shape)
        mutated = rng.random(count) < self.mutpb
        upper = np.broadcast_to(self.num_choices, shape)
        fresh = rng.integers(0, upper)
        hit = (rng.random(shape) < 1.0 / length) & mutated[:, None, None]
        children = np.where(hit, fresh, children)
        children[0] = self.maps[int(np.argmax(self.values))]  # the elite, unchanged
        return children

    def tell(self, maps: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> None:
        self.maps, self.values = maps.copy(), values.astype(np.float64).copy()


class AnnealingSearch(Searcher):
    """``sa``: Metropolis chains, one neighbour each per step, the temperature falling
    geometrically from :data:`SA_T_START` to :data:`SA_T_END` over the round."""

    moves = 2

    def temperature(self) -> float:
        frac = self.step / max(self.steps - 1, 1)
        return SA_T_START * math.exp(frac * math.log(SA_T_END / SA_T_START))

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        return neighbours(self.maps, self.num_choices, self.moves, rng)

    def tell(self, maps: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> None:
        with np.errstate(invalid="ignore"):
            delta = np.where(np.isneginf(values), -np.inf, values - self.values)
        accept = metropolis(delta, self.temperature(), rng)
        self.maps[accept], self.values[accept] = maps[accept], values[accept]
        self.step += 1


class PopulationSearch(Searcher):
    """``egrl``: EGRL's mixed population on the model (see the module docstring)."""

    def __init__(
        self, maps: np.ndarray, values: np.ndarray, context: Context, rng: np.random.Generator
    ) -> None:
        from populations import MixedPopulation  # start-up time

        super().__init__(maps, values, context, rng)
        self.context = context
        self.population = MixedPopulation(
            context.make_gnn,
            num_units=maps.shape[1],
            num_choices=[int(c) for c in self.num_choices],
            size=len(maps),
            rng=np.random.default_rng(rng.integers(2**63)),
            generator=context.generator,
        )
        chromosomes = self.population.chromosomes
        if chromosomes is not None:  # seeded from the starts, the best paid maps first
            width = int(self.num_choices.max())
            for row in range(len(chromosomes)):
                probs = np.full((*maps.shape[1:], width), 0.1 / max(width - 1, 1))
                np.put_along_axis(probs, maps[row][..., None], 0.9, axis=-1)
                probs[..., np.arange(width)[None, :] >= self.num_choices[:, None]] = 0.0
                probs /= probs.sum(axis=-1, keepdims=True)
                chromosomes.seed_from(row, torch.as_tensor(probs, dtype=torch.float32))

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        with torch.no_grad():
            maps, _ = self.population.act(self.context.graph, self.context.generator)
        return maps.numpy().astype(np.int64)

    def tell(self, maps: np.ndarray, values: np.ndarray, rng: np.random.Generator) -> None:
        self.population.set_fitness(np.where(np.isfinite(values), values, -np.inf))
        self.step += 1
        if self.step < self.steps:
            self.population.evolve(self.context.graph, self.context.generator)


#: searcher names (``agent.searchers``) and their classes
SEARCHERS: dict[str, type[Searcher]] = {
    "ea": BoltzmannSearch,
    "ga": GeneticSearch,
    "sa": AnnealingSearch,
    "egrl": PopulationSearch,
}
