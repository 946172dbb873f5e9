"""The study runner: plans, stages, skipping finished runs, the report's section."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from studies import render, runner


def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "fixture.yaml"
    path.write_text(
        "study: tests.study_fixture\n"
        "workload: resnet18\n"
        "budget: 6\n"
        "seeds: 2\n"
        "agents: [random]\n"
        f"out: {tmp_path / 'out'}\n"
        f"page: {tmp_path / 'page.md'}\n"
        f"figures: {tmp_path / 'figures'}\n",
        encoding="utf-8",
    )
    return path


def test_plan_defaults_extends_and_overrides(tmp_path):
    base = plan_file(tmp_path)
    smoke = tmp_path / "smoke.yaml"
    smoke.write_text(f"extends: {base}\nbudget: 3\n", encoding="utf-8")
    cfg = runner.load_plan(str(smoke), ["seeds=1", "launcher=[hydra/launcher=ray-cluster]"])
    assert cfg.study == "tests.study_fixture" and cfg.budget == 3 and cfg.seeds == 1
    assert list(cfg.launcher) == ["hydra/launcher=ray-cluster"]
    assert list(cfg.overrides) == list(runner.DEFAULTS["overrides"])
    with pytest.raises(SystemExit, match="not KEY=VALUE"):
        runner.load_plan(str(base), ["seeds"])
    with pytest.raises(SystemExit, match="no study"):
        runner.load_plan("no-such-study")


def test_every_shipped_plan_loads_and_names_its_module():
    for name in runner.study_names():
        cfg = runner.load_plan(name)
        module = runner.study_module(cfg)
        assert callable(module.plan) and callable(module.analyse) and callable(module.render)


@pytest.mark.slow
def test_run_skips_finished_runs_and_writes_the_section(tmp_path, monkeypatch):
    plan = plan_file(tmp_path)
    page = tmp_path / "page.md"
    page.write_text("# Results\n\nkept text\n", encoding="utf-8")
    assert runner.run(str(plan), ["seeds=2"]) == 0
    out = tmp_path / "out"
    for path in ("random/seed0", "random/seed1", "random-again/seed0"):
        assert runner.finished(out / path), path
    text = page.read_text()
    assert text.startswith("# Results\n\nkept text\n")
    section = render.read_section("fixture", page)
    assert "| random | 2 |" in section and "| random-again | 1 |" in section
    assert "python -m studies run " + str(plan) + " seeds=2" in section

    launched = []

    def fake_run(cmd, check):
        launched.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    assert runner.run(str(plan), ["seeds=2"]) == 0
    assert launched == []  # every run had finished

    cfg = runner.load_plan(str(plan), ["seeds=4", "agents=[random,sa]"])
    runner.run_stages(cfg, out)
    # one multirun per group, over its unfinished seeds only
    assert [next(a for a in c if a.startswith("agent=")) for c in launched] == [
        "agent=random",
        "agent=sa",
    ]
    assert [next(a for a in c if a.startswith("seed=")) for c in launched] == [
        "seed=2,3",
        "seed=0,1,2,3",
    ]
    assert all("hydra/launcher=parallel" in c and "continue_runs=true" in c for c in launched)


def test_groups_at_once_launches_groups_side_by_side(tmp_path, monkeypatch):
    """With groups_at_once=2, the second group starts while the first still runs; a
    failed group is counted once; groups_at_once=0 is refused."""
    import threading

    started, release = [], threading.Event()

    def fake_run(cmd, check):
        started.append(next(a for a in cmd if a.startswith("agent=")))
        if len(started) == 2:
            release.set()
        assert release.wait(timeout=30), "the groups ran one after the other"
        return subprocess.CompletedProcess(cmd, 1 if "agent=sa" in cmd else 0)

    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    cfg = runner.load_plan(str(plan_file(tmp_path)), ["agents=[random,sa]", "groups_at_once=2"])
    assert runner.run_stages(cfg, tmp_path / "out") == 1
    assert sorted(started) == ["agent=random", "agent=sa"]  # the second stage waits on seed0
    with pytest.raises(runner.StudyError, match="groups_at_once=0 is invalid"):
        runner.load_plan(str(plan_file(tmp_path)), ["groups_at_once=0"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "bogus"], "no study 'bogus'"),
        (["report", "ablation", "seeds"], "'seeds' is not KEY=VALUE"),
        (["report", "tpu-study", "out=/nonexistent/tpu"], "tpu-study: no run under"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(argv, message, capsys, tmp_path):
    from studies.__main__ import main

    assert main([*argv, f"page={tmp_path / 'page.md'}"] if len(argv) > 2 else argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m studies: ") and message in err and "\n" not in err
    assert not (tmp_path / "page.md").exists()


def test_the_record_keeps_the_study_a_part_of_it_adds_to(tmp_path):
    """A run of part of the plan (problems, agents, ...) on a launcher keeps the earlier
    record; a run that changes results replaces it; the launcher is never recorded."""
    runner.record(tmp_path, "study", ["seeds=3", "launcher=[hydra/launcher=parallel]"])
    assert runner.recorded_command(tmp_path, "study", []) == "python -m studies run study seeds=3"
    runner.record(tmp_path, "study", ["problems=[a]", "launcher=[hydra/launcher=parallel]"])
    assert runner.recorded_command(tmp_path, "study", []).endswith("run study seeds=3")
    runner.record(tmp_path, "study", ["problems=[a]", "agent_problems={smac: []}"])
    assert runner.recorded_command(tmp_path, "study", []).endswith("run study seeds=3")
    runner.record(tmp_path, "study", ["budget=50"])
    assert runner.recorded_command(tmp_path, "study", []).endswith("run study budget=50")
    fresh = tmp_path / "fresh"
    runner.record(fresh, "study", ["problems=[a]"])
    assert runner.recorded_command(fresh, "study", []).endswith("run study 'problems=[a]'")
