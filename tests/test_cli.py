"""The console entry points, run as a user would (subprocesses), and ``egrl-train``'s
refusals of bad input, mostly run in this process (:func:`egrl_train_in_process`)."""

from __future__ import annotations

import argparse
import csv
import importlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.support.command_line import TINY, assert_refused, egrl_train, egrl_train_in_process
from tests.support.metrics import read_metrics
from tests.support.paths import ROOT


@pytest.mark.slow
def test_egrl_train_writes_run_directory_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    out = egrl_train(*TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"results in {run_dir}" in out.stdout
    for name in ("config.yaml", "metrics.csv", "best_mapping.json", "speedup.png", "checkpoints"):
        assert (run_dir / name).exists(), name
    rows = list(csv.DictReader(open(run_dir / "metrics.csv", encoding="utf-8")))
    assert int(rows[-1]["iterations"]) == 40

    # Resuming a finished run continues from its last checkpoint and adds nothing.
    again = egrl_train(f"resume={run_dir}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    rerows = list(csv.DictReader(open(run_dir / "metrics.csv", encoding="utf-8")))
    assert [r["iterations"] for r in rerows] == [r["iterations"] for r in rows]


@pytest.mark.slow
def test_continue_runs_resumes_a_killed_run_and_refuses_another_config(tmp_path):
    run_dir = tmp_path / "run"
    first = egrl_train(*TINY, "continue_runs=true", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    reference = read_metrics(run_dir)

    # What a kill leaves behind: an older checkpoint, rows written after it, no outputs.
    checkpoints = sorted((run_dir / "checkpoints").glob("gen_??????"))
    assert len(checkpoints) >= 2
    for late in checkpoints[1:]:
        shutil.rmtree(late)
    (run_dir / "best_mapping.json").unlink()
    # ... made before the runtime group existed: where maps are measured is not compared;
    # and before reward defaulted to the hardware model's own (NNP-I's is egrl)
    saved = OmegaConf.load(run_dir / "config.yaml")
    del saved["runtime"]
    assert saved.reward is None
    saved.reward = "egrl"
    OmegaConf.save(saved, run_dir / "config.yaml")
    again = egrl_train(*TINY, "continue_runs=true", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert read_metrics(run_dir) == reference
    assert (run_dir / "best_mapping.json").exists()
    assert OmegaConf.load(run_dir / "config.yaml").runtime.name == "local"

    other = egrl_train(
        *TINY, "seed=3", "continue_runs=true", f"hydra.run.dir={run_dir}", cwd=tmp_path
    )
    assert other.returncode != 0
    assert "differing keys: seed" in other.stderr


@pytest.mark.slow
def test_egrl_train_cfg_job_prints_config(tmp_path):
    out = egrl_train("--cfg", "job", "seed=5", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "seed: 5" in out.stdout and "boltzmann_fraction: 0.2" in out.stdout


def egrl_info(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "egrl.cli.info", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_egrl_info_answers_without_solving_the_optimum_by_default(tmp_path):
    out = egrl_info("--workload", "resnet18", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| resnet50 |" in out.stdout and "native compiler map" in out.stdout
    assert "optimum: not solved (add --optimum" in out.stdout
    assert "optimum (" not in out.stdout


@pytest.mark.slow
def test_egrl_info_names_a_missing_workload_file(tmp_path):
    out = egrl_info("--workload", "missing.onnx", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == "egrl-info: workload file 'missing.onnx' does not exist"


# ------------------------------------------------------------ bad input, one line each
@pytest.mark.parametrize(
    "args",
    [("budget=-5", "seed=-1"), ("-m", "budget=10,-5", "seed=0,1")],
)
@pytest.mark.slow
def test_a_refusal_reads_the_same_in_process_as_from_the_command_line(tmp_path, args):
    """:func:`egrl_train_in_process`, which most refusal tests use, against the command:
    the same exit status, stdout and stderr; no directory made by either."""
    command, in_process = tmp_path / "command", tmp_path / "in-process"
    command.mkdir()
    in_process.mkdir()
    expected = egrl_train(*args, cwd=command)
    assert expected.returncode == 2, expected.stderr[-2000:]
    out = egrl_train_in_process(*args, cwd=in_process)
    assert (out.returncode, out.stdout, out.stderr) == (
        expected.returncode,
        expected.stdout,
        expected.stderr,
    )
    assert list(command.iterdir()) == list(in_process.iterdir()) == []


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("budget=-5", "budget=-5 is invalid: expected an integer >= 1"),
        ("budget=abc", "budget=abc is invalid: expected an integer >= 1"),
        (
            "workload.eliminate_data_movement=maybe",
            "workload.eliminate_data_movement=maybe is invalid: expected true or false",
        ),
        ("learner.gamma=2", "learner.gamma=2 is invalid: expected a number in [0, 1]"),
        (
            "workload=missing.onnx",
            "workload=missing.onnx is invalid: workload file 'missing.onnx' does not exist",
        ),
    ],
)
def test_bad_values_are_refused_before_any_directory_is_made(tmp_path, override, line):
    assert_refused(egrl_train_in_process(override, cwd=tmp_path), line)
    assert list(tmp_path.iterdir()) == []


def test_bad_sweep_values_are_refused_before_the_sweep_directory(tmp_path):
    out = egrl_train_in_process("-m", "budget=10,-5", "seed=0,1", cwd=tmp_path)
    assert_refused(out, "budget=-5 is invalid: expected an integer >= 1")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("override", "line"),
    [
        (
            "agent.overlap=sometimes",
            "agent 'egrl': option overlap=sometimes is invalid: expected auto, true or false",
        ),
        (
            "agent.start=bogus",
            "agent 'egrl': option start=bogus is invalid: expected one of initial, random, "
            "native, fallback, prior (alias dram for initial)",
        ),
    ],
)
def test_bad_agent_options_are_refused_in_one_line(tmp_path, override, line):
    """Checked by building the agent before the run starts: no run directory is made."""
    run_dir = tmp_path / "run"
    out = egrl_train_in_process(*TINY, override, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert_refused(out, line)
    assert not run_dir.exists()


def test_resume_of_a_missing_or_foreign_directory_is_refused(tmp_path):
    missing = tmp_path / "nope"
    assert_refused(
        egrl_train_in_process(f"resume={missing}", cwd=tmp_path),
        f"resume={missing} is invalid: no such directory",
    )
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_refused(
        egrl_train_in_process(f"resume={empty}", cwd=tmp_path),
        f"resume={empty} is invalid: not a run directory (config.yaml is missing)",
    )
    assert list(empty.iterdir()) == []


@pytest.mark.slow
def test_resume_applies_a_larger_budget_and_refuses_other_changes(tmp_path):
    run_dir = tmp_path / "run"
    first = egrl_train(*TINY, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    saved = (run_dir / "config.yaml").read_text(encoding="utf-8")

    out = egrl_train_in_process(f"resume={run_dir}", "seed=3", "budget=60", cwd=tmp_path)
    assert out.returncode == 2 and "egrl-train: resume: cannot change seed " in out.stderr
    out = egrl_train_in_process(f"resume={run_dir}", "budget=30", cwd=tmp_path)
    assert_refused(
        out,
        "budget=30 is invalid: the run has already made 40 iterations (expected an integer >= 40)",
    )
    assert (run_dir / "config.yaml").read_text(encoding="utf-8") == saved

    more = egrl_train(f"resume={run_dir}", "budget=60", "seed=0", cwd=tmp_path)
    assert more.returncode == 0, more.stderr[-2000:]
    assert int(read_metrics(run_dir)[-1]["iterations"]) == 60
    assert OmegaConf.load(run_dir / "config.yaml").budget == 60
    # A later plain resume keeps the applied budget (at 40 it would be below the 60 made).
    again = egrl_train(f"resume={run_dir}", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert int(read_metrics(run_dir)[-1]["iterations"]) == 60


#: a toy chip that fails once the search measures more than one map at a time (binding
#: it and measuring the compiler's map work, so the checks before the run pass)
BROKEN_CHIP = """
import hwmodels

toy = hwmodels.import_module({toy!r})


class BrokenTarget(toy.ToyTarget):
    def measure(self, maps, probs=None):
        if len(maps) > 1:
            raise RuntimeError("the chip caught fire")
        return super().measure(maps, probs)


@hwmodels.register("broken-toy")
class BrokenChip(toy.ToyChip):
    def bind(self, workload):
        target = super().bind(workload)
        target.__class__ = BrokenTarget
        return target
"""


@pytest.mark.slow
def test_a_failed_run_logs_its_error_to_train_log(tmp_path):
    chip = tmp_path / "broken_chip.py"
    chip.write_text(BROKEN_CHIP.format(toy=str(ROOT / "examples" / "toy_chip.py")))
    run_dir = tmp_path / "run"
    out = egrl_train(
        "hwmodel=toy",
        "hwmodel.name=broken-toy",
        f"hwmodel.params.module={chip}",
        "agent=random",
        "workload=resnet18",
        "budget=10",
        "progress=false",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert out.returncode != 0
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    assert "Traceback" in log and "the chip caught fire" in log


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("hwmodel=mcm", "workload=gpt2", "agent=sa", "budget=10"),
            "workload=gpt2 is invalid on hwmodel=mcm: mcm: 'gpt2' does not fit 36 chips of "
            "32 MiB with the greedy compiler: memory: chip 0 holds 38695808 bytes, SRAM is "
            "33554432",
        ),
        (
            ("agent=muzero", "budget=10"),
            "agent=muzero is invalid: agent 'muzero' plays the TPU memory-mapping game and "
            "needs hwmodel=tpu-cmem; got a NNPITarget target",
        ),
        (
            ("agent=sa", "workload=resnet18", "budget=10", "+agent.chainz=4"),
            "agent=sa is invalid: agent 'sa' has no option(s) ['chainz']; its options are "
            "['chains', 'moves', 'start', 'steps', 't_end', 't_start']",
        ),
        (
            ("agent=sa", "agent.moves=100000", "workload=resnet18"),
            "agent 'sa': moves=100000 exceeds the 46 entries of a map",
        ),
        (
            ("-m", "agent=sa,muzero", "workload=resnet18", "budget=10", "seed=0,1"),
            "agent=muzero is invalid: agent 'muzero' plays the TPU memory-mapping game and "
            "needs hwmodel=tpu-cmem; got a NNPITarget target",
        ),
    ],
)
def test_runs_that_cannot_be_built_are_refused_before_any_directory(tmp_path, args, line):
    """The target and the agent are asked at check time (issue 25): a workload that does
    not fit, an agent on a target it does not play, an unknown or bad agent option, and
    the same in a sweep; one line, exit status 2, nothing made."""
    assert_refused(egrl_train_in_process(*args, cwd=tmp_path), line)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ help texts
class _Parsed(Exception):
    """Raised instead of parsing, carrying the parser a CLI built."""


def cli_parser(monkeypatch, main, argv: list[str]) -> argparse.ArgumentParser:
    """The parser ``main(argv)`` builds (its parse_args is stopped before it runs)."""

    def capture(self, args=None, namespace=None):
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Parsed) as info:
        main(argv)
    return info.value.args[0]


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """Options, positionals and sub-commands of ``parser`` (recursively) without help."""
    missing = []
    for action in parser._actions:
        name = "/".join(action.option_strings) or action.dest
        if not action.help or action.help == argparse.SUPPRESS or not action.help.strip():
            missing.append(f"{parser.prog} {name}")
        if isinstance(action, argparse._SubParsersAction):
            missing += [f"{parser.prog} {c.dest}" for c in action._choices_actions if not c.help]
            for sub in action.choices.values():
                missing += undocumented(sub)
    return missing


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        ("egrl.cli.info", []),
        ("egrl.cli.report", []),
        ("egrl.cli.experiment", []),
        ("egrl.cli.transfer", []),
        ("egrl.cli.transfer", ["pretrain"]),
    ],
)
def test_every_cli_option_has_help(monkeypatch, module, argv):
    main = importlib.import_module(module).main
    parser = cli_parser(monkeypatch, main, argv)
    assert len(parser._actions) > 1
    assert undocumented(parser) == []


# ------------------------------------------------------------------ README
def readme_section(title: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


@pytest.mark.slow
def test_readme_own_model_example_runs(tmp_path):
    """The README's "Your own model" section, run as written from an empty directory."""
    section = readme_section("Your own model")
    (python_code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    (shell,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    made = subprocess.run(
        [sys.executable, "-c", python_code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    modules = {"egrl-train": "egrl.cli.train", "egrl-info": "egrl.cli.info"}
    commands = [shlex.split(line, comments=True) for line in shell.splitlines()]
    commands = [c for c in commands if c]
    assert {c[0] for c in commands} == set(modules)
    for command in commands:
        out = subprocess.run(
            [sys.executable, "-m", modules[command[0]], *command[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, (command, out.stderr[-2000:])
        if command[0] == "egrl-info":
            assert "native compiler map" in out.stdout
            continue
        run_dir = Path(out.stdout.rsplit("results in ", 1)[1].strip())
        # runs/<hardware model>/<workload file>/<agent>/seed...: .onnx and .json.gz apart
        assert run_dir.parent.parent.name == Path(command[1].split("=", 1)[1]).name
        assert run_dir.parent.parent.parent.name == "nnpi"
        best = json.loads((run_dir / "best_mapping.json").read_text(encoding="utf-8"))
        assert best["mapping"] is not None and best["iterations"] > 0


def test_runtime_values_are_checked_before_the_run_directory():
    from hydra import compose, initialize_config_module

    from egrl.cli.checks import run_problems

    with initialize_config_module("configs", version_base=None):
        cfg = compose(
            "train", overrides=["runtime=ray", "runtime.workers=0"], return_hydra_config=True
        )
    assert run_problems(cfg) == ["runtime.workers=0 is invalid: expected an integer >= 1"]


def test_a_run_saved_before_a_learner_option_resumes_with_the_value_it_was_made_with():
    from omegaconf import OmegaConf

    from egrl.cli.resume import with_learner_defaults_of_its_time

    old = OmegaConf.create({"learner": {"batch_size": 24}})
    filled = with_learner_defaults_of_its_time(old).learner
    assert (filled.update_on, filled.entropy_reduction, filled.reward_norm) == (
        "proposal",
        "mean",
        "none",
    )
    new = OmegaConf.create({"learner": {"update_on": "paid", "reward_norm": "buffer"}})
    kept = with_learner_defaults_of_its_time(new).learner
    assert (kept.update_on, kept.reward_norm, kept.entropy_reduction) == ("paid", "buffer", "mean")


COUNTING_CHIP = """
import io, json, sys
sys.path.insert(0, {examples!r})
import external_chip
raw = sys.stdin.read()
request = json.loads(raw)
with open({log!r}, "a") as f:
    f.write(request["request"] + " " + str(len(request.get("maps", []))) + "\\n")
sys.stdin = io.StringIO(raw)
sys.exit(external_chip.main([]))
"""


@pytest.mark.slow
def test_a_command_binds_a_chip_once(tmp_path):
    """The checks before a run and the run share one binding: a chip is asked for its
    compiler's map once and runs it twice (``deterministic: auto`` reads it twice to tell
    a steady chip from a noisy one), besides the budget's maps."""
    log = tmp_path / "requests.txt"
    chip = tmp_path / "counting_chip.py"
    examples = str(ROOT / "examples")
    chip.write_text(COUNTING_CHIP.format(examples=examples, log=str(log)))
    out = egrl_train(
        "hwmodel=external",
        f"hwmodel.params.command='{sys.executable} {chip}'",
        "workload=resnet18",
        "agent=random",
        "budget=12",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    requests = [line.split() for line in log.read_text().splitlines()]
    assert [r for r in requests if r[0] == "baseline"] == [["baseline", "0"]]
    assert sum(int(n) for kind, n in requests if kind == "evaluate") == 12 + 2
