"""Moved to :mod:`egrl.runs`; this shim re-exports it until its users import from there."""

from egrl.runs import *  # noqa: F403
from egrl.runs import (
    REFERENCE_AGENTS,
    RUN_LOCAL_KEYS,
    Problem,
    Run,
    RunSet,
    collect_runs,
    flatten,
    format_value,
    is_run_dir,
    load_config,
    load_run,
    read_metrics,
    read_overrides,
    run_dirs,
)

__all__ = [
    "REFERENCE_AGENTS",
    "RUN_LOCAL_KEYS",
    "Problem",
    "Run",
    "RunSet",
    "collect_runs",
    "flatten",
    "format_value",
    "is_run_dir",
    "load_config",
    "load_run",
    "read_metrics",
    "read_overrides",
    "run_dirs",
]
