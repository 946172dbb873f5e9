"""Runtimes without Ray: the job's fault policy, the dispatcher's bookkeeping with answers
in any order, the agent's submit/collect, and the runtime configuration."""

from __future__ import annotations

import numpy as np
import pytest
from hydra import compose, initialize_config_module

from egrl.agents import make_agent
from egrl.config import AgentConfig, TrainConfig, config_problems
from egrl.measure_cache import MeasureCache
from egrl.runtime import LocalRuntime, RuntimeConfig, make_runtime
from egrl.runtime.base import Runtime
from egrl.runtime.dispatch import Dispatcher
from egrl.runtime.jobs import Job, TaskResult, run_task
from egrl.validation import ConfigError
from hwmodels.base import Measurement
from hwmodels.external import ExternalEvaluatorError
from tests.support.envs import small_env


def fake_measure(maps: np.ndarray, probs=None) -> Measurement:
    """Valid maps whose latency is 1 + their first choice."""
    b = len(maps)
    return Measurement(maps.copy(), np.ones(b, bool), np.zeros(b), 1.0 + maps[:, 0, 0])


def maps_of(*firsts: int) -> np.ndarray:
    """Maps ``[B, 2, 1]`` whose first choices are ``firsts``."""
    return np.array([[[f], [0]] for f in firsts], dtype=np.int64)


class FailingMeasure:
    """Raises ExternalEvaluatorError on the calls listed (1-based), measuring ``keep`` rows first."""

    def __init__(self, fail_calls: set[int], keep: int = 0) -> None:
        self.fail_calls, self.keep, self.calls = fail_calls, keep, []

    def __call__(self, maps, probs=None) -> Measurement:
        self.calls.append(maps[:, 0, 0].tolist())
        if len(self.calls) in self.fail_calls:
            err = ExternalEvaluatorError(f"call {len(self.calls)} failed", ["chip"])
            err.partial = fake_measure(maps[: self.keep])
            raise err
        return fake_measure(maps)


# ------------------------------------------------------------------ jobs
def test_failed_task_keeps_its_partial_rows_and_retries_the_rest_one_by_one():
    measure = FailingMeasure({1}, keep=1)
    runtime = LocalRuntime(measure, RuntimeConfig(retries=1))
    out = runtime.measure(maps_of(1, 2, 3))
    assert measure.calls == [[1, 2, 3], [2], [3]]
    assert not out.failed.any()
    np.testing.assert_array_equal(out.measurement.latency_s, [2.0, 3.0, 4.0])


def test_map_failing_past_its_retries_is_answered_invalid_with_the_reason():
    measure = FailingMeasure({1, 2, 3})
    runtime = LocalRuntime(measure, RuntimeConfig(retries=1))
    out = runtime.measure(maps_of(1, 2))
    # call 1: both maps; calls 2, 3: each map alone (its one retry), both fail
    assert measure.calls == [[1, 2], [1], [2]]
    np.testing.assert_array_equal(out.failed, [True, True])
    assert "call 3 failed" in out.reasons[1] and not out.measurement.valid.any()
    np.testing.assert_array_equal(out.measurement.reassigned_ratio, [1.0, 1.0])
    assert np.isnan(out.measurement.latency_s).all()


def test_worker_death_resends_up_to_max_resends():
    job = Job(0, maps_of(1, 2), None, retries=0, max_resends=1)
    (task,) = job.tasks(2)
    again = job.fail(task, "worker 0 died", died=True)
    assert [t.rows.tolist() for t in again] == [[0], [1]] and again[0].resends == 1
    assert job.fail(again[0], "worker 1 died", died=True) == []
    job.settle(again[1], TaskResult(fake_measure(maps_of(2))))
    out = job.outcome()
    np.testing.assert_array_equal(out.failed, [True, False])
    assert "died" in out.reasons[0]


def test_other_errors_are_bugs_and_propagate():
    def broken(maps, probs=None):
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        run_task(broken, maps_of(1), None)


def test_local_runtime_poll_and_wait_any_return_each_outcome_once():
    runtime = LocalRuntime(fake_measure)
    a, b = runtime.submit(maps_of(1)), runtime.submit(maps_of(2))
    assert runtime.pending == 2
    assert runtime.wait(b).job == b
    assert [o.job for o in runtime.poll()] == [a]
    assert runtime.poll() == [] and runtime.wait_any() == [] and runtime.pending == 0


# ------------------------------------------------------------- dispatcher
class ManualRuntime(Runtime):
    """Answers jobs only when told to, in any order (a stand-in for a pool of workers)."""

    def __init__(self) -> None:
        super().__init__(RuntimeConfig())
        self.sent: list[list[int]] = []

    def _start(self, job: Job) -> None:
        self.sent.append(job.maps[:, 0, 0].tolist())

    def _advance(self, timeout_s) -> None:
        pass

    def finish(self, job_id: int, fail_rows: tuple[int, ...] = ()) -> None:
        job = self._jobs[job_id]
        (task,) = job.tasks(len(job.maps))
        job.finish(task.rows, fake_measure(job.maps))
        for row in fail_rows:  # turn measured rows into failed ones
            job.failed[row], job.valid[row] = True, False
            job.latency_s[row] = np.nan
        self._take_finished()


def dispatcher(capacity: int = 100) -> tuple[Dispatcher, ManualRuntime]:
    runtime = ManualRuntime()
    return Dispatcher(MeasureCache(capacity, max_choices=8), runtime), runtime


def test_map_in_flight_is_not_sent_twice_and_answers_arrive_in_any_order():
    disp, runtime = dispatcher()
    first = disp.submit(maps_of(1, 2, 1), None, budget=10, source="a")
    second = disp.submit(maps_of(2, 3), None, budget=10, source="b")
    assert runtime.sent == [[1, 2], [3]]  # the repeated 1 and the in-flight 2 are not sent
    assert disp.in_flight == 3
    runtime.finish(second.job)
    assert disp.collect(block=False) == []  # second waits on map 2, in flight from first
    runtime.finish(first.job)
    done = disp.collect(block=False)
    assert [d.ticket.id for d in done] == [first.id, second.id]
    np.testing.assert_array_equal(done[0].paid, [True, True, False])
    np.testing.assert_array_equal(done[1].paid, [False, True])
    np.testing.assert_array_equal(done[1].measurement.latency_s, [3.0, 4.0])
    assert disp.in_flight == 0 and len(disp.cache) == 3
    third = disp.submit(maps_of(3, 1), None, budget=10, source="c")
    assert third.job is None and len(disp.collect()) == 1  # all from the cache


def test_budget_counts_maps_in_flight_and_cuts_the_batch():
    disp, runtime = dispatcher()
    disp.submit(maps_of(1, 2), None, budget=3, source="a")
    ticket = disp.submit(maps_of(1, 3, 4, 5), None, budget=3 - disp.in_flight, source="b")
    assert len(ticket) == 2 and runtime.sent == [[1, 2], [3]]  # 1 in flight, 3 paid, cut at 4


def test_failed_maps_are_paid_not_cached_and_shared_with_waiters():
    disp, runtime = dispatcher()
    first = disp.submit(maps_of(1, 2), None, budget=10, source="a")
    waiter = disp.submit(maps_of(2), None, budget=10, source="b")
    runtime.finish(first.job, fail_rows=(1,))
    done = disp.collect()
    assert [d.failed.tolist() for d in done] == [[False, True], [True]]
    np.testing.assert_array_equal(done[0].paid, [True, True])
    assert not done[1].paid.any() and len(disp.cache) == 1  # only map 1 is remembered
    again = disp.submit(maps_of(2), None, budget=10, source="c")
    assert again.job is not None and runtime.sent[-1] == [2]  # a failed map is sent again
    del waiter


def test_disabled_cache_sends_every_map():
    disp, runtime = dispatcher(capacity=0)
    disp.submit(maps_of(1, 1, 2), None, budget=2, source="a")
    assert runtime.sent == [[1, 1]]


# ------------------------------------------------------------------ agents
def random_agent(budget: int = 40, batch: int = 8):
    cfg = TrainConfig(
        seed=3, budget=budget, progress=False, agent=AgentConfig("random", options={"batch": batch})
    )
    return make_agent(small_env(), cfg)


def test_agent_submit_and_collect_keep_the_books_of_evaluate():
    sync, split = random_agent(), random_agent()
    rng = np.random.default_rng(0)
    batches = [sync.env.random_mappings(6, rng) for _ in range(3)]
    batches[2][:3] = batches[0][:3]  # repeats, answered by the cache
    expected = [sync.ledger.evaluate(b, "x") for b in batches]
    tickets = [split.ledger.submit(b, "x") for b in batches]
    got = dict((t.id, ev) for t, ev in split.ledger.collect(block=True))
    assert [t.id for t in tickets] == sorted(got)
    for ticket, ev in zip(tickets, expected):
        np.testing.assert_array_equal(got[ticket.id].reward, ev.reward)
    assert (
        (split.ledger.iterations, split.ledger.proposals)
        == (sync.ledger.iterations, sync.ledger.proposals)
        == (15, 18)
    )
    assert split.ledger.best.speedup == sync.ledger.best.speedup and len(
        split.ledger.archive
    ) == len(sync.ledger.archive)


def test_agent_run_with_failing_evaluator_goes_on_and_counts_failed_maps():
    agent = random_agent(budget=16)
    agent.ledger.use_runtime(
        LocalRuntime(FailingMeasure(set(range(1, 1000))), RuntimeConfig(retries=0))
    )
    best = agent.run()
    # the cache knows the compiler's map (measured at binding), and no failed map
    assert (
        agent.ledger.iterations == 16
        and agent.ledger.failed_maps == 16
        and len(agent.ledger.cache) == 1
    )
    assert best.mapping is None and best.speedup == 0.0
    assert len(agent.ledger.archive) == 16 and np.all(agent.ledger.archive.rewards[:16] == -1.0)


def test_changing_the_runtime_with_maps_in_flight_is_refused():
    agent = random_agent()
    agent.ledger.use_runtime(ManualRuntime())
    agent.ledger.submit(agent.env.random_mappings(2, np.random.default_rng(0)), "x")
    with pytest.raises(RuntimeError, match="in flight"):
        agent.ledger.use_runtime(LocalRuntime(agent.env.measure))


# ------------------------------------------------------------------ config
def test_runtime_config_is_checked():
    with pytest.raises(ValueError, match=r"unknown runtime key\(s\) \['worker'\]"):
        RuntimeConfig.from_mapping({"name": "ray", "worker": 2})
    with pytest.raises(ValueError, match="runtime.resources.chip_a"):
        RuntimeConfig.from_mapping({"resources": {"chip_a": -1}})
    with pytest.raises(ConfigError) as info:
        RuntimeConfig.from_mapping({"name": "gpu", "workers": 0, "timeout_s": 0})
    assert info.value.problems == [
        "runtime.name=gpu is invalid: expected one of local, ray",
        "runtime.workers=0 is invalid: expected an integer >= 1",
        "runtime.timeout_s=0 is invalid: expected a number > 0 or null",
    ]
    assert RuntimeConfig(workers=4).chunk(10) == 3 and RuntimeConfig(chunk_size=1).chunk(10) == 1
    assert isinstance(make_runtime(RuntimeConfig(), small_env()), LocalRuntime)


@pytest.mark.parametrize("name", ["local", "ray"])
def test_runtime_group_composes(name):
    with initialize_config_module(config_module="configs", version_base="1.3"):
        cfg = compose("train", overrides=[f"runtime={name}"])
    config = RuntimeConfig.from_mapping(dict(cfg.runtime))
    assert config.name == name and config_problems(dict(cfg)) == []


@pytest.mark.parametrize(
    "preset, plugin, target",
    [
        ("ray-cluster", "hydra_plugins.hydra_ray_launcher", "RayLauncher"),
        ("slurm", "hydra_plugins.hydra_submitit_launcher", "SlurmLauncher"),
        ("parallel", "hydra_plugins.hydra_joblib_launcher", "JoblibLauncher"),
    ],
)
def test_launcher_presets_compose(preset, plugin, target):
    pytest.importorskip(plugin, reason=f"{plugin} is not installed (an optional extra)")
    with initialize_config_module(config_module="configs", version_base="1.3"):
        cfg = compose("train", overrides=[f"hydra/launcher={preset}"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith(target)
    assert cfg.threads == 1
