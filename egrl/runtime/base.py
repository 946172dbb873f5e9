"""The runtime interface: submit batches of maps, collect their outcomes in any order.

A :class:`Runtime` is the one road to the chip: it measures maps, and asks the compiler
alone about them (:data:`CHECK`), on workers that each own a hardware target. Every call
is non-blocking except the waits:

>>> job = runtime.submit(maps)            # int64 [B, N, H] (+ probs [B, N, H, C] | None)
>>> runtime.poll()                        # outcomes finished so far, [] if none
>>> runtime.wait_any(timeout_s=1.0)       # block until at least one finishes
>>> runtime.wait(job)                     # block until this one finishes
>>> runtime.measure(maps)                 # submit + wait: an Outcome, rows in order
>>> runtime.check(maps)                   # the compiler alone, on the workers: a Check

:attr:`Runtime.answered` counts the maps the workers answered, by call.

Subclasses implement :meth:`Runtime._start` (hand a new :class:`~egrl.runtime.jobs.Job`
to the workers) and :meth:`Runtime._advance` (make progress for at most a given time).
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

import hwmodels
from egrl.runtime.jobs import CHECK, MEASURE, Job, Outcome
from egrl.validation import ConfigError, Rule, at_least, positive, show
from hwmodels.base import Check, CheckRefused, HardwareModel, Measurement, Target
from workloads.ir import Workload

#: runtime names (``runtime=local|ray``)
KINDS = ("local", "ray")

#: key -> allowed values of the ``runtime`` group (``resources`` is checked on its own)
RUNTIME_RULES: dict[str, Rule] = {
    "name": Rule(str, choices=KINDS),
    "workers": at_least(1),
    "address": Rule(str, pattern=r".+", describe="a Ray cluster address", optional=True),
    "cpus_per_worker": Rule(float, low=0, optional=True),
    "chunk_size": Rule(int, low=1, optional=True),
    "retries": at_least(0),
    "timeout_s": Rule(float, low=0, low_open=True, optional=True),
    "max_resends": at_least(0),
    "start_timeout_s": positive(),
}


@dataclass(frozen=True)
class RuntimeConfig:
    """Where and how maps are measured (``configs/runtime/*.yaml``, docs/ray.md).

    Attributes:
        name: ``local`` (in this process) or ``ray`` (a pool of Ray actors).
        workers: Ray actors, each with its own hardware target.
        address: Ray cluster address (``ray://host:10001``, ``host:6379`` or ``auto``);
            ``None`` starts a local Ray instance (or uses the one already started).
        resources: Ray custom resources every actor needs (``{chip_a: 1}``: actors go
            only to nodes that declare ``chip_a``).
        cpus_per_worker: CPUs an actor holds (``None``: Ray's default for actors).
        chunk_size: most maps per task; ``None`` cuts each batch evenly over the workers.
        retries: further attempts of a map whose evaluation failed or timed out.
        timeout_s: seconds a Ray task may run before its actor is killed and replaced
            and the task counts as timed out (``None``: no limit; the local runtime
            cannot interrupt a call and ignores it).
        max_resends: times a map is re-sent after the worker running it died.
        start_timeout_s: seconds to wait for the actors to start.
    """

    name: str = "local"
    workers: int = 1
    address: str | None = None
    resources: dict[str, float] = field(default_factory=dict)
    cpus_per_worker: float | None = None
    chunk_size: int | None = None
    retries: int = 1
    timeout_s: float | None = None
    max_resends: int = 3
    start_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        problems = [
            f"runtime.{key}={show(getattr(self, key))} is invalid: expected {rule.expected()}"
            for key, rule in RUNTIME_RULES.items()
            if not rule.accepts(getattr(self, key))
        ]
        problems += [
            f"runtime.resources.{key}={show(value)} is invalid: expected a number >= 0"
            for key, value in self.resources.items()
            if not at_least(0, float).accepts(value)
        ]
        if problems:
            raise ConfigError(problems)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> RuntimeConfig:
        """From a (Hydra) mapping; unknown keys and values out of range are a
        :class:`~egrl.validation.ConfigError` naming them."""
        data = dict(data or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError([f"unknown runtime key(s) {unknown}; known: {sorted(names)}"])
        data["resources"] = dict(data.get("resources") or {})
        return cls(**data)

    def chunk(self, batch: int) -> int:
        """Maps per task for a batch of ``batch`` maps."""
        return self.chunk_size or max(1, math.ceil(batch / max(1, self.workers)))


@dataclass
class TargetSpec:
    """How a worker builds its own target: a hardware model bound to a workload.

    Attributes:
        hwmodel: a registered name (``hwmodels.names()``) or a :class:`HardwareModel`.
        params: the model's parameters when given by name.
        workload: the workload, as the environment has it (after any transform).
        cwd: working directory for the worker (relative commands and paths resolve as
            on the driver); skipped where it does not exist (another machine).
    """

    hwmodel: str | HardwareModel
    params: dict = field(default_factory=dict)
    workload: Workload | None = None
    cwd: str | None = field(default_factory=os.getcwd)

    def bind(self) -> Target:
        """The target (a fresh one, in the calling process)."""
        if self.workload is None:
            raise ValueError("TargetSpec.workload is not set")
        model = self.hwmodel
        if isinstance(model, str):
            model = hwmodels.make(model, **self.params)
        return model.bind(self.workload)


def measure_on(target: Target, maps: np.ndarray, probs: np.ndarray | None) -> Measurement:
    """``target.measure`` as :meth:`egrl.env.Env.measure` calls it (probabilities only
    for a target that wants them)."""
    if getattr(target, "wants_probabilities", False):
        return target.measure(maps, probs=probs)
    return target.measure(maps)


def check_on(target: Target, maps: np.ndarray, probs: np.ndarray | None) -> Check:
    """``target.check``, the compiler alone (probabilities only for a target that wants
    them); a target without a compiler of its own (``Target.checks`` false) refuses."""
    if not target.checks:
        raise CheckRefused(f"{type(target).__name__} has no compiler to ask alone")
    if getattr(target, "wants_probabilities", False):
        return target.check(maps, probs=probs)
    return target.check(maps)


#: what a worker does for each call (:data:`~egrl.runtime.jobs.CALLS`) on its own target
CALLED_ON = {MEASURE: measure_on, CHECK: check_on}


class Runtime(ABC):
    """Measures batches of maps on workers (see the module docstring).

    Args:
        config: the :class:`RuntimeConfig` (retries, resends, chunking, workers).
    """

    #: maps are measured in this process, inside :meth:`submit` (nothing to overlap with)
    in_process: bool = True

    def __init__(self, config: RuntimeConfig) -> None:
        self.config = config
        self._next_job = 0
        self._jobs: dict[int, Job] = {}
        self._ready: dict[int, Outcome] = {}
        #: maps the workers answered, by call (:data:`MEASURE`, :data:`CHECK`)
        self.answered: Counter[str] = Counter()

    @property
    def workers(self) -> int:
        return self.config.workers

    @property
    def pending(self) -> int:
        """Jobs submitted whose outcome has not been taken yet."""
        return len(self._jobs) + len(self._ready)

    def submit(self, maps: np.ndarray, probs: np.ndarray | None = None, call: str = MEASURE) -> int:
        """Send maps int64 ``[B, N, H]`` (probabilities ``[B, N, H, C]`` or None) to the
        workers to measure (or ``call`` :data:`CHECK`: to ask the compiler alone); returns
        the job id its :class:`Outcome` will carry."""
        config = self.config
        job = Job(self._next_job, maps, probs, config.retries, config.max_resends, call)
        self._next_job += 1
        self._jobs[job.id] = job
        self._start(job)
        self._take_finished()
        return job.id

    def poll(self) -> list[Outcome]:
        """Outcomes finished since the last call (non-blocking)."""
        if self._jobs:
            self._advance(0.0)
            self._take_finished()
        return self._pop(list(self._ready))

    def wait_any(self, timeout_s: float | None = None) -> list[Outcome]:
        """Block until at least one outcome is ready (or ``timeout_s`` passed); returns
        every ready one."""
        if not self._ready and self._jobs:
            self._advance(timeout_s)
            self._take_finished()
        return self._pop(list(self._ready))

    def wait(self, job: int) -> Outcome:
        """Block until job ``job`` finished; other outcomes stay for :meth:`poll`."""
        if job not in self._jobs and job not in self._ready:
            raise KeyError(f"no job {job} in flight (taken already, or never submitted)")
        while job not in self._ready:
            self._advance(None)
            self._take_finished()
        return self._ready.pop(job)

    def measure(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Outcome:
        """Submit and wait: the :class:`Outcome` of ``maps``."""
        return self.wait(self.submit(maps, probs))

    def check(self, maps: np.ndarray, probs: np.ndarray | None = None) -> Check:
        """The compiler alone on ``maps`` int64 ``[B, N, H]``, on the workers, batched as
        a measurement is: its :class:`~hwmodels.base.Check` ``[B]`` (a map it could not be
        asked about, after the retries, as refused and its own repair).

        Raises:
            CheckRefused: the chip refused to be asked (its maps are checked by the
                model alone).
        """
        outcome = self.wait(self.submit(maps, probs, CHECK))
        if outcome.refused is not None:
            raise CheckRefused(outcome.refused)
        m = outcome.measurement
        return Check(m.rectified, m.valid, m.reassigned_ratio)

    def _take_finished(self) -> None:
        for job_id in [j for j, job in self._jobs.items() if job.done]:
            job = self._jobs.pop(job_id)
            self.answered[job.call] += len(job.maps)
            self._ready[job_id] = job.outcome()

    def _pop(self, ids: list[int]) -> list[Outcome]:
        return [self._ready.pop(i) for i in ids]

    @abstractmethod
    def _start(self, job: Job) -> None:
        """Hand a new job's tasks to the workers."""

    @abstractmethod
    def _advance(self, timeout_s: float | None) -> None:
        """Make progress; return once some task finished or ``timeout_s`` passed
        (``None``: wait for a task)."""

    def close(self) -> None:
        """Release the workers; outcomes not taken are dropped."""
        self._jobs.clear()
        self._ready.clear()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
