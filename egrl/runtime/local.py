"""``runtime=local``: maps are measured in this process, one batch at a time.

:meth:`LocalRuntime.submit` measures (or checks) the whole batch before it returns (one
call of the measure function per batch, as the environment always did); the outcome is
then ready for :meth:`~egrl.runtime.base.Runtime.poll`. Failed evaluations are retried and failed
as on every runtime (:mod:`egrl.runtime.jobs`); ``timeout_s`` does not apply (a call in
this process cannot be interrupted: the hardware model's own timeout does).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from egrl.runtime.base import Runtime, RuntimeConfig, check_on
from egrl.runtime.jobs import CHECK, MEASURE, Job, run_task
from hwmodels.base import Check, Measurement


class LocalRuntime(Runtime):
    """Measures in this process with ``measure(maps [B, N, H], probs | None)``
    (e.g. :meth:`egrl.env.Env.measure`) and checks with ``check`` (same arguments, a
    :class:`~hwmodels.base.Check`; None: this runtime is not asked to check).
    :meth:`of` builds both from an environment."""

    def __init__(
        self,
        measure: Callable[[np.ndarray, np.ndarray | None], Measurement],
        config: RuntimeConfig | None = None,
        check: Callable[[np.ndarray, np.ndarray | None], Check] | None = None,
    ) -> None:
        super().__init__(config or RuntimeConfig())
        self._calls = {MEASURE: measure, CHECK: check}

    @classmethod
    def of(cls, env, config: RuntimeConfig | None = None) -> LocalRuntime:
        """The local runtime of ``env`` (an :class:`egrl.env.Env`): ``env.measure``, and
        its target's compiler alone."""
        return cls(env.measure, config, lambda maps, probs: check_on(env.target, maps, probs))

    @property
    def workers(self) -> int:
        return 1

    def _start(self, job: Job) -> None:
        call = self._calls[job.call]
        if call is None:
            raise RuntimeError(
                "this LocalRuntime was built without a check function: "
                "LocalRuntime(measure, config, check=...) or LocalRuntime.of(env)"
            )
        tasks = job.tasks(len(job.maps))
        while tasks:
            task = tasks.pop(0)
            tasks.extend(job.settle(task, run_task(call, *job.inputs(task), job.call)))

    def _advance(self, timeout_s: float | None) -> None:
        """Nothing to do: every job finished inside :meth:`submit`."""
