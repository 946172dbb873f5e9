"""``runtime=local``: maps are measured in this process, one batch at a time.

:meth:`LocalRuntime.submit` measures the whole batch before it returns (one call of the
measure function per batch, as the environment always did); the outcome is then ready
for :meth:`~egrl.runtime.base.Runtime.poll`. Failed evaluations are retried and failed
as on every runtime (:mod:`egrl.runtime.jobs`); ``timeout_s`` does not apply (a call in
this process cannot be interrupted: the hardware model's own timeout does).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from egrl.runtime.base import Runtime, RuntimeConfig
from egrl.runtime.jobs import Job, run_task
from hwmodels.base import Measurement


class LocalRuntime(Runtime):
    """Measures in this process with ``measure(maps [B, N, H], probs | None)``
    (e.g. :meth:`egrl.env.Env.measure`)."""

    def __init__(
        self,
        measure: Callable[[np.ndarray, np.ndarray | None], Measurement],
        config: RuntimeConfig | None = None,
    ) -> None:
        super().__init__(config or RuntimeConfig())
        self._measure = measure

    @property
    def workers(self) -> int:
        return 1

    def _start(self, job: Job) -> None:
        tasks = job.tasks(len(job.maps))
        while tasks:
            task = tasks.pop(0)
            tasks.extend(job.settle(task, run_task(self._measure, *job.inputs(task))))

    def _advance(self, timeout_s: float | None) -> None:
        """Nothing to do: every job finished inside :meth:`submit`."""
