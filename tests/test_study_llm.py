"""The LLM study: its plan (the sweep's decode steps built before the runs that read them),
and its smoke preset end to end."""

from __future__ import annotations

import pytest

from studies import llm, render, runner
from studies.runner import CommandSpec


def test_the_plan_builds_the_sweeps_decode_steps_before_every_run(tmp_path):
    cfg = runner.load_plan("llm", [f"out={tmp_path}"])
    (stage,) = list(llm.plan(cfg, tmp_path))
    commands = [s for s in stage if isinstance(s, CommandSpec)]
    readings = [c.path for c in commands if c.done.endswith("/prior.json")]
    assert readings == [p for p in cfg.problems if p.startswith("chip-")]  # the priors
    commands = [c for c in commands if c.path == "workloads"]
    assert [c.done for c in commands] == [
        "workloads/llama3.2-1b-decode-512.json.gz",
        "workloads/llama3.2-1b-decode-32768.json.gz",
    ]
    assert commands[1].argv[-5:] == (
        "llama3.2-1b-decode",
        "--cached",
        "32768",
        "--out",
        str(tmp_path / "workloads"),
    )
    runs = [s for s in stage if not isinstance(s, CommandSpec)]
    assert len(runs) == 5 * (8 * 4 + 2 * 2)  # 8 problems x 4 agents, the sweep's 2 x 2
    short = {s.path: s for s in runs}["nnpi-llama3.2-1b-decode-512/mbo/seed0"].overrides
    assert f"workload={tmp_path}/workloads/llama3.2-1b-decode-512.json.gz" in short


def test_a_plan_without_the_sweeps_problems_builds_nothing(tmp_path):
    cfg = runner.load_plan("llm", [f"out={tmp_path}", "problems=[nnpi-llama3.2-1b-decode]"])
    (stage,) = list(llm.plan(cfg, tmp_path))
    assert not [s for s in stage if isinstance(s, CommandSpec)]


def test_a_sweep_problem_without_overrides_is_refused(tmp_path):
    cfg = runner.load_plan("llm", [f"out={tmp_path}", "sweep={nnpi-bogus: 8}"])
    with pytest.raises(runner.StudyError, match="sweep problem 'nnpi-bogus' has no overrides"):
        next(llm.plan(cfg, tmp_path))


@pytest.mark.slow
def test_smoke_preset_end_to_end(tmp_path, study_in_process):
    """EA and mbo on Qwen2.5's decode step on the example chip, EA on NNP-I on the decode
    step with 64 tokens cached (built by the plan); the section reads the runs."""
    out = tmp_path / "out"
    assert runner.run("llm-smoke", [f"out={out}"]) == 0
    assert (out / "workloads" / "qwen2.5-0.5b-decode-64.json.gz").exists()
    section = render.read_section("llm", out / "results.md")
    assert section.startswith("## LLM inference")
    assert "| chip-qwen2.5-0.5b-decode | 434 | 471 + 24 | " in section
    assert "| nnpi-qwen2.5-0.5b-decode-64 | 434 | 471 + 0 | " in section
    assert "| 64 | 0 | 2 (0.1) | 5.9% | " in section  # the sweep, by cache length
    assert "the on-chip levels hold, 28 MiB at a time" in section
    assert "5.9% of the bytes the step moves at 64 tokens. docs/nnpi.md" in section


def test_decode_bounds_orders_the_maps_of_a_decode_step():
    """benchmarks/decode_bounds.py on the zoo's Qwen2.5 decode step: the unbounded-SRAM map
    is faster than the compiler's, which is faster than every tensor in DRAM."""
    import importlib.util

    path = runner.ROOT / "benchmarks" / "decode_bounds.py"
    spec = importlib.util.spec_from_file_location("decode_bounds", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    name, weights, cache, acts, share, dram, compiler, sram, stream = bench.row(
        "qwen2.5-0.5b-decode"
    )
    assert (name, weights, cache) == ("qwen2.5-0.5b-decode", "471", "24")
    assert float(sram) < float(compiler) < float(dram)
    assert float(sram) < float(stream) and share.endswith("%")
