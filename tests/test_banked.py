"""The banked memory model: requirements, copies, compilers, rectifier and optimum."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import hwmodels
from hwmodels.banked import Banked
from hwmodels.banked.compilers import fixed_point, global_mapping, local_mapping, rectify
from hwmodels.banked.layouts import FOREIGN, axis_map
from hwmodels.banked.optimum import brute_force, solve
from hwmodels.banked.problem import AXIS, SAME
from hwmodels.banked.requirements import rules
from tests.support.paths import ROOT
from workloads.ir import Node, TensorInfo, Workload


def node(name: str, op: str, inputs: list[str], shapes: list[tuple], out: tuple) -> Node:
    return Node(name, op, inputs, [tuple(s) for s in shapes], tuple(out))


def workload(nodes: list[Node], host: tuple = (1, 8, 4, 4)) -> Workload:
    return Workload("w", nodes, [TensorInfo("x", host, int(np.prod(host)))])


def rule_of(nodes: list[Node], i: int, host: tuple = (1, 8, 4, 4)):
    return rules(workload(nodes, host))[i]


# ------------------------------------------------------------------ requirements
@pytest.mark.parametrize(
    ("op", "shape", "allowed"),
    [
        ("conv", (1, 8, 5, 6), (0,)),
        ("pool", (1, 8, 5, 6), (0,)),
        ("linear", (1, 6, 10), (0, 1)),
        ("linear", (1, 16), (0,)),  # a rank-1 output has one axis only
        ("matmul", (1, 3, 6, 7), (1, 2)),
        ("norm", (1, 6, 10), (0,)),
        ("norm", (1, 8, 5, 6), (0,)),  # channel-first: channels
        ("softmax", (1, 3, 6, 6), (0, 1)),
        ("eltwise", (1, 8, 5, 6), (0, 1, 2)),
        ("eltwise", (1, 8, 1, 6), (0, 2)),  # an extent-1 axis is no layout
        ("layout", (1, 3, 6, 7), (0, 1, 2)),
    ],
)
def test_each_op_requires_its_output_layouts(op, shape, allowed):
    first = node("a", "eltwise", ["x"], [shape], shape)
    assert rule_of([first, node("b", op, ["a"], [shape], shape)], 1, shape).allowed == allowed


def test_each_op_requires_its_input_layouts():
    f, cf, att, kt = (1, 6, 10), (1, 8, 5, 6), (1, 3, 6, 10), (1, 3, 10, 7)
    nodes = [
        node("f", "eltwise", ["x"], [f], f),
        node("c", "eltwise", ["x"], [f], cf),
        node("q", "eltwise", ["x"], [f], att),
        node("k", "eltwise", ["x"], [f], kt),
        node("conv", "conv", ["c", "c"], [cf, cf], cf),  # residual operand fused in
        node("pool", "pool", ["c"], [cf], (1, 8, 2, 3)),
        node("lin", "linear", ["f"], [f], (1, 6, 4)),
        node("mm", "matmul", ["q", "k"], [att, kt], (1, 3, 6, 7)),
        node("add", "eltwise", ["f", "lin"], [f, (1, 6, 4)], f),  # broadcast operand
        node("norm", "norm", ["f"], [f], f),
        node("perm", "layout", ["f"], [f], (1, 10, 6)),
    ]
    got = {
        n.name: [(s.kind, s.axis) for s in r.slots]
        for n, r in zip(nodes, rules(workload(nodes, f)))
    }
    assert got["conv"] == [("axis", 0), ("same", -1)]
    assert got["pool"] == [("axis", 0)]
    assert got["lin"] == [("axis", 1)]  # the contraction: features
    assert got["mm"] == [("axis", 2), ("axis", 1)]  # A's last, B's second-last
    assert got["add"] == [("same", -1), ("any", -1)]
    assert got["norm"] == [("same", -1)]
    assert got["perm"] == [("any", -1)]


def test_axis_map_follows_reshapes():
    assert axis_map((2048, 1, 1), (2048,)) == [0]  # flatten
    assert axis_map((6, 10), (6, 10)) == [0, 1]
    assert axis_map((6, 10), (6, 2, 5)) == [0, None, None]  # a split axis matches nothing
    flat = [
        node("p", "pool", ["x"], [(1, 8, 4, 4)], (1, 8, 1, 1)),
        node("fc", "linear", ["p"], [(1, 8)], (1, 3)),
    ]
    problem = Banked().bind(workload(flat)).problem
    assert problem.kind.tolist() == [AXIS] and problem.static_req.tolist() == [0]
    split = [
        node("a", "eltwise", ["x"], [(1, 6, 10)], (1, 6, 10)),
        node("b", "linear", ["a"], [(1, 6, 2, 5)], (1, 6, 2, 3)),
    ]
    problem = Banked().bind(workload(split, (1, 6, 10))).problem
    assert problem.static_req.tolist() == [FOREIGN]


# ------------------------------------------------------------------ copies
def conflict(**params):
    """conv (8 channels, 4x4) -> relu: 128 bytes read by an op that takes any layout."""
    nodes = [
        node("conv", "conv", ["x"], [(1, 8, 4, 4)], (1, 8, 4, 4)),
        node("relu", "eltwise", ["conv"], [(1, 8, 4, 4)], (1, 8, 4, 4)),
    ]
    return Banked(**params).bind(workload(nodes))


def test_a_conflict_inserts_one_copy_with_its_bytes_and_time():
    target = conflict()
    assert target.problem.kind.tolist() == [SAME]
    cost = target.cost(np.array([[0, 0], [0, 1]]))  # relu in channels, then in rows
    assert cost.copies.tolist() == [0, 1]
    assert cost.onchip_bytes.tolist() == [0, 128] and cost.offchip_bytes.tolist() == [0, 0]
    # relu in rows: 4 banks instead of 8 for its write and its read (62.5 ps per byte
    # of one 16 GB/s bank), plus the on-chip copy of 128 B at 500 GB/s
    bank_fs, copy_fs = 10**15 / 16e9, 10**15 / 500e9
    extra = 2 * 128 * bank_fs / 4 - 2 * 128 * bank_fs / 8 + 128 * copy_fs
    assert cost.latency_fs[1] - cost.latency_fs[0] == round(extra)


def test_a_copy_that_does_not_fit_goes_through_off_chip_memory():
    # 8 banks of 20 B: conv's output fits in channels (16 B a bank) but not in rows (32 B)
    target = conflict(num_banks=8, bank_kib=20 / 1024)
    assert target.problem.fits[0].tolist() == [True, False, False]
    cost = target.cost(np.array([[0, 1]]))
    assert cost.onchip_bytes.tolist() == [0] and cost.offchip_bytes.tolist() == [256]
    assert cost.spilled.tolist() == [1]  # relu's own output, a graph output: no extra bytes


def test_a_spilled_tensor_is_stored_and_loaded_by_each_reader_without_copies():
    shape = (1, 8, 4, 4)
    nodes = [
        node("conv", "conv", ["x"], [shape], shape),
        node("r1", "eltwise", ["conv"], [shape], shape),
        node("r2", "eltwise", ["conv"], [shape], shape),
    ]
    target = Banked(num_banks=8, bank_kib=8 / 1024).bind(workload(nodes))  # nothing fits
    cost = target.cost(np.array([[0, 1, 2]]))
    assert cost.copies.tolist() == [0]
    assert cost.offchip_bytes.tolist() == [128 * 3]


def test_readers_that_need_the_same_layout_share_one_copy():
    shape = (1, 8, 4, 4)
    nodes = [
        node("conv", "conv", ["x"], [shape], shape),
        node("r1", "eltwise", ["conv"], [shape], shape),
        node("r2", "eltwise", ["conv"], [shape], shape),
        node("r3", "eltwise", ["conv"], [shape], shape),
    ]
    cost = Banked().bind(workload(nodes)).cost(np.array([[0, 1, 1, 2], [0, 1, 1, 1]]))
    assert cost.copies.tolist() == [2, 1]
    assert cost.onchip_bytes.tolist() == [256, 128]


# ------------------------------------------------------------------ compilers
SHAPE_OPS = ("conv", "pool", "eltwise", "eltwise", "norm", "softmax", "linear", "matmul", "layout")


def random_workload(num_nodes: int, rng: np.random.Generator) -> Workload:
    """A random DAG of ``num_nodes`` ops on ``[1, a, b, b]`` tensors (so that every op
    keeps the shape), each reading the previous node and sometimes an earlier one."""
    a, b = (int(v) for v in rng.integers(2, 9, size=2))
    shape = (1, a, b, b)
    nodes = []
    for i in range(num_nodes):
        op = str(rng.choice(SHAPE_OPS))
        inputs = ["x"] if i == 0 else [f"n{i - 1}"]
        if (op in ("matmul", "eltwise", "conv") and i >= 1) or (i >= 2 and rng.random() < 0.3):
            inputs.append(f"n{int(rng.integers(0, i))}" if i else "x")
        nodes.append(node(f"n{i}", op, inputs, [shape] * len(inputs), shape))
    return Workload("random", nodes, [TensorInfo("x", shape, int(np.prod(shape)))])


def random_target(seed: int, num_nodes: int):
    rng = np.random.default_rng(seed)
    w = random_workload(num_nodes, rng)
    banks = int(rng.choice([2, 4, 8]))
    return Banked(num_banks=banks, bank_kib=float(rng.choice([0.02, 0.1, 8]))).bind(w)


@pytest.mark.parametrize("seed", range(25))
def test_global_is_a_fixed_point_and_never_worse_than_local(seed):
    target = random_target(seed, 14)
    problem = target.problem
    best = global_mapping(problem)
    assert problem.allowed[np.arange(problem.num_units), best].all()
    np.testing.assert_array_equal(fixed_point(problem, best), best)  # a second pass: no change
    cost = target.cost(np.stack([best, local_mapping(problem)]))
    assert cost.latency_fs[0] <= cost.latency_fs[1]
    np.testing.assert_array_equal(target.native_mapping()[:, 0], best)


def test_global_removes_the_copies_of_a_chain_that_local_splits():
    # linear -> add -> norm -> linear on [1, 128, 768]: local puts every output in tokens
    # (128 banks either way, the outer axis first); the linear reads need features
    f = (1, 128, 768)
    nodes = [
        node("q", "linear", ["x"], [f], f),
        node("add", "eltwise", ["q", "x"], [f, f], f),
        node("o", "linear", ["add"], [f], f),
    ]
    target = Banked().bind(workload(nodes, f))
    cost = target.cost(np.stack([local_mapping(target.problem), global_mapping(target.problem)]))
    assert cost.copies.tolist() == [1, 0]


@pytest.mark.parametrize("seed", range(12))
def test_optimum_matches_brute_force_and_is_never_worse_than_global(seed):
    target = random_target(100 + seed, 7)
    exact = brute_force(target.problem)
    opt = target.optimum(time_limit_s=20, workers=1)
    assert opt.proven and opt.gap == 0.0 and opt.status == "OPTIMAL"
    assert opt.info["latency_fs"] == exact.info["latency_fs"]
    assert opt.latency_s <= target.cost(target.native_mapping()[None]).latency_s[0]
    assert target.measure(opt.mapping[None]).valid.all()
    # from the local map as its hint, so that the solver itself must find the optimum
    cold = solve(target.problem, time_limit_s=20, workers=1, hint=local_mapping(target.problem))
    assert cold.proven and cold.info["latency_fs"] == exact.info["latency_fs"]


# ------------------------------------------------------------------ rectifier
@pytest.mark.parametrize("seed", range(10))
def test_rectified_maps_meet_every_requirement(seed):
    target = random_target(200 + seed, 20)
    rng = np.random.default_rng(seed)
    maps = rng.integers(0, 3, size=(64, target.num_units, 1))
    m = target.measure(maps)
    lay = m.rectified[:, :, 0]
    assert target.problem.allowed[np.arange(target.num_units), lay].all()
    broken = ~target.problem.allowed[np.arange(target.num_units), maps[:, :, 0]]
    np.testing.assert_array_equal(m.valid, ~broken.any(axis=1))
    assert ((m.reassigned_ratio > 0) == ~m.valid).all()
    again = target.measure(m.rectified)
    assert again.valid.all()
    np.testing.assert_array_equal(again.rectified, m.rectified)
    fixed, changed = rectify(target.problem, lay)
    np.testing.assert_array_equal(fixed, lay)
    assert not changed.any()


def test_bad_parameters_name_the_problem():
    with pytest.raises(ValueError, match="num_banks"):
        hwmodels.make("banked", num_banks=0)
    with pytest.raises(ValueError, match="dram_gbps"):
        hwmodels.make("banked", dram_gbps=-1)


# ------------------------------------------------------------------ benchmark
def test_benchmark_writes_its_json_and_its_section(tmp_path):
    spec = importlib.util.spec_from_file_location("banked_bench", ROOT / "benchmarks" / "banked.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    page = tmp_path / "results.md"
    page.write_text("# Results\n\nkept\n")
    out = bench.main(
        [
            "--workloads",
            "resnet50@op",
            "--budget",
            "0",
            "--optimum-time",
            "10",
            "--json",
            str(tmp_path / "banked.json"),
            "--page",
            str(page),
        ]
    )
    text = page.read_text()
    assert (
        "kept" in text and "<!-- section: banked (generated by python benchmarks/banked.py" in text
    )
    rows = out["results"][0]["maps"]
    assert rows["global"]["onchip_bytes"] <= rows["local"]["onchip_bytes"]
    assert rows["optimum"]["memory_time_us"] <= rows["global"]["memory_time_us"]
    assert (tmp_path / "banked.json").exists()
