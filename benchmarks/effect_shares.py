"""Which of a chip's effects a map's speedup rests on: each map read on the chip, then on
the chip with one effect taken away at a time.

For a named chip of ``examples/external_chip.py`` (``--chip NAME``, docs/external.md,
"Chips that depart from the roofline") on a workload, the maps read are the chip
compiler's, the chip's datasheet (the study chips' NNP-I figures) solved exactly, and the
best map (``best_mapping.json``) of each run directory given. Each is read on the chip as
it is and on the chip without each of its effects (the effect's flag dropped from its
command line: ``--weight-prefetch``, ``--bank-conflicts``, ``--bandwidth-fraction``,
``--op-efficiency``, ``--half-bandwidth-kib``), as a speedup over that chip's own
compiler map. A map whose lead over the datasheet's map vanishes when an effect is taken
away found its speedup in that effect, which is then what a model of the chip must say.
Prints a markdown table.

    python benchmarks/effect_shares.py --chip stream --runs runs/stream-seed0
    python benchmarks/effect_shares.py --chip ops --workload resnet101 --runs R1 R2
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from egrl import make_env  # noqa: E402
from egrl.report.runs import mapping_from_dict  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHIP = ROOT / "examples" / "external_chip.py"
#: the chip script's named chips (``--chip NAME``), its ``CHIPS``
NAMED = runpy.run_path(str(CHIP))["CHIPS"]
#: the effects a chip's flags may name, and how many values each flag takes
EFFECTS = {
    "--weight-prefetch": 0,
    "--bank-conflicts": 1,
    "--bandwidth-fraction": 1,
    "--op-efficiency": 1,
    "--half-bandwidth-kib": 1,
}
#: the chip's datasheet as NNP-I figures (the study chips': SRAM 2 MiB, 50 tera-MACs/s,
#: NNP-I's defaults for the rest), as benchmarks/calibration.py gives it
DATASHEET = {"name": "nnpi", "sram_mib": 2, "peak_tops": 100}


def without(flags: tuple[str, ...], effect: str) -> list[str]:
    """``flags`` with ``effect`` and its values dropped."""
    kept, skip = [], 0
    for flag in flags:
        if skip:
            skip -= 1
        elif flag == effect:
            skip = EFFECTS[effect]
        else:
            kept.append(flag)
    return kept


def variants(chip: str) -> dict[str, list[str]]:
    """The chip's flags as it is, then without each of its effects, by label."""
    flags = tuple(NAMED[chip])
    out = {chip: list(flags)}
    out |= {f"without {e[2:]}": without(flags, e) for e in EFFECTS if e in flags}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chip", required=True, choices=sorted(NAMED))
    p.add_argument("--workload", default="resnet50", help="a zoo name")
    p.add_argument("--runs", nargs="*", type=Path, default=[], help="run directories")
    p.add_argument("--time-limit", type=float, default=60.0, help="the datasheet's solve, s")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    chips = {
        label: make_env(
            "external",
            args.workload,
            command=[sys.executable, str(CHIP), *flags],
            prior=DATASHEET,
            deterministic=True,
        )
        for label, flags in variants(args.chip).items()
    }
    chip = chips[args.chip]
    maps = {"the compiler's": chip.baseline_mapping}
    solved = chip.target.prior_solution(time_limit_s=args.time_limit)  # as agents pay it
    maps["the datasheet, solved"] = solved.mapping
    for run in args.runs:
        best = json.loads((run / "best_mapping.json").read_text(encoding="utf-8"))
        maps[f"best of {run}"] = mapping_from_dict(chip, best["mapping"], str(run))

    dram = chip.heads["weight"].index("DRAM")
    head = ["map", *chips, "weights in DRAM"]
    print(f"{args.chip}-{args.workload}, speedup over each chip's own compiler map:\n")
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for name, mapping in maps.items():
        mapping = np.asarray(mapping)
        cells = [f"{float(env.evaluate(mapping).speedup[0]):.4f}" for env in chips.values()]
        in_dram = f"{int((mapping[:, 0] == dram).sum())} of {len(mapping)}"
        print(f"| {name} | " + " | ".join(cells) + f" | {in_dram} |")
    print(f"\n{platform.processor() or platform.machine()}, Python {platform.python_version()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
