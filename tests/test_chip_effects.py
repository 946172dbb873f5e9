"""The example chip's effects a datasheet model does not have: compute efficiency by
operator class, weights streamed during the previous node, SRAM bank conflicts and
bandwidth below the datasheet's; each moves latencies the way it should, and off they
leave every answer as it was."""

from __future__ import annotations

import json
import runpy
import subprocess

import numpy as np
import pytest

import workloads
from tests.support.chips import CHIP
from tests.support.paths import PY, ROOT

HEADS = {"weight": ["DRAM", "LLC", "SRAM"], "activation": ["DRAM", "LLC", "SRAM"]}
DRAM, LLC, SRAM = 67.2e9, 680e9, 6800e9
RATE = 25e12  # the chip's default MACs per second


def conv(name, src, cin, cout, kernel, macs, weight, groups=1):
    return {
        "name": name,
        "op_type": "conv",
        "inputs": [src],
        "input_shapes": [[1, cin, 16, 16]],
        "output_shape": [1, cout, 16, 16],
        "weight_bytes": weight,
        "macs": macs,
        "vector_ops": 256 * cout,
        "attrs": {"groups": groups, "kernel": [kernel, kernel]},
    }


#: host input x -> stem -> dw -> pw -> c3 -> pool; qk reads pw and c3; fc reads pool
WORKLOAD = {
    "name": "classes",
    "dtype_bytes": 1,
    "nodes": [
        conv("stem", "x", 3, 16, 3, 110592, 432),
        conv("dw", "stem", 16, 16, 3, 36864, 144, groups=16),
        conv("pw", "dw", 16, 32, 1, 131072, 512),
        conv("c3", "pw", 32, 32, 3, 2359296, 9216),
        {
            "name": "qk",
            "op_type": "matmul",
            "inputs": ["pw", "c3"],
            "input_shapes": [[1, 32, 16, 16], [1, 32, 16, 16]],
            "output_shape": [1, 32, 32],
            "weight_bytes": 0,
            "macs": 262144,
            "vector_ops": 0,
            "attrs": {},
        },
        {
            "name": "pool",
            "op_type": "pool",
            "inputs": ["c3"],
            "input_shapes": [[1, 32, 16, 16]],
            "output_shape": [1, 32, 1, 1],
            "weight_bytes": 0,
            "macs": 0,
            "vector_ops": 8192,
            "attrs": {"kernel": [16, 16]},
        },
        {
            "name": "fc",
            "op_type": "linear",
            "inputs": ["pool"],
            "input_shapes": [[1, 32]],
            "output_shape": [1, 10],
            "weight_bytes": 320,
            "macs": 320,
            "vector_ops": 10,
            "attrs": {},
        },
    ],
}
CLASSES = ["small-channel", "depthwise", "pointwise", "conv", "attention", "vector", "linear"]

#: a compute-bound node, then a node whose weight is all it moves
PAIR = {
    "name": "pair",
    "dtype_bytes": 1,
    "nodes": [
        {
            "name": "big",
            "op_type": "conv",
            "inputs": ["x"],
            "input_shapes": [[1, 16, 8, 8]],
            "output_shape": [1, 100],
            "weight_bytes": 100,
            "macs": 25_000_000,  # 1 us at 25 tera-MACs/s
            "attrs": {"groups": 1, "kernel": [3, 3]},
        },
        {
            "name": "fc",
            "op_type": "linear",
            "inputs": ["big"],
            "input_shapes": [[1, 100]],
            "output_shape": [1, 1],
            "weight_bytes": 33600,  # 0.5 us from DRAM
            "macs": 1,
            "attrs": {},
        },
    ],
}


@pytest.fixture(scope="module")
def module() -> dict:
    return runpy.run_path(CHIP)


def chip(module, *argv, workload=WORKLOAD):
    return module["Chip"](workload, HEADS, module["parse_args"](list(argv)))


def valid_maps(module, argv, count=20, seed=0) -> np.ndarray:
    """Random maps ``[count, N, 2]`` of ``WORKLOAD``, as the compiler of ``argv`` places them."""
    c = chip(module, *argv)
    maps = np.random.default_rng(seed).integers(0, 3, (count, c.n, 2))
    return np.array(c.check(maps)["rectified"])


def test_each_node_gets_its_operator_class(module):
    assert [module["op_class"](n) for n in WORKLOAD["nodes"]] == CLASSES


def test_op_efficiency_slows_its_class_alone(module):
    plain = chip(module)
    slow = chip(module, "--op-efficiency", "pointwise=0.5,attention=0.25")
    factor = np.ones(len(CLASSES))
    factor[CLASSES.index("pointwise")] = 2.0
    factor[CLASSES.index("attention")] = 4.0
    np.testing.assert_allclose(slow.compute, plain.compute * factor, rtol=1e-12)
    for mapping in valid_maps(module, []):
        assert slow.latency(mapping) >= plain.latency(mapping)
    # all in a large SRAM the pointwise conv is compute-bound: half its rate shows
    roomy, roomy_slow = (
        chip(module, "--sram-kib", "64"),
        chip(module, "--sram-kib", "64", "--op-efficiency", "pointwise=0.5"),
    )
    all_sram = np.full((plain.n, 2), 2)
    assert roomy_slow.latency(all_sram) > roomy.latency(all_sram)


def test_naming_vector_counts_vector_ops_at_its_share(module):
    plain, vector = chip(module), chip(module, "--op-efficiency", "vector=0.25")
    ops = np.array([n["vector_ops"] for n in WORKLOAD["nodes"]], dtype=float)
    np.testing.assert_allclose(vector.compute, plain.compute + ops / (RATE * 0.25), rtol=1e-12)
    assert plain.compute[CLASSES.index("vector")] == 0  # the roofline's chip: MACs only


def test_a_prefetched_weight_hides_behind_a_compute_bound_node(module):
    """big computes 1 us and moves its weight and output in SRAM and its 1 KiB host input
    from DRAM, 0.02 us: fc's 0.5 us DRAM weight streams in meanwhile and costs nothing."""
    plain = chip(module, workload=PAIR)
    fetch = chip(module, "--weight-prefetch", workload=PAIR)
    weight_in_dram = np.array([[2, 2], [0, 2]])
    assert plain.latency(weight_in_dram) == pytest.approx(
        1e-6 + 33600 / DRAM + (100 + 1) / SRAM, rel=1e-12
    )
    assert fetch.latency(weight_in_dram) == pytest.approx(1e-6 + (100 + 1) / SRAM, rel=1e-9)
    # at 1000x the MAC rate big is memory-bound: nothing to hide the weight in
    fast = chip(module, "--weight-prefetch", "--tmacs", "25000", workload=PAIR)
    fast_plain = chip(module, "--tmacs", "25000", workload=PAIR)
    assert fast.latency(weight_in_dram) == pytest.approx(
        fast_plain.latency(weight_in_dram), rel=1e-12
    )
    # never slower than without (up to the order of the sums)
    for mapping in valid_maps(module, []):
        fetched = chip(module, "--weight-prefetch").latency(mapping)
        assert fetched <= chip(module).latency(mapping) * (1 + 1e-12)


def test_prefetch_hides_part_of_a_weight_larger_than_the_idle_time(module):
    heavy = json.loads(json.dumps(PAIR))
    heavy["nodes"][1]["weight_bytes"] = 336000  # 5 us from DRAM, big's idle 0.98 us hidden
    plain, fetch = chip(module, workload=heavy), chip(module, "--weight-prefetch", workload=heavy)
    mapping = np.array([[2, 2], [0, 2]])
    idle = 1e-6 - (100 + 100) / SRAM - 16 * 64 / DRAM
    assert plain.latency(mapping) - fetch.latency(mapping) == pytest.approx(idle, rel=1e-9)


def test_bank_conflicts_slow_tensors_sharing_sram(module):
    """All in SRAM: each node's SRAM time grows by 1 + F x (tensors there - 1)."""
    plain = chip(module, "--sram-kib", "64")
    conflicts = chip(module, "--sram-kib", "64", "--bank-conflicts", "0.5")
    all_sram = np.full((plain.n, 2), 2)
    sram_times = plain.level_times(all_sram)[0][:, 2]
    expected = conflicts.level_times(all_sram)[0][:, 2]
    streams = plain.streams(np.full(plain.n, 2), np.full(plain.n, 2))[:, 2]
    np.testing.assert_allclose(expected, sram_times * (1 + 0.5 * (streams - 1)), rtol=1e-12)
    assert streams[CLASSES.index("conv")] == 3  # c3: its weight, pw's output, its output
    assert conflicts.latency(all_sram) > plain.latency(all_sram)
    # nothing in SRAM: nothing conflicts
    in_llc = np.ones((plain.n, 2), dtype=np.int64)
    assert conflicts.latency(in_llc) == pytest.approx(plain.latency(in_llc), rel=1e-12)


def test_a_level_below_its_datasheet_bandwidth(module):
    plain, slow = chip(module), chip(module, "--bandwidth-fraction", "DRAM=0.7")
    all_dram = np.zeros((plain.n, 2), dtype=np.int64)
    times, slow_times = plain.level_times(all_dram)[0], slow.level_times(all_dram)[0]
    np.testing.assert_allclose(slow_times[:, 0], times[:, 0] / 0.7, rtol=1e-12)
    assert slow.latency(all_dram) > plain.latency(all_dram)
    in_llc = np.ones((plain.n, 2), dtype=np.int64)  # only the host input still in DRAM
    assert slow.latency(in_llc) < slow.latency(all_dram)


def test_small_transfers_reach_less_of_the_bandwidth(module):
    """--half-bandwidth-kib DRAM=1: every DRAM transfer takes 1 KiB longer."""
    plain, bursty = chip(module), chip(module, "--half-bandwidth-kib", "DRAM=1")
    all_dram = np.zeros((plain.n, 2), dtype=np.int64)
    streams = plain.streams(np.zeros(plain.n, int), np.zeros(plain.n, int))[:, 0]
    np.testing.assert_allclose(
        bursty.level_times(all_dram)[0][:, 0],
        plain.level_times(all_dram)[0][:, 0] + streams * 1024 / DRAM,
        rtol=1e-12,
    )
    assert bursty.latency(all_dram) > plain.latency(all_dram)


@pytest.mark.parametrize(
    "base",
    [
        [],
        ["--shared-bandwidth", "--sram-kib", "64"],
        ["--dram-access-us", "2", "--llc-contention", "0.5", "--llc-kib", "100"],
    ],
)
def test_effects_at_their_neutral_values_change_nothing(module, base):
    """Flags off is the old chip: the same floats, bit for bit, with every effect at the
    value that turns it off as without the flags."""
    neutral = [
        "--op-efficiency",
        "conv=1,linear=1",
        "--bank-conflicts",
        "0",
        "--bandwidth-fraction",
        "DRAM=1,SRAM=1",
        "--half-bandwidth-kib",
        "LLC=0",
    ]
    maps = valid_maps(module, base)
    old, same = chip(module, *base), chip(module, *base, *neutral)
    assert [old.latency(m) for m in maps] == [same.latency(m) for m in maps]
    assert old.level_effects == same.level_effects


def test_the_default_chip_is_still_the_serial_roofline(module):
    c = chip(module)
    for mapping in valid_maps(module, []):
        bw = np.array([DRAM, LLC, SRAM])
        moved = [
            c.weight / bw[mapping[:, 0]],
            c.output / bw[mapping[:, 1]],
            np.bincount(c.dst, c.edge_bytes / bw[mapping[c.src, 1]], minlength=c.n),
            c.host_bytes / DRAM,
        ]
        expected = np.maximum(c.macs / RATE, sum(moved)).sum()
        assert c.latency(mapping) == pytest.approx(expected, rel=1e-12)


def test_a_named_chip_is_its_flags_and_later_flags_still_apply(module):
    for name, flags in module["CHIPS"].items():
        assert vars(module["parse_args"](["--chip", name])) == {
            **vars(module["parse_args"](list(flags))),
            "chip": name,
        }
    assert module["parse_args"](["--chip", "ops", "--tmacs", "25"]).tmacs == 25.0
    mislead = chip(module, "--chip", "mislead", "--sram-kib", "64")
    assert mislead.bank_conflicts == 1.0 and mislead.bandwidth_fraction.tolist() == [1, 1, 0.083]


def test_mislead_punishes_the_level_the_datasheet_calls_fastest(module):
    """On ResNet-50 the compiler's map keeps every activation in SRAM: on the study chip
    that beats the same map with them in the LLC, on ``mislead`` it loses to it."""
    resnet = workloads.load("resnet50").to_dict()
    for name, sram_wins in ((None, True), ("mislead", False)):
        argv = ["--chip", name] if name else ["--shared-bandwidth", "--sram-kib", "2048"]
        c = chip(module, *argv, "--tmacs", "50", workload=resnet)
        compiler = np.array(c.baseline()["mapping"])
        in_llc = compiler.copy()
        in_llc[:, 1] = 1
        assert c.check(in_llc[None])["valid"] == [True]
        assert (c.latency(compiler) < c.latency(in_llc)) is sram_wins


def test_the_benchmark_gives_each_named_chip_the_study_datasheet():
    bench = runpy.run_path(str(ROOT / "benchmarks" / "chip_effects.py"))
    study = {"sram_mib": 2.0, "llc_mib": 24.0, "dram_gbps": 67.2, "llc_gbps": 680.0}
    for name in ["study", *bench["NAMED"]]:
        assert bench["datasheet"](bench["flags_of"](name)) == {
            **study,
            "sram_gbps": 6800.0,
            "peak_tops": 100.0,
        }
    row = {"chip": "c", "compiler_us": 10.0, "datasheet_speedup": 1.2, "datasheet_valid": True}
    text = bench["table"]([{**row, "solve_s": 1.0, "proven": True, "ea": [1.5, 1.0]}], 400)
    assert text.splitlines()[-1] == "| c | 10.0 | 1.2000 | 1.0 | 1.5000, 1.0000 | 80.0% |"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--op-efficiency", "fft=0.5"], "'fft' is not one of"),
        (["--op-efficiency", "conv=0"], "'conv=0': expected a share of peak in (0, 1]"),
        (["--bandwidth-fraction", "HBM=0.5"], "'HBM' is not one of ('DRAM', 'LLC', 'SRAM')"),
        (["--bandwidth-fraction", "DRAM=1.5"], "expected a share of the datasheet figure"),
        (["--half-bandwidth-kib", "DRAM=-1"], "'DRAM=-1': expected a size in KiB >= 0"),
        (["--bank-conflicts", "-1"], "--bank-conflicts -1.0 is invalid: expected >= 0"),
        (["--chip", "fast"], "argument --chip: invalid choice: 'fast'"),
    ],
)
def test_bad_effects_are_named(module, argv, line, capsys):
    with pytest.raises(SystemExit) as exit_:
        module["parse_args"](argv)
    assert exit_.value.code == 2 and line in capsys.readouterr().err


@pytest.mark.slow
def test_the_script_answers_with_its_effects(tmp_path):
    """The chip as a command: each effect's reading of the all-DRAM map against the plain
    chip's, on a request JSON."""
    path = tmp_path / "workload.json"
    path.write_text(json.dumps(WORKLOAD))
    request = {
        "protocol": "egrl-external/1",
        "request": "evaluate",
        "workload": {"name": "classes", "num_nodes": 7, "path": str(path)},
        "heads": HEADS,
        "maps": [np.zeros((7, 2), dtype=int).tolist(), np.full((7, 2), 1).tolist()],
    }

    def read(*argv):
        out = subprocess.run(
            [PY, CHIP, *argv], input=json.dumps(request), capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["latency_s"]

    plain = read()
    assert read("--op-efficiency", "conv=0.1")[0] > plain[0]
    assert read("--bandwidth-fraction", "DRAM=0.5")[0] > plain[0]
    assert read("--bandwidth-fraction", "LLC=0.5")[1] > plain[1]
    assert read("--half-bandwidth-kib", "DRAM=4")[0] > plain[0]
    assert read("--weight-prefetch", "--tmacs", "1")[0] < read("--tmacs", "1")[0]
