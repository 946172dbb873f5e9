"""The multi-chip model: constraints of Equation 5, memory rule, cost model, native compilers."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.mcm import cost
from hwmodels.mcm.constraints import check
from hwmodels.mcm.native import (
    INFEASIBLE,
    cut_bytes,
    dp_split,
    greedy_split,
    range_memory,
    range_time,
)
from hwmodels.mcm.params import MCMParams
from tests.mcm_workloads import contiguous_partitions, figure2, flow_of
from tests.nnpi_workloads import layer, random_dag, residual
from workloads.ir import TensorInfo, Workload


def one(flow, parts):
    return check(flow, np.asarray([parts]))


def test_default_parameters_in_integer_units():
    p = MCMParams()
    assert (p.num_chips, p.sram_bytes, p.ps_per_byte) == (36, 32 * 2**20, 50)
    assert p.ps_per_op == pytest.approx(0.25)
    assert p.chip_names[:2] == ["chip0", "chip1"] and len(p.chip_names) == 36
    with pytest.raises(ValueError, match="num_chips"):
        MCMParams(num_chips=0)
    with pytest.raises(ValueError, match="link_gbps"):
        MCMParams(link_gbps=float("nan"))


# ------------------------------------------------------------------ Equation 5
def test_figure2c_acyclic_dataflow():
    flow = flow_of(figure2())
    v = one(flow, [0, 0, 1, 0, 0])  # n2 on chip 1 feeds n4 on chip 0
    assert v.acyclic_edge[0] >= 0 and not v.static_ok[0]
    e = v.acyclic_edge[0]
    assert (flow.src[e], flow.dst[e]) == (2, 4)
    assert (
        "acyclic"
        in one(flow, [0, 0, 1, 0, 0]).describe(0, flow, np.array([[0, 0, 1, 0, 0]]), list("abcde"))[
            0
        ]
    )


def test_figure2d_no_skipped_chips():
    flow = flow_of(figure2())
    v = one(flow, [0, 0, 0, 2, 2])
    assert v.skipped_chip.tolist() == [1] and v.acyclic_edge[0] < 0 and v.triangle_edge[0] < 0
    assert one(flow, [1, 1, 1, 1, 1]).skipped_chip.tolist() == [0]


def test_figure2e_triangle_dependency():
    flow = flow_of(figure2())
    # n0 -> n2 is chip 0 -> chip 2 directly, n0 -> n1 -> n3 goes chip 0 -> 1 -> 2
    v = one(flow, [0, 1, 2, 2, 2])
    assert v.acyclic_edge[0] < 0 and v.skipped_chip[0] < 0
    e = v.triangle_edge[0]
    assert (flow.src[e], flow.dst[e]) == (0, 2)
    assert not v.static_ok[0]


def test_skip_edge_without_a_longer_path_is_allowed():
    """Chip 1 runs a branch that neither reads chip 0 nor feeds chip 2."""
    nodes = [
        layer("a", ["x"], [4], 4, 10, 10),
        layer("b", ["x"], [4], 4, 10, 10),
        layer("c", ["a"], [4], 4, 10, 10),
    ]
    w = Workload("branches", nodes, [TensorInfo("x", (1, 4), 4)])
    v = one(flow_of(w), [0, 1, 2])
    assert v.ok[0]


def test_figure2f_memory():
    w = figure2()
    flow = flow_of(w, sram_bytes=1000)
    assert one(flow, [0, 0, 1, 1, 2]).ok[0]
    v = one(flow, [0, 0, 1, 1, 1])  # chip 1 holds n2, n3, n4 and two received tensors
    assert v.static_ok[0] and v.memory_chip.tolist() == [1]
    assert v.memory[0].tolist() == [338, 1350, 0]


def test_valid_partitions_accepted_in_a_batch():
    flow = flow_of(figure2())
    parts = np.array([[0] * 5, [0, 0, 1, 1, 1], [0, 1, 1, 1, 1], [0, 0, 1, 1, 2], [0, 0, 0, 1, 2]])
    assert one(flow, parts[0]).ok[0]
    v = check(flow, parts)
    assert v.ok.tolist() == [True, True, True, True, False]


def test_memory_rule_counts_a_tensor_once_per_receiving_chip():
    # a feeds b and c; on chip 1 together they need one buffer for a's tensor
    nodes = [
        layer("a", ["x"], [1], 100),
        layer("b", ["a"], [100], 1),
        layer("c", ["a", "b"], [100, 1], 1),
    ]
    flow = flow_of(Workload("fan", nodes, [TensorInfo("x", (1, 1), 1)]))
    assert one(flow, [0, 1, 1]).memory[0].tolist() == [101, 102, 0]
    assert one(flow, [0, 0, 1]).memory[0].tolist() == [102, 102, 0]


# ------------------------------------------------------------------ cost model
def test_cost_by_hand_on_figure2():
    flow = flow_of(figure2())
    parts = np.array([[0, 0, 1, 1, 1]])
    assert flow.compute_ps.tolist() == [100, 200, 300, 400, 500]
    assert cost.link_bytes(flow, parts)[0].tolist() == [30, 0, 0]
    assert cost.chip_time_ps(flow, parts)[0].tolist() == [330, 1230, 0]
    assert cost.latency_ps(flow, parts).tolist() == [1230]


def test_a_transfer_crosses_every_link_between_its_chips():
    nodes = [
        layer("a", ["x"], [1], 7),
        layer("b", ["x"], [1], 1),
        layer("c", ["x"], [1], 1),
        layer("d", ["a"], [7], 1),
    ]
    flow = flow_of(Workload("long", nodes, [TensorInfo("x", (1, 1), 1)]), num_chips=4)
    parts = np.array([[0, 1, 2, 3]])
    assert cost.link_bytes(flow, parts)[0].tolist() == [7, 7, 7, 0]
    # chips 1 and 2 forward the tensor: it costs them on both links, no memory
    assert cost.chip_time_ps(flow, parts)[0].tolist() == [7, 14, 14, 7]
    assert one(flow, parts[0]).memory[0].tolist() == [8, 2, 2, 8]


def test_cost_vectorised_over_a_batch_equals_one_by_one():
    rng = np.random.default_rng(1)
    flow = flow_of(random_dag(30, rng), num_chips=5)
    parts = np.sort(rng.integers(0, 5, (16, 30)), axis=1)
    batch = cost.chip_time_ps(flow, parts)
    for b in range(16):
        assert (cost.chip_time_ps(flow, parts[b : b + 1])[0] == batch[b]).all()
    assert (cost.memory_bytes(flow, parts)[3] == cost.memory_bytes(flow, parts[3:4])[0]).all()


# ------------------------------------------------------------------ native compilers
def _adjacent_only(flow, parts):
    """Every cross-chip edge goes to the next chip."""
    span = parts[:, flow.dst] - parts[:, flow.src]
    return (span <= 1).all(axis=1)


@pytest.mark.parametrize("seed", range(4))
def test_contiguous_tables_match_the_evaluator(seed):
    rng = np.random.default_rng(seed)
    w = random_dag(12, rng)
    flow = flow_of(w, num_chips=4)
    parts = contiguous_partitions(12, 4)
    bounds = [np.flatnonzero(np.diff(np.concatenate([[-1], p]))) for p in parts]
    mem_table, cut = range_memory(flow), cut_bytes(flow)
    mem = cost.memory_bytes(flow, parts)
    link = cost.link_bytes(flow, parts)
    for b, m, lk in zip(bounds, mem, link):
        ends = np.append(b[1:], 12)
        assert [mem_table[i, j] for i, j in zip(b, ends)] == m[: len(b)].tolist()
        assert cut[ends[:-1]].tolist() == lk[: len(b) - 1].tolist()


@pytest.mark.parametrize("seed", range(6))
def test_dp_is_the_best_adjacent_contiguous_split(seed):
    rng = np.random.default_rng(seed)
    w = random_dag(10, rng)
    flow = flow_of(w, sram_bytes=int(rng.integers(12000, 30000)), num_chips=4)
    parts = contiguous_partitions(10, 4)
    v = check(flow, parts)
    ok = v.ok & _adjacent_only(flow, parts)
    lat = cost.latency_ps(flow, parts)
    best = dp_split(flow)
    if not ok.any():
        assert best is None
        return
    assert best is not None and check(flow, best[None]).ok[0]
    assert cost.latency_ps(flow, best[None])[0] == lat[ok].min()
    # the table agrees with the evaluator on every feasible range
    assert (range_time(flow) < INFEASIBLE).any()


def test_dp_returns_none_when_nothing_fits():
    flow = flow_of(figure2(), sram_bytes=300)
    assert dp_split(flow) is None


@pytest.mark.parametrize("seed", range(4))
def test_greedy_is_valid_contiguous_and_no_better_than_dp(seed):
    rng = np.random.default_rng(seed)
    flow = flow_of(random_dag(200, rng), num_chips=8)
    parts = greedy_split(flow)
    assert check(flow, parts[None]).ok[0]
    assert parts[0] == 0 and ((np.diff(parts) == 0) | (np.diff(parts) == 1)).all()
    assert _adjacent_only(flow, parts[None])[0]
    dp = dp_split(flow)
    assert cost.latency_ps(flow, dp[None])[0] <= cost.latency_ps(flow, parts[None])[0]


def test_greedy_balances_compute_over_all_chips():
    flow = flow_of(residual(50, act_bytes=8, weight_bytes=10, macs=1000), num_chips=8)
    parts = greedy_split(flow)
    assert check(flow, parts[None]).ok[0] and parts.max() == 7
    load = cost.compute_ps(flow, parts[None])[0]
    assert load.max() <= 1.15 * flow.compute_ps.sum() / 8


def test_greedy_moves_on_when_memory_is_full():
    nodes = [layer(f"n{i}", [f"n{i - 1}" if i else "x"], [1], 1, 100, 1) for i in range(6)]
    flow = flow_of(
        Workload("chain", nodes, [TensorInfo("x", (1, 1), 1)]), sram_bytes=210, num_chips=6
    )
    parts = greedy_split(flow)
    assert check(flow, parts[None]).ok[0]
    # compute asks for one node per chip anyway; memory allows at most two
    assert np.bincount(parts).max() <= 2


def test_contiguous_split_can_break_the_triangle_rule():
    """Why the compilers avoid jumped ranges: figure 2 split as [0], [1], [2, 3, 4]."""
    flow = flow_of(figure2())
    parts = np.array([[0, 1, 2, 2, 2]])
    assert not check(flow, parts).static_ok[0]
    assert dp_split(flow) is not None and check(flow, dp_split(flow)[None]).ok[0]


def test_repair_is_a_function_of_the_proposal():
    """The same proposal gets the same repair alone, in another batch and from a new target."""
    import hwmodels

    w = random_dag(12, np.random.default_rng(3), max_bytes=4096)
    make = lambda: hwmodels.make("mcm", num_chips=4, sram_mib=1.0).bind(w)  # noqa: E731
    rng = np.random.default_rng(0)
    maps = rng.integers(0, 4, size=(6, w.num_nodes, 1))
    batch = make().measure(maps).rectified
    target = make()
    alone = np.concatenate([target.measure(maps[i : i + 1]).rectified for i in (5, 0, 3)])
    np.testing.assert_array_equal(alone, batch[[5, 0, 3]])
    assert (batch != maps).any()  # random proposals were repaired, not passed through
