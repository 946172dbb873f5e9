"""From cost model to chip: the example chip's shared-bandwidth option, the study's analysis
on hand-made run directories, and one end-to-end run of scripts/chip_transfer.py at a tiny
scale."""

from __future__ import annotations

import math
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from egrl.experiments.chip_transfer import (
    CHIP_SCRIPT,
    DEFAULT_CHIP_ARGS,
    TransferConfig,
    analyse,
    chip_overrides,
    plot_transfer,
    pretrain_overrides,
    report_markdown,
    samples_saved,
    saved_sentence,
)
from egrl.experiments.results_sections import read_section
from egrl.experiments.samples import SUBDIR, hydra_quote
from tests.test_samples_study import write_run

ROOT = Path(__file__).resolve().parents[1]
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
    module = runpy.run_path(str(CHIP_SCRIPT))
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


def test_shared_bandwidth_answers_the_protocol():
    request = {
        "protocol": "egrl-external/1",
        "request": "evaluate",
        "workload": {"data": WORKLOAD},
        "heads": HEADS,
        "maps": [[[1, 2], [1, 2]]],
    }
    import json

    argv = [sys.executable, str(CHIP_SCRIPT), "--shared-bandwidth"]
    done = subprocess.run(argv, input=json.dumps(request), capture_output=True, text=True)
    answer = json.loads(done.stdout)
    assert done.returncode == 0 and answer["valid"] == [True]
    assert answer["latency_s"][0] == pytest.approx(
        chip("--shared-bandwidth").latency(np.array([[1, 2], [1, 2]]))
    )


@pytest.fixture
def transfer(tmp_path) -> TransferConfig:
    """Chip runs, budget 100, best 1.2: scratch reaches the compiler at 60, 80, never and
    99% of the best (1.188) once; fine-tuned at 20 (three times) and 99% twice."""
    cfg = TransferConfig(out=tmp_path / "study", workload="resnet18", budget=100, seeds=3)
    write_run(cfg.pretrain_run, "egrl", "resnet18", 0, [(50, 1.0), (100, 1.05)])
    scratch = [
        [(20, 0.5), (60, 1.0), (100, 1.2)],
        [(20, 0.5), (80, 1.0), (100, 1.1)],
        [(20, 0.5), (100, 0.9)],
    ]
    tuned = [[(20, 1.0), (40, 1.19)], [(20, 1.0), (100, 1.19)], [(20, 1.0), (100, 1.1)]]
    for seed, (a, b) in enumerate(zip(scratch, tuned)):
        b = [*b, (100, b[-1][1])] if b[-1][0] < 100 else b
        write_run(cfg.out / "scratch" / "egrl" / f"seed{seed}", "egrl", "resnet18", seed, a)
        write_run(cfg.out / "finetune" / "egrl" / f"seed{seed}", "egrl", "resnet18", seed, b)
    return cfg


def test_analysis_counts_the_samples_fine_tuning_saved(transfer):
    result = analyse(transfer)
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
    text = saved_sentence(result)
    assert text.startswith("To reach the chip compiler's map fine-tuning saved 60 samples, 4.0x")
    assert "only fine-tuning got there in half of its runs" in text


def test_saved_none_is_said_plainly():
    assert samples_saved(np.array([20.0, 30.0]), np.array([40.0, 50.0])) == -20
    assert math.isnan(samples_saved(np.array([math.inf]), np.array([math.inf])))
    assert samples_saved(np.array([20.0]), np.array([math.inf])) == -math.inf


def test_report_and_figure(transfer, tmp_path):
    result = analyse(transfer)
    png = plot_transfer(result, tmp_path / "chip.png")
    assert png.stat().st_size > 0
    text = report_markdown(result, "chip.png", seeds=3)
    assert "| scratch | 3 | 70 [60-80] (2/3) | 100 (1/3) |" in text
    assert "| finetune | 3 | 20 [20-20] (3/3) | 70 [40-100] (2/3) |" in text
    assert "final 1.0500x over the NNP-I compiler" in text and "![chip transfer](chip.png)" in text


def test_overrides_pretrain_on_nnpi_and_fine_tune_on_the_chip(tmp_path):
    cfg = TransferConfig(out=tmp_path, workload="resnet50", seeds=2, budget=30, overrides=["x=1"])
    pre = pretrain_overrides(cfg)
    assert pre[:3] == ["hwmodel=nnpi", "workload.name=resnet50", "agent=egrl"]
    assert {"seed=range(1)", "budget=4000", SUBDIR, "x=1"} <= set(pre)
    command = shlex.join([sys.executable, str(CHIP_SCRIPT), *DEFAULT_CHIP_ARGS])
    scratch, tuned = chip_overrides(cfg, False), chip_overrides(cfg, True)
    assert f"hwmodel.params.command={hydra_quote(command)}" in scratch
    assert "seed=range(2)" in scratch and not any(a.startswith("init_from=") for a in scratch)
    assert tuned[-2] == f"init_from={hydra_quote(str(cfg.pretrain_run.resolve()))}"
    assert cfg.pretrain_run == tmp_path / "pretrain" / "egrl" / "seed0"
    with pytest.raises(ValueError, match="seeds=0 is invalid"):
        TransferConfig(out=tmp_path, seeds=0)


def test_script_end_to_end_tiny(tmp_path):
    """Pretrain on NNP-I resnet18 (24 samples), then one chip run from scratch and one
    fine-tuned (24 samples each), small policy, into a temporary page."""
    page = tmp_path / "results.md"
    args = [
        sys.executable,
        str(ROOT / "scripts" / "chip_transfer.py"),
        "--out",
        str(tmp_path / "study"),
        "--workload",
        "resnet18",
        "--pretrain-budget",
        "24",
        "--budget",
        "24",
        "--seeds",
        "1",
        "--page",
        str(page),
        "--figures",
        str(tmp_path / "figures"),
        "--set",
        "population.size=4",
        "policy.hidden=16",
        "policy.out=16",
        "policy.depth=2",
        "policy.heads=2",
    ]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = read_section("chip-transfer", page)
    assert text is not None and "EGRL pretrained on NNP-I `resnet18` for 24" in text
    assert "| scratch | 1 |" in text and "| finetune | 1 |" in text
    assert (tmp_path / "figures" / "chip_transfer_resnet18.png").stat().st_size > 0
    log = (tmp_path / "study" / "finetune" / "egrl" / "seed0" / "train.log").read_text()
    assert "GNN policies start from" in log
