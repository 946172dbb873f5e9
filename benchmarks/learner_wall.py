"""EGRL's wall time against EA's for the same paid measurements, and Table 2's learner beside.

    python benchmarks/learner_wall.py                       # resnet50, budget 4000, seeds 0-1
    python benchmarks/learner_wall.py --seeds 0,1,2 --jobs 1 --workload resnet101 --budget 400
    python benchmarks/learner_wall.py --variant 'gr0.1=agent=egrl learner.gradient_ratio=0.1'

Every run is ``egrl-train hwmodel=nnpi workload=W budget=B seed=S threads=1`` with a
variant's overrides (``ea``: ``agent=ea``; ``egrl``: ``agent=egrl`` with today's learner
defaults; ``table2``: ``agent=egrl learner=sac-table2``, one gradient step per paid
measurement as EGRL's Table 2 asks), each in its own process with its run directory in a
temporary directory. ``--jobs`` runs go at a time, in the order seed by seed, variant by
variant, so every variant runs under the same load. Recorded per run: the run's wall time
(``metrics.csv``'s final ``wall_s``), the time breakdown (``t_*`` columns), the
learner's share of the wall time and its gradient steps per paid measurement (as the
learner-cost study reads them), paid measurements and the best speedup; per variant the median wall time and its
ratio to EA's median. Results go to ``benchmarks/results/learner_wall.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's egrl, as its runs use (cwd=ROOT)
OUT = ROOT / "benchmarks" / "results" / "learner_wall.json"
VARIANTS = {
    "ea": ["agent=ea"],
    "egrl": ["agent=egrl"],
    "table2": ["agent=egrl", "learner=sac-table2"],
}

log = logging.getLogger("learner_wall")


def parse_variant(text: str) -> tuple[str, list[str]]:
    """``NAME=OVERRIDE OVERRIDE ...`` -> ``(NAME, [OVERRIDE, ...])``."""
    name, _, overrides = text.partition("=")
    if not name or not overrides.strip():
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected 'NAME=OVERRIDES'")
    return name, overrides.split()


def train(args: argparse.Namespace, name: str, overrides: list[str], seed: int, tmp: Path) -> dict:
    """One ``egrl-train`` run in its own process; its record from ``metrics.csv``."""
    from egrl.runs import load_run
    from studies.learner_cost import learner_share, updates_per_sample

    run_dir = tmp / f"{name}-seed{seed}"
    argv = [
        sys.executable,
        "-m",
        "egrl.cli.train",
        f"hwmodel={args.hwmodel}",
        f"workload={args.workload}",
        f"budget={args.budget}",
        f"seed={seed}",
        "threads=1",
        "progress=false",
        *overrides,
        f"hydra.run.dir={run_dir}",
    ]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{name} seed {seed} exited with {done.returncode}: {done.stderr[-2000:]}"
        )
    run = load_run(run_dir)
    record = {
        "variant": name,
        "overrides": overrides,
        "seed": seed,
        "wall_s": run.final_wall_s,
        "breakdown_s": {
            k[2:]: float(v) for k, v in run.last_row.items() if k.startswith("t_") and v
        },
        "paid": int(run.iterations[-1]),
        "learner_share": learner_share(run),
        "steps_per_paid": updates_per_sample(run),
        "best_speedup": run.final_speedup,
    }
    log.info("%s seed %d: %.1f s, best %.4f", name, seed, record["wall_s"], record["best_speedup"])
    return record


def summarise(records: list[dict], baseline: str) -> dict[str, dict]:
    """Per variant: median [min-max] wall time, its ratio to the baseline's median,
    the learner's median share of the wall time, gradient steps per paid measurement."""
    by = {}
    for r in records:
        by.setdefault(r["variant"], []).append(r)
    base = float(np.median([r["wall_s"] for r in by.get(baseline, [])] or [np.nan]))
    out = {}
    for name, rs in by.items():
        wall = np.array([r["wall_s"] for r in rs])
        out[name] = {
            "runs": len(rs),
            "wall_s_median": float(np.median(wall)),
            "wall_s_range": [float(wall.min()), float(wall.max())],
            "wall_over_baseline": float(np.median(wall)) / base,
            "learner_share_median": float(np.nanmedian([r["learner_share"] for r in rs])),
            "steps_per_paid": float(np.nanmedian([r["steps_per_paid"] for r in rs])),
            "best_speedups": [r["best_speedup"] for r in rs],
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hwmodel", default="nnpi")
    parser.add_argument("--workload", default="resnet50")
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument(
        "--variant",
        type=parse_variant,
        action="append",
        help="NAME=OVERRIDES (replaces the defaults)",
    )
    parser.add_argument("--baseline", default="ea")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    variants = dict(args.variant) if args.variant else VARIANTS
    seeds = [int(s) for s in args.seeds.split(",")]
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        jobs = [(n, o, s) for s in seeds for n, o in variants.items()]
        records = list(pool.map(lambda j: train(args, *j, Path(tmp)), jobs))
    result = {
        "machine": f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}",
        "command": " ".join(sys.argv),
        "setting": {k: getattr(args, k) for k in ("hwmodel", "workload", "budget", "jobs")},
        "load_average_at_start": load_start,
        "load_average_at_end": os.getloadavg(),
        "summary": summarise(records, args.baseline),
        "runs": records,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    for name, s in result["summary"].items():
        log.info(
            "%-8s %d runs  wall %.0f s [%.0f-%.0f]  %.2fx %s  learner %.0f%%  %.2f steps/paid",
            name,
            s["runs"],
            s["wall_s_median"],
            *s["wall_s_range"],
            s["wall_over_baseline"],
            args.baseline,
            100 * s["learner_share_median"],
            s["steps_per_paid"],
        )
    log.info("wrote %s", args.out)


if __name__ == "__main__":
    main()
