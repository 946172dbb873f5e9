"""``runtime=ray`` on a local Ray: same answers as the local runtime, and the faults
(an actor killed mid-generation, a hanging command, a task past its timeout, a command
that fails every third call, a killed driver that resumes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from egrl import make_env
from egrl.agents import make_agent
from egrl.agents.egrl.config import EGRLConfig, LearnerConfig, PopulationConfig
from egrl.config import AgentConfig, TrainConfig
from egrl.runtime import RuntimeConfig, TargetSpec, make_runtime
from tests.interrupt import kill_after_checkpoints
from tests.nnpi_workloads import residual
from tests.support.envs import small_env
from tests.support.metrics import deterministic_rows
from tests.support.paths import ROOT
from tests.support.units import KIB

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")

#: every test runs on the module's local Ray
pytestmark = pytest.mark.slow

CHIP = str(ROOT / "benchmarks" / "sleep_chip.py")


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the module; the tests are skipped if it cannot start."""
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # no shared memory, no ports, ...
        pytest.skip(f"Ray cannot start here: {type(exc).__name__}: {exc}")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def chip_params(*args: str, timeout_s: float = 60.0) -> dict:
    return {"command": [sys.executable, CHIP, *args], "timeout_s": timeout_s, "retries": 0}


def external_env(params: dict):
    return make_env("external", residual(3, act_bytes=KIB, weight_bytes=KIB, macs=1000), **params)


def random_cfg(budget: int, batch: int, seed: int = 0) -> TrainConfig:
    return TrainConfig(
        seed=seed,
        budget=budget,
        progress=False,
        agent=AgentConfig("random", options={"batch": batch}),
    )


def run_agent(env, cfg: TrainConfig, runtime_cfg: RuntimeConfig, hwmodel: str, params: dict):
    """Run ``cfg``'s agent on ``env`` through a runtime built from ``runtime_cfg``."""
    agent = make_agent(env, cfg)
    spec = TargetSpec(hwmodel, params, env.workload)
    with make_runtime(runtime_cfg, env, spec) as runtime:
        agent.ledger.use_runtime(runtime)
        agent.run()
    return agent


def assert_same_run(a, b) -> None:
    assert deterministic_rows(a) == deterministic_rows(b)
    assert (a.ledger.best.speedup, a.ledger.best.iteration) == (
        b.ledger.best.speedup,
        b.ledger.best.iteration,
    )
    np.testing.assert_array_equal(a.ledger.best.mapping, b.ledger.best.mapping)


def egrl_runs(overlap, budget: int = 30) -> list:
    """The same EGRL run (seed 5) on the local runtime and on one Ray worker."""
    params = {"sram_mib": 1.0, "llc_mib": 2.0}  # small_env's
    cfg = TrainConfig(
        seed=5,
        budget=budget,
        progress=False,
        agent=EGRLConfig(
            "egrl",
            options={"overlap": overlap},
            population=PopulationConfig(size=6),
            learner=LearnerConfig(gradient_ratio=1.0),  # Table 2's rate: updates in 30 paid maps
        ),
    )
    return [
        run_agent(small_env(), cfg, RuntimeConfig(name=n), "nnpi", params) for n in ("local", "ray")
    ]


def test_one_ray_worker_gives_the_local_run(ray_session, one_thread):
    runs = egrl_runs(overlap=False)  # synchronous: the learner waits for every answer
    assert_same_run(*runs)
    assert runs[1].ledger.iterations == 30 and runs[1].ledger.failed_maps == 0
    assert runs[0].env.num_evaluations == runs[1].env.num_evaluations == 30


def test_overlapped_egrl_on_ray_keeps_the_bookkeeping_exact(ray_session, one_thread):
    local, remote = egrl_runs(overlap="auto", budget=60)  # auto: overlaps on Ray only
    assert not local.overlap and remote.overlap
    assert remote.ledger.iterations == 60 == remote.env.num_evaluations
    assert remote.ledger.dispatcher.open == 0 and remote.ledger.failed_maps == 0
    # each generation past the burn-in made gradient_ratio updates per paid measurement
    steps = [r["gradient_steps"] for r in remote.rows]
    paid = np.diff([0] + [r["iterations"] for r in remote.rows])
    ratio = remote.cfg.agent.learner.gradient_ratio
    assert steps == [0 if s == 0 else round(p * ratio) for s, p in zip(steps, paid)]
    assert sum(steps) > 0
    valid, latency = (
        remote.env.check_maps(remote.ledger.best.mapping[None]),
        remote.ledger.best.latency_s,
    )
    assert remote.env.evaluate(valid).latency_s[0] == pytest.approx(latency)


def test_killed_actor_mid_generation_has_its_maps_resent(ray_session):
    params = chip_params("--seconds", "0.4")
    env = external_env(params)
    cfg = random_cfg(budget=12, batch=6)
    local = run_agent(env, cfg, RuntimeConfig(), "external", params)
    agent = make_agent(env, cfg)
    spec = TargetSpec("external", params, env.workload)
    with make_runtime(RuntimeConfig(name="ray", workers=2, chunk_size=1), env, spec) as runtime:
        before = list(runtime.pids)
        killer = threading.Timer(0.6, os.kill, (before[0], signal.SIGKILL))
        killer.start()
        agent.ledger.use_runtime(runtime)
        agent.run()
        killer.join()
        assert runtime.pids[0] != before[0]  # replaced
    assert agent.ledger.failed_maps == 0
    assert_same_run(agent, local)


def test_hanging_command_times_out_and_the_run_goes_on(ray_session):
    params = chip_params("--hang-seconds", "30", timeout_s=0.5)
    env = make_env(
        "external", residual(3, act_bytes=KIB, weight_bytes=KIB, macs=1000), **chip_params()
    )
    cfg = random_cfg(budget=6, batch=3)
    agent = run_agent(env, cfg, RuntimeConfig(name="ray", workers=2, retries=1), "external", params)
    # the cache knows the compiler's map (measured at binding), and no failed map
    assert (
        agent.ledger.iterations == 6
        and agent.ledger.failed_maps == 6
        and len(agent.ledger.cache) == 1
    )
    assert agent.ledger.best.mapping is None and np.all(agent.ledger.archive.rewards[:6] == -1.0)


def test_task_past_runtime_timeout_replaces_its_actor(ray_session):
    params = chip_params("--seconds", "5")
    env = external_env(chip_params("--seconds", "0"))
    spec = TargetSpec("external", params, env.workload)
    config = RuntimeConfig(name="ray", workers=1, retries=0, timeout_s=1.0)
    with make_runtime(config, env, spec) as runtime:
        pid = runtime.pids[0]
        out = runtime.measure(env.random_mappings(1, np.random.default_rng(0)))
        assert out.failed.tolist() == [True] and "timed out after 1 s" in out.reasons[0]
        assert runtime.poll() == [] and runtime.pids[0] != pid


def test_command_failing_every_third_call_is_retried_to_the_local_answer(ray_session, tmp_path):
    params = chip_params("--seconds", "0.05", "--fail-every", "3", "--counter", str(tmp_path / "n"))
    env = external_env(chip_params("--seconds", "0"))
    cfg = random_cfg(budget=16, batch=8, seed=2)
    local = run_agent(env, cfg, RuntimeConfig(), "external", chip_params("--seconds", "0"))
    runtime_cfg = RuntimeConfig(name="ray", workers=2, chunk_size=1, retries=4)
    agent = run_agent(env, cfg, runtime_cfg, "external", params)
    calls = int((tmp_path / "n").read_text())
    assert calls >= 16 + 5, (calls, agent.ledger.iterations)  # a map per call, every third failed
    assert agent.ledger.failed_maps == 0 and agent.ledger.iterations == 16
    assert_same_run(agent, local)


TRAIN = "import sys; from egrl.cli.train import main; sys.argv[0] = 'egrl-train'; main()"


def test_egrl_train_on_ray_resumes_after_the_driver_is_killed(ray_session, tmp_path):
    run_dir = tmp_path / "run"
    args = [
        "runtime=ray",
        f"runtime.address={ray_session}",
        "runtime.workers=2",
        "hwmodel=external",
        f"hwmodel.params.command='{sys.executable} {CHIP} --seconds 0.05'",
        "workload=resnet18",
        "agent=random",
        "agent.batch=4",
        "budget=40",
        "checkpoint_every=1",
        "progress=false",
        f"hydra.run.dir={run_dir}",
    ]
    kill_after_checkpoints(TRAIN, args, run_dir, checkpoints=2, timeout_s=240)
    assert not (run_dir / "best_mapping.json").exists()  # killed before the end
    out = subprocess.run(
        [sys.executable, "-c", TRAIN, f"resume={run_dir}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed" in out.stdout + out.stderr
    best = json.loads((run_dir / "best_mapping.json").read_text())
    assert best["iterations"] == 40 and best["failed_maps"] == 0
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + 10  # header and one row per generation, none repeated
