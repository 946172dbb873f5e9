"""The optimum's speedup per hardware target: the reference line of every figure and table.

A target is a hardware model with its parameters bound to a workload (:func:`target_key`).
Sources, in order: a finished run of the ``optimum`` agent on that target (its final
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

from egrl.env import make_env
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


#: the workload option that changes the workload itself (and so its optimum)
DME_KEY = "workload.eliminate_data_movement"


def eliminates_data_movement(run: Run) -> bool:
    return str(run.config.get(DME_KEY, False)).lower() == "true"


def target_key(run: Run) -> str:
    """The hardware target a run was measured on: hardware model, its parameters and the
    workload (``+dme`` when its data movement was eliminated), as ``optimum.json`` keys
    its entries; runs with one target share one optimum."""
    key = cache_key(run.hwmodel, hw_params(run), run.workload)
    return key + "+dme" if eliminates_data_movement(run) else key


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
    hwmodel: str,
    params: dict,
    workload: str,
    time_limit_s: float,
    workers: int = 2,
    eliminate_data_movement: bool = False,
) -> OptimumInfo:
    """Solve the workload's cost model with ``env.optimum``."""
    env = make_env(
        hwmodel=hwmodel,
        workload=workload,
        eliminate_data_movement=eliminate_data_movement,
        **params,
    )
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


def optimum_by_target(
    runs: Sequence[Run],
    reference_runs: Sequence[Run] = (),
    cache_dir: str | Path | None = None,
    time_limit_s: float = 60.0,
    solve: bool = True,
    workers: int = 2,
) -> dict[str, OptimumInfo]:
    """The optimum of every hardware target of ``runs`` (:func:`target_key` -> info;
    absent when unknown).

    Args:
        runs: the study's runs (their targets are looked up).
        reference_runs: finished runs of the ``optimum`` agent.
        cache_dir: where ``optimum.json`` is read and written (None: no cache).
        time_limit_s: solver limit per target for fresh solves.
        solve: solve targets that neither a run nor the cache covers.
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
        out[target_key(ref)] = _from_agent_run(ref)  # the best of several runs wins
    for run in sorted(runs, key=target_key):
        key = target_key(run)
        if key in out:
            continue
        if key in cache:
            out[key] = OptimumInfo(**cache[key])
        elif solve:
            params, dme = hw_params(run), eliminates_data_movement(run)
            try:
                info = solve_optimum(run.hwmodel, params, run.workload, time_limit_s, workers, dme)
            except NotImplementedError as err:
                log.warning("no optimum for %s: %s", key, err)
                continue
            out[key] = info
            cache[key] = asdict(info)
            _save_cache(cache_path, cache)
    return out


def optimum_speedups(
    runs: Sequence[Run],
    reference_runs: Sequence[Run] = (),
    cache_dir: str | Path | None = None,
    time_limit_s: float = 60.0,
    solve: bool = True,
    workers: int = 2,
) -> dict[str, OptimumInfo]:
    """:func:`optimum_by_target` keyed by workload name, for runs of one hardware model
    and parameters (a study of one target); ``ValueError`` if two targets share a
    workload."""
    by_target = optimum_by_target(runs, reference_runs, cache_dir, time_limit_s, solve, workers)
    out: dict[str, OptimumInfo] = {}
    for key, info in by_target.items():
        if info.workload in out:
            raise ValueError(
                f"runs of several hardware targets on {info.workload!r} ({key} and another): "
                "use optimum_by_target"
            )
        out[info.workload] = info
    return out


def _save_cache(path: Path | None, cache: dict) -> None:
    """Write ``cache`` to ``path`` (nothing when there is no cache file)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1, sort_keys=True), encoding="utf-8")
