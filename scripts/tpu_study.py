"""The TPU memory-mapping comparison (Wang et al. 2023: Table 2, Figure 5, Table 3,
Figure 6) in one command, into the ``tpu-study`` section of docs/results.md.

    python scripts/tpu_study.py --out multirun/tpu-study                        # 3 seeds, 300 s a run
    python scripts/tpu_study.py --out /tmp/tpu-study --seconds 60 --seeds 2 --page /tmp/tpu_results.md
    python scripts/tpu_study.py --out multirun/tpu-study --report-only          # page from what exists

Every (program, agent, seed) is one run of ``--seconds`` wall clock in its own process
(``egrl/experiments/tpu_study.py``); runs already in ``--out`` are not run again, so the
same command continues a killed study. Figures go to ``docs/figures/tpu_*.png``. Run from
the repository root.
"""

from __future__ import annotations

import argparse
import sys

from egrl.experiments.results_page import machine
from egrl.experiments.results_sections import write_section
from egrl.experiments.study_cli import (
    add_report_options,
    add_run_options,
    command_line,
    start_logging,
    study_parser,
)
from egrl.experiments.tpu_study import AGENTS, PROBLEMS, report, run_study

SOURCE = "python scripts/tpu_study.py"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = study_parser(__doc__)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS))
    add_run_options(parser, seeds=3)
    parser.add_argument("--seconds", type=float, default=300.0, help="wall clock per run")
    parser.add_argument(
        "--layout-problem", choices=list(PROBLEMS), help="program of the layout figure"
    )
    add_report_options(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    start_logging()
    if not args.report_only:
        run_study(
            args.out, args.problems, args.agents, args.seeds, args.seconds, args.n_jobs, args.set
        )
    command = command_line(SOURCE, argv)
    result = report(args.out, args.figures, args.page, command, machine(), args.layout_problem)
    write_section("tpu-study", result.text, source=SOURCE, page=args.page)
    print(result.text)
    print(f"{args.page} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
