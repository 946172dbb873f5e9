"""Small screening runs, resuming one, and an earlier run for a screen to learn from."""

from __future__ import annotations

import shutil
from pathlib import Path

from egrl import make_env
from egrl.agents import make_agent, train_config
from egrl.rundir import RunDir
from tests.support.egrl_runs import TINY_POLICY
from tests.support.metrics import read_metrics


def run_config(agent: dict, budget: int, screen: dict, seed: int = 0, **keys):
    """A small screening run: tiny policies, a population of 6, a checkpoint a generation."""
    return train_config(
        {
            "seed": seed,
            "budget": budget,
            "progress": False,
            "checkpoint_every": 1,
            "keep_checkpoints": 100,
            "agent": agent,
            "policy": TINY_POLICY,
            "population": {"size": 6, "boltzmann_fraction": 0.34},
            "learner": {"batch_size": 8, "burn_in": 8, "gradient_ratio": 1.0},
            "screen": screen,
            **keys,
        }
    )


def assert_resumes_identically(reference: Path, resumed: Path, cfg, after: int) -> None:
    """A run on resnet18 resumed from the middle checkpoint of ``reference`` (past
    ``after`` paid maps, before the budget) writes the same ``metrics.csv``."""
    ckpts = sorted((reference / "checkpoints").glob("gen_??????"))
    middle = ckpts[len(ckpts) // 2]
    shutil.copytree(middle, resumed / "checkpoints" / middle.name)
    again = make_agent(make_env("nnpi", "resnet18"), cfg, resumed)
    assert again.resume() and after < again.ledger.iterations < cfg.budget
    again.run()
    assert read_metrics(resumed) == read_metrics(reference)


def earlier_run(path: Path, workload: str, hwmodel: str = "nnpi", budget: int = 60) -> Path:
    """A short random-search run written as egrl-train writes one (config, checkpoint)."""
    cfg = {"seed": 0, "budget": budget, "progress": False, "agent": {"name": "random"}}
    agent = make_agent(make_env(hwmodel, workload), train_config(cfg), run_dir=path)
    agent.run()
    agent.save_checkpoint()
    full = {**cfg, "hwmodel": {"name": hwmodel, "params": {}}, "workload": {"name": workload}}
    RunDir(path).write_config(full)
    return path
