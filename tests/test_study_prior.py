"""The prior study: its plan (every problem's prior read first, then agent by agent), the
reading itself on a built-in target, its analysis and section on hand-made run
directories, the prior's row in the other studies' tables, and its smoke preset end to
end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from egrl import make_env
from egrl.rundir import RunDir
from studies import agent_runs, cells, llm, peers, prior, prior_map, render, runner
from studies.runner import CommandSpec, RunSpec
from tests.study_runs import write_run

CHIPS = ("chip-resnet50", "chip-dram-resnet50", "chip-llc-resnet50", "chip-resnet101")
#: the chips that depart from the roofline (examples/external_chip.py --chip NAME)
NAMED = tuple(f"chip-{n}-resnet50" for n in ("banks", "stream", "ops", "mislead"))
#: the figures as the runs get them (one Hydra override)
FIGURES = (
    "{name:nnpi,sram_mib:2,llc_mib:24,dram_gbps:67.2,llc_gbps:680,sram_gbps:6800,peak_tops:100}"
)
#: the same figures as a plan override gives them (YAML: a space after each colon)
PLAN_FIGURES = "{name: nnpi, sram_mib: 2, llc_mib: 24, dram_gbps: 67.2, llc_gbps: 680, sram_gbps: 6800, peak_tops: 100}"


def test_the_plan_reads_every_prior_first_then_runs_agent_by_agent(tmp_path):
    cfg = runner.load_plan("prior", [f"out={tmp_path}"])
    (stage,) = list(prior.plan(cfg, tmp_path))
    commands = [s for s in stage if isinstance(s, CommandSpec)]
    runs = [s for s in stage if isinstance(s, RunSpec)]
    assert stage[: len(commands)] == commands  # the readings before every run
    problems = (*CHIPS, "chip-bert-base", *NAMED)
    assert [c.done for c in commands] == [f"{p}/prior.json" for p in problems]
    argv = commands[1].argv
    assert argv[1:5] == ("-m", "studies.prior_map", str(tmp_path / CHIPS[1] / "prior.json"), "60.0")
    assert argv[5:7] == ("hwmodel=external", "workload=resnet50")
    assert "--dram-access-us 2" in argv[7] and argv[8] == f"++hwmodel.params.prior={FIGURES}"
    assert len(runs) == 9 * 4 * 5 and int(cfg.budget) == 400
    assert "--chip mislead" in commands[-1].argv[7]
    # agent by agent: every EA run from the prior before any from the compiler's map
    order = list(dict.fromkeys(s.group.split("/")[1] for s in runs))
    assert order == ["ea-prior", "ea", "egrl-prior", "egrl"]
    by_path = {s.path: s for s in runs}
    start = by_path["chip-bert-base/egrl-prior/seed4"].overrides
    assert start[-4:] == (
        "agent=egrl",
        "agent.start=prior",
        "budget=400",
        "prior_time_limit_s=60.0",
    )
    assert f"++hwmodel.params.prior={FIGURES}" in start
    assert "agent.start=native" in by_path["chip-resnet101/ea/seed0"].overrides
    own = runner.load_plan(
        "prior", [f"out={tmp_path}", "problem_priors={chip-bert-base: {name: nnpi, sram_mib: 4}}"]
    )
    (stage,) = list(prior.plan(own, tmp_path))
    bert = [s for s in stage if isinstance(s, RunSpec) and s.group.startswith("chip-bert-base/")]
    assert "++hwmodel.params.prior={name:nnpi,sram_mib:4}" in bert[0].overrides


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("prior=null", "problem 'chip-resnet50' has no prior"),
        ("starts=[[ea-prior,bogus]]", "starts names 'bogus', not among the agents"),
        ("starts=[[ea-prior]]", "expected \\[FROM_PRIOR, BASE\\]"),
        ("prior_time_s=0", "prior_time_s=0.0 is invalid: expected > 0"),
        ("problems=[nnpi-mobilenet-v2]", "problem 'nnpi-mobilenet-v2' has no overrides"),
    ],
)
def test_a_bad_plan_is_refused(tmp_path, override, message):
    cfg = runner.load_plan("prior", [f"out={tmp_path}", override])
    with pytest.raises(runner.StudyError, match=message):
        next(prior.plan(cfg, tmp_path))


def test_other_plans_read_no_prior_unless_they_give_one(tmp_path):
    cfg = runner.load_plan("peers", [f"out={tmp_path}", "prior=null"])
    assert cells.prior_steps(cfg, tmp_path) == []
    assert prior_map.figures_of(cfg, "chip-resnet50") is None
    assert not prior_map.reads_prior(cfg, "nnpi-resnet101")
    figures = runner.load_plan("prior", [f"out={tmp_path}"]).prior
    cfg = runner.load_plan("peers", [f"out={tmp_path}", f"prior={PLAN_FIGURES}"])
    assert [c.path for c in cells.prior_steps(cfg, tmp_path)] == ["chip-resnet50", "chip-resnet101"]
    assert prior_map.figures_of(cfg, "chip-resnet50") == dict(figures)
    assert prior_map.figures_of(cfg, "nnpi-resnet101") is None


def test_the_reading_solves_the_prior_and_reads_its_map_once(tmp_path):
    """On NNP-I's MobileNet-v2 the target's own model is its prior: the solved map, read
    once, is the optimum's (1.0175x, under a second)."""
    path = tmp_path / "nnpi-mobilenet-v2" / "prior.json"
    assert prior_map.main([str(path), "30", "hwmodel=nnpi", "workload=mobilenet-v2"]) == 0
    data = json.loads(path.read_text())
    reading = prior_map.read_prior(tmp_path, "nnpi-mobilenet-v2")
    assert reading.valid and not reading.fell_back and reading.time_limit_s == 30
    env = make_env("nnpi", "mobilenet-v2")
    mapping = np.array(
        [
            [env.heads[h].index(data["mapping"][u][h]) for h in env.head_names]
            for u in env.unit_names
        ]
    )
    assert reading.speedup == pytest.approx(float(env.evaluate(mapping).speedup[0]))
    assert reading.speedup == pytest.approx(env.baseline_latency_s / data["predicted_latency_s"])
    assert reading.speedup > 1.0 and reading.proven == (reading.status == "optimal")
    assert prior_map.read_prior(tmp_path, "nnpi-resnet18") is None


def test_a_reading_of_a_target_without_a_prior_is_one_line(tmp_path, capsys):
    """The memory-mapping game has no prior: the command says so in one line, status 2."""
    path = tmp_path / "tpu" / "prior.json"
    assert prior_map.main([str(path), "5", "hwmodel=tpu-cmem", "workload=resnet18"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m studies.prior_map: ") and "hwmodel.params.prior" in err
    assert "\n" not in err and not path.exists()


def write_prior(out, problem, speedup, solve_s=5.0, status="optimal", fell_back=False):
    entry = {
        "speedup": speedup,
        "valid": True,
        "proven": status == "optimal",
        "status": status,
        "solve_s": solve_s,
        "fell_back": fell_back,
        "time_limit_s": 60.0,
    }
    (out / problem).mkdir(parents=True, exist_ok=True)
    (out / problem / "prior.json").write_text(json.dumps(entry))


def write_agent(out, problem, agent, finals, budget=400):
    for seed, final in enumerate(finals):
        curve = [(100, min(final, 1.0)), (budget, final)]
        write_run(out / problem / agent / f"seed{seed}", agent, "resnet101", seed, curve, budget)


@pytest.fixture
def study(tmp_path):
    """chip-resnet101: the prior's map 1.16 in 59 s; EA from it ends at 1.16-1.17, from the
    compiler's map at 1.08-1.09. chip-bert-base: the prior's map read (1.004, 75 s), no run
    yet. chip-resnet50: EA from the compiler's map only, no prior read."""
    out = tmp_path / "out"
    write_prior(out, "chip-resnet101", 1.16, solve_s=59.0, status="feasible")
    write_agent(out, "chip-resnet101", "ea-prior", [1.16, 1.17, 1.16, 1.17, 1.165])
    write_agent(out, "chip-resnet101", "ea", [1.08, 1.09, 1.085, 1.08, 1.09])
    write_prior(out, "chip-bert-base", 1.004, solve_s=75.0)
    write_agent(out, "chip-resnet50", "ea", [1.2, 1.25])
    return out


def study_cfg(out):
    return runner.load_plan(
        "prior",
        [
            f"out={out}",
            "problems=[chip-resnet50,chip-resnet101,chip-bert-base]",
            "agents=[ea-prior,ea]",
            "starts=[[ea-prior,ea]]",
        ],
    )


def test_analysis_reads_each_prior_beside_the_runs(study):
    res50, res101, bert = prior.analyse(study_cfg(study), study)
    assert res101.prior.speedup == 1.16 and res101.agents.prior == res101.prior
    assert (res101.reference, res101.source) == (1.17, "runs")
    assert res50.prior is None and res50.reference == 1.25
    assert bert.agents is None and (bert.reference, bert.source) == (1.004, "prior")
    ea = res101.agent("ea-prior")
    assert np.allclose(prior.over_prior(ea, res101.prior), np.array([0, 1, 0, 1, 0.5]) / 116)
    assert prior.below_prior(ea, res101.prior) == 0
    assert prior.below_prior(res101.agent("ea"), res101.prior) == 5


def test_a_prior_above_every_run_is_the_best_known(study):
    write_prior(study, "chip-resnet50", 1.3)
    res50 = prior.analyse(study_cfg(study), study)[0]
    assert (res50.reference, res50.source) == (1.3, "prior")


def test_the_section_gives_the_prior_beside_the_compiler_and_the_targets(study, tmp_path):
    cfg = study_cfg(study)
    result = prior.analyse(cfg, study)
    page = runner.Page(tmp_path / "page.md", tmp_path / "figures", "python -m studies run prior")
    text = prior.render(cfg, result, page)
    assert text.startswith("## The solved prior: the chip's datasheet as the baseline")
    row = (
        "| chip-resnet101 | 1.0000 | 1.1600 | solved in 59.0 s, feasible | 1.1700 (runs) | 17.00% "
        "| 0.86% | 1.0850 ± 0.0050 | 1.1650 ± 0.0050 | p = 0.011, 100% |"
    )
    assert row in text
    assert (
        "| chip-bert-base | 1.0000 | 1.0040 | solved in 75.0 s, optimal | 1.0040 (prior) | 0.40% | 0.00% |"
        in text
    )
    assert (
        "| chip-resnet50 | 1.0000 | - | - | 1.2500 (runs) | 25.00% | - | 1.2250 ± 0.0354 |  |  |"
        in text
    )
    assert "| chip-resnet101 | ea-prior | 5 | +0.43% ± 0.43% | 3/5 | 0/5 |" in text
    assert "| chip-resnet101 | ea | 5 | -6.47% ± 0.43% | 0/5 | 5/5 |" in text
    assert "- No run from the prior ends below the prior's map: **met** (5 runs)." in text
    assert (
        "gives a map within 60 s (its time limit; proven or not) on resnet101 and bert-base: "
        "**not met** on chip-bert-base (chip-resnet101 59.0 s, feasible; chip-bert-base "
        "75.0 s, optimal)." in text
    )
    # a solve stopped a moment past its limit with a map meets it; one that fell back does not
    write_prior(study, "chip-bert-base", 1.0, solve_s=60.4, status="feasible")
    assert "**met** (chip-resnet101" in prior.target_lines(cfg, prior.analyse(cfg, study))[1]
    write_prior(study, "chip-bert-base", 1.0, solve_s=60.4, status="fallback", fell_back=True)
    result = prior.analyse(cfg, study)
    assert "**not met** on chip-bert-base" in prior.target_lines(cfg, result)[1]
    assert "| chip-bert-base | 1.0000 | 1.0000 | no map in 60 s: the compiler's |" in (
        prior.summary_markdown(cfg, result)
    )
    assert "- chip-resnet50: the prior's map not read yet" in text
    assert "- chip-resnet50: ea-prior without a finished run" in text
    assert "- chip-bert-base: no finished run of the toolkit's agents" in text
    # the peers study's table per problem, with the room taken over the prior beside it
    assert (
        "The compiler's map: 1.0000x; the solved prior's map, read once: 1.1600x (solved in 59.0 s, feasible). Room over the compiler: 17.00%; over the prior: 0.86%."
        in text
    )
    assert "| share of reference | room taken | room taken over the prior |" in text
    assert "| 99.57% ± 0.43% | 97% ± 3% | 50% ± 50% |" in text  # ea-prior: 0.5 of 0.01 on average
    assert "(figures/prior_chip-resnet101.png)" in text and "prior_chip-bert-base.png" not in text
    # a run from the prior below its map fails the first target
    write_prior(study, "chip-bert-base", 1.004, solve_s=75.0)
    write_agent(study, "chip-bert-base", "ea-prior", [1.0, 1.004])
    lines = prior.target_lines(cfg, prior.analyse(cfg, study))
    assert (
        lines[0]
        == "- No run from the prior ends below the prior's map: **not met**: chip-bert-base (ea-prior: 1)."
    )


def test_the_other_studies_tables_give_the_prior_where_it_was_read(study):
    """A peers-shaped study of the same runs: the prior's line under the heading, the room
    over it in the table; a problem without a reading as before."""
    cfg = runner.load_plan(
        "peers",
        [
            f"out={study}",
            "problems=[chip-resnet50,chip-resnet101]",
            "agents=[ea,ea-prior]",
            "peers=[]",
        ],
    )
    res50, res101 = agent_runs.analyse(cfg, study)
    with_prior = "\n".join(agent_runs.problem_markdown(res101, "f.png"))
    assert "the solved prior's map, read once: 1.1600x" in with_prior
    assert "room taken over the prior" in with_prior
    without = "\n".join(agent_runs.problem_markdown(res50, "f.png"))
    assert "prior" not in without
    # the tables of problems: the prior's map and the room over it beside the finals
    summary = peers.summary_markdown([res50, res101])
    assert (
        "| problem | prior's map, one board run | room over the prior | toolkit's best" in summary
    )
    assert "| chip-resnet50 | - | - | ea 1.2250 ± 0.0354 |" in summary
    assert "| chip-resnet101 | 1.1600 | 0.86% | ea-prior 1.1650 ± 0.0050 |" in summary
    assert "prior" not in peers.summary_markdown([res50])
    facts = {r.problem: llm.Facts(10, 2**20, 0, 0, 0, 1.0, "no solver") for r in (res50, res101)}
    room = llm.room_markdown([res50, res101], facts)
    assert "| room over the compiler | prior's map, one board run | room over the prior |" in room
    assert "| 17.00% | 1.1600 | 0.86% | ea-prior 1.1650 ± 0.0050 |" in room


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """EA from the prior's map and from the compiler's on NNP-I's MobileNet-v2 (its own model
    is its prior), two seeds of 30 board runs; the section reads the runs and the reading."""
    out = tmp_path / "out"
    assert runner.run("prior-smoke", [f"out={out}"]) == 0
    reading = prior_map.read_prior(out, "nnpi-mobilenet-v2")
    assert reading is not None and reading.proven
    section = render.read_section("prior", out / "results.md")
    assert section.startswith("## The solved prior")
    assert f"| nnpi-mobilenet-v2 | 1.0000 | {reading.speedup:.4f} | solved in " in section
    assert "- No run from the prior ends below the prior's map: **met** (2 runs)." in section
    for agent, start in (("ea-prior", "prior"), ("ea", "native")):
        assert f"| {agent} | toolkit" in section
        for seed in (0, 1):
            files = RunDir(out / "nnpi-mobilenet-v2" / agent / f"seed{seed}")
            assert files.read_config()["agent"]["start"] == start
            assert int(files.read_metrics_rows()[-1]["iterations"]) == 30
            if start == "prior":  # no run from the prior ends below its map
                assert (
                    float(files.read_metrics_rows()[-1]["best_speedup"]) >= reading.speedup - 1e-9
                )
    assert (out / "figures" / "prior_nnpi-mobilenet-v2.png").stat().st_size > 0
    assert "python -m studies run prior-smoke" in section
