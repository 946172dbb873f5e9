"""The learner's ablation (EGRL, its paper learner, EA, the learner alone, no Boltzmann) in one
command, into the ``ablation`` section of docs/results.md.

    python scripts/ablation.py --out multirun/ablation                  # 5 seeds, budget 4000
    python scripts/ablation.py --out multirun/ablation --seeds 5 --budget 1000
    python scripts/ablation.py --out multirun/ablation --report-only    # page from what exists

One Hydra multirun per problem and variant (``egrl/experiments/ablation.py``), each with
``continue_runs=true``, so the same command continues a killed ablation. Figures go to
``docs/figures/ablation_<problem>.png``. Run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from egrl.experiments.ablation import (
    PROBLEMS,
    VARIANTS,
    analyse,
    plot_problem,
    report_markdown,
    run_ablation,
)
from egrl.experiments.results_page import machine
from egrl.experiments.results_sections import write_section
from egrl.experiments.study_cli import (
    add_report_options,
    add_run_options,
    command_line,
    start_logging,
    study_parser,
)

SOURCE = "python scripts/ablation.py"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = study_parser(__doc__)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--budget", type=int, default=4000, help="paid samples per run")
    add_run_options(parser, seeds=5)
    parser.add_argument("--optimum-time", type=float, default=60.0, help="CP-SAT s per problem")
    add_report_options(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    start_logging()
    if not args.report_only:
        run_ablation(
            args.out, args.problems, args.variants, args.seeds, args.budget, args.n_jobs, args.set
        )
    results = analyse(args.out, args.problems, args.variants, args.optimum_time)
    args.figures.mkdir(parents=True, exist_ok=True)
    figures = {}
    for r in results:
        png = plot_problem(r, args.figures / f"ablation_{r.problem}.png")
        figures[r.problem] = str(Path(png).resolve().relative_to(args.page.parent.resolve()))
    command = command_line(SOURCE, argv)
    text = report_markdown(results, figures, args.seeds, [command], machine())
    write_section("ablation", text, source=SOURCE, page=args.page)
    for r in results:
        for v in r.variants.values():
            print(f"{r.problem} {v.variant}: final {v.final.mean():.4f} over {len(v.runs)} runs")
    print(f"{args.page} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
