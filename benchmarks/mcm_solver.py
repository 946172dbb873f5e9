"""Speed of the multi-chip model's compilers on a ~2000-node graph and the zoo.

For each workload: time to bind (dataflow arrays, greedy split, solver tables), time
of the contiguous-split dynamic programme, latency of both native splits, and the
constraint solver's wall time per repaired map in ``fix`` and ``sample`` mode on
batches of uniformly random proposals and of native splits with 1% of the nodes moved
(how often it fell back to the native split, and the share of nodes it moved). The
default graph is a synthetic transformer-like stack of 2000 nodes (``stack2000``).
Prints a markdown table; ``--json`` also writes the figures to a file.

    python benchmarks/mcm_solver.py                      # stack2000, 20 maps per case
    python benchmarks/mcm_solver.py --workloads stack2000 bert-large resnet50 --maps 10
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import workloads  # noqa: E402
from hwmodels.mcm import MCM  # noqa: E402
from hwmodels.mcm.native import dp_split  # noqa: E402
from workloads.ir import Node, TensorInfo, Workload  # noqa: E402


def stack(num_nodes: int = 2000, hidden: int = 512, seq: int = 128) -> Workload:
    """A transformer-like stack of 12-node layers (int8), ``num_nodes`` nodes or fewer.

    Each layer: q, k, v projections, scores, softmax, context, output projection, add,
    norm, two feed-forward layers, add-and-norm; residual edges skip the attention and
    the feed-forward halves.
    """
    act = (1, seq, hidden)

    def lin(name, src, out=hidden, inp=hidden):
        return Node(
            name, "linear", [src], [(1, seq, inp)], (1, seq, out), inp * out, seq * inp * out
        )

    nodes = [Node("embed", "embedding", ["ids"], [(1, seq)], act, 30522 * hidden // 8, 0)]
    prev = "embed"
    for i in range(num_nodes // 12):
        p = f"l{i}_"
        nodes += [
            lin(p + "q", prev),
            lin(p + "k", prev),
            lin(p + "v", prev),
            Node(
                p + "s",
                "matmul",
                [p + "q", p + "k"],
                [act, act],
                (1, seq, seq),
                0,
                seq * seq * hidden,
            ),
            Node(
                p + "sm", "softmax", [p + "s"], [(1, seq, seq)], (1, seq, seq), 0, 0, 3 * seq * seq
            ),
            Node(
                p + "c",
                "matmul",
                [p + "sm", p + "v"],
                [(1, seq, seq), act],
                act,
                0,
                seq * seq * hidden,
            ),
            lin(p + "o", p + "c"),
            Node(p + "add", "eltwise", [p + "o", prev], [act, act], act, 0, 0, seq * hidden),
            Node(p + "n", "norm", [p + "add"], [act], act, 2 * hidden, 0, 4 * seq * hidden),
            lin(p + "f1", p + "n", out=4 * hidden),
            lin(p + "f2", p + "f1", inp=4 * hidden),
            Node(
                p + "out",
                "norm",
                [p + "f2", p + "n"],
                [act, act],
                act,
                2 * hidden,
                0,
                5 * seq * hidden,
            ),
        ]
        prev = p + "out"
    return Workload(f"stack{len(nodes)}", nodes, [TensorInfo("ids", (1, seq), seq)])


def load(name: str) -> Workload:
    return stack() if name == "stack2000" else workloads.load(name)


def repair_case(target, mode: str, proposals: np.ndarray) -> dict:
    """Wall time per map, fallbacks and moved share of one batch through the solver."""
    target.solver.mode = mode
    target.solver.gave_up = 0
    start = time.perf_counter()
    fixed = target.solver.repair(proposals, target.rng)
    wall = time.perf_counter() - start
    return {
        "s_per_map": wall / len(proposals),
        "fell_back": int(target.solver.gave_up),
        "moved": float((fixed != proposals).mean()),
    }


def run(name: str, num_maps: int, seed: int) -> dict:
    w = load(name)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    target = MCM(seed=seed).bind(w)
    bind_s = time.perf_counter() - start
    start = time.perf_counter()
    dp = dp_split(target.flow)
    dp_s = time.perf_counter() - start
    n, c = w.num_nodes, target.params.num_chips
    native = target.native_mapping()[:, 0]
    uniform = rng.integers(0, c, (num_maps, n))
    nudged = np.repeat(native[None], num_maps, axis=0)
    k = max(1, n // 100)
    for row in nudged:
        row[rng.choice(n, k, replace=False)] = rng.integers(0, c, k)
    out = {
        "workload": w.name,
        "nodes": n,
        "edges": int(w.edge_index.shape[1]),
        "bind_s": bind_s,
        "dp_s": dp_s,
        "greedy_ms": float(target.latency_ps(native[None, :, None])[0] / 1e9),
        "dp_ms": float(target.latency_ps(dp[None, :, None])[0] / 1e9) if dp is not None else None,
    }
    for mode in ("fix", "sample"):
        out[f"{mode}_uniform"] = repair_case(target, mode, uniform)
        out[f"{mode}_nudged"] = repair_case(target, mode, nudged)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["stack2000"])
    ap.add_argument("--maps", type=int, default=20, help="maps per batch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    rows = [run(name, args.maps, args.seed) for name in args.workloads]
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, one thread"
    )
    print(
        "| workload | nodes | bind s | DP s | greedy ms | DP ms | case | s/map | fell back | moved |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        for case in ("fix_uniform", "fix_nudged", "sample_uniform", "sample_nudged"):
            c = r[case]
            dp_ms = "-" if r["dp_ms"] is None else f"{r['dp_ms']:.3f}"
            print(
                f"| {r['workload']} | {r['nodes']} | {r['bind_s']:.2f} | {r['dp_s']:.2f} | "
                f"{r['greedy_ms']:.3f} | {dp_ms} | {case} | {c['s_per_map']:.3f} | "
                f"{c['fell_back']}/{args.maps} | {c['moved']:.3f} |"
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
