"""What a test graph allows above the greedy heuristic: the contiguous DP and the CP-SAT optimum.

For each workload on the multi-chip model: the exact contiguous split's improvement over
the greedy split (``native="contiguous-dp"`` against ``native="greedy"``) and the CP-SAT
optimum's (``env.optimum``), as throughput ratios, with the solver's status. Solves are
cached in a JSON file keyed by workload, hardware parameters and time limit, so a study
re-run (or its report) does not solve again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

from egrl.env import make_env

log = logging.getLogger(__name__)

LIMITS_FILE = "limits.json"


def limit_key(workload: str, hw_params: dict, time_limit_s: float) -> str:
    return f"{workload}?{json.dumps(hw_params, sort_keys=True)}&t={time_limit_s:g}"


def measure_limits(workload: str, hw_params: dict, time_limit_s: float, workers: int) -> dict:
    """Greedy, DP and optimum latencies of ``workload`` and the DP's and optimum's ratios."""
    params = {k: v for k, v in hw_params.items() if k != "native"}
    greedy = make_env("mcm", workload, native="greedy", **params)
    dp = make_env("mcm", workload, native="contiguous-dp", **params)
    opt = greedy.optimum(time_limit_s=time_limit_s, workers=workers)
    g = greedy.baseline_latency_s
    return {
        "workload": workload,
        "nodes": greedy.num_units,
        "greedy_s": g,
        "dp_s": dp.baseline_latency_s,
        "optimum_s": opt.latency_s,
        "dp": g / dp.baseline_latency_s,
        "optimum": g / opt.latency_s,
        "bound": g / opt.bound_s if opt.bound_s > 0 else float("inf"),
        "proven": bool(opt.proven),
        "status": str(opt.status),
        "solve_wall_s": float(opt.wall_s),
        "time_limit_s": float(time_limit_s),
    }


def limits(
    workloads: Sequence[str],
    cache: str | Path,
    hw_params: dict | None = None,
    time_limit_s: float = 60.0,
    workers: int = 2,
) -> dict[str, dict]:
    """``{workload: measure_limits(...)}``, read from ``cache`` or solved and added to it."""
    cache = Path(cache)
    hw_params = dict(hw_params or {})
    stored = json.loads(cache.read_text(encoding="utf-8")) if cache.exists() else {}
    out = {}
    for w in workloads:
        key = limit_key(w, hw_params, time_limit_s)
        if key not in stored or "bound" not in stored[key]:
            log.info("solving the optimum of %s (limit %g s)", w, time_limit_s)
            stored[key] = measure_limits(w, hw_params, time_limit_s, workers)
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(json.dumps(stored, indent=1, sort_keys=True), encoding="utf-8")
        out[w] = stored[key]
    return out
