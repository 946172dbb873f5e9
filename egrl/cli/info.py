"""``egrl-info``: the built-in workloads, and the native compiler's map against the optimum.

egrl-info                          # zoo table + compiler vs optimum on resnet50 (NNP-I)
egrl-info --workload bert-base --time-limit 120
egrl-info --no-optimum
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np

import workloads
from egrl import make_env


def zoo_table() -> str:
    """Markdown table of the built-in workloads."""
    rows = ["| workload | nodes | edges | weights (MiB) | GMACs |", "|---|---:|---:|---:|---:|"]
    for name in workloads.names():
        w = workloads.load(name)
        rows.append(
            f"| {name} | {w.num_nodes} | {w.edge_index.shape[1]} | "
            f"{w.total_weight_bytes / 2**20:.1f} | {w.macs.sum() / 1e9:.2f} |"
        )
    return "\n".join(rows)


def placement_summary(env, mapping: np.ndarray) -> str:
    """How many tensors and bytes a map puts on each level, per head."""
    w = env.workload
    sizes = {"weight": w.weight_bytes, "activation": w.output_bytes}
    lines = []
    for h, head in enumerate(env.head_names):
        parts = []
        for c, level in enumerate(env.heads[head]):
            sel = mapping[:, h] == c
            nbytes = sizes.get(head, np.zeros(env.num_units))[sel].sum()
            parts.append(f"{level} {int(sel.sum())} ({nbytes / 2**20:.1f} MiB)")
        lines.append(f"  {head:<10} " + ", ".join(parts))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="egrl-info", description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="resnet50")
    parser.add_argument("--hwmodel", default="nnpi")
    parser.add_argument("--time-limit", type=float, default=600.0, help="optimum solver limit (s)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-optimum", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    print("## Built-in workloads\n")
    print(zoo_table())
    env = make_env(hwmodel=args.hwmodel, workload=args.workload)
    zeros = np.zeros((env.num_units, env.num_heads), dtype=np.int64)
    slowest = env.evaluate(zeros)
    print(
        f"\n## {args.workload} on {args.hwmodel}: {env.num_units} units, heads {env.head_names}\n"
    )
    print(f"all-slowest map (choice 0):  {slowest.latency_s[0] * 1e3:9.4f} ms")
    print(f"native compiler map:         {env.baseline_latency_s * 1e3:9.4f} ms")
    print(placement_summary(env, env.baseline_mapping))
    if not args.no_optimum:
        opt = env.optimum(time_limit_s=args.time_limit, workers=args.workers)
        state = (
            "proven optimal"
            if opt.proven
            else f"gap {opt.gap:.2%}, bound {opt.bound_s * 1e3:.4f} ms"
        )
        print(
            f"optimum ({state}, {opt.wall_s:.1f} s): {opt.latency_s * 1e3:9.4f} ms, "
            f"speedup over the compiler {env.baseline_latency_s / opt.latency_s:.3f}x"
        )
        print(placement_summary(env, opt.mapping))
    return 0


if __name__ == "__main__":
    sys.exit(main())
