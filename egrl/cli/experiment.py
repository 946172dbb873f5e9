"""``egrl-experiment``: sweeps of many runs (agents x workloads x seeds, settings).

    egrl-experiment run compare budget=1000 seed='range(2)' --n-jobs 2
    egrl-experiment aggregate multirun/compare/20261121-101500 [--out DIR]

``run`` launches ``egrl-train -m experiment=PRESET OVERRIDES...`` (Hydra multirun with the
joblib launcher) and aggregates it; ``aggregate`` reads finished (or partly finished)
multirun directories and writes curves.csv, final.csv, summary.md, one Figure-3 PNG per
workload and optimum.json (:mod:`egrl.aggregate`). The results page is the studies'
business: ``python -m studies run compare`` (from a checkout).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from pathlib import Path

from egrl.aggregate.aggregate import Aggregate, aggregate
from egrl.aggregate.launch import launch
from egrl.aggregate.tables import final_table, problem_counts, problem_kind, problems_summary

log = logging.getLogger("egrl.experiment")


def _aggregate_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, help="output directory (default ROOT/aggregate)")
    parser.add_argument(
        "--group-by",
        nargs="+",
        metavar="KEY",
        help="dotted config keys to group by first, besides hardware model, workload and agent "
        "(keys in which the runs of a group still differ are always added)",
    )
    parser.add_argument(
        "--optimum-time",
        type=float,
        default=120.0,
        help="solver time limit per workload for the optimum line (s; cached in optimum.json)",
    )
    parser.add_argument(
        "--optimum-workers", type=int, default=2, help="solver threads of those solves"
    )
    parser.add_argument("--no-optimum", action="store_true", help="do not solve missing optima")
    parser.add_argument(
        "--no-figures", action="store_true", help="write the tables only, no Figure-3 PNGs"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="egrl-experiment", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (INFO level)")
    sub = parser.add_subparsers(
        dest="command_name", required=True, help="what to do ('COMMAND -h' for its options)"
    )

    agg = sub.add_parser("aggregate", help="aggregate multirun/run directories")
    agg.add_argument(
        "roots", nargs="+", type=Path, help="multirun or run directories (searched below)"
    )
    _aggregate_options(agg)

    run = sub.add_parser("run", help="launch egrl-train -m experiment=PRESET, then aggregate")
    run.add_argument(
        "preset", help="configs/experiment/<preset>.yaml (compare, sweep-population...)"
    )
    run.add_argument(
        "overrides", nargs="*", help="Hydra overrides, e.g. budget=1000 seed='range(2)'"
    )
    run.add_argument("--n-jobs", type=int, help="runs in parallel (default: the preset's)")
    run.add_argument("--sweep-dir", type=Path, help="default multirun/<preset>/<date-time>")
    _aggregate_options(run)
    return parser


def _aggregate(args, roots: list[Path]) -> Aggregate:
    out = args.out or roots[0] / "aggregate"
    return aggregate(
        roots,
        out_dir=out,
        keys=args.group_by,
        optimum_time_s=args.optimum_time,
        solve_optimum=not args.no_optimum,
        optimum_workers=args.optimum_workers,
        figures=not args.no_figures,
    )


#: runs left out that are listed one by one on the terminal, per kind (summary.md has all)
LISTED = 5


def left_out_lines(problems, limit: int = LISTED) -> list[str]:
    """The runs left out for the terminal: the first ``limit`` of each kind, then how
    many more (summary.md lists them all)."""
    lines, seen = [], Counter()
    for p in problems:
        kind = problem_kind(p)
        seen[kind] += 1
        if seen[kind] <= limit:
            lines.append(f"  {p}")
    lines += [
        f"  ... and {n - limit} more {kind}" for kind, n in problem_counts(problems) if n > limit
    ]
    return lines


def _report(agg: Aggregate) -> None:
    same = agg.constant
    if same:
        print("same in every group: " + ", ".join(f"{k}={v}" for k, v in same.items()) + "\n")
    print(final_table(agg.groups, agg.optimum))
    if agg.problems:
        print(f"\n{problems_summary(agg.problems)}:")
        print("\n".join(left_out_lines(agg.problems)))
    print(f"\noutputs in {agg.out_dir}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s"
    )
    if args.command_name == "run":
        root, status = launch(args.preset, args.overrides, args.sweep_dir, args.n_jobs)
        agg = _aggregate(args, [root])
        _report(agg)
        return status
    _report(_aggregate(args, args.roots))
    return 0


if __name__ == "__main__":
    sys.exit(main())
