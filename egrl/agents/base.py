"""What every agent shares: the budget, the record of evaluations, outputs and checkpoints.

An agent searches for a good map of one environment under a budget of hardware
evaluations. Subclasses implement :meth:`SearchAgent.step` (one generation / iteration
batch, calling :meth:`SearchAgent.evaluate` for every map they want measured) and the
checkpoint hooks :meth:`SearchAgent.agent_state` / :meth:`SearchAgent.load_agent_state`.
The base class counts evaluations (never past the budget), records every evaluated map
in a :class:`~egrl.replay.ReplayBuffer`, keeps the best valid map, times the phases, and
writes the run directory: ``metrics.csv``, ``best_mapping.json``, ``speedup.png``,
``checkpoints/``.
"""

from __future__ import annotations

import csv
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from egrl.checkpoint import load_latest, prune_checkpoints, save_state
from egrl.config import TrainConfig
from egrl.env import Env, Evaluation
from egrl.replay import ReplayBuffer

log = logging.getLogger(__name__)

#: metrics.csv columns shared by every agent; agents may add their own (``extra_columns``).
#: The ``wall_s`` and ``t_*`` columns are wall-clock timings, the rest is a deterministic
#: function of the seed.
METRIC_COLUMNS = (
    "generation",
    "iterations",
    "wall_s",
    "best_reward",
    "best_speedup",
    "best_latency_s",
    "batch_best_reward",
    "batch_mean_reward",
    "batch_valid_fraction",
)
PHASES = ("inference", "evaluation", "learner", "evolution")
TIMING_COLUMNS = ("wall_s",) + tuple(f"t_{p}" for p in PHASES)


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

    def state_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Timer:
    """Cumulative wall time per phase of the search loop."""

    totals: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def measure(self, phase: str, fn: Callable, *args, **kwargs):
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        self.totals[phase] += time.perf_counter() - start
        return out


class SearchAgent:
    """Base class of all agents (see the module docstring).

    Args:
        env: the environment (hardware target bound to a workload).
        cfg: the run's configuration (``cfg.budget``, ``cfg.seed``, ``cfg.agent``, ...).
        run_dir: where outputs and checkpoints go (None: nowhere).
    """

    #: agent-specific metrics.csv columns, after :data:`METRIC_COLUMNS`
    extra_columns: tuple[str, ...] = ()

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        self.env = env
        self.cfg = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self.rng = np.random.default_rng(cfg.seed)
        self.generator = torch.Generator(device="cpu").manual_seed(cfg.seed)
        self.buffer = replay_buffer(env, cfg.learner.buffer_size)
        self.best = Best()
        self.iterations = 0
        self.generation = 0
        self.wall_s = 0.0
        self.timer = Timer()
        self.rows: list[dict] = []
        self._batch: list[Evaluation] = []

    # ----------------------------------------------------------------- budget
    @property
    def name(self) -> str:
        return self.cfg.agent.name

    @property
    def columns(self) -> tuple[str, ...]:
        return METRIC_COLUMNS + self.extra_columns + TIMING_COLUMNS[1:]

    @property
    def remaining(self) -> int:
        return self.cfg.budget - self.iterations

    @property
    def done(self) -> bool:
        return self.remaining <= 0

    def evaluate(self, maps, source: str, probs=None) -> Evaluation:
        """Evaluate, record and count a batch of maps ``[B, N, H]``.

        ``probs`` (``None`` or float ``[B, N, H, C]``, the policy's probabilities the maps
        were drawn from) goes to :meth:`egrl.env.Env.evaluate`, which hands it to targets
        that want it. Maps beyond the remaining budget are not evaluated: the returned
        evaluation covers the first ``min(B, remaining)`` maps only.
        """
        keep = max(self.remaining, 0)
        maps = np.asarray(maps, dtype=np.int64)[:keep]
        probs = None if probs is None else probs[:keep]
        ev = self.timer.measure("evaluation", self.env.evaluate, maps, probs)
        self.buffer.add(maps, ev.reward, source)
        self.best.update(maps, ev, self.iterations)
        self.iterations += len(maps)
        self._batch.append(ev)
        return ev

    # ------------------------------------------------------------- the search
    def step(self) -> dict:
        """One generation: propose maps, :meth:`evaluate` them, learn. Returns extra metrics."""
        raise NotImplementedError

    def _generation(self) -> dict:
        start = time.perf_counter()
        self._batch = []
        row: dict = dict.fromkeys(self.columns, float("nan"))
        row.update(self.step())
        self.generation += 1
        self.wall_s += time.perf_counter() - start
        if self._batch:
            rewards = np.concatenate([ev.reward for ev in self._batch])
            valid = np.concatenate([ev.valid for ev in self._batch])
            if len(rewards):
                row.update(
                    batch_best_reward=float(rewards.max()),
                    batch_mean_reward=float(rewards.mean()),
                    batch_valid_fraction=float(valid.mean()),
                )
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

    def run(self, on_generation: Callable[[dict], None] | None = None) -> Best:
        """Search until the budget is spent; returns the best valid map."""
        from tqdm.auto import tqdm

        bar = tqdm(
            total=self.cfg.budget,
            initial=self.iterations,
            desc=f"{self.name} {self.env.workload.name}",
            unit="eval",
            disable=not self.cfg.progress,
        )
        with bar:
            while not self.done:
                before = self.iterations
                row = self._generation()
                if self.iterations == before:
                    raise RuntimeError(f"agent {self.name!r} made no evaluation in a generation")
                bar.update(self.iterations - before)
                bar.set_postfix(best_speedup=f"{self.best.speedup:.3f}", gen=self.generation)
                if self.run_dir is not None:
                    self._append_metrics(row)
                    self.on_generation_end()
                    if self.generation % max(1, self.cfg.checkpoint_every) == 0 or self.done:
                        self.save_checkpoint()
                if on_generation is not None:
                    on_generation(row)
        if self.run_dir is not None:
            self.write_outputs()
        return self.best

    def on_generation_end(self) -> None:
        """Hook after each generation's metrics are written (e.g. policy snapshots)."""

    # ---------------------------------------------------------------- outputs
    def _append_metrics(self, row: dict) -> None:
        append_metrics_row(self.run_dir / "metrics.csv", self.columns, row)

    def write_outputs(self) -> None:
        """The best map as JSON keyed by unit name, and the speedup-vs-iterations plot."""
        from egrl.plots import plot_speedup_curve

        best = {
            "agent": self.name,
            "workload": self.env.workload.name,
            "speedup": self.best.speedup,
            "latency_s": self.best.latency_s,
            "reward": self.best.reward,
            "iteration": self.best.iteration,
            "iterations": self.iterations,
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
            title=f"{self.name} on {self.env.workload.name}",
        )

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        """The subclass's own state (tensors, arrays and plain data)."""
        return {}

    def load_agent_state(self, state: dict) -> None:
        """Inverse of :meth:`agent_state`."""

    def state_dict(self) -> dict:
        """Everything needed to continue the run bit for bit."""
        return {
            "iterations": self.iterations,
            "generation": self.generation,
            "wall_s": self.wall_s,
            "timer": dict(self.timer.totals),
            "rng": self.rng.bit_generator.state,
            "generator": self.generator.get_state(),
            "best": self.best.state_dict(),
            "buffer": self.buffer.state_dict(),
            "rows": self.rows,
            "agent": self.agent_state(),
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
        self.rows = list(state["rows"])
        self.load_agent_state(state["agent"])

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/gen_XXXXXX`` atomically and prune old ones."""
        ckpt_dir = self.run_dir / "checkpoints"
        path = save_state(self.state_dict(), ckpt_dir / f"gen_{self.generation:06d}")
        prune_checkpoints(ckpt_dir, self.cfg.keep_checkpoints, path)
        return path

    def resume(self) -> bool:
        """Continue from the newest intact checkpoint in ``run_dir``; False if there is none.

        Damaged checkpoints are skipped with a warning (:func:`egrl.checkpoint.load_latest`).

        Raises:
            egrl.checkpoint.CheckpointError: checkpoints exist but all are damaged.
        """
        found = load_latest(self.run_dir / "checkpoints")
        if found is None:
            return False
        ckpt, state = found
        self.load_state_dict(state)
        path = self.run_dir / "metrics.csv"
        if path.exists():
            path.unlink()
        for row in self.rows:
            self._append_metrics(row)
        log.info(
            "resumed %s from %s at generation %d (%d iterations)",
            self.run_dir,
            ckpt.name,
            self.generation,
            self.iterations,
        )
        return True


def append_metrics_row(path: Path, columns: tuple[str, ...], row: dict) -> None:
    """Append one row to a metrics CSV, writing the header first if the file is new."""
    new = not path.exists()
    with open(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def replay_buffer(env: Env, capacity: int) -> ReplayBuffer:
    """An empty replay buffer of ``capacity`` (at least 1) transitions for ``env``'s maps."""
    return ReplayBuffer(max(int(capacity), 1), env.num_units, env.num_heads)


def to_numpy_maps(maps) -> np.ndarray:
    """Maps from a policy (tensor or array) as int64 numpy."""
    if isinstance(maps, torch.Tensor):
        return maps.detach().cpu().numpy().astype(np.int64)
    return np.asarray(maps, dtype=np.int64)
