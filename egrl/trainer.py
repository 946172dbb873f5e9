"""The EGRL generation loop (Algorithm 2 of the EGRL paper, Appendix C).

One generation::

    maps  = population.act(graph)                 # one map per member       (GNN inference)
    ev    = env.evaluate(maps)                    # compile + run, rewards    (evaluation)
    buffer.add(maps, ev.reward); population.set_fitness(ev.reward)
    maps' = learner noisy + clean rollouts        # Gaussian noise on logits  (GNN inference)
    ev'   = env.evaluate(maps'); buffer.add(...)  #                           (evaluation)
    repeat steps_this_generation * ratio times:   # off-policy SAC updates    (learner)
        learner.update(buffer.sample(batch))
    population.migrate(learner.actor)             # learner replaces the weakest member
    population.evolve(graph)                      # elites, tournament, crossover, mutation (evolution)

Iterations are hardware evaluations counted across everything (the paper's x-axes); a
generation that would cross the budget evaluates only what is left. The answer is the best
valid map ever evaluated.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from egrl.agents import register_agent
from egrl.agents.base import TIMING_COLUMNS, SearchAgent, seeded_init, to_numpy_maps
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.portfolio import LearnerPortfolio
from egrl.sac import SACDiscrete
from policies import GraphUNetActor
from populations import MixedPopulation

log = logging.getLogger(__name__)

__all__ = ["TIMING_COLUMNS", "Trainer"]


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
            maps = self.timer.measure("inference", self._population_maps)
            ev = self.evaluate(maps, "population")
            fitness = np.full(len(maps), -np.inf)  # members past the budget rank last
            fitness[: len(ev)] = ev.reward
            self.population.set_fitness(fitness)
            best = int(np.argmax(fitness))
            row.update(
                champion_type=str(self.population.kinds[best]),
                pop_best_reward=float(fitness[best]),
                pop_mean_reward=float(ev.reward.mean()),
                pop_valid_fraction=float(ev.valid.mean()),
            )
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

    def _population_maps(self) -> np.ndarray:
        with torch.no_grad():
            maps, _ = self.population.act(self.graph, self.generator)
        return to_numpy_maps(maps)

    def _learner_rollouts(self) -> dict:
        """Noisy and clean rollouts of the learners, allocated by the portfolio."""
        lc = self.cfg.learner
        out: dict = {}
        counts = self.portfolio.allocate(lc.rollouts, self.rng)
        noisy_rewards = []
        for idx, n in enumerate(counts):
            n = min(int(n), self.remaining)
            if n <= 0:
                continue
            learner = self.portfolio.learners[idx]
            with torch.no_grad():
                maps = self.timer.measure(
                    "inference",
                    learner.act,
                    self.graph,
                    n,
                    self.generator,
                    noisy=True,
                )
            ev = self.evaluate(to_numpy_maps(maps), "learner-noisy")
            self.portfolio.record(idx, ev.reward)
            noisy_rewards.append(ev.reward)
        if noisy_rewards:
            out["learner_noisy_reward"] = float(np.concatenate(noisy_rewards).max())
        n = min(lc.clean_rollouts, self.remaining)
        if n > 0:
            learner = self.portfolio.learners[self._lead_learner()]
            with torch.no_grad():
                maps = self.timer.measure(
                    "inference", learner.act, self.graph, 1, self.generator, noisy=False
                )
            maps = np.repeat(to_numpy_maps(maps), n, axis=0)[:n]
            ev = self.evaluate(maps, "learner-clean")
            out["learner_clean_reward"] = float(ev.reward[0])
            out["learner_clean_speedup"] = float(ev.speedup[0])
        return out

    def _lead_learner(self) -> int:
        """The learner with the best recent rollouts (the one that migrates and acts clean)."""
        values = self.portfolio.values()
        return int(np.argmax(np.nan_to_num(values, nan=-np.inf))) if len(values) > 1 else 0

    def _learner_updates(self, env_steps: int) -> dict:
        """``env_steps * gradient_ratio`` SAC updates per learner, after the burn-in."""
        lc = self.cfg.learner
        if len(self.buffer) < max(lc.burn_in, lc.batch_size):
            return {"gradient_steps": 0}
        ups = int(round(env_steps * lc.gradient_ratio))
        stats: dict[str, list[float]] = {}

        def updates() -> None:
            for learner in self.portfolio.learners:
                for _ in range(ups):
                    batch = self.buffer.sample(lc.batch_size, self.rng)
                    for k, v in learner.update(self.graph, batch).items():
                        stats.setdefault(k, []).append(float(v))

        self.timer.measure("learner", updates)
        row = {k: float(np.mean(v)) for k, v in stats.items() if k in self.extra_columns}
        row["gradient_steps"] = ups * len(self.portfolio.learners)
        return row

    # -------------------------------------------------------------- snapshots
    def on_generation_end(self) -> None:
        """Every ``snapshot_every`` generations, save the GNN policies for zero-shot transfer."""
        if self.generation % max(1, self.cfg.snapshot_every) and not self.done:
            return
        self.save_policy_snapshot()

    def save_policy_snapshot(self) -> Path:
        """``policies/iter_XXXXXX.safetensors``: the lead learner's actor and the best GNN member.

        Keys are prefixed ``learner.`` and ``champion.``; the metadata records the iteration,
        the generation, the policy sizes and the workload it was trained on
        (:func:`egrl.transfer.write_snapshot`, read by ``egrl-transfer``).
        """
        from egrl.transfer import write_snapshot

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
            "workload": self.env.workload.name,
            "policy": json.dumps(asdict(self.cfg.policy)),
            "in_dim": str(int(self.env.graph.x.shape[1])),
            "num_choices": json.dumps(self.num_choices),
        }
        path = self.run_dir / "policies" / f"iter_{self.iterations:06d}.safetensors"
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
