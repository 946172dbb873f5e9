"""Warm starts of policy agents: a start map put into the policies, before any measurement.

``agent.start=native`` (or ``random``, ``fallback``) for ``egrl``, ``ea`` and ``pg`` puts
the start map into the policies in the form each kind of policy can use:

* a Boltzmann chromosome gets a prior that all but fixes the map:
  :meth:`policies.BoltzmannChromosome.seed_from` with a one-hot posterior at the
  population's ``min_temperature``, the way a chromosome is seeded from a GNN's posterior
  at migration. It proposes the map itself, so the champion of the first generation is
  at least as good as the start map and, as an elite, stays so.
* a Graph U-Net (a GNN member, or the learner's actor when there is no population) is
  taught the map by supervised cross-entropy steps on its own decision graph
  (:func:`imitate`) until its greedy map is the start map, at most ``steps`` steps.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from torch import Tensor, nn

from policies import BoltzmannChromosome

log = logging.getLogger(__name__)


def one_hot_posterior(mapping: np.ndarray, max_choices: int) -> Tensor:
    """float ``[N, H, C]``: probability 1 on each unit's and head's choice in ``mapping``."""
    index = torch.as_tensor(np.asarray(mapping, dtype=np.int64))
    return nn.functional.one_hot(index, max_choices).to(torch.float32)


def seed_chromosome(
    chromosomes: BoltzmannChromosome, row: int, mapping: np.ndarray, temperature: float
) -> None:
    """Chromosome ``row`` samples ``mapping`` int ``[N, H]`` (all but surely at ``temperature``)."""
    posterior = one_hot_posterior(mapping, chromosomes.prior.size(-1))
    chromosomes.seed_from(row, posterior, seed_temperature=temperature)


def imitate(
    actor: nn.Module, graph, mapping: np.ndarray, steps: int = 500, lr: float = 1e-2
) -> float:
    """Teach ``actor`` the map ``mapping`` int ``[N, H]`` by supervised steps on ``graph``.

    Adam on the mean cross-entropy ``-log pi(mapping[n, h] | graph)``, stopping as soon as
    the actor's greedy map is ``mapping`` (checked before every step) or after ``steps``
    steps. Deterministic: no random draw is made. Returns the share of decisions whose
    greedy choice is the map's, in ``[0, 1]``.
    """
    device = next(actor.parameters()).device
    target = torch.as_tensor(np.asarray(mapping, dtype=np.int64), device=device)[..., None]
    optim = torch.optim.Adam(actor.parameters(), lr=lr)
    actor.train()
    accuracy = 0.0
    for _ in range(steps + 1):
        log_probs = actor.log_distribution(graph)  # [N, H, C]
        accuracy = float((log_probs.argmax(dim=-1, keepdim=True) == target).float().mean())
        if accuracy == 1.0:
            break
        loss = -log_probs.gather(-1, target).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()
    actor.eval()
    return accuracy


def warm_start(
    mapping: np.ndarray,
    graph,
    gnns: list[nn.Module],
    chromosomes: BoltzmannChromosome | None = None,
    temperature: float = 0.1,
    steps: int = 500,
) -> list[float]:
    """Put ``mapping`` int ``[N, H]`` into chromosome row 0 (if any) and teach it to ``gnns``.

    Returns the greedy accuracy each GNN reached (:func:`imitate`).
    """
    if chromosomes is not None and len(chromosomes):
        seed_chromosome(chromosomes, 0, mapping, temperature)
    accuracies = [imitate(net, graph, mapping, steps) for net in gnns]
    for i, accuracy in enumerate(accuracies):
        if accuracy < 1.0:
            log.warning(
                "warm start: GNN %d matches %.1f%% of the start map's decisions after %d steps",
                i,
                100 * accuracy,
                steps,
            )
    return accuracies
