"""The mixed EA population of EGRL: Graph U-Net members and Boltzmann chromosomes.

Members ``0 .. G-1`` are GNN policies (:class:`policies.GraphUNetActor`), members
``G .. P-1`` are the rows of one vectorized :class:`policies.BoltzmannChromosome` batch.
The encoding of each member slot never changes, so the share of Boltzmann members stays
``boltzmann_fraction``. One generation (:meth:`MixedPopulation.evolve`) is Algorithm 2,
lines 10-23, as described in ``docs/populations.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from policies import BoltzmannChromosome, Policy, seeded_init
from policies.categorical import check_num_choices
from populations import gnn_ops, selection
from populations.params import EvolutionParams
from populations.toolbox import build_toolbox

log = logging.getLogger(__name__)

GNN = "gnn"
BOLTZMANN = "boltzmann"
KINDS = (GNN, BOLTZMANN)
#: descent flags of a member (:attr:`MixedPopulation.descent`): it descends from a learner
#: copied in by :meth:`MixedPopulation.migrate`, or from a chromosome seeded from a GNN
FROM_LEARNER = 1
FROM_SEEDING = 2
STATE_FORMAT = "mixed-population/1"


@dataclass(frozen=True)
class GenerationReport:
    """What one :meth:`MixedPopulation.evolve` did; arrays over the ``R`` replaced members.

    Attributes:
        elites: member indices kept unchanged, best first ``[E]``.
        children: member indices that received a new policy ``[R]`` (ascending).
        bases: same-encoding tournament winner each child was copied from ``[R]``.
        mates: elite paired with each child ``[R]`` (equal to ``bases`` without elites).
        crossed: child is a crossover of its base and its mate ``[R]``.
        seeded: chromosome child whose prior was seeded from its GNN mate ``[R]``.
        mutated: child was mutated ``[R]``.
    """

    elites: np.ndarray
    children: np.ndarray
    bases: np.ndarray
    mates: np.ndarray
    crossed: np.ndarray
    seeded: np.ndarray
    mutated: np.ndarray


class MixedPopulation:
    """A population of GNN and Boltzmann-chromosome policies for one decision graph.

    Args:
        make_gnn: builds one untrained GNN member (same architecture every call).
        num_units: decision units ``N`` (nodes of the decision graph).
        num_choices: choices per decision head, ``H`` entries.
        rng: draws every discrete decision (selection, pairing, which operators apply).
        generator: draws the initial GNN weights and chromosomes.
        size: members ``P`` (Table 2: 20).
        boltzmann_fraction: share of chromosomes (Table 2: 0.2); ``round(P * fraction)``.
        **options: fields of :class:`~populations.params.EvolutionParams`.
    """

    def __init__(
        self,
        make_gnn: Callable[[], nn.Module],
        num_units: int,
        num_choices: Sequence[int],
        *,
        rng: np.random.Generator,
        generator: torch.Generator,
        size: int = 20,
        boltzmann_fraction: float = 0.2,
        **options: Any,
    ):
        if size < 1:
            raise ValueError(f"population size must be >= 1, got {size}")
        if not 0.0 <= boltzmann_fraction <= 1.0:
            raise ValueError(f"boltzmann_fraction must be in [0, 1], got {boltzmann_fraction}")
        if num_units < 1:
            raise ValueError(f"num_units must be >= 1, got {num_units}")
        if not isinstance(rng, np.random.Generator) or not isinstance(generator, torch.Generator):
            raise TypeError("MixedPopulation needs an np.random.Generator and a torch.Generator")
        self.params = EvolutionParams.from_dict(options)
        self.num_units = int(num_units)
        self.num_choices = check_num_choices(num_choices)
        self.rng = rng
        num_boltzmann = int(round(size * boltzmann_fraction))
        num_gnn = size - num_boltzmann
        self.kinds = np.array([GNN] * num_gnn + [BOLTZMANN] * num_boltzmann)
        self._slot = np.concatenate([np.arange(num_gnn), np.arange(num_boltzmann)])
        self.gnns: list[nn.Module] = [_build_gnn(make_gnn, generator) for _ in range(num_gnn)]
        self.chromosomes: BoltzmannChromosome | None = None
        if num_boltzmann:
            self.chromosomes = _random_chromosomes(
                num_boltzmann, self.num_units, self.num_choices, self.params, generator
            )
        self.ids = np.arange(size, dtype=np.int64)
        self._next_id = size
        self.fitness = np.full(size, np.nan)
        self.evaluated = np.zeros(size, dtype=bool)
        self.migrants = np.zeros(size, dtype=bool)
        self.descent = np.zeros(size, dtype=np.uint8)
        self.elites = np.zeros(0, dtype=np.int64)
        self.toolbox = build_toolbox(self.params, self.num_choices)
        #: the operators :func:`build_toolbox` registered, to tell them from a user's
        self._built_ops = dict(vars(self.toolbox))

    # ------------------------------------------------------------------ members
    @property
    def size(self) -> int:
        return len(self.kinds)

    def indices(self, kind: str) -> np.ndarray:
        """Member indices of encoding ``kind`` ("gnn" or "boltzmann")."""
        if kind not in KINDS:
            raise ValueError(f"unknown member kind {kind!r}; kinds are {KINDS}")
        return np.flatnonzero(self.kinds == kind)

    def gnn(self, index: int) -> nn.Module:
        """The GNN policy of member ``index``."""
        self._check_kind(index, GNN)
        return self.gnns[self._slot[index]]

    def chromosome_row(self, index: int) -> int:
        """Row of member ``index`` in :attr:`chromosomes`."""
        self._check_kind(index, BOLTZMANN)
        return int(self._slot[index])

    def policy(self, index: int) -> Policy:
        """Member ``index`` as a policy: its GNN, or a view of its chromosome."""
        if self.kinds[index] == GNN:
            return self.gnn(index)
        return self.chromosomes.view(self.chromosome_row(index))

    def _check_kind(self, index: int, kind: str) -> None:
        if not 0 <= index < self.size:
            raise IndexError(f"member {index} outside the population of {self.size}")
        if self.kinds[index] != kind:
            raise ValueError(f"member {index} is a {self.kinds[index]} member, not {kind}")

    # ------------------------------------------------------------------ acting
    def act(self, graph, generator: torch.Generator) -> tuple[Tensor, np.ndarray]:
        """One map per member, in member order: long ``[P, N, H]``, and the kinds ``[P]``.

        GNN members take the argmax of their distribution (``gnn_greedy``, as EGRL's
        population rollouts) or a sample; chromosomes sample their Boltzmann softmax.
        """
        maps, _ = self._act(graph, generator, with_probs=False)
        return maps, self.kinds.copy()

    def act_with_probs(
        self, graph, generator: torch.Generator
    ) -> tuple[Tensor, np.ndarray, Tensor]:
        """:meth:`act`'s maps and kinds (same draws) and every member's probabilities.

        Returns maps long ``[P, N, H]``, kinds ``[P]`` and probabilities float
        ``[P, N, H, C]`` on the CPU (0 for the choices a head lacks).
        """
        maps, probs = self._act(graph, generator, with_probs=True)
        return maps, self.kinds.copy(), probs

    def _act(
        self, graph, generator: torch.Generator, with_probs: bool
    ) -> tuple[Tensor, Tensor | None]:
        """Maps ``[P, N, H]`` and, when ``with_probs``, probabilities ``[P, N, H, C]``."""
        self._check_graph(graph)
        shape = (self.size, self.num_units, len(self.num_choices))
        maps = torch.empty(shape, dtype=torch.long)
        probs = torch.zeros(*shape, max(self.num_choices)) if with_probs else None
        greedy = self.params.gnn_greedy
        for index, net in zip(self.indices(GNN), self.gnns):
            if with_probs:
                member_maps, probs[index] = net.act_with_probs(graph, 1, generator, greedy=greedy)
            else:
                member_maps = net.act(graph, 1, generator, greedy=greedy)
            maps[index] = member_maps[0].cpu()
        if self.chromosomes is not None:
            rows = self.indices(BOLTZMANN)
            maps[rows] = self.chromosomes.sample(generator).cpu()
            if with_probs:
                probs[rows] = self.chromosomes.probs().cpu()
        return maps, probs

    def act_candidates(
        self, graph, generator: torch.Generator, count: int, noise_std: float
    ) -> Tensor:
        """``count`` more maps per member for a screen to choose from: long ``[P, count, N, H]``.

        GNN members that act greedily (``gnn_greedy``) give the argmax after
        ``N(0, noise_std^2)`` noise on their probabilities (EGRL's noisy rollout; with
        ``noise_std`` 0 their own map again), the others samples of their softmax;
        chromosomes give further samples of their Boltzmann softmax.
        """
        self._check_graph(graph)
        maps = torch.empty(
            (self.size, count, self.num_units, len(self.num_choices)), dtype=torch.long
        )
        greedy = self.params.gnn_greedy
        noise = float(noise_std) if greedy else 0.0
        with torch.no_grad():
            for index, net in zip(self.indices(GNN), self.gnns):
                maps[index] = net.act(graph, count, generator, greedy=greedy, noise_std=noise).cpu()
            if self.chromosomes is not None:
                draws = [self.chromosomes.sample(generator).cpu() for _ in range(count)]
                maps[self.indices(BOLTZMANN)] = torch.stack(draws, dim=1)
        return maps

    def set_fitness(self, fitness: np.ndarray) -> None:
        """Record the fitness ``[P]`` of the current members (``-inf``: not evaluated, last)."""
        self.fitness = selection.check_fitness(fitness, self.size).copy()
        self.evaluated[:] = True
        self.migrants[:] = False
        self.elites = np.zeros(0, dtype=np.int64)

    def champion(self) -> tuple[int, str]:
        """``(index, kind)`` of the fittest member whose current policy has a fitness."""
        known = np.flatnonzero(self.evaluated)
        if known.size == 0:
            raise RuntimeError("no member has a fitness yet: call set_fitness first")
        best = int(known[selection.rank(self.fitness[known])[0]])
        return best, str(self.kinds[best])

    def _check_graph(self, graph) -> None:
        nodes = int(graph.num_nodes)
        if nodes != self.num_units:
            raise ValueError(
                f"graph has {nodes} nodes but the population maps {self.num_units} decision units"
            )

    # ------------------------------------------------------------------ evolution
    def evolve(self, graph, generator: torch.Generator) -> GenerationReport:
        """One generation (Algorithm 2, lines 10-23) over the evaluated members.

        Elites stay unchanged. Every other member gets a child of its own encoding: a copy
        of a same-encoding tournament winner (the base), crossed over with an elite mate of
        the same encoding (``crossover_prob``) or, for a chromosome whose elite mate is a
        GNN, seeded from that GNN's posterior on ``graph`` (``seed_prob``); then mutated
        (``mutation_prob``). Children get new ids and no fitness. Members placed by
        :meth:`migrate` since the last :meth:`set_fitness` are kept for evaluation; every
        other member needs a fitness.
        """
        stale = np.flatnonzero(~self.evaluated & ~self.migrants)
        if stale.size:
            raise RuntimeError(
                f"evolve needs the fitness of every member; missing: {stale.tolist()}"
            )
        self._check_graph(graph)
        p = self.params
        pool = np.flatnonzero(self.evaluated)
        count = min(p.num_elites(self.size), pool.size)
        elites = pool[selection.rank(self.fitness[pool])[:count]]
        children = np.setdiff1d(
            np.arange(self.size), np.union1d(elites, np.flatnonzero(self.migrants))
        )
        has_parents = [kind for kind in KINDS if (self.kinds[pool] == kind).any()]
        children = children[np.isin(self.kinds[children], has_parents)]
        bases = np.empty_like(children)
        for kind in has_parents:
            mine = self.kinds[children] == kind
            candidates = pool[self.kinds[pool] == kind]
            bases[mine] = self.toolbox.select(
                self.fitness, candidates, int(mine.sum()), rng=self.rng
            )
        mates = self.rng.choice(elites, size=children.size) if elites.size else bases.copy()
        draws = self.rng.random((3, children.size))
        same = self.kinds[mates] == self.kinds[children]
        report = GenerationReport(
            elites=elites,
            children=children,
            bases=bases,
            mates=mates,
            crossed=same & (mates != bases) & (draws[0] < p.crossover_prob),
            seeded=(self.kinds[children] == BOLTZMANN)
            & (self.kinds[mates] == GNN)
            & (draws[1] < p.seed_prob),
            mutated=draws[2] < p.mutation_prob,
        )
        self._breed_gnns(report, generator)
        self._breed_chromosomes(report, graph, generator)
        self._inherit_descent(report)
        self.ids[children] = self._new_ids(children.size)
        self.evaluated[children] = False
        self.elites = elites
        log.debug(
            "generation: elites %s, %d crossed, %d seeded, %d mutated",
            elites.tolist(),
            int(report.crossed.sum()),
            int(report.seeded.sum()),
            int(report.mutated.sum()),
        )
        return report

    def _inherit_descent(self, r: GenerationReport) -> None:
        """A child descends from whatever its base and, if it mixed in its mate (crossover
        or seeding), its mate descend from; a seeded chromosome descends from seeding."""
        mixed = r.crossed | r.seeded
        descent = self.descent[r.bases] | np.where(mixed, self.descent[r.mates], 0)
        self.descent[r.children] = descent | np.where(r.seeded, FROM_SEEDING, 0)

    def descent_label(self, index: int) -> str:
        """``"learner"``, ``"seeding"``, ``"learner+seeding"`` or ``"none"`` for member ``index``."""
        flags = int(self.descent[index])
        names = [n for f, n in ((FROM_LEARNER, "learner"), (FROM_SEEDING, "seeding")) if flags & f]
        return "+".join(names) or "none"

    def _breed_gnns(self, r: GenerationReport, generator: torch.Generator) -> None:
        mine = self.kinds[r.children] == GNN
        if not mine.any():
            return
        parents = np.union1d(r.bases[mine], r.mates[mine & r.crossed])
        states = {int(i): gnn_ops.snapshot(self.gnn(int(i))) for i in parents}
        for child, base, mate, crossed, mutated in zip(
            r.children[mine], r.bases[mine], r.mates[mine], r.crossed[mine], r.mutated[mine]
        ):
            state = states[int(base)]
            if crossed:
                state = self.toolbox.mate_gnn(state, states[int(mate)], rng=self.rng)
            net = self.gnn(int(child))
            net.load_state_dict(state)
            if mutated:
                self.toolbox.mutate_gnn(net, generator=generator)

    def _breed_chromosomes(self, r: GenerationReport, graph, generator: torch.Generator) -> None:
        mine = self.kinds[r.children] == BOLTZMANN
        if not mine.any():
            return
        chromo = self.chromosomes
        rows = torch.as_tensor(self._slot[r.children[mine]])
        base_rows = torch.as_tensor(self._slot[r.bases[mine]])
        prior = chromo.prior[base_rows].clone()
        temperature = chromo.temperature[base_rows].clone()
        crossed = torch.as_tensor(r.crossed[mine])
        if crossed.any():
            mate_rows = torch.as_tensor(self._slot[r.mates[mine]])[crossed]
            prior[crossed], temperature[crossed] = self.toolbox.mate_boltzmann(
                prior[crossed],
                chromo.prior[mate_rows],
                temperature[crossed],
                chromo.temperature[mate_rows],
                rng=self.rng,
            )
        chromo.prior[rows] = prior
        chromo.temperature[rows] = temperature
        self._seed_chromosomes(
            r.children[mine][r.seeded[mine]], r.mates[mine][r.seeded[mine]], graph
        )
        mutated = rows[torch.as_tensor(r.mutated[mine])]
        if mutated.numel():
            chromo.prior[mutated], chromo.temperature[mutated] = self.toolbox.mutate_boltzmann(
                chromo.prior[mutated], chromo.temperature[mutated], generator=generator
            )

    def _seed_chromosomes(self, children: np.ndarray, sources: np.ndarray, graph) -> None:
        """Seed each chromosome member in ``children`` from the GNN member in ``sources``."""
        posteriors: dict[int, Tensor] = {}
        for child, source in zip(children, sources):
            if int(source) not in posteriors:
                posteriors[int(source)] = _posterior(self.gnn(int(source)), graph)
            self.toolbox.seed_boltzmann(
                self.chromosomes, self.chromosome_row(int(child)), posteriors[int(source)]
            )

    def _new_ids(self, count: int) -> np.ndarray:
        ids = np.arange(self._next_id, self._next_id + count, dtype=np.int64)
        self._next_id += count
        return ids

    # ------------------------------------------------------------------ migration
    def migrate(self, actor: nn.Module, graph=None) -> int:
        """Copy the learner's ``actor`` into the weakest member (Algorithm 2, line 31).

        "Weakest" is the lowest last-measured fitness of a member slot (never measured counts
        as weakest), excluding earlier migrants not yet evaluated and, after an
        :meth:`evolve`, its elites. Called between :meth:`set_fitness` and :meth:`evolve`,
        the migrant is kept through that generation so that it gets evaluated; called
        after :meth:`evolve`, it replaces a fresh child. With ``migration_target="gnn"``
        only GNN members are candidates and the actor's weights are copied (a population of
        chromosomes only falls back to ``"any"``); with ``"any"`` a chromosome may be the
        weakest, and then its prior is seeded from the actor's posterior on ``graph``.
        Returns the replaced member index.
        """
        candidates = np.arange(self.size)
        if self.params.migration_target == GNN and self.indices(GNN).size:
            candidates = self.indices(GNN)
        free = np.setdiff1d(candidates, np.union1d(self.elites, np.flatnonzero(self.migrants)))
        candidates = free if free.size else candidates
        measured = np.where(np.isnan(self.fitness[candidates]), -np.inf, self.fitness[candidates])
        weakest = int(candidates[np.argmin(measured)])
        if self.kinds[weakest] == GNN:
            _copy_weights(actor, self.gnn(weakest), weakest)
        else:
            if graph is None:
                raise ValueError(
                    f"member {weakest} is a Boltzmann chromosome: migrate needs the graph to "
                    "seed it from the actor's posterior"
                )
            self._check_graph(graph)
            self.toolbox.seed_boltzmann(
                self.chromosomes, self.chromosome_row(weakest), _posterior(actor, graph)
            )
        self.ids[weakest] = self._new_ids(1)[0]
        self.fitness[weakest] = np.nan
        self.evaluated[weakest] = False
        self.migrants[weakest] = True
        self.descent[weakest] = FROM_LEARNER
        log.debug("migrated the learner into member %d (%s)", weakest, self.kinds[weakest])
        return weakest

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Tensors, arrays and plain data only (see :mod:`egrl.checkpoint`)."""
        return {
            "format": STATE_FORMAT,
            "num_units": self.num_units,
            "num_choices": list(self.num_choices),
            "kinds": self.kinds.tolist(),
            "ids": self.ids.copy(),
            "next_id": self._next_id,
            "fitness": self.fitness.copy(),
            "evaluated": self.evaluated.copy(),
            "migrants": self.migrants.copy(),
            "descent": self.descent.copy(),
            "elites": self.elites.copy(),
            "params": self.params.to_dict(),
            "rng": _jsonable(self.rng.bit_generator.state),
            "gnn": [
                {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
                for net in self.gnns
            ],
            "boltzmann": None
            if self.chromosomes is None
            else {k: v.clone() for k, v in self.chromosomes.state_dict().items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` into a population built with the same layout."""
        if state.get("format") != STATE_FORMAT:
            raise ValueError(f"not a mixed-population state (format {state.get('format')!r})")
        layout = {
            "kinds": self.kinds.tolist(),
            "num_units": self.num_units,
            "num_choices": list(self.num_choices),
        }
        for key, mine in layout.items():
            theirs = list(state[key]) if isinstance(mine, list) else state[key]
            if theirs != mine:
                raise ValueError(f"population state has {key}={theirs}, this population {mine}")
        params = EvolutionParams.from_dict(state["params"])
        if params != self.params:
            self.params = params
            self._rebind_built_operators()
        for i, (net, weights) in enumerate(zip(self.gnns, state["gnn"])):
            _copy_weights_from_state(weights, net, int(self.indices(GNN)[i]))
        if self.chromosomes is not None:
            self.chromosomes.load_state_dict(state["boltzmann"])
        self.ids = np.asarray(state["ids"], dtype=np.int64).copy()
        self._next_id = int(state["next_id"])
        self.fitness = np.asarray(state["fitness"], dtype=np.float64).copy()
        self.evaluated = np.asarray(state["evaluated"], dtype=bool).copy()
        self.migrants = np.asarray(state["migrants"], dtype=bool).copy()
        # checkpoints written before descent was tracked know no descent
        self.descent = np.asarray(state.get("descent", np.zeros(self.size)), dtype=np.uint8).copy()
        self.elites = np.asarray(state["elites"], dtype=np.int64).copy()
        self.rng.bit_generator.state = state["rng"]

    def _rebind_built_operators(self) -> None:
        """Bind the default operators to :attr:`params` again, keeping the toolbox itself:
        an operator the user registered on it (a swapped or an added one) stays."""
        fresh = build_toolbox(self.params, self.num_choices)
        for name, op in vars(fresh).items():
            if getattr(self.toolbox, name, None) is self._built_ops.get(name):
                setattr(self.toolbox, name, op)
                self._built_ops[name] = op


def _random_chromosomes(
    count: int,
    units: int,
    num_choices: list[int],
    params: EvolutionParams,
    generator: torch.Generator,
) -> BoltzmannChromosome:
    """``count`` random chromosomes; temperatures uniform in ``params.init_temperature``."""
    low, high = params.init_temperature
    chromosomes = BoltzmannChromosome.random(
        count,
        units,
        num_choices,
        generator,
        init_temperature=low,
        t_min=params.min_temperature,
        t_max=params.max_temperature,
    )
    if high > low:
        draw = torch.rand(
            chromosomes.temperature.shape, generator=generator, device=generator.device
        )
        chromosomes.temperature.copy_(low + (high - low) * draw.to(chromosomes.temperature))
    return chromosomes


def _build_gnn(make_gnn: Callable[[], nn.Module], generator: torch.Generator) -> nn.Module:
    """Call ``make_gnn`` under :func:`policies.seeded_init` with a seed drawn from ``generator``.

    Module constructors draw their initial weights from the global torch generator; seeding
    a fork of it makes the weights depend on ``generator`` only.
    """
    return seeded_init(int(torch.randint(0, 2**62, (1,), generator=generator)), make_gnn)


@torch.no_grad()
def _posterior(net: nn.Module, graph) -> Tensor:
    """The GNN's action probabilities on ``graph``: float ``[N, H, C]`` on the CPU."""
    return net.distribution(graph).detach().cpu()


def _copy_weights(source: nn.Module, target: nn.Module, index: int) -> None:
    _copy_weights_from_state(source.state_dict(), target, index)


def _copy_weights_from_state(state: dict[str, Tensor], target: nn.Module, index: int) -> None:
    try:
        target.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"weights do not fit GNN member {index}: {err}") from err


def _jsonable(value: Any) -> Any:
    """``bit_generator.state`` as plain dicts/ints/strs (no numpy scalars)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value
