"""The Optuna preset (configs/hparams_search/) on the project's Optuna (>= 4) sweeper: a
3-trial sweep from the command line maximises the best speedup, the best it reports is
the best trial, the study is in the sweep's SQLite file, and a stopped sweep resumes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from egrl.rundir import RunDir
from tests.support.command_line import assert_refused, egrl_train, egrl_train_in_process
from tests.support.paths import ROOT

optuna = pytest.importorskip("optuna", minversion="4")

PRESET = ROOT / "configs" / "hparams_search" / "egrl-optuna.yaml"
#: egrl-train as ``python -c`` (the ``command`` of :func:`egrl_train`)
TRAIN = [sys.executable, "-c", "from egrl.cli.train import main; main()"]
SWEEP = ["hparams_search=egrl-optuna", "workload=resnet18"]


def study(sweep: Path):
    return optuna.load_study(study_name="egrl-optuna", storage=f"sqlite:///{sweep / 'optuna.db'}")


def test_preset_maximises_over_population_and_learner_settings():
    preset = yaml.safe_load(PRESET.read_text())
    sweeper = preset["hydra"]["sweeper"]
    assert sweeper["direction"] == "maximize"
    assert sweeper["sampler"]["name"] == "tpe"
    assert {"population.size", "population.boltzmann_fraction"} <= set(sweeper["params"])
    assert any(key.startswith("learner.") for key in sweeper["params"])
    assert preset["hydra"]["mode"] == "MULTIRUN"
    assert {"override /hydra/sweeper": "optuna-sqlite"} in preset["defaults"]


def test_search_space_follows_hydras_override_grammar():
    from hydra_plugins.egrl_optuna_sweeper.optuna_sweeper import search_space

    dist = optuna.distributions
    space, fixed = search_space(
        [
            "a=int(interval(10, 40))",
            "b=interval(0.0, 0.8)",
            "c=choice(0, 1, 2)",
            "d=tag(log, interval(1e-4, 1e-2))",
            "e=range(2, 11, 4)",
            "f=0,1",
            "budget=40",
        ],
        optuna,
    )
    assert space == {
        "a": dist.IntDistribution(10, 40),
        "b": dist.FloatDistribution(0.0, 0.8),
        "c": dist.CategoricalDistribution([0, 1, 2]),
        "d": dist.FloatDistribution(1e-4, 1e-2, log=True),
        "e": dist.IntDistribution(2, 10, step=4),
        "f": dist.CategoricalDistribution([0, 1]),
    }
    assert fixed == {"budget": "40"}


@pytest.mark.parametrize(
    ("override", "line"),
    [
        (
            "hydra.sweeper.sampler.name=bogus",
            "hydra.sweeper.sampler.name=bogus is invalid: expected one of tpe, gp, cmaes, "
            "random, qmc",
        ),
        (
            "hydra.sweeper.storage=missing/optuna.db",
            "hydra.sweeper.storage=missing/optuna.db cannot be written: directory missing "
            "does not exist",
        ),
        (
            "hydra.sweeper.n_trials=0",
            "hydra.sweeper.n_trials=0 is invalid: expected an integer >= 1",
        ),
    ],
)
def test_bad_sweeper_settings_are_refused_before_the_sweep(tmp_path, override, line):
    assert_refused(egrl_train_in_process(*SWEEP, "budget=40", override, cwd=tmp_path), line)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_three_trial_sweep_reports_its_best_trial(tmp_path):
    sweep = tmp_path / "sweep"
    done = egrl_train(
        *SWEEP,
        "budget=60",
        "hydra.sweeper.n_trials=3",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
        command=TRAIN,
        timeout=600,
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
    assert [t.value for t in study(sweep).get_trials()] == pytest.approx(list(finals.values()))

    config = RunDir(best_trial).read_config()
    for key, value in result["best_params"].items():
        group, name = key.split(".")
        assert config[group][name] == pytest.approx(value), key


@pytest.mark.slow
def test_a_stopped_sweep_resumes_as_the_uninterrupted_one(tmp_path):
    """Launched again into its directory with more trials, a 2-trial sweep asks the
    third trial of an uninterrupted 3-trial sweep; a trial left running (a killed sweep)
    fails and its values run again first."""
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"

    def sweep(where: Path, n: int) -> None:
        args = (*SWEEP, "budget=40", f"hydra.sweeper.n_trials={n}", f"hydra.sweep.dir={where}")
        done = egrl_train(*args, cwd=tmp_path, command=TRAIN, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    sweep(whole, 3)
    sweep(stopped, 2)
    sweep(stopped, 3)
    reference = study(whole).get_trials()
    assert [t.params for t in study(stopped).get_trials()] == [t.params for t in reference]

    killed = study(stopped).ask(reference[0].distributions)  # asked, never told
    sweep(stopped, 4)
    trials = study(stopped).get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3 + ["FAIL", "COMPLETE"]
    assert trials[4].params == killed.params
    assert (stopped / "trial4" / "metrics.csv").is_file()


def test_bad_bound_of_a_search_space_is_refused_before_the_sweep(tmp_path):
    done = egrl_train_in_process(
        *SWEEP, "budget=40", "population.size=int(interval(0, 40))", cwd=tmp_path
    )
    assert done.returncode == 2
    assert "population.size=0 is invalid" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "multirun").exists()
