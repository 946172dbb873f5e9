"""The EGRL generation loop (Algorithm 2 of the EGRL paper, Appendix C).

One generation::

    maps  = population.act(graph)                 # one map per member       (GNN inference)
    ev    = env.evaluate(maps)                    # compile + run, rewards    (evaluation)
    buffer.add(maps, ev.reward, kind); population.set_fitness(ev.reward)
    maps' = learner noisy + clean rollouts        # noise on the probabilities (GNN inference)
    ev'   = env.evaluate(maps'); buffer.add(maps', ev'.reward, "learner")
    repeat steps_this_generation * ratio times:   # off-policy SAC updates    (learner)
        learner.update(buffer.sample(batch))
    population.migrate(learner.actor)             # learner replaces the weakest member
    population.evolve(graph)                      # elites, tournament, crossover, mutation (evolution)

Every replay entry is tagged with the kind of policy that made it: ``"gnn"`` and
``"boltzmann"`` for population members, ``"learner"`` for the learner's rollouts. A
target that wants the policy's probabilities (``env.wants_probabilities``) receives them
with the maps, float ``[B, N, H, C]``. Iterations are hardware evaluations counted across
everything (the paper's x-axes); a generation that would cross the budget evaluates only
what is left. The answer is the best valid map ever evaluated.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from egrl.agents import register_agent
from egrl.agents.base import TIMING_COLUMNS, SearchAgent, to_numpy_maps
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.portfolio import LearnerPortfolio
from egrl.replay import ReplayBuffer
from egrl.sac import SACDiscrete
from egrl.transfer import SNAPSHOT_DIR, write_snapshot
from policies import GraphUNetActor, seeded_init
from populations import MixedPopulation

log = logging.getLogger(__name__)

__all__ = ["LEARNER", "TIMING_COLUMNS", "Trainer"]

#: replay-buffer source of the learners' rollouts (population maps carry their member kind)
LEARNER = "learner"


@register_agent("egrl", "ea", "pg")
class Trainer(SearchAgent):
    """EGRL (and its ablations ``ea`` and ``pg``) on one environment.

    Args:
        env: the environment (hardware target bound to a workload).
        cfg: the run's configuration.
        run_dir: where metrics, checkpoints, the best map and plots go (None: nowhere).
    """

    extra_columns = (
        "champion_type",
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
        super().__init__(env, cfg, run_dir)
        self.device = torch.device(cfg.device)
        self.graph = env.graph.to(self.device)
        in_dim = int(env.graph.x.shape[1])
        self.num_choices = [int(c) for c in env.num_choices]
        pol = cfg.policy
        seeds = iter(self.rng.integers(0, 2**31 - 1, size=1 + 2 * max(1, cfg.learner.num_learners)))
        init_seed = int(next(seeds))

        def make_gnn() -> GraphUNetActor:
            return GraphUNetActor(
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
                    size=cfg.population.size,
                    boltzmann_fraction=cfg.population.boltzmann_fraction,
                    rng=pop_seed,
                    generator=self.generator,
                    **cfg.population.options,
                ),
            )
        self.portfolio: LearnerPortfolio | None = None
        if cfg.agent.use_learner:
            lc = cfg.learner
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

    # ------------------------------------------------------------- generation
    def step(self) -> dict:
        """One generation of Algorithm 2; returns its agent-specific metrics."""
        row: dict = {}
        steps_before = self.iterations
        if self.population is not None:
            row.update(self._population_rollouts())
        if self.portfolio is not None:
            row.update(self._learner_rollouts())
            row.update(self._learner_updates(self.iterations - steps_before))
            migrate = self.cfg.agent.migration and self.population is not None
            if migrate and (self.generation + 1) % max(1, self.cfg.agent.migration_every) == 0:
                actor = self.portfolio.learners[self._lead_learner()].actor
                self.timer.measure("evolution", self.population.migrate, actor, self.graph)
        if self.population is not None and not self.done:
            self.timer.measure("evolution", self.population.evolve, self.graph, self.generator)
        return row

    @property
    def wants_probs(self) -> bool:
        """Whether the target repairs maps from the policy's probabilities."""
        return self.env.wants_probabilities

    def _population_rollouts(self) -> dict:
        """Evaluate one map per member, tagged with the member's kind; set the fitness."""
        maps, kinds, probs = self.timer.measure("inference", self._population_maps)
        fitness = np.full(len(maps), -np.inf)  # members past the budget rank last
        evaluations = []
        for kind in dict.fromkeys(kinds.tolist()):
            if self.done:
                break
            members = np.flatnonzero(kinds == kind)
            ev = self.evaluate(maps[members], kind, probs=None if probs is None else probs[members])
            fitness[members[: len(ev)]] = ev.reward
            evaluations.append(ev)
        self.population.set_fitness(fitness)
        best = int(np.argmax(fitness))
        return {
            "champion_type": str(kinds[best]),
            "pop_best_reward": float(fitness[best]),
            "pop_mean_reward": float(np.concatenate([ev.reward for ev in evaluations]).mean()),
            "pop_valid_fraction": float(np.concatenate([ev.valid for ev in evaluations]).mean()),
        }

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
        """Noisy rollouts of the learners, allocated by the portfolio, and the lead's clean ones."""
        lc = self.cfg.learner
        out: dict = {}
        counts = self.portfolio.allocate(lc.rollouts, self.rng)
        noisy_rewards = []
        for idx, count in enumerate(counts):
            n = min(int(count), self.remaining)
            if n <= 0:
                continue
            learner = self.portfolio.learners[idx]
            maps, probs = self.timer.measure("inference", self._learner_maps, learner, n, True)
            ev = self.evaluate(maps, LEARNER, probs=probs)
            self.portfolio.record(idx, ev.reward)
            noisy_rewards.append(ev.reward)
        if noisy_rewards:
            out["learner_noisy_reward"] = float(np.concatenate(noisy_rewards).max())
        n = min(lc.clean_rollouts, self.remaining)
        if n > 0:
            learner = self.portfolio.learners[self._lead_learner()]
            maps, probs = self.timer.measure("inference", self._learner_maps, learner, n, False)
            ev = self.evaluate(maps, LEARNER, probs=probs)
            out["learner_clean_reward"] = float(ev.reward[0])
            out["learner_clean_speedup"] = float(ev.speedup[0])
        return out

    def _lead_learner(self) -> int:
        """The learner with the best recent rollouts (the one that migrates and acts clean)."""
        values = self.portfolio.values()
        return int(np.argmax(np.nan_to_num(values, nan=-np.inf))) if len(values) > 1 else 0

    def _replay(self) -> list[tuple[object, ReplayBuffer]]:
        """The ``(graph, buffer)`` pairs the learners train on: this run's graph and buffer."""
        return [(self.graph, self.buffer)]

    def _learner_updates(self, env_steps: int) -> dict:
        """``env_steps * gradient_ratio`` SAC updates per learner, after the burn-in."""
        lc = self.cfg.learner
        replay = [(graph, buffer) for graph, buffer in self._replay() if len(buffer)]
        if sum(len(buffer) for _, buffer in replay) < max(lc.burn_in, lc.batch_size):
            return {"gradient_steps": 0}
        ups = int(round(env_steps * lc.gradient_ratio))
        learners = self.portfolio.learners
        stats = [
            self.timer.measure("learner", lr.train_steps, replay, ups, self.rng) for lr in learners
        ]
        row = {k: float(np.mean([s[k] for s in stats])) for k in stats[0] if k in self.columns}
        row["gradient_steps"] = ups * len(learners)
        return row

    # -------------------------------------------------------------- snapshots
    @property
    def trained_on(self) -> str:
        """The workload name a policy snapshot records."""
        return self.env.workload.name

    def on_generation_end(self) -> None:
        """Every ``snapshot_every`` generations, save the GNN policies for zero-shot transfer."""
        if self.generation % max(1, self.cfg.snapshot_every) and not self.done:
            return
        self.save_policy_snapshot()

    def save_policy_snapshot(self) -> Path:
        """``policies/iter_XXXXXX.safetensors``: the lead learner's actor and the best GNN member.

        Keys are prefixed ``learner.`` and ``champion.``; the metadata records the iteration,
        the generation, the policy sizes and the workload(s) it was trained on
        (:func:`egrl.transfer.write_snapshot`, read by ``egrl-transfer``).
        """
        actors: dict[str, torch.nn.Module] = {}
        if self.portfolio is not None:
            actors["learner"] = self.portfolio.learners[self._lead_learner()].actor
        if self.population is not None:
            members = self.population.indices("gnn")
            known = members[self.population.evaluated[members]]
            if len(known):
                best = int(known[np.argmax(self.population.fitness[known])])
                actors["champion"] = self.population.gnn(best)
        meta = {
            "iterations": str(self.iterations),
            "generation": str(self.generation),
            "workload": self.trained_on,
            "policy": json.dumps(asdict(self.cfg.policy)),
            "in_dim": str(int(self.env.graph.x.shape[1])),
            "num_choices": json.dumps(self.num_choices),
        }
        path = self.run_dir / SNAPSHOT_DIR / f"iter_{self.iterations:06d}.safetensors"
        return write_snapshot(path, actors, meta)

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        return {
            "population": None if self.population is None else self.population.state_dict(),
            "portfolio": None if self.portfolio is None else self.portfolio.state_dict(),
            "learners": None
            if self.portfolio is None
            else [learner.state_dict() for learner in self.portfolio.learners],
        }

    def load_agent_state(self, state: dict) -> None:
        if self.population is not None:
            self.population.load_state_dict(state["population"])
        if self.portfolio is not None:
            self.portfolio.load_state_dict(state["portfolio"])
            for learner, learner_state in zip(self.portfolio.learners, state["learners"]):
                learner.load_state_dict(learner_state)
