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
import logging
import shlex
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


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the ablation's directory")
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    parser.add_argument("--budget", type=int, default=4000, help="paid samples per run")
    parser.add_argument("--n-jobs", type=int, default=2, help="runs in parallel")
    parser.add_argument("--optimum-time", type=float, default=60.0, help="CP-SAT s per problem")
    parser.add_argument("--set", nargs="*", default=[], help="Hydra overrides for every run")
    parser.add_argument("--report-only", action="store_true", help="no runs, only the report")
    parser.add_argument("--page", type=Path, default=Path("docs/results.md"))
    parser.add_argument("--figures", type=Path, default=Path("docs/figures"))
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
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
    command = "python scripts/ablation.py " + " ".join(shlex.quote(a) for a in argv)
    text = report_markdown(results, figures, args.seeds, [command], machine())
    write_section("ablation", text, source="python scripts/ablation.py", page=args.page)
    for r in results:
        for v in r.variants.values():
            print(f"{r.problem} {v.variant}: final {v.final.mean():.4f} over {len(v.runs)} runs")
    print(f"{args.page} written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
