"""End-to-end tests of the EGRL generation loop: budget, outputs, determinism, resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from egrl import make_env
from egrl.config import AgentConfig, LearnerConfig, PolicyConfig, PopulationConfig, TrainConfig
from egrl.trainer import TIMING_COLUMNS, Trainer
from tests.nnpi_workloads import residual

KIB = 1024


def small_env():
    """A 13-node residual network whose weights do not all fit in SRAM + LLC."""
    w = residual(4, act_bytes=96 * KIB, weight_bytes=700 * KIB, macs=2_000_000)
    return make_env("nnpi", w, sram_mib=1.0, llc_mib=2.0)


def small_config(seed: int = 0, budget: int = 160, **agent) -> TrainConfig:
    return TrainConfig(
        seed=seed,
        budget=budget,
        progress=False,
        checkpoint_every=2,
        agent=AgentConfig(**agent),
        policy=PolicyConfig(hidden=16, out=16, depth=2, heads=2),
        population=PopulationConfig(size=8, boltzmann_fraction=0.25),
        learner=LearnerConfig(batch_size=8, burn_in=16),
    )


def read_metrics(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rows]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_run_respects_budget_and_writes_run_directory(tmp_path):
    env = small_env()
    trainer = Trainer(env, small_config(budget=101), tmp_path)
    best = trainer.run()
    assert trainer.iterations == 101 == env.num_evaluations
    assert len(trainer.buffer) == 101
    rows = read_metrics(tmp_path)
    assert int(rows[-1]["iterations"]) == 101
    assert [int(r["generation"]) for r in rows] == list(range(1, len(rows) + 1))
    for name in ("metrics.csv", "best_mapping.json", "speedup.png"):
        assert (tmp_path / name).is_file()
    assert any((tmp_path / "checkpoints").iterdir())
    snapshots = sorted((tmp_path / "policies").glob("iter_*.safetensors"))
    assert snapshots and snapshots[-1].name == "iter_000101.safetensors"
    saved = json.loads((tmp_path / "best_mapping.json").read_text())
    assert set(saved["mapping"]) == set(env.unit_names)
    # The saved best map is the one the trainer kept, and it is as good as claimed.
    assert best.mapping is not None
    ev = env.evaluate(best.mapping)
    assert ev.valid[0] and ev.speedup[0] == pytest.approx(best.speedup)
    assert saved["speedup"] == pytest.approx(best.speedup)


def test_same_seed_same_metrics(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    Trainer(small_env(), small_config(seed=3, budget=90), a).run()
    Trainer(small_env(), small_config(seed=3, budget=90), b).run()
    Trainer(small_env(), small_config(seed=4, budget=90), tmp_path / "c").run()
    assert read_metrics(a) == read_metrics(b)
    assert read_metrics(a) != read_metrics(tmp_path / "c")


_CHILD = textwrap.dedent(
    """
    import sys, torch
    torch.set_num_threads(1)
    from egrl.trainer import Trainer
    from tests.test_trainer import small_config, small_env
    Trainer(small_env(), small_config(seed=7, budget=int(sys.argv[2])), sys.argv[1]).run()
    """
)


def test_resume_after_kill_matches_uninterrupted_run(tmp_path):
    budget = 200
    reference = tmp_path / "reference"
    Trainer(small_env(), small_config(seed=7, budget=budget), reference).run()

    killed = tmp_path / "killed"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(killed), str(budget)], cwd=root, env=env
    )
    deadline = time.time() + 120
    try:
        # Kill -9 once at least two checkpoints exist, i.e. mid-way through the run.
        while time.time() < deadline and proc.poll() is None:
            ckpts = list((killed / "checkpoints").glob("gen_??????")) if killed.exists() else []
            if len(ckpts) >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    partial = read_metrics(killed)
    assert 0 < int(partial[-1]["iterations"]) < budget

    trainer = Trainer(small_env(), small_config(seed=7, budget=budget), killed)
    assert trainer.resume()
    assert trainer.iterations < budget
    trainer.run()
    assert read_metrics(killed) == read_metrics(reference)


def test_egrl_beats_random_search_at_the_same_budget(tmp_path):
    budget = 240
    egrl, rand = [], []
    for seed in range(2):
        env = small_env()
        egrl.append(Trainer(env, small_config(seed=seed, budget=budget)).run().speedup)
        ev = env.evaluate(env.random_mappings(budget, np.random.default_rng(seed)))
        rand.append(ev.speedup.max())
    # Random maps are valid < 1% of the time here; EGRL learns the capacity rules.
    assert np.mean(egrl) > np.mean(rand)


def test_ea_only_and_pg_only_agents_run(tmp_path):
    ea = Trainer(small_env(), small_config(budget=40, name="ea", use_learner=False)).run()
    pg = Trainer(small_env(), small_config(budget=40, name="pg", use_population=False)).run()
    assert ea.speedup >= 0 and pg.speedup >= 0


def test_all_boltzmann_population_takes_the_learner_as_a_seeded_chromosome():
    cfg = small_config(budget=40)
    cfg.population = PopulationConfig(size=4, boltzmann_fraction=1.0)
    trainer = Trainer(small_env(), cfg)
    trainer.run()
    assert trainer.iterations == 40
    assert set(trainer.population.kinds) == {"boltzmann"}


def test_learner_config_is_the_sac_config_and_refuses_unknown_keys():
    from egrl.config import from_mapping
    from egrl.sac import SACConfig

    cfg = from_mapping({"learner": {"alpha": 0.1, "rollouts": 2}})
    assert isinstance(cfg.learner, SACConfig)
    assert cfg.learner.alpha == 0.1 and cfg.learner.rollouts == 2
    with pytest.raises(KeyError, match="alph"):
        from_mapping({"learner": {"alph": 0.1}})
