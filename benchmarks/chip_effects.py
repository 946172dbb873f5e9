"""Chips that depart from the roofline: how far the chip's datasheet, solved exactly, gets.

For each chip (a named chip of ``examples/external_chip.py``, ``--chip NAME``, see
``docs/external.md``, "Chips that depart from the roofline"; ``study``: the study chips'
own) on each workload: the chip compiler's map, and the NNP-I model given the chip's
datasheet figures (its ``--sram-kib``, ``--llc-kib``, bandwidths and ``--tmacs``; none of
its effects) solved exactly by CP-SAT, hinted with the NNP-I compiler's map (one solve per
workload and datasheet), whose map is read ONCE on the chip through the external target.
With ``--ea-seeds`` also plain EA at ``--budget`` board runs per seed (``egrl-train
agent=ea``, one run after another; a run whose ``best_mapping.json`` exists under
``--out`` is read, not run again). Prints a markdown table; ``--json`` writes the figures.

    python benchmarks/chip_effects.py                                   # every named chip
    python benchmarks/chip_effects.py --chips study mislead --time-limit 60
    python benchmarks/chip_effects.py --ea-seeds 0 1 --out /tmp/chip-ea  # and EA (slow)
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import runpy  # noqa: E402
import shlex  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import workloads  # noqa: E402
from egrl import make_env  # noqa: E402

log = logging.getLogger("chip_effects")
ROOT = Path(__file__).resolve().parents[1]
CHIP = ROOT / "examples" / "external_chip.py"
#: the chip script's named chips (``--chip NAME``), its ``CHIPS``; the last one misleads
NAMED = runpy.run_path(str(CHIP))["CHIPS"]
#: the study chips' own chip (configs/study/mbo.yaml ``chip``), for reference
STUDY = ["--shared-bandwidth", "--sram-kib", "2048", "--tmacs", "50"]


def flags_of(chip: str) -> list[str]:
    """The chip script's flags for ``chip``: ``study`` or a name of its ``CHIPS``."""
    return STUDY if chip == "study" else ["--chip", chip]


def datasheet(flags: list[str]) -> dict[str, float]:
    """The NNP-I parameters of a chip's datasheet: its capacities, bandwidths and compute
    rate as the chip's flags give them (two operations per MAC), none of its effects."""
    args = runpy.run_path(str(CHIP))["parse_args"](flags)
    return {
        "sram_mib": args.sram_kib / 1024,
        "llc_mib": args.llc_kib / 1024,
        "dram_gbps": args.dram_gbps,
        "llc_gbps": args.llc_gbps,
        "sram_gbps": args.sram_gbps,
        "peak_tops": 2 * args.tmacs,
    }


@functools.cache
def solve(workload: str, figures: tuple, time_limit_s: float, workers: int):
    """The NNP-I optimum of ``workload`` on the datasheet ``figures`` (``(name, value)``
    pairs) and its wall seconds; chips with the same datasheet share one solve."""
    prior = make_env("nnpi", workloads.load(workload), **dict(figures))
    start = time.perf_counter()
    solved = prior.optimum(time_limit_s=time_limit_s, workers=workers)
    return solved, time.perf_counter() - start


def solved_datasheet(name: str, workload: str, time_limit_s: float, workers: int) -> dict:
    """The compiler's map and the solved datasheet map, each read once on chip ``name``."""
    flags = flags_of(name)
    w = workloads.load(workload)
    chip = make_env("external", w, command=[sys.executable, str(CHIP), *flags])
    solved, solve_s = solve(workload, tuple(datasheet(flags).items()), time_limit_s, workers)
    reading = chip.evaluate(solved.mapping)
    return {
        "chip": f"{name}-{workload}",
        "workload": workload,
        "flags": shlex.join(flags),
        "compiler_us": chip.baseline_latency_s * 1e6,
        "datasheet_us": float(reading.latency_s[0]) * 1e6,
        "datasheet_valid": bool(reading.valid[0]),
        "datasheet_speedup": float(reading.speedup[0]),
        "solve_s": solve_s,
        "proven": bool(solved.proven),
        "mapping": solved.mapping.tolist(),
    }


def ea_best(name: str, workload: str, seed: int, budget: int, out: Path) -> float:
    """Plain EA's best speedup over the compiler after ``budget`` board runs on ``name``
    (the run ``OUT/<name>-<workload>/seed<S>``, made here unless it exists)."""
    flags = flags_of(name)
    run = out / f"{name}-{workload}" / f"seed{seed}"
    best = run / "best_mapping.json"
    if not best.exists():
        command = shlex.join([sys.executable, str(CHIP), *flags])
        argv = [  # egrl-train of this checkout
            sys.executable,
            "-m",
            "egrl.cli.train",
            "hwmodel=external",
            f"hwmodel.params.command='{command}'",
            f"workload={workload}",
            "agent=ea",
            f"budget={budget}",
            f"seed={seed}",
            "progress=false",
            f"hydra.run.dir={run}",
        ]
        log.info("%s seed %d: %s", name, seed, shlex.join(argv))
        subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
    return float(json.loads(best.read_text())["speedup"])


def table(rows: list[dict], budget: int) -> str:
    """A markdown table, one chip a row; speedups over the chip compiler's map."""
    head = (
        "| chip | compiler's map (µs) | solved datasheet map, read once | solve (s) "
        f"| EA at {budget}, per seed | datasheet / best known |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        ea = r.get("ea", [])
        best = max([r["datasheet_speedup"], 1.0, *ea])
        lines.append(
            f"| {r['chip']} | {r['compiler_us']:.1f} | {r['datasheet_speedup']:.4f}"
            + ("" if r["datasheet_valid"] else " (refused)")
            + f" | {r['solve_s']:.1f}{'' if r['proven'] else ' (not proven)'} | "
            + (", ".join(f"{s:.4f}" for s in ea) or "-")
            + f" | {r['datasheet_speedup'] / best:.1%} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chips", nargs="+", default=list(NAMED), choices=["study", *NAMED])
    p.add_argument("--workloads", nargs="+", default=["resnet50"], help="zoo names")
    p.add_argument("--time-limit", type=float, default=120.0, help="CP-SAT seconds per solve")
    p.add_argument("--workers", type=int, default=2, help="CP-SAT threads")
    p.add_argument("--ea-seeds", type=int, nargs="*", default=[], help="EA runs per chip")
    p.add_argument("--budget", type=int, default=400, help="board runs per EA run")
    p.add_argument("--out", type=Path, default=Path("runs/chip_effects"), help="EA runs")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = args.out.resolve()
    rows = []
    for workload in args.workloads:
        for name in args.chips:
            row = solved_datasheet(name, workload, args.time_limit, args.workers)
            row["ea"] = [ea_best(name, workload, s, args.budget, out) for s in args.ea_seeds]
            log.info("%s: %s", row["chip"], {k: v for k, v in row.items() if k != "mapping"})
            rows.append(row)
    print(f"{platform.node()}, {os.cpu_count()} CPUs, python {platform.python_version()}\n")
    print(table(rows, args.budget))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
