"""``agent=smac``: SMAC3's random-forest Bayesian optimisation on the map: budget and run
directory, the start map first, an exact resume by replay, and the line that says how to
install it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from egrl.agents import make_agent
from tests.support.agent_configs import smac_config
from tests.support.command_line import assert_refused, egrl_train_in_process
from tests.support.envs import small_env
from tests.support.metrics import read_metrics
from tests.support.paths import ROOT

#: maps a run of :data:`ASKED_MAPS` asks: the 4 initial ones and 12 of the model's
ASKED_BUDGET = 16
#: a run's asked maps, in order, printed as JSON by a fresh interpreter
ASKED_MAPS = f"""
import json
from egrl.agents import make_agent
from tests.support.agent_configs import smac_config
from tests.support.envs import small_env
agent = make_agent(small_env(), smac_config(budget={ASKED_BUDGET}))
agent.run()
print(json.dumps([agent.decisions.mapping(c).tolist() for c in agent.smac.runhistory.get_configs()]))
"""


def test_run_pays_its_budget_and_resumes_as_the_uninterrupted_run(tmp_path):
    pytest.importorskip("smac")
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    budget = 24  # three batches of 8: resumed from the second's checkpoint, it asks the third
    agent = make_agent(small_env(), smac_config(budget=budget), reference)
    best = agent.run()
    assert agent.ledger.iterations == budget == agent.env.num_evaluations
    assert best.mapping is not None and best.speedup > 0
    assert list((reference / "smac3_output").rglob("runhistory.json"))
    ckpts = sorted((reference / "checkpoints").glob("gen_??????"))
    older = ckpts[0]  # the older of the two a run keeps: the second batch's
    shutil.copytree(older, resumed / "checkpoints" / older.name)

    env = small_env()
    again = make_agent(env, smac_config(budget=budget), resumed)
    assert again.resume()
    start = again.ledger.iterations
    assert 0 < start < budget
    again.run()
    assert read_metrics(resumed) == read_metrics(reference)
    assert env.num_evaluations == budget - start


@pytest.mark.slow
def test_the_asked_maps_do_not_follow_the_string_hash_seed():
    """One seed asks the same maps in any process: a replay on resume relies on it."""
    pytest.importorskip("smac")
    asked = []
    for hash_seed in ("0", "1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", ASKED_MAPS], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        asked.append(json.loads(done.stdout))
    assert len(asked[0]) == ASKED_BUDGET
    assert asked[1] == asked[0] and asked[2] == asked[0]


def test_native_start_is_the_first_configuration():
    pytest.importorskip("smac")
    env = small_env()
    agent = make_agent(env, smac_config(budget=8, start="native"))
    agent.step()
    first = agent.smac.runhistory.get_configs()[0]
    np.testing.assert_array_equal(agent.decisions.mapping(first), env.baseline_mapping)
    assert agent.ledger.best.speedup >= 1.0


def test_without_smac_the_agent_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "smac", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[smac\]"'):
        make_agent(small_env(), smac_config())
    run_dir = tmp_path / "run"
    out = egrl_train_in_process(
        "agent=smac", "workload=resnet18", "budget=10", f"hydra.run.dir={run_dir}", cwd=tmp_path
    )
    assert_refused(
        out,
        "agent=smac is invalid: agent 'smac' needs the optional smac package (SMAC3): "
        'pip install -e ".[smac]"',
    )
    assert list(tmp_path.iterdir()) == []
