"""Variation operators on GNN members (weights of a ``torch.nn.Module``).

Crossover is DEAP's one-point crossover applied, tensor by tensor, to the list of rows of
the two parents' weights (a row is one output unit). Mutation follows CERL/EGRL's SSNE:
a random share of the weights gets relative Gaussian noise, a few of those a much larger
"super mutation", a few are redrawn; it runs on all of a member's weights as one flat vector.
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

    DEAP's operator runs on the lists of row numbers (``0..n-1`` of ``base``, ``n..2n-1``
    of ``mate``), and the child is gathered from the two tensors in one indexing; this is
    the same child, and the same draws, as crossing the lists of rows themselves. Tensors
    with fewer than two rows, and integer buffers, come from ``base``. The cut is drawn
    independently for each tensor.
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
            rows = a.size(0)
            rows_a, rows_b = list(range(rows)), list(range(rows, 2 * rows))
            tools.cxOnePoint(rows_a, rows_b)
            child[name] = torch.cat([a, b]).index_select(0, torch.tensor(rows_a, device=a.device))
    return child


def mutate_weights(module: nn.Module, params: EvolutionParams, generator: torch.Generator) -> int:
    """Perturb ``module``'s parameters in place; returns how many weights were drawn.

    Each weight of a tensor with two or more dims is drawn with probability
    ``mutation_frac`` (1-D tensors: ``mutation_frac * vector_mutation_scale``). A drawn
    weight ``w`` becomes, by a further draw ``u``:

    - ``u < super_mutation_prob``: ``w + N(0, super_mutation_std * |w|)``;
    - then, with probability ``reset_prob``: ``N(0, reset_std)``;
    - otherwise ``w + N(0, mutation_std * |w|)``;

    and is clamped to ``[-weight_limit, weight_limit]``. All parameters are mutated as
    one flat vector (a few tensor operations per member, whatever its number of tensors).
    """
    tensors = [p for p in module.parameters() if p.is_floating_point() and p.numel()]
    if not tensors:
        return 0
    with torch.no_grad():
        sizes = [p.numel() for p in tensors]
        rates = torch.tensor(
            [
                params.mutation_frac * (1.0 if p.dim() >= 2 else params.vector_mutation_scale)
                for p in tensors
            ],
            dtype=tensors[0].dtype,
            device=tensors[0].device,
        )
        flat = torch.cat([p.detach().reshape(-1) for p in tensors])
        new, drawn = _perturb(
            flat,
            rates.repeat_interleave(torch.tensor(sizes, device=rates.device)),
            params,
            generator,
        )
        torch._foreach_copy_(tensors, [v.view_as(p) for v, p in zip(new.split(sizes), tensors)])
    return drawn


def _perturb(
    flat: Tensor, rate: Tensor, params: EvolutionParams, generator: torch.Generator
) -> tuple[Tensor, int]:
    """Mutated copy of the weights ``flat [W]`` and the number of drawn weights.

    ``rate [W]``: the chance of each weight to be drawn. One uniform draw per weight
    selects; the kind and the noise are drawn for the selected weights only. The draws are
    made on ``generator``'s device and moved to the weights'.
    """
    picked = torch.nonzero(_uniform(flat, generator) < rate).squeeze(1)
    drawn = flat.index_select(0, picked)
    kind = _uniform(drawn, generator)
    noise = torch.randn(drawn.shape, generator=generator, device=generator.device).to(flat)
    is_super = kind < params.super_mutation_prob
    is_reset = ~is_super & (kind < params.super_mutation_prob + params.reset_prob)
    scale = torch.where(is_super, params.super_mutation_std, params.mutation_std) * drawn.abs()
    moved = torch.where(is_reset, noise * params.reset_std, drawn + noise * scale)
    moved = moved.clamp(-params.weight_limit, params.weight_limit)
    return flat.index_copy(0, picked, moved), int(picked.numel())


def _uniform(w: Tensor, generator: torch.Generator) -> Tensor:
    """``U(0, 1)`` draws shaped and typed like ``w``, on ``w``'s device."""
    return torch.rand(w.shape, generator=generator, device=generator.device).to(w)
