"""Model-based search against no screen and pool re-ranking, in paid measurements.

    python benchmarks/model_search.py --budget 300 --seeds 0 1 2
    python benchmarks/model_search.py --agents sa --variants none search --out FILE

Every agent in ``--agents`` (``sa``, ``random``) runs on the example chip with shared
bandwidth (``examples/external_chip.py --shared-bandwidth --sram-kib 2048 --tmacs 50``,
ResNet-50: its compiler ignores the bandwidth that transfers on one memory level share, so
the model has physics to learn) in three variants: without a screen, with today's pool
re-ranking (``screen=forest``), and with model search (``screen=forest screen.search=G``,
``screen.kappa``). Each run is an ``egrl-train`` run; the script reads its
``metrics.csv`` and reports, per agent and variant over the seeds: the final best speedup,
the paid measurements each run needed to reach 99% of the best speedup any run found
(the best known map), the medians, and the wall seconds per paid map. Results go to
``benchmarks/results/model_search.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHIP = ROOT / "examples" / "external_chip.py"
RESULTS = ROOT / "benchmarks" / "results"


def chip_overrides(workload: str) -> list[str]:
    command = f"{sys.executable} {CHIP} --shared-bandwidth --sram-kib 2048 --tmacs 50"
    return ["hwmodel=external", f"hwmodel.params.command='{command}'", f"workload={workload}"]


def variant_overrides(variant: str, search: int, kappa: float) -> list[str]:
    if variant == "none":
        return []
    if variant == "pool":
        return ["screen=forest"]
    return ["screen=forest", f"screen.search={search}", f"screen.kappa={kappa}"]


def run(out: Path, argv: list[str]) -> float:
    """One ``egrl-train`` run into ``out``; its wall seconds."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "egrl.cli.train", *argv, "progress=false", f"hydra.run.dir={out}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"{out}: egrl-train failed\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def curve(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """Paid measurements and best speedup after each generation."""
    with open(run_dir / "metrics.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return (
        np.array([int(r["iterations"]) for r in rows]),
        np.array([float(r["best_speedup"]) for r in rows]),
    )


def samples_to(iterations: np.ndarray, speedup: np.ndarray, target: float) -> int | None:
    """Paid measurements when the best speedup first reached ``target`` (None: never)."""
    hit = np.flatnonzero(speedup >= target)
    return int(iterations[hit[0]]) if len(hit) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", nargs="+", default=["sa", "random"])
    parser.add_argument("--variants", nargs="+", default=["none", "pool", "search"])
    parser.add_argument("--workload", default="resnet50")
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--search", type=int, default=32, help="screen.search of model search")
    parser.add_argument("--kappa", type=float, default=0.5, help="screen.kappa of model search")
    parser.add_argument("--runs", type=Path, default=Path("/tmp/model-search"))
    parser.add_argument("--out", type=Path, default=RESULTS / "model_search.json")
    args = parser.parse_args()

    runs: dict[tuple[str, str, int], dict] = {}
    for agent in args.agents:
        for variant in args.variants:
            for seed in args.seeds:
                out = args.runs / agent / variant / f"seed{seed}"
                argv = [
                    *chip_overrides(args.workload),
                    f"agent={agent}",
                    f"budget={args.budget}",
                    f"seed={seed}",
                    *variant_overrides(variant, args.search, args.kappa),
                ]
                wall = run(out, argv)
                its, speed = curve(out)
                runs[agent, variant, seed] = {"wall_s": wall, "iterations": its, "speedup": speed}
                print(f"{agent} {variant} seed {seed}: {speed[-1]:.4f} in {wall:.1f} s", flush=True)
    best_known = max(float(r["speedup"].max()) for r in runs.values())
    table = []
    for agent in args.agents:
        for variant in args.variants:
            group = [runs[agent, variant, s] for s in args.seeds]
            finals = [float(r["speedup"][-1]) for r in group]
            needed = [samples_to(r["iterations"], r["speedup"], 0.99 * best_known) for r in group]
            reached = [n for n in needed if n is not None]
            table.append(
                {
                    "agent": agent,
                    "variant": variant,
                    "finals": finals,
                    "final_mean": float(np.mean(finals)),
                    "final_std": float(np.std(finals)),
                    "samples_to_99": needed,
                    "median_samples_to_99": float(np.median(reached))
                    if len(reached) * 2 > len(needed)
                    else None,
                    "wall_s_per_paid_map": float(
                        np.mean([r["wall_s"] / r["iterations"][-1] for r in group])
                    ),
                }
            )
    report = {
        "chip": "examples/external_chip.py --shared-bandwidth --sram-kib 2048 --tmacs 50",
        "workload": args.workload,
        "budget": args.budget,
        "seeds": args.seeds,
        "search": args.search,
        "kappa": args.kappa,
        "best_known_speedup": best_known,
        "table": table,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"best known speedup {best_known:.4f} (99%: {0.99 * best_known:.4f})")
    for row in table:
        print(
            f"{row['agent']:>7} {row['variant']:>7}: final {row['final_mean']:.4f} "
            f"± {row['final_std']:.4f}, samples to 99% {row['samples_to_99']} "
            f"(median {row['median_samples_to_99']}), {row['wall_s_per_paid_map']:.2f} s/map"
        )


if __name__ == "__main__":
    main()
