"""What an LLM entry costs: building it from its config, and an EA run on it against ResNet-50.

Builds ``llama3.2-1b-decode`` (or ``--entry``) with ``scripts/build_zoo.py`` into a
temporary folder, timing it and reading its peak resident memory, then runs
``egrl-train agent=ea budget=400`` on NNP-I on the entry and on ResNet-50 in turn,
``--repeats`` times each, alternating so that load on a shared machine falls on both
alike, and prints one markdown table: the build's seconds and GiB, each EA run's wall
seconds and the ratio of each pair.

    python benchmarks/llm_costs.py                      # llama3.2-1b-decode, 3 pairs
    python benchmarks/llm_costs.py --entry qwen2.5-0.5b-decode --repeats 5
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def timed(argv: list[str], cwd: Path) -> float:
    """Wall seconds of ``argv`` run in ``cwd`` (its output discarded; a failure raises)."""
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - start


def build(entry: str, folder: Path) -> tuple[float, float]:
    """Seconds and peak GiB of building ``entry`` (a child's peak: the largest so far)."""
    argv = [sys.executable, str(ROOT / "scripts" / "build_zoo.py"), entry, "--out", str(folder)]
    seconds = timed(argv, folder)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return seconds, peak_kib / 2**20


def ea_run(workload: str, folder: Path, budget: int) -> float:
    """Wall seconds of one EA run of ``budget`` paid maps on NNP-I (seed 0, one thread)."""
    argv = [
        sys.executable,
        "-m",
        "egrl.cli.train",
        "hwmodel=nnpi",
        f"workload={workload}",
        "agent=ea",
        f"budget={budget}",
        "threads=1",
        "progress=false",
    ]
    return timed(argv, folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entry", default="llama3.2-1b-decode")
    parser.add_argument("--baseline", default="resnet50")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=int, default=400)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        seconds, gib = build(args.entry, folder)
        print(f"build {args.entry}: {seconds:.1f} s, peak {gib:.2f} GiB")
        print(f"| pair | {args.baseline} s | {args.entry} s | ratio |")
        print("|---:|---:|---:|---:|")
        ratios = []
        for i in range(args.repeats):
            base = ea_run(args.baseline, folder, args.budget)
            entry = ea_run(args.entry, folder, args.budget)
            ratios.append(entry / base)
            print(f"| {i + 1} | {base:.1f} | {entry:.1f} | {entry / base:.2f}x |")
        print(f"median ratio {np.median(ratios):.2f}x over {args.repeats} pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
