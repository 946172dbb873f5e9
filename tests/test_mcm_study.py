"""The multi-chip study's aggregation, Table 2 and Figure 5 on a fake tree of runs (no training).

Two test graphs A and B. Curves (iterations -> best speedup), checked by hand below:

* pg (from scratch), seed 0: A 10->1.0, 20->1.21; B 10->1.0, 20->1.0  => geomean 1.0, 1.1
* pg, seed 1: A and B 10->1.0, 20->1.0                                => 1.0, 1.0
* egrl fine-tuned, seed 0: A 5->1.21, 15->1.44; B 5->1.0, 15->1.0     => 1.1 (5), 1.2 (15)
* egrl fine-tuned, seed 1: A 5->1.0, 15->1.21; B 8->1.0, 15->1.0      => NaN (5), 1.0 (8), 1.1 (15)
* random, seed 0 on A and B; seed 1 on A only (left out: no run on B)
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import yaml

from egrl.experiments.mcm_curves import (
    default_levels,
    geomean,
    level_table,
    method_curves,
    samples_to_level,
    seed_curves,
)
from egrl.experiments.mcm_report import write_report
from egrl.experiments.runs import collect_runs


def write_run(root, agent, workload, seed, curve, init_from=None):
    run = root / f"{agent}{'-ft' if init_from else ''}" / workload / f"seed{seed}"
    run.mkdir(parents=True)
    cfg = {
        "agent": {"name": agent},
        "workload": {"name": workload},
        "hwmodel": {"name": "mcm", "params": {}},
        "seed": seed,
        "budget": max(curve),
        "init_from": init_from,
    }
    (run / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    rows = ["generation,iterations,best_speedup,wall_s"]
    rows += [f"{g},{it},{sp},{g * 0.1}" for g, (it, sp) in enumerate(curve.items(), 1)]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")


@pytest.fixture()
def tree(tmp_path):
    root = tmp_path / "study"
    write_run(root, "pg", "A", 0, {10: 1.0, 20: 1.21})
    write_run(root, "pg", "B", 0, {10: 1.0, 20: 1.0})
    write_run(root, "pg", "A", 1, {10: 1.0, 20: 1.0})
    write_run(root, "pg", "B", 1, {10: 1.0, 20: 1.0})
    snap = "pre/policies/iter_000100.safetensors"
    write_run(root, "egrl", "A", 0, {5: 1.21, 15: 1.44}, snap)
    write_run(root, "egrl", "B", 0, {5: 1.0, 15: 1.0}, snap)
    write_run(root, "egrl", "A", 1, {5: 1.0, 15: 1.21}, snap)
    write_run(root, "egrl", "B", 1, {8: 1.0, 15: 1.0}, snap)
    write_run(root, "random", "A", 0, {20: 1.0})
    write_run(root, "random", "B", 0, {20: 1.0})
    write_run(root, "random", "A", 1, {20: 1.0})
    return root


LIMITS = {
    "A": {"nodes": 3, "dp": 1.0, "optimum": 1.21, "status": "OPTIMAL", "solve_wall_s": 0.1},
    "B": {"nodes": 4, "dp": 1.0, "optimum": 1.0, "status": "OPTIMAL", "solve_wall_s": 0.1},
}


def test_geomean():
    assert geomean([1.21, 1.0]) == pytest.approx(1.1)
    assert geomean([4.0, 1.0, 2.0]) == pytest.approx(2.0)
    assert math.isnan(geomean([1.2, 0.0]))  # a graph with nothing measured: undefined
    assert math.isnan(geomean([]))


def test_seed_and_method_curves(tree):
    curves, problems = seed_curves(collect_runs([tree]).runs, ["A", "B"])
    by = {(c.method, c.seed): c for c in curves}
    assert sorted(by) == [
        ("egrl-finetune", 0),
        ("egrl-finetune", 1),
        ("pg", 0),
        ("pg", 1),
        ("random", 0),
    ]
    assert [str(p.path) for p in problems] == ["random seed 1"]  # no run on B
    np.testing.assert_allclose(by["pg", 0].y, [1.0, 1.1])
    np.testing.assert_array_equal(by["egrl-finetune", 1].x, [5, 8, 15])
    assert math.isnan(by["egrl-finetune", 1].y[0])  # B not measured before 8 samples
    np.testing.assert_allclose(by["egrl-finetune", 1].y[1:], [1.0, 1.1])

    methods = {m.method: m for m in method_curves(curves)}
    assert list(methods) == ["random", "pg", "egrl-finetune"]
    pg = methods["pg"]
    np.testing.assert_allclose(pg.mean, [1.0, 1.05])
    np.testing.assert_allclose(pg.std, [0.0, np.std([1.1, 1.0], ddof=1)])
    ft = methods["egrl-finetune"]
    np.testing.assert_array_equal(ft.x, [5, 8, 15])
    assert math.isnan(ft.mean[0])  # seed 1 undefined at 5 samples
    np.testing.assert_allclose(ft.mean[1:], [1.05, 1.15])
    assert ft.final_mean == pytest.approx(1.15) and ft.samples == 15


def test_samples_to_level():
    x, y = np.array([5, 8, 15]), np.array([np.nan, 1.05, 1.15])
    assert samples_to_level(x, y, 1.0) == 8
    assert samples_to_level(x, y, 1.1) == 15
    assert samples_to_level(x, y, 1.2) is None


def test_level_table_counts_unreached(tree):
    curves, _ = seed_curves(collect_runs([tree]).runs, ["A", "B"])
    rows = {r.method: r for r in level_table(method_curves(curves), [1.04, 1.12, 1.3], "pg")}
    pg, ft = rows["pg"], rows["egrl-finetune"]
    # 1.04: pg's mean reaches 1.05 at 20; only seed 0 reaches it alone
    assert (pg.cells[0].samples, pg.cells[0].reached, pg.cells[0].seeds) == (20, 1, 2)
    assert pg.cells[0].reduction == pytest.approx(1.0)
    # fine-tuning: mean 1.05 at 8 samples, 20 / 8 fewer; both seeds reach it
    assert (ft.cells[0].samples, ft.cells[0].reached) == (8, 2)
    assert ft.cells[0].reduction == pytest.approx(2.5) and not ft.cells[0].reduction_bound
    # 1.12: pg never (0 of 2 seeds); fine-tuning at 15 (seed 0 only): pg's whole budget
    # of 20 over 15 is a lower bound on the reduction
    assert pg.cells[1].samples is None and pg.cells[1].reached == 0
    assert (ft.cells[1].samples, ft.cells[1].reached) == (15, 1)
    assert ft.cells[1].reduction == pytest.approx(20 / 15) and ft.cells[1].reduction_bound
    # 1.3: nobody
    assert all(r.cells[2].samples is None and r.cells[2].reached == 0 for r in rows.values())
    assert rows["random"].cells[0].samples is None and rows["random"].seeds == 1


def test_default_levels():
    levels = default_levels(dp=1.0, optimum=1.1)
    assert [v for _, v in levels] == [1.0, 1.05, 1.09, 1.1]
    assert [n for n, _ in levels][0] == "contiguous DP"
    assert len(default_levels(dp=1.0, optimum=1.0)) == 1  # no room: one level, the heuristic


def test_write_report(tree, tmp_path):
    rep = write_report([tree], ["A", "B"], LIMITS, tmp_path / "report", reference="pg")
    assert rep.limit_geomean == pytest.approx({"dp": 1.0, "optimum": 1.1})
    assert [v for _, v in rep.levels] == [1.0, 1.05, 1.09, 1.1]
    md = rep.paths["md"].read_text(encoding="utf-8")
    ft_line = next(line for line in md.splitlines() if line.startswith("| EGRL fine-tuning"))
    # level 1.0: fine-tuning's mean is defined from 8 samples, pg's from 10 (10 / 8 = 1.25x);
    # level 1.09: fine-tuning's mean at 15 (both seeds reach it), pg's mean never (max 1.05,
    # though its seed 0 alone reaches 1.1): the reduction is at least 20 / 15
    cells = ft_line.split(" | ")
    assert cells[1] == "8 (1.25x; 2/2)"
    assert cells[3] == "15 (>1.33x; 2/2)"
    pg_line = next(line for line in md.splitlines() if line.startswith("| RL from scratch (pg)"))
    assert pg_line.split(" | ")[3] == "N.A. (1/2)"
    assert cells[-3] == "1.1500 ± 0.0707"
    assert "random seed 1: no finished run on B" in md
    assert rep.paths["png"].stat().st_size > 0
    lines = rep.paths["csv"].read_text(encoding="utf-8").splitlines()
    assert lines[0] == "method,samples,geomean_mean,geomean_std,seeds"
    assert len(lines) == 1 + 1 + 2 + 3  # random 1 point, pg 2, fine-tuning 3


def test_continue_runs_with_a_preset_skips_the_finished_run(tmp_path):
    """A study re-launched with ``experiment=...`` and ``continue_runs=true`` continues it."""
    import csv
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "egrl.cli.train",
        "experiment=quick",
        "agent=random",
        "hwmodel=mcm",
        "reward=repaired",
        "workload=resnet18",
        "budget=20",
        "agent.batch=10",
        "progress=false",
        "continue_runs=true",
        f"hydra.run.dir={run_dir}",
    ]
    first = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    rows = list(csv.DictReader(open(run_dir / "metrics.csv", encoding="utf-8")))
    again = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert list(csv.DictReader(open(run_dir / "metrics.csv", encoding="utf-8"))) == rows


def test_pretrain_config_carries_the_reward(tmp_path):
    """The study pretrains with reward=repaired: config.yaml records it, the envs use it."""
    from omegaconf import OmegaConf

    from egrl.pretrain import PretrainConfig, read_config
    from egrl.transfer import read_run_info

    cfg = PretrainConfig(train=["resnet18"], holdout=[], hwmodel="mcm", reward="repaired")
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg.to_dict()), encoding="utf-8")
    assert read_config(tmp_path).reward == "repaired"
    assert read_run_info(tmp_path).reward == "repaired"
    assert cfg.run_info.make_env("resnet18").reward == "repaired"
    assert cfg.train_config().reward == "repaired"
    with pytest.raises(ValueError, match="unknown reward"):
        PretrainConfig(reward="bogus")


def test_publish_puts_the_report_into_its_section_with_the_figure(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("mcm_study_script", "scripts/mcm_study.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    (report_dir / "figure5.png").write_bytes(b"png")
    (report_dir / "mcm_study.md").write_text("## Multi-chip\n\n![Figure 5](figure5.png)\n")
    page = tmp_path / "docs" / "results.md"
    page.parent.mkdir()
    page.write_text("# Results\n")
    script.publish({"png": report_dir / "figure5.png", "md": report_dir / "mcm_study.md"}, page)
    text = page.read_text()
    assert text.startswith("# Results\n") and "(figures/mcm_figure5.png)" in text
    assert (page.parent / "figures" / "mcm_figure5.png").read_bytes() == b"png"
