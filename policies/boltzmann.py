"""Boltzmann chromosomes (EGRL section 3 and Appendix E), a whole population at once.

A chromosome holds, for every decision unit ``n`` and head ``h``, a prior over the
choices and a temperature; its policy is ``softmax(prior[n, h] / temperature[n, h])``.
``K`` chromosomes live in two plain tensors:

* ``prior`` float ``[K, N, H, C]``: unnormalised log-scores. Entries of choices a head
  lacks are kept (so mutation and crossover can treat the tensor uniformly) but ignored.
* ``temperature`` float ``[K, N, H]``: stored as is; every read clamps it to
  ``[t_min, t_max]`` so a mutation can never make it zero or negative. :meth:`clamp_`
  writes the clamp back.

Seeding from a GNN (:meth:`BoltzmannChromosome.seed_from`) sets ``prior = log(probs)``
and the temperature to ``seed_temperature`` (default 1): at ``T = 1`` the chromosome
samples exactly the GNN's posterior, colder chromosomes sharpen it around the same argmax.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from policies.base import Policy
from policies.categorical import (
    check_num_choices,
    choice_mask,
    gumbel_argmax,
    mask_logits,
    require_generator,
)

#: floor of the GNN probabilities before their log becomes a prior
PROB_FLOOR = 1e-6


class BoltzmannChromosome:
    """``K`` Boltzmann chromosomes over ``N`` decision units and ``len(num_choices)`` heads.

    Args:
        prior: float ``[K, N, H, C]``.
        temperature: float ``[K, N, H]`` (positive; clamped to ``[t_min, t_max]`` on read).
        num_choices: choices per head, ``C = max(num_choices)``.
        t_min, t_max: temperature bounds.
    """

    def __init__(
        self,
        prior: Tensor,
        temperature: Tensor,
        num_choices: Sequence[int],
        t_min: float = 0.01,
        t_max: float = 10.0,
    ):
        self.num_choices = check_num_choices(num_choices)
        if not 0 < t_min <= t_max:
            raise ValueError(f"need 0 < t_min <= t_max, got t_min={t_min}, t_max={t_max}")
        self.t_min, self.t_max = float(t_min), float(t_max)
        mask = choice_mask(self.num_choices, device=prior.device)
        if prior.dim() != 4 or tuple(prior.shape[2:]) != tuple(mask.shape):
            raise ValueError(
                f"prior must be [K, N, H={mask.size(0)}, C={mask.size(1)}], got {list(prior.shape)}"
            )
        if tuple(temperature.shape) != tuple(prior.shape[:3]):
            raise ValueError(
                f"temperature must be [K, N, H] = {list(prior.shape[:3])}, "
                f"got {list(temperature.shape)}"
            )
        self.prior = prior
        self.temperature = temperature
        self.mask = mask

    # ------------------------------------------------------------ construction
    @classmethod
    def random(
        cls,
        K: int,
        N: int,
        num_choices: Sequence[int],
        generator: torch.Generator,
        init_temperature: float = 1.0,
        t_min: float = 0.01,
        t_max: float = 10.0,
        prior_std: float = 1.0,
    ) -> BoltzmannChromosome:
        """``K`` chromosomes with priors ``~ N(0, prior_std^2)`` and a uniform temperature."""
        gen = require_generator(generator, "BoltzmannChromosome.random")
        counts = check_num_choices(num_choices)
        shape = (K, N, len(counts), max(counts))
        prior = prior_std * torch.randn(shape, generator=gen, device=gen.device)
        temperature = torch.full(shape[:3], float(init_temperature), device=gen.device)
        return cls(prior, temperature, counts, t_min=t_min, t_max=t_max)

    @property
    def num_chromosomes(self) -> int:
        return self.prior.size(0)

    @property
    def num_units(self) -> int:
        return self.prior.size(1)

    def __len__(self) -> int:
        return self.num_chromosomes

    # ------------------------------------------------------------ the policy
    def clamped_temperature(self) -> Tensor:
        """Temperature float ``[K, N, H]`` clamped to ``[t_min, t_max]``."""
        return self.temperature.clamp(self.t_min, self.t_max)

    def clamp_(self) -> BoltzmannChromosome:
        """Write the temperature clamp back into ``temperature``; returns ``self``."""
        self.temperature.clamp_(self.t_min, self.t_max)
        return self

    def logits(self) -> Tensor:
        """``prior / temperature`` float ``[K, N, H, C]``, ``-inf`` for missing choices."""
        return mask_logits(self.prior / self.clamped_temperature()[..., None], self.mask)

    def probs(self) -> Tensor:
        """``softmax(prior / temperature)`` float ``[K, N, H, C]`` (0 for missing choices)."""
        return torch.softmax(self.logits(), dim=-1)

    def sample(self, generator: torch.Generator) -> Tensor:
        """One map per chromosome, long ``[K, N, H]`` (Gumbel-max with ``generator``)."""
        return gumbel_argmax(self.logits(), require_generator(generator, "sampling chromosomes"))

    def greedy(self) -> Tensor:
        """The most likely map of every chromosome, long ``[K, N, H]``."""
        return torch.argmax(mask_logits(self.prior, self.mask), dim=-1)

    # ------------------------------------------------------------ edits
    def _rows(self, index: int | Sequence[int] | Tensor) -> Tensor:
        rows = torch.as_tensor(index, dtype=torch.long, device=self.prior.device).reshape(-1)
        bad = rows[(rows < 0) | (rows >= self.num_chromosomes)]
        if bad.numel():
            raise IndexError(
                f"chromosome index {bad.tolist()} out of range for {self.num_chromosomes}"
            )
        return rows

    def seed_from(
        self, index: int | Sequence[int] | Tensor, probs: Tensor, seed_temperature: float = 1.0
    ) -> None:
        """Seed chromosomes ``index`` from a GNN posterior (EGRL Algorithm 2, lines 20-21).

        Args:
            index: one chromosome or ``k`` of them.
            probs: float ``[N, H, C]`` (given to every chosen chromosome) or ``[k, N, H, C]``.
            seed_temperature: the temperature they get. ``prior = log(max(probs, 1e-6))``, so
                at 1 the chromosome samples the GNN's distribution (up to the floor) and its
                greedy map is the GNN's argmax at any temperature.
        """
        rows = self._rows(index)
        expected = tuple(self.prior.shape[1:])
        if tuple(probs.shape[-3:]) != expected or probs.dim() not in (3, 4):
            raise ValueError(f"probs must be [N, H, C] or [k, N, H, C] = {list(expected)}")
        if probs.dim() == 4 and probs.size(0) != rows.numel():
            raise ValueError(f"probs holds {probs.size(0)} posteriors for {rows.numel()} rows")
        prior = torch.log(probs.detach().to(self.prior).clamp_min(PROB_FLOOR))
        self.prior[rows] = prior.masked_fill(~self.mask, 0.0).expand(rows.numel(), *expected)
        self.temperature[rows] = float(seed_temperature)

    def subset(self, index: int | Sequence[int] | Tensor) -> BoltzmannChromosome:
        """A new population holding copies of chromosomes ``index`` (in that order)."""
        rows = self._rows(index)
        return BoltzmannChromosome(
            self.prior[rows].clone(),
            self.temperature[rows].clone(),
            self.num_choices,
            t_min=self.t_min,
            t_max=self.t_max,
        )

    def view(self, index: int) -> ChromosomeView:
        """Chromosome ``index`` as a :class:`~policies.base.Policy` (shares storage)."""
        return ChromosomeView(self, int(self._rows(index)[0]))

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Tensor]:
        """Plain tensors (safetensors-ready): prior, temperature, num_choices, t_bounds."""
        return {
            "prior": self.prior.contiguous(),
            "temperature": self.temperature.contiguous(),
            "num_choices": torch.tensor(self.num_choices, dtype=torch.long),
            "t_bounds": torch.tensor([self.t_min, self.t_max], dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Replace this population by the one in ``state`` (sizes may differ)."""
        other = self.from_state_dict(state)
        self.__dict__.update(other.__dict__)

    @classmethod
    def from_state_dict(cls, state: dict[str, Tensor]) -> BoltzmannChromosome:
        """Build a population from :meth:`state_dict`'s tensors."""
        missing = {"prior", "temperature", "num_choices", "t_bounds"} - set(state)
        if missing:
            raise KeyError(f"Boltzmann state is missing {sorted(missing)}")
        t_min, t_max = (float(v) for v in state["t_bounds"])
        return cls(
            state["prior"].clone(),
            state["temperature"].clone(),
            state["num_choices"].tolist(),
            t_min=t_min,
            t_max=t_max,
        )


class ChromosomeView(Policy):
    """One chromosome of a :class:`BoltzmannChromosome`, readable as a policy.

    The view reads the population's tensors at call time, so edits to the population
    show through. The graph argument is only checked for its node count: a chromosome's
    policy does not depend on the features. Acting (``act``, ``act_with_probs``,
    ``distribution``) is :class:`~policies.base.Policy`'s.
    """

    def __init__(self, population: BoltzmannChromosome, index: int):
        self.population = population
        self.index = index

    def logits(self) -> Tensor:
        """``prior / temperature`` of this chromosome, float ``[N, H, C]``."""
        pop = self.population
        temperature = pop.temperature[self.index].clamp(pop.t_min, pop.t_max)
        return mask_logits(pop.prior[self.index] / temperature[..., None], pop.mask)

    def policy_logits(self, data) -> Tensor:
        """:meth:`logits`, after checking that ``data`` has one node per decision unit."""
        nodes = int(data.num_nodes)
        if nodes != self.population.num_units:
            raise ValueError(
                f"chromosome {self.index} maps {self.population.num_units} units, "
                f"the graph has {nodes} nodes"
            )
        return self.logits()
