"""Variation operators on Boltzmann chromosomes, batched over chromosomes and units.

A chromosome (:class:`policies.BoltzmannChromosome`) holds a prior ``[N, H, C]`` of
unnormalised log-scores and a temperature ``[N, H]``; its policy is
``softmax(prior / temperature)`` (EGRL Appendix E). The operators take and return batches
``[M, ...]`` of priors and temperatures.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from policies.categorical import choice_mask
from populations.params import EvolutionParams


def valid_choices(num_choices: Sequence[int]) -> Tensor:
    """Bool ``[H, C]``: True where head ``h`` has choice ``c``."""
    return choice_mask(num_choices)


def crossover_nodes(
    base_prior: Tensor,
    mate_prior: Tensor,
    base_temperature: Tensor,
    mate_temperature: Tensor,
    rng: np.random.Generator,
) -> tuple[Tensor, Tensor]:
    """Single-point crossover over decision units, one child per pair.

    Child ``k`` takes units ``[0, cut_k)`` of ``base`` and ``[cut_k, N)`` of ``mate`` (prior
    and temperature alike), with ``cut_k`` uniform in ``1 .. N-1`` (no exchange if
    ``N == 1``). Priors ``[M, N, H, C]``, temperatures ``[M, N, H]``.
    """
    count, units = base_temperature.shape[:2]
    if units < 2:
        return base_prior.clone(), base_temperature.clone()
    cuts = torch.as_tensor(rng.integers(1, units, size=count), device=base_prior.device)
    from_base = torch.arange(units, device=base_prior.device)[None, :] < cuts[:, None]  # [M, N]
    prior = torch.where(from_base[:, :, None, None], base_prior, mate_prior)
    temperature = torch.where(from_base[:, :, None], base_temperature, mate_temperature)
    return prior, temperature


def mutate_chromosomes(
    prior: Tensor,
    temperature: Tensor,
    generator: torch.Generator,
    valid: Tensor,
    params: EvolutionParams,
) -> tuple[Tensor, Tensor]:
    """EGRL's chromosome mutation on a batch ``prior [M, N, H, C]``, ``temperature [M, N, H]``.

    Every prior log-score of an existing choice (``valid [H, C]``) gets ``N(0,
    prior_mutation_std)`` noise, so the probabilities are multiplied by log-normal noise
    around 1; every temperature is multiplied by ``N(temperature_mutation_mean,
    temperature_mutation_std)`` and clipped to ``[min_temperature, max_temperature]``, so it
    stays positive. Entries of choices a head lacks keep their value.
    """
    valid = valid.to(prior.device)
    noise = torch.randn(prior.shape, generator=generator, device=generator.device).to(prior)
    new_prior = torch.where(valid, prior + params.prior_mutation_std * noise, prior)
    scale = torch.randn(temperature.shape, generator=generator, device=generator.device)
    scale = params.temperature_mutation_mean + params.temperature_mutation_std * scale.to(
        temperature
    )
    new_temperature = (temperature * scale).clamp(params.min_temperature, params.max_temperature)
    return new_prior, new_temperature


def seed_row(chromosomes, row: int, probs: Tensor) -> None:
    """Encode a GNN posterior ``probs [N, H, C]`` as the prior of chromosome ``row``.

    :meth:`policies.BoltzmannChromosome.seed_from` sets ``prior = log(probs)`` and the
    temperature to 1, so the chromosome then samples the GNN's distribution and its greedy
    map is the GNN's argmax.
    """
    chromosomes.seed_from(row, probs)
