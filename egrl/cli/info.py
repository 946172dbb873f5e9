"""``egrl-info``: the built-in workloads, and the native compiler's map of one workload.

egrl-info                                    # zoo table + the compiler's map of resnet50 (NNP-I)
egrl-info --workload path/to/model.onnx      # your own model (.onnx, .json, .json.gz)
egrl-info --workload bert-base --optimum     # also solve the exact optimum (--time-limit, s)

It answers in seconds; the exact optimum (``--optimum``) can take minutes on large
workloads and is bounded by ``--time-limit``.
"""

from __future__ import annotations

import argparse
import logging
import sys

import numpy as np

import workloads
from egrl import make_env
from egrl.units import format_latency


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


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``egrl-info``."""
    parser = argparse.ArgumentParser(prog="egrl-info", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload",
        default="resnet50",
        help="zoo name or path of an .onnx, .json or .json.gz file (default %(default)s)",
    )
    parser.add_argument(
        "--hwmodel", default="nnpi", help="hardware model name (default %(default)s)"
    )
    parser.add_argument(
        "--optimum",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also solve the exact optimum of the cost model (can take minutes; default off)",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="optimum solver time limit in seconds (default %(default)s)",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="optimum solver threads (default %(default)s)"
    )
    return parser


def print_optimum(env, time_limit_s: float, workers: int) -> None:
    """Solve the optimum (bounded by ``time_limit_s``) and print it against the compiler."""
    opt = env.optimum(time_limit_s=time_limit_s, workers=workers)
    state = (
        "proven optimal"
        if opt.proven
        else f"gap {opt.gap:.2%}, bound {format_latency(opt.bound_s)}"
    )
    print(
        f"optimum ({state}, {opt.wall_s:.1f} s): {format_latency(opt.latency_s):>10}, "
        f"speedup over the compiler {env.baseline_latency_s / opt.latency_s:.3f}x"
    )
    print(placement_summary(env, opt.mapping))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.time_limit <= 0 or args.workers < 1:
        parser.error("--time-limit must be > 0 and --workers >= 1")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        env = make_env(hwmodel=args.hwmodel, workload=args.workload)
    except (workloads.WorkloadError, ValueError, TypeError, KeyError) as exc:
        why = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"egrl-info: {why}", file=sys.stderr)
        return 2

    print("## Built-in workloads\n")
    print(zoo_table())
    initial = env.evaluate(env.initial_mapping)
    print(
        f"\n## {env.workload.name} on {args.hwmodel}: {env.num_units} units, "
        f"heads {env.head_names}\n"
    )
    print(f"initial map (EGRL's start):  {format_latency(initial.latency_s[0]):>10}")
    print(f"native compiler map:         {format_latency(env.baseline_latency_s):>10}")
    print(placement_summary(env, env.baseline_mapping))
    if args.optimum:
        print_optimum(env, args.time_limit, args.workers)
    else:
        print("optimum: not solved (add --optimum; it can take minutes on large workloads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
