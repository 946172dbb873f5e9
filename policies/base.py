"""The base class of every policy (the one implementation of acting), and small helpers.

A policy reads a decision graph (``torch_geometric.data.Data`` or ``Batch``) of ``N``
nodes and answers, for each node and each of ``H`` decision heads, a categorical over
``C = max(num_choices)`` choices. :class:`~policies.graph_unet.GraphUNetActor` and one
chromosome of a :class:`~policies.boltzmann.BoltzmannChromosome` (its ``view(k)``) are
both a :class:`Policy`: a subclass says how it scores the choices
(:meth:`Policy.policy_logits`) and inherits how it acts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor, nn

from policies.categorical import sample_maps

T = TypeVar("T")


class Policy:
    """What the trainer and the population need from a policy: acting from masked logits.

    Subclasses implement :meth:`policy_logits`; :meth:`act` and :meth:`act_with_probs`
    draw maps with :func:`policies.categorical.sample_maps` (the one sampling and
    noisy-rollout path) and make the same random draws, so asking for the probabilities
    never changes the maps.
    """

    def policy_logits(self, data) -> Tensor:
        """Logits float ``[N, H, C]`` for the graph ``data``, ``-inf`` for missing choices."""
        raise NotImplementedError

    def distribution(self, data) -> Tensor:
        """Probabilities float ``[N, H, C]`` (0 for missing choices); differentiable."""
        return torch.softmax(self.policy_logits(data), dim=-1)

    @torch.no_grad()
    def act(
        self,
        data,
        num_samples: int,
        generator: torch.Generator | None,
        greedy: bool = False,
        noise_std: float = 0.0,
    ) -> Tensor:
        """Maps long ``[num_samples, N, H]`` for the graph (or batch) ``data``.

        ``greedy=True`` takes each decision's most likely choice; ``noise_std > 0`` with it
        is EGRL's noisy rollout: the argmax after ``N(0, noise_std^2)`` noise on every
        action probability, independently per sample (see
        :func:`~policies.categorical.sample_maps`). ``greedy=False`` samples each decision
        from the softmax. All noise comes from ``generator``, which may be ``None`` only
        for noise-free greedy maps.
        """
        return sample_maps(self.policy_logits(data), num_samples, generator, greedy, noise_std)

    @torch.no_grad()
    def act_with_probs(
        self,
        data,
        num_samples: int,
        generator: torch.Generator | None,
        greedy: bool = False,
        noise_std: float = 0.0,
    ) -> tuple[Tensor, Tensor]:
        """:meth:`act`'s maps ``[num_samples, N, H]`` and the probabilities ``[N, H, C]``.

        The probabilities are the policy's own (before any rollout noise); a target that
        repairs maps by sampling reads them.
        """
        logits = self.policy_logits(data)
        maps = sample_maps(logits, num_samples, generator, greedy, noise_std)
        return maps, torch.softmax(logits, dim=-1)


def seeded_init(seed: int, build: Callable[[], T]) -> T:
    """Call ``build`` with the global torch RNG seeded by ``seed``, then restore it.

    Module constructors draw their initial weights from the global generator; forking it
    makes the weights a function of ``seed`` alone and leaves the caller's state untouched.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return build()


def num_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) scalar parameters of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
