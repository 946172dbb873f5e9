"""The mbo study: its plan (every agent on every problem, the pre-trained agent's sources
first), and its smoke preset end to end."""

from __future__ import annotations

import numpy as np
import pytest

from egrl.rundir import RunDir
from studies import mbo, render, runner
from studies.runner import CommandSpec

PLAIN = ("ea", "sa", "ga", "egrl", "ea-search", "mbo")
ABLATIONS = ("mbo-nocheck", "mbo-ea", "mbo-ga", "mbo-sa", "mbo-all")


def test_the_plan_runs_every_agent_and_the_pretrained_one_after_its_sources(tmp_path):
    cfg = runner.load_plan("mbo", [f"out={tmp_path}"])
    first, second = list(mbo.plan(cfg, tmp_path))
    readings = [s.path for s in first if isinstance(s, CommandSpec)]
    assert readings == [p for p in cfg.problems if p.startswith("chip-")]  # the priors first
    first = first[len(readings) :]
    problems = list(cfg.problems)
    assert len(problems) == 9 and int(cfg.budget) == 400 and int(cfg.seeds) == 5
    groups = {s.group for s in first}
    assert {f"{p}/{a}" for p in problems for a in PLAIN} <= groups
    assert {f"chip-resnet50/{a}" for a in ABLATIONS} <= groups
    package = {"mbo-nocheck", "mbo-sa", "mbo-all"}  # SA's moves win there: SA's and all
    assert {f"mcm-efficientnet-b0/{a}" for a in ABLATIONS} & groups == {
        f"mcm-efficientnet-b0/{a}" for a in package
    }
    ablated = {"chip-resnet50", "mcm-efficientnet-b0"}
    assert not {f"{p}/{a}" for p in set(problems) - ablated for a in ABLATIONS} & groups
    assert "chip-resnet18/mbo" in groups  # a source of the pre-trained agent only
    assert {s.group for s in second} == {
        "chip-resnet101/mbo-pretrained",
        "chip-bert-base/mbo-pretrained",
    }
    runs = {s.path: s for s in second}
    pretrained = runs["chip-resnet101/mbo-pretrained/seed3"].overrides
    assert "agent=mbo" in pretrained and "screen.prior=nnpi" in pretrained
    init = [o for o in pretrained if o.startswith("screen.init_from=")]
    sources = [f"{tmp_path}/chip-resnet18/mbo/seed3", f"{tmp_path}/chip-resnet50/mbo/seed3"]
    assert init == [f"screen.init_from=[{','.join(runner.hydra_quote(p) for p in sources)}]"]
    ablation = {s.path: s for s in first}["chip-resnet50/mbo-sa/seed0"].overrides
    assert "agent.searchers=[sa]" in ablation


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("baseline=bogus", "agent 'bogus' is not among the plan's agents"),
        ("agents=[ea,mbo]", "agent 'sa' is not among the plan's agents"),
        ("pretrained={mbo-pretrained: {from: bogus, problems: []}}", "learns from 'bogus'"),
    ],
)
def test_a_bad_plan_is_refused(tmp_path, override, message):
    cfg = runner.load_plan("mbo", [f"out={tmp_path}", override])
    with pytest.raises(runner.StudyError, match=message):
        next(mbo.plan(cfg, tmp_path))


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """EA, mbo, mbo without checks and mbo pre-trained on resnet34 on NNP-I's resnet18, two
    seeds of 40 paid maps; the section's numbers are those of the run directories."""
    out = tmp_path / "out"
    assert runner.run("mbo-smoke", [f"out={out}"]) == 0
    assert len(study_in_process) == 6  # four groups in stage 1, one per seed in stage 2
    section = render.read_section("mbo", out / "results.md")
    assert section.startswith("## Model-based optimisation")
    for agent in ("ea", "mbo", "mbo-nocheck", "mbo-pretrained"):
        finals = []
        for seed in (0, 1):
            rows = RunDir(out / "nnpi-resnet18" / agent / f"seed{seed}").read_metrics_rows()
            assert int(rows[-1]["iterations"]) == 40
            finals.append(float(rows[-1]["best_speedup"]))
        mean, std = np.mean(finals), np.std(finals, ddof=1)
        assert f"| {agent} | toolkit" in section and f" | {mean:.4f} ± {std:.4f} | " in section
    config = RunDir(out / "nnpi-resnet18" / "mbo-pretrained" / "seed1").read_config()
    assert config["screen"]["init_from"] == [str(out / "nnpi-resnet34" / "mbo" / "seed1")]
    assert "| nnpi-resnet18 | mbo-nocheck | 0 [0-0] |" in section  # no checks without check
    assert (out / "figures" / "mbo_nnpi-resnet18.png").stat().st_size > 0
    assert "python -m studies run mbo-smoke" in section
