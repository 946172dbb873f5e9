"""The multi-chip compiler (the constraint solver in FIX and SAMPLE mode) and the target."""

from __future__ import annotations

import numpy as np
import pytest

import hwmodels
from hwmodels.mcm import MCM, MCMTarget
from hwmodels.mcm.constraints import check
from hwmodels.mcm.native import greedy_split
from hwmodels.mcm.solver import ConstraintSolver
from tests.mcm_workloads import figure2, flow_of
from tests.nnpi_workloads import layer, random_dag, residual
from workloads.ir import TensorInfo, Workload


def solver_for(workload, mode, num_chips=4):
    flow = flow_of(workload, num_chips=num_chips)
    return flow, ConstraintSolver(flow, greedy_split(flow), mode)


@pytest.mark.parametrize("mode", ["fix", "sample"])
def test_output_meets_every_static_constraint(mode):
    rng = np.random.default_rng(7)
    w = residual(3, act_bytes=8, weight_bytes=10, macs=100)  # 10 nodes
    flow, solver = solver_for(w, mode)
    proposals = rng.integers(0, 4, (2000, flow.num_nodes))
    probs = rng.dirichlet(np.ones(4), size=(2000, flow.num_nodes))
    out = solver.repair(proposals, rng, probs if mode == "sample" else None)
    assert check(flow, out, memory=False).static_ok.all()
    assert solver.gave_up < 20  # the fallback answers almost never


@pytest.mark.parametrize("mode", ["fix", "sample"])
def test_valid_proposals_come_back_unchanged(mode):
    rng = np.random.default_rng(3)
    flow, solver = solver_for(random_dag(12, rng), mode)
    proposals = np.sort(rng.integers(0, 4, (500, flow.num_nodes)), axis=1)
    proposals -= proposals[:, :1]
    ok = check(flow, proposals, memory=False).static_ok
    assert ok.sum() > 20 and (~ok).sum() > 20
    out = solver.repair(proposals, rng)
    assert (out[ok] == proposals[ok]).all()
    assert (out[~ok] != proposals[~ok]).any(axis=1).all()


def test_fix_keeps_every_proposed_chip_still_in_its_domain():
    """A valid partition with one node moved, that node visited last: only it changes."""
    rng = np.random.default_rng(11)
    w = residual(10, act_bytes=8, weight_bytes=10, macs=100)  # 31 nodes
    flow, solver = solver_for(w, "fix", num_chips=6)
    base = greedy_split(flow)
    trials = 0
    for _ in range(200):
        u = int(rng.integers(flow.num_nodes))
        prop = base.copy()
        prop[u] = int(rng.integers(6))
        if check(flow, prop[None], memory=False).static_ok[0]:
            continue
        trials += 1
        order = np.append(rng.permutation(np.delete(np.arange(flow.num_nodes), u)), u)
        out = solver.repair(prop[None], rng, order=order)[0]
        assert (out != prop).sum() == 1 and out[u] != prop[u]
    assert trials > 50


def test_sample_follows_the_distribution_restricted_to_the_domain():
    """a -> b on 3 chips: a must take chip 0 and b chip 0 or 1, in either visiting order."""
    nodes = [layer("a", ["x"], [1], 1, 1, 1), layer("b", ["a"], [1], 1, 1, 1)]
    w = Workload("pair", nodes, [TensorInfo("x", (1, 1), 1)])
    flow, solver = solver_for(w, "sample", num_chips=3)
    rng = np.random.default_rng(0)
    n = 4000
    probs = np.tile(np.array([[0.3, 0.3, 0.4], [0.2, 0.3, 0.5]]), (n, 1, 1))
    out = solver.repair(np.full((n, 2), 2), rng, probs)  # (2, 2) skips chips 0 and 1
    assert (out[:, 0] == 0).all()
    share = (out[:, 1] == 1).mean()  # 0.3 / (0.2 + 0.3) = 0.6; sd 0.0077
    assert abs(share - 0.6) < 0.03


def test_sample_with_zero_mass_on_the_domain_draws_uniformly():
    nodes = [layer("a", ["x"], [1], 1, 1, 1), layer("b", ["a"], [1], 1, 1, 1)]
    w = Workload("pair", nodes, [TensorInfo("x", (1, 1), 1)])
    flow, solver = solver_for(w, "sample", num_chips=3)
    rng = np.random.default_rng(1)
    probs = np.tile(np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]), (2000, 1, 1))
    out = solver.repair(np.full((2000, 2), 2), rng, probs)
    assert abs((out[:, 1] == 1).mean() - 0.5) < 0.05


# ------------------------------------------------------------------ the target
def test_registered_and_made_with_parameters():
    assert "mcm" in hwmodels.names()
    hw = hwmodels.make("mcm", num_chips=4, sram_mib=1, mode="sample", native="contiguous-dp")
    assert isinstance(hw, MCM) and hw.params.num_chips == 4
    with pytest.raises(TypeError, match="unknown mcm parameter"):
        hwmodels.make("mcm", chips=4)
    with pytest.raises(ValueError, match="solver mode"):
        hwmodels.make("mcm", mode="guess")


@pytest.mark.parametrize("native", ["greedy", "contiguous-dp"])
def test_target_answers(native):
    w = residual(6, act_bytes=64, weight_bytes=1000, macs=10_000)
    target = MCM(num_chips=4, native=native).bind(w)
    assert isinstance(target, MCMTarget) and target.heads == {
        "chip": [f"chip{i}" for i in range(4)]
    }
    assert target.num_units == w.num_nodes and target.unit_names == w.node_names
    assert target.graph.x.shape == (w.num_nodes, 19)
    assert target.graph.x.max() > 100  # raw features, not log-scaled
    for m in (target.native_mapping(), target.initial_mapping(), target.fallback_mapping()):
        assert m.shape == (w.num_nodes, 1) and target.violations(m[None]).ok[0]
    got = target.measure(target.native_mapping()[None])
    assert got.valid.tolist() == [True] and got.reassigned_ratio.tolist() == [0.0]
    assert got.latency_s[0] == target.latency_ps(target.native_mapping()[None])[0] / 1e12
    assert target.wants_probabilities is False


def test_measure_repairs_and_scores():
    w = residual(6, act_bytes=64, weight_bytes=1000, macs=10_000)
    target = MCM(num_chips=4, mode="sample").bind(w)
    assert target.wants_probabilities
    rng = np.random.default_rng(0)
    maps = rng.integers(0, 4, (20, w.num_nodes, 1))
    m = target.measure(maps)
    assert m.rectified.shape == maps.shape
    assert target.violations(m.rectified).static_ok.all()
    changed = (m.rectified != maps).mean(axis=(1, 2))
    assert np.allclose(m.reassigned_ratio, changed)
    assert (m.valid == (changed == 0)).all() and np.isfinite(m.latency_s).all()
    probs = np.zeros((20, w.num_nodes, 1, 4))
    probs[..., 0] = 1.0
    m = target.measure(maps, probs)
    assert (m.rectified == 0).all()  # all of the mass on chip 0, which is always allowed
    with pytest.raises(ValueError, match="shape"):
        target.measure(maps[:, :, 0])
    with pytest.raises(ValueError, match="chips 0..3"):
        target.measure(maps + 4)


def test_a_repaired_map_that_overflows_memory_becomes_the_native_one():
    w = figure2()
    target = MCM(num_chips=3, sram_mib=1000 / 2**20).bind(w)
    native = target.native_mapping()
    over = np.array([[0, 0, 1, 1, 1]])[..., None]  # statically valid, chip 1 over 1000 bytes
    assert target.violations(over).static_ok[0] and not target.violations(over).ok[0]
    m = target.measure(over)
    assert (m.rectified[0] == native).all() and (native != over[0]).any()
    assert m.valid.tolist() == [False]
    assert m.reassigned_ratio[0] == (native != over[0]).mean()
    assert m.latency_s[0] == target.latency_ps(native[None])[0] / 1e12


@pytest.mark.parametrize("mode", ["fix", "sample"])
def test_rectified_maps_are_accepted_unchanged(mode):
    rng = np.random.default_rng(5)
    w = random_dag(8, rng)
    resident = int((w.weight_bytes + w.output_bytes + w.graph_input_bytes).sum())
    target = MCM(num_chips=3, sram_mib=resident / 2 / 2**20, mode=mode).bind(w)
    maps = rng.integers(0, 3, (200, 8, 1))
    m = target.measure(maps)
    assert target.violations(m.rectified).ok.all()
    again = target.measure(m.rectified)
    assert again.valid.all() and (again.rectified == m.rectified).all()
    assert (m.rectified[m.valid] == maps[m.valid]).all()


def test_a_workload_that_fits_no_split_is_rejected():
    with pytest.raises(ValueError, match="does not fit"):
        MCM(num_chips=3, sram_mib=300 / 2**20).bind(figure2())


def test_env_speedup_is_throughput_over_the_heuristic():
    from egrl import make_env

    w = residual(8, act_bytes=64, weight_bytes=1000, macs=10_000)
    env = make_env(MCM(num_chips=4), w, reward="egrl")  # mcm's own default is repaired
    ev = env.evaluate(env.baseline_mapping[None])
    assert ev.valid.tolist() == [True] and ev.speedup[0] == pytest.approx(1.0)
    rng = np.random.default_rng(0)
    ev = env.evaluate(env.random_mappings(8, rng))
    assert (ev.reward[~ev.valid] <= 0).all()
