"""``runtime=ray``: maps are measured by a pool of Ray actors, each with its own target.

Every actor builds its own hardware target from a :class:`~egrl.runtime.base.TargetSpec`
(the run's hardware model and workload) when it starts, so a chip, a compiler licence or
a command is owned by one actor. Actors are placed by Ray with the configured resources
(``runtime.resources: {chip_a: 1}`` sends them to the nodes that declare ``chip_a``).

A batch is cut into tasks (``runtime.chunk_size`` maps, or the batch evenly over the
workers); each idle actor takes the next task, one at a time, so tasks finish in any
order. A batch to check (the compiler alone, :meth:`~egrl.runtime.base.Runtime.check`) is
cut and spread the same way; each actor counts the maps it measured and checked
(:meth:`RayRuntime.worker_counts`, logged when the pool closes). Faults (:mod:`egrl.runtime.jobs`): an actor that dies is replaced by a new one
and its task re-sent; a task past ``runtime.timeout_s`` has its actor killed and
replaced and counts as a failed attempt; a task whose hardware model raised an
evaluation error is retried; a map that keeps failing is answered as failed.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from egrl.runtime.base import CALLED_ON, Runtime, RuntimeConfig, TargetSpec
from egrl.runtime.jobs import MEASURE, Job, Task, TaskResult, run_task

log = logging.getLogger(__name__)

#: times in a row a replacement actor may fail to start before the pool gives up
MAX_START_FAILURES = 3


class Worker:
    """The Ray actor: one hardware target, measuring or checking one task at a time."""

    def __init__(self, spec: TargetSpec) -> None:
        if spec.cwd and os.path.isdir(spec.cwd):
            os.chdir(spec.cwd)
        self.target = spec.bind()
        #: maps this actor answered, by call (``measure``, ``check``)
        self.calls: Counter[str] = Counter()

    def pid(self) -> int:
        """The actor's process id (answered once it is up)."""
        return os.getpid()

    def run(self, call: str, maps: np.ndarray, probs: np.ndarray | None) -> TaskResult:
        """``call`` (:data:`~egrl.runtime.jobs.CALLS`) on this actor's target."""
        called = CALLED_ON[call]
        result = run_task(lambda m, p: called(self.target, m, p), maps, probs, call)
        self.calls[call] += len(maps)
        return result

    def measure(self, maps: np.ndarray, probs: np.ndarray | None) -> TaskResult:
        return self.run(MEASURE, maps, probs)

    def counts(self) -> dict[str, int]:
        """Maps this actor answered, by call."""
        return dict(self.calls)


@dataclass
class _Slot:
    """One actor of the pool and what it is doing."""

    index: int
    actor: Any
    ready: Any | None = None  # ObjectRef of pid() while the actor starts
    pid: int | None = None
    task: Task | None = None
    ref: Any | None = None  # ObjectRef of the running task
    started: float = 0.0
    start_failures: int = 0


def ray_available() -> str | None:
    """None if Ray can be imported, else why not (for skips and errors)."""
    try:
        import ray  # optional dependency  # noqa: F401
    except ImportError as exc:
        return f"Ray is not installed ({exc}); pip install -e '.[ray]'"
    return None


class RayRuntime(Runtime):
    """A pool of ``config.workers`` Ray actors built from ``spec`` (see the module docstring).

    Connects to ``config.address`` (or starts a local Ray) unless Ray is initialised
    already; :meth:`close` kills the actors and shuts down a Ray it started itself.
    ``on_measured(n)`` is called with the maps each finished task measured (the driver's
    :attr:`egrl.env.Env.num_evaluations` counts them as the local runtime's do).

    Raises:
        RuntimeError: Ray is missing, or the actors did not start within
            ``config.start_timeout_s`` (e.g. no node has the requested resources).
    """

    in_process = False

    def __init__(
        self,
        spec: TargetSpec,
        config: RuntimeConfig,
        on_measured: Callable[[int], None] | None = None,
    ) -> None:
        problem = ray_available()
        if problem:
            raise RuntimeError(problem)
        import ray  # optional dependency

        super().__init__(config)
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=config.address, include_dashboard=False, log_to_driver=True)
        options: dict[str, Any] = {"max_restarts": 0, "max_concurrency": 1}
        if config.resources:
            options["resources"] = dict(config.resources)
        if config.cpus_per_worker is not None:
            options["num_cpus"] = config.cpus_per_worker
        self._actor_class = ray.remote(Worker).options(**options)
        self._spec = spec
        self._on_measured = on_measured
        self._queue: deque[Task] = deque()
        self._slots = [_Slot(i, None) for i in range(config.workers)]
        try:
            for slot in self._slots:
                self._launch(slot)
            self._await_start()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ actors
    def _launch(self, slot: _Slot) -> None:
        slot.actor = self._actor_class.remote(self._spec)
        slot.ready, slot.pid, slot.task, slot.ref = slot.actor.pid.remote(), None, None, None

    def _await_start(self) -> None:
        refs = [s.ready for s in self._slots]
        done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=self.config.start_timeout_s)
        if len(done) < len(refs):
            raise RuntimeError(
                f"runtime=ray: {len(refs) - len(done)} of {len(refs)} worker(s) did not start "
                f"within {self.config.start_timeout_s:g} s (runtime.start_timeout_s); each "
                f"asks for resources {self.config.resources or '{}'} and "
                f"cpus {self.config.cpus_per_worker}, the cluster has free "
                f"{self._ray.available_resources()}"
            )
        for slot in self._slots:
            self._started(slot)

    def _started(self, slot: _Slot) -> None:
        """The actor of ``slot`` answered (or failed) its start-up call."""
        ref, slot.ready = slot.ready, None
        try:
            slot.pid = self._ray.get(ref)
            slot.start_failures = 0
        except self._ray.exceptions.RayError as exc:
            slot.start_failures += 1
            if slot.start_failures >= MAX_START_FAILURES:
                raise RuntimeError(
                    f"runtime=ray: worker {slot.index} failed to start "
                    f"{slot.start_failures} times; last error: {exc}"
                ) from exc
            log.warning("worker %d failed to start (%s); starting it again", slot.index, exc)
            self._launch(slot)

    def _replace(self, slot: _Slot, why: str) -> None:
        log.warning("worker %d (pid %s) %s; starting a new one", slot.index, slot.pid, why)
        self._ray.kill(slot.actor, no_restart=True)
        self._launch(slot)

    @property
    def pids(self) -> list[int | None]:
        """Process id of each actor (``None`` while one starts)."""
        return [s.pid for s in self._slots]

    # ------------------------------------------------------------------ tasks
    def _start(self, job: Job) -> None:
        self._queue.extend(job.tasks(self.config.chunk(len(job.maps))))
        self._dispatch()

    def _dispatch(self) -> None:
        for slot in self._slots:
            while self._queue and self._queue[0].job not in self._jobs:
                self._queue.popleft()  # a task of a job that is over (a refused check)
            if not self._queue:
                return
            if slot.ready is None and slot.task is None:
                task = self._queue.popleft()
                job = self._jobs[task.job]
                slot.task, slot.started = task, time.monotonic()
                slot.ref = slot.actor.run.remote(job.call, *job.inputs(task))

    def _advance(self, timeout_s: float | None) -> None:
        self._dispatch()
        refs = {s.ready: s for s in self._slots if s.ready is not None}
        refs.update({s.ref: s for s in self._slots if s.ref is not None})
        if not refs:
            return
        wait_s = self._until_deadline(timeout_s)
        done, _ = self._ray.wait(list(refs), num_returns=1, timeout=wait_s)
        if done:  # take every other finished one too
            done, _ = self._ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in done:
            slot = refs[ref]
            if slot.ready is not None and ref == slot.ready:
                self._started(slot)
            else:
                self._finished(slot)
        self._expire()
        self._dispatch()

    def _until_deadline(self, timeout_s: float | None) -> float | None:
        """Seconds to wait: ``timeout_s``, or less when a running task's time runs out."""
        limit = self.config.timeout_s
        running = [s.started for s in self._slots if s.ref is not None]
        if limit is None or not running:
            return timeout_s
        left = max(0.0, min(running) + limit - time.monotonic())
        return left if timeout_s is None else min(timeout_s, left)

    def _finished(self, slot: _Slot) -> None:
        """The task of ``slot`` ended: record it, or re-send it if its actor died."""
        task, ref = slot.task, slot.ref
        slot.task = slot.ref = None
        job = self._jobs.get(task.job)
        try:
            result = self._ray.get(ref)
        except self._ray.exceptions.RayActorError as exc:
            self._replace(slot, "died")
            if job is not None:
                reason = f"worker {slot.index} died: {type(exc).__name__}"
                self._queue.extend(job.fail(task, reason, died=True))
            return
        except self._ray.exceptions.RayTaskError as exc:
            raise exc.as_instanceof_cause() from None
        if job is None:  # the job is over (a refused check): nothing to record
            return
        measured = job.call == MEASURE and result.measurement is not None
        if self._on_measured is not None and measured:
            self._on_measured(len(result.measurement.latency_s))
        self._queue.extend(job.settle(task, result))

    def _expire(self) -> None:
        """Kill and replace the actors whose task ran past ``timeout_s``."""
        limit = self.config.timeout_s
        if limit is None:
            return
        now = time.monotonic()
        for slot in self._slots:
            if slot.ref is not None and now - slot.started >= limit:
                task = slot.task
                slot.task = slot.ref = None
                self._replace(slot, f"ran past runtime.timeout_s={limit:g} s")
                reason = f"timed out after {limit:g} s on worker {slot.index} (actor replaced)"
                if task.job in self._jobs:
                    self._queue.extend(self._jobs[task.job].fail(task, reason))

    def worker_counts(self, timeout_s: float = 10.0) -> list[dict[str, int]]:
        """Maps each actor answered, by call (``measure``, ``check``), as the actors count
        them (an actor replaced after a death or a timeout starts again from 0); waits at
        most ``timeout_s`` for an actor busy with a task."""
        slots = [s for s in self._slots if s.actor is not None and s.pid is not None]
        counts = self._ray.get([s.actor.counts.remote() for s in slots], timeout=timeout_s)
        return [{"worker": s.index, "pid": s.pid, **c} for s, c in zip(slots, counts)]

    def close(self) -> None:
        """Log what each actor answered, kill the actors; shut down Ray if this runtime
        started it."""
        try:
            if any(s.actor is not None for s in self._slots):
                log.info("runtime=ray: maps answered by each worker: %s", self.worker_counts())
        except Exception as exc:  # a worker that is gone cannot say
            log.debug("runtime=ray: worker counts unavailable: %s", exc)
        super().close()
        for slot in self._slots:
            if slot.actor is not None:
                try:
                    self._ray.kill(slot.actor, no_restart=True)
                except Exception as exc:  # already gone
                    log.debug("killing worker %d: %s", slot.index, exc)
                slot.actor = None
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns_ray = False
