"""The samples study (paid measurements to reach the compiler and the optimum, per agent and
start) in one command, into the ``samples`` section of docs/results.md.

    python scripts/samples_study.py --out multirun/samples                 # 5 seeds, budget 4000
    python scripts/samples_study.py --out multirun/samples --workloads nnpi/resnet50 \\
        --seeds 2 --budget 300 --agents ea sa random egrl
    python scripts/samples_study.py --out multirun/samples --report-only   # page from what exists

One Hydra multirun per problem and mode (``egrl/experiments/samples.py``), each with
``continue_runs=true``, so the same command continues a killed study. Figures go to
``docs/figures/samples_<hwmodel>_<workload>.png``. Run from the repository root.
"""

from __future__ import annotations

import argparse
import sys

from egrl.experiments.results_page import machine
from egrl.experiments.results_sections import write_section
from egrl.experiments.samples import (
    AGENTS,
    DEFAULT_PROBLEMS,
    MODES,
    analyse,
    figure_name,
    installed_agents,
    parse_problem,
    plan,
    plot_problem,
    relative_link,
    report_markdown,
    run_study,
)
from egrl.experiments.study_cli import (
    add_report_options,
    add_run_options,
    command_line,
    start_logging,
    study_parser,
)

SOURCE = "python scripts/samples_study.py"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = study_parser(__doc__)
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=list(DEFAULT_PROBLEMS),
        metavar="HWMODEL/WORKLOAD",
        help="problems, e.g. nnpi/resnet50 mcm/unet-l3-w32-c3 (default: the study's six)",
    )
    parser.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    add_run_options(parser, seeds=5)
    parser.add_argument("--budget", type=int, default=4000, help="paid measurements per run")
    parser.add_argument("--optimum-time", type=float, default=60.0, help="solver s per problem")
    add_report_options(parser)
    args = parser.parse_args(argv)
    try:
        args.problems = [parse_problem(w) for w in args.workloads]
    except ValueError as err:
        parser.error(str(err))
    if args.seeds < 1 or args.budget < 1:
        parser.error("--seeds and --budget must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    start_logging()
    if not args.report_only:
        agents = installed_agents(args.agents)
        groups = plan(
            args.out, args.problems, agents, args.seeds, args.budget, args.modes, args.set
        )
        run_study(groups, args.n_jobs)
    results = analyse(args.out, args.problems, args.modes, args.optimum_time)
    figures = {}
    for r in results:
        png = plot_problem(r, args.figures / figure_name(r.problem))
        figures[r.problem.key] = relative_link(png, args.page)
    command = command_line(SOURCE, argv)
    text = report_markdown(results, figures, args.seeds, [command], machine())
    write_section("samples", text, source=SOURCE, page=args.page)
    for r in results:
        for row in r.rows:
            print(
                f"{r.problem.label} {row.label}: final {row.final.mean():.4f} over {len(row.runs)} runs"
            )
    print(f"{args.page} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
