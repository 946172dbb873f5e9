"""The screening study: its plan (stages, the pre-trained screen's earlier runs), its
analysis on hand-made run directories, and its smoke preset end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from egrl.rundir import RunDir
from studies import render, runner, screening
from studies.runner import CommandSpec
from tests.study_runs import write_optimum, write_run

PROBLEM = "nnpi-resnet101"


def plan_cfg(out, *overrides):
    return runner.load_plan(
        "screening",
        [f"out={out}", f"problems=[{PROBLEM}]", "agents=[ea]", "screens=[none,forest]", *overrides],
    )


@pytest.fixture
def study(tmp_path):
    """Unscreened EA reaches 99% of the proven optimum 1.06 after 150-180 samples, the
    screened one after 50-53 (four seeds each)."""
    out = tmp_path / "out"
    for seed in range(4):
        none = [(100, 1.0), (150 + 10 * seed, 1.05 + 0.001 * seed), (200, 1.05 + 0.001 * seed)]
        write_run(out / PROBLEM / "ea" / "none" / f"seed{seed}", "ea", "resnet101", seed, none, 200)
        forest = [(50 + seed, 1.055), (200, 1.056)]
        path = out / PROBLEM / "ea" / "forest" / f"seed{seed}"
        write_run(path, "ea", "resnet101", seed, forest, 200)
    write_optimum(out / PROBLEM, "resnet101", 1.06, proven=True)
    return out


def test_analysis_reads_samples_to_the_levels_and_tests_each_screen(study):
    (result,) = screening.analyse(plan_cfg(study), study)
    assert result.reference == 1.06 and result.source == "proven" and result.budget == 200
    none, forest = result.cells
    assert (none.screen, forest.screen) == ("none", "forest")
    assert np.allclose(none.to_compiler, 100) and np.allclose(forest.to_compiler, [50, 51, 52, 53])
    assert np.allclose(none.to_level, [150, 160, 170, 180])
    assert np.allclose(forest.to_level, [50, 51, 52, 53])
    assert none.tests == {}
    u, p, first = forest.tests["level"]  # all four screened runs got there first
    assert u == 0.0 and p == pytest.approx(2 / 70, abs=2e-3) and first == 1.0
    # none's median final is 1.0515: two unscreened runs end below it, every screened run
    # passes it after 50-53 samples
    assert np.allclose(forest.to_match, [50, 51, 52, 53])
    assert np.isinf(none.to_match[:2]).all() and np.allclose(none.to_match[2:], [170, 180])
    assert forest.tests["match"][1] < 0.05 and forest.tests["match"][2] == 1.0
    assert forest.tests["final"][2] == 1.0  # every screened run ended higher
    assert np.all(np.isnan(forest.spearman))  # hand-made runs log no screen
    assert np.allclose(none.ms_per_sample, 1000 * 3 / 200)


def test_report_summary_and_figure(study, tmp_path):
    cfg = plan_cfg(study, "seeds=4")
    result = screening.analyse(cfg, study)
    page = runner.Page(tmp_path / "page.md", tmp_path / "figures", "python -m studies run x")
    text = screening.render(cfg, result, page)
    assert f"| {PROBLEM} | ea | 165 (4/4) | 0.31x (p = 0.029) |" in text
    row = "| ea | forest | 4 | 1.0560 ± 0.0000 | 99.62% ± 0.00% | p = 0.021, 100% | 52 [50-53] (4/4) |"
    assert row in text
    assert "p = 0.029, 100%" in text
    assert f"![{PROBLEM}](figures/screening_{PROBLEM}.png)" in text
    assert (tmp_path / "figures" / f"screening_{PROBLEM}.png").stat().st_size > 0


def test_plan_runs_the_earlier_runs_first_and_the_pretrained_screen_after(tmp_path):
    cfg = runner.load_plan(
        "screening",
        [
            f"out={tmp_path}",
            "problems=[chip-resnet101]",
            "agents=[ea]",
            "seeds=2",
            "budget=50",
        ],
    )
    first, second = screening.plan(cfg, tmp_path)
    readings = [s.done for s in first if isinstance(s, CommandSpec)]
    assert readings == ["chip-resnet101/prior.json"]  # the prior of the plan's chip problem
    first = first[len(readings) :]
    groups = sorted({s.group for s in first})
    assert groups == [
        "chip-resnet101/ea/forest",
        "chip-resnet101/ea/forest-prior",
        "chip-resnet101/ea/none",
        "chip-resnet18/ea/none",
        "chip-resnet50/ea/none",
    ]
    assert len(first) == 10
    pretrained = {"chip-resnet101/ea/forest-pretrained", "chip-resnet101/ea/gnn-pretrained"}
    assert {s.group for s in second} == pretrained and len(second) == 4
    run = second[1]
    assert run.group == "chip-resnet101/ea/forest-pretrained"
    assert run.seed == 1 and run.after == "chip-resnet50/ea/none/seed1"
    init = next(o for o in run.overrides if o.startswith("screen.init_from="))
    assert f"'{tmp_path}/chip-resnet18/ea/none/seed1'" in init
    assert f"'{tmp_path}/chip-resnet50/ea/none/seed1'" in init
    assert "screen.warmup=0" in run.overrides
    assert any(o.startswith("hwmodel.params.command=") for o in run.overrides)
    # the critic is the learner's: only EGRL runs it
    both = runner.load_plan("screening", [f"out={tmp_path}", "problems=[nnpi-resnet101]"])
    (stage,) = screening.plan(both, tmp_path)
    assert sorted({s.group.split("/")[1] for s in stage if s.group.endswith("/critic")}) == ["egrl"]


def test_a_plan_naming_a_screen_without_overrides_is_refused(tmp_path):
    cfg = plan_cfg(tmp_path, "screens=[none,bogus]")
    with pytest.raises(runner.StudyError, match="screen 'bogus' has no overrides"):
        next(screening.plan(cfg, tmp_path))


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """EA on resnet34, unscreened and with a screen pre-trained on resnet18 runs, two seeds
    of 40 samples; the section's numbers are those of the run directories."""
    out = tmp_path / "out"
    assert runner.run("screening-smoke", [f"out={out}"]) == 0
    section = render.read_section("screening", out / "results.md")
    assert section.startswith("## Screening: a learned cost model decides what to measure")
    finals = {}
    for screen in ("none", "forest-pretrained"):
        for seed in (0, 1):
            files = RunDir(out / "nnpi-resnet34" / "ea" / screen / f"seed{seed}")
            rows = files.read_metrics_rows()
            assert int(rows[-1]["iterations"]) == 40
            finals[screen, seed] = float(rows[-1]["best_speedup"])
            if screen == "forest-pretrained":
                init_from = files.read_config()["screen"]["init_from"]
                assert init_from == [str(out / "nnpi-resnet18" / "ea" / "none" / f"seed{seed}")]
                assert math.isfinite(float(rows[0]["screen_spearman"]))  # ranked from the start
    assert "### nnpi-resnet34 (budget 40, " in section
    for screen in ("none", "forest-pretrained"):
        values = [finals[screen, seed] for seed in (0, 1)]
        mean, std = np.mean(values), np.std(values, ddof=1)
        assert f"| ea | {screen} | 2 | {mean:.4f} ± {std:.4f} |" in section
    assert (out / "figures" / "screening_nnpi-resnet34.png").stat().st_size > 0


def test_a_solver_that_finds_no_map_gives_way_to_the_best_known(study, monkeypatch):
    (study / PROBLEM / "optimum.json").unlink()

    def no_map(*args, **kwargs):
        raise RuntimeError("resnet101: CP-SAT found no map (UNKNOWN) in 46.0 s")

    monkeypatch.setattr("egrl.aggregate.optimum.optimum_by_target", no_map)
    (result,) = screening.analyse(plan_cfg(study), study)
    assert result.source == "runs" and result.reference == pytest.approx(1.056)


def test_targets_that_differ_only_in_the_repairs_seed_share_the_proven_optimum(study, monkeypatch):
    from egrl.aggregate.optimum import OptimumInfo

    def per_seed(*args, **kwargs):  # mcm's target keys hold the run's seed
        info = {"workload": "resnet101", "hwmodel": "mcm", "gap": 0.0, "source": "test"}
        return {
            "mcm/resnet101?seed=0": OptimumInfo(
                params={"seed": 0}, speedup=1.07, proven=True, **info
            ),
            "mcm/resnet101?seed=1": OptimumInfo(
                params={"seed": 1}, speedup=1.08, proven=False, **info
            ),
        }

    monkeypatch.setattr("egrl.aggregate.optimum.optimum_by_target", per_seed)
    (result,) = screening.analyse(plan_cfg(study), study)
    assert result.source == "proven" and result.reference == 1.07
