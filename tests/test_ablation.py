"""The ablation's analysis on hand-made run directories (no training)."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import yaml

from egrl.experiments.ablation import analyse, first_reaching, plot_problem, report_markdown
from egrl.experiments.optimum import CACHE_FILE
from egrl.experiments.runs import load_run

PROBLEM = "nnpi-resnet101"


def write_run(root, variant, seed, curve, descent, agent="egrl", budget=100):
    run = root / PROBLEM / variant / f"seed={seed}"
    run.mkdir(parents=True)
    cfg = {
        "seed": seed,
        "budget": budget,
        "agent": {"name": agent},
        "workload": {"name": "resnet101"},
        "hwmodel": {"name": "nnpi", "params": {}},
    }
    (run / "config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    with open(run / "metrics.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["generation", "iterations", "wall_s", "best_speedup", "champion_descent"])
        for g, ((it, sp), d) in enumerate(zip(curve, descent), 1):
            w.writerow([g, it, g, sp, d])
    return run


@pytest.fixture
def ablation(tmp_path):
    for seed in range(4):
        write_run(
            tmp_path,
            "egrl",
            seed,
            [(50, 1.0), (100, 1.1 + 0.01 * seed)],
            ["none", "learner+seeding"],
        )
        write_run(
            tmp_path,
            "ea",
            seed,
            [(50, 0.9), (100, 1.0 + 0.001 * seed)],
            ["none", "none"],
            agent="ea",
        )
    (tmp_path / PROBLEM / CACHE_FILE).write_text(
        json.dumps(
            {
                "nnpi/resnet101": {
                    "workload": "resnet101",
                    "hwmodel": "nnpi",
                    "params": {},
                    "speedup": 1.2,
                    "proven": True,
                    "gap": 0.0,
                    "source": "test",
                }
            }
        )
    )
    return tmp_path


def test_analysis_reads_shares_samples_descent_and_the_test(ablation):
    (result,) = analyse(ablation, [PROBLEM], ["egrl", "ea"])
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


def test_report_and_figure(ablation, tmp_path):
    results = analyse(ablation, [PROBLEM], ["egrl", "ea"])
    png = plot_problem(results[0], tmp_path / "fig.png")
    assert png.stat().st_size > 0
    text = report_markdown(results, {PROBLEM: "fig.png"}, seeds=4)
    assert "| egrl | 4 |" in text and "never (0/4)" in text and "p = 0.029" in text


def test_first_reaching_is_inf_when_never_reached(ablation):
    run = load_run(ablation / PROBLEM / "ea" / "seed=0")
    assert first_reaching(run, 1.0) == 100 and math.isinf(first_reaching(run, 1.5))


def test_an_unproven_optimum_below_a_run_gives_way_to_the_best_known(ablation):
    cache = ablation / PROBLEM / CACHE_FILE
    entries = json.loads(cache.read_text())
    for entry in entries.values():
        entry.update(speedup=1.0, proven=False, gap=0.2)  # the solver kept the compiler's map
    cache.write_text(json.dumps(entries))
    (result,) = analyse(ablation, [PROBLEM], ["egrl", "ea"])
    assert not result.optimum_proven and result.optimum == pytest.approx(1.13)
    assert np.all(result.variants["egrl"].final / result.optimum <= 1.0)
    text = report_markdown([result], {PROBLEM: "fig.png"}, seeds=4)
    assert "best known 1.1300x" in text
