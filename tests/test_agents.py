"""The baseline agents behind the SearchAgent interface: budget, outputs, determinism, resume."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from egrl.agents import make_agent, names
from egrl.agents.annealing import neighbours
from egrl.agents.greedy_dp import head_combinations
from egrl.env import Env
from hwmodels.base import Target
from hwmodels.nnpi.target import NNPITarget
from tests.support.agent_configs import OPTIONS, agent_config
from tests.support.envs import small_env
from tests.support.metrics import read_metrics

AGENTS = list(OPTIONS)
# optuna resumes from its storage as well as its checkpoint: tests/test_optuna_agent.py
RESUMABLE = ["random", "greedy-dp", "sa", "ga", "nevergrad"]
STOCHASTIC = ["random", "sa", "ga", "nevergrad", "optuna"]


def needs(name: str) -> None:
    if name == "nevergrad":
        pytest.importorskip("nevergrad")
    if name == "optuna":
        pytest.importorskip("optuna", minversion="4")


def test_every_baseline_is_registered():
    assert set(AGENTS) <= set(names())


@pytest.mark.parametrize("name", AGENTS)
def test_run_respects_budget_and_writes_run_directory(name, tmp_path):
    needs(name)
    env = small_env()
    agent = make_agent(env, agent_config(name), tmp_path)
    best = agent.run()
    expected = 101
    if name == "optimum":  # its one map is free when it is the compiler's, measured at binding
        expected = 0 if np.array_equal(best.mapping, env.baseline_mapping) else 1
    assert agent.ledger.iterations == expected == env.num_evaluations
    # Maps answered from the cache are proposals, not paid, and still replay transitions.
    assert len(agent.ledger.archive) == agent.ledger.proposals >= expected
    rows = read_metrics(tmp_path)
    assert int(rows[-1]["iterations"]) == expected
    assert int(rows[-1]["proposals"]) == agent.ledger.proposals
    assert [int(r["generation"]) for r in rows] == list(range(1, len(rows) + 1))
    assert set(agent.extra_columns) <= set(rows[0])
    for file in ("metrics.csv", "best_mapping.json", "speedup.png"):
        assert (tmp_path / file).is_file(), file
    assert sorted((tmp_path / "checkpoints").glob("gen_??????"))
    # The best map re-evaluates to the recorded speedup, and best_mapping.json holds it.
    assert best.mapping is not None and best.speedup > 0
    ev = env.evaluate(best.mapping)
    assert ev.valid[0] and ev.speedup[0] == pytest.approx(best.speedup)
    saved = json.loads((tmp_path / "best_mapping.json").read_text())
    assert saved["agent"] == name and saved["speedup"] == pytest.approx(best.speedup)
    assert set(saved["mapping"]) == set(env.unit_names)


@pytest.mark.parametrize("name", AGENTS)
def test_same_seed_same_run(name, tmp_path):
    needs(name)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    budget = 40 if name == "optuna" else 90  # TPE's asks cost more with every trial told
    make_agent(small_env(), agent_config(name, seed=3, budget=budget), a).run()
    make_agent(small_env(), agent_config(name, seed=3, budget=budget), b).run()
    assert read_metrics(a) == read_metrics(b)
    if name in STOCHASTIC:
        make_agent(small_env(), agent_config(name, seed=4, budget=budget), c).run()
        assert read_metrics(a) != read_metrics(c)


@pytest.mark.parametrize("name", RESUMABLE)
def test_resume_from_checkpoint_matches_uninterrupted_run(name, tmp_path):
    needs(name)
    budget = 120
    reference = tmp_path / "reference"
    make_agent(small_env(), agent_config(name, seed=5, budget=budget), reference).run()
    ckpts = sorted((reference / "checkpoints").glob("gen_??????"))
    assert len(ckpts) >= 3
    middle = ckpts[len(ckpts) // 2]

    resumed = tmp_path / "resumed"
    shutil.copytree(middle, resumed / "checkpoints" / middle.name)
    env = small_env()
    agent = make_agent(env, agent_config(name, seed=5, budget=budget), resumed)
    assert agent.resume()
    start = agent.ledger.iterations
    assert 0 < start < budget
    agent.run()
    assert read_metrics(resumed) == read_metrics(reference)
    # Resuming re-evaluates nothing: only the rest of the budget reached the hardware.
    assert env.num_evaluations == budget - start


def test_greedy_dp_beats_random_search():
    greedy, rand = [], []
    for seed in range(2):
        greedy.append(make_agent(small_env(), agent_config("greedy-dp", seed, budget=200)).run())
        rand.append(make_agent(small_env(), agent_config("random", seed, budget=200)).run())
    assert np.mean([b.speedup for b in greedy]) > np.mean([b.speedup for b in rand])


def test_greedy_dp_keeps_current_choice_on_ties_and_walks_units_in_order():
    env = small_env()
    # The first unit pays its 9 maps; every later one 8: its current choice is the map
    # kept at the unit before, answered from the cache (so is the compiler's map, measured
    # when the target was bound: a walk that meets it goes further on the same budget).
    agent = make_agent(env, agent_config("greedy-dp", budget=9 + 8 * env.num_units))
    agent.run()
    rows = agent.rows
    units = [r["unit"] for r in rows]
    assert units[: env.num_units + 1] == list(range(env.num_units)) + [0]
    assert units[env.num_units + 1 :] == list(range(1, len(units) - env.num_units))
    assert 9 * (len(rows) - 1) < agent.ledger.proposals <= 9 * len(rows)  # the budget ends a walk
    assert rows[-1]["pass"] == 1
    # The first pass moved some units off DRAM; the map it ends with is the best seen.
    assert any(r["changed"] for r in rows) and agent.current.any()
    assert env.evaluate(agent.current).reward[0] == pytest.approx(agent.ledger.best.reward)


def test_sa_improves_over_its_start():
    env = small_env()
    start = env.evaluate(np.zeros((env.num_units, env.num_heads), dtype=np.int64))
    agent = make_agent(env, agent_config("sa", budget=200))
    assert agent.run().speedup > start.speedup[0]
    # The geometric schedule starts at t_start and reaches t_end with the budget's last move.
    assert agent.temperature(0) == pytest.approx(agent.options.t_start)
    temps = [r["temperature"] for r in agent.rows[1:]]
    assert all(a > b for a, b in zip(temps, temps[1:]))
    assert temps[-1] == pytest.approx(agent.options.t_end)


def test_neighbours_change_exactly_the_requested_entries():
    rng = np.random.default_rng(0)
    num_choices = np.array([3, 2])
    maps = np.stack([rng.integers(0, num_choices, size=(7, 2)) for _ in range(50)])
    for moves in (1, 3):
        out = neighbours(maps, num_choices, moves, rng)
        assert ((out != maps).sum(axis=(1, 2)) == moves).all()
        assert ((out >= 0) & (out < num_choices)).all()


def test_head_combinations_cover_every_pair_once():
    combos = head_combinations(np.array([3, 3]))
    assert combos.shape == (9, 2) and len(np.unique(combos, axis=0)) == 9


def test_optimum_records_solver_in_outputs(tmp_path):
    agent = make_agent(small_env(), agent_config("optimum", budget=50), tmp_path)
    agent.run()
    saved = json.loads((tmp_path / "best_mapping.json").read_text())
    assert saved["solver"]["status"] == "OPTIMAL" and saved["solver"]["proven"] is True
    assert saved["solver"]["latency_s"] == pytest.approx(saved["latency_s"])
    assert read_metrics(tmp_path)[0]["solver_status"] == "OPTIMAL"


class NoSolverTarget(NNPITarget):
    optimum = Target.optimum


def test_optimum_refuses_targets_without_solver():
    env = small_env()
    target = NoSolverTarget(env.target.params, env.workload)
    with pytest.raises(ValueError, match="NoSolverTarget.*no"):
        make_agent(Env(target, env.workload), agent_config("optimum"))


def test_unknown_and_bad_options_name_the_agent():
    with pytest.raises(KeyError, match="'sa'.*temprature"):
        make_agent(small_env(), agent_config("sa", temprature=1.0))
    with pytest.raises(ValueError, match="'ga'.*crossover"):
        make_agent(small_env(), agent_config("ga", crossover="one_point"))
    with pytest.raises(ValueError, match="'ga'.*nothing varies"):
        make_agent(small_env(), agent_config("ga", cxpb=0.0, mutpb=0.0))
    with pytest.raises(ValueError, match="'random'.*batch"):
        make_agent(small_env(), agent_config("random", batch=0))


def test_nevergrad_missing_says_how_to_install(monkeypatch):
    from egrl.agents.nevergrad_search import import_nevergrad

    monkeypatch.setitem(sys.modules, "nevergrad", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[nevergrad\]"'):
        import_nevergrad()


@pytest.mark.slow
def test_egrl_train_runs_a_baseline(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "egrl.cli.train",
            "agent=sa",
            "workload.name=resnet18",
            "budget=60",
            "progress=false",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = read_metrics(run_dir)
    assert int(rows[-1]["iterations"]) == 60 and "temperature" in rows[0]
    saved = json.loads((run_dir / "best_mapping.json").read_text())
    assert saved["agent"] == "sa" and saved["workload"] == "resnet18"


def test_metrics_rows_keep_the_header_of_an_existing_file(tmp_path):
    from egrl.rundir import append_metrics_row

    path = tmp_path / "metrics.csv"
    append_metrics_row(path, ("generation", "best"), {"generation": 1, "best": 0.5})
    # a newer version resuming the run knows one more column: the file keeps its layout
    append_metrics_row(
        path, ("generation", "extra", "best"), {"generation": 2, "extra": 7, "best": 0.6}
    )
    assert path.read_text().splitlines() == ["generation,best", "1,0.5", "2,0.6"]
