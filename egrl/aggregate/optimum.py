"""The optimum's speedup per workload: the reference line of every figure and table.

Sources, in order: a finished run of the ``optimum`` agent on that workload (its final
best speedup; ``solver_proven`` and ``solver_gap`` from its metrics.csv); the cache
``optimum.json`` in the output directory; a fresh ``env.optimum(time_limit_s)`` solve,
which is then cached. Entries are keyed by hardware model, its parameters and workload.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from egrl.runs import Run

log = logging.getLogger(__name__)

CACHE_FILE = "optimum.json"


@dataclass
class OptimumInfo:
    """The optimum of one workload's cost model, as a speedup over the native compiler.

    ``proven`` is None and ``gap`` NaN when the source does not say.
    """

    workload: str
    hwmodel: str
    params: dict
    speedup: float
    proven: bool | None
    gap: float
    source: str
    time_limit_s: float = float("nan")
    wall_s: float = float("nan")

    @property
    def tag(self) -> str:
        """``proven``, ``gap 1.2%`` or ``unknown``."""
        if self.proven:
            return "proven"
        if self.proven is False:
            return f"gap {100 * self.gap:.2f}%" if math.isfinite(self.gap) else "not proven"
        return "unknown"


def hw_params(run: Run) -> dict:
    """The hardware model's parameters of a run (``hwmodel.params.*`` of its config)."""
    prefix = "hwmodel.params."
    return {k[len(prefix) :]: v for k, v in run.config.items() if k.startswith(prefix)}


def cache_key(hwmodel: str, params: dict, workload: str) -> str:
    return f"{hwmodel}/{workload}" + (f"?{json.dumps(params, sort_keys=True)}" if params else "")


def _float(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return float("nan")


def _from_agent_run(run: Run) -> OptimumInfo:
    row = run.last_row
    proven = str(row.get("solver_proven", row.get("proven", ""))).strip().lower()
    gap = row.get("solver_gap", row.get("gap", ""))
    return OptimumInfo(
        workload=run.workload,
        hwmodel=run.hwmodel,
        params=hw_params(run),
        speedup=run.final_speedup,
        proven={"true": True, "1": True, "false": False, "0": False}.get(proven),
        gap=_float(gap),
        source=f"optimum agent run {run.path}",
        wall_s=run.final_wall_s,
    )


def solve_optimum(
    hwmodel: str, params: dict, workload: str, time_limit_s: float, workers: int = 2
) -> OptimumInfo:
    """Solve the workload's cost model with ``env.optimum``."""
    from egrl.env import make_env

    env = make_env(hwmodel=hwmodel, workload=workload, **params)
    log.info("solving the optimum of %s on %s (limit %.0f s)", workload, hwmodel, time_limit_s)
    opt = env.optimum(time_limit_s=time_limit_s, workers=workers)
    return OptimumInfo(
        workload=workload,
        hwmodel=hwmodel,
        params=params,
        speedup=float(env.baseline_latency_s / opt.latency_s),
        proven=bool(opt.proven),
        gap=float(opt.gap),
        source=f"env.optimum ({opt.status})",
        time_limit_s=float(time_limit_s),
        wall_s=float(opt.wall_s),
    )


def optimum_speedups(
    runs: Sequence[Run],
    reference_runs: Sequence[Run] = (),
    cache_dir: str | Path | None = None,
    time_limit_s: float = 60.0,
    solve: bool = True,
    workers: int = 2,
) -> dict[str, OptimumInfo]:
    """The optimum per workload of ``runs`` (workload name -> info; absent when unknown).

    Args:
        runs: the study's runs (their workloads and hardware models are looked up).
        reference_runs: finished runs of the ``optimum`` agent.
        cache_dir: where ``optimum.json`` is read and written (None: no cache).
        time_limit_s: solver limit per workload for fresh solves.
        solve: solve workloads that neither a run nor the cache covers.
        workers: solver threads of those solves.

    The cache is written after every fresh solve, so an interrupted aggregation keeps
    the optima it already paid for.
    """
    cache_path = Path(cache_dir) / CACHE_FILE if cache_dir is not None else None
    cache: dict = {}
    if cache_path is not None and cache_path.exists():
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    out: dict[str, OptimumInfo] = {}
    for ref in sorted(reference_runs, key=lambda r: r.final_speedup):
        out[ref.workload] = _from_agent_run(ref)  # the best of several runs wins
    for run in sorted(runs, key=lambda r: r.workload):
        if run.workload in out:
            continue
        params = hw_params(run)
        key = cache_key(run.hwmodel, params, run.workload)
        if key in cache:
            out[run.workload] = OptimumInfo(**cache[key])
        elif solve:
            try:
                info = solve_optimum(run.hwmodel, params, run.workload, time_limit_s, workers)
            except NotImplementedError as err:
                log.warning("no optimum for %s: %s", run.workload, err)
                continue
            out[run.workload] = info
            cache[key] = asdict(info)
            _save_cache(cache_path, cache)
    return out


def _save_cache(path: Path | None, cache: dict) -> None:
    """Write ``cache`` to ``path`` (nothing when there is no cache file)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1, sort_keys=True), encoding="utf-8")
