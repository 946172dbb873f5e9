"""The environment on the NNP-I model: rewards, speedups, map checks, policy inputs, probs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from egrl import make_env
from egrl.features import featurise
from hwmodels.nnpi import NNPI
from tests.nnpi_workloads import random_dag


@pytest.fixture(scope="module")
def env():
    w = random_dag(12, np.random.default_rng(7), max_bytes=5000)
    return make_env(NNPI(llc_mib=8000 / 2**20, sram_mib=3000 / 2**20), w)


def test_baseline_is_the_native_map_with_speedup_one(env):
    assert np.array_equal(env.baseline_mapping, env.target.native_mapping())
    ev = env.evaluate(env.baseline_mapping)
    assert ev.valid.tolist() == [True]
    assert ev.speedup[0] == pytest.approx(1.0) and ev.reward[0] == pytest.approx(1.0)
    assert ev.latency_s[0] == env.baseline_latency_s


def test_valid_map_earns_squared_speedup(env):
    all_dram = np.zeros((env.num_units, 2), dtype=np.int64)
    ev = env.evaluate(all_dram)
    assert ev.valid[0] and ev.reassigned_ratio[0] == 0
    speedup = env.baseline_latency_s / ev.latency_s[0]
    assert speedup < 1  # the compiler beats all-DRAM
    assert ev.speedup[0] == pytest.approx(speedup)
    assert ev.reward[0] == pytest.approx(speedup**2)


def test_invalid_map_earns_minus_reassigned_ratio_and_zero_speedup(env):
    all_sram = np.full((env.num_units, 2), 2, dtype=np.int64)
    ev = env.evaluate(all_sram)
    assert not ev.valid[0]
    assert 0 < ev.reassigned_ratio[0] <= 1
    assert ev.speedup[0] == 0
    assert ev.reward[0] == pytest.approx(-ev.reassigned_ratio[0])
    assert env.target.is_valid(ev.rectified).all()
    assert np.isfinite(ev.latency_s[0])  # the rectified map's latency


def test_invalid_reward_scale(env):
    scaled = make_env(NNPI(llc_mib=8000 / 2**20, sram_mib=3000 / 2**20), env.workload, 5.0)
    all_sram = np.full((env.num_units, 2), 2, dtype=np.int64)
    assert scaled.evaluate(all_sram).reward[0] == pytest.approx(
        5.0 * env.evaluate(all_sram).reward[0]
    )


def test_repaired_reward_scores_the_repair_and_best_keeps_it(env):
    from egrl.agents.base import Best

    repaired = make_env(
        NNPI(llc_mib=8000 / 2**20, sram_mib=3000 / 2**20), env.workload, reward="repaired"
    )
    all_sram = np.full((env.num_units, 2), 2, dtype=np.int64)
    ev = repaired.evaluate(all_sram)
    fix = env.evaluate(ev.rectified[0])  # the repair, scored as a proposal of its own
    assert not ev.valid[0] and fix.valid[0]
    assert ev.speedup[0] == pytest.approx(fix.speedup[0]) and ev.speedup[0] > 0
    assert ev.reward[0] == pytest.approx(fix.reward[0])
    best = Best()
    best.update(all_sram[None], ev, np.array([1]))
    assert np.array_equal(best.mapping, ev.rectified[0]) and best.iteration == 1
    plain = Best()
    plain.update(all_sram[None], env.evaluate(all_sram), np.array([1]))
    assert plain.mapping is None  # under EGRL's reward an invalid proposal earns nothing
    with pytest.raises(ValueError, match="unknown reward 'x'"):
        make_env(NNPI(), env.workload, reward="x")


def test_batch_matches_one_by_one(env):
    maps = env.random_mappings(20, np.random.default_rng(0))
    ev = env.evaluate(maps)
    assert len(ev) == 20 and ev.rectified.shape == (20, env.num_units, 2)
    for b in (0, 9, 19):
        one = env.evaluate(maps[b])
        assert one.reward[0] == ev.reward[b] and one.latency_s[0] == ev.latency_s[b]


def test_counts_evaluations(env):
    before = env.num_evaluations
    env.evaluate(env.random_mappings(7, np.random.default_rng(1)))
    assert env.num_evaluations == before + 7


@pytest.mark.parametrize(
    ("maps", "match"),
    [
        (np.zeros((12, 3), dtype=np.int64), r"units x heads"),
        (np.zeros((2, 11, 2), dtype=np.int64), r"got \[2, 11, 2\]"),
        (np.zeros(24, dtype=np.int64), r"shape"),
        (np.full((12, 2), 0.5), "integer"),
    ],
)
def test_check_maps_rejects_bad_shapes(env, maps, match):
    with pytest.raises(ValueError, match=match):
        env.check_maps(maps)


def test_check_maps_names_the_bad_choice(env):
    maps = np.zeros((12, 2), dtype=np.int64)
    maps[4, 1] = 3
    with pytest.raises(ValueError, match=r"unit 'n4' head 'activation' has choice 3"):
        env.evaluate(maps)
    maps[4, 1] = -1
    with pytest.raises(ValueError, match=r"choice -1"):
        env.evaluate(maps)


def test_mapping_to_dict_uses_level_names(env):
    d = env.mapping_to_dict(env.baseline_mapping)
    assert set(d) == set(env.unit_names)
    assert all(set(v) == {"weight", "activation"} for v in d.values())
    assert {c for v in d.values() for c in v.values()} <= {"DRAM", "LLC", "SRAM"}


# ------------------------------------------------------------ the policy's inputs
def test_policy_inputs_are_log1p_of_the_nnpi_features_bit_for_bit(env):
    """Snapshots trained when NNP-I scaled its own features still read the same inputs."""
    x = env.graph.x
    assert x.dtype == torch.float32
    expected = torch.as_tensor(np.log1p(env.workload.features), dtype=torch.float32)
    assert torch.equal(x, expected)
    assert env.graph is env.graph  # featurised once
    assert env.target.graph.x.dtype == torch.float64  # the target's graph stays raw


def test_featurise_is_a_signed_log1p_and_names_bad_features():
    raw = Data(
        x=torch.tensor([[-1e9, -1.0, 0.0], [1.0, 2.5, 1e12]], dtype=torch.float64),
        edge_index=torch.tensor([[0], [1]]),
        node_names=["a", "b"],
    )
    out = featurise(raw)
    expected = np.sign(raw.x.numpy()) * np.log1p(np.abs(raw.x.numpy()))
    np.testing.assert_array_equal(out.x.numpy(), expected.astype(np.float32))
    assert out.x[0, 0] < out.x[0, 1] < 0 == out.x[0, 2]  # monotone and odd
    assert raw.x.dtype == torch.float64 and out.node_names == ["a", "b"]  # input untouched
    raw.x[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"feature 2 of node 'b' is nan"):
        featurise(raw)


def test_env_graph_follows_a_replaced_target_graph(env):
    problem = make_env(NNPI(), env.workload)
    problem.target.graph.x = -torch.ones(env.num_units, 5, dtype=torch.float64)
    assert tuple(problem.graph.x.shape) == (env.num_units, 5)
    assert torch.allclose(problem.graph.x, torch.full((env.num_units, 5), -np.log(2.0)))


# ---------------------------------------------------- initial, fallback, probabilities
def test_initial_and_fallback_maps_come_from_the_target(env):
    np.testing.assert_array_equal(env.initial_mapping, np.zeros((env.num_units, 2)))
    np.testing.assert_array_equal(env.fallback_mapping, env.baseline_mapping)
    assert env.initial_mapping.dtype == np.int64


class WrongInitial(NNPI):
    def bind(self, workload):
        target = super().bind(workload)
        target.initial_mapping = lambda: np.full((workload.num_nodes, 2), 3)
        return target


def test_an_out_of_range_initial_map_is_named(env):
    with pytest.raises(ValueError, match=r"NNPITarget.initial_mapping\(\).*choice 3"):
        make_env(WrongInitial(), env.workload)


def uniform(env, batch: int) -> np.ndarray:
    return np.full((batch, env.num_units, env.num_heads, env.max_choices), 1 / 3)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda p: p[:, :, :, :2], r"must have shape \[2, 12, 2, 3\]"),
        (lambda p: p * 2, r"map 0, unit 'n0', head 'weight' must sum to 1"),
        (lambda p: -p, "non-negative"),
        (lambda p: np.where(p > 0, np.nan, p), "finite"),
    ],
)
def test_probs_are_checked(env, change, match):
    maps = env.random_mappings(2, np.random.default_rng(0))
    with pytest.raises(ValueError, match=match):
        env.evaluate(maps, probs=change(uniform(env, 2)))


def test_probs_reach_only_a_target_that_wants_them(env, monkeypatch):
    seen = []
    measure = env.target.measure

    def spy(maps, **kw):
        seen.append(kw)
        return measure(maps)

    monkeypatch.setattr(env.target, "measure", spy)
    maps = env.random_mappings(2, np.random.default_rng(0))
    probs = torch.full((2, env.num_units, env.num_heads, 3), 1 / 3)
    plain = env.evaluate(maps, probs=probs)
    assert seen == [{}] and not env.wants_probabilities
    monkeypatch.setattr(env.target, "wants_probabilities", True, raising=False)
    assert env.wants_probabilities
    wanted = env.evaluate(maps, probs=probs)
    np.testing.assert_array_equal(seen[1]["probs"], probs.double().numpy())
    env.evaluate(maps)
    assert seen[2] == {"probs": None}
    np.testing.assert_array_equal(plain.reward, wanted.reward)


def test_a_hardware_model_declares_the_reward_of_a_run_that_names_none():
    """mcm scores a run by the repaired partition unless told otherwise; NNP-I by EGRL's
    reward; a config saved before the key existed was EGRL's."""
    from egrl.env import reward_of

    assert make_env("mcm", "resnet18").reward == "repaired"
    assert make_env("mcm", "resnet18", reward="egrl").reward == "egrl"
    assert make_env("nnpi", "resnet18").reward == "egrl"
    assert reward_of({"hwmodel": {"name": "mcm"}, "reward": None}) == "repaired"
    assert reward_of({"hwmodel": {"name": "mcm"}, "reward": "egrl"}) == "egrl"
    assert reward_of({"hwmodel": {"name": "nnpi"}, "reward": None}) == "egrl"
    assert reward_of({"hwmodel": {"name": "mcm"}}) == "egrl"
