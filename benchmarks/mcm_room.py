"""How much room the multi-chip cost model leaves above its compilers, graph by graph.

For every member of a dataset (default ``mcm87``, see ``docs/datasets.md``): the latency
of the greedy split (the paper's O(N) heuristic, the default native compiler), of the
exact contiguous split (dynamic programming over the execution order), and of the
CP-SAT optimum of the same cost model with its status. The ratios say how much an agent
could gain over each compiler at most. Prints a markdown table and a summary; ``--json``
writes the figures.

    python benchmarks/mcm_room.py --time-limit 20            # all 87 graphs
    python benchmarks/mcm_room.py --members resnet50 inception-d3-w32 --time-limit 60
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import workloads  # noqa: E402
from egrl import make_env  # noqa: E402


def measure(name: str, time_limit_s: float, workers: int, num_chips: int) -> dict:
    """Greedy, contiguous-DP and optimum latencies (ms) of ``name`` on ``num_chips`` chips."""
    greedy = make_env("mcm", name, num_chips=num_chips)
    dp = make_env("mcm", name, num_chips=num_chips, native="contiguous-dp")
    opt = greedy.optimum(time_limit_s=time_limit_s, workers=workers)
    return {
        "workload": name,
        "nodes": greedy.num_units,
        "greedy_ms": greedy.baseline_latency_s * 1e3,
        "dp_ms": dp.baseline_latency_s * 1e3,
        "optimum_ms": opt.latency_s * 1e3,
        "bound_ms": opt.bound_s * 1e3,
        "proven": bool(opt.proven),
        "status": opt.status,
        "wall_s": opt.wall_s,
    }


def table(rows: list[dict]) -> str:
    """Markdown table of :func:`measure` rows with the headroom ratios."""
    out = [
        "| workload | nodes | greedy ms | DP ms | optimum ms | status | greedy / DP | DP / optimum |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['workload']} | {r['nodes']} | {r['greedy_ms']:.4f} | {r['dp_ms']:.4f} | "
            f"{r['optimum_ms']:.4f} | {r['status'].lower()} | "
            f"{r['greedy_ms'] / r['dp_ms']:.3f} | {r['dp_ms'] / r['optimum_ms']:.3f} |"
        )
    return "\n".join(out)


def summary(rows: list[dict]) -> str:
    """Geometric means of the headroom ratios, over all graphs and over proven ones."""
    g_dp = np.array([r["greedy_ms"] / r["dp_ms"] for r in rows])
    dp_opt = np.array([r["dp_ms"] / r["optimum_ms"] for r in rows])
    proven = np.array([r["proven"] for r in rows])
    geo = lambda x: float(np.exp(np.log(x).mean())) if len(x) else float("nan")  # noqa: E731
    return (
        f"{len(rows)} graphs, {int(proven.sum())} optima proven. "
        f"Geomean greedy/DP {geo(g_dp):.3f} (max {g_dp.max():.3f}, {int((g_dp > 1.001).sum())} "
        f"graphs above 1.001); geomean DP/optimum {geo(dp_opt):.3f} (max {dp_opt.max():.3f}, "
        f"{int((dp_opt > 1.001).sum())} graphs above 1.001; proven only: "
        f"{geo(dp_opt[proven]):.3f})."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="mcm87", help="dataset of workloads.datasets")
    parser.add_argument("--members", nargs="*", help="workload names instead of a dataset")
    parser.add_argument("--time-limit", type=float, default=20.0, help="CP-SAT seconds")
    parser.add_argument("--workers", type=int, default=1, help="CP-SAT workers")
    parser.add_argument("--chips", type=int, default=36, help="chips in the package")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args()
    names = args.members or workloads.datasets.members(args.dataset)
    rows, unfit = [], []
    for name in names:
        try:
            rows.append(measure(name, args.time_limit, args.workers, args.chips))
        except ValueError as exc:  # the workload does not fit the package's SRAM
            unfit.append(name)
            print(f"{name}: skipped: {exc}", flush=True)
            continue
        r = rows[-1]
        print(
            f"{name}: greedy {r['greedy_ms']:.4f} dp {r['dp_ms']:.4f} "
            f"opt {r['optimum_ms']:.4f} {r['status']} {r['wall_s']:.1f}s",
            flush=True,
        )
    print(
        f"\n{platform.machine()}, {os.cpu_count()} cores, {args.workers} CP-SAT worker(s), "
        f"{args.time_limit:g} s limit, {args.chips} chips\n"
    )
    print(table(rows))
    print("\n" + summary(rows))
    if unfit:
        print(f"Not mappable on {args.chips} chips (SRAM): {', '.join(unfit)}.")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
