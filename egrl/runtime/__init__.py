"""Runtimes: where the maps of a search are measured (``runtime=local|ray``, docs/ray.md).

>>> from egrl.runtime import RuntimeConfig, TargetSpec, make_runtime
>>> runtime = make_runtime(RuntimeConfig(name="ray", workers=4), env, TargetSpec("nnpi", {}, env.workload))
>>> agent.ledger.use_runtime(runtime)            # every agent measures through it
>>> ...
>>> runtime.close()

:class:`~egrl.runtime.base.Runtime` is the interface (non-blocking ``submit``, ``poll``,
``wait_any``, ``wait``; ``measure`` and ``check``, the compiler alone, submit and wait); :class:`~egrl.runtime.local.LocalRuntime` measures in this
process, :class:`~egrl.runtime.ray_pool.RayRuntime` on a pool of Ray actors.
:class:`~egrl.runtime.dispatch.Dispatcher` puts the measure cache and the budget in front
of a runtime for an agent.
"""

from __future__ import annotations

from egrl.runtime.base import KINDS, Runtime, RuntimeConfig, TargetSpec, check_on, measure_on
from egrl.runtime.jobs import CHECK, EVALUATION_ERRORS, MEASURE, Outcome
from egrl.runtime.local import LocalRuntime
from egrl.runtime.ray_pool import RayRuntime


def make_runtime(config: RuntimeConfig, env, spec: TargetSpec | None = None) -> Runtime:
    """The runtime ``config.name`` for ``env`` (an :class:`egrl.env.Env`).

    ``spec`` says how a Ray worker builds its own target (required for ``ray``); the
    local runtime measures with ``env.measure`` and checks on ``env.target``.
    """
    if config.name == "local":
        return LocalRuntime.of(env, config)
    if spec is None:
        raise ValueError("runtime=ray needs a TargetSpec: the hardware model and workload")
    return RayRuntime(spec, config, on_measured=env.count_measured)


__all__ = [
    "CHECK",
    "EVALUATION_ERRORS",
    "KINDS",
    "MEASURE",
    "LocalRuntime",
    "Outcome",
    "Runtime",
    "RuntimeConfig",
    "TargetSpec",
    "check_on",
    "make_runtime",
    "measure_on",
]
