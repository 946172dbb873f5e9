"""Pre-training one GNN learner on several workloads at once, for zero-shot transfer.

One discrete-SAC learner (:class:`egrl.sac.SACDiscrete`: one Graph U-Net actor, one twin-Q
critic) learns from every training workload. One generation::

    for each training workload w (in the given order):
        maps_w = actor's noisy rollouts + greedy rollouts on w's decision graph
        ev_w   = env_w.evaluate(maps_w); buffer_w.add(maps_w, ev_w.reward)
    repeat (evaluations this generation) * gradient_ratio times:
        w     = a training workload drawn uniformly
        batch = buffer_w.sample(batch_size)
        learner.update(graph_w, batch)

Every workload keeps its own replay buffer because a map only makes sense on its own
graph. Rewards need no further scaling: each env already normalises by its own native
compiler (``(L_c / L)^2`` for valid maps, ``-reassigned ratio`` otherwise), which puts
workloads of very different latencies on one scale, as the EGRL paper notes for
multi-workload training. The budget counts evaluations over all training workloads; a
generation that would cross it evaluates only what is left.

Snapshots of the actor (``policies/iter_XXXXXX.safetensors``, key prefix ``learner.``)
are taken every ``snapshot_every`` generations and at the end, and evaluated zero-shot on
the held-out (and the training) workloads with :mod:`egrl.transfer`. There is no
population here (an evolving population per workload is out of scope) and no
checkpoint/resume: a pretraining run is restarted from its seed.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from egrl.agents.base import append_metrics_row, to_numpy_maps
from egrl.config import LearnerConfig, PolicyConfig
from egrl.env import Env
from egrl.replay import ReplayBuffer
from egrl.sac import SACDiscrete
from egrl.transfer import (
    OUTPUT_DIR,
    RUN_CONFIG,
    SNAPSHOT_DIR,
    RunInfo,
    evaluate_snapshots,
    list_snapshots,
    write_outputs,
    write_snapshot,
)

log = logging.getLogger(__name__)


@dataclass
class PretrainConfig:
    """One pretraining run (``configs/transfer/pretrain.yaml`` mirrors it).

    Attributes:
        train: workloads the learner trains on (zoo names or workload files).
        holdout: workloads only evaluated zero-shot.
        budget: hardware evaluations over all training workloads.
        seed: seed of every random draw (network init, rollouts, minibatches, samples).
        hwmodel: hardware model name, ``hw_params`` its parameters.
        snapshot_every: generations between actor snapshots (the last one is always taken).
        samples: sampled maps per zero-shot evaluation besides the greedy map.
        policy: Graph U-Net sizes; ``learner``: SAC and rollout settings
            (``rollouts`` noisy and ``clean_rollouts`` greedy maps per workload and
            generation, ``gradient_ratio``, ``burn_in``, ``batch_size``, ...).
    """

    train: list[str] = field(default_factory=lambda: ["resnet50", "resnet101"])
    holdout: list[str] = field(default_factory=lambda: ["bert-base"])
    budget: int = 4000
    seed: int = 0
    hwmodel: str = "nnpi"
    hw_params: dict = field(default_factory=dict)
    invalid_reward_scale: float = 1.0
    snapshot_every: int = 10
    samples: int = 16
    device: str = "cpu"
    threads: int = 1
    progress: bool = True
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)

    def __post_init__(self) -> None:
        self.train = [str(w) for w in self.train]
        self.holdout = [str(w) for w in self.holdout]
        if not self.train:
            raise ValueError("pretraining needs at least one training workload")
        both = sorted(set(self.train) & set(self.holdout))
        if both:
            raise ValueError(f"workloads {both} are both training and held-out workloads")
        if len(set(self.train)) != len(self.train):
            raise ValueError(f"training workloads repeat: {self.train}")
        if self.budget < 1:
            raise ValueError(f"budget must be >= 1, got {self.budget}")
        if self.learner.num_learners != 1:
            raise ValueError(
                f"pretraining trains one learner, got learner.num_learners={self.learner.num_learners}"
            )
        if self.learner.rollouts + self.learner.clean_rollouts < 1:
            raise ValueError("learner.rollouts + learner.clean_rollouts must be >= 1")

    @property
    def run_info(self) -> RunInfo:
        return RunInfo(
            tuple(self.train), self.hwmodel, dict(self.hw_params), self.invalid_reward_scale
        )

    def to_dict(self) -> dict:
        """The resolved config as written to ``config.yaml`` (read back by egrl-transfer)."""
        d = asdict(self)
        d["hwmodel"] = {"name": d["hwmodel"], "params": d.pop("hw_params")}
        return d

    @classmethod
    def from_mapping(cls, cfg: Any) -> PretrainConfig:
        """From a nested mapping or a Hydra ``DictConfig`` (``hwmodel: {name, params}``)."""
        from omegaconf import OmegaConf

        if OmegaConf.is_config(cfg):
            cfg = OmegaConf.to_container(cfg, resolve=True)
        cfg = dict(cfg)
        hw = cfg.pop("hwmodel", None)
        if isinstance(hw, dict):
            cfg["hwmodel"] = hw["name"]
            cfg["hw_params"] = dict(hw.get("params") or {})
        elif hw is not None:
            cfg["hwmodel"] = hw
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(cfg) - names)
        if unknown:
            raise KeyError(f"unknown pretraining config keys: {unknown}")
        cfg["policy"] = PolicyConfig(**dict(cfg.get("policy") or {}))
        cfg["learner"] = LearnerConfig(**dict(cfg.get("learner") or {}))
        return cls(**cfg)


class MultiWorkloadPretrainer:
    """One SAC learner trained on several environments (see the module docstring).

    Args:
        envs: training environments by name; their decision graphs must share the feature
            width and the heads.
        cfg: the run's configuration (``train`` and ``holdout`` are not read here).
        run_dir: where ``metrics.csv`` and ``policies/`` go (None: nowhere, no snapshots).
    """

    def __init__(
        self, envs: dict[str, Env], cfg: PretrainConfig, run_dir: str | Path | None = None
    ):
        if not envs:
            raise ValueError("pretraining needs at least one training environment")
        self.envs = dict(envs)
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else None
        first_name, first = next(iter(self.envs.items()))
        self.in_dim = int(first.graph.x.shape[1])
        self.num_choices = [int(c) for c in first.num_choices]
        for name, env in self.envs.items():
            width, choices = int(env.graph.x.shape[1]), [int(c) for c in env.num_choices]
            if (width, choices) != (self.in_dim, self.num_choices):
                raise ValueError(
                    f"workload {name!r} has feature width {width} and head choices {choices}, "
                    f"but {first_name!r} has {self.in_dim} and {self.num_choices}: one policy "
                    "cannot read both"
                )
        self.device = torch.device(cfg.device)
        self.rng = np.random.default_rng(cfg.seed)
        self.generator = torch.Generator(device="cpu").manual_seed(cfg.seed)
        lc, pol = cfg.learner, cfg.policy
        self.learner = SACDiscrete.build(
            self.in_dim,
            self.num_choices,
            seed=int(self.rng.integers(0, 2**31 - 1)),
            config=lc,
            device=self.device,
            **asdict(pol),
        )
        self.graphs = {name: env.graph.to(self.device) for name, env in self.envs.items()}
        self.buffers = {
            name: ReplayBuffer(max(lc.buffer_size, 1), env.num_units, env.num_heads)
            for name, env in self.envs.items()
        }
        self.best_speedup = dict.fromkeys(self.envs, 0.0)
        self.iterations = 0
        self.generation = 0
        self.wall_s = 0.0
        self.rows: list[dict] = []

    @property
    def remaining(self) -> int:
        return self.cfg.budget - self.iterations

    @property
    def columns(self) -> tuple[str, ...]:
        per = [f"{k}[{n}]" for n in self.envs for k in ("clean_speedup", "best_speedup")]
        stats = ("gradient_steps", "critic_loss", "actor_loss", "entropy", "q_mean")
        return ("generation", "iterations", "wall_s", *per, *stats)

    # -------------------------------------------------------------- generation
    def _rollouts(self, name: str, row: dict) -> None:
        """Noisy and greedy maps of the actor on ``name``, evaluated and stored."""
        lc, env = self.cfg.learner, self.envs[name]
        for noisy, count in ((True, lc.rollouts), (False, lc.clean_rollouts)):
            n = min(int(count), self.remaining)
            if n <= 0:
                continue
            draws = n if noisy else 1  # the greedy map is the same every time
            maps = to_numpy_maps(self.learner.act(self.graphs[name], draws, self.generator, noisy))
            maps = np.repeat(maps, n // draws, axis=0)
            ev = env.evaluate(maps)
            self.buffers[name].add(maps, ev.reward, "learner-noisy" if noisy else "learner-clean")
            self.iterations += n
            self.best_speedup[name] = max(self.best_speedup[name], float(ev.speedup.max()))
            if not noisy:
                row[f"clean_speedup[{name}]"] = float(ev.speedup[0])

    def _updates(self, env_steps: int) -> dict:
        """``env_steps * gradient_ratio`` updates, each on one uniformly drawn workload."""
        lc = self.cfg.learner
        held = sum(len(b) for b in self.buffers.values())
        if held < max(lc.burn_in, lc.batch_size):
            return {"gradient_steps": 0}
        names = [n for n, b in self.buffers.items() if len(b)]
        ups = int(round(env_steps * lc.gradient_ratio))
        stats: dict[str, list[float]] = {}
        for _ in range(ups):
            name = names[int(self.rng.integers(len(names)))]
            batch = self.buffers[name].sample(lc.batch_size, self.rng)
            for k, v in self.learner.update(self.graphs[name], batch).items():
                stats.setdefault(k, []).append(float(v))
        out = {k: float(np.mean(v)) for k, v in stats.items() if k in self.columns}
        out["gradient_steps"] = ups
        return out

    def step(self) -> dict:
        """One generation; returns its metrics row."""
        start = time.perf_counter()
        row: dict = dict.fromkeys(self.columns, float("nan"))
        before = self.iterations
        for name in self.envs:
            self._rollouts(name, row)
        row.update(self._updates(self.iterations - before))
        self.generation += 1
        self.wall_s += time.perf_counter() - start
        row.update(generation=self.generation, iterations=self.iterations, wall_s=self.wall_s)
        row.update({f"best_speedup[{n}]": v for n, v in self.best_speedup.items()})
        self.rows.append(row)
        return row

    def run(self) -> list[dict]:
        """Train until the budget is spent, writing metrics and snapshots; returns the rows."""
        from tqdm.auto import tqdm

        with tqdm(
            total=self.cfg.budget, desc="pretrain", unit="eval", disable=not self.cfg.progress
        ) as bar:
            while self.remaining > 0:
                before = self.iterations
                row = self.step()
                bar.update(self.iterations - before)
                if self.run_dir is None:
                    continue
                self._append_metrics(row)
                if self.generation % max(1, self.cfg.snapshot_every) == 0 or self.remaining <= 0:
                    self.save_snapshot()
        return self.rows

    # ---------------------------------------------------------------- outputs
    def _append_metrics(self, row: dict) -> None:
        append_metrics_row(self.run_dir / "metrics.csv", self.columns, row)

    def save_snapshot(self) -> Path:
        """``policies/iter_XXXXXX.safetensors`` with the actor under the ``learner.`` prefix."""
        meta = {
            "iterations": str(self.iterations),
            "generation": str(self.generation),
            "workload": "+".join(self.envs),
            "policy": json.dumps(asdict(self.cfg.policy)),
            "in_dim": str(self.in_dim),
            "num_choices": json.dumps(self.num_choices),
        }
        path = self.run_dir / SNAPSHOT_DIR / f"iter_{self.iterations:06d}.safetensors"
        return write_snapshot(path, {"learner": self.learner.actor}, meta)


def pretrain(cfg: PretrainConfig, out_dir: str | Path) -> dict[str, Path]:
    """Pretrain on ``cfg.train``, then evaluate every snapshot zero-shot.

    ``out_dir`` receives ``config.yaml``, ``metrics.csv``, ``policies/`` and
    ``transfer/`` (``transfer.csv``, ``transfer.png``, ``transfer.md`` over the training
    and held-out workloads). Returns the paths of the transfer outputs.
    """
    from omegaconf import OmegaConf

    out_dir = Path(out_dir)
    if (out_dir / SNAPSHOT_DIR).exists() and any((out_dir / SNAPSHOT_DIR).iterdir()):
        raise FileExistsError(
            f"{out_dir / SNAPSHOT_DIR} already holds snapshots: choose a new --out"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RUN_CONFIG).write_text(OmegaConf.to_yaml(cfg.to_dict()), encoding="utf-8")
    info = cfg.run_info
    envs = {name: info.make_env(name) for name in [*cfg.train, *cfg.holdout]}
    trainer = MultiWorkloadPretrainer({n: envs[n] for n in cfg.train}, cfg, out_dir)
    trainer.run()
    log.info("pretrained on %s for %d evaluations", cfg.train, trainer.iterations)
    roles = {n: "train" if n in cfg.train else "holdout" for n in envs}
    rows = evaluate_snapshots(
        list_snapshots(out_dir), envs, roles, which="learner", samples=cfg.samples, seed=cfg.seed
    )
    title = f"learner pretrained on {'+'.join(cfg.train)}"
    return write_outputs(rows, out_dir / OUTPUT_DIR, title)
