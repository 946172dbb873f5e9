"""A standard generational genetic algorithm on the integer map, built on DEAP.

The genome is the map flattened to ``N * H`` integers (unit-major). A generation is
DEAP's ``eaSimple`` step: tournament selection (``tools.selTournament``), then
``algorithms.varAnd`` (pairwise crossover with probability ``cxpb``: ``tools.cxTwoPoint``
or ``tools.cxUniform``; then per-individual mutation with probability ``mutpb``:
``tools.mutUniformInt``, each gene redrawn uniformly with probability ``indpb``). Every
individual whose fitness ``varAnd`` invalidated is evaluated, all of them in one
``env.evaluate`` batch; the fitness is EGRL's reward. Beyond ``eaSimple``, the ``elites``
best individuals pass unchanged into the next generation (and are not re-evaluated).

With screening (``screen``, :mod:`egrl.screening`) every later generation breeds
``screen.pool`` offspring populations from the same parents; for each slot whose usual
child (the first population's) needs a measurement, the screen picks which of the
slot's children is measured and joins the population. With model search
(``screen.search=G``, once the screen has a model) ``G`` generations breed on the model's
acquisition instead of the chip, and the generation measures the best unseen children of
all of them (:meth:`GeneticAlgorithm._model_generations`).

DEAP draws from Python's module-level :mod:`random`; every DEAP call runs inside
:func:`populations.deap_bridge.seeded_random`, which seeds it from the agent's generator
and restores it afterwards, so runs are reproducible from ``cfg.seed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from deap import algorithms, base, tools

from egrl.agents import register_agent
from egrl.agents.base import SCREEN_PHASE, SearchAgent
from egrl.agents.options import parse_options, resolve_start, start_mappings, start_rule
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import FRACTION, Rule, at_least, ruled
from populations.deap_bridge import MaxFitness, seeded_random

CROSSOVERS = ("two_point", "uniform")
#: generations without any changed individual after which the GA gives up
MAX_FREE_GENERATIONS = 1000


def _varies(o: GeneticOptions) -> str | None:
    """Why ``cxpb`` and ``mutpb`` do not go together (both 0: nothing varies), or None."""
    if o.cxpb == 0 and o.mutpb == 0:
        return "cxpb=0 and mutpb=0 are invalid: nothing varies (expected one of them > 0)"
    return None


def _elites_fit(o: GeneticOptions) -> str | None:
    """Why ``elites`` does not fit the population (at most ``population - 1``), or None."""
    if o.elites >= o.population:
        return f"elites={o.elites} is invalid: expected an integer in [0, {o.population - 1}] (population - 1)"
    return None


@dataclass(frozen=True)
class GeneticOptions:
    """Parameters of ``agent=ga``.

    Attributes:
        population: individuals per generation.
        cxpb: probability that a consecutive pair is mated (``varAnd``).
        mutpb: probability that an individual is mutated (``varAnd``).
        indpb: per-gene probability of a uniform redraw in a mutation; ``None`` means
            ``1 / (N * H)``, one gene per mutation on average.
        tournsize: tournament size of the selection.
        crossover: ``two_point`` (``tools.cxTwoPoint``) or ``uniform``
            (``tools.cxUniform`` with per-gene swap probability 0.5).
        elites: best individuals copied unchanged into the next generation.
        start: the first generation: ``random`` (uniform random maps), or one individual
            set to ``initial`` (the target's initial map; alias ``dram``), ``native`` (the
            compiler's map) or ``fallback`` (the target's always-valid map) and the others
            random.
    """

    population: int = ruled(at_least(1), 20)
    cxpb: float = ruled(FRACTION, 0.5)
    mutpb: float = ruled(FRACTION, 0.5)
    indpb: float | None = ruled(Rule(float, low=0, high=1, optional=True), None)
    tournsize: int = ruled(at_least(1), 3)
    crossover: str = ruled(Rule(str, choices=CROSSOVERS), "two_point")
    elites: int = ruled(at_least(0), 1)
    start: str = ruled(start_rule(), "random")

    #: the checks of fields that go together (:func:`egrl.validation.field_problems`)
    RELATIONS = (_varies, _elites_fit)


class Genome(list):
    """A flattened map as DEAP sees it: a list of ints with a ``fitness``, and whether that
    fitness was measured (``False``: the screen's model predicted it, model search)."""

    def __init__(self, genes=(), measured: bool = True) -> None:
        super().__init__(int(g) for g in genes)
        self.fitness = MaxFitness()
        self.measured = measured


@register_agent("ga")
class GeneticAlgorithm(SearchAgent):
    """DEAP generational GA (see the module docstring)."""

    extra_columns = ("pop_best_reward", "pop_mean_reward")
    screens = True
    model_search = True

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        o = self.options = parse_options(GeneticOptions, cfg)
        self.start = resolve_start(o.start, env, self.name)
        self.shape = (env.num_units, env.num_heads)
        length = env.num_units * env.num_heads
        upper = np.tile(env.num_choices - 1, env.num_units).tolist()
        self.toolbox = base.Toolbox()
        self.toolbox.register("select", tools.selTournament, tournsize=o.tournsize)
        if o.crossover == "two_point":
            self.toolbox.register("mate", tools.cxTwoPoint)
        else:
            self.toolbox.register("mate", tools.cxUniform, indpb=0.5)
        indpb = 1.0 / length if o.indpb is None else o.indpb
        self.toolbox.register("mutate", tools.mutUniformInt, low=0, up=upper, indpb=indpb)
        self.population: list[Genome] | None = None

    # ------------------------------------------------------------- generation
    def step(self) -> dict:
        if self.population is None:
            maps = self.env.random_mappings(self.options.population, self.rng)
            if self.start != "random":
                limit = self.cfg.prior_time_limit_s
                maps[0] = start_mappings(self.env, self.start, 1, self.rng, limit)[0]
            offspring = [Genome(m.reshape(-1)) for m in maps]
            todo = offspring
        elif self.searching:
            with self.timer(SCREEN_PHASE):
                todo = self._model_generations()
            offspring = self.population
        else:
            with self.timer("evolution"):
                offspring = self._offspring()
            if self.screen is not None and self.ledger.pool > 1:
                offspring = self._screened(offspring)
            todo = [ind for ind in offspring if not ind.fitness.valid]
        ev = self.ledger.evaluate(np.array(todo, dtype=np.int64).reshape(-1, *self.shape), "ga")
        for ind, reward in zip(todo, ev.reward):
            ind.fitness.values = (float(reward),)
            ind.measured = True
        self.population = offspring
        fit = self.fitness()
        measured = np.array([ind.measured for ind in self.population])
        known = fit[np.isfinite(fit) & measured]  # the model's guesses are not rewards
        if len(known) == 0:
            return {"pop_best_reward": float("nan"), "pop_mean_reward": float("nan")}
        return {"pop_best_reward": float(known.max()), "pop_mean_reward": float(known.mean())}

    def _model_generations(self) -> list[Genome]:
        """Model search (``screen.search=G``): ``G`` generations bred on the screen's
        acquisition instead of the chip (every fitness the model gave is given again by
        the current model; measured ones stay), then the maps to measure: as many as a
        generation measures (``population - elites``), the best unseen of every child the
        search bred by acquisition and a share ``screen.explore`` from the rest
        (:meth:`~egrl.screening.screen.Screen.select`). The population is the last model
        generation; the picked children are in it or are not, their measured fitness goes
        to every copy in it."""
        self._predict([ind for ind in self.population if not ind.measured])
        bred: list[Genome] = []
        for _ in range(self.search_generations):
            offspring = self._offspring()
            children = [ind for ind in offspring if not ind.fitness.valid]
            self._predict(children)
            bred += children
            self.population = offspring
        maps = np.array(bred, dtype=np.int64).reshape(-1, *self.shape)
        picked = self.ledger.select(maps, self.options.population - self.options.elites)
        return [bred[i] for i in picked]

    def _predict(self, individuals: list[Genome]) -> None:
        """Give ``individuals`` the screen's :meth:`~egrl.screening.screen.Screen.value` as fitness."""
        if not individuals:
            return
        maps = np.array(individuals, dtype=np.int64).reshape(-1, *self.shape)
        for ind, value in zip(individuals, self.screen.value(maps)):
            ind.fitness.values = (float(value),)
            ind.measured = False

    def _offspring(self) -> list[Genome]:
        """Next generation: elites + varAnd(tournament); repeated until one needs evaluating."""
        o = self.options
        with seeded_random(self.rng):
            for _ in range(MAX_FREE_GENERATIONS):
                elites = [self.toolbox.clone(i) for i in tools.selBest(self.population, o.elites)]
                chosen = self.toolbox.select(self.population, o.population - o.elites)
                offspring = elites + algorithms.varAnd(chosen, self.toolbox, o.cxpb, o.mutpb)
                if any(not ind.fitness.valid for ind in offspring):
                    return offspring
                self.population = offspring  # nothing changed: a free generation
        raise RuntimeError(
            f"agent {self.name!r}: {MAX_FREE_GENERATIONS} generations in a row changed no "
            f"individual (cxpb={o.cxpb}, mutpb={o.mutpb}, population={o.population}, "
            f"elites={o.elites})"
        )

    def _screened(self, offspring: list[Genome]) -> list[Genome]:
        """``offspring`` with each child that needs a measurement replaced by the screen's
        pick among it and its slot's children in ``pool - 1`` more offspring populations."""
        slots = [j for j, ind in enumerate(offspring) if not ind.fitness.valid]
        if not slots:
            return offspring
        with self.timer("evolution"):
            variants = [offspring] + [self._offspring() for _ in range(self.ledger.pool - 1)]
        pools = np.array(
            [[variant[j] for variant in variants] for j in slots], dtype=np.int64
        ).reshape(len(slots), len(variants), *self.shape)
        picked = self.ledger.choose(pools)
        out = list(offspring)
        for j, k in zip(slots, picked.tolist()):
            out[j] = variants[k][j]
        return out

    def fitness(self) -> np.ndarray:
        """float64 ``[P]``: the population's rewards (NaN: not evaluated)."""
        return np.array(
            [ind.fitness.values[0] if ind.fitness.valid else np.nan for ind in self.population]
        )

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        if self.population is None:
            return {"genes": None, "fitness": None, "measured": None}
        return {
            "genes": np.array(self.population, dtype=np.int64),
            "fitness": self.fitness(),
            "measured": np.array([ind.measured for ind in self.population]),
        }

    def load_agent_state(self, state: dict) -> None:
        if state["genes"] is None:
            self.population = None
            return
        self.population = []
        genes = np.asarray(state["genes"])
        measured = state.get("measured")  # checkpoints before model search: all measured
        measured = np.ones(len(genes), bool) if measured is None else np.asarray(measured)
        for gene, fit, paid in zip(genes, np.asarray(state["fitness"]), measured):
            ind = Genome(gene, measured=bool(paid))
            if np.isfinite(fit):
                ind.fitness.values = (float(fit),)
            self.population.append(ind)
