"""Variation operators on GNN members (weights of a ``torch.nn.Module``).

Crossover is DEAP's one-point crossover applied, tensor by tensor, to the list of rows of
the two parents' weights (a row is one output unit). Mutation follows CERL/EGRL's SSNE:
a random share of the weights gets relative Gaussian noise, a few of those a much larger
"super mutation", a few are redrawn; it is vectorized per tensor with ``torch``.
"""

from __future__ import annotations

import numpy as np
import torch
from deap import tools
from torch import Tensor, nn

from populations.deap_bridge import seeded_random
from populations.params import EvolutionParams


def snapshot(module: nn.Module) -> dict[str, Tensor]:
    """Detached copies of every entry of ``module.state_dict()``."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def crossover_rows(
    base: dict[str, Tensor], mate: dict[str, Tensor], rng: np.random.Generator
) -> dict[str, Tensor]:
    """One child of two same-architecture state dicts: per tensor, rows ``[:cut]`` of
    ``base`` then rows ``[cut:]`` of ``mate`` (:func:`deap.tools.cxOnePoint` on row lists).

    Tensors with fewer than two rows, and integer buffers, come from ``base``. The cut is
    drawn independently for each tensor.
    """
    if base.keys() != mate.keys():
        missing = sorted(set(base) ^ set(mate))
        raise ValueError(f"GNN parents differ in their parameters: {missing[:5]}")
    child: dict[str, Tensor] = {}
    with seeded_random(rng):
        for name, a in base.items():
            b = mate[name]
            if a.shape != b.shape:
                raise ValueError(
                    f"GNN parents differ in the shape of {name}: {list(a.shape)} vs {list(b.shape)}"
                )
            if a.dim() == 0 or a.size(0) < 2 or not a.is_floating_point():
                child[name] = a.clone()
                continue
            rows_a, rows_b = list(a.unbind(0)), list(b.unbind(0))
            tools.cxOnePoint(rows_a, rows_b)
            child[name] = torch.stack(rows_a).clone()
    return child


def mutate_weights(module: nn.Module, params: EvolutionParams, generator: torch.Generator) -> int:
    """Perturb ``module``'s parameters in place; returns how many weights were drawn.

    Each weight of a tensor with two or more dims is drawn with probability
    ``mutation_frac`` (1-D tensors: ``mutation_frac * vector_mutation_scale``). A drawn
    weight ``w`` becomes, by a further draw ``u``:

    - ``u < super_mutation_prob``: ``w + N(0, super_mutation_std * |w|)``;
    - then, with probability ``reset_prob``: ``N(0, reset_std)``;
    - otherwise ``w + N(0, mutation_std * |w|)``;

    and is clamped to ``[-weight_limit, weight_limit]``.
    """
    drawn = 0
    with torch.no_grad():
        for p in module.parameters():
            if not p.is_floating_point() or p.numel() == 0:
                continue
            rate = params.mutation_frac * (1.0 if p.dim() >= 2 else params.vector_mutation_scale)
            new, count = _perturb(p.data, rate, params, generator)
            p.data.copy_(new)
            drawn += count
    return drawn


def _perturb(
    w: Tensor, rate: float, params: EvolutionParams, generator: torch.Generator
) -> tuple[Tensor, int]:
    """Mutated copy of ``w`` (any shape) and the number of drawn weights.

    The draws are made on ``generator``'s device and moved to ``w``'s.
    """
    drawn = _uniform(w, generator) < rate
    kind = _uniform(w, generator)
    noise = torch.randn(w.shape, generator=generator, device=generator.device).to(w)
    is_super = drawn & (kind < params.super_mutation_prob)
    is_reset = drawn & ~is_super & (kind < params.super_mutation_prob + params.reset_prob)
    is_plain = drawn & ~is_super & ~is_reset
    scale = torch.where(is_super, params.super_mutation_std, params.mutation_std) * w.abs()
    new = torch.where(is_super | is_plain, w + noise * scale, w)
    new = torch.where(is_reset, noise * params.reset_std, new)
    new = torch.where(drawn, new.clamp(-params.weight_limit, params.weight_limit), w)
    return new, int(drawn.sum())


def _uniform(w: Tensor, generator: torch.Generator) -> Tensor:
    """``U(0, 1)`` draws shaped and typed like ``w``, on ``w``'s device."""
    return torch.rand(w.shape, generator=generator, device=generator.device).to(w)
