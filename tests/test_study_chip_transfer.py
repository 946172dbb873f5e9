"""From cost model to chip: the example chip's shared-bandwidth option, the study's plan and
its analysis on hand-made run directories, and its smoke preset end to end."""

from __future__ import annotations

import json
import math
import runpy
import shlex
import statistics
import subprocess
import sys

import numpy as np
import pytest

from egrl.rundir import RunDir
from studies import chip_transfer, render, runner
from studies.runner import hydra_quote
from tests.study_runs import write_run
from tests.support.chips import CHIP

HEADS = {"weight": ["DRAM", "LLC", "SRAM"], "activation": ["DRAM", "LLC", "SRAM"]}
#: host input 1000 B -> c1 (weight 8000 B, output 4000 B) -> fc (weight 40000 B, output 10 B)
WORKLOAD = {
    "name": "two",
    "dtype_bytes": 1,
    "nodes": [
        {
            "name": "c1",
            "inputs": ["x"],
            "input_shapes": [[1, 1000]],
            "output_shape": [1, 4000],
            "weight_bytes": 8000,
            "macs": 1,
        },
        {
            "name": "fc",
            "inputs": ["c1"],
            "input_shapes": [[1, 4000]],
            "output_shape": [1, 10],
            "weight_bytes": 40000,
            "macs": 1,
        },
    ],
}


def chip(*argv: str):
    module = runpy.run_path(CHIP)
    return module["Chip"](WORKLOAD, HEADS, module["parse_args"](list(argv)))


def test_shared_bandwidth_overlaps_levels_and_shares_one():
    serial, shared = chip(), chip("--shared-bandwidth")
    dram, llc, sram = 67.2e9, 680e9, 6800e9
    spread_map = np.array([[1, 2], [1, 2]])  # weights in the LLC, activations in SRAM
    c1 = (8000 / llc, 4000 / sram, 1000 / dram)  # weight, output, host input
    fc = (40000 / llc, 10 / sram + 4000 / sram)  # weight; output and input share SRAM
    assert serial.latency(spread_map) == pytest.approx(sum(c1) + sum(fc), rel=1e-12)
    assert shared.latency(spread_map) == pytest.approx(max(c1) + max(fc), rel=1e-12)
    # every transfer on one level: nothing overlaps, the two models agree
    all_dram = np.zeros((2, 2), dtype=np.int64)
    assert shared.latency(all_dram) == pytest.approx(serial.latency(all_dram), rel=1e-12)
    assert serial.shared_bandwidth is False  # the default stays the serial model


def test_dram_access_time_is_paid_per_dram_transfer():
    """With --dram-access-us L every DRAM transfer pays L: all in DRAM, c1 reads its
    weight, its host input and writes its output (3), fc reads its weight and its input
    and writes its output (3)."""
    plain, slow = chip(), chip("--dram-access-us", "2")
    all_dram = np.zeros((2, 2), dtype=np.int64)
    assert slow.latency(all_dram) == pytest.approx(plain.latency(all_dram) + 6 * 2e-6, rel=1e-12)
    on_chip = np.array([[1, 2], [1, 2]])  # only c1's host input comes from DRAM
    assert slow.latency(on_chip) == pytest.approx(plain.latency(on_chip) + 2e-6, rel=1e-12)


def test_llc_contention_slows_the_llc_as_it_fills():
    """--llc-contention A: at c1's step the LLC holds both weights (48000 B) and c1's
    output (4000 B); at fc's, the weights and fc's output (10 B)."""
    plain, contended = chip("--llc-kib", "100"), chip("--llc-kib", "100", "--llc-contention", "0.5")
    all_llc = np.ones((2, 2), dtype=np.int64)
    held = np.array([48000 + 4000, 48000 + 4000 + 10]) / (100 * 1024)
    llc = 680e9
    c1 = (8000 + 4000) / llc / (1 - 0.5 * held[0]) + 1000 / 67.2e9
    fc = (40000 + 10 + 4000) / llc / (1 - 0.5 * held[1])
    assert contended.latency(all_llc) == pytest.approx(c1 + fc, rel=1e-12)
    assert contended.latency(all_llc) > plain.latency(all_llc)
    none_in_llc = np.full((2, 2), 2, dtype=np.int64)
    assert contended.latency(none_in_llc) == plain.latency(none_in_llc)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--dram-access-us", "-1"], "--dram-access-us -1.0 is invalid: expected >= 0"),
        (["--llc-contention", "1"], "--llc-contention 1.0 is invalid: expected a value in [0, 1)"),
        (["--noise-cv", "-0.1"], "--noise-cv -0.1 is invalid: expected >= 0"),
    ],
)
def test_bad_chip_effects_are_named(argv, line, capsys):
    module = runpy.run_path(CHIP)
    with pytest.raises(SystemExit) as exit_:
        module["parse_args"](argv)
    assert exit_.value.code == 2 and line in capsys.readouterr().err


def test_noise_is_reproducible_from_its_seed_and_state_yet_every_reading_differs(tmp_path):
    module = runpy.run_path(CHIP)
    request = {
        "protocol": "egrl-external/1",
        "request": "evaluate",
        "workload": {"data": WORKLOAD},
        "heads": HEADS,
        "maps": [[[1, 2], [1, 2]]] * 3,  # the same map read three times
    }
    plain = module["answer"](request, module["parse_args"]([]))["latency_s"][0]
    readings = []
    for run in ("a", "b"):
        args = module["parse_args"](["--noise-cv", "0.05", "--noise-state", str(tmp_path / run)])
        readings.append(module["answer"](request, args)["latency_s"])
    assert readings[0] == readings[1]  # a new state file: the same draws again
    assert len(set(readings[0])) == 3  # every reading of the map differs
    args = module["parse_args"](["--noise-cv", "0.05", "--noise-state", str(tmp_path / "a")])
    assert module["answer"](request, args)["latency_s"] != readings[0]  # the run goes on
    factors = module["noise"](4000, module["parse_args"](["--noise-cv", "0.05"])) * plain
    assert np.mean(factors) / plain == pytest.approx(1.0, abs=0.005)
    assert np.std(factors) / np.mean(factors) == pytest.approx(0.05, rel=0.1)


@pytest.mark.slow
def test_shared_bandwidth_answers_the_protocol():
    request = {
        "protocol": "egrl-external/1",
        "request": "evaluate",
        "workload": {"data": WORKLOAD},
        "heads": HEADS,
        "maps": [[[1, 2], [1, 2]]],
    }
    argv = [sys.executable, CHIP, "--shared-bandwidth"]
    done = subprocess.run(argv, input=json.dumps(request), capture_output=True, text=True)
    answer = json.loads(done.stdout)
    assert done.returncode == 0 and answer["valid"] == [True]
    assert answer["latency_s"][0] == pytest.approx(
        chip("--shared-bandwidth").latency(np.array([[1, 2], [1, 2]]))
    )


def plan_cfg(out, *overrides):
    return runner.load_plan("chip-transfer", [f"out={out}", *overrides])


@pytest.fixture
def transfer(tmp_path):
    """Chip runs, budget 100, best 1.2: scratch reaches the compiler at 60, 80, never and
    99% of the best (1.188) once; fine-tuned at 20 (three times) and 99% twice."""
    out = tmp_path / "study"
    cfg = plan_cfg(out, "workload=resnet18", "budget=100", "seeds=3")
    write_run(out / "pretrain/egrl/seed0", "egrl", "resnet18", 0, [(50, 1.0), (100, 1.05)])
    scratch = [
        [(20, 0.5), (60, 1.0), (100, 1.2)],
        [(20, 0.5), (80, 1.0), (100, 1.1)],
        [(20, 0.5), (100, 0.9)],
    ]
    tuned = [[(20, 1.0), (40, 1.19)], [(20, 1.0), (100, 1.19)], [(20, 1.0), (100, 1.1)]]
    for seed, (a, b) in enumerate(zip(scratch, tuned)):
        b = [*b, (100, b[-1][1])] if b[-1][0] < 100 else b
        write_run(out / "scratch" / "egrl" / f"seed{seed}", "egrl", "resnet18", seed, a)
        write_run(out / "finetune" / "egrl" / f"seed{seed}", "egrl", "resnet18", seed, b)
    return cfg, out


def test_analysis_counts_the_samples_fine_tuning_saved(transfer):
    result = chip_transfer.analyse(*transfer)
    assert result.best == 1.2 and result.levels["99%"] == pytest.approx(1.188)
    scratch, tuned = result.modes["scratch"], result.modes["finetune"]
    assert scratch.samples["compiler"].tolist() == [60, 80, math.inf]
    assert tuned.samples["compiler"].tolist() == [20, 20, 20]
    assert scratch.samples["99%"].tolist() == [100, math.inf, math.inf]
    assert tuned.samples["99%"].tolist() == [40, 100, math.inf]
    assert np.array_equal(tuned.first, [1.0, 1.0, 1.0]) and np.array_equal(scratch.first, [0.5] * 3)
    assert result.saved["compiler"] == 60 and math.isinf(result.saved["99%"])
    assert result.tests["compiler"][2] == 1.0  # fine-tuned first in every pair
    assert result.pretrain is not None and result.pretrain.final_speedup == 1.05
    text = chip_transfer.saved_sentence(result)
    assert text.startswith("To reach the chip compiler's map fine-tuning saved 60 samples, 4.0x")
    assert "only fine-tuning got there in half of its runs" in text


def test_saved_none_is_said_plainly():
    assert chip_transfer.samples_saved(np.array([20.0, 30.0]), np.array([40.0, 50.0])) == -20
    assert math.isnan(chip_transfer.samples_saved(np.array([math.inf]), np.array([math.inf])))
    assert chip_transfer.samples_saved(np.array([20.0]), np.array([math.inf])) == -math.inf


def test_report_and_figure(transfer, tmp_path):
    cfg, out = transfer
    result = chip_transfer.analyse(cfg, out)
    page = runner.Page(tmp_path / "page.md", tmp_path / "fig", "python -m studies run x")
    text = chip_transfer.render(cfg, result, page)
    assert "| scratch | 3 | 70 [60-80] (2/3) | 100 (1/3) |" in text
    assert "| finetune | 3 | 20 [20-20] (3/3) | 70 [40-100] (2/3) |" in text
    assert "final 1.0500x over the NNP-I compiler" in text
    assert "![chip transfer](fig/chip_transfer_resnet18.png)" in text
    assert "`examples/external_chip.py --shared-bandwidth --sram-kib 2048 --tmacs 50`" in text
    assert (tmp_path / "fig" / "chip_transfer_resnet18.png").stat().st_size > 0


def test_no_chip_run_ends_the_report(tmp_path):
    with pytest.raises(SystemExit, match="no finished chip run"):
        chip_transfer.analyse(plan_cfg(tmp_path), tmp_path)


def test_plan_pretrains_on_nnpi_then_fine_tunes_on_the_chip(tmp_path):
    cfg = plan_cfg(tmp_path, "seeds=2", "budget=30", "pretrain_budget=40")
    first, second = chip_transfer.plan(cfg, tmp_path)
    pretrain, *scratch = first
    assert pretrain.path == "pretrain/egrl/seed0"
    assert pretrain.overrides == (
        "hwmodel=nnpi",
        "workload.name=resnet50",
        "agent=egrl",
        "budget=40",
    )
    # the chip script is the plan's, relative to the repository root
    command = shlex.join([sys.executable, CHIP, "--shared-bandwidth"])
    command += " --sram-kib 2048 --tmacs 50"
    assert [s.path for s in scratch] == ["scratch/egrl/seed0", "scratch/egrl/seed1"]
    assert f"hwmodel.params.command={hydra_quote(command)}" in scratch[0].overrides
    assert "budget=30" in scratch[0].overrides
    assert not any(o.startswith("init_from=") for o in scratch[0].overrides)
    assert [s.path for s in second] == ["finetune/egrl/seed0", "finetune/egrl/seed1"]
    source = (tmp_path / "pretrain" / "egrl" / "seed0").resolve()
    assert second[0].after == "pretrain/egrl/seed0"
    assert second[0].overrides[-1] == f"init_from={hydra_quote(str(source))}"
    other = plan_cfg(tmp_path, "chip.command='my-chip --fast'")
    assert chip_transfer.chip_command(other) == "my-chip --fast"
    with pytest.raises(SystemExit, match="seeds=0 is invalid"):
        next(chip_transfer.plan(plan_cfg(tmp_path, "seeds=0"), tmp_path))


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """Pretrain on NNP-I resnet18 (24 samples), then two chip runs from scratch and two
    fine-tuned (24 samples each), small policy, through the runner."""
    out = tmp_path / "out"
    assert runner.run("chip-transfer-smoke", [f"out={out}"]) == 0
    section = render.read_section("chip-transfer", out / "results.md")
    pre = RunDir(out / "pretrain" / "egrl" / "seed0")
    pre_final = float(pre.read_metrics_rows()[-1]["best_speedup"])
    assert (
        f"EGRL pretrained on NNP-I `resnet18` for 24 paid measurements (seed 0, final {pre_final:.4f}x"
        in section
    )
    finals = []
    for mode in ("scratch", "finetune"):
        rows = [RunDir(out / mode / "egrl" / f"seed{s}").read_metrics_rows() for s in (0, 1)]
        values = [float(r[-1]["best_speedup"]) for r in rows]
        finals += values
        mid, low, high = statistics.median(values), min(values), max(values)
        line = next(x for x in section.splitlines() if x.startswith(f"| {mode} | 2 |"))
        assert line.endswith(f"| {mid:.4f} [{low:.4f}-{high:.4f}] |")
    assert f"the best map any chip run found, {max(finals):.4f}x" in section
    tuned = RunDir(out / "finetune" / "egrl" / "seed0")
    assert tuned.read_config()["init_from"] == str(pre.path.resolve())
    assert "GNN policies start from" in (tuned.path / "train.log").read_text()
    assert (out / "figures" / "chip_transfer_resnet18.png").stat().st_size > 0
