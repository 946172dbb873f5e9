"""The model-search study: its plan (the screening study's stages, a model pre-trained on
the chip's other workloads), its early-budget table, and its smoke preset end to end."""

from __future__ import annotations

import numpy as np
import pytest

from egrl.rundir import RunDir
from studies import model_search, render, runner
from studies.runner import CommandSpec, RunSpec
from tests.study_runs import write_optimum, write_run

PROBLEM = "chip-resnet101"


def test_the_plan_runs_the_pretraining_first_and_searches_from_it(tmp_path):
    cfg = runner.load_plan(
        "model-search", [f"out={tmp_path}", f"problems=[{PROBLEM}]", "agents=[ea,sa]", "seeds=2"]
    )
    first, second = list(model_search.plan(cfg, tmp_path))
    first = [s for s in first if isinstance(s, RunSpec)]
    groups = {s.group for s in first}
    for agent in ("ea", "sa"):
        for screen in ("none", "forest", "forest-search"):
            assert f"{PROBLEM}/{agent}/{screen}" in groups
    # the pre-trained screen is EA's only; its model learns from the other workloads' runs
    assert {"chip-resnet18/ea/none", "chip-resnet50/ea/none"} <= groups
    assert {s.group for s in second} == {f"{PROBLEM}/ea/forest-search-pretrained"}
    run = second[1]
    init = next(o for o in run.overrides if o.startswith("screen.init_from="))
    assert f"'{tmp_path}/chip-resnet18/ea/none/seed1'" in init
    assert "screen.search=10" in run.overrides and "screen.warmup=0" in run.overrides


def test_the_early_table_reads_each_run_at_the_early_budget(tmp_path):
    """none reaches 1.05 at 150 paid maps; model search 1.055 at 50: at 100 the table gives
    each its best so far, beside none's final."""
    out = tmp_path / "out"
    for seed in range(3):
        none = [(50, 1.0), (100, 1.01), (150, 1.05), (200, 1.05)]
        write_run(out / PROBLEM / "ea" / "none" / f"seed{seed}", "ea", "resnet101", seed, none, 200)
        searched = [(40, 1.0), (50 + seed, 1.055), (200, 1.056)]
        path = out / PROBLEM / "ea" / "forest-search" / f"seed{seed}"
        write_run(path, "ea", "resnet101", seed, searched, 200)
    write_optimum(out / PROBLEM, "resnet101", 1.06, proven=True)
    cfg = runner.load_plan(
        "model-search",
        [
            f"out={out}",
            f"problems=[{PROBLEM}]",
            "agents=[ea]",
            "screens=[none,forest-search]",
            "no_optimum=[]",
            "problem_screens={}",
            "early=100",
        ],
    )
    (result,) = model_search.analyse(cfg, out)
    table = model_search.early_markdown([result], 100)
    assert "| chip-resnet101 | ea | 1.0500 ± 0.0000 | 1.0100 ± 0.0000 | 1.0550 ± 0.0000 |" in table


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """EA on resnet34 without a screen, with model search, and with model search from a
    forest pre-trained on resnet18 runs; the section's numbers are the run directories'."""
    out = tmp_path / "out"
    assert runner.run("model-search-smoke", [f"out={out}"]) == 0
    section = render.read_section("model-search", out / "results.md")
    assert section.startswith("## Model search: the cost model searches, the chip confirms")
    assert "### Oracles" in section and "### Problems where the model must learn" not in section
    for screen in ("none", "forest-search", "forest-search-pretrained"):
        finals = []
        for seed in (0, 1):
            files = RunDir(out / "nnpi-resnet34" / "ea" / screen / f"seed{seed}")
            rows = files.read_metrics_rows()
            assert int(rows[-1]["iterations"]) == 40
            finals.append(float(rows[-1]["best_speedup"]))
            if screen != "none":
                assert files.read_config()["screen"]["search"] == 3
        mean, std = np.mean(finals), np.std(finals, ddof=1)
        assert f"| ea | {screen} | 2 | {mean:.4f} ± {std:.4f} |" in section


def test_a_problem_may_run_a_variant_of_the_chip(tmp_path):
    cfg = runner.load_plan(
        "model-search",
        [f"out={tmp_path}", "problems=[chip-dram-resnet50]", "agents=[ea]", "seeds=1"],
    )
    reading, *stage = next(model_search.plan(cfg, tmp_path))
    assert isinstance(reading, CommandSpec) and "--dram-access-us" in " ".join(reading.argv)
    command = next(o for o in stage[0].overrides if o.startswith("hwmodel.params.command="))
    assert "--dram-access-us 2 --sram-kib 2048 --tmacs 50" in command
    assert "--shared-bandwidth" not in command


def test_a_costly_problem_runs_only_its_agents_and_screens(tmp_path):
    cfg = runner.load_plan(
        "model-search", [f"out={tmp_path}", "problems=[mcm-dlrm-s26-e64-l3]", "seeds=1"]
    )
    (stage,) = list(model_search.plan(cfg, tmp_path))
    assert {s.group for s in stage} == {
        f"mcm-dlrm-s26-e64-l3/{agent}/{screen}"
        for agent in ("ea", "sa")
        for screen in ("none", "forest-search")
    }
    assert "mcm-dlrm-s26-e64-l3" in cfg.oracles
