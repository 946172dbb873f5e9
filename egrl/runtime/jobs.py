"""One batch of maps sent to a runtime: its tasks, their retries and its failed maps.

A :class:`Job` is a batch of ``B`` maps submitted at once, to be measured or, for a
:data:`CHECK` job, shown to the compiler alone (no board run; a chip that refuses to be
asked, :class:`~hwmodels.base.CheckRefused`, refuses the whole job: :attr:`Outcome.refused`). A runtime cuts it into
:class:`Task` s (rows of the batch) and runs each on a worker with :func:`run_task`. The
job collects the rows as they come back, in any order. A task that fails (the hardware
model raised one of :data:`EVALUATION_ERRORS`, the runtime's timeout passed, or its worker
died) keeps the rows it measured before the failure (an
:class:`~hwmodels.base.ChipCallError`'s ``partial``) and sends the rest
again one map per task, so that a map that fails is found alone: up to ``retries`` more
attempts after an error or a timeout, up to ``max_resends`` after a worker died. A map
still failing after that is *failed*: it is answered as an invalid map the chip did not
run (``valid`` false, ``reassigned_ratio`` 1, ``latency_s`` NaN, the proposal as its own
repair), with the reason logged and kept in :attr:`Outcome.reasons`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from hwmodels.base import Check, CheckRefused, ChipCallError, Measurement

log = logging.getLogger(__name__)

#: what a job asks of the target: measure its maps, or check them (the compiler alone)
MEASURE, CHECK = "measure", "check"
CALLS = (MEASURE, CHECK)

#: errors of a hardware model that fail the maps being measured (anything else is a bug
#: and stops the run)
EVALUATION_ERRORS: tuple[type[BaseException], ...] = (ChipCallError, TimeoutError)
#: re-assigned ratio of a failed map: the worst an invalid map gets (reward ``-scale``)
FAILED_RATIO = 1.0


@dataclass
class TaskResult:
    """What a worker answers for one task of ``T`` maps.

    Attributes:
        measurement: the whole task's :class:`Measurement` ``[T]``, or on failure the
            rows measured before it (``[P]``, ``P < T``; ``None`` when nothing was).
        error: why the task failed; ``None`` when it did not.
        refused: the chip refused a check (``error`` says why): nothing to retry.
    """

    measurement: Measurement | Check | None
    error: str | None = None
    refused: bool = False


def run_task(
    measure: Callable[[np.ndarray, np.ndarray | None], Measurement | Check],
    maps: np.ndarray,
    probs: np.ndarray | None,
    call: str = MEASURE,
) -> TaskResult:
    """``measure(maps [T, N, H], probs [T, N, H, C] | None)`` (the target's measure or,
    ``call`` :data:`CHECK`, its check), with an evaluation error turned into a failed
    :class:`TaskResult` and a refused check into a refused one (other exceptions
    propagate)."""
    try:
        return TaskResult(measure(maps, probs))
    except EVALUATION_ERRORS as exc:
        return TaskResult(getattr(exc, "partial", None), f"{type(exc).__name__}: {exc}")
    except CheckRefused as exc:
        if call != CHECK:
            raise
        return TaskResult(None, str(exc), refused=True)


@dataclass
class Task:
    """Rows ``rows`` (int64 ``[T]``) of job ``job``, on attempt ``attempt`` (1 first)
    after ``resends`` re-sends for dead workers."""

    job: int
    rows: np.ndarray
    attempt: int = 1
    resends: int = 0


@dataclass
class Outcome:
    """The answer to a job of ``B`` maps, rows in submission order.

    Attributes:
        job: the job's id.
        measurement: :class:`Measurement` ``[B]`` (failed rows as described in the
            module docstring).
        failed: bool ``[B]``: the map could not be measured.
        reasons: ``B`` strings: why each failed map failed (empty for measured maps).
        refused: why the chip refused a check job (None: it did not).
    """

    job: int
    measurement: Measurement
    failed: np.ndarray
    reasons: list[str]
    refused: str | None = None

    def __len__(self) -> int:
        return len(self.failed)


class Job:
    """A batch of maps int64 ``[B, N, H]`` (and probabilities ``[B, N, H, C]`` or None)
    being measured, or checked (``call``, see the module docstring)."""

    def __init__(
        self,
        job_id: int,
        maps: np.ndarray,
        probs: np.ndarray | None,
        retries: int,
        max_resends: int,
        call: str = MEASURE,
    ) -> None:
        if call not in CALLS:
            raise ValueError(f"job call {call!r} is invalid: expected one of {CALLS}")
        self.id = job_id
        self.call = call
        #: why the chip refused this check job (None: it did not)
        self.refused: str | None = None
        self.maps = maps
        self.probs = probs
        self.retries = int(retries)
        self.max_resends = int(max_resends)
        batch = len(maps)
        self.rectified = np.array(maps, dtype=np.int64, copy=True)
        self.valid = np.zeros(batch, dtype=bool)
        self.reassigned_ratio = np.full(batch, FAILED_RATIO)
        self.latency_s = np.full(batch, np.nan)
        self.failed = np.zeros(batch, dtype=bool)
        self.reasons = [""] * batch
        self.open = batch

    @property
    def done(self) -> bool:
        return self.open == 0

    def tasks(self, chunk: int) -> list[Task]:
        """The first tasks: consecutive rows, ``chunk`` (>= 1) per task."""
        rows = np.arange(len(self.maps))
        return [Task(self.id, rows[i : i + chunk]) for i in range(0, len(rows), max(1, chunk))]

    def inputs(self, task: Task) -> tuple[np.ndarray, np.ndarray | None]:
        """The maps ``[T, N, H]`` and probabilities of ``task``."""
        return self.maps[task.rows], None if self.probs is None else self.probs[task.rows]

    def finish(self, rows: np.ndarray, m: Measurement | Check) -> None:
        """Record the measurement (or check: no latency) ``[len(rows)]`` of ``rows``."""
        if len(m.valid) != len(rows):
            raise RuntimeError(
                f"job {self.id}: a worker answered {len(m.valid)} maps for {len(rows)} sent"
            )
        self.rectified[rows] = m.rectified
        self.valid[rows] = m.valid
        self.reassigned_ratio[rows] = m.reassigned_ratio
        if isinstance(m, Measurement):
            self.latency_s[rows] = m.latency_s
        self.open -= len(rows)

    def settle(self, task: Task, result: TaskResult) -> list[Task]:
        """Record a task's result; returns the tasks to send again (none if it succeeded,
        or the chip refused the check: then the job is done, :attr:`refused`)."""
        if self.refused is not None:
            return []
        if result.refused:
            log.info("job %d: the chip refused to check maps: %s", self.id, result.error)
            self.refused, self.open = result.error, 0
            return []
        if result.error is None:
            self.finish(task.rows, result.measurement)
            return []
        return self.fail(task, result.error, result.measurement)

    def fail(
        self, task: Task, reason: str, partial: Measurement | None = None, died: bool = False
    ) -> list[Task]:
        """A task failed (``died``: its worker died): keep ``partial`` (its first rows), and
        return the single-map tasks that try the rest again, or fail them for good."""
        done = 0 if partial is None else len(partial.valid)
        if done:
            self.finish(task.rows[:done], partial)
        rest = task.rows[done:]
        if died:
            again = task.resends < self.max_resends
            attempt, resends = task.attempt, task.resends + 1
            limit = f"after {task.resends + 1} worker death(s) (max_resends={self.max_resends})"
        else:
            again = task.attempt <= self.retries
            attempt, resends = task.attempt + 1, task.resends
            limit = f"after {task.attempt} attempt(s) (retries={self.retries})"
        where = f"job {self.id}, map(s) {rest.tolist()}"
        if again:
            log.warning("%s: %s; sending again", where, reason)
            return [Task(self.id, rest[i : i + 1], attempt, resends) for i in range(len(rest))]
        log.warning("%s failed %s: %s", where, limit, reason)
        self.failed[rest] = True
        for row in rest:
            self.reasons[int(row)] = reason
        self.open -= len(rest)
        return []

    def outcome(self) -> Outcome:
        """The finished job's :class:`Outcome`."""
        if not self.done:
            raise RuntimeError(f"job {self.id} still has {self.open} map(s) in flight")
        m = Measurement(self.rectified, self.valid, self.reassigned_ratio, self.latency_s)
        return Outcome(self.id, m, self.failed, self.reasons, self.refused)
