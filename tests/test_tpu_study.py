"""The TPU comparison study's analysis (egrl/experiments/tpu_study.py) on hand-made runs,
and one real run at a tiny time budget."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from egrl.experiments.results_sections import read_section, write_section
from egrl.experiments.tpu_study import (
    Run,
    correlations,
    heuristic_of,
    load_runs,
    program_of,
    report,
    run_one,
    run_path,
    speedups,
    table2_markdown,
)

PROBLEM = "resnet50-op"


def record(agent: str, seed: int, time_s, ret, latency_s, bound=2.0, seconds=10.0) -> dict:
    n = program_of(PROBLEM).num_buffers
    return {
        "problem": PROBLEM,
        "agent": agent,
        "seed": seed,
        "seconds": seconds,
        "bound": bound,
        "time_s": list(time_s),
        "ret": list(ret),
        "latency_s": list(latency_s),
        "best_actions": [0] * n,
    }


def hand_made(h: float) -> list[dict]:
    """Two agents, two seeds; ``h`` is the heuristic's latency."""
    return [
        # best within 10 s: ret 1.0 (the 1.6 comes at 20 s), latency 0.8 h
        record("muzero", 0, [1, 5, 20], [0.5, 1.0, 1.6], [1.1 * h, 0.8 * h, 0.5 * h]),
        record("muzero", 1, [2, 4], [0.2, 0.6], [1.2 * h, 1.25 * h]),
        record("es", 0, [3], [0.4], [h]),
        record("es", 1, [11], [0.9], [0.9 * h]),  # nothing within the budget
    ]


@pytest.fixture
def heuristics():
    return {PROBLEM: heuristic_of(PROBLEM)}


def test_final_return_counts_only_the_budget_and_curves_step(heuristics):
    runs = [Run.from_record(r) for r in hand_made(heuristics[PROBLEM].latency_s)]
    assert [r.final() for r in runs[:3]] == [0.5, 0.3, 0.2]
    assert math.isnan(runs[3].final())
    empty = Run.from_record(record("es", 2, [], [], []))
    assert math.isnan(empty.final()) and np.isnan(empty.curve(np.arange(3.0))).all()
    np.testing.assert_allclose(
        runs[0].curve(np.array([0.0, 1.0, 4.9, 5.0, 30.0])), [np.nan, 0.25, 0.25, 0.5, 0.8]
    )
    table = table2_markdown(runs, heuristics)
    assert "| resnet50-op | 471 | 0.4000 ± 0.1414 (2) | 0.2000 ± 0.0000 (1) |" in table
    assert table.rstrip().endswith(f"| {heuristics[PROBLEM].norm_return:.4f} |")


def test_speedups_alone_and_as_the_prod_hybrid(heuristics):
    h = heuristics[PROBLEM].latency_s
    speed = speedups([Run.from_record(r) for r in hand_made(h)], heuristics)
    np.testing.assert_allclose(speed["muzero"].alone, [1.25, 0.8])
    np.testing.assert_allclose(speed["muzero"].prod, [1.25, 1.0])
    np.testing.assert_allclose(speed["es"].alone, [1.0])  # the run without a layout is left out


def test_correlation_of_return_and_latency(heuristics):
    h = heuristics[PROBLEM].latency_s
    ret = np.linspace(0, 1, 50)
    faster = record("muzero", 0, np.arange(50), ret, h * (2 - ret**3))
    (c,) = correlations([Run.from_record(faster)], heuristics)
    assert c.layouts == 50 and c.spearman == pytest.approx(-1.0) and -1 < c.pearson < -0.9
    noisy = record("es", 0, np.arange(50), ret, h * np.random.default_rng(0).random(50))
    (c,) = correlations([Run.from_record(noisy)], heuristics)
    assert abs(c.spearman) < 0.5


def test_report_from_saved_runs(tmp_path, heuristics):
    out = tmp_path / "study"
    for rec in hand_made(heuristics[PROBLEM].latency_s):
        path = run_path(out, PROBLEM, rec["agent"], rec["seed"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rec))
    assert len(load_runs(out)) == 4
    page = tmp_path / "docs" / "results.md"
    result = report(out, tmp_path / "docs" / "figures", page, command="python x.py")
    for key in ("curves", "correlation", "layout-heuristic", "layout-muzero"):
        assert result.figures[key].stat().st_size > 5000
    assert "(figures/tpu_reward_curves.png)" in result.text
    assert "| muzero-prod | 2 | 1.1250 | 1.2500 | 1.0000 | 1/2 |" in result.text
    write_section("tpu-study", result.text, source="python scripts/tpu_study.py", page=page)
    assert "Table 2" in read_section("tpu-study", page)


def test_a_real_run_records_its_layouts_within_the_time(one_thread):
    rec = run_one(PROBLEM, "random-legal", seed=0, seconds=3.0)
    run = Run.from_record(rec)
    assert rec["iterations"] == len(run.ret) >= 1
    assert (np.diff(run.time_s) >= 0).all() and (run.ret <= run.bound).all()
    assert run.final() == pytest.approx(max(run.ret[run.within()]) / run.bound)
    assert rec["best_return"] == pytest.approx(run.ret.max())
