"""Pre-training one GNN learner on several workloads at once, for zero-shot transfer.

:class:`MultiWorkloadPretrainer` is the EGRL trainer (:class:`egrl.agents.egrl.agent.EGRLAgent`)
without a population, with one discrete-SAC learner (one Graph U-Net actor, one twin-Q
critic) and several training workloads. One generation::

    for each training workload w (in the given order):
        maps_w = actor's noisy rollouts + greedy rollouts on w's decision graph
        ev_w   = env_w.evaluate(maps_w); buffer_w.add(maps_w, ev_w.reward, "learner")
    repeat (evaluations this generation) * gradient_ratio times:
        w     = a training workload drawn uniformly (no draw when there is one)
        batch = buffer_w.sample(batch_size)
        learner.update(graph_w, batch)

Every workload keeps its own replay buffer and best map because a map only makes sense on
its own graph. Rewards need no further scaling: each env already normalises by its own
native compiler (``(L_c / L)^2`` for valid maps, ``-reassigned ratio`` otherwise), which
puts workloads of very different latencies on one scale, as the EGRL paper notes for
multi-workload training. The budget counts evaluations over all training workloads; a
generation that would cross it evaluates only what is left.

The budget, ``metrics.csv``, timing, policy snapshots and checkpoints are the trainer's
(:class:`egrl.agents.base.SearchAgent`): a killed run resumes from its last checkpoint
(``egrl-transfer pretrain --resume OUT``) and continues bit for bit. Snapshots of the actor
(``policies/iter_XXXXXX.safetensors``, key prefix ``learner.``) are taken every
``snapshot_every`` generations and at the end, and evaluated zero-shot on the held-out (and
the training) workloads with :mod:`egrl.agents.egrl.transfer`. There is no population here (an
evolving population per workload is out of scope).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from egrl.agents.base import TIMING_COLUMNS
from egrl.agents.egrl.agent import EGRLAgent
from egrl.agents.egrl.config import EGRLConfig, LearnerConfig, PolicyConfig
from egrl.agents.egrl.init_from import list_snapshots
from egrl.agents.egrl.sac import SACDiscrete
from egrl.agents.egrl.transfer import RunInfo, evaluate_snapshots, write_outputs
from egrl.callbacks import Callback, MetricsFile, ProgressBar
from egrl.config import TrainConfig
from egrl.env import REWARDS, Env
from egrl.ledger import Best, Ledger, archive_state, make_buffer, measure_cache
from egrl.rundir import CONFIG_FILE, RunDir

log = logging.getLogger(__name__)

#: learner statistics of a generation, as metrics.csv columns
LEARNER_COLUMNS = ("gradient_steps", "critic_loss", "actor_loss", "entropy", "q_mean")


def pretrain_learner(keys: dict) -> LearnerConfig:
    """The pretraining learner of ``keys``; unset keys are the learner's defaults except
    ``gradient_ratio``, Table 2's 1: the learner trains alone here, and the default's
    tenth was chosen for EGRL, whose population proposes most maps (docs/learner.md)."""
    return LearnerConfig(**{"gradient_ratio": 1.0, **keys})


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
        checkpoint_every: generations between checkpoints (the last one is always written).
        keep_checkpoints: how many of the newest checkpoints are kept.
        reward: how the envs score repaired maps (``egrl`` or ``repaired``,
            :data:`egrl.env.REWARDS`), as ``reward`` of ``egrl-train``.
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
    reward: str = "egrl"
    snapshot_every: int = 10
    checkpoint_every: int = 5
    keep_checkpoints: int = 3
    samples: int = 16
    device: str = "cpu"
    threads: int = 1
    progress: bool = True
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    learner: LearnerConfig = field(default_factory=lambda: pretrain_learner({}))

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
        if self.reward not in REWARDS:
            raise ValueError(f"unknown reward {self.reward!r}; expected one of {REWARDS}")
        if self.learner.num_learners != 1:
            raise ValueError(
                f"pretraining trains one learner, got learner.num_learners={self.learner.num_learners}"
            )
        if self.learner.rollouts + self.learner.clean_rollouts < 1:
            raise ValueError("learner.rollouts + learner.clean_rollouts must be >= 1")

    @property
    def run_info(self) -> RunInfo:
        return RunInfo(
            tuple(self.train),
            self.hwmodel,
            dict(self.hw_params),
            self.invalid_reward_scale,
            self.reward,
        )

    def train_config(self) -> TrainConfig:
        """The trainer's view of this run: a ``pg`` agent (learner only) named ``pretrain``."""
        return TrainConfig(
            seed=self.seed,
            budget=self.budget,
            device=self.device,
            threads=self.threads,
            checkpoint_every=self.checkpoint_every,
            keep_checkpoints=self.keep_checkpoints,
            snapshot_every=self.snapshot_every,
            invalid_reward_scale=self.invalid_reward_scale,
            reward=self.reward,
            progress=self.progress,
            agent=EGRLConfig(
                name="pretrain",
                use_population=False,
                migration=False,
                policy=self.policy,
                learner=self.learner,
            ),
        )

    def to_dict(self) -> dict:
        """The resolved config as written to ``config.yaml`` (read back by egrl-transfer)."""
        d = asdict(self)
        d["hwmodel"] = {"name": d["hwmodel"], "params": d.pop("hw_params")}
        return d

    @classmethod
    def from_mapping(cls, cfg: Any) -> PretrainConfig:
        """From a nested mapping or a Hydra ``DictConfig`` (``hwmodel: {name, params}``)."""
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
        cfg["learner"] = pretrain_learner(dict(cfg.get("learner") or {}))
        return cls(**cfg)


class MultiWorkloadPretrainer(EGRLAgent):
    """One SAC learner trained on several environments (see the module docstring).

    Every workload has its own ledger (its target, measure cache, archive and best map),
    graph and replay buffer; the ledgers spend one budget (they share a
    :class:`~egrl.budget.Budget`). The first environment is the *home* workload: its
    ledger, graph and buffer are the agent's between generations; while the learner acts
    on another workload, :meth:`on_workload` makes that workload's the agent's.

    Args:
        envs: training environments by name; their decision graphs must share the feature
            width and the heads.
        cfg: the run's configuration (``train`` and ``holdout`` are not read here).
        run_dir: where ``metrics.csv``, ``policies/`` and ``checkpoints/`` go (None: nowhere).
    """

    def __init__(
        self, envs: dict[str, Env], cfg: PretrainConfig, run_dir: str | Path | None = None
    ):
        if not envs:
            raise ValueError("pretraining needs at least one training environment")
        self.home, first = next(iter(envs.items()))
        width, choices = int(first.graph.x.shape[1]), [int(c) for c in first.num_choices]
        for name, env in envs.items():
            theirs = (int(env.graph.x.shape[1]), [int(c) for c in env.num_choices])
            if theirs != (width, choices):
                raise ValueError(
                    f"workload {name!r} has feature width {theirs[0]} and head choices "
                    f"{theirs[1]}, but {self.home!r} has {width} and {choices}: one policy "
                    "cannot read both"
                )
        super().__init__(first, cfg.train_config(), run_dir)
        self.envs = dict(envs)
        size = cfg.learner.buffer_size
        # each workload is measured by its own target, through its own cache (local only)
        self.ledgers = {
            name: Ledger(
                env,
                self.ledger.budget,
                measure_cache(env, self.cfg.cache_size),
                size,
                self.timer,
                self.ledger.evaluation_log,
                self.ledger.stamp,
            )
            for name, env in self.envs.items()
            if name != self.home
        }
        for ledger in self.ledgers.values():  # each workload's answers: its own buffer
            ledger.record.subscribe(self._store)
        self.ledgers[self.home] = self.ledger
        self.graphs = {name: env.graph.to(self.device) for name, env in self.envs.items()}
        self.graphs[self.home] = self.graph
        self.buffers = {name: make_buffer(env, size) for name, env in self.envs.items()}
        self.buffers[self.home] = self.buffer

    @property
    def learner(self) -> SACDiscrete:
        """The one learner."""
        return self.portfolio.learners[0]

    @property
    def columns(self) -> tuple[str, ...]:
        per = [f"{k}[{n}]" for n in self.envs for k in ("clean_speedup", "best_speedup")]
        return (
            "generation",
            "iterations",
            "proposals",
            "wall_s",
            *per,
            *LEARNER_COLUMNS,
            *TIMING_COLUMNS[1:],
        )

    @property
    def trained_on(self) -> str:
        return "+".join(self.envs)

    @contextmanager
    def on_workload(self, name: str) -> Iterator[None]:
        """Act and measure on workload ``name``; back to the home workload's after."""
        self._use(name)
        try:
            yield
        finally:
            self._use(self.home)

    def _use(self, name: str) -> None:
        """Make workload ``name``'s ledger, environment, graph and replay buffer the agent's."""
        self.ledger, self.env = self.ledgers[name], self.envs[name]
        self.graph, self.buffer = self.graphs[name], self.buffers[name]

    # -------------------------------------------------------------- generation
    def step(self) -> dict:
        """One generation: rollouts on every workload in turn, then the learner's updates."""
        row: dict = {}
        before = self.env_steps
        for ledger in self.ledgers.values():
            ledger.batch = []  # this generation's answers, on every workload
        for name in self.envs:
            with self.on_workload(name):
                rollouts = self._learner_rollouts()
            if "learner_clean_speedup" in rollouts:
                row[f"clean_speedup[{name}]"] = rollouts["learner_clean_speedup"]
        row.update(self._learner_updates(self.env_steps - before))
        row.update({f"best_speedup[{n}]": led.best.speedup for n, led in self.ledgers.items()})
        return row

    def _replay(self) -> list[tuple]:
        """Every workload's ``(graph, buffer)``: each update draws one of them."""
        return [(self.graphs[name], self.buffers[name]) for name in self.envs]

    # ---------------------------------------------------------------- outputs
    def default_callbacks(self) -> list[Callback]:
        """The progress bar and metrics; no best map or plots: :func:`pretrain` evaluates."""
        out: list[Callback] = [ProgressBar(self.cfg.progress)]
        return out + [MetricsFile()] if self.run_dir is not None else out

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        """The learner's state and every workload's buffer, archive, best map and cache but
        the home's (those are the agent's own ``buffer`` and ledger's)."""
        others = [name for name in self.envs if name != self.home]
        return {
            **super().agent_state(),
            "workloads": list(self.envs),
            "others": [
                {
                    "buffer": self.buffers[n].state_dict(),
                    "archive": self.ledgers[n].archive.state_dict(),
                    "best": self.ledgers[n].best.state_dict(),
                    "cache": self.ledgers[n].cache.state_dict(),
                }
                for n in others
            ],
        }

    def load_agent_state(self, state: dict) -> None:
        if list(state["workloads"]) != list(self.envs):
            raise ValueError(
                f"pretraining checkpoint trained on {list(state['workloads'])}, "
                f"this run on {list(self.envs)}"
            )
        super().load_agent_state(state)
        others = [name for name in self.envs if name != self.home]
        for name, saved in zip(others, state["others"], strict=True):
            self.buffers[name].load_state_dict(saved["buffer"])
            ledger = self.ledgers[name]
            ledger.archive.load_state_dict(archive_state(saved))
            ledger.best = Best(**saved["best"])
            ledger.cache.load_state_dict(saved.get("cache"))


def pretrain(cfg: PretrainConfig, out_dir: str | Path, resume: bool = False) -> dict[str, Path]:
    """Pretrain on ``cfg.train``, then evaluate every snapshot zero-shot.

    ``out_dir`` receives ``config.yaml``, ``metrics.csv``, ``checkpoints/``, ``policies/``
    and ``transfer/`` (``transfer.csv``, ``transfer.png``, ``transfer.md`` over the training
    and held-out workloads). With ``resume``, training continues from the last checkpoint
    in ``out_dir`` (``cfg`` should be the run's own, :func:`read_config`) and gives the same
    snapshots as an uninterrupted run. Returns the paths of the transfer outputs.
    """
    out_dir = Path(out_dir)
    files = RunDir(out_dir)
    if not resume:
        if files.policies.exists() and any(files.policies.iterdir()):
            raise FileExistsError(
                f"{files.policies} already holds snapshots: choose a new --out or --resume it"
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        files.write_config(cfg.to_dict(), resolve=False)
    info = cfg.run_info
    envs = {name: info.make_env(name) for name in [*cfg.train, *cfg.holdout]}
    trainer = MultiWorkloadPretrainer({n: envs[n] for n in cfg.train}, cfg, out_dir)
    if resume and not trainer.resume():
        log.warning("no checkpoint in %s: pretraining from the start", out_dir)
        files.clear_metrics()  # rows of the killed attempt
    trainer.run()
    log.info("pretrained on %s for %d evaluations", cfg.train, trainer.ledger.iterations)
    roles = {n: "train" if n in cfg.train else "holdout" for n in envs}
    rows = evaluate_snapshots(
        list_snapshots(out_dir), envs, roles, which="learner", samples=cfg.samples, seed=cfg.seed
    )
    title = f"learner pretrained on {'+'.join(cfg.train)}"
    return write_outputs(rows, files.transfer_dir, title)


def read_config(out_dir: str | Path) -> PretrainConfig:
    """The configuration a pretraining run wrote to ``out_dir/config.yaml``."""
    files = RunDir(out_dir)
    if not files.config.is_file():
        raise FileNotFoundError(f"cannot resume {out_dir}: {CONFIG_FILE} is missing")
    return PretrainConfig.from_mapping(files.config_node())
