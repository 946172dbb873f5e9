"""The EGRL generation loop (Algorithm 2 of the EGRL paper, Appendix C).

One generation::

    maps  = population.act(graph)                 # one map per member       (GNN inference)
    submit(maps)                                  # compile + run, one batch per member kind
    maps' = learner noisy + clean rollouts        # noise on the probabilities (GNN inference)
    submit(maps')
    collect every answer: buffer.add(maps, reward, kind or "learner")        (evaluation)
    population.set_fitness(rewards of maps)
    repeat steps_this_generation * ratio times:   # off-policy SAC updates    (learner)
        learner.update(buffer.sample(batch))
    population.migrate(learner.actor)             # learner replaces the weakest member
    population.evolve(graph)                      # elites, tournament, crossover, mutation (evolution)

With ``agent.overlap`` (on by default when maps are measured by remote workers,
``runtime=ray``) the learner makes its updates while answers are still outstanding, as
CERL's asynchronous rollout workers let it: after each update it collects what has
arrived, and it owes ``gradient_ratio`` updates per step answered so far. Every
answer is collected before fitness, migration and evolution, so none crosses a
generation, and the generation makes as many updates as a synchronous one.

Every replay entry is tagged with the kind of policy that made it: ``"gnn"`` and
``"boltzmann"`` for population members, ``"learner"`` for the learner's rollouts. A
target that wants the policy's probabilities (``env.wants_probabilities``) receives them
with the maps, float ``[B, N, H, C]``. Iterations are paid hardware measurements counted
across everything (the paper's x-axes); on a deterministic target a map measured before
is answered from the agent's cache for free but still enters the replay buffer; the
learner makes ``gradient_ratio`` updates per paid measurement (``learner.update_on``:
``"proposal"`` owes them on every answered map instead). A generation that would
cross the budget measures only the new maps the budget still pays for; members whose map
was left unmeasured rank last. The answer is the best valid map ever evaluated.

With screening (``screen``, :mod:`egrl.screening`) every member proposes ``screen.pool``
maps (its own, then :meth:`populations.MixedPopulation.act_candidates`: noisy argmaxes of
a GNN with ``learner.noise_std``, further samples of a chromosome) and the screen keeps
one per member, its own when the measure cache already knows it, so fitness stays one
map per member; each learner draws ``screen.pool`` times its noisy rollouts and the
screen keeps as many new ones as it would have measured, and those the cache knows (they
are free and tell the portfolio how the learner does). Clean rollouts are not screened.
With model search (``screen.search=G``, ``egrl`` and ``ea``) a generation whose screen has
a model first runs ``G`` generations of the population on the model's acquisition instead
of the chip (the members' maps are scored by the model, and the population evolves on
those scores with its own operators), then pays one map per member: the best maps that
search visited and the chip has not seen, a share ``screen.explore`` drawn from the rest.
The members of the last model generation whose maps were paid get their measured rewards
as fitness before migration and evolution; the others keep the model's.
With ``screen=critic`` (``egrl`` and ``pg``; ``ea`` has no learner and refuses it) the
model is the lead learner's own critic (:mod:`egrl.screening.critic`), attached to the
screen when the learners are built; it ranks once the learner has made its first update.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import policies
from egrl.agents import register_agent
from egrl.agents.base import TIMING_COLUMNS, SearchAgent
from egrl.agents.egrl.config import EGRLConfig
from egrl.agents.egrl.init_from import check_fits, load_into, read_policy
from egrl.agents.egrl.portfolio import LearnerPortfolio
from egrl.agents.egrl.sac import SACDiscrete, uniform_entropy
from egrl.agents.egrl.warm_start import warm_start
from egrl.agents.options import (
    parse_options,
    pay_prior_first,
    resolve_start,
    start_mappings,
    start_rule,
)
from egrl.callbacks import Callback, RunView
from egrl.config import TrainConfig
from egrl.env import Env, Evaluation
from egrl.ledger import SCREEN_PHASE, make_buffer
from egrl.record import Reading
from egrl.replay import ReplayBuffer
from egrl.rundir import RunDir
from egrl.screening.critic import LearnerCritic
from egrl.validation import Rule, at_least, ruled
from policies import seeded_init
from policies.categorical import to_numpy_maps
from policies.snapshot import StoredPolicy, write_snapshot
from populations import MixedPopulation

log = logging.getLogger(__name__)

__all__ = ["LEARNER", "TIMING_COLUMNS", "EGRLAgent"]

#: replay-buffer source of the learners' rollouts (population maps carry their member kind)
LEARNER = "learner"
#: replay-buffer source of the compiler's repairs of invalid maps (``learner.store_repaired``)
REPAIRED = "repaired"
#: values of ``agent.overlap``: true, false or ``auto`` (overlap when the runtime measures
#: out of process)
OVERLAP = Rule(bool, words=("auto",))


@dataclass(frozen=True)
class MemberMaps:
    """A submission of the population's maps, one batch per member kind.

    Attributes:
        rows: int ``[M]``: the members whose maps these are or, with ``searched``, the rows
            of the maps model search visited (:meth:`EGRLAgent._model_generations`).
        searched: the maps are model search's picks.
    """

    rows: np.ndarray
    searched: bool = False


@dataclass(frozen=True)
class Rollouts:
    """A submission of a learner's rollouts: noisy ones of learner ``learner`` (its index
    in the portfolio), or with ``clean`` the lead learner's greedy ones."""

    learner: int
    clean: bool = False


#: what a generation submitted, by ticket id
Sent = dict[int, MemberMaps | Rollouts]
#: learner updates made in one generation: ``(updates, mean statistics)`` per block
UpdateLog = list[tuple[int, dict[str, float]]]


@dataclass(frozen=True)
class EGRLOptions:
    """Parameters of ``agent=egrl`` / ``ea`` / ``pg`` beyond :class:`~egrl.config.AgentConfig`.

    Attributes:
        start: the paper's start ``initial`` (alias ``dram``: members and learners as
            initialised, nothing put in), or a map put into the policies before the first
            generation (:mod:`egrl.agents.egrl.warm_start`): ``native`` (the compiler's map),
            ``fallback`` (the target's always-valid map) or ``random`` (a uniform random
            map). The map goes into one Boltzmann chromosome and is taught to the first
            ``start_gnns`` GNN members (to the learners' actors when there is no population).
        start_gnns: GNN members taught the start map.
        start_steps: most supervised steps of one GNN towards the start map.
        overlap: the learner updates while maps are being measured (``True``), only once
            every answer of the generation is in (``False``, the paper's synchronous
            generation), or ``auto``: overlap when the runtime measures out of process.
    """

    start: str = ruled(start_rule(), "initial")
    start_gnns: int = ruled(at_least(0), 2)
    start_steps: int = ruled(at_least(0), 500)
    overlap: str | bool = ruled(OVERLAP, "auto")


@register_agent("egrl", "ea", "pg")
class EGRLAgent(SearchAgent):
    """EGRL (and its ablations ``ea`` and ``pg``) on one environment.

    Args:
        env: the environment (hardware target bound to a workload).
        cfg: the run's configuration.
        run_dir: where metrics, checkpoints, the best map and plots go (None: nowhere).
    """

    accepts_init_from = True
    screens = True
    model_search = True
    default_search = 10  # the model-search study: EA and EGRL gain, 10 generations per batch
    snapshots = True
    config_class = EGRLConfig
    extra_columns = (
        "champion_type",
        "champion_descent",
        "pop_best_reward",
        "pop_mean_reward",
        "pop_valid_fraction",
        "learner_noisy_reward",
        "learner_clean_reward",
        "learner_clean_speedup",
        "gradient_steps",
        "critic_loss",
        "actor_loss",
        "entropy",
        "q_mean",
    )

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        if not isinstance(cfg.agent, EGRLConfig):
            raise TypeError(
                f"agent {cfg.agent.name!r} needs an EGRLConfig as cfg.agent (its policy, "
                "population and learner sections), got a plain AgentConfig: build the config "
                "with egrl.agents.train_config(mapping) or TrainConfig(agent=EGRLConfig(...))"
            )
        super().__init__(env, cfg, run_dir)
        #: the learners' replay buffer: every answered map (and, with
        #: ``learner.store_repaired``, the compiler's repairs), Algorithm 2's shared buffer
        self.buffer = make_buffer(env, cfg.agent.learner.buffer_size)
        self.ledger.record.subscribe(self._store)  # every answer of the search, as it comes
        self.device = torch.device(cfg.device)
        self.graph = env.graph.to(self.device)
        in_dim = int(env.graph.x.shape[1])
        self.num_choices = [int(c) for c in env.num_choices]
        pol = cfg.agent.policy
        seeds = iter(
            self.rng.integers(0, 2**31 - 1, size=1 + 2 * max(1, cfg.agent.learner.num_learners))
        )
        init_seed = int(next(seeds))

        def make_gnn() -> policies.GraphUNetActor:
            return policies.GraphUNetActor(
                in_dim,
                self.num_choices,
                hidden=pol.hidden,
                out=pol.out,
                depth=pol.depth,
                heads=pol.heads,
            ).to(self.device)

        self.population: MixedPopulation | None = None
        if cfg.agent.use_population:
            pop_seed = np.random.default_rng(init_seed)
            self.population = seeded_init(
                init_seed,
                lambda: MixedPopulation(
                    make_gnn,
                    num_units=env.num_units,
                    num_choices=self.num_choices,
                    size=cfg.agent.population.size,
                    boltzmann_fraction=cfg.agent.population.boltzmann_fraction,
                    rng=pop_seed,
                    generator=self.generator,
                    **cfg.agent.population.options,
                ),
            )
        self._champion: dict[str, torch.Tensor] | None = None  # see _keep_champion
        self.portfolio: LearnerPortfolio | None = None
        if cfg.agent.use_learner:
            lc = cfg.agent.learner
            learners = [
                SACDiscrete.build(
                    in_dim,
                    self.num_choices,
                    seed=int(next(seeds)),
                    config=lc,
                    device=self.device,
                    hidden=pol.hidden,
                    out=pol.out,
                    depth=pol.depth,
                    heads=pol.heads,
                )
                for _ in range(max(1, lc.num_learners))
            ]
            self.portfolio = LearnerPortfolio(learners, ucb_c=lc.ucb_c)
            if self.screen is not None:
                self.screen.attach_critic(LearnerCritic(learners, self.graph, self._lead_learner))
        self.options = parse_options(EGRLOptions, cfg)
        self.start = resolve_start(self.options.start, env, self.name)
        #: int64 ``[N, H]``: the map put into the policies (None: the paper's start, or
        #: not yet: the first generation puts it in)
        self.start_map: np.ndarray | None = None
        if cfg.init_from:
            self._init_from(read_policy(cfg.init_from))
        #: the start map is put into the policies at the first generation, not here, so
        #: that making the agent (the command line's checks make one) solves no prior and
        #: trains no GNN; a resumed run has it in its checkpoint
        self.warm_start_due = self.start != "initial"

    @classmethod
    def has_critic(cls, agent: Mapping[str, Any]) -> bool:
        """``egrl`` and ``pg`` have the learner's critic; ``ea`` (``use_learner=false``) none."""
        return bool(agent.get("use_learner", True))

    @classmethod
    def searches_model(cls, agent: Mapping[str, Any]) -> bool:
        """``egrl`` and ``ea`` search the model with their population; ``pg`` has none."""
        return bool(agent.get("use_population", True))

    def _init_from(self, policy: StoredPolicy) -> None:
        """Start the learners' actors and the GNN members from a trained policy.

        The learners get its ``learner`` actor (else its ``champion``); GNN member 0 gets
        its ``champion`` (else its ``learner``) as is, every other GNN member the same
        weights with one mutation, so the first generation explores around the trained
        policy. Critics, chromosomes and optimizer states start fresh.
        """
        check_fits(
            policy, int(self.env.graph.x.shape[1]), self.num_choices, asdict(self.cfg.agent.policy)
        )
        if self.portfolio is not None:
            for learner in self.portfolio.learners:
                load_into(learner.actor, policy.actor_state("learner"), policy.source)
                learner.sync_actor_target()
        if self.population is not None:
            for j, index in enumerate(self.population.indices("gnn")):
                net = self.population.gnn(int(index))
                load_into(net, policy.actor_state("champion"), policy.source)
                if j:
                    self.population.toolbox.mutate_gnn(net, generator=self.generator)
        log.info("GNN policies start from %s", policy.source)

    def start_policies(self) -> None:
        """Put the start map into the policies (:mod:`egrl.agents.egrl.warm_start`), once."""
        self.warm_start_due = False
        limit = self.cfg.prior_time_limit_s
        mapping = self.start_map = start_mappings(self.env, self.start, 1, self.rng, limit)[0]
        chromosomes, gnns = None, []
        if self.population is not None:
            chromosomes = self.population.chromosomes
            members = self.population.indices("gnn")[: self.options.start_gnns]
            gnns = [self.population.gnn(int(i)) for i in members]
        elif self.portfolio is not None:
            gnns = [learner.actor for learner in self.portfolio.learners]
        temperature = self.population.params.min_temperature if self.population else 0.1
        warm_start(mapping, self.graph, gnns, chromosomes, temperature, self.options.start_steps)
        if self.population is None and self.portfolio is not None:
            for learner in self.portfolio.learners:
                learner.sync_actor_target()
        log.info(
            "warm start %r: the map put into %d chromosome(s) and taught to %d GNN(s)",
            self.start,
            int(chromosomes is not None),
            len(gnns),
        )

    # ------------------------------------------------------------- generation
    @property
    def overlap(self) -> bool:
        """Whether the learner updates while maps are in flight (``agent.overlap``)."""
        if self.options.overlap == "auto":
            return not self.ledger.runtime.in_process
        return bool(self.options.overlap)

    def step(self) -> dict:
        """One generation of Algorithm 2 (EGRL, Appendix C); returns its metrics.

        The population's maps and the learners' rollouts are submitted together (a remote
        runtime measures them at once); every answer is in before fitness, the learners'
        remaining updates, migration and evolution.
        """
        if self.warm_start_due:
            self.start_policies()
        pay_prior_first(self.ledger, self.start, self.start_map)
        if self.ledger.done:  # the prior's map spent the budget
            return {}
        steps_before = self.env_steps
        sent: Sent = {}
        # the population's maps: one per member, a batch per member kind (GNN inference)
        kinds = None if self.population is None else self._submit_population(sent)
        # the learners' rollouts: noisy ones as the portfolio allocates, the lead's clean ones
        if self.portfolio is not None:
            self._submit_rollouts(sent)
        # the answers, each stored in the shared replay buffer as it is recorded
        # (:meth:`_store`); with overlap the learners update while they come in
        overlap = self.portfolio is not None and self.overlap
        answers, updates = self._answers(sent, steps_before if overlap else None)
        row: dict = {}
        if kinds is not None:
            # fitness: each member's reward (a member the budget left unmeasured ranks last)
            row.update(self._set_fitness(kinds, sent, answers))
        if self.portfolio is not None:
            row.update(self._rollout_metrics(sent, answers))
            # the learners' updates: gradient_ratio per environment step, off-policy
            row.update(self._learner_updates(self.env_steps - steps_before, updates))
            # migration: the lead learner's actor replaces the population's weakest member
            if self._migrates():
                actor = self.portfolio.learners[self._lead_learner()].actor
                with self.timer("evolution"):
                    self.population.migrate(actor, self.graph)
        # evolution: elites, tournament selection, crossover, mutation
        if self.population is not None and not self.ledger.done:
            with self.timer("evolution"):
                self.population.evolve(self.graph, self.generator)
        return row

    def _migrates(self) -> bool:
        """Whether the lead learner migrates into the population this generation."""
        every = max(1, self.cfg.agent.migration_every)
        migration = self.cfg.agent.migration and self.population is not None
        return bool(migration) and (self.generation + 1) % every == 0

    @property
    def env_steps(self) -> int:
        """What the learners' updates are owed on (``learner.update_on``): paid measurements
        (``"paid"``) or every answered map, paid or not (``"proposal"``)."""
        return (
            self.ledger.iterations
            if self.cfg.agent.learner.update_on == "paid"
            else self.ledger.proposals
        )

    def _answers(
        self, sent: Sent, overlap_from: int | None = None
    ) -> tuple[dict[int, Evaluation], UpdateLog]:
        """Every submission's evaluation, by ticket id, and the learner updates made
        while waiting.

        With ``overlap_from`` (:attr:`env_steps` at the generation's start) the learners
        make one update at a time while answers are outstanding, as long as they owe
        updates for the steps answered since then and the buffer is past its burn-in;
        otherwise this only waits, and records keep the submission order on every runtime.
        """
        answers: dict[int, Evaluation] = {}
        done: UpdateLog = []
        ratio = self.cfg.agent.learner.gradient_ratio
        while len(answers) < len(sent):
            owed = 0
            if overlap_from is not None:
                answered = self.env_steps - overlap_from
                owed = int(round(answered * ratio)) - sum(n for n, _ in done)
            replay = self._ready_replay() if owed > 0 else None
            if replay is not None:
                self._train(replay, 1, done)
                arrived = self.ledger.collect(block=False)
            else:
                arrived = self.ledger.collect(block=True, ordered=overlap_from is None)
            for ticket, ev in arrived:  # already in the replay buffer (:meth:`_store`)
                answers[ticket.id] = ev
        return answers, done

    def _store(self, reading: Reading) -> None:
        """Every answered map of the search goes to the replay buffer (the ledger's record
        tells it of each, :mod:`egrl.record`); with ``learner.store_repaired`` the
        compiler's repair of every invalid map too.

        The penalised proposal stays in the buffer; the repaired map ``ev.rectified`` is
        added beside it with reward ``(L_c / L)^2`` of its own latency and source
        ``"repaired"``. It is not a proposal: it costs no iteration and adds no update.
        """
        ev = reading.evaluation
        self.buffer.add(reading.maps, ev.reward, reading.source)
        invalid = np.flatnonzero(~ev.valid)
        if self.cfg.agent.learner.store_repaired and self.portfolio is not None and len(invalid):
            rectified = np.asarray(ev.rectified)[invalid]
            repaired = self.env.score(
                rectified,
                np.ones(len(invalid), dtype=bool),
                np.zeros(len(invalid)),
                ev.latency_s[invalid],
            )
            keep = np.isfinite(repaired.reward)
            self.buffer.add(rectified[keep], repaired.reward[keep], REPAIRED)

    @property
    def wants_probs(self) -> bool:
        """Whether the target repairs maps from the policy's probabilities."""
        return self.env.wants_probabilities

    def _submit_population(self, sent: Sent) -> np.ndarray:
        """Submit one map per member, a batch per member kind (the kind is the replay tag),
        while the budget lasts; returns the members' kinds ``[P]``. With model search the
        maps are the screen's pick of what the search visited (:meth:`_submit_searched`)."""
        if self.searching:
            return self._submit_searched(sent)
        with self.timer("inference"):
            maps, kinds, probs = self._population_maps()
        if self.screen is not None and self.ledger.pool > 1:
            maps = self._screen_population(maps, probs)
        for kind in dict.fromkeys(kinds.tolist()):
            if self.ledger.remaining <= 0:
                break
            members = np.flatnonzero(kinds == kind)
            kind_probs = None if probs is None else probs[members]
            sent[self.ledger.submit(maps[members], kind, probs=kind_probs).id] = MemberMaps(members)
        return kinds

    def _submit_searched(self, sent: Sent) -> np.ndarray:
        """Model search (``screen.search=G``): the population runs ``G`` generations on the
        screen's acquisition instead of the chip (:meth:`_model_generations`), and the
        screen picks as many of the maps they visited as the population has members: the
        best unseen ones by acquisition, a share ``screen.explore`` drawn from the rest
        (:meth:`~egrl.screening.screen.Screen.select`). They are submitted a batch per
        kind of the member that proposed them; returns the members' kinds ``[P]``."""
        with self.timer(SCREEN_PHASE):
            maps, kinds, probs = self._model_generations()
        picked = self.ledger.select(maps, self.population.size, probs=probs)
        for kind in dict.fromkeys(kinds[picked].tolist()):
            if self.ledger.remaining <= 0:
                break
            rows = picked[kinds[picked] == kind]
            kind_probs = None if probs is None else probs[rows]
            sent[self.ledger.submit(maps[rows], kind, probs=kind_probs).id] = MemberMaps(rows, True)
        return self.population.kinds.copy()

    def _model_generations(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``G`` generations of the population on the model: each member's map gets the
        screen's acquisition as its fitness (its measured reward if it was paid for,
        :meth:`~egrl.screening.screen.Screen.value`), and the population evolves on it as it would
        on the chip's rewards (elites, tournament, crossover, mutation). The last
        generation is not evolved: its fitness, with the paid maps' rewards put in, is the
        paid generation's (:meth:`_set_fitness`). Returns every map visited, int64
        ``[G * P, N, H]`` (generation-major, member order within one), the kind of the
        member that proposed it ``[G * P]`` and, if the target wants them, its
        probabilities ``[G * P, N, H, C]``."""
        maps, kinds, probs = [], [], []
        for generation in range(self.search_generations):
            if generation:
                self.population.evolve(self.graph, self.generator)
            gen_maps, gen_kinds, gen_probs = self._population_maps()
            self.population.set_fitness(self.screen.value(gen_maps))
            maps.append(gen_maps), kinds.append(gen_kinds), probs.append(gen_probs)
        joined = None if probs[0] is None else np.concatenate(probs)
        return np.concatenate(maps), np.concatenate(kinds), joined

    def _set_fitness(self, kinds: np.ndarray, sent: Sent, answers: dict[int, Evaluation]) -> dict:
        """Each member's fitness is its map's reward (``-inf`` for one left unmeasured by
        the budget); keeps the champion; returns the population's metrics. After model
        search it is the model's, with the measured reward of each member whose map of
        the last model generation was paid."""
        fitness = np.full(len(kinds), -np.inf)
        if self.searching:  # the model's; the last model generation's rows start at ``last``
            fitness = self.population.fitness.copy()
            last = len(kinds) * (self.search_generations - 1)
        evaluations = []
        for ticket_id, submitted in sent.items():
            if not isinstance(submitted, MemberMaps):
                continue
            ev = answers[ticket_id]
            rows = submitted.rows[: len(ev)]
            if submitted.searched:
                mine = rows >= last
                fitness[rows[mine] - last] = ev.reward[mine]
            else:
                fitness[rows] = ev.reward
            evaluations.append(ev)
        self.population.set_fitness(fitness)
        self._keep_champion(fitness)
        best = int(np.argmax(fitness))
        paid = np.concatenate([e.reward for e in evaluations])
        return {
            "champion_type": str(kinds[best]),
            "champion_descent": self.population.descent_label(best),
            "pop_best_reward": float(paid.max()),
            "pop_mean_reward": float(paid.mean()),
            "pop_valid_fraction": float(np.concatenate([e.valid for e in evaluations]).mean()),
        }

    def _keep_champion(self, fitness: np.ndarray) -> None:
        """Remember the weights of this generation's best measured GNN member (the policy
        snapshot's champion); breeding may overwrite its slot before the snapshot is taken."""
        members = self.population.indices("gnn")
        measured = members[np.isfinite(fitness[members])]
        if len(measured):
            best = int(measured[np.argmax(fitness[measured])])
            self._champion = {
                k: v.detach().clone() for k, v in self.population.gnn(best).state_dict().items()
            }

    def _screen_population(self, maps: np.ndarray, probs: np.ndarray | None) -> np.ndarray:
        """One map per member, int64 ``[P, N, H]``: the screen's pick among the member's own
        map ``maps[p]`` and ``pool - 1`` more of its maps (``probs``: the members')."""
        with self.timer("inference"):
            extra = self.population.act_candidates(
                self.graph,
                self.generator,
                self.ledger.pool - 1,
                self.cfg.agent.learner.noise_std,
            )
        pools = np.concatenate([maps[:, None], to_numpy_maps(extra)], axis=1)
        return pools[np.arange(len(pools)), self.ledger.choose(pools, probs)]

    def _population_maps(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Maps int64 ``[P, N, H]``, kinds ``[P]`` and, if wanted, probabilities ``[P, N, H, C]``."""
        with torch.no_grad():
            if not self.wants_probs:
                maps, kinds = self.population.act(self.graph, self.generator)
                return to_numpy_maps(maps), kinds, None
            maps, kinds, probs = self.population.act_with_probs(self.graph, self.generator)
        return to_numpy_maps(maps), kinds, probs.numpy()

    def _learner_maps(
        self, learner: SACDiscrete, n: int, noisy: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``n`` noisy maps of ``learner`` or its greedy map ``n`` times, int64 ``[n, N, H]``,
        and, if wanted, the actor's probabilities for each, float ``[n, N, H, C]``."""
        draws = n if noisy else 1  # the greedy map is the same every time
        probs = None
        if self.wants_probs:
            maps, actor_probs = learner.act_with_probs(self.graph, draws, self.generator, noisy)
            probs = np.repeat(actor_probs.numpy()[None], n, axis=0)
        else:
            maps = learner.act(self.graph, draws, self.generator, noisy)
        return np.repeat(to_numpy_maps(maps), n // draws, axis=0), probs

    def _learner_rollouts(self) -> dict:
        """Noisy rollouts of the learners and the lead's clean ones, measured now."""
        sent: Sent = {}
        self._submit_rollouts(sent)
        answers, _ = self._answers(sent)
        return self._rollout_metrics(sent, answers)

    def _submit_rollouts(self, sent: Sent) -> None:
        """Submit the learners' noisy rollouts, allocated by the portfolio (with a screen:
        ``screen.pool`` times as many drawn, the screen's picks paid), and the lead's clean
        ones, while the budget lasts."""
        lc = self.cfg.agent.learner
        counts = self.portfolio.allocate(lc.rollouts, self.rng)
        for idx, count in enumerate(counts):
            n = min(int(count), self.ledger.remaining)
            if n <= 0:
                continue
            learner = self.portfolio.learners[idx]
            draws = n * self.ledger.pool
            with self.timer("inference"):
                maps, probs = self._learner_maps(learner, draws, True)
            if self.ledger.pool > 1:
                keep = self.ledger.select(maps, n, probs=probs, free=True)
                maps, probs = maps[keep], None if probs is None else probs[keep]
            sent[self.ledger.submit(maps, LEARNER, probs=probs).id] = Rollouts(idx)
        n = min(lc.clean_rollouts, self.ledger.remaining)
        if n > 0:
            lead = self._lead_learner()
            with self.timer("inference"):
                maps, probs = self._learner_maps(self.portfolio.learners[lead], n, False)
            sent[self.ledger.submit(maps, LEARNER, probs=probs).id] = Rollouts(lead, clean=True)

    def _rollout_metrics(self, sent: Sent, answers: dict[int, Evaluation]) -> dict:
        """Each learner's noisy rewards go to the portfolio; returns the best noisy reward
        and the clean rollout's reward and speedup."""
        out: dict = {}
        noisy: list[np.ndarray] = []
        for ticket_id, submitted in sent.items():
            if not isinstance(submitted, Rollouts):
                continue
            ev = answers[ticket_id]
            if not submitted.clean:
                self.portfolio.update(submitted.learner, ev.reward)
                noisy.append(ev.reward)
            elif len(ev):
                out["learner_clean_reward"] = float(ev.reward[0])
                out["learner_clean_speedup"] = float(ev.speedup[0])
        if noisy:
            out["learner_noisy_reward"] = float(np.concatenate(noisy).max())
        return out

    def _lead_learner(self) -> int:
        """The learner with the best recent rollouts (the one that migrates and acts clean)."""
        values = self.portfolio.values()
        return int(np.argmax(np.nan_to_num(values, nan=-np.inf))) if len(values) > 1 else 0

    def _replay(self) -> list[tuple[object, ReplayBuffer]]:
        """The ``(graph, buffer)`` pairs the learners train on: this run's graph and buffer."""
        return [(self.graph, self.buffer)]

    def _ready_replay(self) -> list[tuple[object, ReplayBuffer]] | None:
        """The non-empty ``(graph, buffer)`` pairs, or None while they hold fewer
        transitions than the burn-in (or a minibatch)."""
        lc = self.cfg.agent.learner
        replay = [(graph, buffer) for graph, buffer in self._replay() if len(buffer)]
        if sum(len(buffer) for _, buffer in replay) < max(lc.burn_in, lc.batch_size):
            return None
        return replay

    def _train(self, replay: list[tuple], ups: int, done: UpdateLog) -> None:
        """``ups`` SAC updates of every learner; appends ``(ups, mean statistics)`` to ``done``."""
        with self.timer("learner"):
            stats = [lr.train_steps(replay, ups, self.rng) for lr in self.portfolio.learners]
        done.append((ups, {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}))

    def _learner_updates(self, env_steps: int, done: UpdateLog | None = None) -> dict:
        """What is left of ``env_steps * gradient_ratio`` SAC updates per learner after the
        ``done`` ones (made while maps were in flight), after the burn-in; the metrics of
        all of them (statistics weighted by updates)."""
        done = [] if done is None else done
        owed = int(round(env_steps * self.cfg.agent.learner.gradient_ratio)) - sum(
            n for n, _ in done
        )
        replay = self._ready_replay()
        if replay is not None and owed > 0:
            self._train(replay, owed, done)
        if not done:
            return {"gradient_steps": 0}
        total = sum(n for n, _ in done)
        keys = [k for k in done[0][1] if k in self.columns]
        if len(done) == 1:
            row = {k: done[0][1][k] for k in keys}
        else:
            row = {k: sum(n * stats[k] for n, stats in done) / total for k in keys}
        row["gradient_steps"] = total * len(self.portfolio.learners)
        return row

    # -------------------------------------------------------------- snapshots
    @property
    def trained_on(self) -> str:
        """The workload name a policy snapshot records."""
        return self.env.workload.name

    def default_callbacks(self) -> list[Callback]:
        """The base's, and with a run directory and a learner ``entropy.png``."""
        out = super().default_callbacks()
        if self.run_dir is not None and self.portfolio is not None:
            out.append(EntropyPlot(uniform_entropy(self.num_choices)))
        return out

    def save_policy_snapshot(self) -> Path:
        """``policies/iter_XXXXXX.safetensors``: the lead learner's actor and the best GNN
        member of the last measured generation (the champion).

        Keys are prefixed ``learner.`` and ``champion.``; the metadata records the iteration,
        the generation, the policy sizes and the workload(s) it was trained on
        (:func:`policies.snapshot.write_snapshot`, read by ``egrl-transfer``).
        """
        actors: dict[str, torch.nn.Module | dict[str, torch.Tensor]] = {}
        if self.portfolio is not None:
            actors["learner"] = self.portfolio.learners[self._lead_learner()].actor
        if self.population is not None and self._champion is not None:
            actors["champion"] = self._champion
        return write_snapshot(
            RunDir(self.run_dir).snapshot(self.ledger.iterations),
            actors,
            iterations=self.ledger.iterations,
            generation=self.generation,
            workload=self.trained_on,
            sizes=asdict(self.cfg.agent.policy),
            in_dim=int(self.env.graph.x.shape[1]),
            num_choices=self.num_choices,
        )

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        return {
            "replay": self.buffer.state_dict(),
            "population": None if self.population is None else self.population.state_dict(),
            "portfolio": None if self.portfolio is None else self.portfolio.state_dict(),
            "learners": None
            if self.portfolio is None
            else [learner.state_dict() for learner in self.portfolio.learners],
        }

    def load_state_dict(self, state: dict) -> None:
        """The base's; a checkpoint written before the replay buffer was the trainer's own
        holds it as the run's record (``"buffer"``)."""
        super().load_state_dict(state)
        if "replay" not in state["agent"]:
            self.buffer.load_state_dict(state["buffer"])

    def load_agent_state(self, state: dict) -> None:
        self.warm_start_due = False  # the checkpoint's policies started from it
        if "replay" in state:
            self.buffer.load_state_dict(state["replay"])
        if self.population is not None:
            self.population.load_state_dict(state["population"])
        if self.portfolio is not None:
            self.portfolio.load_state_dict(state["portfolio"])
            for learner, learner_state in zip(self.portfolio.learners, state["learners"]):
                learner.load_state_dict(learner_state)


class EntropyPlot(Callback):
    """``entropy.png`` at the end of a run that did not fail: the learner's policy entropy
    per generation against the uniform policy's ``uniform``."""

    def __init__(self, uniform: float) -> None:
        self.uniform = uniform

    def on_run_end(self, agent: RunView, error: BaseException | None = None) -> None:
        if error is not None:
            return
        from egrl.plots import plot_learner_entropy  # start-up time: matplotlib, at the end

        plot_learner_entropy(
            agent.rows,
            agent.run_dir / "entropy.png",
            uniform=self.uniform,
            title=f"{agent.name} learner on {agent.env.workload.name}",
        )
