"""Where a decode step's time goes on NNP-I's cost model, at several cache lengths.

For each workload (zoo names or ``.json.gz`` files) prints one markdown row: its weights,
cache and activations (all, and the largest), the on-chip levels' share of those bytes,
and the latency of four maps on the default chip: every tensor in DRAM, the native
compiler's, every tensor in SRAM on a chip whose SRAM holds everything (what placement
could give with unbounded on-chip memory), and the time to stream the weights and the
cache once from DRAM (the floor of a map that keeps nothing on chip across steps).

    python benchmarks/decode_bounds.py                  # the zoo's Llama 3.2 1B steps
    python benchmarks/decode_bounds.py llama3.2-1b-decode multirun/llm/workloads/*.json.gz

Cache lengths other than the zoo's: ``scripts/build_zoo.py llama3.2-1b-decode --cached N``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import hwmodels
import workloads
from hwmodels.nnpi.params import NNPIParams

MIB = 2**20
DRAM, SRAM = 0, 2


def row(name: str) -> tuple:
    """One workload's bytes and its four latencies (ms) on the default NNP-I."""
    w = workloads.load(name)
    params = NNPIParams()
    target = hwmodels.make("nnpi").bind(w)
    unbounded = hwmodels.make("nnpi", sram_mib=float(2**20)).bind(w)
    native = target.native_mapping()
    cache = w.cache_bytes

    def ms(t, level_or_map) -> float:
        maps = np.broadcast_to(level_or_map, native.shape)[None]
        return float(t.latency_fs(np.ascontiguousarray(maps))[0]) / 1e12

    stream = w.total_weight_bytes / (params.dram_gbps * 1e9) * 1e3
    return (
        Path(name).name.removesuffix(".json.gz"),
        f"{(w.total_weight_bytes - cache) / MIB:.0f}",
        f"{cache / MIB:.0f}",
        f"{w.activation_bytes / MIB:.0f} ({w.output_bytes.max(initial=0) / MIB:.1f})",
        f"{params.on_chip_share(w.moved_bytes):.1%}",
        f"{ms(target, DRAM):.3f}",
        f"{ms(target, native):.3f}",
        f"{ms(unbounded, SRAM):.3f}",
        f"{stream:.3f}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workloads", nargs="*", default=["llama3.2-1b", "llama3.2-1b-decode"])
    args = parser.parse_args(argv)
    head = (
        "workload",
        "weights MiB",
        "cache MiB",
        "activations MiB (largest)",
        "on-chip share of the bytes",
        "all in DRAM ms",
        "compiler ms",
        "unbounded SRAM ms",
        "weights + cache from DRAM ms",
    )
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(row(name)) + " |" for name in args.workloads]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
