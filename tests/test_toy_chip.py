"""The toy chip of ``docs/hwmodels.md``: a hardware model written outside the package.

It is loaded from its file (``examples/toy_chip.py``) through the ``module`` parameter,
and ``egrl-train hwmodel=toy`` runs EGRL and a baseline on it with no change to the
trainer or the agents.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import hwmodels
from egrl import make_env
from egrl.agents.options import resolve_start, start_mappings, start_rule
from egrl.cli.overrides import own_overrides
from tests.nnpi_workloads import layer, random_dag
from tests.support.chips import TOY
from tests.support.command_line import TINY
from tests.support.metrics import read_metrics
from tests.support.paths import ROOT
from workloads.ir import TensorInfo, Workload

BIG, LITTLE = 0, 1


def toy(**params):
    return hwmodels.make("toy", module=TOY, **params)


def three_layers() -> Workload:
    """Three layers of 1 KiB of weights each, in a chain."""
    nodes = [layer(f"l{i}", [f"l{i - 1}" if i else "x"], [64], 64, 1024, 10**6) for i in range(3)]
    return Workload("three", nodes, [TensorInfo("x", (1, 64), 64)])


def test_loading_the_file_twice_registers_the_model_once():
    assert hwmodels.import_module(TOY) is hwmodels.import_module(TOY)
    assert "toy" in hwmodels.names()
    with pytest.raises(ImportError, match="does not exist"):
        hwmodels.make("toy", module=str(ROOT / "examples" / "no_such_chip.py"))


def test_initial_map_is_the_roomiest_core_not_choice_zero():
    env = make_env(toy(), three_layers())
    assert env.initial_mapping.tolist() == [[LITTLE]] * 3
    assert env.baseline_mapping.tolist() == [[BIG]] * 3  # 3 KiB fit on the 4 MiB big core
    assert env.wants_probabilities


def test_an_over_full_core_keeps_the_nodes_the_policy_is_surest_of():
    target = toy(capacity_kib=[1, 1024]).bind(three_layers())  # one layer fits on big
    all_big = np.zeros((1, 3, 1), dtype=np.int64)
    m = target.measure(all_big)  # no probabilities: execution order
    assert m.rectified[0, :, 0].tolist() == [BIG, LITTLE, LITTLE] and not m.valid[0]
    assert m.reassigned_ratio[0] == pytest.approx(2 / 3)
    probs = np.full((1, 3, 1, 2), 0.5)
    probs[0, 2, 0] = [0.9, 0.1]  # the policy is surest that the last layer goes on big
    m = target.measure(all_big, probs=probs)
    assert m.rectified[0, :, 0].tolist() == [LITTLE, LITTLE, BIG]


def test_optimum_is_the_best_of_all_maps():
    dag = random_dag(10, np.random.default_rng(1))
    env = make_env(toy(capacity_kib=[8, 1024], link_gbps=0.001), dag)
    opt = env.optimum()
    assert opt.proven and opt.gap == 0
    ev = env.evaluate(opt.mapping)
    assert ev.valid[0] and ev.latency_s[0] == pytest.approx(opt.latency_s)
    everything = (np.arange(2**10)[:, None] >> np.arange(10)) & 1  # all 1024 maps
    all_ev = env.evaluate(everything[..., None])
    assert opt.latency_s == pytest.approx(all_ev.latency_s[all_ev.valid].min())
    assert opt.latency_s < 0.9 * env.baseline_latency_s  # the native greedy is not optimal


def small_run(*args: str, run_dir) -> subprocess.CompletedProcess:
    tiny = [a for a in TINY if not a.startswith(("workload=", "budget="))]
    argv = own_overrides(["hwmodel=toy", "workload=resnet18", "budget=24", *tiny, *args])
    return subprocess.run(
        [sys.executable, "-m", "egrl.cli.train", *argv, f"hydra.run.dir={run_dir}"],
        cwd=ROOT,  # the config names the module by a path relative to the repository
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("agent", ["egrl", "sa"])
@pytest.mark.slow
def test_egrl_train_runs_on_the_toy_chip(tmp_path, agent):
    out = small_run(f"agent={agent}", run_dir=tmp_path / agent)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(read_metrics(tmp_path / agent)[-1]["iterations"]) == 24
    best = json.loads((tmp_path / agent / "best_mapping.json").read_text())
    assert best["workload"] == "resnet18" and len(best["mapping"]) == 23
    assert {c["core"] for c in best["mapping"].values()} <= {"big", "little"}


def test_local_search_starts_are_the_targets_maps():
    env = make_env(toy(), three_layers())
    rng = np.random.default_rng(0)
    for start, expected in [
        ("initial", env.initial_mapping),
        ("dram", env.initial_mapping),  # NNP-I's name for the initial map
        ("fallback", env.fallback_mapping),
        ("native", env.baseline_mapping),
    ]:
        starts = start_mappings(env, start, 2, rng)
        assert starts.shape == (2, 3, 1) and (starts == expected).all(), start
    assert resolve_start("dram") == "initial" and start_rule().accepts("dram")
    assert not start_rule().accepts("zeros")
    assert start_rule().expected().startswith("one of initial, random, native, fallback")
