"""Screening beyond the local runtime's defaults: on Ray (the budget, the model's metrics,
what the screen sees, the local run's result where Ray promises it, the screen's order
when the learner overlaps the measurements), with maps the runtime could not measure,
with ``agent.start`` and with ``init_from``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from egrl import make_env
from egrl.agents import make_agent
from egrl.runtime import LocalRuntime, RuntimeConfig, TargetSpec
from egrl.screening.screen import spearman
from tests.support.metrics import deterministic_rows
from tests.support.screening import assert_resumes_identically, run_config
from tests.support.threads import one_torch_thread

pytestmark = pytest.mark.usefixtures("one_thread")

WORKLOAD = "resnet18"
EA = {"name": "ea", "use_learner": False, "start_steps": 50}
EGRL = {"name": "egrl", "start_steps": 50}
SA = {"name": "sa", "chains": 2, "steps": 4}
GA = {"name": "ga", "population": 8}
RANDOM = {"name": "random", "batch": 10}
MBO = {"name": "mbo", "depth": 200, "batch": 10, "steps": 4}


def config(agent: dict, budget: int, screen: str = "forest", **keys):
    """A run on resnet18 with a small screen (pool 3, warmup 10) and tiny policies."""
    section = {"name": screen, "pool": 3, "explore": 0.25, "warmup": 10}
    if screen == "forest":
        section["trees"] = 16
    return run_config(agent, budget, section, **keys)


def run(cfg, runtime=None, run_dir: Path | None = None, env=None):
    """``cfg``'s agent on resnet18, measured by ``runtime`` (the local one by default)."""
    env = env if env is not None else make_env("nnpi", WORKLOAD)
    agent = make_agent(env, cfg, run_dir)
    if runtime is not None:
        agent.ledger.use_runtime(runtime)
    agent.run()
    return agent


def assert_screen_saw_the_paid_maps(agent) -> None:
    """The budget is spent exactly, and the screen holds every paid map once (the target
    is deterministic: a paid map is new) with the reward the chip gives it, and nothing
    else but the compiler's map when the run proposed it (free: measured at binding); a
    model ranked some generation."""
    budget = agent.cfg.budget
    assert agent.ledger.iterations == budget == agent.env.num_evaluations
    assert agent.ledger.dispatcher.open == 0 and agent.ledger.failed_maps == 0
    maps, rewards = agent.ledger.screen.training_data()
    native = int((maps == agent.env.baseline_mapping).all(axis=(1, 2)).any())
    assert len(rewards) == len(agent.ledger.screen) == budget + native
    assert len(np.unique(maps.reshape(len(rewards), -1), axis=0)) == len(rewards)
    assert agent.ledger.screen.known(maps).all()  # every one was paid: the cache remembers it
    np.testing.assert_array_equal(rewards, agent.env.evaluate(maps).reward)
    assert np.isfinite([r["screen_spearman"] for r in agent.rows]).any()


# ---------------------------------------------------------------------- Ray
@pytest.fixture(scope="module")
def ray_pool():
    """One local Ray and one pool of two NNP-I resnet18 workers for the module, one map
    per task (so answers come back out of order); ``pool.env`` is the environment
    whose ``num_evaluations`` counts what the workers measure."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]')")
    from egrl.runtime.ray_pool import RayRuntime

    started = not ray.is_initialized()
    if started:
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        except Exception as exc:  # no shared memory, no ports, ...
            pytest.skip(f"Ray cannot start here: {type(exc).__name__}: {exc}")
    env = make_env("nnpi", WORKLOAD)
    pool = SimpleNamespace(env=env)
    runtime = RayRuntime(
        TargetSpec("nnpi", {}, env.workload),
        RuntimeConfig(name="ray", workers=2, chunk_size=1),
        on_measured=lambda n: pool.env.count_measured(n),
    )
    pool.runtime = runtime
    yield pool
    runtime.close()
    if started:
        ray.shutdown()


def run_on_ray(pool, cfg):
    pool.env = make_env("nnpi", WORKLOAD)
    return run(cfg, pool.runtime, env=pool.env)


@pytest.mark.parametrize(
    "agent",
    [EA, {**EGRL, "overlap": False}, SA, MBO],
    ids=["ea", "egrl-synchronous", "sa", "mbo"],
)
@pytest.mark.slow
def test_screening_on_ray_gives_the_local_run(ray_pool, agent):
    remote = run_on_ray(ray_pool, config(agent, 40))
    assert_screen_saw_the_paid_maps(remote)
    local = run(config(agent, 40))
    assert deterministic_rows(remote) == deterministic_rows(local)
    for a, b in zip(remote.ledger.screen.training_data(), local.ledger.screen.training_data()):
        np.testing.assert_array_equal(a, b)  # the same maps, observed in the same order


@pytest.mark.parametrize("screen", ["forest", "critic"])
@pytest.mark.slow
def test_with_overlap_the_screen_is_fitted_and_rated_on_whole_generations(ray_pool, screen):
    """The learner updates while maps are in flight; the model is still fitted once per
    generation on every paid map before it, stays as fitted while the learner updates
    (the critic's frozen copy), and is rated on exactly the generation's paid maps."""
    env = ray_pool.env = make_env("nnpi", WORKLOAD)
    agent = make_agent(env, config(EGRL, 50, screen=screen))
    agent.ledger.use_runtime(ray_pool.runtime)
    assert agent.overlap  # auto: remote workers
    scr, probe = agent.ledger.screen, env.random_mappings(8, np.random.default_rng(1))
    refit, take_metrics = scr.refit, scr.take_metrics
    seen: dict = {}
    rated = []

    def refit_at_start():
        assert agent.ledger.dispatcher.open == 0 and len(scr) == agent.ledger.iterations
        out = refit()
        seen.update(count=len(scr), probe=scr.predict(probe))
        return out

    def metrics_at_end():
        assert agent.ledger.dispatcher.open == 0 and len(scr) == agent.ledger.iterations
        np.testing.assert_array_equal(scr.predict(probe), seen["probe"])
        maps, rewards = scr.training_data()
        new = slice(seen["count"], None)
        expected = spearman(scr.predict(maps[new]), rewards[new]) if scr.active else np.nan
        out = take_metrics()
        np.testing.assert_equal(out["screen_spearman"], expected)
        rated.append(np.isfinite(expected))
        return out

    scr.refit, scr.take_metrics = refit_at_start, metrics_at_end
    agent.run()
    assert_screen_saw_the_paid_maps(agent)
    assert sum(rated) >= 2 and sum(r["gradient_steps"] for r in agent.rows) > 0


# ------------------------------------------------------------ failed maps
def test_a_map_the_runtime_could_not_measure_is_paid_but_not_shown_to_the_screen():
    """A failed map is answered with the penalty of a map the chip did not run: the
    budget pays it, the screen does not learn it as a measurement."""
    env = make_env("nnpi", WORKLOAD)

    def flaky(maps, probs=None):
        if (np.asarray(maps)[:, 0, 0] == 0).any():  # the chip never answers these
            raise TimeoutError("the chip did not answer")
        return env.measure(maps, probs)

    agent = make_agent(env, config(RANDOM, 40))
    agent.ledger.use_runtime(LocalRuntime(flaky, RuntimeConfig(retries=1)))
    agent.run()
    assert agent.ledger.iterations == 40 and 0 < agent.ledger.failed_maps < 40
    maps, rewards = agent.ledger.screen.training_data()
    assert len(agent.ledger.screen) == 40 - agent.ledger.failed_maps
    assert (maps[:, 0, 0] != 0).all()
    np.testing.assert_array_equal(rewards, env.evaluate(maps).reward)


# ------------------------------------------------------------- agent.start
@pytest.mark.parametrize("start", ["native", "random"])
@pytest.mark.parametrize("agent", [EA, SA, GA], ids=["ea", "sa", "ga"])
def test_screening_runs_from_every_start(agent, start):
    run_ = run(config({**agent, "start": start}, 40))
    assert_screen_saw_the_paid_maps(run_)
    if start == "native":  # the start map is the compiler's (free), and the screen has it
        maps, _ = run_.ledger.screen.training_data()
        assert (maps == run_.env.baseline_mapping).all(axis=(1, 2)).any()


def test_random_search_has_no_start_to_set():
    with pytest.raises(KeyError, match=r"agent 'random' has no option\(s\) \['start'\]"):
        make_agent(make_env("nnpi", WORKLOAD), config({**RANDOM, "start": "native"}, 10))


# ---------------------------------------------------------------- init_from
@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A short unscreened EGRL run with the tiny policies, with policy snapshots."""
    run_dir = tmp_path_factory.mktemp("trained")
    with one_torch_thread():
        run(config(EGRL, 30, screen="none", snapshot_every=1), run_dir=run_dir)
    return run_dir


@pytest.mark.parametrize("screen", ["forest", "critic"])
def test_screening_runs_from_a_trained_policy_and_resume_identically(trained, screen, tmp_path):
    cfg = config(EGRL, 40, screen=screen, init_from=str(trained))
    reference = tmp_path / "reference"
    agent = run(cfg, run_dir=reference)
    assert_screen_saw_the_paid_maps(agent)
    assert_resumes_identically(reference, tmp_path / "resumed", cfg, 10)


def test_a_trained_policy_and_a_start_map_together(trained):
    run_ = run(config({**EGRL, "start": "native"}, 30, init_from=str(trained)))
    assert_screen_saw_the_paid_maps(run_)
