"""Foundation benchmark of the NNP-I model on the zoo's EGRL workloads.

For each workload: node count against the EGRL paper, latency of the native compiler's
map, of the all-DRAM map and of the CP-SAT optimum (or its best map, bound and gap),
the solver's wall time, and the evaluation throughput of ``env.evaluate`` on batches
of random maps (one thread). Prints a markdown table and writes
``benchmarks/results/foundation.json``.

    python benchmarks/foundation.py                 # 10 min solver limit per workload
    python benchmarks/foundation.py --time-limit 60 --workloads resnet50
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's studies/

log = logging.getLogger("foundation")

#: node counts reported in the EGRL paper (section 4)
PAPER_NODES = {"resnet50": 57, "resnet101": 108, "bert-base": 376}


def machine() -> dict:
    """CPU model, core count and library versions of this machine."""
    import ortools
    import scipy
    import torch

    from studies.render import cpu_model

    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "torch": torch.__version__,
        "ortools": ortools.__version__,
        "platform": platform.platform(),
    }


def throughput(env, batch: int, reps: int, seed: int) -> dict:
    """Maps per second of ``env.evaluate`` on ``reps`` batches of random maps."""
    rng = np.random.default_rng(seed)
    batches = [env.random_mappings(batch, rng) for _ in range(reps + 1)]
    env.evaluate(batches[0])  # warm-up
    rates = []
    valid = []
    for maps in batches[1:]:
        start = time.perf_counter()
        ev = env.evaluate(maps)
        rates.append(batch / (time.perf_counter() - start))
        valid.append(float(ev.valid.mean()))
    return {
        "maps_per_s_mean": float(np.mean(rates)),
        "maps_per_s_std": float(np.std(rates)),
        "maps_per_s_min": float(np.min(rates)),
        "maps_per_s_max": float(np.max(rates)),
        "random_valid_fraction": float(np.mean(valid)),
        "batch": batch,
        "reps": reps,
    }


def bench_workload(name: str, args) -> dict:
    """Every measurement of one workload."""
    from egrl import make_env

    start = time.perf_counter()
    env = make_env(hwmodel="nnpi", workload=name)
    bind_s = time.perf_counter() - start
    all_dram = np.zeros((env.num_units, 2), dtype=np.int64)
    dram_s = float(env.evaluate(all_dram).latency_s[0])
    rate = throughput(env, args.batch, args.reps, args.seed)
    log.info("%s: %d nodes, %.0f maps/s; solving", name, env.num_units, rate["maps_per_s_mean"])
    opt = env.optimum(time_limit_s=args.time_limit, workers=args.workers)
    check = env.evaluate(opt.mapping)
    w = env.workload
    return {
        "workload": name,
        "nodes": env.num_units,
        "paper_nodes": PAPER_NODES.get(name),
        "weight_mib": w.total_weight_bytes / 2**20,
        "activation_mib": w.activation_bytes / 2**20,
        "bind_s": bind_s,
        "compiler_latency_s": env.baseline_latency_s,
        "all_dram_latency_s": dram_s,
        "optimum_latency_s": opt.latency_s,
        "optimum_bound_s": opt.bound_s,
        "optimum_gap": opt.gap,
        "optimum_proven": opt.proven,
        "optimum_status": opt.status,
        "solver_wall_s": opt.wall_s,
        "solver_workers": args.workers,
        "solver_time_limit_s": args.time_limit,
        "optimum_valid": bool(check.valid[0]),
        "optimum_speedup_over_compiler": env.baseline_latency_s / opt.latency_s,
        "compiler_speedup_over_all_dram": dram_s / env.baseline_latency_s,
        "throughput": rate,
    }


def table(rows: list[dict]) -> str:
    """The results as a markdown table."""
    head = (
        "| workload | nodes (paper) | compiler ms | all-DRAM ms | optimum ms | bound ms | gap "
        "| status | solver s | optimum / compiler speedup | evaluate maps/s (mean +- std) |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    lines = [
        f"| {r['workload']} | {r['nodes']} ({r['paper_nodes']}) "
        f"| {r['compiler_latency_s'] * 1e3:.4f} | {r['all_dram_latency_s'] * 1e3:.4f} "
        f"| {r['optimum_latency_s'] * 1e3:.4f} | {r['optimum_bound_s'] * 1e3:.4f} "
        f"| {100 * r['optimum_gap']:.3f}% | {r['optimum_status']} | {r['solver_wall_s']:.1f} "
        f"| {r['optimum_speedup_over_compiler']:.3f} "
        f"| {r['throughput']['maps_per_s_mean']:,.0f} +- {r['throughput']['maps_per_s_std']:,.0f} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(PAPER_NODES))
    parser.add_argument("--time-limit", type=float, default=600.0, help="solver seconds")
    parser.add_argument("--workers", type=int, default=2, help="solver threads")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "results/foundation.json"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    import torch

    torch.set_num_threads(1)
    rows = [bench_workload(name, args) for name in args.workloads]
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    m = report["machine"]
    print(f"{report['date']} on {m['cpu']} ({m['cores']} cores), ortools {m['ortools']}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
