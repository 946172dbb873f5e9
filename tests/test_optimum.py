"""The CP-SAT optimum of the NNP-I model against brute force over every map."""

from __future__ import annotations

import numpy as np
import pytest
from ortools.sat.python import cp_model

from egrl import make_env
from hwmodels.nnpi import NNPI
from hwmodels.nnpi.cpmodel import build_model
from hwmodels.nnpi.dominance import maximize
from hwmodels.nnpi.symmetry import add_weight_order, canonical_levels
from tests.nnpi_workloads import random_dag, residual


def maps_numbered(start: int, stop: int, num_nodes: int) -> np.ndarray:
    """int64 ``[stop - start, N, 2]``: maps number ``start..stop-1`` (base-3 digits)."""
    codes = np.arange(start, stop, dtype=np.int64)
    digits = (codes[:, None] // 3 ** np.arange(2 * num_nodes)) % 3
    return digits.reshape(-1, num_nodes, 2)


def brute_force_s(env, batch: int = 50_000) -> float:
    """Lowest latency (s) over all valid maps, by evaluating all 3^(2N) maps."""
    total = 3 ** (2 * env.num_units)
    best = np.inf
    for start in range(0, total, batch):
        ev = env.evaluate(maps_numbered(start, min(start + batch, total), env.num_units))
        best = min(best, ev.latency_s[ev.valid].min(initial=np.inf))
    return best


@pytest.mark.parametrize(("seed", "num_nodes"), [(11, 5), (12, 6), (13, 7)])
def test_optimum_equals_brute_force(seed, num_nodes):
    w = random_dag(num_nodes, np.random.default_rng(seed), max_bytes=3000)
    env = make_env(NNPI(llc_mib=4000 / 2**20, sram_mib=1500 / 2**20), w)
    all_sram = np.full((num_nodes, 2), 2)
    assert not env.evaluate(all_sram).valid[0]  # the capacities bind
    result = env.optimum(time_limit_s=60, workers=1)
    assert result.proven and result.status == "OPTIMAL"
    assert result.gap == 0 and result.bound_s == result.latency_s
    assert result.latency_s == pytest.approx(brute_force_s(env), rel=1e-12)
    ev = env.evaluate(result.mapping)
    assert ev.valid[0] and ev.latency_s[0] == result.latency_s
    assert result.latency_s <= env.baseline_latency_s


def test_optimum_equals_brute_force_with_interchangeable_weights():
    # 5 layers with equal weights and compute: the weight-ordering cut is active.
    w = residual(2, act_bytes=300, weight_bytes=1000, macs=100_000)
    env = make_env(NNPI(llc_mib=2500 / 2**20, sram_mib=2200 / 2**20), w)
    assert not env.evaluate(np.full((w.num_nodes, 2), 2)).valid[0]  # the capacities bind
    parts = build_model(env.target)
    add_weight_order(env.target, parts)
    assert [len(c) for c in parts.weight_classes] == [5]
    result = env.optimum(time_limit_s=60, workers=2)
    assert result.proven
    assert result.latency_s == pytest.approx(brute_force_s(env), rel=1e-12)


def test_canonical_hint_is_valid_and_never_slower():
    w = residual(4, act_bytes=3000, weight_bytes=10_000, macs=1_000_000)
    target = NNPI(llc_mib=40_000 / 2**20, sram_mib=15_000 / 2**20).bind(w)
    parts = build_model(target)
    add_weight_order(target, parts)
    maps = np.random.default_rng(0).integers(0, 3, size=(200, w.num_nodes, 2))
    rectified, _ = target.rectify(maps)
    levels = rectified.reshape(len(maps), -1)
    canon = np.stack([canonical_levels(target, parts, row) for row in levels])
    assert target.is_valid(canon.reshape(rectified.shape)).all()
    before = target.latency_fs(rectified)
    after = target.latency_fs(canon.reshape(rectified.shape))
    assert (after <= before).all() and (after < before).any()


def test_optimum_equals_brute_force_when_levels_are_not_ordered_by_speed():
    # LLC slower than DRAM: the symmetry and dominance cuts do not hold and are left out.
    w = random_dag(5, np.random.default_rng(21), max_bytes=3000)
    env = make_env(NNPI(llc_mib=4000 / 2**20, sram_mib=1500 / 2**20, llc_gbps=50), w)
    result = env.optimum(time_limit_s=60, workers=1)
    assert result.proven
    assert result.latency_s == pytest.approx(brute_force_s(env), rel=1e-12)


def test_maximize_raises_tensors_while_they_fit():
    w = random_dag(10, np.random.default_rng(5), max_bytes=3000)
    target = NNPI(llc_mib=6000 / 2**20, sram_mib=2500 / 2**20).bind(w)
    parts = build_model(target)
    maps = np.random.default_rng(1).integers(0, 3, size=(100, 10, 2))
    rectified, _ = target.rectify(maps)
    raised = np.stack([maximize(target, parts, row) for row in rectified.reshape(100, -1)])
    raised = raised.reshape(rectified.shape)
    assert target.is_valid(raised).all()
    assert (target.latency_fs(raised) <= target.latency_fs(rectified)).all()
    assert (raised != rectified).any()
    for row in raised[:20].reshape(20, -1):  # no free tensor can still move up
        for t, lv in parts.x:
            if lv > row[t]:
                moved = row.copy()
                moved[t] = lv
                assert not target.is_valid(moved.reshape(1, -1, 2))[0]


def test_optimum_on_a_residual_net_beats_or_ties_the_compiler():
    w = residual(5, 30_000, 100_000, 200_000)
    env = make_env(NNPI(llc_mib=0.4, sram_mib=0.1), w)
    result = env.optimum(time_limit_s=30, workers=2)
    ev = env.evaluate(result.mapping)
    assert ev.valid[0] and ev.latency_s[0] == pytest.approx(result.latency_s, rel=1e-12)
    assert result.bound_s <= result.latency_s <= env.baseline_latency_s
    assert result.info["latency_fs"] == env.target.latency_fs(result.mapping[None])[0]


def test_optimum_puts_everything_in_sram_when_it_fits():
    w = random_dag(6, np.random.default_rng(0), max_bytes=2000)
    env = make_env(NNPI(), w)  # everything fits in SRAM: all-SRAM is optimal
    result = env.optimum(time_limit_s=10, workers=1)
    all_sram = np.full((6, 2), 2)
    assert result.proven
    assert result.latency_s == pytest.approx(env.evaluate(all_sram).latency_s[0], rel=1e-12)


def test_a_solver_without_a_map_in_time_answers_the_compilers_map(caplog):
    w = residual(5, 30_000, 100_000, 200_000)
    env = make_env(NNPI(llc_mib=0.4, sram_mib=0.1), w)
    result = env.optimum(time_limit_s=1e-6, workers=1)  # stops before any search
    assert result.status == "UNKNOWN" and not result.proven
    np.testing.assert_array_equal(result.mapping, env.target.native_mapping())
    assert result.latency_s == pytest.approx(env.baseline_latency_s, rel=1e-12)
    assert 0 <= result.bound_s <= result.latency_s and result.gap > 0
    assert "the hint (the native compiler's map) is the best known" in caplog.text


def test_optimum_with_additions_is_exact_where_an_on_chip_level_is_slower_for_small_tensors():
    """A calibrated prior's set-up time per SRAM transfer can make SRAM slower than DRAM
    for a small tensor, so that a node compute-bound with everything in DRAM is
    memory-bound with a tensor in SRAM: the CP model must still price it (it once held
    such nodes at their compute time, and its map then read slower than its objective)."""
    from hwmodels.nnpi.cpmodel import Additions
    from hwmodels.nnpi.figures import ChipFigures
    from hwmodels.nnpi.optimum import solve
    from hwmodels.nnpi.params import LEVELS, NNPIParams

    w = random_dag(5, np.random.default_rng(3), max_bytes=3000)
    params = NNPIParams(llc_mib=8000 / 2**20, sram_mib=6000 / 2**20, peak_tops=3.0)
    target = ChipFigures(params, setup_s=(0.0, 0.0, 2e-7)).bind(w)
    costs = target.costs
    all_dram = costs.memory_fs(np.zeros((1, w.num_nodes, 2), dtype=np.int64))[0]
    all_sram = costs.memory_fs(np.full((1, w.num_nodes, 2), 2, dtype=np.int64))[0]
    slower = (all_dram <= costs.compute_fs) & (all_sram > costs.compute_fs)
    assert slower.any()  # the case at hand: a node compute-bound in DRAM, memory-bound in SRAM
    extra = np.zeros((w.num_nodes, 2, len(LEVELS)), dtype=np.int64)
    result = solve(target, time_limit_s=60, workers=1, additions=Additions(extra_fs=extra))
    assert result.proven
    maps = maps_numbered(0, 3 ** (2 * w.num_nodes), w.num_nodes)
    _, moved = target.rectify(maps)
    best = target.latency_fs(maps[moved == 0]).min()
    assert result.info["latency_fs"] == best
    # such a node's output in SRAM, the rest in DRAM: solved as the only map allowed, the
    # objective is the evaluator's latency (the solve checks it and raises otherwise)
    node = int(np.flatnonzero(slower)[0])
    fixed = np.zeros((w.num_nodes, 2), dtype=np.int64)
    fixed[node, 1] = 2
    assert target.rectify(fixed[None])[1][0] == 0  # a valid map
    assert target.latency_fs(fixed[None])[0] > target.latency_fs(fixed[None] * 0)[0]
    only = solve(target, time_limit_s=60, workers=1, additions=Additions(fixed=fixed))
    np.testing.assert_array_equal(only.mapping, fixed)


@pytest.mark.parametrize(("workers", "interleaved"), [(1, False), (2, True)])
def test_a_deterministic_limit_interleaves_the_workers(workers, interleaved, monkeypatch):
    """Parallel CP-SAT answers one map for one model only with its searches interleaved."""
    from ortools.sat.python import cp_model

    from hwmodels.nnpi.optimum import solve

    seen = []
    original = cp_model.CpSolver.solve

    def spy(self, *args, **kwargs):
        seen.append((self.parameters.interleave_search, self.parameters.max_deterministic_time))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", spy)
    target = NNPI(llc_mib=0.4, sram_mib=0.1).bind(residual(5, 30_000, 100_000, 200_000))
    first = solve(target, time_limit_s=20, workers=workers, deterministic_s=3.0)
    again = solve(target, time_limit_s=20, workers=workers, deterministic_s=3.0)
    ours = [flags for flags in seen if flags[1] == 3.0]  # not the hint's own small solves
    assert ours == [(interleaved, 3.0)] * 2
    np.testing.assert_array_equal(first.mapping, again.mapping)


@pytest.mark.parametrize("max_configs", [243, 1])
def test_optimum_with_bank_conflicts_equals_brute_force(max_configs):
    """Bank conflicts (transfers of a node that meet on a level slow each other) are
    priced exactly: in each configuration's time, or (``max_configs=1``: every layer on
    the fallback roofline) by a boolean per pair of its tensors on the level. With them
    filling SRAM is no longer best, so the optimum spreads a node's tensors."""
    from hwmodels.nnpi.cpmodel import Additions
    from hwmodels.nnpi.figures import ChipFigures
    from hwmodels.nnpi.optimum import solve
    from hwmodels.nnpi.params import LEVELS, NNPIParams

    w = residual(1, act_bytes=300, weight_bytes=1000, macs=100)
    params = NNPIParams(llc_mib=8000 / 2**20, sram_mib=6000 / 2**20, sram_gbps=1000)
    target = ChipFigures(params, conflict=(0.0, 0.5, 2.0)).bind(w)
    maps = maps_numbered(0, 3 ** (2 * w.num_nodes), w.num_nodes)
    _, moved = target.rectify(maps)
    valid = maps[moved == 0]
    best = int(target.latency_fs(valid).min())
    plain = ChipFigures(params).bind(w)
    assert best > plain.latency_fs(valid).min()  # the conflicts change the optimum's cost
    extra = np.zeros((w.num_nodes, 2, len(LEVELS)), dtype=np.int64)
    for additions in (None, Additions(extra_fs=extra)):
        parts = build_model(target, max_configs=max_configs, additions=additions)
        assert (parts.rounding_fs > 0) == (max_configs == 1)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        assert solver.solve(parts.model) == cp_model.OPTIMAL
        levels = np.zeros(2 * w.num_nodes, dtype=np.int64)
        for (t, lv), var in parts.x.items():
            levels[t] = lv if solver.boolean_value(var) else levels[t]
        found = int(target.latency_fs(levels.reshape(1, -1, 2))[0])
        assert found == best
        assert abs(solver.objective_value - best) <= parts.rounding_fs
    result = solve(target, time_limit_s=60, workers=1)
    assert result.proven and result.info["latency_fs"] == best
