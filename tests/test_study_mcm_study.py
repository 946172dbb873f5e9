"""The multi-chip study: its curves and Table 2 on hand-made runs, what it plans, and its
smoke preset end to end through the runner (pretraining, snapshot choice, zero-shot and
search runs, report).

Hand-made runs on two test graphs A and B (iterations -> best speedup), checked by hand:

* pg (from scratch), seed 0: A 10->1.0, 20->1.21; B 10->1.0, 20->1.0  => geomean 1.0, 1.1
* pg, seed 1: A and B 10->1.0, 20->1.0                                => 1.0, 1.0
* egrl fine-tuned, seed 0: A 5->1.21, 15->1.44; B 5->1.0, 15->1.0     => 1.1 (5), 1.2 (15)
* egrl fine-tuned, seed 1: A 5->1.0, 15->1.21; B 8->1.0, 15->1.0      => NaN (5), 1.0 (8), 1.1 (15)
* random, seed 0 on A and B; seed 1 on A only (left out: no run on B)
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from egrl.rundir import RunDir
from studies import mcm_curves as mc
from studies import mcm_study as mcm
from studies import render, runner
from studies.stats import format_mean_std, geomean

COLUMNS = ("generation", "iterations", "best_speedup", "wall_s")


def write_run(path: Path, agent: str, workload: str, seed: int, curve: dict, init_from=None):
    """A finished run at ``path``: its config and one metrics row per ``iterations: speedup``."""
    run = RunDir(path)
    run.path.mkdir(parents=True)
    cfg = {
        "agent": {"name": agent},
        "workload": {"name": workload},
        "hwmodel": {"name": "mcm", "params": {}},
        "seed": seed,
        "budget": max(curve),
        "init_from": init_from,
    }
    run.write_config(cfg)
    for g, (it, sp) in enumerate(curve.items(), 1):
        run.append_metrics(
            COLUMNS, {"generation": g, "iterations": it, "best_speedup": sp, "wall_s": g}
        )
    return run.path


@pytest.fixture()
def tree(tmp_path):
    root = tmp_path / "study"
    snap = "pre/policies/iter_000100.safetensors"
    for agent, graph, seed, curve, init in [
        ("pg", "A", 0, {10: 1.0, 20: 1.21}, None),
        ("pg", "B", 0, {10: 1.0, 20: 1.0}, None),
        ("pg", "A", 1, {10: 1.0, 20: 1.0}, None),
        ("pg", "B", 1, {10: 1.0, 20: 1.0}, None),
        ("egrl", "A", 0, {5: 1.21, 15: 1.44}, snap),
        ("egrl", "B", 0, {5: 1.0, 15: 1.0}, snap),
        ("egrl", "A", 1, {5: 1.0, 15: 1.21}, snap),
        ("egrl", "B", 1, {8: 1.0, 15: 1.0}, snap),
        ("random", "A", 0, {20: 1.0}, None),
        ("random", "B", 0, {20: 1.0}, None),
        ("random", "A", 1, {20: 1.0}, None),
    ]:
        group = "finetune" if init else "scratch"
        write_run(root / group / graph / agent / f"seed{seed}", agent, graph, seed, curve, init)
    return root


LIMITS = {
    "A": {"nodes": 3, "dp": 1.0, "optimum": 1.21, "status": "OPTIMAL", "solve_wall_s": 0.1},
    "B": {"nodes": 4, "dp": 1.0, "optimum": 1.0, "status": "OPTIMAL", "solve_wall_s": 0.1},
}


def curves_of(tree):
    return mc.seed_curves(runner.read_runs(tree).runs, ["A", "B"])


def test_seed_and_method_curves(tree):
    curves, problems = curves_of(tree)
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

    methods = {m.method: m for m in mc.method_curves(curves)}
    assert list(methods) == ["random", "pg", "egrl-finetune"]
    pg = methods["pg"]
    np.testing.assert_allclose(pg.mean, [1.0, 1.05])
    np.testing.assert_allclose(pg.std, [0.0, np.std([1.1, 1.0], ddof=1)])
    ft = methods["egrl-finetune"]
    np.testing.assert_array_equal(ft.x, [5, 8, 15])
    assert math.isnan(ft.mean[0]) and math.isnan(ft.std[0])  # seed 1 undefined at 5 samples
    np.testing.assert_allclose(ft.mean[1:], [1.05, 1.15])
    assert ft.samples == 15


def test_samples_to_a_level():
    x, y = np.array([5, 8, 15]), np.array([np.nan, 1.05, 1.15])
    assert mc.first_reach(x, y, 1.0) == 8
    assert mc.first_reach(x, y, 1.1) == 15
    assert mc.first_reach(x, y, 1.2) is None
    # a value equal to the level up to rounding reaches it (studies.stats' slack)
    assert mc.first_reach(x, np.array([1.0, 1.1 - 1e-13, 1.2]), 1.1) == 8


def test_level_table_counts_unreached(tree):
    curves, _ = curves_of(tree)
    table = mc.level_table(mc.method_curves(curves), [1.04, 1.12, 1.3], "pg")
    rows = {r.method: r for r in table}
    pg, ft = rows["pg"], rows["egrl-finetune"]
    # 1.04: pg's mean reaches 1.05 at 20; only seed 0 reaches it alone
    assert (pg.cells[0].samples, pg.cells[0].reached, pg.cells[0].seeds) == (20, 1, 2)
    assert pg.cells[0].reduction == pytest.approx(1.0)
    # fine-tuning: mean 1.05 at 8 samples, 20 / 8 fewer; both seeds reach it
    assert (ft.cells[0].samples, ft.cells[0].reached) == (8, 2)
    assert ft.cells[0].reduction == pytest.approx(2.5) and not ft.cells[0].bound
    # 1.12: pg never (0 of 2 seeds); fine-tuning at 15 (seed 0 only): pg's whole budget
    # of 20 over 15 is a lower bound on the reduction
    assert pg.cells[1].samples is None and pg.cells[1].reached == 0
    assert (ft.cells[1].samples, ft.cells[1].reached) == (15, 1)
    assert ft.cells[1].reduction == pytest.approx(20 / 15) and ft.cells[1].bound
    # 1.3: nobody
    assert all(r.cells[2].samples is None and r.cells[2].reached == 0 for r in rows.values())
    assert rows["random"].cells[0].samples is None and rows["random"].final.n == 1
    assert math.isnan(rows["random"].final.std)  # one seed: no spread shown


def test_default_levels():
    levels = mc.default_levels(dp=1.0, optimum=1.1)
    assert [v for _, v in levels] == [1.0, 1.05, 1.09, 1.1]
    assert [n for n, _ in levels][0] == "contiguous DP"
    assert len(mc.default_levels(dp=1.0, optimum=1.0)) == 1  # no room: one level


def test_render_on_hand_made_runs(tree, tmp_path):
    cfg = OmegaConf.create(
        {"out": str(tmp_path / "out"), "reference": "pg", "smoke": False, "seeds": 2}
        | {"budget": 20, "pretrain_budget": 100}
    )
    found = runner.read_runs(tree / "scratch", tree / "finetune")
    seeds, missing = mc.seed_curves(found.runs, ["A", "B"])
    curves = mc.method_curves(seeds)
    geo = {k: geomean([LIMITS[w][k] for w in "AB"]) for k in ("dp", "optimum")}
    levels = mc.default_levels(geo["dp"], geo["optimum"])
    rows = mc.level_table(curves, [v for _, v in levels], "pg")
    graphs = mcm.Graphs(["t1", "t2"], ["v"], ["A", "B"], {"C": "too big"})
    result = mcm.Result(graphs, curves, rows, levels, LIMITS, geo, {}, missing)
    page = runner.Page(tmp_path / "docs" / "results.md", tmp_path / "docs" / "figures", "CMD")
    md = mcm.render(cfg, result, page)
    assert "> 2 test graphs, 2 seeds, budget 20 paid samples per run; pretraining 100 " in md
    assert "Left out (no partition fits the package): `C` (too big)." in md
    assert "![Figure 5](figures/mcm_figure5.png)" in md
    assert (page.figures / mcm.FIGURE).stat().st_size > 0
    ft = next(line for line in md.splitlines() if line.startswith("| EGRL fine-tuning"))
    # level 1.0: fine-tuning's mean is defined from 8 samples, pg's from 10 (10 / 8 = 1.25x);
    # level 1.09: fine-tuning's mean at 15 (both seeds reach it), pg's mean never (max 1.05,
    # though its seed 0 alone reaches 1.1): the reduction is at least 20 / 15
    cells = ft.split(" | ")
    assert cells[1] == "8 (1.25x; 2/2)" and cells[3] == "15 (>1.33x; 2/2)"
    assert cells[-3] == "1.1500 ± 0.0707"
    pg = next(line for line in md.splitlines() if line.startswith("| RL from scratch (pg)"))
    assert pg.split(" | ")[3] == "N.A. (1/2)"
    random = next(line for line in md.splitlines() if line.startswith("| Random"))
    assert random.split(" | ")[-3] == "1.0000"  # one seed: no spread
    assert "| A | 3 | 1.0000 | 1.2100 | nan | optimal | 0.1 |" in md
    assert "```bash\nCMD\n```" in md and "- random seed 1: no finished run on B; left out" in md
    lines = (tmp_path / "out" / mcm.CURVES_FILE).read_text(encoding="utf-8").splitlines()
    assert lines[0] == "method,samples,geomean_mean,geomean_std,seeds"
    assert len(lines) == 1 + 1 + 2 + 3  # random 1 point, pg 2, fine-tuning 3


def test_runs_of_the_former_script_are_not_planned_again(tmp_path):
    """A run finished in Hydra's ``agent=...,seed=S,workload.name=W`` directory counts."""
    out = tmp_path / "out"
    old = out / "scratch" / "agent=pg,budget=20,seed=0,workload.name=A"
    write_run(old, "pg", "A", 0, {10: 1.0, 20: 1.1})
    cfg = OmegaConf.create({"budget": 20, "seeds": 2, "target": [], "policy": []})
    stage = mcm.specs(cfg, mcm.SCRATCH, ["pg", "sa"], ["A"], [])
    kept = mcm.not_made_before(out, stage)
    assert [s.path for s in kept] == [
        "scratch/A/pg/seed1",
        "scratch/A/sa/seed0",
        "scratch/A/sa/seed1",
    ]
    assert mcm.spec_key(stage[0]) == ("pg", "A", 0, 20)


def test_pretrain_config_carries_the_reward(tmp_path):
    """The study pretrains with reward=repaired: config.yaml records it, the envs use it."""
    from egrl.agents.egrl.pretrain import PretrainConfig, read_config
    from egrl.agents.egrl.transfer import read_run_info

    cfg = PretrainConfig(train=["resnet18"], holdout=[], hwmodel="mcm", reward="repaired")
    RunDir(tmp_path).write_config(cfg.to_dict())
    assert read_config(tmp_path).reward == "repaired"
    assert read_run_info(tmp_path).reward == "repaired"
    assert cfg.run_info.make_env("resnet18").reward == "repaired"
    assert cfg.train_config().reward == "repaired"
    with pytest.raises(ValueError, match="unknown reward"):
        PretrainConfig(reward="bogus")


#: the smoke preset made smaller still: 2 training graphs, 1 validation and 1 test graph,
#: random search and zero-shot only, Hydra's basic launcher (one process per group)
TINY = [
    "smallest={train: 2, val: 1, test: 1}",
    "budget=20",
    "pretrain_budget=24",
    "snapshot_every=2",
    "scratch_agents=[random]",
    "finetune_agents=[]",
    "reference=random",
    "optimum_time_s=5",
    "optimum_workers=1",
    "launcher=[]",
]


@pytest.mark.slow
def test_smoke_study_end_to_end(tmp_path, monkeypatch, study_in_process):
    out, page = tmp_path / "out", tmp_path / "docs" / "results.md"
    overrides = [f"out={out}", f"page={page}", f"figures={tmp_path / 'docs' / 'figures'}", *TINY]
    assert runner.run("mcm-study-smoke", overrides) == 0
    cfg = runner.load_plan("mcm-study-smoke", overrides)
    graphs = mcm.study_graphs(cfg)
    (test,) = graphs.test
    assert len(graphs.train) == 2 and len(graphs.val) == 1

    # the snapshot chosen on the validation graph: the best geomean, its file in policies/
    choice = json.loads((out / mcm.SELECTION_FILE).read_text(encoding="utf-8"))
    scores = {k: v for k, v in choice["scores"].items() if math.isfinite(v)}
    assert choice["val_geomean_greedy"] == max(scores.values())
    snapshot = Path(choice["snapshot"])
    assert snapshot.parent == RunDir(out / mcm.PRETRAIN).policies and snapshot.exists()

    # every planned run finished where the plan puts it; zero-shot starts with its greedy map
    for path in (f"scratch/{test}/random/seed0", f"zero-shot/{test}/seed1"):
        assert runner.finished(out / path), path
    zero = RunDir(out / "zero-shot" / test / "seed0")
    assert zero.read_config()["agent"]["policy"] == str(snapshot.resolve())
    assert zero.read_metrics_rows()[0]["iterations"] == "1"

    # the section's numbers are the runs' (one test graph: its geomean is the run's best)
    section = render.read_section(mcm.SECTION, page)
    assert "Smoke-scale run (1 test graphs, 2 seeds, budget 20" in section
    assert f"Pretrained snapshot: {snapshot.name} " in section
    lines = section.splitlines()
    for label, root in (("Random", "scratch"), ("RL zero-shot", "zero-shot")):
        runs = runner.read_runs(out / root).runs
        row = next(line for line in lines if line.startswith(f"| {label}")).split(" | ")
        assert row[-3] == format_mean_std([r.final_speedup for r in runs])
        assert row[-2:] == [str(max(int(r.iterations[-1]) for r in runs)), "2 |"]
    limits = json.loads((out / mcm.LIMITS_FILE).read_text(encoding="utf-8"))
    (lim,) = limits.values()
    assert f"| {test} | {lim['nodes']} | {lim['dp']:.4f} | {lim['optimum']:.4f} |" in section
    assert "python -m studies run mcm-study-smoke " in section
    assert section.endswith("### Runs left out\n\nnone")
    assert (out / mcm.CURVES_FILE).exists()

    # again: nothing is launched, the pretraining is not redone
    launched = []
    monkeypatch.setattr(
        runner.subprocess,
        "run",
        lambda cmd, check: launched.append(cmd) or subprocess.CompletedProcess(cmd, 0),
    )
    assert runner.run("mcm-study-smoke", overrides) == 0
    assert launched == []

    # with fine-tuning asked for: those runs start from the chosen snapshot
    cfg = runner.load_plan("mcm-study-smoke", [*overrides, "finetune_agents=[egrl]"])
    stages = mcm.plan(cfg, out)
    (pretrain,) = next(stages)
    assert (out / pretrain.done).exists() and "--resume" in pretrain.argv
    finetune = [s for s in next(stages) if s.group.startswith(mcm.FINETUNE_DIR)]
    assert [s.path for s in finetune] == [
        f"finetune/{test}/egrl/seed0",
        f"finetune/{test}/egrl/seed1",
    ]
    assert f"init_from={runner.hydra_quote(str(snapshot.resolve()))}" in finetune[0].overrides
