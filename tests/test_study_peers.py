"""The peers study: its plan (every agent on every problem, the limits of a costly problem),
its analysis and targets on hand-made run directories, and its smoke preset end to end."""

from __future__ import annotations

import numpy as np
import pytest

from egrl.rundir import RunDir
from studies import peers, render, runner
from studies.runner import CommandSpec, RunSpec
from tests.study_runs import write_optimum, write_run

TOOLKIT = ("ea", "sa", "ga", "egrl", "ea-search", "mbo")
PEERS = ("optuna-tpe", "optuna-gp", "optuna-cmaes", "smac", "nevergrad", "random")


def test_the_plan_runs_every_agent_on_every_problem(tmp_path):
    cfg = runner.load_plan("peers", [f"out={tmp_path}"])
    (stage,) = list(peers.plan(cfg, tmp_path))
    readings = [s for s in stage if isinstance(s, CommandSpec)]
    assert [c.path for c in readings] == ["chip-resnet50", "chip-resnet101"]  # the priors first
    stage = stage[len(readings) :]
    problems = list(cfg.problems)
    assert "nnpi-resnet101" in problems and "chip-resnet101" in problems
    assert sum(p.startswith("mcm-") for p in problems) == 3
    assert set(cfg.peers) == set(PEERS)
    # the GP sampler, the costly peer, on the smallest problem of each kind only
    gp = {"chip-resnet50", "mcm-mobilenet-d50-w50-k5-e4"}
    assert {s.group for s in stage} == {
        f"{p}/{a}" for p in problems for a in (*TOOLKIT, *PEERS) if a != "optuna-gp" or p in gp
    }
    agents = len(TOOLKIT) + len(PEERS)
    assert len(stage) == (len(problems) * agents - (len(problems) - 2)) * 5 == 340
    every = runner.load_plan("peers", [f"out={tmp_path}", "agent_problems.optuna-gp=null"])
    (stage,) = list(peers.plan(every, tmp_path))
    stage = [s for s in stage if isinstance(s, RunSpec)]
    assert len(stage) == len(problems) * agents * 5
    runs = {s.path: s for s in stage}
    assert runs["chip-resnet50/ea-search/seed4"].overrides[-4:] == (
        "agent=ea",
        "screen=forest",
        "screen.search=10",
        "budget=400",
    )
    gp = runs["nnpi-resnet101/optuna-gp/seed0"].overrides
    assert gp == (
        "hwmodel=nnpi",
        "workload=resnet101",
        "agent=optuna",
        "agent.sampler=gp",
        "budget=400",
    )
    assert "agent.sampler=cmaes" in runs["mcm-dlrm-s26-e64-l3/optuna-cmaes/seed2"].overrides
    chip = runs["chip-resnet101/smac/seed0"].overrides
    assert "agent=smac" in chip and any(o.startswith("hwmodel.params.command=") for o in chip)
    # the policy's overrides of the plan reach EGRL's runs, not Optuna's
    argv = runner.train_command(cfg, tmp_path, "g", [0], ("agent=optuna", "policy.hidden=16"))
    assert "policy.hidden=16" not in argv and "seed=0" in argv
    assert int(cfg.early) == 100 and int(cfg.budget) == 400 and int(cfg.seeds) == 5


def test_a_costly_problem_runs_only_its_agents(tmp_path):
    only = "problem_only={mcm-efficientnet-b0: {agents: [ea, sa, optuna-tpe, random]}}"
    cfg = runner.load_plan("peers", [f"out={tmp_path}", "seeds=1", only])
    (stage,) = list(peers.plan(cfg, tmp_path))
    stage = [s for s in stage if isinstance(s, RunSpec)]
    groups = {s.group for s in stage if s.group.startswith("mcm-efficientnet-b0/")}
    assert groups == {f"mcm-efficientnet-b0/{a}" for a in ("ea", "sa", "optuna-tpe", "random")}
    assert sum(s.group.startswith("nnpi-resnet101/") for s in stage) == 11  # no GP


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("early=500", "early=500 is invalid"),
        ("peers=[optuna-tpe,bogus]", "peer 'bogus' has no overrides"),
        ("agents=[optuna-tpe,random]", "no agent of the toolkit"),
        ("agents=[ea,bogus]", "agent 'bogus' has no overrides"),
        ("agent_problems={bogus: [chip-resnet50]}", "agent 'bogus' has no overrides"),
    ],
)
def test_a_bad_plan_is_refused(tmp_path, override, message):
    cfg = runner.load_plan("peers", [f"out={tmp_path}", override])
    with pytest.raises(runner.StudyError, match=message):
        next(peers.plan(cfg, tmp_path))


def write_agent(out, problem, agent, curves, budget=400):
    for seed, curve in enumerate(curves):
        write_run(out / problem / agent / f"seed{seed}", agent, "resnet101", seed, curve, budget)


@pytest.fixture
def study(tmp_path):
    """On nnpi-resnet101 (proven optimum 1.06) EA reaches 1.0 after 100 paid maps and ends
    at 1.05; Optuna's TPE gets to 1.0 only at 400. On chip-resnet50 TPE ends above EA."""
    out = tmp_path / "out"
    problem = "nnpi-resnet101"
    ea = [[(50, 0.9), (100, 1.0 + 0.001 * s), (200, 1.05), (400, 1.05)] for s in range(5)]
    write_agent(out, problem, "ea", ea)
    write_agent(out, problem, "sa", [[(100, 0.5), (400, 0.9)]] * 5)
    write_agent(out, problem, "optuna-tpe", [[(100, 0.8), (300, 0.95), (400, 1.0)]] * 5)
    write_agent(out, problem, "random", [[(100, 0.3), (400, 0.5)]] * 5)
    write_optimum(out / problem, "resnet101", 1.06, proven=True)
    chip = "chip-resnet50"
    write_agent(out, chip, "ea", [[(100, 1.0), (400, 1.1 + 0.01 * s)] for s in range(5)])
    write_agent(out, chip, "optuna-tpe", [[(100, 1.1), (400, 1.2 + 0.01 * s)] for s in range(5)])
    return out


def study_cfg(out):
    return runner.load_plan(
        "peers",
        [
            f"out={out}",
            "problems=[nnpi-resnet101,chip-resnet50]",
            "agents=[ea,sa,optuna-tpe,random]",
            "peers=[optuna-tpe,random]",
        ],
    )


def test_analysis_finds_the_best_agents_and_tests_against_the_toolkits(study):
    nnpi, chip = peers.analyse(study_cfg(study), study)
    assert (nnpi.reference, nnpi.source, nnpi.budget, nnpi.early) == (1.06, "proven", 400, 100)
    assert (nnpi.best, nnpi.best_peer, nnpi.peer_final) == ("ea", "optuna-tpe", 1.0)
    ea, sa, tpe, rnd = (nnpi.agent(a) for a in ("ea", "sa", "optuna-tpe", "random"))
    assert not ea.peer and tpe.peer and rnd.peer
    assert np.allclose(ea.early, [1.0, 1.001, 1.002, 1.003, 1.004]) and np.allclose(tpe.early, 0.8)
    assert np.allclose(ea.to_peer, 100) and np.allclose(tpe.to_peer, 400)
    assert np.isinf(sa.to_peer).all() and np.isinf(rnd.to_peer).all()
    assert np.allclose(ea.cell.to_level, 200)  # 99% of 1.06 is 1.0494
    assert ea.tests == {}
    _, p, share = tpe.tests["final"]
    assert p < 0.01 and share == 0.0  # every EA run ended higher
    _, p, share = tpe.tests["peer"]
    assert p < 0.01 and share == 0.0  # every EA run got to TPE's final first
    assert peers.halves_the_peer(nnpi) and not peers.peers_above(nnpi)
    tpe.tests["peer"] = (25.0, 0.001, 1.0)  # within half the budget, but the peer first
    assert not peers.halves_the_peer(nnpi)
    tpe.tests["peer"] = (0.0, 0.001, 0.0)
    ea.to_peer = np.full(5, 250.0)  # first still, but past half the budget
    assert not peers.halves_the_peer(nnpi)
    assert chip.source == "runs" and chip.reference == pytest.approx(1.24)
    assert [a.agent for a in peers.peers_above(chip)] == ["optuna-tpe"]
    assert not peers.halves_the_peer(chip)  # EA never reaches TPE's median final, 1.22


def test_the_section_says_which_targets_are_met_and_who_wins(study, tmp_path):
    cfg = study_cfg(study)
    result = peers.analyse(cfg, study)
    page = runner.Page(tmp_path / "page.md", tmp_path / "figures", "python -m studies run peers")
    text = peers.render(cfg, result, page)
    assert "a peer ends above on chip-resnet50 (optuna-tpe)" in text
    assert (
        "in a median of at most 200 paid measurements, p < 0.05 against the best peer's samples "
        "to it, on at least 3 problems: **not met**, on 1 of 2 (nnpi-resnet101)." in text
    )
    assert (
        "**chip-resnet50**: a peer wins, optuna-tpe (1.2200 ± 0.0158), +8.9% over the toolkit's "
        "best, ea (1.1200 ± 0.0158; p = 0.008, 100%)." in text
    )
    assert "**nnpi-resnet101**: ea wins (1.0500 ± 0.0000); the best peer, optuna-tpe" in text
    row = (
        "| optuna-tpe | peer | 5 | 0.8000 ± 0.0000 | 1.0000 ± 0.0000 | 94.34% ± 0.00% | 0% ± 0% "
        "| p = 0.007, 0% | p = 0.004, 0% | never (0/5) | p = 0.004, 0% | 400 [400-400] (5/5) |"
    )
    assert row in text
    assert "| ea | toolkit (best) | 5 |" in text
    # EA ends at 1.05 of the proven 1.06 (five sixths of the room), SA below the compiler
    assert "| 99.06% ± 0.00% | 83% ± 0% |" in text and "| 84.91% ± 0.00% | 0% ± 0% |" in text
    for problem in ("nnpi-resnet101", "chip-resnet50"):
        assert f"![{problem}](figures/peers_{problem}.png)" in text
        assert (tmp_path / "figures" / f"peers_{problem}.png").stat().st_size > 0
    assert "Left out:\n\n- chip-resnet50: sa, random without a finished run\n" in text
    # a problem that runs only some agents, one without runs, a problem without any run
    partial = runner.load_plan(
        "peers",
        [
            f"out={study}",
            "problems=[nnpi-resnet101,chip-resnet50,chip-resnet101]",
            "agents=[ea,sa,optuna-tpe,random,smac]",
            "peers=[optuna-tpe,random,smac]",
            "problem_only={chip-resnet50: {agents: [ea,optuna-tpe]}}",
        ],
    )
    assert peers.missing_notes(partial, peers.analyse(partial, study))[0] == (
        "nnpi-resnet101: smac without a finished run"
    )
    # a study under way: an agent with fewer finished runs than the plan's seeds
    write_agent(study, "nnpi-resnet101", "smac", [[(100, 0.7), (400, 0.9)]] * 3)
    assert peers.missing_notes(partial, peers.analyse(partial, study)) == [
        "nnpi-resnet101: finished runs of 5 seeds: smac 3",
        "chip-resnet50: sa, random, smac not run here (the plan's limits)",
        "chip-resnet101: no finished run of the toolkit's agents",
    ]
    # the first target holds once no peer ends above: with the chip problem alone missing
    only = runner.load_plan("peers", [f"out={study}", "problems=[nnpi-resnet101]"])
    lines = peers.target_lines(only, [result[0]])
    assert "**met** on all 1 problems" in lines[0]
    lines = peers.target_lines(cfg, [result[0]])
    assert "**not assessed**: chip-resnet50 without runs" in lines[0]


def test_a_peer_level_with_the_toolkit_is_told_by_its_samples(tmp_path):
    """Both end at the optimum: no peer wins, and the line says who got to 99% first."""
    out = tmp_path / "out"
    write_agent(out, "nnpi-resnet101", "ea", [[(60, 0.9), (120, 1.0), (400, 1.0)]] * 5)
    write_agent(out, "nnpi-resnet101", "optuna-gp", [[(50, 1.0), (400, 1.0)]] * 5)
    write_optimum(out / "nnpi-resnet101", "resnet101", 1.0, proven=True)
    cfg = runner.load_plan(
        "peers",
        [
            f"out={out}",
            "problems=[nnpi-resnet101]",
            "agents=[ea,optuna-gp]",
            "peers=[optuna-gp]",
            "agent_problems.optuna-gp=null",
        ],
    )
    (result,) = peers.analyse(cfg, out)
    assert (result.best, result.best_peer) == ("ea", "optuna-gp")
    assert not peers.peers_above(result)
    assert peers.winner_line(result) == (
        "**nnpi-resnet101**: ea wins (1.0000 ± 0.0000); the best peer, optuna-gp, ends at "
        "1.0000 ± 0.0000, level with (p = 1.000, 50%); to 99% of the reference it takes "
        "50 [50-50] (5/5) paid measurements, ea 120 [120-120] (5/5) (p = 0.004, 100%, "
        "optuna-gp first)."
    )
    result.agent("optuna-gp").cell.final[:] += 1e-6  # above, but level to 4 decimals
    assert not peers.peers_above(result)


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """EA, Optuna's TPE and random search on resnet18, two seeds of 40 paid maps read at 20
    and 40; the section's numbers are those of the run directories."""
    out = tmp_path / "out"
    assert runner.run("peers-smoke", [f"out={out}"]) == 0
    section = render.read_section("peers", out / "results.md")
    assert section.startswith("## Peers: the toolkit's agents against")
    assert "### nnpi-resnet18 (budget 40, optimum " in section
    for agent, kind in (("ea", "toolkit (best)"), ("optuna-tpe", "peer"), ("random", "peer")):
        finals = []
        for seed in (0, 1):
            files = RunDir(out / "nnpi-resnet18" / agent / f"seed{seed}")
            rows = files.read_metrics_rows()
            assert int(rows[-1]["iterations"]) == 40
            finals.append(float(rows[-1]["best_speedup"]))
        assert files.read_config()["agent"]["name"] == agent.split("-")[0]
        mean, std = np.mean(finals), np.std(finals, ddof=1)
        assert f"| {agent} | {kind} | 2 | " in section
        assert f" | {mean:.4f} ± {std:.4f} | " in section
    assert (out / "nnpi-resnet18" / "optuna-tpe" / "seed0" / "optuna.db").stat().st_size > 0
    assert (out / "figures" / "peers_nnpi-resnet18.png").stat().st_size > 0
    assert "python -m studies run peers-smoke" in section
