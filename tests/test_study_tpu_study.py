"""The TPU comparison study (studies/tpu_study.py): its analysis on hand-made layouts, and
the smoke preset end to end through the runner, its section checked against its runs."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from egrl.agents.base import TIME_LIMIT_REACHED
from egrl.agents.tpu_game import return_bound
from egrl.rundir import RunDir
from studies import runner
from studies import tpu_study as study
from studies.render import read_section
from studies.stats import format_mean_std

PROBLEM = "resnet50-op"


@pytest.fixture(scope="module")
def program() -> study.ProgramInfo:
    return study.program_info("tpu-cmem", (("repeats", 1),), "resnet50@op")


def trace(agent: str, seed: int, time_s, ret, latency_s, bound=2.0, seconds=10.0) -> study.Trace:
    return study.Trace(
        PROBLEM,
        agent,
        seed,
        seconds,
        bound,
        np.asarray(time_s, dtype=np.float64),
        np.asarray(ret, dtype=np.float64),
        np.asarray(latency_s, dtype=np.float64),
    )


def hand_made(h: float) -> list[study.Trace]:
    """Two agents, two seeds; ``h`` is the heuristic's latency."""
    return [
        # best within 10 s: ret 1.0 (the 1.6 comes at 20 s), latency 0.8 h
        trace("muzero", 0, [1, 5, 20], [0.5, 1.0, 1.6], [1.1 * h, 0.8 * h, 0.5 * h]),
        trace("muzero", 1, [2, 4], [0.2, 0.6], [1.2 * h, 1.25 * h]),
        trace("es", 0, [3], [0.4], [h]),
        trace("es", 1, [11], [0.9], [0.9 * h]),  # nothing within the budget
    ]


def result_of(traces: list[study.Trace], program: study.ProgramInfo) -> study.Result:
    programs = {PROBLEM: program}
    agents = study.ordered({t.agent for t in traces}, ["muzero", "es"])
    return study.Result(
        traces,
        [PROBLEM],
        agents,
        programs,
        study.speedups(traces, programs),
        study.correlations(traces, programs, [PROBLEM]),
    )


def test_final_return_counts_only_the_budget_and_curves_step(program):
    traces = hand_made(program.heuristic_latency_s)
    assert [t.final() for t in traces[:3]] == [0.5, 0.3, 0.2]
    assert math.isnan(traces[3].final())
    empty = trace("es", 2, [], [], [])
    assert math.isnan(empty.final()) and np.isnan(empty.curve(np.arange(3.0))).all()
    np.testing.assert_allclose(
        traces[0].curve(np.array([0.0, 1.0, 4.9, 5.0, 30.0])), [np.nan, 0.25, 0.25, 0.5, 0.8]
    )
    table = study.table2_markdown(result_of(traces, program))
    assert "| resnet50-op | 471 | 0.4000 ± 0.1414 (2) | 0.2000 ± 0.0000 (1) |" in table
    assert table.rstrip().endswith(f"| {program.heuristic_return:.4f} |")
    # an agent whose runs measured nothing in time is a column of "-"
    none = [trace("muzero-true", 0, [12], [0.3], [program.heuristic_latency_s])]
    table = study.table2_markdown(result_of(traces + none, program))
    assert table.splitlines()[0].endswith("| muzero-true | heuristic |")
    assert "| 0.2000 ± 0.0000 (1) | - |" in table
    # an agent of the section without runs on a problem (left out there): "not run"
    result = result_of(traces, program)
    result.agents = [*result.agents, "egrl"]
    assert "| 0.2000 ± 0.0000 (1) | not run |" in study.table2_markdown(result)
    assert study.counts_markdown(result, lambda r: 1).splitlines()[-1].endswith("| not run |")


def test_layouts_played_paid_and_the_best_at_equal_paid_layouts(program):
    traces = hand_made(program.heuristic_latency_s)
    for t, played in zip(traces, (5, 2, 40, 3)):
        t.played = played
    assert [t.paid for t in traces] == [2, 2, 1, 0]
    assert traces[0].best_of_first(1) == 0.25 and traces[0].best_of_first(9) == 0.5
    result = result_of(traces, program)
    played = study.counts_markdown(result, lambda r: r.played)
    assert "| resnet50-op | 4 [2-5] | 22 [3-40] |" in played
    assert "| resnet50-op | 2 [2-2] | 0 [0-1] |" in study.counts_markdown(result, lambda r: r.paid)
    # a run that paid nothing in time: no comparison at equal paid layouts
    assert study.equal_paid(result, PROBLEM) == 0
    assert f"| resnet50-op | 0 | - | - | {program.heuristic_return:.4f} |" in (
        study.equal_paid_markdown(result)
    )
    # without it, M = 1: each run's first paid layout
    result = result_of(traces[:3], program)
    assert study.equal_paid(result, PROBLEM) == 1
    mz = format_mean_std([0.25, 0.1])
    assert f"| resnet50-op | 1 | {mz} (2) | 0.2000 ± 0.0000 (1) |" in (
        study.equal_paid_markdown(result)
    )


def test_speedups_alone_and_as_the_prod_hybrid(program):
    h = program.heuristic_latency_s
    speed = study.speedups(hand_made(h), {PROBLEM: program})
    np.testing.assert_allclose(speed["muzero"].alone, [1.25, 0.8])
    np.testing.assert_allclose(speed["muzero"].prod, [1.25, 1.0])
    np.testing.assert_allclose(speed["es"].alone, [1.0])  # the run without a layout is left out
    table = study.table3_markdown(result_of(hand_made(h), program))
    assert "| muzero-prod | 2 | 1.1250 | 1.2500 | 1.0000 | 1/2 |" in table


def test_correlation_of_return_and_latency(program):
    h = program.heuristic_latency_s
    ret = np.linspace(0, 1, 50)
    programs = {PROBLEM: program}
    faster = trace("muzero", 0, np.arange(50), ret, h * (2 - ret**3))
    (c,) = study.correlations([faster], programs, [PROBLEM])
    assert c.layouts == 50 and c.spearman == pytest.approx(-1.0) and -1 < c.pearson < -0.9
    noisy = trace("es", 0, np.arange(50), ret, h * np.random.default_rng(0).random(50))
    (c,) = study.correlations([noisy], programs, [PROBLEM])
    assert abs(c.spearman) < 0.5


AGENTS = (
    "muzero",
    "muzero-true",
    "muzero-less-learning",
    "muzero-replay-200k",
    "es",
    "random-legal",
    "egrl",
)


def test_the_plan_runs_every_agent_for_its_seconds():
    cfg = runner.load_plan("tpu-study")
    (stage,) = list(study.plan(cfg, runner.ROOT / "unused"))
    # every agent on every program, but the larger replay buffer on resnet50-op (where
    # the default one already holds 16 games)
    everywhere = {f"{p}/{a}" for p in cfg.problems for a in AGENTS}
    assert {s.group for s in stage} == everywhere - {"resnet50-op/muzero-replay-200k"}
    assert len(stage) == (4 * len(AGENTS) - 1) * cfg.seeds
    spec = next(s for s in stage if s.group == "gpt2-op-x4/muzero-true")
    assert spec.path == "gpt2-op-x4/muzero-true/seed0"
    for o in (
        "hwmodel=tpu-cmem",
        "workload=gpt2@op",
        "hwmodel.params.repeats=4",
        "agent.dynamics=true",
        "time_limit_s=300",
        "record_evaluations=true",
    ):
        assert o in spec.overrides
    spec = next(s for s in stage if s.group == "resnet50-op/muzero-less-learning")
    assert {"agent=muzero", "agent.updates_per_move=0.02"} <= set(spec.overrides)
    spec = next(s for s in stage if s.group == "gpt2-op-x4/muzero-replay-200k")
    assert {"agent=muzero", "agent.replay_size=200000"} <= set(spec.overrides)
    # the groups a report lacks: every group without its seeds' runs
    traces = [trace("muzero", 0, [], [], []), trace("es", 0, [], [], [])]
    for t in traces:
        t.problem = "gpt2-op-x4"
    missing = study.missing_groups(cfg, traces)
    assert len(missing) == 4 * len(AGENTS) - 1 and "gpt2-op-x4/muzero (1 of 3 runs)" in missing
    assert "resnet50-op/egrl (0 of 3 runs)" in missing
    cfg.left_out = {"bert-large-op-x8": ["egrl"]}  # a problem an agent is not run on
    (stage,) = list(study.plan(cfg, runner.ROOT / "unused"))
    groups = {s.group for s in stage}
    assert "bert-large-op-x8/egrl" not in groups and "bert-base-op-x14/egrl" in groups
    assert len(stage) == (4 * len(AGENTS) - 1) * cfg.seeds


def in_time(path) -> dict[str, np.ndarray]:
    """The paid layouts of a run measured within its time, read from its files."""
    files = RunDir(path)
    rec = files.read_evaluations()
    ok = (rec["paid"] == 1) & (rec["wall_s"] <= files.read_config()["time_limit_s"])
    return {k: v[ok] for k, v in rec.items()}


@pytest.mark.slow
def test_smoke_study_end_to_end(tmp_path, study_in_process):
    out = tmp_path / "study"
    assert runner.run("tpu-study-smoke", [f"out={out}"]) == 0
    cfg = runner.load_plan("tpu-study-smoke", [f"out={out}"])
    section = read_section("tpu-study", cfg.page)
    runs = sorted((out / PROBLEM).glob("*/seed*"))
    assert len(runs) == len(cfg.agents) * cfg.seeds
    prog = study.program_info("tpu-cmem", (("repeats", 1),), "resnet50@op")
    bound = return_bound(prog.program)
    assert prog.bound == bound
    for path in runs:  # each run stopped on its time, its record its own
        best = RunDir(path).read_best_map()
        assert best["stopped_early"].startswith(TIME_LIMIT_REACHED)
        rec = RunDir(path).read_evaluations()
        assert len(rec["proposal"]) == best["proposals"]
        assert best["best_by"]["game_return"]["value"] == rec["game_return"].max()
    # Table 2 from the run directories, and the heuristic computed without a run
    agent = cfg.agents[0]
    layouts = [in_time(p) for p in runs if p.parent.name == agent]
    finals = [r["game_return"].max() / bound for r in layouts]
    row = f"| {PROBLEM} | 471 | {format_mean_std(finals)} ({len(finals)}) |"
    # the heuristic's return: the last column of Table 2 and of the equal-paid table
    assert row in section and section.count(f"| {prog.heuristic_return:.4f} |") == 2
    # Table 3: the heuristic's latency over that of each run's best layout by return
    speed = np.array(
        [prog.heuristic_latency_s / r["latency_s"][r["game_return"].argmax()] for r in layouts]
    )
    faster = int((speed > 1 + 1e-12).sum())
    assert (
        f"| {agent} | {len(speed)} | {speed.mean():.4f} | {speed.max():.4f} | "
        f"{speed.min():.4f} | {faster}/{len(speed)} |"
    ) in section
    # Figure 6's layouts: the distinct (return, latency) pairs of every paid layout
    pairs = set()
    for path in runs:
        rec = RunDir(path).read_evaluations()
        paid = rec["paid"] == 1
        pairs |= set(zip(rec["game_return"][paid] / bound, rec["latency_s"][paid]))
    assert f"| {PROBLEM} | {len(pairs)} |" in section
    # layouts played within the time, paid or not: median [min-max] of the agent's runs
    played = [
        int((RunDir(p).read_evaluations()["wall_s"] <= cfg.seconds).sum())
        for p in runs
        if p.parent.name == agent
    ]
    assert f"| {PROBLEM} | {np.median(played):,.0f} [{min(played):,}-{max(played):,}] |" in section
    for name in ("tpu_reward_curves", "tpu_reward_latency", f"tpu_layout_{PROBLEM}_heuristic"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 5000
        assert f"(figures/{name}.png)" in section
    assert "python -m studies run tpu-study-smoke" in section
    assert "Agents (egrl-train overrides): `random-legal` (`agent=random-legal`)." in section
    assert "Not in this section yet" not in section  # every run of the plan is in it
    # run again: every run has finished, nothing is launched, the same section
    assert runner.run("tpu-study-smoke", [f"out={out}"]) == 0
    assert read_section("tpu-study", cfg.page) == section
    assert OmegaConf.load(out / runner.RECORD_FILE).name == "tpu-study-smoke"


def test_learning_curves_read_the_generations_that_learnt(tmp_path, program):
    metrics = tmp_path / "metrics.csv"
    metrics.write_text(
        "generation,wall_s,value_loss,policy_entropy,mean_game_return\n"
        "1,10.0,0.5,1.0,2.0\n"
        "2,20.0,0.25,0.8,3.0\n"
        "3,21.0,,,\n"  # the deadline's generation: its games unfinished, nothing learnt
    )
    run = SimpleNamespace(path=tmp_path, seed=4)
    curves = study.learning_of(run, PROBLEM, "muzero", bound=2.0)
    assert (curves.problem, curves.agent, curves.seed) == (PROBLEM, "muzero", 4)
    np.testing.assert_array_equal(curves.wall_s, [10.0, 20.0])
    np.testing.assert_array_equal(curves.values["value_loss"], [0.5, 0.25])
    np.testing.assert_array_equal(curves.values["policy_entropy"], [1.0, 0.8])
    np.testing.assert_array_equal(curves.values["mean_game_return"], [1.0, 1.5])
    metrics.write_text("generation,wall_s,value_loss\n1,1.0,\n")
    assert study.learning_of(run, PROBLEM, "muzero", bound=2.0) is None
    metrics.write_text("generation,wall_s,value_loss\n1,1.0,0.5\n")  # no entropy, return
    assert study.learning_of(run, PROBLEM, "es", bound=2.0) is None
    result = result_of(hand_made(program.heuristic_latency_s), program)
    assert study.plot_learning(result, tmp_path / "none.png") is None
    result.learning = [curves]
    path = study.plot_learning(result, tmp_path / "learning.png")
    assert path.stat().st_size > 5000
