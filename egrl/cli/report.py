"""``egrl-report``: figures of the maps found by one or more runs.

    egrl-report runs/nnpi/resnet50/egrl/seed0-20261121-101500
    egrl-report RUN_A RUN_B RUN_C --out figures/       # plus umap_runs.png side by side
    egrl-report RUN --competitive-tol 0.02 --top 20 --max-maps 2000

Each run gets ``umap.png`` (EGRL Figure 5), ``transitions.png`` and ``maps.png``
(Figure 6) in ``RUN_DIR/report/``, or in ``--out`` (one sub-directory per run when
several are given). With several runs, ``umap_runs.png`` puts their UMAP panels side
by side (in ``--out``, else in the current directory). See ``docs/report.md``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from egrl.report import ReportOptions, load_artifacts, write_comparison, write_run_report
from egrl.report.write import COMPARISON_FILE, REPORT_DIR


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``egrl-report``."""
    defaults = ReportOptions()
    p = argparse.ArgumentParser(prog="egrl-report", description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories")
    p.add_argument(
        "--out", type=Path, default=None, help="output directory (default RUN_DIR/report)"
    )
    p.add_argument(
        "--max-maps",
        type=int,
        default=defaults.max_maps,
        help="most distinct maps projected per run (default %(default)s)",
    )
    p.add_argument(
        "--competitive-tol",
        type=float,
        default=defaults.competitive_tol,
        help="compiler-competitive: valid and |speedup - 1| <= this (default %(default)s)",
    )
    p.add_argument(
        "--best-within",
        type=float,
        default=defaults.best_within,
        help="best maps: within this fraction of the best speedup (default %(default)s)",
    )
    p.add_argument(
        "--top", type=int, default=None, help="best maps: the TOP fastest instead of --best-within"
    )
    p.add_argument("--seed", type=int, default=defaults.seed, help="subsample and UMAP seed")
    p.add_argument("--no-umap", action="store_true", help="skip the UMAP figure")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def output_dirs(run_dirs: list[Path], out: Path | None) -> list[Path]:
    """Where each run's figures go (distinct sub-directories of ``out`` for several runs)."""
    if out is None:
        return [d / REPORT_DIR for d in run_dirs]
    if len(run_dirs) == 1:
        return [out]
    names: list[str] = []
    for d in run_dirs:
        name = d.resolve().name or "run"
        names.append(name if name not in names else f"{name}-{len(names)}")
    return [out / n for n in names]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        options = ReportOptions(
            max_maps=args.max_maps,
            competitive_tol=args.competitive_tol,
            best_within=args.best_within,
            top=args.top,
            seed=args.seed,
            umap=not args.no_umap,
        )
        runs = [load_artifacts(d) for d in args.run_dirs]
    except (FileNotFoundError, ValueError) as exc:
        print(f"egrl-report: {exc}", file=sys.stderr)
        return 1
    reports = []
    for run, out in zip(runs, output_dirs(args.run_dirs, args.out)):
        report = write_run_report(run, out, options)
        reports.append(report)
        print(
            f"{run.run_dir}: {len(run.maps)} maps, {int(run.valid.sum())} valid, "
            f"best speedup {run.best_speedup:.4f}"
        )
        for name, path in report.figures.items():
            print(f"  {name}: {path}")
        for name, why in report.skipped.items():
            print(f"  {name}: skipped ({why})")
    if len(reports) > 1 and options.umap:
        path = write_comparison(reports, (args.out or Path.cwd()) / COMPARISON_FILE)
        print(f"UMAP of all runs: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
