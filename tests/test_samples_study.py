"""The samples study: its plan of multiruns, its analysis on hand-made run directories, and
one end-to-end run of scripts/samples_study.py at a tiny scale."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from egrl.experiments.optimum import CACHE_FILE
from egrl.experiments.results_sections import read_section
from egrl.experiments.runs import load_run
from egrl.experiments.samples import (
    SUBDIR,
    Problem,
    analyse,
    compare,
    hydra_quote,
    parse_problem,
    plan,
    plot_problem,
    reference_of,
    report_markdown,
    run_dir,
    samples_to,
    source_workload,
    spread,
)

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = Problem("nnpi", "resnet101")


def write_run(
    path: Path,
    agent: str,
    workload: str,
    seed: int,
    curve: list[tuple[int, float]],
    budget: int = 100,
    start: str | None = "initial",
    init_from: str | None = None,
    proposals: float = 1.25,
    stopped_early: str | None = None,
) -> Path:
    """A run directory as egrl-train writes it; ``curve``: (paid samples, best speedup) per
    generation; ``proposals``: proposals per paid sample."""
    path.mkdir(parents=True)
    agent_cfg = {"name": agent} if start is None else {"name": agent, "start": start}
    cfg = {
        "seed": seed,
        "budget": budget,
        "agent": agent_cfg,
        "workload": {"name": workload},
        "hwmodel": {"name": "nnpi", "params": {}},
        "init_from": init_from,
    }
    (path / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with open(path / "metrics.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["generation", "iterations", "proposals", "wall_s", "best_speedup"])
        for g, (it, sp) in enumerate(curve, 1):
            w.writerow([g, it, int(it * proposals), g, sp])
    best = {"speedup": curve[-1][1], "stopped_early": stopped_early}
    (path / "best_mapping.json").write_text(json.dumps(best), encoding="utf-8")
    return path


def write_optimum(out: Path, problem: Problem, speedup: float, proven: bool) -> None:
    entry = {
        "workload": problem.workload,
        "hwmodel": problem.hwmodel,
        "params": {},
        "speedup": speedup,
        "proven": proven,
        "gap": 0.0 if proven else 0.05,
        "source": "test",
    }
    key = f"{problem.hwmodel}/{problem.workload}"
    (out / problem.key).mkdir(parents=True, exist_ok=True)
    (out / problem.key / CACHE_FILE).write_text(json.dumps({key: entry}), encoding="utf-8")


@pytest.fixture
def study(tmp_path) -> Path:
    """nnpi/resnet101, optimum 1.2 (proven): EGRL reaches 99% (1.188) at 60 in 4 of 4 seeds,
    EA at 100 in one seed and never in three; EA from native reaches the compiler at once;
    EGRL fine-tuned from resnet50; one EA run stopped early, one unfinished."""
    out = tmp_path / "study"
    source = write_run(tmp_path / "src", "egrl", "resnet50", 0, [(100, 1.1)])
    for s in range(4):
        write_run(
            run_dir(out, PROBLEM, "scratch", "egrl", s),
            "egrl",
            "resnet101",
            s,
            [(20, 0.8), (40, 1.0), (60, 1.19), (100, 1.2)],
            proposals=1.5,
        )
        ea = [(50, 0.9), (100, 1.19 if s == 0 else 1.05)]
        write_run(run_dir(out, PROBLEM, "scratch", "ea", s), "ea", "resnet101", s, ea)
        write_run(
            run_dir(out, PROBLEM, "native", "ea", s),
            "ea",
            "resnet101",
            s,
            [(20, 1.0), (100, 1.1)],
            start="native",
        )
        write_run(
            run_dir(out, PROBLEM, "finetune", "egrl", s),
            "egrl",
            "resnet101",
            s,
            [(20, 1.0 + 0.1 * s), (100, 1.2)],
            init_from=str(source),
        )
    # a fifth EA seed that stopped proposing new maps at 70 of 100: it counts
    stale = [(50, 0.9), (70, 0.95)]
    write_run(
        run_dir(out, PROBLEM, "scratch", "ea", 4), "ea", "resnet101", 4, stale, stopped_early="x"
    )
    # killed at 50 of 100: left out
    write_run(run_dir(out, PROBLEM, "native", "ea", 9), "ea", "resnet101", 9, [(50, 1.0)])
    write_optimum(out, PROBLEM, 1.2, proven=True)
    return out


def test_samples_to_a_level_and_never(study):
    run = load_run(run_dir(study, PROBLEM, "scratch", "ea", 1))
    assert samples_to(run, 1.0) == 100 and samples_to(run, 0.9) == 50
    assert math.isinf(samples_to(run, 1.06))
    # the native map's speedup is 1.0 up to float noise: reached
    assert samples_to(run, 1.05 * (1 + 1e-12)) == 100


def test_spread_formats_median_range_and_reached_counts():
    assert spread(np.array([800, 1200, 1900, 1000, math.inf])) == "1100 [800-1900] (4/5)"
    assert spread(np.array([math.inf] * 5)) == "never (0/5)"
    assert spread(np.array([700.0, math.inf])) == "700 (1/2)"
    assert spread(np.array([300.0, 300.0])) == "300 [300-300] (2/2)"


def test_compare_ranks_never_as_infinity():
    u, p, first = compare(np.array([60.0] * 4), np.array([100, math.inf, math.inf, math.inf]))
    assert u == 0.0 and first == 1.0 and p < 0.05
    # both never: all tied, no evidence either way
    u, p, first = compare(np.array([math.inf] * 3), np.array([math.inf] * 3))
    assert p == 1.0 and first == 0.5
    # reversed roles: the other got there first in every pair
    assert compare(np.array([math.inf] * 2), np.array([5.0, 6.0]))[2] == 0.0


def test_analysis_rows_levels_and_tests(study):
    (result,) = analyse(study, [PROBLEM])
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
    assert np.array_equal(tuned.samples["compiler"], [20, 20, 20, 20])
    assert egrl.test is None
    u, p, first = ea.test
    assert u == 0.0 and first == 1.0 and p < 0.05
    # fine-tuned reaches 99% at 20 (seeds 2, 3: 1.2, 1.3) or 100: EGRL first in some pairs
    assert tuned.samples["99%"].tolist() == [100, 100, 20, 20]
    assert 0 < tuned.test[2] < 1
    assert np.allclose(egrl.cached, 1 - 1 / 1.5) and np.allclose(native.cached, 1 - 1 / 1.25)
    assert any("incomplete" in n for n in result.notes)


def test_reference_when_the_optimum_is_not_proven(study):
    from egrl.experiments.optimum import OptimumInfo

    runs = [load_run(run_dir(study, PROBLEM, "scratch", "egrl", 0))]  # final 1.2
    info = OptimumInfo("resnet101", "nnpi", {}, 1.3, False, 0.05, "test")
    value, text = reference_of(runs, info)
    assert value == 1.3 and "solver" in text and "not proven" in text
    info.speedup = 1.1
    value, text = reference_of(runs, info)
    assert value == 1.2 and "a run's" in text
    value, text = reference_of(runs, None)
    assert value == 1.2 and "any run found" in text


def test_report_and_figure(study, tmp_path):
    results = analyse(study, [PROBLEM])
    png = plot_problem(results[0], tmp_path / "fig" / "samples_nnpi_resnet101.png")
    assert png.stat().st_size > 0
    text = report_markdown(results, {PROBLEM.key: "fig.png"}, seeds=4)
    assert "| egrl | initial | 4 | 40 [40-40] (4/4) | 60 [60-60] (4/4) |" in text
    assert "| ea | initial | 5 |" in text and "100 (1/5)" in text
    assert "EGRL first in 100% of pairs" in text and "the proven optimum" in text
    assert "![nnpi/resnet101](fig.png)" in text


def test_parse_problem_and_fine_tuning_sources():
    assert parse_problem("mcm/unet-l3-w32-c3") == Problem("mcm", "unet-l3-w32-c3")
    for bad in ("resnet50", "tpu/resnet50", "nnpi/"):
        with pytest.raises(ValueError, match="problem"):
            parse_problem(bad)
    study = [parse_problem(p) for p in ("nnpi/resnet50", "nnpi/resnet101", "nnpi/bert-base")]
    assert source_workload(study[0], study) == "resnet101"
    assert source_workload(study[2], study) == "resnet50"
    # the preferred source is not in the study: the first other workload of the target
    assert source_workload(study[0], [study[0], study[2]]) == "bert-base"
    mcm = Problem("mcm", "unet-l3-w32-c3")
    assert source_workload(mcm, [*study, mcm]) is None


def test_plan_groups_modes_agents_and_sources(tmp_path):
    problems = [Problem("nnpi", "resnet50"), Problem("nnpi", "resnet101"), Problem("mcm", "x")]
    groups = plan(tmp_path, problems, ["egrl", "random", "sa"], seeds=3, budget=200)
    assert [(g.problem.key, g.mode) for g in groups] == [
        ("nnpi-resnet50", "scratch"),
        ("nnpi-resnet101", "scratch"),
        ("mcm-x", "scratch"),
        ("nnpi-resnet50", "native"),
        ("nnpi-resnet101", "native"),
        ("mcm-x", "native"),
        ("nnpi-resnet50", "finetune"),
        ("nnpi-resnet101", "finetune"),
    ]
    scratch, native, tuned = groups[0], groups[3], groups[6]
    assert "agent=egrl,random,sa" in scratch.overrides and "seed=range(3)" in scratch.overrides
    assert {"budget=200", "continue_runs=true", SUBDIR} <= set(scratch.overrides)
    assert "agent=egrl,sa" in native.overrides and "agent.start=native" in native.overrides
    assert groups[5].overrides[:2] == ["hwmodel=mcm", "reward=repaired"]
    source = (tmp_path / "nnpi-resnet101" / "scratch" / "egrl" / "seed0").resolve()
    assert tuned.source == run_dir(tmp_path, problems[1], "scratch", "egrl", 0)
    assert f"init_from={hydra_quote(str(source))}" in tuned.overrides
    assert tuned.agents == ("egrl",) and tuned.root == tmp_path / "nnpi-resnet50" / "finetune"
    with pytest.raises(ValueError, match="modes"):
        plan(tmp_path, problems, ["egrl"], 1, 10, modes=["bogus"])


def test_hydra_quote_keeps_commas_and_quotes():
    assert hydra_quote("/a,b/it's") == "'/a,b/it\\'s'"


def test_script_end_to_end_tiny(tmp_path):
    """Two agents, one seed, 40 paid samples on resnet18 into a temporary page."""
    page = tmp_path / "results.md"
    page.write_text("# Results\n\nkept\n", encoding="utf-8")
    args = [
        sys.executable,
        str(ROOT / "scripts" / "samples_study.py"),
        "--out",
        str(tmp_path / "study"),
        "--workloads",
        "nnpi/resnet18",
        "--agents",
        "random",
        "greedy-dp",
        "--modes",
        "scratch",
        "--seeds",
        "1",
        "--budget",
        "40",
        "--page",
        str(page),
        "--figures",
        str(tmp_path / "figures"),
    ]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = read_section("samples", page)
    assert text is not None and page.read_text().startswith("# Results\n\nkept\n")
    assert "### nnpi/resnet18 (budget 40;" in text
    assert "| random | - | 1 |" in text and "| greedy-dp | initial | 1 |" in text
    assert (tmp_path / "figures" / "samples_nnpi_resnet18.png").stat().st_size > 0
