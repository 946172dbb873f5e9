"""The protocol every policy meets, and small helpers.

A policy reads a decision graph (``torch_geometric.data.Data`` or ``Batch``) of ``N``
nodes and answers, for each node and each of ``H`` decision heads, a categorical over
``C = max(num_choices)`` choices. :class:`~policies.graph_unet.GraphUNetActor` and one
chromosome of a :class:`~policies.boltzmann.BoltzmannChromosome` (its ``view(k)``) both
satisfy it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn


@runtime_checkable
class Policy(Protocol):
    """What the trainer and the population need from a policy."""

    def distribution(self, data) -> Tensor:
        """Probabilities float ``[N, H, C]`` (0 for choices a head lacks)."""
        ...

    def act(
        self,
        data,
        num_samples: int,
        generator: torch.Generator | None,
        greedy: bool = False,
        noise_std: float = 0.0,
    ) -> Tensor:
        """Maps long ``[num_samples, N, H]``."""
        ...


def num_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) scalar parameters of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
