"""The Optuna preset (configs/hparams_search/): a 3-trial sweep from the command line
maximises the best speedup, and the best it reports is the best trial."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from egrl.rundir import RunDir

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")

PRESET = Path(__file__).resolve().parents[1] / "configs" / "hparams_search" / "egrl-optuna.yaml"
TRAIN = [sys.executable, "-c", "from egrl.cli.train import main; main()"]


def egrl_train(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*TRAIN, *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )


def test_preset_maximises_over_population_and_learner_settings():
    preset = yaml.safe_load(PRESET.read_text())
    sweeper = preset["hydra"]["sweeper"]
    assert sweeper["direction"] == "maximize"
    assert {"population.size", "population.boltzmann_fraction"} <= set(sweeper["params"])
    assert any(key.startswith("learner.") for key in sweeper["params"])
    assert preset["hydra"]["mode"] == "MULTIRUN"


@pytest.mark.slow
def test_three_trial_sweep_reports_its_best_trial(tmp_path):
    sweep = tmp_path / "sweep"
    done = egrl_train(
        tmp_path,
        "hparams_search=egrl-optuna",
        "workload=resnet18",
        "budget=40",
        "hydra.sweeper.n_trials=3",
        f"hydra.sweep.dir={sweep}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Directions: ['maximize']" in done.stderr + done.stdout

    result = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    trials = sorted(p for p in sweep.iterdir() if p.name.startswith("trial"))
    assert [p.name for p in trials] == ["trial0", "trial1", "trial2"]
    finals = {p: float(RunDir(p).read_metrics_rows()[-1]["best_speedup"]) for p in trials}
    assert len(set(finals.values())) > 1  # otherwise the direction would not show
    best_trial = max(finals, key=finals.get)
    assert result["best_value"] == pytest.approx(finals[best_trial])
    assert result["best_value"] > min(finals.values())

    config = RunDir(best_trial).read_config()
    for key, value in result["best_params"].items():
        group, name = key.split(".")
        assert config[group][name] == pytest.approx(value), key


@pytest.mark.slow
def test_bad_bound_of_a_search_space_is_refused_before_the_sweep(tmp_path):
    done = egrl_train(
        tmp_path,
        "hparams_search=egrl-optuna",
        "workload=resnet18",
        "budget=40",
        "population.size=int(interval(0, 40))",
    )
    assert done.returncode == 2
    assert "population.size=0 is invalid" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "multirun").exists()
