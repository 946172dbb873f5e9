"""The samples study: its plan of stages, its analysis on hand-made run directories, the
formats it shares with the other studies, and its smoke preset end to end."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from egrl.aggregate.optimum import CACHE_FILE, OptimumInfo
from egrl.rundir import RunDir
from egrl.runs import load_run
from studies import render, runner, samples
from studies.runner import hydra_quote
from studies.stats import best_known, compare, format_samples, room_taken
from tests.study_runs import write_optimum, write_run

PROBLEM = samples.Problem("nnpi", "resnet101")


def run_dir(out: Path, mode: str, agent: str, seed: int, problem=PROBLEM) -> Path:
    return out / samples.run_path(problem, mode, agent, seed)


def plan_cfg(out: Path, *overrides: str):
    return runner.load_plan("samples", [f"out={out}", *overrides])


@pytest.fixture
def study(tmp_path) -> Path:
    """nnpi/resnet101, optimum 1.2 (proven): EGRL reaches 99% (1.188) at 60 in 4 of 4 seeds,
    EA at 100 in one seed and never in three; EA from native reaches the compiler at once;
    EGRL fine-tuned from resnet50; one EA run stopped early, one unfinished."""
    out = tmp_path / "study"
    source = write_run(tmp_path / "src", "egrl", "resnet50", 0, [(100, 1.1)])
    for s in range(4):
        egrl = [(20, 0.8), (40, 1.0), (60, 1.19), (100, 1.2)]
        write_run(run_dir(out, "scratch", "egrl", s), "egrl", "resnet101", s, egrl, proposals=1.5)
        ea = [(50, 0.9), (100, 1.19 if s == 0 else 1.05)]
        write_run(run_dir(out, "scratch", "ea", s), "ea", "resnet101", s, ea)
        native = [(20, 1.0), (100, 1.1)]
        write_run(run_dir(out, "native", "ea", s), "ea", "resnet101", s, native, start="native")
        tuned = [(20, 1.0 + 0.1 * s), (100, 1.2)]
        path = run_dir(out, "finetune", "egrl", s)
        write_run(path, "egrl", "resnet101", s, tuned, init_from=str(source))
    # a fifth EA seed that stopped proposing new maps at 70 of 100: it counts
    stale = [(50, 0.9), (70, 0.95)]
    write_run(run_dir(out, "scratch", "ea", 4), "ea", "resnet101", 4, stale, stopped_early="x")
    # killed at 50 of 100: left out
    write_run(run_dir(out, "native", "ea", 9), "ea", "resnet101", 9, [(50, 1.0)])
    write_optimum(out / PROBLEM.key, "resnet101", 1.2, proven=True)
    return out


def test_samples_to_a_level_and_never(study):
    run = load_run(run_dir(study, "scratch", "ea", 1))
    assert samples.samples_to(run, 1.0) == 100 and samples.samples_to(run, 0.9) == 50
    assert math.isinf(samples.samples_to(run, 1.06))
    # the native map's speedup is 1.0 up to float noise: reached
    assert samples.samples_to(run, 1.05 * (1 + 1e-12)) == 100


def test_format_samples_median_range_and_reached_counts():
    assert format_samples([800, 1200, 1900, 1000, math.inf]) == "1100 [800-1900] (4/5)"
    assert format_samples([800, 1200, 1900, 1000, math.inf], spread=False) == "1100 (4/5)"
    assert format_samples([math.inf] * 5) == "never (0/5)"
    assert format_samples([700.0, math.inf]) == "700 (1/2)"
    assert format_samples([300.0, 300.0]) == "300 [300-300] (2/2)"


def test_room_taken_between_the_compiler_and_the_reference():
    assert np.allclose(room_taken([1.0, 1.1, 1.2, 1.3], 1.2), [0.0, 0.5, 1.0, 1.5])
    # below the compiler (no valid map: 0) takes none of the room
    assert np.allclose(room_taken([0.9, 0.0], 1.02), [0.0, 0.0])
    # no room above the compiler: nothing to take
    assert np.isnan(room_taken([0.9, 1.0], 1.0)).all()
    assert np.isnan(room_taken([0.9], 0.95)).all()


def test_the_best_known_map_is_never_below_the_compilers_own():
    assert best_known(None, False, [0.97, 0.99]) == (1.0, "compiler")
    assert best_known(0.999, False, [0.98]) == (1.0, "compiler")
    assert best_known(None, False, [0.97, 1.02]) == (1.02, "runs")
    assert best_known(1.05, False, [1.02]) == (1.05, "solver")
    assert best_known(1.01, False, [1.02]) == (1.02, "run")
    assert best_known(1.0, True, [0.9]) == (1.0, "proven")


def test_compare_ranks_never_as_infinity():
    u, p, first = compare(np.array([60.0] * 4), np.array([100, math.inf, math.inf, math.inf]))
    assert u == 0.0 and first == 1.0 and p < 0.05
    # both never: all tied, no evidence either way
    u, p, first = compare(np.array([math.inf] * 3), np.array([math.inf] * 3))
    assert p == 1.0 and first == 0.5
    # reversed roles: the other got there first in every pair
    assert compare(np.array([math.inf] * 2), np.array([5.0, 6.0]))[2] == 0.0


def test_analysis_rows_levels_and_tests(study):
    (result,) = samples.analyse(plan_cfg(study, "problems=[nnpi/resnet101]"), study)
    assert result.reference == 1.2 and result.reference_text == "the proven optimum"
    assert result.levels == pytest.approx({"compiler": 1.0, "99%": 1.188, "99.9%": 1.1988})
    labels = [r.label for r in result.rows]
    assert labels == ["egrl", "ea", "ea (native)", "egrl (from resnet50)"]
    egrl, ea, native, tuned = result.rows
    assert np.array_equal(egrl.samples["compiler"], [40] * 4)
    assert np.array_equal(egrl.samples["99%"], [60] * 4)
    assert np.array_equal(egrl.samples["99.9%"], [100] * 4)
    # five EA runs: the one that stopped early counts; the killed native run does not
    assert len(ea.runs) == 5 and len(native.runs) == 4
    assert np.array_equal(ea.samples["99%"], [100, math.inf, math.inf, math.inf, math.inf])
    assert np.isinf(ea.samples["compiler"]).sum() == 1  # 0.95 at its end
    assert np.array_equal(native.samples["compiler"], [20] * 4) and native.start == "native"
    assert ea.start == "initial" and tuned.start == "from resnet50"
    assert egrl.test is None
    u, p, first = ea.test
    assert u == 0.0 and first == 1.0 and p < 0.05
    # fine-tuned reaches 99% at 20 (seeds 2, 3: 1.2, 1.3) or 100: EGRL first in some pairs
    assert tuned.samples["99%"].tolist() == [100, 100, 20, 20]
    assert 0 < tuned.test[2] < 1
    assert np.allclose(egrl.cached, 1 - 1 / 1.5) and np.allclose(native.cached, 1 - 1 / 1.25)
    assert any("incomplete" in n for n in result.notes)


def test_reference_when_the_optimum_is_not_proven(study):
    runs = [load_run(run_dir(study, "scratch", "egrl", 0))]  # final 1.2
    info = OptimumInfo("resnet101", "nnpi", {}, 1.3, False, 0.05, "test")
    value, text = samples.reference_of(runs, info)
    assert value == 1.3 and "solver" in text and "not proven" in text
    info.speedup = 1.1
    value, text = samples.reference_of(runs, info)
    assert value == 1.2 and "a run's" in text
    value, text = samples.reference_of(runs, None)
    assert value == 1.2 and "any run found" in text


def test_report_and_figure(study, tmp_path):
    cfg = plan_cfg(study, "problems=[nnpi/resnet101]", "seeds=4")
    result = samples.analyse(cfg, study)
    page = runner.Page(tmp_path / "page.md", tmp_path / "fig", "python -m studies run samples")
    text = samples.render(cfg, result, page)
    assert "| egrl | initial | 4 | 40 [40-40] (4/4) | 60 [60-60] (4/4) |" in text
    assert "| ea | initial | 5 |" in text and "100 (1/5)" in text
    assert "EGRL first in 100% of pairs" in text and "the proven optimum" in text
    assert "![nnpi/resnet101](fig/samples_nnpi_resnet101.png)" in text
    assert (tmp_path / "fig" / "samples_nnpi_resnet101.png").stat().st_size > 0


def test_problems_and_fine_tuning_sources(tmp_path):
    cfg = plan_cfg(tmp_path, "problems=[nnpi/resnet50,nnpi/resnet101,nnpi/bert-base]")
    study = samples.problems_of(cfg)
    assert study[0] == samples.Problem("nnpi", "resnet50")
    sources = cfg.finetune.sources
    assert samples.source_workload(study[0], study, sources) == "resnet101"
    assert samples.source_workload(study[2], study, sources) == "resnet50"
    # the preferred source is not in the study: the first other workload of the target
    assert samples.source_workload(study[0], [study[0], study[2]], sources) == "bert-base"
    mcm = samples.Problem("mcm", "unet-l3-w32-c3")
    assert samples.source_workload(mcm, [*study, mcm], sources) is None
    for bad in ("resnet50", "tpu/resnet50", "nnpi/"):
        with pytest.raises(SystemExit, match="problem"):
            samples.problems_of(plan_cfg(tmp_path, f"problems=[{bad}]"))
    with pytest.raises(SystemExit, match="modes"):
        samples.problems_of(plan_cfg(tmp_path, "modes=[bogus]"))


def test_plan_stages_modes_agents_and_sources(tmp_path):
    cfg = plan_cfg(
        tmp_path,
        "problems=[nnpi/resnet50,nnpi/resnet101,mcm/x]",
        "agents=[egrl,random,sa]",
        "seeds=3",
        "budget=200",
    )
    first, tuned = samples.plan(cfg, tmp_path)
    groups = list(dict.fromkeys(s.group for s in first))
    assert groups == [
        f"{p}/{m}/{a}"
        for p in ("nnpi-resnet50", "nnpi-resnet101", "mcm-x")
        for m, agents in (("scratch", ("egrl", "random", "sa")), ("native", ("egrl", "sa")))
        for a in agents
    ]
    assert len(first) == 3 * len(groups) and all(s.after is None for s in first)
    scratch = first[0]
    assert scratch.overrides == (
        "hwmodel=nnpi",
        "workload.name=resnet50",
        "agent=egrl",
        "budget=200",
    )
    native = next(s for s in first if s.group == "mcm-x/native/sa")
    assert native.overrides[:2] == ("hwmodel=mcm", "reward=repaired")
    assert "agent.start=native" in native.overrides
    # fine-tuned: EGRL on each NNP-I workload from the other's scratch EGRL run, seed 0
    assert {s.group for s in tuned} == {
        "nnpi-resnet50/finetune/egrl",
        "nnpi-resnet101/finetune/egrl",
    }
    one = tuned[0]
    source = "nnpi-resnet101/scratch/egrl/seed0"
    assert one.group == "nnpi-resnet50/finetune/egrl" and one.after == source
    assert f"init_from={hydra_quote(str((tmp_path / source).resolve()))}" in one.overrides


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """EGRL on resnet18 and resnet34 from scratch, then fine-tuned from the other workload's
    seed-0 run, 2 seeds of 20 measurements, through the runner."""
    out = tmp_path / "out"
    assert runner.run("samples-smoke", [f"out={out}"]) == 0
    section = render.read_section("samples", out / "results.md")
    assert section.startswith("## Samples: paid measurements")
    assert "2 seeds per row" in section
    for workload, other in (("resnet18", "resnet34"), ("resnet34", "resnet18")):
        problem = samples.Problem("nnpi", workload)
        tuned = RunDir(run_dir(out, "finetune", "egrl", 0, problem))
        source = run_dir(out, "scratch", "egrl", 0, samples.Problem("nnpi", other)).resolve()
        assert tuned.read_config()["init_from"] == str(source)
        cache = json.loads((out / problem.key / CACHE_FILE).read_text())
        optimum = cache[f"nnpi/{workload}"]
        assert optimum["proven"]  # resnet18 and resnet34: CP-SAT proves it in well under 1 s
        reference = optimum["speedup"]
        heading = f"### nnpi/{workload} (budget 20; reference {reference:.4f}x, the proven optimum)"
        part = section.split(heading, 1)[1].split("\n### ", 1)[0]
        finals = []
        for mode, start in (("scratch", "initial"), ("finetune", f"from {other}")):
            paths = [run_dir(out, mode, "egrl", s, problem) for s in (0, 1)]
            rows = [RunDir(p).read_metrics_rows() for p in paths]
            values = [float(r[-1]["best_speedup"]) for r in rows]
            finals += values
            reached = [
                next(
                    (
                        int(x["iterations"])
                        for x in r
                        if float(x["best_speedup"]) >= 0.99 * reference * (1 - 1e-9) - 1e-12
                    ),
                    None,
                )
                for r in rows
            ]
            line = next(x for x in part.splitlines() if x.startswith(f"| egrl | {start} | 2 |"))
            low, mid, high = min(values), statistics.median(values), max(values)
            assert f"| {mid:.4f} [{low:.4f}-{high:.4f}] |" in line
            hits = sorted(r for r in reached if r is not None)
            if len(hits) == 2:
                cell = f"{statistics.median(hits):.0f} [{hits[0]}-{hits[1]}] (2/2)"
            else:
                cell = f"{hits[0]} (1/2)" if hits else "never (0/2)"
            assert line.split(" | ")[4] == cell
        assert reference >= max(finals) - 5e-5
        assert f"![nnpi/{workload}](figures/samples_nnpi_{workload}.png)" in part
        assert (out / "figures" / f"samples_nnpi_{workload}.png").stat().st_size > 0
