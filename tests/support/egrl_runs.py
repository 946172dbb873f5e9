"""EGRL's small runs on :func:`tests.support.envs.small_env` and a policy's greedy map."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from egrl.agents.egrl.agent import EGRLAgent
from egrl.agents.egrl.config import EGRLConfig, LearnerConfig, PolicyConfig, PopulationConfig
from egrl.config import TrainConfig
from tests.support.envs import small_env
from tests.support.threads import one_torch_thread

#: the policies' sizes of the small runs
TINY_POLICY = {"hidden": 16, "out": 16, "depth": 2, "heads": 2}


def small_config(seed: int = 0, budget: int = 160, **agent) -> TrainConfig:
    """EGRL with tiny policies, a population of 8 and Table 2's gradient rate."""
    return TrainConfig(
        seed=seed,
        budget=budget,
        progress=False,
        checkpoint_every=2,
        agent=EGRLConfig(
            **agent,
            policy=PolicyConfig(**TINY_POLICY),
            population=PopulationConfig(size=8, boltzmann_fraction=0.25),
            learner=LearnerConfig(batch_size=8, burn_in=16, gradient_ratio=1.0),  # Table 2 rate
        ),
    )


def train_small_egrl(run_dir: Path, seed: int, budget: int) -> EGRLAgent:
    """A short EGRL run on :func:`small_env` (one torch thread), with policy snapshots
    every generation and checkpoints."""
    with one_torch_thread():
        trainer = EGRLAgent(
            small_env(), replace(small_config(seed=seed, budget=budget), snapshot_every=1), run_dir
        )
        trainer.run()
    return trainer


def greedy(actor, graph) -> np.ndarray:
    """The actor's most likely choice of every head, int64 ``[N, H]``."""
    with torch.no_grad():
        return actor.log_distribution(graph).argmax(dim=-1).cpu().numpy()
