"""The physics study: its plan (every problem's prior read first, then agent by agent, every
run recording its evaluations), the reads at exact board runs on a hand-made
``evaluations.csv`` (and from ``metrics.csv`` where a run has none), its analysis, targets
and section on hand-made run directories, and its smoke preset end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from egrl.rundir import EVALUATION_COLUMNS, RunDir
from egrl.runs import load_run
from studies import physics, render, runner
from studies.runner import CommandSpec, RunSpec
from studies.stats import compare
from tests.study_runs import write_run

ORIGINAL = ("chip-resnet50", "chip-dram-resnet50", "chip-llc-resnet50", "chip-resnet101")
DEPARTING = ("banks", "stream", "ops", "mislead")
FIGURES = (
    "{name:nnpi,sram_mib:2,llc_mib:24,dram_gbps:67.2,llc_gbps:680,sram_gbps:6800,peak_tops:100}"
)
ORDER = [
    "physics",
    "ea",
    "mbo",
    "ea-prior",
    "egrl-prior",
    "egrl",
    "physics-nocal",
    "physics-noresidual",
    "physics-searchers",
    "physics-noregion",
    "physics-local",
    "physics-forest",
]


def test_the_plan_reads_every_prior_first_then_runs_agent_by_agent(tmp_path):
    cfg = runner.load_plan("physics", [f"out={tmp_path}"])
    (stage,) = list(physics.plan(cfg, tmp_path))
    commands = [s for s in stage if isinstance(s, CommandSpec)]
    runs = [s for s in stage if isinstance(s, RunSpec)]
    assert stage[: len(commands)] == commands  # the readings before every run
    problems = (
        *ORIGINAL,
        "chip-bert-base",
        *(f"chip-{n}-resnet50" for n in DEPARTING),
        *(f"chip-{n}-resnet101" for n in DEPARTING),
    )
    assert [c.done for c in commands] == [f"{p}/prior.json" for p in problems]
    banks = commands[problems.index("chip-banks-resnet101")].argv
    assert banks[5:7] == ("hwmodel=external", "workload=resnet101")
    assert "--chip banks" in banks[7] and banks[8] == f"++hwmodel.params.prior={FIGURES}"
    assert len(runs) == 13 * len(ORDER) * 5 and int(cfg.budget) == 400
    assert list(dict.fromkeys(s.group.split("/")[1] for s in runs)) == ORDER
    by_path = {s.path: s for s in runs}
    mine = by_path["chip-mislead-resnet101/physics/seed4"].overrides
    assert mine[-4:] == (
        "agent=mbo",
        "budget=400",
        "prior_time_limit_s=60.0",
        "record_evaluations=true",
    )
    assert f"++hwmodel.params.prior={FIGURES}" in mine
    assert "agent.physics=off" in by_path["chip-resnet50/mbo/seed0"].overrides
    assert "agent.start=native" in by_path["chip-bert-base/egrl/seed0"].overrides
    assert "agent.residual=forest" in by_path["chip-resnet101/physics-forest/seed1"].overrides
    assert all(s.overrides[-1] == "record_evaluations=true" for s in runs)
    assert physics.reads_of(cfg) == [1, 10, 20, 50, 100, 400]
    assert physics.reads_of(runner.load_plan("physics", ["budget=30"])) == [1, 10, 20, 30]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("prior=null", "problem 'chip-resnet50' has no prior"),
        ("tests=[[physics,bogus]]", "tests names 'bogus', not among the agents"),
        ("tests=[[physics]]", "expected \\[AGENT, AGAINST\\]"),
        ("reads=[0,10]", "reads has 0: expected board runs >= 1"),
    ],
)
def test_a_bad_plan_is_refused(tmp_path, override, message):
    cfg = runner.load_plan("physics", [f"out={tmp_path}", override])
    with pytest.raises(runner.StudyError, match=message):
        next(physics.plan(cfg, tmp_path))


# ------------------------------------------------------------------ reads
def write_evaluations(path, rows):
    """``evaluations.csv`` of ``(iterations, paid, valid, speedup)`` rows, in order."""
    files = RunDir(path)
    records = [
        {
            "proposal": i,
            "generation": 1 + (it - 1) // 4 if it else 1,
            "iterations": it,
            "paid": paid,
            "wall_s": 0.1 * i,
            "source": "mbo",
            "valid": valid,
            "reward": speedup - 1.0,
            "speedup": speedup,
            "latency_s": 1e-3 / speedup if speedup else 1e-3,
        }
        for i, (it, paid, valid, speedup) in enumerate(rows, 1)
    ]
    files.append_evaluations(EVALUATION_COLUMNS, records)


def test_the_read_at_k_is_the_best_among_the_first_k_board_runs(tmp_path):
    """The compiler's map answered free at 0 board runs, a refused map at 1, a map read at
    2 and answered again from the cache, a worse one at 3 and the best at 4."""
    write_evaluations(
        tmp_path,
        [
            (0, 0, 1, 1.0),
            (1, 1, 0, 0.0),
            (2, 1, 1, 1.05),
            (2, 0, 1, 1.05),
            (3, 1, 1, 0.9),
            (4, 1, 1, 1.2),
        ],
    )
    curve = physics.evaluations_curve(RunDir(tmp_path).read_evaluations())
    assert curve.exact and curve.paid == 4  # the compiler's map and the cached one are free
    reads = [physics.read_at(curve, k) for k in (0, 1, 2, 3, 4, 100)]
    assert reads == [1.0, 1.0, 1.05, 1.05, 1.2, 1.2]
    assert physics.samples_to(curve, 1.05) == 2 and physics.samples_to(curve, 1.2) == 4
    assert physics.samples_to(curve, 1.2 * (1 - 1e-12)) == 4  # float noise still reaches it
    assert math.isinf(physics.samples_to(curve, 1.3))


def test_a_run_that_paid_the_prior_first_reads_it_at_one(tmp_path):
    """No valid map before the first board run reads NaN; the prior's map paid first is the
    read at 1, whatever comes later."""
    write_evaluations(tmp_path, [(1, 1, 1, 1.1), (2, 1, 0, 0.0), (3, 1, 1, 1.08)])
    curve = physics.evaluations_curve(RunDir(tmp_path).read_evaluations())
    assert math.isnan(physics.read_at(curve, 0))
    assert [physics.read_at(curve, k) for k in (1, 2, 3)] == [1.1, 1.1, 1.1]
    # a read some runs have no valid map for says how many had one
    assert physics.read_text(np.array([np.nan, 1.0, 1.2])) == "1.1000 ± 0.1414 (2/3)"
    assert physics.read_text(np.full(2, np.nan)) == "-"


def test_a_run_without_a_record_is_read_a_round_at_a_time(tmp_path):
    """No ``evaluations.csv``: the metrics' rounds; an empty record reads the same."""
    path = write_run(tmp_path / "run", "ea", "resnet101", 0, [(5, 1.0), (10, 1.1)], 10)
    curve = physics.board_curve(load_run(path))
    assert not curve.exact and curve.paid == 10 and math.isnan(physics.read_at(curve, 4))
    assert [physics.read_at(curve, k) for k in (5, 9, 10)] == [1.0, 1.0, 1.1]
    (path / "evaluations.csv").write_text(",".join(EVALUATION_COLUMNS) + "\n")
    assert not physics.board_curve(load_run(path)).exact


# ------------------------------------------------------------------ analysis and section
def write_prior(out, problem, speedup):
    entry = {
        "speedup": speedup,
        "valid": True,
        "proven": True,
        "status": "optimal",
        "solve_s": 2.0,
        "fell_back": False,
        "time_limit_s": 60.0,
    }
    (out / problem).mkdir(parents=True, exist_ok=True)
    (out / problem / "prior.json").write_text(json.dumps(entry))


def write_recorded(path, agent, seed, speedups, budget=20, round_=4):
    """A run that paid ``speedups`` one board run each (all valid), in rounds of
    ``round_``, with the physics model's cumulative seconds (0.1 and 0.2 a round)."""
    best = np.maximum.accumulate(speedups)
    ends = list(range(round_, budget + 1, round_))
    curve = [(k, float(best[k - 1])) for k in ends]
    model = {
        "t_fit": [0.1 * g for g in range(1, len(ends) + 1)],
        "t_solve": [0.2 * g for g in range(1, len(ends) + 1)],
    }
    write_run(path, agent, "resnet101", seed, curve, budget, start="prior", columns=model)
    write_evaluations(path, [(k, 1, 1, s) for k, s in enumerate(speedups, 1)])


def physics_speedups(seed):
    """The prior's map first (1.10), 1.20 (+ seed / 1000) at 8, worse maps after it."""
    return [1.10, 1.12, 1.15, 1.16, 1.18, 1.19, 1.195, 1.20 + 0.001 * seed] + [1.0] * 12


@pytest.fixture
def study(tmp_path):
    """chip-resnet101: the prior's map 1.10; physics from it (recorded), EA from the
    compiler's map (metrics only: 1.05 at 10, 1.15-1.17 at 20), no mbo run.
    chip-mislead-resnet101: nothing yet."""
    out = tmp_path / "out"
    write_prior(out, "chip-resnet101", 1.10)
    for seed in range(3):
        path = out / "chip-resnet101" / "physics" / f"seed{seed}"
        write_recorded(path, "mbo", seed, physics_speedups(seed))
        curve = [(5, 1.0), (10, 1.05), (15, 1.10 + 0.01 * seed), (20, 1.15 + 0.01 * seed)]
        write_run(out / "chip-resnet101" / "ea" / f"seed{seed}", "ea", "resnet101", seed, curve, 20)
    return out


def study_cfg(out, *extra):
    return runner.load_plan(
        "physics",
        [
            f"out={out}",
            "problems=[chip-resnet101,chip-mislead-resnet101]",
            "agents=[physics,ea,mbo]",
            "budget=20",
            "early=10",
            "reads=[1,10,20]",
            "tests=[[physics,ea],[physics,mbo]]",
            "targets.from_runs=5",
            *extra,
        ],
    )


def test_analysis_reads_every_run_at_exact_board_runs(study):
    (res,) = physics.analyse(study_cfg(study), study)
    assert res.problem == "chip-resnet101" and res.ks == [1, 10, 20]
    assert (res.reference, res.source) == (pytest.approx(1.202), "runs")
    mine, ea = res.agents["physics"], res.agents["ea"]
    assert mine.exact == 3 and ea.exact == 0
    assert np.allclose(
        mine.reads, [[1.10, 1.200, 1.200], [1.10, 1.201, 1.201], [1.10, 1.202, 1.202]]
    )
    assert np.isnan(ea.reads[:, 0]).all() and np.allclose(ea.final, [1.15, 1.16, 1.17])
    assert mine.to_level.tolist() == [6, 6, 6] and np.isinf(ea.to_level).all()  # 99% of 1.202
    assert mine.to_prior.tolist() == [1, 1, 1] and ea.to_prior.tolist() == [15, 15, 15]
    assert np.allclose(mine.s_per_round, 0.3) and np.allclose(mine.s_per_map, 1.5 / 20)
    assert mine.has_model and not ea.has_model
    assert set(res.tests) == {("physics", "ea")}  # no mbo run
    assert res.tests[("physics", "ea")]["final"][2] == 1.0


def test_the_section_gives_the_reads_samples_tests_and_targets(study, tmp_path):
    cfg = study_cfg(study)
    result = physics.analyse(cfg, study)
    page = runner.Page(tmp_path / "page.md", tmp_path / "figures", "python -m studies run physics")
    text = physics.render(cfg, result, page)
    assert text.startswith(
        "## Physics first: the calibrated datasheet, solved, against the searchers"
    )
    assert (
        "| chip-resnet101 | 1.0000 | 1.1000 | solved in 2.0 s, optimal | 1.2020 (runs) "
        "| 1.1000 ± 0.0000 | 1.2010 ± 0.0010 | 6 (3/3) |" in text
    )
    assert (
        "| physics | 3 | 1.1000 ± 0.0000 | 1.2010 ± 0.0010 | 1.2010 ± 0.0010 | 6 (3/3) | 1 (3/3) "
        "| 0.300 [0.300-0.300] | 0.075 [0.075-0.075] |" in text
    )
    assert (
        "| ea | 3 | - | 1.0500 ± 0.0000 | 1.1600 ± 0.0100 | never (0/3) | 15 (3/3) |  |  |" in text
    )
    final = compare(-np.array([1.2, 1.201, 1.202]), -np.array([1.15, 1.16, 1.17]))
    level = compare(np.array([6.0, 6, 6]), np.full(3, np.inf))
    assert (
        f"| chip-resnet101 | physics | ea | 1.2010 ± 0.0010 | 1.1600 ± 0.0100 "
        f"| p = {final[1]:.3f}, 100% | 6 (3/3) | never (0/3) | p = {level[1]:.3f}, 100% |" in text
    )
    lines = physics.target_lines(cfg, result)
    assert lines[0].endswith("**met** (3 runs).")
    assert "**not measured** (within 10 on 1/5 original (1 measured), within 50 on 0/8" in lines[1]
    assert lines[2].endswith("**met** (on 1 of 1 problems).")
    assert "**not measured** (no physics and ea runs on chip-mislead-resnet50" in lines[3]
    assert lines[4].endswith("**met** (chip-resnet101 0.075 s).")
    assert "- chip-resnet101: mbo without a finished run" in text
    assert "- chip-resnet101: runs without evaluations.csv, read a round at a time: ea 3" in text
    assert "- chip-mislead-resnet101: the prior's map not read yet" in text
    assert "The compiler's map: 1.0000x; the solved prior's map, read once: 1.1000x" in text
    assert "(figures/physics_chip-resnet101.png)" in text
    assert "python -m studies run physics" in text


def test_the_targets_say_where_they_are_not_met(study):
    """Where the datasheet misleads EA passes physics from 15 board runs on; EA's final
    above physics at 10; the model too slow; a first read off the prior's map."""
    out = study
    write_prior(out, "chip-mislead-resnet101", 1.0)
    for seed in range(2):
        base = out / "chip-mislead-resnet101"
        write_recorded(base / "physics" / f"seed{seed}", "mbo", seed, [1.0] + [1.05] * 19)
        curve = [(5, 1.0), (10, 1.05), (15, 1.3), (20, 1.3)]
        write_run(base / "ea" / f"seed{seed}", "ea", "resnet101", seed, curve, 20)
    cfg = study_cfg(
        out, "targets.model_s=0.01", "targets.original=[chip-resnet101]", "targets.original_least=1"
    )
    lines = physics.target_lines(cfg, physics.analyse(cfg, out))
    assert lines[0].endswith("**met** (5 runs).")
    assert "**not met** (within 10 on 1/1 original (1 measured), within 50 on 0/8" in lines[1]
    assert "medians: chip-resnet101 6, chip-mislead-resnet101 inf" in lines[1]
    assert "**not met** (chip-mislead-resnet101: ea 1.3000 > 1.0500)." in lines[2]
    assert lines[3].endswith("**not met** (chip-mislead-resnet101: first at 15, by up to 0.2500).")
    assert "**not met** (chip-resnet101 0.075 s; chip-mislead-resnet101 0.075 s)" in lines[4]
    write_prior(out, "chip-mislead-resnet101", 1.02)
    lines = physics.target_lines(cfg, physics.analyse(cfg, out))
    assert "**not met** (chip-mislead-resnet101: 2/2)" in lines[0]


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """Physics first and EA on NNP-I's MobileNet-v2 (its own model is its prior), two seeds
    of 16 board runs: every run records its evaluations; the section gives the reads, the
    samples, the test and every target."""
    out = tmp_path / "out"
    assert runner.run("physics-smoke", [f"out={out}"]) == 0
    prior = json.loads((out / "nnpi-mobilenet-v2" / "prior.json").read_text())
    section = render.read_section("physics", out / "results.md")
    assert section.startswith("## Physics first")
    assert f"| nnpi-mobilenet-v2 | 1.0000 | {prior['speedup']:.4f} | solved in " in section
    for agent in ("physics", "ea"):
        for seed in (0, 1):
            files = RunDir(out / "nnpi-mobilenet-v2" / agent / f"seed{seed}")
            assert files.read_config()["record_evaluations"] is True
            assert int(files.read_evaluations()["iterations"][-1]) == 16
    row = next(line for line in section.splitlines() if line.startswith("| physics | 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == f"{prior['speedup']:.4f} ± 0.0000"  # the prior's map paid first
    assert cells[7].endswith("(2/2)") and cells[8] == "1 (2/2)"  # samples to 99%, to the prior
    assert float(cells[10].split()[0]) > 0  # the model's seconds per paid map
    assert "| nnpi-mobilenet-v2 | physics | ea |" in section and "p = " in section
    assert (
        "first paid map is the prior's (its read at 1 board run is the prior's map): **met** (2 runs)."
        in section
    )
    assert section.count("**met**") + section.count("**not met**") == 5
    assert (out / "figures" / "physics_nnpi-mobilenet-v2.png").stat().st_size > 0
    assert "python -m studies run physics-smoke" in section
