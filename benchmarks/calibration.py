"""Calibrating the datasheet to the readings: how much the calibrated prior ranks, predicts
and solves better than the datasheet on chips that depart from the roofline.

For each named chip of ``examples/external_chip.py`` (``--chip NAME``; docs/external.md,
"Chips that depart from the roofline") on each workload, through
``make_env("external", ...)`` with the chip's datasheet as its prior (the study chips'
figures, ``sram_mib=2, peak_tops=100``):

1. read ``--train`` maps on the chip: neighbours of the chip compiler's map (1 to
   ``--changed`` units given random choices; only maps the chip's compiler accepts);
2. calibrate the prior to them (:func:`hwmodels.nnpi.calibrate.calibrate`);
3. read ``--held-out`` further neighbours (another draw) and score the datasheet's and
   the calibrated prior's predictions of them: Spearman rank correlation and median
   ``|log(predicted / read)|``;
4. solve the datasheet and the calibrated prior (``--time-limit`` s each, hinted with
   the compiler's map) and read each solved map once on the chip.

Prints a markdown table (speedups over the chip compiler's map; "best known" is the
best map of docs/external.md's table, EA at 400 board runs over seeds 0-2); ``--json``
writes the figures, ``--save DIR`` the calibrations.

    python benchmarks/calibration.py                         # stream, ops, mislead
    python benchmarks/calibration.py --chips mislead --train 80 --time-limit 30
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

import workloads  # noqa: E402
from egrl import make_env  # noqa: E402
from hwmodels.nnpi.calibrate import calibrate  # noqa: E402

log = logging.getLogger("calibration")
ROOT = Path(__file__).resolve().parents[1]
CHIP = ROOT / "examples" / "external_chip.py"
#: the named chips' datasheet as NNP-I figures (docs/external.md)
DATASHEET = {"name": "nnpi", "sram_mib": 2, "peak_tops": 100}
#: the best map known on ResNet-50 (docs/external.md, "Chips that depart from the
#: roofline": the best of the solved datasheet map, the compiler's and EA at 400 board
#: runs, seeds 0, 1 and 2), speedup over the chip compiler's map
BEST_KNOWN = {"banks": 1.4514, "stream": 1.4049, "ops": 1.3922, "mislead": 2.0195}


def neighbours(env, count: int, changed: int, rng: np.random.Generator) -> np.ndarray:
    """int64 ``[count, N, H]``: maps the chip's compiler accepts, each the compiler's map
    with 1 to ``changed`` units given random choices."""
    target = env.target
    base = np.asarray(target.native_mapping(), dtype=np.int64)
    choices = np.array([len(c) for c in target.heads.values()])
    found: list[np.ndarray] = []
    while len(found) < count:
        maps = np.repeat(base[None], 2 * count, axis=0)
        for m in maps:
            units = rng.choice(len(base), size=rng.integers(1, changed + 1), replace=False)
            m[units] = rng.integers(0, choices, size=(len(units), len(choices)))
        found.extend(maps[target.check(maps).valid])
    return np.stack(found[:count])


def read(env, maps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The maps as the chip ran them and their latencies (only those it ran)."""
    m = env.measure(maps)
    ran = np.isfinite(m.latency_s)
    return m.rectified[ran], m.latency_s[ran]


def scores(prior, maps: np.ndarray, latency_s: np.ndarray) -> dict:
    """Spearman rank correlation and median |log error| of ``prior`` on the readings."""
    predicted = prior.latency_s(maps)
    return {
        "spearman": float(spearmanr(predicted, latency_s).statistic),
        "median_log_error": float(np.median(np.abs(np.log(predicted / latency_s)))),
    }


def solved_speedup(env, prior, time_limit_s: float, workers: int) -> dict:
    """``prior`` solved and its map read once on the chip."""
    solved = prior.solve(env.target.native_mapping(), time_limit_s, workers)
    reading = env.evaluate(solved.mapping)
    return {
        "speedup": float(reading.speedup[0]),
        "valid": bool(reading.valid[0]),
        "status": solved.status,
        "solve_s": solved.solve_s,
    }


def measure(name: str, workload: str, args: argparse.Namespace) -> dict:
    """Every figure of one chip and workload (module docstring)."""
    env = make_env(
        "external",
        workloads.load(workload),
        command=[sys.executable, str(CHIP), "--chip", name],
        prior=DATASHEET,
    )
    sheet = env.target.prior
    rng = np.random.default_rng(args.seed)
    train = read(env, neighbours(env, args.train, args.changed, rng))
    held = read(env, neighbours(env, args.held_out, args.changed, rng))
    start = time.perf_counter()
    cal = calibrate(sheet, *train)
    fit_s = time.perf_counter() - start
    calibrated = cal.prior(env.target)
    if args.save:
        cal.save(Path(args.save) / f"{name}-{workload}.json")
    row = {
        "chip": f"{name}-{workload}",
        "readings": int(len(train[1])),
        "held_out": int(len(held[1])),
        "fit_s": fit_s,
        "spread": [cal.start_spread, cal.spread],
        "figures": cal.figures.to_dict(),
        "datasheet": scores(sheet, *held),
        "calibrated": scores(calibrated, *held),
        "best_known": BEST_KNOWN.get(name) if workload == "resnet50" else None,
    }
    row["datasheet_solved"] = solved_speedup(env, sheet, args.time_limit, args.workers)
    row["calibrated_solved"] = solved_speedup(env, calibrated, args.time_limit, args.workers)
    log.info("%s: %s", row["chip"], json.dumps(row))
    return row


def table(rows: list[dict]) -> str:
    """A markdown table, one chip a row."""
    lines = [
        "| chip | readings | Spearman, datasheet -> calibrated | median abs log error | "
        "solved map read once, datasheet -> calibrated | best known | calibrated / best |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        d, c = r["datasheet"], r["calibrated"]
        ds, cs = r["datasheet_solved"], r["calibrated_solved"]
        best = r["best_known"]
        lines.append(
            f"| {r['chip']} | {r['readings']} | {d['spearman']:.3f} -> {c['spearman']:.3f} | "
            f"{d['median_log_error']:.4f} -> {c['median_log_error']:.4f} | "
            f"{ds['speedup']:.4f} ({ds['status']}) -> {cs['speedup']:.4f} ({cs['status']}) | "
            + (f"{best:.4f} | {cs['speedup'] / best:.1%} |" if best else "- | - |")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chips", nargs="+", default=["stream", "ops", "mislead"])
    p.add_argument("--workloads", nargs="+", default=["resnet50"], help="zoo names")
    p.add_argument("--train", type=int, default=40, help="maps read to calibrate on")
    p.add_argument("--held-out", type=int, default=100, help="maps read to score on")
    p.add_argument("--changed", type=int, default=6, help="most units a neighbour changes")
    p.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT seconds per solve")
    p.add_argument("--workers", type=int, default=2, help="CP-SAT threads")
    p.add_argument("--seed", type=int, default=0, help="seed of the maps drawn")
    p.add_argument("--save", help="folder to save each calibration in")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if args.save:
        Path(args.save).mkdir(parents=True, exist_ok=True)
    rows = [measure(c, w, args) for w in args.workloads for c in args.chips]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    sys.stdout.write(table(rows) + "\n")
    sys.stdout.write(
        f"\n{platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
        f"load average {load:.1f}\n"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
