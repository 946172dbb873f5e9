"""The console entry points, run as a user would (subprocesses)."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

from tests.test_trainer import read_metrics

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "workload=resnet50",
    "budget=40",
    "population.size=6",
    "policy.hidden=16",
    "policy.out=16",
    "policy.depth=2",
    "policy.heads=2",
    "learner.batch_size=8",
    "learner.burn_in=8",
    "checkpoint_every=2",
    "progress=false",
]


def egrl_train(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "egrl.cli.train", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_egrl_train_writes_run_directory_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    out = egrl_train(*TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"results in {run_dir}" in out.stdout
    for name in ("config.yaml", "metrics.csv", "best_mapping.json", "speedup.png", "checkpoints"):
        assert (run_dir / name).exists(), name
    rows = list(csv.DictReader(open(run_dir / "metrics.csv", encoding="utf-8")))
    assert int(rows[-1]["iterations"]) == 40

    # Resuming a finished run continues from its last checkpoint and adds nothing.
    again = egrl_train(f"resume={run_dir}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    rerows = list(csv.DictReader(open(run_dir / "metrics.csv", encoding="utf-8")))
    assert [r["iterations"] for r in rerows] == [r["iterations"] for r in rows]


def test_continue_runs_resumes_a_killed_run_and_refuses_another_config(tmp_path):
    run_dir = tmp_path / "run"
    first = egrl_train(*TINY, "continue_runs=true", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    reference = read_metrics(run_dir)

    # What a kill leaves behind: an older checkpoint, rows written after it, no outputs.
    checkpoints = sorted((run_dir / "checkpoints").glob("gen_??????"))
    assert len(checkpoints) >= 2
    for late in checkpoints[1:]:
        shutil.rmtree(late)
    (run_dir / "best_mapping.json").unlink()
    again = egrl_train(*TINY, "continue_runs=true", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert read_metrics(run_dir) == reference
    assert (run_dir / "best_mapping.json").exists()

    other = egrl_train(
        *TINY, "seed=3", "continue_runs=true", f"hydra.run.dir={run_dir}", cwd=tmp_path
    )
    assert other.returncode != 0
    assert "differing keys: seed" in other.stderr


def test_egrl_train_cfg_job_prints_config(tmp_path):
    out = egrl_train("--cfg", "job", "seed=5", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "seed: 5" in out.stdout and "boltzmann_fraction: 0.2" in out.stdout


def test_egrl_info_without_optimum(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "egrl.cli.info", "--workload", "resnet18", "--no-optimum"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| resnet50 |" in out.stdout and "native compiler map" in out.stdout
