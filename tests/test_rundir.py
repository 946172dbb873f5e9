"""egrl.rundir: the names and files of a run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from egrl.agents.egrl.agent import EGRLAgent
from egrl.rundir import RunDir, is_checkpoint, is_run_dir
from egrl.runs import load_run
from tests.support.egrl_runs import train_small_egrl


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, EGRLAgent]:
    """A short EGRL run on the small workload, with policy snapshots and checkpoints."""
    run_dir = tmp_path_factory.mktemp("trained")
    return run_dir, train_small_egrl(run_dir, seed=2, budget=80)


def test_every_file_of_a_run_is_named(tmp_path):
    files = RunDir(str(tmp_path))
    assert files.path == tmp_path
    assert files.config == tmp_path / "config.yaml"
    assert files.metrics == tmp_path / "metrics.csv"
    assert files.best_map == tmp_path / "best_mapping.json"
    assert files.speedup_plot == tmp_path / "speedup.png"
    assert files.checkpoints == tmp_path / "checkpoints"
    assert files.checkpoint(7) == tmp_path / "checkpoints" / "gen_000007"
    assert files.policies == tmp_path / "policies"
    assert files.snapshot(120) == tmp_path / "policies" / "iter_000120.safetensors"
    assert files.overrides == tmp_path / ".hydra" / "overrides.yaml"
    assert files.transfer_csv == tmp_path / "transfer" / "transfer.csv"
    assert not is_run_dir(tmp_path) and not files.is_run_dir()
    assert files.snapshots() == [] and files.list_checkpoints() == []
    assert files.latest_checkpoint() is None and files.load_latest_checkpoint() is None
    assert files.read_best_map() is None and files.read_overrides() == []
    files.overrides.parent.mkdir()
    files.overrides.write_text("- seed=3\n- +agent.x=1\n", encoding="utf-8")
    assert is_run_dir(tmp_path)
    assert files.read_overrides() == ["seed=3", "+agent.x=1"]


def test_config_round_trip_in_the_format_of_egrl_train(tmp_path):
    cfg = OmegaConf.create({"seed": 1, "budget": 10, "lr": 1e-3, "agent": {"name": "ea"}})
    cfg.derived = "${budget}"
    files = RunDir(tmp_path)
    files.write_config(cfg)
    assert files.config.read_text(encoding="utf-8") == OmegaConf.to_yaml(cfg, resolve=True)
    assert files.read_config() == {
        "seed": 1,
        "budget": 10,
        "lr": 1e-3,
        "agent": {"name": "ea"},
        "derived": 10,
    }
    assert files.resolved_config() == files.read_config()
    assert OmegaConf.to_container(files.config_node()) == files.read_config()
    assert is_run_dir(tmp_path)
    # a plain mapping, unresolved (what egrl-transfer pretrain writes)
    files.write_config({"train": ["a", "b"], "x": "${y}"}, resolve=False)
    assert files.read_config() == {"train": ["a", "b"], "x": "${y}"}


def test_metrics_rows_are_appended_under_the_files_own_header(tmp_path):
    files = RunDir(tmp_path)
    files.append_metrics(("generation", "best"), {"generation": 1, "best": 0.5})
    files.append_metrics(("generation", "best"), {"generation": 2, "best": 0.75, "other": 9})
    assert files.metrics.read_bytes() == b"generation,best\r\n1,0.5\r\n2,0.75\r\n"
    # a newer version with another column keeps the file's header and order
    files.append_metrics(("best", "generation", "new"), {"generation": 3, "best": 1, "new": 0})
    assert files.read_metrics_rows() == [
        {"generation": "1", "best": "0.5"},
        {"generation": "2", "best": "0.75"},
        {"generation": "3", "best": "1"},
    ]
    files.clear_metrics()
    assert not files.metrics.exists()
    files.clear_metrics()  # nothing to remove: no error


def test_best_map_round_trip(tmp_path):
    files = RunDir(tmp_path)
    best = {"agent": "ea", "speedup": 1.25, "mapping": {"conv1": {"weights": "llc"}}}
    files.write_best_map(best)
    assert files.best_map.read_text(encoding="utf-8") == json.dumps(best, indent=1)
    assert files.read_best_map() == best


def test_a_real_run_is_read_back(trained):
    run_dir, trainer = trained
    files = RunDir(run_dir)
    # metrics: the trainer's rows, as text
    rows = files.read_metrics_rows()
    assert [int(r["iterations"]) for r in rows] == [r["iterations"] for r in trainer.rows]
    # best map
    best = files.read_best_map()
    assert (
        best["speedup"] == trainer.ledger.best.speedup
        and best["iterations"] == trainer.ledger.iterations
    )
    # snapshots, one per generation, sorted
    snapshots = files.snapshots()
    assert snapshots == sorted(snapshots) and len(snapshots) == trainer.generation
    assert all(p.parent == files.policies and p.suffix == ".safetensors" for p in snapshots)
    assert snapshots[-1] == files.snapshot(trainer.ledger.iterations)
    # checkpoints: the newest is the last generation's
    newest = files.latest_checkpoint()
    assert newest == files.checkpoint(trainer.generation) and is_checkpoint(newest)
    assert files.list_checkpoints()[0] == newest
    path, state = files.load_latest_checkpoint()
    assert path == newest and state["iterations"] == trainer.ledger.iterations
    # the aggregation reader, once the run has a config
    files.write_config(
        {"agent": {"name": "egrl"}, "workload": {"name": "w"}, "seed": 2, "budget": 80}
    )
    run = load_run(run_dir)
    assert run.iterations.tolist() == [r["iterations"] for r in trainer.rows]
    assert run.complete and run.final_speedup == pytest.approx(trainer.ledger.best.speedup)
    files.config.unlink()


def test_a_run_reading_each_map_several_times_is_complete_short_of_one_map():
    """With repeats: 3 a budget of 10 board runs ends at 9: the run is complete."""
    import numpy as np

    from egrl.runs import Run

    def run(iterations: int, repeats: int | None) -> Run:
        config = {} if repeats is None else {"hwmodel.params.repeats": repeats}
        return Run(
            Path("r"),
            "random",
            "w",
            "external",
            0,
            10,
            config,
            {},
            np.array([iterations]),
            np.array([1.0]),
            np.array([1.0]),
        )

    assert run(9, 3).complete and not run(6, 3).complete
    assert run(10, None).complete and not run(9, None).complete
