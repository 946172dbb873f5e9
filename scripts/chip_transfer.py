"""From cost model to chip: pretrain EGRL on the NNP-I model, fine-tune it on another chip
through the ``external`` protocol, against EGRL from scratch on that chip; into the
``chip-transfer`` section of docs/results.md.

    python scripts/chip_transfer.py --out multirun/chip-transfer            # 5 seeds
    python scripts/chip_transfer.py --out multirun/chip-transfer --seeds 2 --budget 300 \\
        --pretrain-budget 300
    python scripts/chip_transfer.py --out multirun/chip-transfer --report-only

The chip is ``examples/external_chip.py`` with ``--chip-args`` (default: shared bandwidth,
2 MiB SRAM, 50 tera-MACs/s), or any ``--command`` speaking ``egrl-external/1``. Every
multirun runs with ``continue_runs=true``, so the same command continues a killed study
(``egrl/experiments/chip_transfer.py``). The figure goes to
``docs/figures/chip_transfer_<workload>.png``. Run from the repository root.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from egrl.experiments.chip_transfer import (
    DEFAULT_CHIP_ARGS,
    TransferConfig,
    analyse,
    plot_transfer,
    report_markdown,
    run_transfer,
)
from egrl.experiments.results_page import machine
from egrl.experiments.results_sections import write_section
from egrl.experiments.samples import relative_link
from egrl.experiments.study_cli import (
    add_report_options,
    add_run_options,
    command_line,
    start_logging,
    study_parser,
)

SOURCE = "python scripts/chip_transfer.py"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = study_parser(__doc__)
    parser.add_argument("--workload", default="resnet50", help="pretraining workload (NNP-I)")
    parser.add_argument(
        "--chip-workload", default=None, help="workload on the chip (default: --workload)"
    )
    parser.add_argument("--pretrain-budget", type=int, default=4000, help="NNP-I measurements")
    parser.add_argument("--budget", type=int, default=1000, help="chip measurements per run")
    add_run_options(parser, seeds=5)
    parser.add_argument(
        "--chip-args",
        default=shlex.join(DEFAULT_CHIP_ARGS),
        help="options of examples/external_chip.py, one string (default: %(default)s)",
    )
    parser.add_argument("--command", default=None, help="another chip's command line instead")
    add_report_options(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    start_logging()
    try:
        cfg = TransferConfig(
            out=args.out,
            workload=args.workload,
            chip_workload=args.chip_workload,
            pretrain_budget=args.pretrain_budget,
            budget=args.budget,
            seeds=args.seeds,
            n_jobs=args.n_jobs,
            chip_args=tuple(shlex.split(args.chip_args)),
            command=args.command,
            overrides=list(args.set),
        )
    except ValueError as err:
        print(f"chip_transfer: {err}", file=sys.stderr)
        return 2
    if not args.report_only:
        run_transfer(cfg)
    result = analyse(cfg)
    if result is None:
        print(f"chip_transfer: no finished chip run under {cfg.out}", file=sys.stderr)
        return 1
    png = plot_transfer(result, args.figures / f"chip_transfer_{cfg.target_workload}.png")
    command = command_line(SOURCE, argv)
    text = report_markdown(result, relative_link(png, args.page), args.seeds, [command], machine())
    write_section("chip-transfer", text, source=SOURCE, page=args.page)
    for mode in result.modes.values():
        print(f"{mode.mode}: final {mode.final.mean():.4f} over {len(mode.runs)} chip runs")
    print(f"{args.page} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
