"""Fine-tuning: init_from starts a run's GNN policies from a trained policy."""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from egrl import make_env
from egrl.agents.egrl.agent import EGRLAgent
from egrl.agents.egrl.init_from import check_fits, checkpoint_weights, list_snapshots, read_policy
from egrl.checkpoint import load_state
from egrl.rundir import POLICIES_DIR, RunDir
from policies.snapshot import PolicyError, load_actor
from tests.nnpi_workloads import residual
from tests.support.command_line import assert_refused, egrl_train_in_process
from tests.support.egrl_runs import greedy, small_config, train_small_egrl
from tests.support.envs import small_env
from tests.support.units import KIB

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A short EGRL run on the small workload, with policy snapshots and checkpoints."""
    run_dir = tmp_path_factory.mktemp("trained")
    train_small_egrl(run_dir, seed=1, budget=120)
    return run_dir


def first_maps(trainer: EGRLAgent) -> np.ndarray:
    """The population's maps of the first generation, int64 ``[P, N, H]``."""
    maps, _ = trainer.population.act(trainer.graph, torch.Generator().manual_seed(0))
    return maps.numpy()


def test_init_from_a_run_starts_from_its_newest_snapshot(trained):
    env = small_env()
    newest = list_snapshots(trained)[-1]
    tuned = EGRLAgent(env, replace(small_config(), init_from=str(trained)))
    fresh = EGRLAgent(small_env(), small_config())
    maps = first_maps(tuned)
    champion = greedy(load_actor(newest, "champion"), env.graph)
    np.testing.assert_array_equal(maps[0], champion)
    assert not np.array_equal(first_maps(fresh)[0], maps[0])
    learner = greedy(tuned.portfolio.learners[0].actor, env.graph)
    np.testing.assert_array_equal(learner, greedy(load_actor(newest, "learner"), env.graph))
    tuned.run()
    assert tuned.ledger.iterations == tuned.cfg.budget


def test_init_from_a_checkpoint_and_on_another_workload(trained):
    ckpt = sorted((trained / "checkpoints").glob("gen_??????"))[-1]
    policy = read_policy(ckpt)
    assert set(policy.weights) == {"learner", "champion"}
    other = make_env(
        "nnpi",
        residual(6, act_bytes=96 * KIB, weight_bytes=500 * KIB, macs=1_000_000),
        sram_mib=1.0,
        llc_mib=2.0,
    )
    tuned = EGRLAgent(other, replace(small_config(), init_from=str(ckpt)))
    actor = tuned.portfolio.learners[0].actor
    for name, value in actor.state_dict().items():
        assert torch.equal(value, policy.weights["learner"][name]), name


def test_unfit_or_missing_policies_are_named(trained, tmp_path):
    policy = read_policy(trained)
    sizes = {"hidden": 16, "out": 16, "depth": 2, "heads": 2}
    with pytest.raises(PolicyError, match=r"heads have \[3, 3\] choices, this run's \[3, 4\]"):
        check_fits(policy, policy.in_dim, [3, 4], sizes)
    with pytest.raises(PolicyError, match="with 19 features, this run's have 7"):
        check_fits(policy, 7, [3, 3], sizes)
    with pytest.raises(PolicyError, match="add policy.hidden=16 policy.out=16"):
        check_fits(policy, policy.in_dim, [3, 3], {**sizes, "hidden": 32})
    with pytest.raises(PolicyError, match="no such file or directory"):
        read_policy(tmp_path / "missing")
    with pytest.raises(PolicyError, match="no policy snapshot"):
        read_policy(tmp_path)


def test_read_policy_from_a_run_a_snapshot_and_a_checkpoint(trained, tmp_path):
    files = RunDir(trained)
    newest = list_snapshots(trained)[-1]
    policy = read_policy(trained)  # the run's newest snapshot
    assert policy.source == newest.path == files.snapshots()[-1]
    assert set(policy.weights) == {"learner", "champion"}
    layout = (newest.in_dim, newest.num_choices, newest.policy)
    assert (policy.in_dim, policy.num_choices, policy.sizes) == layout
    learner = load_actor(newest, "learner").state_dict()
    for key, value in learner.items():
        assert torch.equal(policy.weights["learner"][key], value)

    first = files.snapshots()[0]
    assert read_policy(first).source == first

    # a checkpoint: the same actors, their sizes read off the weights
    ckpt = files.latest_checkpoint()
    from_ckpt = read_policy(ckpt)
    assert from_ckpt.source == ckpt
    assert (from_ckpt.in_dim, from_ckpt.num_choices, from_ckpt.sizes) == layout
    assert from_ckpt.weights.keys() == checkpoint_weights(load_state(ckpt)).keys()
    assert set(from_ckpt.weights) == {"learner", "champion"}
    for key, value in learner.items():
        assert torch.equal(from_ckpt.weights["learner"][key], value)

    # a run without snapshots: its newest checkpoint
    copy = tmp_path / "no_snapshots"
    shutil.copytree(trained, copy, ignore=shutil.ignore_patterns(POLICIES_DIR))
    fallback = read_policy(copy)
    assert fallback.source == RunDir(copy).latest_checkpoint() == copy / ckpt.relative_to(trained)
    assert fallback.weights.keys() == from_ckpt.weights.keys()


def test_unreadable_policies_name_the_file_and_the_problem(tmp_path):
    with pytest.raises(ValueError, match="not a checkpoint of an egrl, ea or pg run"):
        checkpoint_weights({"agent": {"solver": None}})
    with pytest.raises(ValueError, match="holds no GNN policy"):
        checkpoint_weights({"agent": {"learners": None, "population": None}})
    bad = tmp_path / "policies" / "iter_000001.safetensors"
    bad.parent.mkdir()
    bad.write_bytes(b"not a safetensors file")
    why = re.escape(f"init_from={bad} is invalid: cannot read policy snapshot {bad}")
    with pytest.raises(PolicyError, match=why) as err:
        read_policy(bad)
    assert err.value.path == bad
    with pytest.raises(PolicyError, match=why) as err:
        read_policy(tmp_path)  # the run's unreadable snapshot
    assert err.value.path == bad


def test_egrl_train_refuses_a_bad_init_from_before_any_directory(tmp_path):
    missing = tmp_path / "missing"
    work = tmp_path / "work"
    work.mkdir()
    out = egrl_train_in_process(f"init_from={missing}", cwd=work)
    assert_refused(out, f"init_from={missing} is invalid: no such file or directory")
    assert list(work.iterdir()) == []


def test_the_check_names_agents_without_gnns_and_unfit_policies(trained):
    from egrl.cli.checks import init_from_problem

    task = {
        "init_from": str(trained),
        "agent": {"name": "egrl"},
        "hwmodel": {"name": "nnpi", "params": {}},
        "workload": {"name": "resnet50"},
        "policy": {"hidden": 128, "out": 128, "depth": 4, "heads": 4},
    }
    line = init_from_problem(task)
    assert line.startswith(f"init_from={trained}/policies/iter_") and "add policy.hidden=16" in line
    assert (
        init_from_problem({**task, "policy": {"hidden": 16, "out": 16, "depth": 2, "heads": 2}})
        is None
    )
    line = init_from_problem({**task, "agent": {"name": "sa"}})
    assert (
        line
        == f"init_from={trained} is invalid: agent 'sa' has no GNN policy to start from it (egrl, ea and pg have)"
    )
