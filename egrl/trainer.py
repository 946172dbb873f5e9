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

import csv
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from egrl.checkpoint import load_state, save_state
from egrl.config import TrainConfig
from egrl.env import Env, Evaluation
from egrl.portfolio import LearnerPortfolio
from egrl.replay import ReplayBuffer
from egrl.sac import SACConfig, SACDiscrete
from policies import GraphUNetActor
from populations import MixedPopulation

log = logging.getLogger(__name__)

#: metrics.csv columns; the ``wall_s`` and ``t_*`` columns are wall-clock timings, the rest
#: is a deterministic function of the seed.
METRIC_COLUMNS = (
    "generation",
    "iterations",
    "wall_s",
    "best_reward",
    "best_speedup",
    "best_latency_s",
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
    "t_inference",
    "t_evaluation",
    "t_learner",
    "t_evolution",
)
TIMING_COLUMNS = ("wall_s", "t_inference", "t_evaluation", "t_learner", "t_evolution")


@dataclass
class Best:
    """The best valid map evaluated so far."""

    reward: float = -np.inf
    speedup: float = 0.0
    latency_s: float = float("nan")
    iteration: int = 0
    mapping: np.ndarray | None = None

    def update(self, maps: np.ndarray, ev: Evaluation, first_iteration: int) -> None:
        """Keep the best valid map of a batch (by speedup; ties keep the earlier one)."""
        valid = np.flatnonzero(ev.valid)
        if len(valid) == 0:
            return
        i = valid[np.argmax(ev.speedup[valid])]
        if ev.speedup[i] > self.speedup:
            self.reward = float(ev.reward[i])
            self.speedup = float(ev.speedup[i])
            self.latency_s = float(ev.latency_s[i])
            self.iteration = first_iteration + int(i) + 1
            self.mapping = maps[i].copy()


@dataclass
class Timer:
    """Cumulative wall time per phase of the generation loop."""

    totals: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(
            ("inference", "evaluation", "learner", "evolution"), 0.0
        )
    )

    def measure(self, phase: str, fn: Callable, *args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.totals[phase] += time.perf_counter() - start
        return out


def seeded_init(seed: int, build: Callable[[], torch.nn.Module]) -> torch.nn.Module:
    """Build a module whose initial weights depend only on ``seed`` (global RNG left untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


class Trainer:
    """EGRL (and its ablations ``ea`` and ``pg``) on one environment.

    Args:
        env: the environment (hardware target bound to a workload).
        cfg: the run's configuration.
        run_dir: where metrics, checkpoints, the best map and plots go (None: nowhere).
    """

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        self.env = env
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.device = torch.device(cfg.device)
        self.graph = env.graph.to(self.device)
        self.rng = np.random.default_rng(cfg.seed)
        self.generator = torch.Generator(device="cpu").manual_seed(cfg.seed)
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
            sac_cfg = SACConfig.from_dict({**asdict(lc), **lc.options})
            learners = [
                SACDiscrete.build(
                    in_dim,
                    self.num_choices,
                    seed=int(next(seeds)),
                    config=sac_cfg,
                    device=self.device,
                    hidden=pol.hidden,
                    out=pol.out,
                    depth=pol.depth,
                    heads=pol.heads,
                )
                for _ in range(max(1, lc.num_learners))
            ]
            self.portfolio = LearnerPortfolio(learners, ucb_c=lc.ucb_c)
        self.buffer = ReplayBuffer(cfg.learner.buffer_size, env.num_units, env.num_heads)
        self.best = Best()
        self.iterations = 0
        self.generation = 0
        self.wall_s = 0.0
        self.timer = Timer()
        self.rows: list[dict] = []

    # ----------------------------------------------------------------- budget
    @property
    def remaining(self) -> int:
        return self.cfg.budget - self.iterations

    @property
    def done(self) -> bool:
        return self.remaining <= 0

    def _evaluate(self, maps: np.ndarray, source: str) -> Evaluation:
        """Evaluate, buffer and count a batch (already trimmed to the budget)."""
        ev = self.timer.measure("evaluation", self.env.evaluate, maps)
        self.buffer.add(maps, ev.reward, source)
        self.best.update(maps, ev, self.iterations)
        self.iterations += len(maps)
        return ev

    # ------------------------------------------------------------- generation
    def step(self) -> dict:
        """Run one generation; returns its metrics row."""
        start = time.perf_counter()
        row: dict = dict.fromkeys(METRIC_COLUMNS, float("nan"))
        steps_before = self.iterations
        if self.population is not None and not self.done:
            maps = self.timer.measure("inference", self._population_maps)
            k = min(len(maps), self.remaining)
            ev = self._evaluate(maps[:k], "population")
            fitness = np.full(len(maps), -np.inf)
            fitness[:k] = ev.reward
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
            if self.population is not None and self.cfg.agent.migration:
                if (self.generation + 1) % max(1, self.cfg.agent.migration_every) == 0:
                    champion = self._lead_learner()
                    self.timer.measure(
                        "evolution",
                        self.population.migrate,
                        self.portfolio.learners[champion].actor,
                    )
        if self.population is not None:
            self.timer.measure("evolution", self.population.evolve, self.graph, self.generator)
        self.generation += 1
        self.wall_s += time.perf_counter() - start
        row.update(
            generation=self.generation,
            iterations=self.iterations,
            wall_s=self.wall_s,
            best_reward=self.best.reward,
            best_speedup=self.best.speedup,
            best_latency_s=self.best.latency_s,
            **{f"t_{k}": v for k, v in self.timer.totals.items()},
        )
        self.rows.append(row)
        return row

    def _population_maps(self) -> np.ndarray:
        with torch.no_grad():
            maps, _ = self.population.act(self.graph, self.generator)
        return _to_numpy(maps)

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
            ev = self._evaluate(_to_numpy(maps), "learner-noisy")
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
            maps = np.repeat(_to_numpy(maps), n, axis=0)[:n]
            ev = self._evaluate(maps, "learner-clean")
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
        start = time.perf_counter()
        for learner in self.portfolio.learners:
            for _ in range(ups):
                batch = self.buffer.sample(lc.batch_size, self.rng)
                for k, v in learner.update(self.graph, batch).items():
                    stats.setdefault(k, []).append(float(v))
        self.timer.totals["learner"] += time.perf_counter() - start
        row = {k: float(np.mean(v)) for k, v in stats.items() if k in METRIC_COLUMNS}
        row["gradient_steps"] = ups * len(self.portfolio.learners)
        return row

    # -------------------------------------------------------------------- run
    def run(self, on_generation: Callable[[dict], None] | None = None) -> Best:
        """Train until the budget is spent; returns the best valid map."""
        from tqdm.auto import tqdm

        bar = tqdm(
            total=self.cfg.budget,
            initial=self.iterations,
            desc=f"{self.cfg.agent.name} {self.env.workload.name}",
            unit="eval",
            disable=not self.cfg.progress,
        )
        with bar:
            while not self.done:
                before = self.iterations
                row = self.step()
                bar.update(self.iterations - before)
                bar.set_postfix(best_speedup=f"{self.best.speedup:.3f}", gen=self.generation)
                if self.run_dir is not None:
                    self._append_metrics(row)
                    if self.generation % max(1, self.cfg.checkpoint_every) == 0 or self.done:
                        self.save_checkpoint()
                if on_generation is not None:
                    on_generation(row)
        if self.run_dir is not None:
            self.write_outputs()
        return self.best

    # ---------------------------------------------------------------- outputs
    def _append_metrics(self, row: dict) -> None:
        path = self.run_dir / "metrics.csv"
        new = not path.exists()
        with open(path, "a", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
            if new:
                writer.writeheader()
            writer.writerow(row)

    def write_outputs(self) -> None:
        """The best map as JSON keyed by node name, and the speedup-vs-iterations plot."""
        from egrl.plots import plot_speedup_curve

        best = {
            "workload": self.env.workload.name,
            "speedup": self.best.speedup,
            "latency_s": self.best.latency_s,
            "reward": self.best.reward,
            "iteration": self.best.iteration,
            "baseline_latency_s": self.env.baseline_latency_s,
            "mapping": None
            if self.best.mapping is None
            else self.env.mapping_to_dict(self.best.mapping),
        }
        (self.run_dir / "best_mapping.json").write_text(
            json.dumps(best, indent=1), encoding="utf-8"
        )
        plot_speedup_curve(
            self.rows,
            self.run_dir / "speedup.png",
            title=f"{self.cfg.agent.name} on {self.env.workload.name}",
        )

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Everything needed to continue the run bit for bit."""
        return {
            "iterations": self.iterations,
            "generation": self.generation,
            "wall_s": self.wall_s,
            "timer": dict(self.timer.totals),
            "rng": self.rng.bit_generator.state,
            "generator": self.generator.get_state(),
            "best": {
                "reward": self.best.reward,
                "speedup": self.best.speedup,
                "latency_s": self.best.latency_s,
                "iteration": self.best.iteration,
                "mapping": self.best.mapping,
            },
            "buffer": self.buffer.state_dict(),
            "population": None if self.population is None else self.population.state_dict(),
            "portfolio": None if self.portfolio is None else self.portfolio.state_dict(),
            "learners": None
            if self.portfolio is None
            else [learner.state_dict() for learner in self.portfolio.learners],
            "rows": self.rows,
        }

    def load_state_dict(self, state: dict) -> None:
        self.iterations = int(state["iterations"])
        self.generation = int(state["generation"])
        self.wall_s = float(state["wall_s"])
        self.timer.totals = dict(state["timer"])
        self.rng.bit_generator.state = state["rng"]
        self.generator.set_state(state["generator"])
        self.best = Best(**state["best"])
        self.buffer.load_state_dict(state["buffer"])
        if self.population is not None:
            self.population.load_state_dict(state["population"])
        if self.portfolio is not None:
            self.portfolio.load_state_dict(state["portfolio"])
            for learner, learner_state in zip(self.portfolio.learners, state["learners"]):
                learner.load_state_dict(learner_state)
        self.rows = list(state["rows"])

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/gen_XXXXXX`` atomically and prune old ones."""
        ckpt_dir = self.run_dir / "checkpoints"
        path = save_state(self.state_dict(), ckpt_dir / f"gen_{self.generation:06d}")
        kept = sorted(p for p in ckpt_dir.glob("gen_??????") if p.is_dir())
        for old in kept[: -max(1, self.cfg.keep_checkpoints)]:
            shutil.rmtree(old, ignore_errors=True)
        return path

    def resume(self) -> bool:
        """Continue from the last complete checkpoint in ``run_dir``; False if none."""
        ckpt_dir = self.run_dir / "checkpoints"
        done = sorted(p for p in ckpt_dir.glob("gen_??????") if (p / "state.json").exists())
        if not done:
            return False
        self.load_state_dict(load_state(done[-1]))
        self._rewrite_metrics()
        log.info(
            "resumed %s at generation %d (%d iterations)",
            self.run_dir,
            self.generation,
            self.iterations,
        )
        return True

    def _rewrite_metrics(self) -> None:
        """Drop metrics rows written after the checkpoint."""
        path = self.run_dir / "metrics.csv"
        if path.exists():
            path.unlink()
        for row in self.rows:
            self._append_metrics(row)


def _to_numpy(maps) -> np.ndarray:
    if isinstance(maps, torch.Tensor):
        return maps.detach().cpu().numpy().astype(np.int64)
    return np.asarray(maps, dtype=np.int64)
