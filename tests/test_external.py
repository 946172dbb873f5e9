"""The ``external`` hardware model against the example chip and misbehaving commands."""

from __future__ import annotations

import json
import logging
import os
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import egrl
import hwmodels
from hwmodels.base import CheckRefused, ChipCallError
from hwmodels.external import ExternalEvaluatorError, ExternalModel, ExternalTarget
from tests.support.chips import CHIP, CHIP_ARGS, tiny_workload
from tests.support.paths import PY

#: wraps the example chip; misbehaves as the environment variables say
WRAPPER = """
import json, os, runpy, sys
request = json.load(sys.stdin)
if os.environ.get("LOG"):
    with open(os.environ["LOG"], "a") as f:
        f.write(json.dumps([request["request"], request.get("batch_index"), len(request.get("maps", []))]) + "\\n")
if str(request.get("batch_index")) == os.environ.get("FAIL_CHUNK"):
    sys.stderr.write("chunk refused by the wrapper\\n")
    sys.exit(4)
counter = os.environ.get("COUNTER")
if counter:
    count = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
    open(counter, "w").write(str(count))
    if count <= int(os.environ["FAIL_TIMES"]):
        sys.stderr.write(f"transient failure {count}\\n")
        sys.exit(5)
chip = runpy.run_path(os.environ["CHIP"])
print(json.dumps(chip["answer"](request, chip["parse_args"](sys.argv[1:]))))
"""

#: prints the JSON in $ANSWER whatever it is asked
ANSWER = "import os, sys; sys.stdin.read(); print(os.environ['ANSWER'])"

#: starts a child that sleeps, records its pid, then hangs
HANG = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(120)
"""

CRASH = "import sys; sys.stderr.write('segfault in the driver\\n'); sys.exit(3)"


def script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def chip_target(**kw) -> ExternalTarget:
    return ExternalModel([PY, CHIP, *CHIP_ARGS], **kw).bind(tiny_workload())


def answer_target(answer: dict, **kw) -> ExternalTarget:
    env = {"ANSWER": json.dumps(answer)}
    return ExternalModel([PY, "-c", ANSWER], env=env, retries=0, **kw).bind(tiny_workload())


@pytest.fixture
def maps() -> np.ndarray:
    """Three maps [3, 4, 2]: all DRAM (valid), all SRAM (invalid), a mixed one."""
    return np.array(
        [np.zeros((4, 2)), np.full((4, 2), 2), [[2, 1], [1, 1], [0, 0], [0, 1]]], dtype=np.int64
    )


# ------------------------------------------------------------------ the protocol
def test_registered_and_built_by_name():
    assert "external" in hwmodels.names()
    hw = hwmodels.make("external", command=f"{PY} {CHIP} --sram-kib 1", timeout_s=5)
    assert isinstance(hw, ExternalModel)
    assert hw.command == [PY, CHIP, "--sram-kib", "1"]
    assert hw.heads == {"weight": ["DRAM", "LLC", "SRAM"], "activation": ["DRAM", "LLC", "SRAM"]}


def test_bind_writes_the_workload_file_and_units_are_nodes():
    target = chip_target()
    assert target.num_units == 4 and target.unit_names == ["c1", "c2", "add", "fc"]
    assert tuple(target.graph.x.shape) == (4, 19)
    np.testing.assert_array_equal(target.graph.x.numpy(), target.workload.features)  # raw
    saved = json.loads(target.workload_path.read_text())
    assert saved["format"] == "egrl-workload/1"
    assert [n["name"] for n in saved["nodes"]] == target.unit_names
    folder = target.workload_path.parent
    del target
    assert not folder.exists()


@pytest.mark.slow
def test_measure_with_the_example_chip(maps):
    m = chip_target().measure(maps)
    assert m.rectified.shape == (3, 4, 2) and m.rectified.dtype == np.int64
    assert m.valid.tolist() == [True, False, True]
    # the all-DRAM map: one memory-bound node after another at 67.2 GB/s
    w = tiny_workload()
    moved = w.weight_bytes + w.output_bytes + w.input_bytes
    compute = w.macs / 25e12
    assert m.latency_s[0] == pytest.approx(np.maximum(moved / 67.2e9, compute).sum(), rel=1e-12)
    assert m.latency_s[2] < m.latency_s[0]
    # the all-SRAM map is not run; the chip reports demoted bytes, converted to a ratio
    assert np.isnan(m.latency_s[1])
    assert 0 < m.reassigned_ratio[1] < 1
    assert m.reassigned_ratio[[0, 2]].tolist() == [0.0, 0.0]
    assert not np.array_equal(m.rectified[1], maps[1])
    np.testing.assert_array_equal(m.rectified[[0, 2]], maps[[0, 2]])


@pytest.mark.slow
def test_inline_workload_gives_the_same_answer(maps):
    inline = chip_target(inline_workload=True)
    assert inline.workload_path is None
    a, b = inline.measure(maps), chip_target().measure(maps)
    np.testing.assert_array_equal(a.latency_s, b.latency_s)
    np.testing.assert_array_equal(a.rectified, b.rectified)


@pytest.mark.slow
def test_chunks_are_sent_separately_and_joined(tmp_path, maps):
    log = tmp_path / "calls.jsonl"
    wrapper = script(tmp_path, "wrapper.py", WRAPPER)
    env = {"CHIP": CHIP, "LOG": str(log)}
    hw = ExternalModel([PY, wrapper, *CHIP_ARGS], batch_size=2, env=env)
    target = hw.bind(tiny_workload())
    batch = np.concatenate([maps, maps[:2]])  # 5 maps -> chunks of 2, 2, 1
    m = target.measure(batch)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls == [["evaluate", 0, 2], ["evaluate", 1, 2], ["evaluate", 2, 1]]
    assert m.valid.tolist() == [True, False, True, True, False]
    whole = chip_target().measure(batch)
    np.testing.assert_array_equal(m.latency_s, whole.latency_s)
    np.testing.assert_array_equal(m.rectified, whole.rectified)


@pytest.mark.slow
def test_env_reward_and_baseline_from_the_chip(maps):
    target = chip_target()
    env = egrl.Env(target, target.workload)
    baseline = env.baseline_mapping
    assert baseline.max() > 0  # the chip's compiler uses the fast levels
    ev = env.evaluate(maps)
    assert env.num_evaluations == 3
    assert ev.reward[1] == pytest.approx(-ev.reassigned_ratio[1])
    assert ev.speedup[0] == pytest.approx(env.baseline_latency_s / ev.latency_s[0])
    assert ev.speedup[1] == 0.0


# ---------------------------------------------------------------- baseline fallback
@pytest.mark.parametrize("command", ["no-baseline", "crash"])
@pytest.mark.slow
def test_baseline_falls_back_to_the_fallback_map(tmp_path, caplog, command):
    argv = [PY, CHIP, "--no-baseline"] if command == "no-baseline" else [PY, "-c", CRASH]
    target = ExternalModel(argv).bind(tiny_workload())
    with caplog.at_level(logging.WARNING, logger="hwmodels.external"):
        mapping = target.native_mapping()
    np.testing.assert_array_equal(mapping, np.zeros((4, 2), dtype=np.int64))  # DRAM
    assert "no baseline map" in caplog.text and "fallback" in caplog.text
    target = ExternalModel(argv, fallback={"activation": "LLC"}).bind(tiny_workload())
    np.testing.assert_array_equal(target.native_mapping(), [[0, 1]] * 4)


def test_initial_and_fallback_maps_are_the_named_choices():
    heads = {"chip": ["host", "npu0", "npu1"], "bank": ["a", "b"]}
    target = ExternalModel(
        ["/nonexistent/never-run"], heads=heads, initial={"chip": "npu1"}, fallback={"bank": "b"}
    ).bind(tiny_workload())
    assert target.initial_mapping().tolist() == [[2, 0]] * 4
    assert target.fallback_mapping().tolist() == [[0, 1]] * 4
    assert target.initial_mapping().dtype == np.int64


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"initial": {"wieght": "DRAM"}}, r"initial names unknown head\(s\) \['wieght'\]"),
        ({"fallback": {"weight": "HBM"}}, r"fallback: head 'weight' has no choice 'HBM'"),
    ],
)
def test_bad_initial_or_fallback_choices_are_named(params, problem):
    with pytest.raises(ValueError, match=problem):
        ExternalModel("x", **params)


@pytest.mark.slow
def test_malformed_baseline_mapping_is_an_error():
    target = answer_target({"mapping": [[0, 1], [0, 1]]})
    with pytest.raises(
        ExternalEvaluatorError, match=r"malformed mapping.*shape \[2, 2\].*\[4, 2\]"
    ):
        target.native_mapping()
    target = answer_target({"mapping": [[0, 3]] * 4})
    with pytest.raises(ExternalEvaluatorError, match="unit 'c1' head 'activation' has choice 3"):
        target.native_mapping()


# ------------------------------------------------------------------ answer defaults
@pytest.mark.slow
def test_defaults_when_the_chip_gives_no_rectified_maps(maps):
    m = answer_target({"latency_s": [1e-3, None, 2e-3], "valid": [True, False, True]}).measure(maps)
    np.testing.assert_array_equal(m.rectified[1], np.zeros((4, 2)))  # the fallback map
    np.testing.assert_array_equal(m.rectified[[0, 2]], maps[[0, 2]])
    assert m.reassigned_ratio.tolist() == [0.0, 1.0, 0.0]
    assert np.isnan(m.latency_s[1]) and m.latency_s[2] == 2e-3

    given = {"latency_s": [1e-3, 5e-3, 2e-3], "valid": [True, False, True]}
    given["reassigned_ratio"] = [0.5, 0.25, None]
    m = answer_target(given).measure(maps)
    assert m.reassigned_ratio.tolist() == [0.0, 0.25, 0.0]
    assert m.latency_s[1] == 5e-3


@pytest.mark.slow
def test_repeats_average_the_latency_and_a_noisy_chip_is_not_deterministic(maps):
    # 3 maps x 2 repeats, sent one map's repeats after the other
    answer = {
        "latency_s": [1.0, 3.0, 5.0, None, 2.0, 4.0],
        "valid": [True, True, True, False, True, True],
    }
    target = answer_target(answer, repeats=2, deterministic=False)
    m = target.measure(maps)
    assert m.latency_s[0] == 2.0 and m.latency_s[2] == 3.0
    assert m.valid.tolist() == [True, False, True]  # valid only if every repeat was
    np.testing.assert_array_equal(m.rectified[[0, 2]], maps[[0, 2]])
    assert target.deterministic is False and chip_target(deterministic=True).deterministic is True


def test_a_chip_declared_deterministic_whose_repeats_differ_is_warned_about(maps, caplog):
    answer = {
        "latency_s": [1.0, 3.0, 5.0, None, 2.0, 2.0],
        "valid": [True] * 3 + [False] + [True] * 2,
    }
    target = answer_target(answer, repeats=2, deterministic=True)
    with caplog.at_level("WARNING", logger="hwmodels.external"):
        target.measure(maps)
        target.measure(maps)  # once per target
    (record,) = [r for r in caplog.records if "declared deterministic" in r.getMessage()]
    assert "(1, 3 s, 200.00% apart)" in record.getMessage()
    quiet = answer_target(
        {"latency_s": [1.0, 1.0] * 3, "valid": [True] * 6}, repeats=2, deterministic=True
    )
    caplog.clear()
    with caplog.at_level("WARNING", logger="hwmodels.external"):
        quiet.measure(maps)
    assert not [r for r in caplog.records if "declared deterministic" in r.getMessage()]


@pytest.mark.slow
def test_a_reading_answered_without_a_latency_keeps_the_maps_other_readings(maps, caplog):
    """One repeat of a valid map comes back null: the map's other reading is its latency
    and the lost reading is counted; a map with none left is answered as one not run."""
    answer = {"latency_s": [1.0, None, None, None, 2.0, 4.0], "valid": [True] * 6}
    target = answer_target(answer, repeats=2, deterministic=False)
    with caplog.at_level("WARNING", logger="hwmodels.external"):
        m = target.measure(maps)
    assert m.latency_s[0] == 1.0 and m.latency_s[2] == 3.0
    assert m.valid.tolist() == [True, False, True] and np.isnan(m.latency_s[1])
    assert m.reassigned_ratio[1] == 1.0 and target.dropped_readings == 3
    assert "3 reading(s) of 2 valid map(s) without a latency_s" in caplog.text
    single = answer_target({"latency_s": [1.0, None, 2.0], "valid": [True] * 3})
    with pytest.raises(ExternalEvaluatorError, match="map 1 is valid but its latency_s is nan"):
        single.measure(maps)  # one reading a map: the call failed (and was retried)


#: the example chip with lognormal noise on every latency (a new draw each reading)
NOISY = """
import json, runpy, sys
import numpy as np
request = json.load(sys.stdin)
chip = runpy.run_path(sys.argv[1])
answer = chip["answer"](request, chip["parse_args"](sys.argv[2:]))
if "latency_s" in answer:
    noise = np.random.default_rng().lognormal(0.0, 0.05, len(answer["latency_s"]))
    answer["latency_s"] = [None if t is None else t * n for t, n in zip(answer["latency_s"], noise)]
print(json.dumps(answer))
"""


@pytest.mark.slow
def test_auto_reads_the_compilers_map_twice_to_tell_a_noisy_chip(tmp_path, caplog):
    """deterministic: auto (the default): identical readings keep the measure cache, two
    different ones turn it off and say how far apart they were."""
    steady = egrl.make_env("external", tiny_workload(), command=[PY, CHIP, *CHIP_ARGS])
    assert steady.target.deterministic is True and steady.deterministic
    noisy_chip = script(tmp_path, "noisy.py", NOISY)
    with caplog.at_level(logging.INFO, logger="egrl.env"):
        noisy = egrl.make_env(
            "external", tiny_workload(), command=[PY, noisy_chip, CHIP, *CHIP_ARGS]
        )
    assert noisy.target.deterministic is False and not noisy.deterministic
    assert "two readings of the compiler's map differ" in caplog.text
    declared = egrl.make_env(
        "external", tiny_workload(), command=[PY, noisy_chip, CHIP], deterministic=True
    )
    assert declared.deterministic  # taken at its word: read once
    example = [PY, CHIP, *CHIP_ARGS, "--noise-cv", "0.05"]  # the example chip's own noise
    assert not egrl.make_env("external", tiny_workload(), command=example).deterministic


@pytest.mark.slow
def test_an_unreported_repair_is_the_configured_fallback_map(maps):
    answer = {"latency_s": [1e-3, None, 2e-3], "valid": [True, False, True]}
    m = answer_target(answer, fallback={"weight": "LLC", "activation": "LLC"}).measure(maps)
    np.testing.assert_array_equal(m.rectified[1], np.ones((4, 2)))
    np.testing.assert_array_equal(m.rectified[[0, 2]], maps[[0, 2]])


@pytest.mark.slow
def test_reassigned_bytes_are_converted(maps):
    answer = {"latency_s": [1.0, None, 1.0], "valid": [True, False, True]}
    answer["reassigned_bytes"] = [0, 2000, 0]
    m = answer_target(answer).measure(maps)
    w = tiny_workload()
    total = w.weight_bytes.sum() + w.output_bytes.sum()
    assert m.reassigned_ratio[1] == pytest.approx(2000 / total)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"valid": [True] * 3}, r"answer has no 'latency_s'"),
        (
            {"latency_s": [1.0, 1.0], "valid": [True] * 3},
            r"'latency_s' must be a list of 3 .*got 2",
        ),
        (
            {"latency_s": [1.0, float("nan"), 1.0], "valid": [True] * 3},
            r"map 1 is valid but its latency_s is nan",
        ),
        (
            {"latency_s": [1.0, None, 1.0], "valid": [True] * 3},
            r"map 1 is valid but its latency_s is nan",
        ),
        ({"latency_s": [1.0] * 3, "valid": [True, 1, True]}, r"JSON booleans; map 1 has 1"),
        (
            {"latency_s": [1.0, "fast", 1.0], "valid": [True] * 3},
            r"numbers or null; map 1 has 'fast'",
        ),
        (
            {"latency_s": [1.0] * 3, "valid": [True] * 3, "rectified": [[[0, 0]] * 4] * 3},
            r"map 1 is valid but its rectified map differs",
        ),
        (
            {"latency_s": [1.0] * 3, "valid": [False] * 3, "rectified": [[[0, 0]] * 3] * 3},
            r"'rectified' has shape \[3, 3, 2\]",
        ),
        (
            {"latency_s": [1.0] * 3, "valid": [False] * 3, "rectified": [[[0, 7]] * 4] * 3},
            r"rectified map 0: unit 'c1' head 'activation' has choice 7",
        ),
        ({"error": "device busy"}, r"answered with an error: device busy"),
        ([1, 2, 3], r"answer is a JSON list"),
    ],
)
@pytest.mark.slow
def test_malformed_answers_are_named(maps, answer, problem):
    target = answer_target(answer)
    with pytest.raises(ExternalEvaluatorError, match=problem) as info:
        target.measure(maps)
    assert info.value.chunk_index == 0
    assert "python" in str(info.value) or PY in str(info.value)  # the command is named


@pytest.mark.slow
def test_not_json_is_named(tmp_path, maps):
    bad = script(tmp_path, "bad.py", "import sys; sys.stdin.read(); print('latency: 3 ms {')")
    target = ExternalModel([PY, bad], retries=0).bind(tiny_workload())
    with pytest.raises(ExternalEvaluatorError, match=r"stdout is not JSON.*'latency: 3 ms \{'"):
        target.measure(maps)


@pytest.mark.slow
def test_logs_before_the_answer_are_tolerated(tmp_path, maps):
    answer = {"latency_s": [1.0] * 3, "valid": [True] * 3}
    noisy = script(
        tmp_path,
        "noisy.py",
        f"import sys; sys.stdin.read(); print('compiling...'); print({json.dumps(json.dumps(answer))})",
    )
    m = ExternalModel([PY, noisy], retries=0).bind(tiny_workload()).measure(maps)
    assert m.latency_s.tolist() == [1.0] * 3


# ------------------------------------------------------------------ failures
@pytest.mark.slow
def test_crash_names_exit_code_stderr_and_attempts(maps):
    target = ExternalModel([PY, "-c", CRASH], retries=1).bind(tiny_workload())
    with pytest.raises(ExternalEvaluatorError) as info:
        target.measure(maps)
    err = info.value
    assert "exit code 3" in str(err) and "segfault in the driver" in str(err)
    assert "after 2 attempt(s)" in str(err) and "chunk 0" in str(err)
    assert [p.split(":")[0] for p in err.problems] == ["attempt 1/2", "attempt 2/2"]
    assert err.command == [PY, "-c", CRASH]
    assert len(err.partial.valid) == 0 and err.partial.rectified.shape == (0, 4, 2)


@pytest.mark.slow
def test_missing_executable_is_named(maps):
    target = ExternalModel(["/nonexistent/chip-runner"], retries=0).bind(tiny_workload())
    with pytest.raises(ExternalEvaluatorError, match="could not start.*chip-runner"):
        target.measure(maps)


@pytest.mark.slow
def test_timeout_kills_the_process_group(tmp_path, maps):
    pid_file = tmp_path / "child.pid"
    hang = script(tmp_path, "hang.py", HANG)
    target = ExternalModel([PY, hang, str(pid_file)], timeout_s=1.5, retries=0).bind(
        tiny_workload()
    )
    with pytest.raises(
        ExternalEvaluatorError, match=r"timed out after 1.5 s \(process group killed\)"
    ):
        target.measure(maps)
    child = int(pid_file.read_text())
    status = Path(f"/proc/{child}/status")

    def dead() -> bool:  # gone, or a zombie waiting for its new parent to reap it
        try:
            return "State:\tZ" in status.read_text()
        except FileNotFoundError:
            return True

    # SIGKILL is delivered asynchronously: on a loaded machine the child may still be
    # scheduled for a moment after the call returns. A survivor would never die.
    deadline = time.monotonic() + 10
    while not dead() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dead()


@pytest.mark.slow
def test_retry_after_a_transient_failure(tmp_path, maps, caplog):
    wrapper = script(tmp_path, "wrapper.py", WRAPPER)
    env = {"CHIP": CHIP, "COUNTER": str(tmp_path / "count"), "FAIL_TIMES": "1"}
    target = ExternalModel([PY, wrapper, *CHIP_ARGS], retries=1, env=env).bind(tiny_workload())
    with caplog.at_level(logging.WARNING, logger="hwmodels.external"):
        m = target.measure(maps)
    assert m.valid.tolist() == [True, False, True]
    assert "attempt 1/2: exit code 5" in caplog.text and "transient failure 1" in caplog.text
    assert (tmp_path / "count").read_text() == "2"


@pytest.mark.slow
def test_failed_chunk_keeps_the_chunks_before_it(tmp_path, maps):
    wrapper = script(tmp_path, "wrapper.py", WRAPPER)
    env = {"CHIP": CHIP, "FAIL_CHUNK": "2", "LOG": str(tmp_path / "calls.jsonl")}
    hw = ExternalModel([PY, wrapper, *CHIP_ARGS], batch_size=1, retries=1, env=env)
    target = hw.bind(tiny_workload())
    with pytest.raises(ExternalEvaluatorError) as info:
        target.measure(maps)
    err = info.value
    assert isinstance(err, ChipCallError)  # what the runtime catches, for any chip
    assert err.chunk_index == 2 and err.chunk_range == (2, 3)
    assert "chunk 2 (maps 2..2 of 3)" in str(err) and "exit code 4" in str(err)
    assert "chunk refused by the wrapper" in str(err)
    assert err.partial.valid.tolist() == [True, False]
    np.testing.assert_array_equal(err.partial.rectified[0], maps[0])
    calls = (tmp_path / "calls.jsonl").read_text().splitlines()
    assert len(calls) == 4  # chunks 0 and 1 once, chunk 2 twice


# ------------------------------------------------------------------ bad parameters
@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ({"command": []}, "command is empty"),
        ({"command": "x", "timeout_s": 0}, "timeout_s must be positive"),
        ({"command": "x", "retries": -1}, "retries must be >= 0"),
        ({"command": "x", "batch_size": 0}, "batch_size must be >= 1"),
        ({"command": "x", "heads": {"weight": "DRAM"}}, "head 'weight' must list"),
        ({"command": "x", "heads": {"weight": ["DRAM", "DRAM"]}}, "repeats a choice"),
        ({"command": "x", "repeats": 0}, "repeats must be an integer >= 1"),
        ({"command": "x", "deterministic": "no"}, "deterministic must be true, false or auto"),
    ],
)
def test_bad_parameters(params, problem):
    with pytest.raises(ValueError, match=problem):
        ExternalModel(**params)


def test_out_of_range_maps_are_refused_before_running(maps):
    target = ExternalModel(["/nonexistent/never-run"]).bind(tiny_workload())
    bad = maps.copy()
    bad[1, 3, 0] = 3
    with pytest.raises(ValueError, match="map 1: unit 'fc' head 'weight' has choice 3"):
        target.measure(bad)


@pytest.mark.slow
def test_custom_heads_reach_the_command(tmp_path):
    log = tmp_path / "request.json"
    dump = script(
        tmp_path,
        "dump.py",
        f"""
        import json, sys
        request = json.load(sys.stdin)
        open({str(log)!r}, "w").write(json.dumps(request))
        print(json.dumps({{"latency_s": [1.0], "valid": [True]}}))
        """,
    )
    heads = {"chip": ["host", "npu0", "npu1"]}
    target = ExternalModel([PY, dump], heads=heads, env={"UNUSED": "1"}).bind(tiny_workload())
    target.measure(np.array([[[0], [1], [2], [1]]]))
    request = json.loads(log.read_text())
    assert request["protocol"] == "egrl-external/1" and request["request"] == "evaluate"
    assert request["heads"] == heads and request["maps"] == [[[0], [1], [2], [1]]]
    assert request["workload"]["node_names"] == ["c1", "c2", "add", "fc"]
    assert os.path.exists(request["workload"]["path"])


@pytest.mark.slow
def test_the_budget_counts_board_runs_when_a_map_is_read_several_times(tmp_path):
    """repeats: 3 reads each map three times: a budget of 10 board runs pays for 3 maps,
    the chip runs 9 of them (besides the compiler's map at binding), and iterations
    count board runs."""
    from egrl.agents import make_agent, train_config
    from egrl.rundir import RunDir

    log = tmp_path / "requests.jsonl"
    env = egrl.make_env(
        "external",
        tiny_workload(),
        command=[PY, script(tmp_path, "wrapper.py", WRAPPER), *CHIP_ARGS],
        env={"CHIP": CHIP, "LOG": str(log)},
        deterministic=False,
        repeats=3,
    )
    assert env.readings_per_map == 3
    log.unlink()  # the binding's requests
    cfg = train_config(
        {
            "budget": 10,
            "progress": False,
            "agent": {"name": "random", "batch": 2},
            "confirm": {"top": 0},
            "record_evaluations": True,
        }
    )
    agent = make_agent(env, cfg, run_dir=tmp_path / "run")
    agent.run()
    assert agent.ledger.iterations == 9 and agent.ledger.proposals == 3
    # evaluations.csv counts board runs as metrics.csv does
    assert RunDir(tmp_path / "run").read_evaluations()["iterations"].tolist() == [3, 6, 9]
    read = sum(json.loads(line)[2] for line in log.read_text().splitlines())
    assert read == 9
    assert [r["iterations"] for r in agent.rows] == [6, 9]
    assert [r["paid_maps"] for r in agent.rows] == [2, 3] and "paid_maps" in agent.columns


# ------------------------------------------------------------------ check requests
@pytest.mark.slow
def test_check_is_the_compiler_of_evaluate_without_a_board_run(maps):
    target = chip_target()
    c, m = target.check(maps), target.measure(maps)
    assert c.valid.tolist() == m.valid.tolist() == [True, False, True]
    np.testing.assert_array_equal(c.rectified, m.rectified)
    np.testing.assert_array_equal(c.reassigned_ratio, m.reassigned_ratio)
    assert target.checks


@pytest.mark.slow
def test_check_without_rectified_maps_repairs_to_the_fallback(maps):
    target = answer_target({"valid": [True, False, True]})
    c = target.check(maps)
    np.testing.assert_array_equal(c.rectified[1], target.fallback_mapping())
    assert c.reassigned_ratio.tolist() == [0.0, 1.0, 0.0]


@pytest.mark.slow
def test_a_chip_that_refuses_check_is_asked_once_and_logged(tmp_path, maps, caplog):
    log = tmp_path / "requests.log"
    env = {"CHIP": CHIP, "LOG": str(log)}
    wrapper = script(tmp_path, "wrapper.py", WRAPPER)
    target = ExternalModel([PY, wrapper, *CHIP_ARGS, "--no-check"], env=env).bind(tiny_workload())
    with caplog.at_level(logging.WARNING, logger="hwmodels.external"):
        for _ in range(3):
            with pytest.raises(CheckRefused, match="refused the check request"):
                target.check(maps)
    asked = [json.loads(line)[0] for line in log.read_text().splitlines()]
    assert asked == ["check"]  # never retried, never asked again
    assert not target.checks
    assert sum("refused the check request" in r.message for r in caplog.records) == 1
    assert "unsupported request 'check'" in target.check_refused  # the chip's own words


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"valid": [True, True]}, r"'valid' must be a list of 3"),
        ({"valid": [True, False, "no"]}, r"JSON booleans; map 2 has 'no'"),
        (
            {"valid": [True] * 3, "rectified": [[[0, 0]] * 4] * 3},
            r"map 1 is valid but its rectified map differs",
        ),
    ],
)
@pytest.mark.slow
def test_a_malformed_check_answer_is_named_as_for_evaluate(maps, answer, problem):
    with pytest.raises(ExternalEvaluatorError, match=rf"failed on check chunk 0 .*{problem}"):
        answer_target(answer).check(maps)
