"""The ablation study: its plan, its analysis on hand-made run directories (the old script's
override_dirname layout and the runner's seed<S>), and its smoke preset end to end."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from egrl.aggregate.optimum import CACHE_FILE
from egrl.rundir import RunDir
from studies import ablation, render, runner
from tests.study_runs import write_optimum, write_run

PROBLEM = "nnpi-resnet101"


def plan_cfg(out, *overrides):
    return runner.load_plan(
        "ablation", [f"out={out}", f"problems=[{PROBLEM}]", "variants=[egrl,ea]", *overrides]
    )


@pytest.fixture
def study(tmp_path):
    """EGRL finals 1.10-1.13 (all above EA's 1.000-1.003), optimum 1.2 proven; EGRL's runs in
    the old script's directories, EA's in the runner's."""
    out = tmp_path / "out"
    for seed in range(4):
        old_name = f"agent=egrl,budget=100,hwmodel=nnpi,seed={seed},workload=resnet101"
        egrl = [(50, 1.0), (100, 1.1 + 0.01 * seed)]
        path = out / PROBLEM / "egrl" / old_name
        write_run(path, "egrl", "resnet101", seed, egrl, descent=["none", "learner+seeding"])
        ea = [(50, 0.9), (100, 1.0 + 0.001 * seed)]
        path = out / PROBLEM / "ea" / f"seed{seed}"
        write_run(path, "ea", "resnet101", seed, ea, descent=["none", "none"])
    write_optimum(out / PROBLEM, "resnet101", 1.2, proven=True)
    return out


def test_analysis_reads_shares_samples_descent_and_the_test(study):
    (result,) = ablation.analyse(plan_cfg(study), study)
    assert result.optimum == 1.2 and result.optimum_proven and result.budget == 100
    egrl, ea = result.variants["egrl"], result.variants["ea"]
    assert np.allclose(egrl.final, [1.10, 1.11, 1.12, 1.13])
    assert np.allclose(egrl.to_own99, 100) and np.allclose(ea.to_own99, 100)
    assert np.all(np.isinf(ea.to_opt99)) and np.all(np.isinf(egrl.to_opt99))
    assert np.allclose(egrl.from_learner, 0.5) and np.allclose(egrl.from_seeding, 0.5)
    assert np.allclose(ea.from_learner, 0.0)
    # EGRL's four finals are all above EA's four: the smallest two-sided p of U for 4 vs 4
    u, p = result.tests["final"]
    assert u == 16.0 and p == pytest.approx(2 / 70, abs=1e-3)
    assert ablation.reaching(ea.runs[0], 1.0) == 100 and math.isinf(
        ablation.reaching(ea.runs[0], 1.5)
    )


def test_report_and_figure(study, tmp_path):
    cfg = plan_cfg(study, "seeds=4")
    result = ablation.analyse(cfg, study)
    page = runner.Page(tmp_path / "page.md", tmp_path / "figures", "python -m studies run x")
    text = ablation.render(cfg, result, page)
    assert "| egrl | 4 | 1.1150 ± 0.0129 | 92.92% ± 1.08% |" in text
    assert "never (0/4)" in text and "p = 0.029" in text and "| 50% | 50% |" in text
    assert "![nnpi-resnet101](figures/ablation_nnpi-resnet101.png)" in text
    assert (tmp_path / "figures" / "ablation_nnpi-resnet101.png").stat().st_size > 0
    assert text.rstrip().endswith("```\npython -m studies run x\n```")


def test_an_unproven_optimum_below_a_run_gives_way_to_the_best_known(study):
    cache = study / PROBLEM / CACHE_FILE
    entries = json.loads(cache.read_text())
    for entry in entries.values():
        entry.update(speedup=1.0, proven=False, gap=0.2)  # the solver kept the compiler's map
    cache.write_text(json.dumps(entries))
    (result,) = ablation.analyse(plan_cfg(study), study)
    assert not result.optimum_proven and result.optimum == pytest.approx(1.13)
    text = "\n".join(ablation.problem_markdown(result, "fig.png"))
    assert "best known 1.1300x" in text


def test_plan_keeps_the_old_scripts_runs(study):
    """EGRL's four seeds exist in the old layout at budget 100: only the fifth runs; EA runs
    every seed (finished ones are the runner's to skip)."""
    (stage,) = ablation.plan(plan_cfg(study, "seeds=5", "budget=100"), study)
    assert [(s.group, s.seed) for s in stage if s.group.endswith("/egrl")] == [
        (f"{PROBLEM}/egrl", 4)
    ]
    ea = [s for s in stage if s.group.endswith("/ea")]
    assert len(ea) == 5 and ea[0].overrides == (
        "hwmodel=nnpi",
        "workload=resnet101",
        "agent=ea",
        "budget=100",
    )
    # at another budget the old runs are not the plan's
    (stage,) = ablation.plan(plan_cfg(study, "seeds=5", "budget=400"), study)
    assert len(stage) == 10


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """Two variants x two seeds of 20 samples on resnet18 through the runner; the section's
    numbers are those of the run directories."""
    out = tmp_path / "out"
    assert runner.run("ablation-smoke", [f"out={out}"]) == 0
    section = render.read_section("ablation", out / "results.md")
    assert section.startswith("## The learner's contribution (ablation)")
    assert "2 seeds per variant and problem" in section
    optimum = json.loads((out / "nnpi-resnet18" / CACHE_FILE).read_text())["nnpi/resnet18"]
    for variant in ("egrl", "ea"):
        finals, own = [], []
        for seed in (0, 1):
            files = RunDir(out / "nnpi-resnet18" / variant / f"seed{seed}")
            rows = files.read_metrics_rows()
            assert files.read_config()["agent"]["name"] == variant
            assert int(rows[-1]["iterations"]) >= 20
            final = float(rows[-1]["best_speedup"])
            finals.append(final)
            own.append(
                next(int(r["iterations"]) for r in rows if float(r["best_speedup"]) >= 0.99 * final)
            )
        mean, std = statistics.mean(finals), statistics.stdev(finals)
        assert f"| {variant} | 2 | {mean:.4f} ± {std:.4f} |" in section
        assert f"| {statistics.median(own):.0f} (2/2) |" in section
    kind = "optimum" if optimum["proven"] else "best known"
    assert f"### nnpi-resnet18 (budget 20, {kind} " in section
    assert "EGRL against EA: final: U = " in section
    assert "python -m studies run ablation-smoke" in section
    assert (out / "figures" / "ablation_nnpi-resnet18.png").stat().st_size > 0
