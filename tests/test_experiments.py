"""Studies of many runs: aggregation of run directories, sweeps, Figure 3."""

from __future__ import annotations

import csv
import itertools
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from egrl.aggregate import aggregate, step_values, sweep_record, swept_keys
from egrl.aggregate.optimum import CACHE_FILE, optimum_speedups
from egrl.runs import collect_runs

METRICS_HEADER = ["generation", "iterations", "wall_s", "best_reward", "best_speedup"]


def fake_run(
    root: Path,
    name: str,
    agent: str,
    workload: str,
    seed: int,
    curve: list[tuple[int, float, float]],
    budget: int = 100,
    overrides: dict | None = None,
    config: dict | None = None,
    metrics_tail: str = "",
) -> Path:
    """A run directory as egrl-train writes it: config.yaml, metrics.csv, .hydra/overrides.yaml."""
    run = root / name
    run.mkdir(parents=True)
    cfg = {
        "seed": seed,
        "budget": budget,
        "agent": {"name": agent},
        "workload": {"name": workload},
        "hwmodel": {"name": "nnpi", "params": {}},
        "population": {"size": 20, "boltzmann_fraction": 0.2},
        "reward": "egrl",
        **(config or {}),
    }
    (run / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with open(run / "metrics.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(METRICS_HEADER)
        for g, (it, sp, wall) in enumerate(curve, 1):
            writer.writerow([g, it, wall, sp**2, sp])
        f.write(metrics_tail)
    items = {"agent": agent, "seed": seed, **(overrides or {})}
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump([f"{k}={v}" for k, v in items.items()] + ["experiment=compare"]),
        encoding="utf-8",
    )
    return run


def final_speedups(rows: list[dict], **where) -> list[float]:
    return [float(r["mean"]) for r in rows if all(r[k] == str(v) for k, v in where.items())]


@pytest.fixture
def study(tmp_path) -> Path:
    """Two agents x three seeds on resnet50, one cell missing, plus broken run directories."""
    root = tmp_path / "multirun"
    finals = {("ea", 0): 1.10, ("ea", 1): 1.30, ("ea", 2): 1.20, ("random", 0): 0.70}
    finals[("random", 1)] = 0.90
    for (agent, seed), final in finals.items():
        curve = [(20, 0.5, 1.0), (60, final - 0.1, 2.0), (100, final, 3.0 + seed)]
        fake_run(root, f"{agent}-{seed}", agent, "resnet50", seed, curve)
    # incomplete: 60 of 100 iterations
    fake_run(root, "random-2", "random", "resnet50", 2, [(20, 0.4, 1.0), (60, 0.8, 2.0)])
    # failed before any generation: config but no metrics
    failed = fake_run(root, "ea-9", "ea", "resnet50", 9, [(100, 9.9, 1.0)])
    (failed / "metrics.csv").unlink()
    # never started: a Hydra record only
    (root / "broken" / ".hydra").mkdir(parents=True)
    (root / "broken" / ".hydra" / "overrides.yaml").write_text("- agent=ea\n")
    return root


def test_aggregate_fake_tree_means_stds_and_problems(study, tmp_path):
    out = tmp_path / "out"
    agg = aggregate([study], out_dir=out, solve_optimum=False)

    rows = list(csv.DictReader(open(out / "final.csv", encoding="utf-8")))
    by_agent = {r["agent"]: r for r in rows}
    assert set(by_agent) == {"ea", "random"}
    ea = by_agent["ea"]
    assert int(ea["n"]) == 3 and ea["seeds"] == "0 1 2"
    assert float(ea["mean"]) == pytest.approx(statistics.mean([1.10, 1.30, 1.20]))
    assert float(ea["std"]) == pytest.approx(statistics.stdev([1.10, 1.30, 1.20]))
    assert float(ea["wall_s_mean"]) == pytest.approx(statistics.mean([3.0, 4.0, 5.0]), abs=1e-3)
    rnd = by_agent["random"]
    assert int(rnd["n"]) == 2
    assert float(rnd["mean"]) == pytest.approx(0.80)
    assert float(rnd["std"]) == pytest.approx(statistics.stdev([0.70, 0.90]))

    reasons = {str(p.path): p.reason for p in agg.problems}
    assert "incomplete: 60 of 100 iterations" in reasons[str(study / "random-2")]
    assert "no metrics.csv" in reasons[str(study / "ea-9")]
    assert "no config.yaml" in reasons[str(study / "broken")]
    # grid cells: the ea seed 9 run failed (reported once, not missing); random seed 9 and
    # nothing else is missing
    missing = [p.path for p in agg.problems if p.reason.startswith("missing")]
    assert missing == ["<workload=resnet50, agent=random, seed=9>"]

    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "1.200 ± 0.100" in summary and "0.800 ± 0.141" in summary
    assert "incomplete: 60 of 100" in summary
    curves = list(csv.DictReader(open(out / "curves.csv", encoding="utf-8")))
    assert len(curves) == 5 * 3 + 2  # five finished runs and the incomplete one
    assert curves[0].keys() >= {"agent", "workload", "seed", "iterations", "best_speedup", "wall_s"}
    assert (out / "figure3_resnet50.png").stat().st_size > 0


def test_truncated_metrics_row_ends_the_curve(tmp_path):
    fake_run(
        tmp_path, "r", "sa", "resnet50", 0, [(50, 0.5, 1.0), (100, 0.7, 2.0)], metrics_tail="3,1"
    )
    found = collect_runs([tmp_path])
    assert len(found.runs) == 1 and found.runs[0].final_speedup == 0.7
    assert not found.problems


def test_duplicate_runs_keep_the_newer(tmp_path):
    fake_run(tmp_path, "a", "ga", "resnet50", 0, [(100, 0.6, 1.0)])
    newer = fake_run(tmp_path, "b", "ga", "resnet50", 0, [(100, 0.8, 1.0)])
    found = collect_runs([tmp_path])
    assert [r.path for r in found.runs] == [newer]
    assert "duplicate" in found.problems[0].reason


def test_sweep_groups_by_swept_keys(tmp_path):
    root = tmp_path / "sweep"
    finals = {}
    for size in (10, 20, 40):
        for seed in (0, 1):
            final = 1.0 + size / 100 + seed / 50
            finals[size, seed] = final
            fake_run(
                root,
                f"p{size}-s{seed}",
                "egrl",
                "resnet50",
                seed,
                [(100, final, 1.0)],
                overrides={"population.size": size, "budget": 100},
                config={"population": {"size": size, "boltzmann_fraction": 0.2}},
            )
    found = collect_runs([root])
    assert swept_keys(found.runs) == ["population.size"]
    agg = aggregate([root], out_dir=tmp_path / "out", solve_optimum=False)
    assert agg.keys == ("hwmodel", "workload", "agent", "population.size")
    assert [g.get("population.size") for g in agg.groups] == ["10", "20", "40"]
    for g in agg.groups:
        size = int(g.get("population.size"))
        expect = [finals[size, 0], finals[size, 1]]
        assert g.mean == pytest.approx(statistics.mean(expect))
        assert g.std == pytest.approx(statistics.stdev(expect))
    rows = list(csv.DictReader(open(tmp_path / "out" / "final.csv", encoding="utf-8")))
    assert [r["population.size"] for r in rows] == ["10", "20", "40"]
    assert "| resnet50 | egrl | 20 |" in (tmp_path / "out" / "summary.md").read_text()


def test_sweep_keys_from_config_without_hydra_record(tmp_path):
    for frac in (0.0, 0.5):
        run = fake_run(
            tmp_path,
            f"b{frac}",
            "egrl",
            "resnet50",
            0,
            [(100, 1.0 + frac, 1.0)],
            config={"population": {"size": 20, "boltzmann_fraction": frac}},
        )
        (run / ".hydra" / "overrides.yaml").unlink()
        (run / ".hydra").rmdir()
    found = collect_runs([tmp_path])
    assert swept_keys(found.runs) == ["population.boltzmann_fraction"]


def test_step_values_reads_the_step_function():
    its = np.array([10, 30, 60])
    vals = np.array([0.5, 0.7, 0.9])
    grid = np.array([0, 9, 10, 29, 30, 59, 60, 100])
    assert step_values(its, vals, grid).tolist() == [0.0, 0.0, 0.5, 0.5, 0.7, 0.7, 0.9, 0.9]


def test_optimum_from_agent_run_and_from_cache(tmp_path, monkeypatch):
    runs_root = tmp_path / "runs"
    fake_run(runs_root, "sa", "sa", "resnet50", 0, [(100, 0.9, 1.0)])
    fake_run(runs_root, "sa101", "sa", "resnet101", 0, [(100, 0.9, 1.0)])
    ref = fake_run(runs_root, "opt", "optimum", "resnet50", 0, [(1, 1.25, 3.0)])
    with open(ref / "metrics.csv", "w", newline="", encoding="utf-8") as f:
        f.write("generation,iterations,wall_s,best_speedup,solver_proven,solver_gap\n")
        f.write("1,1,3.0,1.25,True,0.0\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / CACHE_FILE).write_text(
        json.dumps(
            {
                "nnpi/resnet101": {
                    "workload": "resnet101",
                    "hwmodel": "nnpi",
                    "params": {},
                    "speedup": 1.5,
                    "proven": False,
                    "gap": 0.01,
                    "source": "test",
                }
            }
        )
    )

    def no_solve(*args, **kwargs):
        raise AssertionError("the optimum should come from the run and the cache")

    monkeypatch.setattr("egrl.aggregate.optimum.solve_optimum", no_solve)
    agg = aggregate([runs_root], out_dir=cache, figures=False)
    assert [r.agent for r in agg.reference] == ["optimum"]  # finished with its one evaluation
    assert {g.get("agent") for g in agg.groups} == {"sa"}
    # keyed by target: hardware model (and parameters) and workload
    resnet50, resnet101 = agg.optimum["nnpi/resnet50"], agg.optimum["nnpi/resnet101"]
    assert resnet50.speedup == 1.25 and resnet50.tag == "proven"
    assert resnet101.speedup == 1.5 and resnet101.tag == "gap 1.00%"


def test_optimum_is_solved_once_and_cached(tmp_path):
    fake_run(tmp_path / "runs", "r", "random", "resnet18", 0, [(100, 0.9, 1.0)])
    runs = collect_runs([tmp_path / "runs"]).runs
    first = optimum_speedups(runs, cache_dir=tmp_path, time_limit_s=30)
    cached = json.loads((tmp_path / CACHE_FILE).read_text())
    assert cached["nnpi/resnet18"]["speedup"] == pytest.approx(first["resnet18"].speedup)
    again = optimum_speedups(runs, cache_dir=tmp_path, solve=False)
    assert again["resnet18"].speedup == first["resnet18"].speedup


TINY = [
    "workload=resnet18",  # one small workload instead of the preset's three
    "budget=24",
    "population.size=6",
    "policy.hidden=16",
    "policy.out=16",
    "policy.depth=2",
    "policy.heads=2",
    "hydra.sweep.subdir=${hydra.job.num}",
]


def test_sweep_command_names_the_sweep_as_it_was_read(tmp_path, monkeypatch):
    sweep = tmp_path / "multirun" / "results" / "s1"
    sweep.mkdir(parents=True)
    record = {
        "hydra": {
            "overrides": {
                "task": ["agent=random", "seed=0,1"],
                "hydra": ["hydra.mode=MULTIRUN", "hydra.sweep.dir=/elsewhere/s1"],
            },
            "launcher": {"_target_": "x.JoblibLauncher", "n_jobs": 2},
        }
    }
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(record))
    monkeypatch.chdir(tmp_path)
    command = sweep_record(Path("multirun/results/s1")).command
    assert command == "egrl-train -m agent=random seed=0,1 hydra.sweep.dir=multirun/results/s1"


@pytest.mark.slow
def test_multirun_with_joblib_launcher_then_aggregate(tmp_path):
    sweep = tmp_path / "mr"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "egrl.cli.experiment",
            "run",
            "compare",
            "agent=random,ea",
            "seed=0,1",
            *TINY,
            "--sweep-dir",
            str(sweep),
            "--n-jobs",
            "2",
            "--optimum-time",
            "20",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    record = yaml.safe_load((sweep / "multirun.yaml").read_text())
    assert record["hydra"]["launcher"]["n_jobs"] == 2
    assert "JoblibLauncher" in record["hydra"]["launcher"]["_target_"]
    command = sweep_record(sweep).command
    assert command.startswith("egrl-train -m experiment=compare agent=random,ea seed=0,1 ")
    assert "hydra.launcher.n_jobs=2" in command and "hydra.mode" not in command
    agg_dir = sweep / "aggregate"
    curves = list(csv.DictReader(open(agg_dir / "curves.csv", encoding="utf-8")))
    assert {(r["agent"], r["seed"]) for r in curves} == {
        ("random", "0"),
        ("random", "1"),
        ("ea", "0"),
        ("ea", "1"),
    }
    assert all(r["workload"] == "resnet18" for r in curves)
    assert max(int(r["iterations"]) for r in curves) == 24
    assert (agg_dir / "figure3_resnet18.png").stat().st_size > 0
    summary = (agg_dir / "summary.md").read_text()
    assert "| resnet18 | ea | 24 | 2 |" in summary and " ± " in summary
    assert json.loads((agg_dir / "optimum.json").read_text())["nnpi/resnet18"]["proven"]


def test_merged_sweeps_are_separate_grids(tmp_path):
    """Baselines on three workloads x 3 seeds and EGRL on one workload x 2 seeds: no cell
    is missing, although EGRL has no bert-base run and no seed 2."""
    for w in ("resnet50", "bert-base"):
        for agent in ("sa", "ga"):
            for seed in range(3):
                fake_run(tmp_path / "a", f"{agent}-{w}-{seed}", agent, w, seed, [(100, 0.9, 1.0)])
    for seed in range(2):
        fake_run(tmp_path / "b", f"egrl-{seed}", "egrl", "resnet50", seed, [(100, 1.0, 1.0)])
    (tmp_path / "a" / "sa-bert-base-2" / "metrics.csv").unlink()  # failed, not missing
    agg = aggregate([tmp_path / "a", tmp_path / "b"], solve_optimum=False)
    assert [p.reason for p in agg.problems] == [
        "no metrics.csv (the run failed or stopped before one generation)"
    ]
    assert {(g.get("workload"), g.get("agent"), g.n) for g in agg.groups} == {
        ("resnet50", "egrl", 2),
        ("resnet50", "sa", 3),
        ("resnet50", "ga", 3),
        ("bert-base", "sa", 2),
        ("bert-base", "ga", 3),
    }


# ------------------------------------------------------------ runs that never mix (issue 25)
def test_runs_of_different_targets_are_never_averaged_together(tmp_path, monkeypatch):
    """The issue's NNP-I and mcm runs of resnet50 with sa, seed 0 each: two groups, each
    with the optimum of its own target; other hardware parameters, another reward and
    another workload file split groups too, and every key that differs is a column."""
    root = tmp_path / "runs"
    mcm = {"name": "mcm", "params": {"num_chips": 36, "seed": 0}}
    fake_run(root, "nnpi", "sa", "resnet50", 0, [(100, 1.125, 1.0)])
    fake_run(root, "mcm", "sa", "resnet50", 0, [(100, 0.3, 1.0)], config={"hwmodel": mcm})
    fake_run(
        root,
        "mcm-1",
        "sa",
        "resnet50",
        1,
        [(100, 0.5, 1.0)],
        config={"hwmodel": {**mcm, "params": {"num_chips": 36, "seed": 1}}},
    )
    fake_run(
        root,
        "mcm16",
        "sa",
        "resnet50",
        0,
        [(100, 0.7, 1.0)],
        config={"hwmodel": {"name": "mcm", "params": {"num_chips": 16, "seed": 0}}},
    )
    fake_run(
        root, "repaired", "sa", "resnet50", 0, [(100, 1.5, 1.0)], config={"reward": "repaired"}
    )
    fake_run(root, "onnx", "sa", "net/mynet.onnx", 0, [(100, 1.0, 1.0)])
    fake_run(root, "json", "sa", "net/mynet.json.gz", 0, [(100, 0.9, 1.0)])
    cache = tmp_path / "out"
    cache.mkdir()
    optima = {
        "nnpi/resnet50": ("nnpi", {}, 1.25),
        'mcm/resnet50?{"num_chips": 36, "seed": 0}': ("mcm", {"num_chips": 36, "seed": 0}, 0.6),
    }
    (cache / CACHE_FILE).write_text(
        json.dumps(
            {
                key: {
                    "workload": "resnet50",
                    "hwmodel": hw,
                    "params": params,
                    "speedup": sp,
                    "proven": True,
                    "gap": 0.0,
                    "source": "test",
                }
                for key, (hw, params, sp) in optima.items()
            }
        )
    )
    agg = aggregate([root], out_dir=cache, solve_optimum=False, figures=False)
    # hwmodel.params.seed holds each run's seed: a part of the sample, not a key
    assert agg.keys == ("hwmodel", "workload", "agent", "hwmodel.params.num_chips", "reward")
    cells = {
        (g.get("hwmodel"), g.get("workload"), g.get("hwmodel.params.num_chips"), g.get("reward")): g
        for g in agg.groups
    }
    assert sorted((k, g.n, round(g.mean, 3)) for k, g in cells.items()) == [
        (("mcm", "resnet50", "16", "egrl"), 1, 0.7),
        (("mcm", "resnet50", "36", "egrl"), 2, 0.4),
        (("nnpi", "net/mynet.json.gz", "-", "egrl"), 1, 0.9),
        (("nnpi", "net/mynet.onnx", "-", "egrl"), 1, 1.0),
        (("nnpi", "resnet50", "-", "egrl"), 1, 1.125),
        (("nnpi", "resnet50", "-", "repaired"), 1, 1.5),
    ]
    summary = (cache / "summary.md").read_text(encoding="utf-8")
    head = next(line for line in summary.splitlines() if line.startswith("| workload"))
    assert head.split(" | ")[:5] == [
        "| workload",
        "agent",
        "hwmodel",
        "hwmodel.params.num_chips",
        "reward",
    ]
    assert head.count("budget") == 1
    assert (
        "| resnet50 | sa | nnpi | - | egrl | 100 | 1 | 1.125 | 1.125 – 1.125 | 1.0 | 1.250 (proven) | 90.0% |"
        in summary
    )
    assert (
        "| resnet50 | sa | mcm | 36 | egrl | 100 | 2 | 0.400 ± 0.141 | 0.300 – 0.500 | 1.0 | 0.600 (proven) | 66.7% |"
        in summary
    )
    rows = list(csv.DictReader(open(cache / "final.csv", encoding="utf-8")))
    assert {r["hwmodel"] for r in rows} == {"nnpi", "mcm"}


def test_a_swept_budget_is_one_column(tmp_path):
    for budget in (50, 100):
        for seed in (0, 1):
            fake_run(
                tmp_path / "sweep",
                f"b{budget}-{seed}",
                "sa",
                "resnet50",
                seed,
                [(budget, 0.9, 1.0)],
                budget=budget,
                overrides={"budget": budget},
            )
    agg = aggregate(
        [tmp_path / "sweep"], out_dir=tmp_path / "out", solve_optimum=False, figures=False
    )
    assert agg.keys == ("hwmodel", "workload", "agent", "budget")
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    head = next(line for line in summary.splitlines() if line.startswith("| workload"))
    assert head.startswith("| workload | agent | budget | n |") and head.count("budget") == 1
    assert "Same in every group: hwmodel=nnpi." in summary


@pytest.mark.slow
def test_a_folder_of_unrelated_runs_gives_a_short_summary(tmp_path):
    """egrl-train's own layout (runs/<hwmodel>/<workload>/<agent>/seed...): no grid, so no
    missing cells; a flat folder whose runs fill less than half of their grid is one line."""
    root = tmp_path / "runs"
    for i, (w, a) in enumerate(
        itertools.product(("resnet18", "resnet50", "bert-base"), ("sa", "ga", "random"))
    ):
        for seed in range(i % 3 + 1):
            fake_run(
                root / "nnpi" / w / a,
                f"seed{seed}-2026",
                a,
                w,
                seed,
                [(100, 0.5, 1.0)],
                overrides={"budget": 100 + i},
            )
    fake_run(root / "nnpi" / "resnet18" / "sa", "seed9-2026", "sa", "resnet18", 9, [(50, 0.4, 1.0)])
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "egrl.cli.experiment",
            "aggregate",
            str(root),
            "--no-optimum",
            "--no-figures",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "1 left out: 1 incomplete:" in lines
    assert not any("missing" in line for line in lines)
    assert out.stderr.strip() == "WARNING 1 left out: 1 incomplete (listed in summary.md)"
    assert len(lines) < 30

    flat = tmp_path / "flat"
    for i, (w, a) in enumerate(
        itertools.product(("resnet18", "resnet50", "bert-base"), ("sa", "ga", "random"))
    ):
        fake_run(flat, f"{w}-{a}", a, w, i, [(100, 0.5, 1.0)])
    agg = aggregate([flat], solve_optimum=False)
    assert [p.reason for p in agg.problems] == [
        "not one sweep: its 9 runs fill 9 of the 81 cells of workload x agent x seed; "
        "missing cells not listed"
    ]


def test_workload_files_get_labels_that_tell_them_apart():
    from egrl.rundir import workload_label

    assert workload_label("resnet50") == "resnet50"
    assert workload_label("models/mynet.onnx") == "mynet.onnx"
    assert workload_label("models/mynet.json.gz") == "mynet.json.gz"


def test_the_comparison_study_leaves_out_other_hardware_models(tmp_path):
    from omegaconf import OmegaConf

    from studies.compare import other_hardware, plan_hwmodel

    plan = OmegaConf.create({"overrides": ["threads=1"], "set": []})
    assert plan_hwmodel(plan) == "nnpi"
    assert plan_hwmodel(OmegaConf.create({"overrides": [], "set": ["hwmodel=mcm"]})) == "mcm"
    fake_run(tmp_path, "nnpi", "sa", "resnet50", 0, [(100, 1.1, 1.0)])
    fake_run(
        tmp_path,
        "mcm",
        "sa",
        "resnet50",
        0,
        [(100, 0.3, 1.0)],
        config={"hwmodel": {"name": "mcm", "params": {}}},
    )
    agg = aggregate([tmp_path], solve_optimum=False, leave_out=other_hardware(plan))
    assert [(g.get("hwmodel"), g.n) for g in agg.groups] == [("nnpi", 1)]
    assert [p.reason for p in agg.problems] == [
        "hwmodel=mcm: not the study's hardware model (nnpi); left out"
    ]
