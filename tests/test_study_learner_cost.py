"""The learner-cost study: its plan (per-problem budgets, the variants as valid egrl-train
configs), its analysis on hand-made run directories (shares, samples to the level, wall
time, the learner's share, the tests against the reference, the runs left out), and its
smoke preset end to end."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from egrl.aggregate.optimum import CACHE_FILE
from egrl.rundir import RunDir
from studies import learner_cost, render, runner
from studies.stats import compare, mann_whitney
from tests.study_runs import write_optimum, write_run

PROBLEM = "nnpi-resnet101"


def plan_cfg(out, *overrides):
    return runner.load_plan(
        "learner-cost",
        [
            f"out={out}",
            f"problems=[{PROBLEM}]",
            "variants=[egrl,gr0.25,ea]",
            "budget=100",
            f"wall_target.problem={PROBLEM}",
            *overrides,
        ],
    )


@pytest.fixture
def study(tmp_path):
    """Optimum 1.13 proven (99%: 1.1187). EGRL at Table 2's rate: finals 1.10-1.13, wall
    40-43 s of which 30 s learning, 90 steps per 100 paid; gr0.25: 1.12 at 50 paid, wall
    15-18 s; EA: finals 1.000-1.003, wall 10-13 s. Left out: an EGRL run of another budget
    and an EA run that stopped half-way."""
    out = tmp_path / "out"
    root = out / PROBLEM
    for seed in range(4):
        egrl = [(50, 1.0), (100, 1.10 + 0.01 * seed)]
        columns = {"t_learner": [10, 30], "gradient_steps": [40, 50]}
        write_run(
            root / "egrl" / f"seed{seed}",
            "egrl",
            "resnet101",
            seed,
            egrl,
            wall_s=[20, 40 + seed],
            columns=columns,
        )
        gr = [(50, 1.12), (100, 1.12 + 0.001 * seed)]
        columns = {"t_learner": [1, 3], "gradient_steps": [10, 12]}
        path = root / "gr0.25" / f"seed{seed}"
        write_run(path, "egrl", "resnet101", seed, gr, wall_s=[5, 15 + seed], columns=columns)
        ea = [(50, 0.9), (100, 1.0 + 0.001 * seed)]
        path = root / "ea" / f"seed{seed}"
        write_run(
            path, "ea", "resnet101", seed, ea, wall_s=[4, 10 + seed], columns={"t_learner": [0, 0]}
        )
    write_run(root / "egrl" / "seed4", "egrl", "resnet101", 4, [(100, 1.2)], budget=200)
    write_run(root / "ea" / "seed4", "ea", "resnet101", 4, [(50, 0.9)])
    write_optimum(root, "resnet101", 1.13, proven=True)
    return out


def test_analysis_reads_shares_samples_wall_time_and_the_tests(study):
    (result,) = learner_cost.analyse(plan_cfg(study), study)
    assert result.reference == 1.13 and result.source == "proven" and result.budget == 100
    egrl, gr, ea = result.variants
    assert [v.variant for v in result.variants] == ["egrl", "gr0.25", "ea"]
    assert len(egrl.runs) == len(ea.runs) == 4
    assert np.allclose(egrl.final, [1.10, 1.11, 1.12, 1.13])
    assert np.all(np.isinf(egrl.to_level[:2])) and np.allclose(egrl.to_level[2:], 100)
    assert np.allclose(gr.to_level, 50) and np.all(np.isinf(ea.to_level))
    assert np.allclose(egrl.wall_s, [40, 41, 42, 43])
    assert np.allclose(egrl.learner_share, [30 / w for w in (40, 41, 42, 43)])
    assert np.allclose(ea.learner_share, 0)
    assert np.allclose(egrl.updates, 0.9) and np.allclose(gr.updates, 0.22)
    assert np.all(np.isnan(ea.updates))  # EA logs no gradient steps
    assert result.baseline_wall_s == 11.5
    assert result.wall_ratio(egrl) == pytest.approx(41.5 / 11.5)
    assert result.wall_ratio(gr) == pytest.approx(16.5 / 11.5)
    assert egrl.final_test is None and egrl.level_test is None
    assert gr.final_test == mann_whitney(gr.final, egrl.final)
    u, p, first = gr.level_test  # every gr0.25 run got there before every EGRL run
    assert (u, first) == (0.0, 1.0) and gr.level_test == compare(gr.to_level, egrl.to_level)
    assert sorted(result.left_out) == [
        "`ea/seed4`: 50 of 100 paid measurements",
        "`egrl/seed4`: budget 200, the plan's is 100",
    ]


def test_report_summary_target_and_figure(study, tmp_path):
    cfg = plan_cfg(study, "seeds=4")
    result = learner_cost.analyse(cfg, study)
    page = runner.Page(tmp_path / "page.md", tmp_path / "figures", "python -m studies run x")
    text = learner_cost.render(cfg, result, page)
    assert text.startswith("## The learner's cost: update rate, critic and minibatch")
    assert f"({PROBLEM} 100), 4 seeds per variant and problem" in text
    assert "| gr0.25 | 99.25%, 1.43x |" in text and "| egrl | 98.67%, 3.61x |" in text
    assert "met by gr0.25 (1.43x); missed by egrl (3.61x)" in text
    row = (
        "| egrl | 4 | 1.1150 ± 0.0129 | 98.67% ± 1.14% | 100 [100-100] (2/4) |  |  "
        "| 42 [40-43] | 72% | 3.61x | 0.90 [0.90-0.90] |"
    )
    assert row in text
    assert (
        "| gr0.25 | 4 | 1.1215 ± 0.0013 |" in text
        and "| 50 [50-50] (4/4) | p = 0.384 | p = 0.019, 100% |" in text
    )
    assert "| ea | 4 | 1.0015 ± 0.0013 | 88.63% ± 0.11% | never (0/4) |" in text
    assert "| 12 [10-13] | 0% | 1.00x | - |" in text
    assert "Left out:" in text and "- `ea/seed4`: 50 of 100 paid measurements" in text
    assert f"![{PROBLEM}](figures/learner-cost_{PROBLEM}.png)" in text
    assert (tmp_path / "figures" / f"learner-cost_{PROBLEM}.png").stat().st_size > 0
    assert text.rstrip().endswith("```\npython -m studies run x\n```")


def test_plan_gives_each_problem_its_budget_and_every_variant_its_overrides(tmp_path):
    cfg = runner.load_plan("learner-cost", [f"out={tmp_path}"])
    (stage,) = learner_cost.plan(cfg, tmp_path)
    # the three short problems run every variant, resnet50 at 4,000 all but two
    assert len(stage) == (3 * 9 + 7) * cfg.seeds == 34 * 5
    budgets = {s.group.split("/")[0]: s.overrides[-1] for s in stage}
    assert budgets == {
        "nnpi-resnet101": "budget=400",
        "nnpi-sequential-resnet101": "budget=400",
        "mcm-mobilenet-d50-w50-k5-e4": "budget=400",
        "nnpi-resnet50": "budget=4000",
    }
    by_group = {s.group: s.overrides for s in stage}
    assert by_group["nnpi-resnet50/gr0.25"] == (
        "hwmodel=nnpi",
        "workload=resnet50",
        "agent=egrl",
        "learner=sac-table2",
        "learner.gradient_ratio=0.25",
        "budget=4000",
    )
    assert "screen=critic" in by_group["nnpi-resnet101/screen-critic"]
    assert "nnpi-resnet50/screen-critic" not in by_group
    assert by_group["nnpi-resnet50/gr0.25-small"][-4:-1] == (
        "learner.gradient_ratio=0.25",
        "learner.critic_hidden=32",
        "learner.critic_depth=2",
    )
    assert by_group["nnpi-resnet50/ea"][2:] == ("agent=ea", "budget=4000")
    assert {s.path for s in stage} >= {"nnpi-resnet50/egrl/seed4", "nnpi-resnet101/ea/seed0"}


def test_every_variant_is_a_valid_run(tmp_path):
    """Each variant's overrides compose into a config egrl-train accepts (the small critic
    divides by the policy's heads); the EGRL variants differ from Table 2's in one key."""
    from hydra import compose, initialize_config_module

    from egrl.cli.build import train_config

    cfg = runner.load_plan("learner-cost", [f"out={tmp_path}"])
    with initialize_config_module("configs", version_base=None):
        composed = {
            v: train_config(compose("train", overrides=list(cfg.variant_overrides[v])))
            for v in cfg.variants
        }
    table2 = composed["egrl"].agent.learner
    assert (table2.gradient_ratio, table2.batch_size, table2.critic_hidden) == (1.0, 24, None)
    assert composed["gr0.1"].agent.learner.gradient_ratio == 0.1
    small = composed["small-critic"]
    assert small.agent.learner.critic_hidden % small.agent.policy.heads == 0
    assert small.agent.learner.critic_hidden < small.agent.policy.hidden
    assert composed["batch8"].agent.learner.batch_size == 8
    assert composed["screen-critic"].screen.name == "critic"
    assert not composed["ea"].agent.use_learner


def test_a_plan_naming_a_variant_without_overrides_is_refused(tmp_path):
    cfg = plan_cfg(tmp_path, "variants=[egrl,gr0.3]")
    with pytest.raises(runner.StudyError, match="variant 'gr0.3' has no overrides"):
        next(learner_cost.plan(cfg, tmp_path))


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """EGRL at Table 2's rate, with a small critic, and EA, two seeds of 24 paid
    measurements on resnet18, through the runner; the section's numbers are the runs'."""
    out = tmp_path / "out"
    assert runner.run("learner-cost-smoke", [f"out={out}"]) == 0
    section = render.read_section("learner-cost", out / "results.md")
    assert section.startswith("## The learner's cost: update rate, critic and minibatch")
    assert "(nnpi-resnet18 24), 2 seeds per variant and problem" in section
    root = out / "nnpi-resnet18"
    optimum = json.loads((root / CACHE_FILE).read_text())["nnpi/resnet18"]
    walls = {}
    for variant in ("egrl", "small-critic", "ea"):
        finals, walls[variant] = [], []
        for seed in (0, 1):
            files = RunDir(root / variant / f"seed{seed}")
            config, rows = files.read_config(), files.read_metrics_rows()
            assert int(rows[-1]["iterations"]) >= 24
            finals.append(float(rows[-1]["best_speedup"]))
            walls[variant].append(float(rows[-1]["wall_s"]))
            if variant == "small-critic":
                assert (config["learner"]["critic_hidden"], config["learner"]["critic_depth"]) == (
                    8,
                    1,
                )
            if variant != "ea":
                assert config["learner"]["gradient_ratio"] == 1.0
                assert sum(int(r["gradient_steps"]) for r in rows) > 0
        mean, std = statistics.mean(finals), statistics.stdev(finals)
        assert f"| {variant} | 2 | {mean:.4f} ± {std:.4f} |" in section
    ratio = statistics.median(walls["egrl"]) / statistics.median(walls["ea"])
    assert f"| {ratio:.2f}x |" in section
    assert math.isfinite(ratio) and ratio > 0
    kind = "optimum" if optimum["proven"] else "best known"
    assert f"### nnpi-resnet18 (budget 24, {kind} " in section
    assert "Target: wall time at most 2.00x ea's on nnpi-resnet18" in section
    assert "python -m studies run learner-cost-smoke" in section
    assert (out / "figures" / "learner-cost_nnpi-resnet18.png").stat().st_size > 0
