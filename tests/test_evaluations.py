"""A run's record of every answered map (``record_evaluations``, egrl/evaluations.py):
its rows against the run's counts, the target's values (the TPU game's return), the best
map by each value, and a resumed run that records each map once."""

from __future__ import annotations

import numpy as np
import pytest

from egrl.agents import make_agent, train_config
from egrl.env import make_env
from egrl.rundir import EVALUATION_COLUMNS, RunDir
from hwmodels.tpu.game import ACTIONS

WORKLOAD = "resnet50@op"


def config(budget: int, record: bool = True) -> object:
    return train_config(
        {
            "seed": 0,
            "budget": budget,
            "progress": False,
            "checkpoint_every": 1,
            "record_evaluations": record,
            "agent": {"name": "random-legal", "batch": 8},
        }
    )


@pytest.fixture(scope="module")
def env():
    return make_env(hwmodel="tpu-cmem", workload=WORKLOAD)


def test_the_record_has_every_answered_map_and_the_game_return(env, tmp_path, one_thread):
    agent = make_agent(env, config(16), tmp_path)
    agent.run()
    files = RunDir(tmp_path)
    rec = files.read_evaluations()
    assert tuple(rec) == EVALUATION_COLUMNS + ("game_return",)
    assert rec["proposal"].tolist() == list(range(1, 17))
    assert rec["iterations"].tolist() == list(range(1, 17)) and (rec["paid"] == 1).all()
    assert rec["generation"].tolist() == [1] * 8 + [2] * 8
    assert (np.diff(rec["wall_s"]) >= 0).all() and set(rec["source"]) == {"random-legal"}
    walls = [float(r["wall_s"]) for r in files.read_metrics_rows()]
    assert rec["wall_s"].max() <= walls[-1]
    # the record's game return is the game's own (the agent's best by return)
    assert rec["game_return"].max() == pytest.approx(agent.best_return, rel=1e-12)
    best = files.read_best_map()["best_by"]["game_return"]
    assert best["value"] == rec["game_return"].max()
    assert best["iteration"] == int(rec["iterations"][np.argmax(rec["game_return"])])
    actions = [ACTIONS.index(best["mapping"][u]["action"]) for u in env.unit_names]
    assert actions == agent.best_actions.tolist()
    assert rec["latency_s"].min() == pytest.approx(agent.ledger.best.latency_s)


def test_a_resumed_run_records_each_map_once(env, tmp_path, one_thread):
    make_agent(env, config(16), tmp_path).run()
    whole = tmp_path / "whole"
    make_agent(env, config(32), whole).run()
    files = RunDir(tmp_path)
    # a killed attempt answered maps past its last checkpoint: they are answered again
    stray = {c: 0 for c in EVALUATION_COLUMNS} | {"proposal": 17, "source": "stray"}
    files.append_evaluations(EVALUATION_COLUMNS + ("game_return",), [stray])
    resumed = make_agent(env, config(32), tmp_path)
    assert resumed.resume()
    resumed.run()
    got, want = files.read_evaluations(), RunDir(whole).read_evaluations()
    assert got["proposal"].tolist() == list(range(1, 33))
    for column in ("iterations", "paid", "generation", "latency_s", "game_return"):
        np.testing.assert_array_equal(got[column], want[column])
    best, want_best = files.read_best_map()["best_by"], RunDir(whole).read_best_map()["best_by"]
    assert best == want_best


def test_no_record_unless_asked(env, tmp_path, one_thread):
    make_agent(env, config(8, record=False), tmp_path).run()
    files = RunDir(tmp_path)
    assert not files.evaluations.exists() and "best_by" not in files.read_best_map()
