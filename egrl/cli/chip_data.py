"""``egrl-chip-data``: a chip's measurements in one file, for ``screen.init_from``.

egrl-chip-data --out chip.npz RUN_DIR [RUN_DIR ...]   # runs of one target, any workloads
egrl-train ... screen=forest screen.init_from=chip.npz   # the screen starts from them

The file holds, per run, the distinct maps it was answered and their rewards, with the
part of its config that says what was measured (hardware model and parameters, workload,
reward). ``screen.init_from`` reads it as it would read the runs, without their
checkpoints (which also hold the agents' state), so a chip's model of many earlier runs
starts in a fraction of the time, and the file can be shared without the run directories.
The runs must be of one target (the same hardware model, parameters and reward).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from egrl.screening.earlier import EarlierRunError, save_chip_data


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``egrl-chip-data``."""
    parser = argparse.ArgumentParser(prog="egrl-chip-data", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories of one target")
    parser.add_argument("--out", type=Path, required=True, help="the file to write (.npz)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.out.suffix != ".npz":
        print(f"egrl-chip-data: --out {args.out} is invalid: expected a .npz file", file=sys.stderr)
        return 2
    try:
        count = save_chip_data(args.runs, args.out)
    except EarlierRunError as exc:
        print(f"egrl-chip-data: {exc}", file=sys.stderr)
        return 2
    print(f"{count} maps of {len(args.runs)} runs in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
