"""The DEAP toolbox of a mixed population: one registered function per operator.

A user swaps an operator by registering another function of the same signature on
``population.toolbox`` (``toolbox.register("mate_gnn", my_crossover)``).

==================  ================================================================
name                signature
==================  ================================================================
``select``          ``(fitness [P], candidates [M], k, rng) -> member indices [k]``
``mate_gnn``        ``(base_state, mate_state, rng) -> child_state`` (state dicts)
``mutate_gnn``      ``(module, generator) -> int`` (in place)
``mate_boltzmann``  ``(base_prior, mate_prior, base_temp, mate_temp, rng) -> (prior, temp)``
``mutate_boltzmann`` ``(prior [M,N,H,C], temp [M,N,H], generator) -> (prior, temp)``
``seed_boltzmann``  ``(chromosomes, row, probs [N,H,C]) -> None`` (in place)
==================  ================================================================
"""

from __future__ import annotations

from collections.abc import Sequence

from deap import base

from populations import boltzmann_ops, gnn_ops, selection
from populations.params import EvolutionParams


def build_toolbox(params: EvolutionParams, num_choices: Sequence[int]) -> base.Toolbox:
    """A toolbox with the default operators, their settings bound from ``params``."""
    toolbox = base.Toolbox()
    toolbox.register("select", selection.tournament, tournament_size=params.tournament_size)
    toolbox.register("mate_gnn", gnn_ops.crossover_rows)
    toolbox.register("mutate_gnn", gnn_ops.mutate_weights, params=params)
    toolbox.register("mate_boltzmann", boltzmann_ops.crossover_nodes)
    toolbox.register(
        "mutate_boltzmann",
        boltzmann_ops.mutate_chromosomes,
        valid=boltzmann_ops.valid_choices(num_choices),
        params=params,
    )
    toolbox.register("seed_boltzmann", boltzmann_ops.seed_row)
    return toolbox
