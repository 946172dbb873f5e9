"""The noise study: its plan (each level's chip, noise 0 once) and its smoke preset end to
end (a noisy chip's runs, their true speedups on the noiseless chip, the section)."""

from __future__ import annotations

import pytest

from studies import noise, runner


def test_the_plan_runs_noise_zero_once_and_seeds_each_runs_noise(tmp_path):
    cfg = runner.load_plan("noise", [f"out={tmp_path}", "agents=[ea]", "seeds=2"])
    (stage,) = list(noise.plan(cfg, tmp_path))
    groups = {s.group for s in stage}
    assert "ea/noise0/raw" in groups and "ea/noise0/confirm" not in groups
    assert {"ea/noise0.05/raw", "ea/noise0.05/confirm"} <= groups
    assert len(stage) == 2 * (1 + 2 * 4)
    run = next(s for s in stage if s.group == "ea/noise0.05/confirm")
    command = next(o for o in run.overrides if o.startswith("hwmodel.params.command="))
    assert "--noise-cv 0.05 --noise-seed ${seed}" in command
    assert "--noise-state ${hydra:runtime.output_dir}/noise.txt" in command
    assert "confirm.top=3" in run.overrides and "budget=400" in run.overrides
    clean = next(s for s in stage if s.group == "ea/noise0/raw")
    assert not any("--noise-cv" in o for o in clean.overrides)


def test_bad_levels_are_refused(tmp_path):
    cfg = runner.load_plan("noise", [f"out={tmp_path}", "levels=[-0.1]"])
    with pytest.raises(runner.StudyError, match="levels"):
        list(noise.plan(cfg, tmp_path))


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    out = tmp_path / "noise-smoke"
    assert runner.run("noise-smoke", [f"out={out}"]) == 0
    text = (out / "results.md").read_text()
    assert "| random | 5% | confirm |" in text and "| random | 0% | raw |" in text
    result = noise.analyse(runner.load_plan("noise-smoke", [f"out={out}"]), out)
    clean = noise.cell_of(result, "random", 0.0, "raw")
    assert clean is not None and (clean.overstatement == 1.0).all()  # no noise: exact
    confirmed = noise.cell_of(result, "random", 0.05, "confirm")
    assert all(r.low < r.reported < r.high for r in confirmed.runs)
