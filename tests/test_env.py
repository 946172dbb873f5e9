"""The environment on the NNP-I model: Algorithm 1's rewards, speedups and map checks."""

from __future__ import annotations

import numpy as np
import pytest

from egrl import make_env
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
