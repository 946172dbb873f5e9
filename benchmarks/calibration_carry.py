"""A chip's calibration carried to a new workload: its first paid map against the best known.

A physics-first run writes its calibrated figures to ``calibration.json``
(docs/agents.md, "Physics first"); a run on another workload of the same chip starts
from them with ``hwmodel.params.prior="{name: nnpi, calibration: PATH}"``, and its first
paid map is the calibrated prior's solved map. For each ``CHIP=PATH`` given, this binds
the chip (``examples/external_chip.py`` with that chip's flags) to ``--workload``
through ``make_env("external", ...)`` twice, with the datasheet (the study chips'
figures) and with the calibration as its prior, solves each prior as an agent's first
map is solved (:meth:`~hwmodels.external.target.ExternalTarget.prior_solution`,
``--time-limit`` s) and reads each solved map once on the chip. Prints a markdown table
of speedups over the chip compiler's map, with ``--best CHIP=SPEEDUP`` (the best map
known on that chip and workload) beside them.

    python benchmarks/calibration_carry.py --workload resnet101 \\
        --calibration stream=multirun/physics-starts/chip-stream-resnet50/physics-anywhere2/seed0/calibration.json \\
        --best stream=1.2677
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's studies/ (not installed)

import workloads  # noqa: E402
from egrl import make_env  # noqa: E402
from studies.render import machine  # noqa: E402

log = logging.getLogger("calibration_carry")
CHIP = ROOT / "examples" / "external_chip.py"
#: the study chips' datasheet as NNP-I figures (configs/study/physics.yaml, ``prior``)
DATASHEET = {
    "name": "nnpi",
    "sram_mib": 2,
    "llc_mib": 24,
    "dram_gbps": 67.2,
    "llc_gbps": 680,
    "sram_gbps": 6800,
    "peak_tops": 100,
}
#: the flags of the study chip without a name (chip-resnet50, chip-resnet101, ...)
STUDY_CHIP = ("--shared-bandwidth", "--sram-kib", "2048", "--tmacs", "50")


def chip_command(chip: str) -> list[str]:
    """The chip's command line: ``study`` is the study chip, any other a ``--chip`` name."""
    flags = list(STUDY_CHIP) if chip == "study" else ["--chip", chip]
    return [sys.executable, str(CHIP), *flags]


def first_map(chip: str, workload: str, prior: dict, time_limit_s: float) -> dict:
    """``prior`` solved on ``chip`` and ``workload`` as an agent's first map, read once."""
    env = make_env("external", workloads.load(workload), command=chip_command(chip), prior=prior)
    solved = env.target.prior_solution(time_limit_s=time_limit_s)
    reading = env.evaluate(solved.mapping)
    return {
        "speedup": float(reading.speedup[0]),
        "valid": bool(reading.valid[0]),
        "status": solved.status,
        "solve_s": float(solved.solve_s),
    }


def pairs(items: list[str], what: str) -> dict[str, str]:
    """``CHIP=VALUE`` arguments as a dict (ValueError naming a malformed one)."""
    out = {}
    for item in items:
        chip, sep, value = item.partition("=")
        if not sep or not chip or not value:
            raise ValueError(f"--{what} takes CHIP=VALUE, got {item!r}")
        out[chip] = value
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="resnet101", help="the new workload (zoo name)")
    p.add_argument("--calibration", nargs="+", required=True, help="CHIP=PATH, ...")
    p.add_argument("--best", nargs="*", default=[], help="CHIP=SPEEDUP: the best known map")
    p.add_argument("--time-limit", type=float, default=60.0, help="seconds per solve")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        calibrations = pairs(args.calibration, "calibration")
        best = {k: float(v) for k, v in pairs(args.best, "best").items()}
    except ValueError as exc:  # a malformed pair, or a speed-up that is no number
        p.error(str(exc))
    rows = []
    for label, path in calibrations.items():
        chip = label.split(":")[0]  # CHIP:TAG names several calibrations of one chip
        prior = {"name": "nnpi", "calibration": str(Path(path).resolve())}
        row = {
            "chip": label,
            "calibration": path,
            "datasheet": first_map(chip, args.workload, DATASHEET, args.time_limit),
            "calibrated": first_map(chip, args.workload, prior, args.time_limit),
            "best_known": best.get(chip),
        }
        log.info("%s", json.dumps(row))
        rows.append(row)
    lines = [
        f"| chip ({args.workload}) | datasheet's map, read once | calibrated map, read once "
        "| best known | calibrated / best |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        d, c, b = r["datasheet"], r["calibrated"], r["best_known"]
        lines.append(
            f"| {r['chip']} | {d['speedup']:.4f} ({d['status']}, {d['solve_s']:.0f} s) | "
            f"{c['speedup']:.4f} ({c['status']}, {c['solve_s']:.0f} s) | "
            + (f"{b:.4f} | {c['speedup'] / b:.1%} |" if b else "- | - |")
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    sys.stdout.write("\n".join(lines) + f"\n\n{machine()}, load average {load:.1f}\n")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
