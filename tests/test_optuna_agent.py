"""``agent=optuna``: Optuna's samplers on the map, batched ask and tell, the study in the
run's SQLite storage, an exact resume from it, and its refusals of bad input."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from egrl.agents import make_agent
from egrl.checkpoint import CheckpointError
from egrl.config import TrainConfig
from tests.support.agent_configs import agent_config
from tests.support.command_line import assert_refused, egrl_train_in_process
from tests.support.envs import small_env
from tests.support.metrics import read_metrics

optuna = pytest.importorskip("optuna", minversion="4")

#: the samplers whose runs are quick enough for every check (GP: one short run below)
QUICK = ["tpe", "random", "qmc", "cmaes"]


def config(sampler: str, seed: int = 5, budget: int = 120, **options) -> TrainConfig:
    """Optuna with ``sampler``, 8 maps a generation."""
    return agent_config("optuna", seed, budget, sampler=sampler, **options)


def stored(run_dir: Path) -> list:
    """The trials of the one study in ``run_dir``'s storage."""
    url = f"sqlite:///{run_dir / 'optuna.db'}"
    (summary,) = optuna.get_all_study_summaries(url)
    return optuna.load_study(study_name=summary.study_name, storage=url).get_trials()


@pytest.mark.parametrize("sampler", QUICK)
def test_resume_from_the_storage_continues_as_the_uninterrupted_run(sampler, tmp_path):
    """The storage of the finished run holds trials past the middle checkpoint: they are
    dropped, the run goes on to the same metrics, and nothing is measured twice."""
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    make_agent(small_env(), config(sampler, budget=64), reference).run()
    ckpts = sorted((reference / "checkpoints").glob("gen_??????"))
    middle = ckpts[len(ckpts) // 2]
    shutil.copytree(middle, resumed / "checkpoints" / middle.name)
    shutil.copy(reference / "optuna.db", resumed / "optuna.db")

    env = small_env()
    agent = make_agent(env, config(sampler, budget=64), resumed)
    assert agent.resume()
    start = agent.ledger.iterations
    assert 0 < start < 64
    agent.run()
    assert read_metrics(resumed) == read_metrics(reference)
    assert env.num_evaluations == 64 - start
    before, after = stored(reference), stored(resumed)
    assert [t.params for t in after] == [t.params for t in before]
    assert [t.value for t in after] == [t.value for t in before]


def test_the_storage_holds_every_trial_with_its_reward(tmp_path):
    agent = make_agent(small_env(), config("tpe", budget=60), tmp_path)
    best = agent.run()
    trials = stored(tmp_path)
    assert len(trials) == agent.ledger.proposals >= 60
    assert max(t.value for t in trials) == pytest.approx(best.reward)
    first = trials[0]
    assert set(first.params) == {f"{u}:{h}" for u in agent.env.unit_names for h in agent.env.heads}
    assert set(first.params.values()) <= {"DRAM", "LLC", "SRAM"}  # categorical: the labels
    assert {"valid", "latency_s"} <= set(first.user_attrs)
    mapping = agent.env.random_mappings(1, np.random.default_rng(0))[0]
    np.testing.assert_array_equal(agent.decisions.mapping(agent.decisions.values(mapping)), mapping)


def test_cma_es_and_qmc_sample_integer_choices():
    agent = make_agent(small_env(), config("cmaes", budget=16))
    agent.run()
    values = {v for t in agent.study.get_trials() for v in t.params.values()}
    assert values <= {0, 1, 2} and len(values) == 3
    tpe = make_agent(small_env(), config("tpe", budget=16, encoding="integer"))
    tpe.run()
    assert {type(v) for t in tpe.study.get_trials() for v in t.params.values()} == {int}


def test_gp_sampler_runs_and_is_reproducible():
    """12 trials, two at a time: Optuna's 10 random ones, then two asked of the Gaussian
    process (it models the trials told when it is asked)."""
    rows = []
    for _ in range(2):
        agent = make_agent(small_env(), config("gp", budget=12, batch=2))
        agent.run()
        rows.append([(r["iterations"], r["best_reward"]) for r in agent.rows])
        assert agent.ledger.iterations == 12
    assert rows[0] == rows[1]


def test_native_start_is_the_first_trial():
    env = small_env()
    agent = make_agent(env, config("tpe", budget=16, start="native"))
    agent.step()
    first = agent.study.get_trials()[0]
    np.testing.assert_array_equal(agent.decisions.mapping(first.params), env.baseline_mapping)
    assert agent.ledger.best.speedup >= 1.0


def test_resume_without_the_storage_says_so(tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    make_agent(small_env(), config("random", budget=40), reference).run()
    last = sorted((reference / "checkpoints").glob("gen_??????"))[-2]
    shutil.copytree(last, resumed / "checkpoints" / last.name)
    with pytest.raises(CheckpointError, match="no study .* trials are lost"):
        make_agent(small_env(), config("random", budget=40), resumed).resume()


def test_bad_options_name_the_agent_and_the_option(tmp_path):
    with pytest.raises(
        ValueError, match="agent 'optuna': option sampler=bogus is invalid: expected one of"
    ):
        make_agent(small_env(), config("bogus"))
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ValueError, match=r"storage=.*file/x\.db cannot be written"):
        make_agent(small_env(), config("tpe", storage=str(blocker / "x.db")))
    with pytest.raises(ValueError, match="is not an SQLite database"):
        make_agent(small_env(), config("tpe", storage=str(blocker)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


RUN = ["agent=optuna", "workload=resnet18", "progress=false"]


@pytest.mark.parametrize(
    ("override", "line"),
    [
        (
            "agent.sampler=bogus",
            "agent 'optuna': option sampler=bogus is invalid: expected one of "
            "tpe, gp, cmaes, random, qmc",
        ),
        (
            "agent.storage=missing/optuna.db",
            "agent 'optuna': storage=missing/optuna.db cannot be written: "
            "directory missing does not exist",
        ),
    ],
)
def test_bad_input_is_refused_in_one_line_and_nothing_is_made(tmp_path, override, line):
    run_dir = tmp_path / "run"
    out = egrl_train_in_process(
        *RUN, "budget=10", override, f"hydra.run.dir={run_dir}", cwd=tmp_path
    )
    assert_refused(out, line)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_egrl_train_on_ray_writes_the_study_and_resumes_with_a_larger_budget(tmp_path):
    run_dir = tmp_path / "run"
    args = [*RUN, "agent.sampler=tpe", "runtime=ray", "runtime.workers=2"]

    def train(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "egrl.cli.train", *extra],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )

    out = train(*args, "budget=30", f"hydra.run.dir={run_dir}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "best speedup over the compiler" in out.stdout
    assert int(read_metrics(run_dir)[-1]["iterations"]) == 30
    trials = stored(run_dir)
    assert len(trials) >= 30
    out = train(f"resume={run_dir}", "budget=50")
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(read_metrics(run_dir)[-1]["iterations"]) == 50
    assert [t.params for t in stored(run_dir)[: len(trials)]] == [t.params for t in trials]
