"""The NNP-I hardware model: cost formula, capacity rule, rectifier, native compiler."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hwmodels
from hwmodels.nnpi import LEVELS, NNPI, NNPIParams
from tests.nnpi_workloads import layer, random_dag, residual
from workloads.ir import TensorInfo, Workload

DRAM, LLC, SRAM = 0, 1, 2


def three_nodes() -> Workload:
    """a reads the host; b reads a; c reads a and b (so a lives until step 2)."""
    nodes = [
        layer("a", ["x"], [100], 200, weight_bytes=1000, macs=10),
        layer("b", ["a"], [200], 300, weight_bytes=500, macs=1_000_000),
        layer("c", ["a", "b"], [200, 300], 50, vector_ops=20),
    ]
    return Workload("three", nodes, [TensorInfo("x", (1, 100), 100)])


def target_with(workload: Workload, llc_bytes: int = 2**30, sram_bytes: int = 2**30, **kw):
    """A target whose on-chip capacities are exact byte counts."""
    return NNPI(llc_mib=llc_bytes / 2**20, sram_mib=sram_bytes / 2**20, **kw).bind(workload)


def test_default_parameters_in_integer_units():
    p = NNPIParams()
    assert p.fs_per_byte.tolist() == [14881, 1471, 147]
    assert p.fs_per_mac == 40
    assert p.capacity_bytes.tolist() == [32 * 2**30, 24 * 2**20, 4 * 2**20]


def test_registered_and_built_with_parameters():
    assert "nnpi" in hwmodels.names()
    hw = hwmodels.make("nnpi", sram_mib=48)
    assert hw.params.capacity_bytes[SRAM] == 48 * 2**20


def test_latency_formula_three_nodes_by_hand():
    target = NNPI().bind(three_nodes())
    mapping = np.array([[SRAM, LLC], [DRAM, SRAM], [DRAM, DRAM]])
    # a: max(40*10, 1000*147 + 100*14881 + 200*1471)           = 1_929_300
    # b: max(40*1e6, 500*14881 + 200*1471 + 300*147)           = 40_000_000
    # c: max(40*20, 200*1471 + 300*147 + 50*14881)             = 1_082_350
    assert target.costs.node_fs(mapping[None])[0].tolist() == [1_929_300, 40_000_000, 1_082_350]
    m = target.measure(mapping[None])
    assert bool(m.valid[0])
    assert m.latency_s[0] == pytest.approx(43_011_650e-15, rel=1e-12)


def test_heads_and_graph():
    w = random_dag(9, np.random.default_rng(3))
    target = NNPI().bind(w)
    assert target.heads == {"weight": list(LEVELS), "activation": list(LEVELS)}
    assert target.num_units == 9 and target.unit_names == w.node_names
    g = target.graph
    assert g.x.dtype == torch.float64 and tuple(g.x.shape) == (9, 19)
    np.testing.assert_array_equal(g.x.numpy(), w.features)  # raw: the policy side scales
    assert torch.equal(g.edge_index, torch.as_tensor(w.edge_index))
    assert g.node_names == w.node_names and g.name == w.name


def test_initial_map_is_all_dram_and_the_fallback_is_the_native_map():
    target = NNPI().bind(random_dag(9, np.random.default_rng(3)))
    assert target.initial_mapping().tolist() == [[DRAM, DRAM]] * 9
    assert target.measure(target.initial_mapping()[None]).valid[0]
    np.testing.assert_array_equal(target.fallback_mapping(), target.native_mapping())
    assert not target.wants_probabilities


def test_activation_lifetime_counts_in_capacity():
    # SRAM of 450 bytes: a (200 B, live steps 0..2) + b (300 B, live steps 1..2) overflow.
    target = target_with(three_nodes(), sram_bytes=450)
    both = np.array([[DRAM, SRAM], [DRAM, SRAM], [DRAM, DRAM]])
    assert not target.is_valid(both[None])[0]
    rectified, moved = target.rectify(both[None])
    assert rectified[0].tolist() == [[DRAM, SRAM], [DRAM, LLC], [DRAM, DRAM]]  # later one demoted
    assert moved[0] == 300
    # b (300) and c (50) never overlap a's... c overlaps b at step 2 only: 350 fits.
    later = np.array([[DRAM, DRAM], [DRAM, SRAM], [DRAM, SRAM]])
    assert target.is_valid(later[None])[0]
    assert target.measure(later[None]).valid[0]


def test_weights_occupy_every_step():
    # c's activation (50 B) lives at step 2 only, but b's weight (500 B) is there all along.
    target = target_with(three_nodes(), sram_bytes=520)
    mapping = np.array([[DRAM, DRAM], [SRAM, DRAM], [DRAM, SRAM]])
    assert not target.is_valid(mapping[None])[0]
    assert target.rectify(mapping[None])[0][0, 2, 1] == LLC


def test_demotion_cascades_sram_to_llc_to_dram():
    # SRAM holds a's weight (1000 B) and nothing more, so b's weight (500 B) is demoted
    # to LLC. a's activation (200 B) asked for LLC and comes first in priority order, so
    # the demoted weight no longer fits there (200 + 500 > 600) and falls to DRAM.
    target = target_with(three_nodes(), llc_bytes=600, sram_bytes=1000)
    mapping = np.array([[SRAM, LLC], [SRAM, DRAM], [DRAM, DRAM]])
    rectified, moved = target.rectify(mapping[None])
    assert rectified[0].tolist() == [[SRAM, LLC], [DRAM, DRAM], [DRAM, DRAM]]
    total = 1000 + 200 + 500 + 300 + 50
    m = target.measure(mapping[None])
    assert moved[0] == 500 and not m.valid[0]
    assert m.reassigned_ratio[0] == pytest.approx(500 / total)
    assert m.latency_s[0] == pytest.approx(target.latency_fs(rectified)[0] / 1e15)


def test_rectifier_agrees_with_direct_capacity_check_and_is_a_fixed_point():
    rng = np.random.default_rng(0)
    w = random_dag(12, rng, max_bytes=2000)
    target = target_with(w, llc_bytes=6000, sram_bytes=2500)
    maps = rng.integers(0, 3, size=(400, 12, 2))
    valid = target.is_valid(maps)
    assert 0 < valid.sum() < len(maps)  # both kinds present
    rectified, moved = target.rectify(maps)
    assert np.array_equal(moved == 0, valid)  # unchanged exactly when valid
    assert np.array_equal(rectified[valid], maps[valid])
    assert target.is_valid(rectified).all()
    again, moved_again = target.rectify(rectified)
    assert np.array_equal(again, rectified) and not moved_again.any()


def test_rectifier_is_deterministic_and_independent_of_the_batch():
    rng = np.random.default_rng(1)
    w = random_dag(10, rng, max_bytes=3000)
    target = target_with(w, llc_bytes=5000, sram_bytes=2000)
    maps = rng.integers(0, 3, size=(50, 10, 2))
    first, moved = target.rectify(maps)
    second, _ = target.rectify(maps.copy())
    assert np.array_equal(first, second)
    for b in (0, 17, 49):
        alone, moved_alone = target.rectify(maps[b : b + 1])
        assert np.array_equal(alone[0], first[b]) and moved_alone[0] == moved[b]


def test_rectifier_only_moves_down():
    rng = np.random.default_rng(2)
    w = random_dag(10, rng, max_bytes=3000)
    target = target_with(w, llc_bytes=4000, sram_bytes=1500)
    maps = rng.integers(0, 3, size=(200, 10, 2))
    rectified, moved = target.rectify(maps)
    assert (rectified <= maps).all()
    changed = rectified != maps
    sizes = target.tensors.nbytes.reshape(10, 2)
    assert np.array_equal((changed * sizes).sum(axis=(1, 2)), moved)


@pytest.mark.parametrize("passes", [1, 2, 3])
def test_native_map_is_valid_and_beats_all_dram(passes):
    for w in (
        random_dag(30, np.random.default_rng(4), max_bytes=50_000),
        residual(6, 40_000, 120_000, 1000),
    ):
        target = NNPI(llc_mib=0.3, sram_mib=0.1, native_passes=passes).bind(w)
        native = target.native_mapping()
        assert native.shape == (w.num_nodes, 2)
        assert target.is_valid(native[None])[0]
        assert target.measure(native[None]).valid[0]
        all_dram = np.zeros_like(native)
        assert target.latency_fs(native[None])[0] < target.latency_fs(all_dram[None])[0]


def test_second_native_pass_refines_the_first():
    w = random_dag(40, np.random.default_rng(3), max_bytes=80_000)
    targets = [NNPI(llc_mib=0.5, sram_mib=0.2, native_passes=p).bind(w) for p in (1, 2, 3)]
    lat = [t.latency_fs(t.native_mapping()[None])[0] for t in targets]
    assert lat[0] > lat[1] >= lat[2]


def test_sequential_compiler_puts_each_tensor_on_the_fastest_level_that_still_fits():
    w = random_dag(25, np.random.default_rng(8), max_bytes=60_000)
    target = NNPI(llc_mib=0.2, sram_mib=0.08, native="sequential").bind(w)
    native = target.native_mapping()
    # Reference: decide the tensors one by one in execution order with the capacity check.
    levels = np.zeros(2 * w.num_nodes, dtype=np.int64)
    for t in range(len(levels)):
        for level in (SRAM, LLC):
            trial = levels.copy()
            trial[t] = level
            if target.is_valid(trial.reshape(1, w.num_nodes, 2))[0]:
                levels = trial
                break
    assert np.array_equal(native.reshape(-1), levels)
    assert {SRAM, LLC} <= set(levels.tolist())  # the capacities make both levels bind
    density = NNPI(llc_mib=0.2, sram_mib=0.08).bind(w)
    assert not np.array_equal(density.native_mapping(), native)


def test_unknown_native_compiler_is_named():
    with pytest.raises(ValueError, match="'fastest'.*density"):
        hwmodels.make("nnpi", native="fastest")


def test_workload_too_big_for_dram_is_named():
    with pytest.raises(ValueError, match=r"'three'.*2050 bytes"):
        NNPI(dram_gib=1000 / 2**30).bind(three_nodes())


@pytest.mark.parametrize(
    ("params", "error", "match"),
    [
        ({"sram_mib": -1}, ValueError, "sram_mib"),
        ({"dram_gbps": float("nan")}, ValueError, "dram_gbps"),
        ({"sram_kib": 4}, TypeError, "sram_kib"),
        ({"native_passes": 0}, ValueError, "native_passes"),
    ],
)
def test_bad_parameters(params, error, match):
    with pytest.raises(error, match=match):
        hwmodels.make("nnpi", **params)


def test_measure_rejects_bad_shapes_and_choices():
    target = NNPI().bind(three_nodes())
    with pytest.raises(ValueError, match=r"\[B, 3, 2\]"):
        target.measure(np.zeros((1, 4, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="0..2"):
        target.measure(np.full((1, 3, 2), 3))
