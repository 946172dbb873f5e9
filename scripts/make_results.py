"""Regenerate docs/results.md (and docs/figures/figure3_*.png) from fresh runs.

    python scripts/make_results.py                       # the paper-scale study (long)
    python scripts/make_results.py --agents random greedy-dp sa ga ea \\
        --workloads resnet50 resnet101 --seeds 2 --budget 1000 --n-jobs 2
    python scripts/make_results.py --from multirun/results/20261121-101500   # page only
    python scripts/make_results.py --from SWEEP --zero-shot    # + egrl-transfer of EGRL runs
    python scripts/make_results.py --sweep-dir SWEEP           # finish a killed study

Without ``--from`` it launches ``egrl-train -m experiment=compare`` with the chosen agents,
workloads, seeds and budget (Hydra multirun, joblib launcher, one torch thread per run)
into ``multirun/results/<date-time>``, then aggregates it (``<first sweep>/aggregate/``)
and writes the page. ``--from`` takes one or more finished sweeps instead (e.g. a cheap
sweep of the baselines on every workload and a smaller one of the learned agents); the
page lists the ``egrl-train`` command of each. ``--sweep-dir`` names the sweep directory;
run again with the same arguments after an interruption, it skips the finished runs and
resumes the interrupted ones from their checkpoints (``continue_runs=true``). The page
states the budget and seeds it was made with. Run from the repository root.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from egrl.experiments import aggregate, launch, read_transfer, sweep_record
from egrl.experiments.launch import default_sweep_dir
from egrl.experiments.results_page import render
from egrl.experiments.results_sections import other_sections

PAPER_AGENTS = ["egrl", "ea", "pg", "greedy-dp", "random", "sa", "ga"]
PAPER_WORKLOADS = ["resnet50", "resnet101", "bert-base"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=PAPER_AGENTS)
    parser.add_argument("--workloads", nargs="+", default=PAPER_WORKLOADS)
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1")
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--n-jobs", type=int, default=2, help="runs in parallel")
    parser.add_argument("--set", nargs="*", default=[], help="more Hydra overrides (key=value)")
    parser.add_argument(
        "--sweep-dir", type=Path, help="where to run the study (default multirun/results/<now>)"
    )
    parser.add_argument("--from", dest="roots", nargs="+", type=Path, help="existing sweeps")
    parser.add_argument(
        "--transfer", nargs="+", type=Path, default=[], help="egrl-transfer outputs"
    )
    parser.add_argument(
        "--zero-shot",
        action="store_true",
        help="run egrl-transfer on every finished egrl run, targets: the study's other workloads",
    )
    parser.add_argument("--page", type=Path, default=Path("docs/results.md"))
    parser.add_argument("--figures", type=Path, default=Path("docs/figures"))
    parser.add_argument("--optimum-time", type=float, default=600.0)
    parser.add_argument("--optimum-workers", type=int, default=2, help="solver threads")
    return parser.parse_args(argv)


def study_overrides(args: argparse.Namespace) -> list[str]:
    return [
        f"agent={','.join(args.agents)}",
        f"workload={','.join(args.workloads)}",
        f"seed=range({args.seeds})",
        f"budget={args.budget}",
        "continue_runs=true",
        *args.set,
    ]


def zero_shot(agg) -> list[Path]:
    """``egrl-transfer RUN --targets <the study's other workloads>`` for every egrl run."""
    from egrl.transfer import evaluate_run

    out = []
    for run in agg.runs:
        targets = [w for w in agg.workloads if w != run.workload]
        if run.agent == "egrl" and targets:
            out.append(evaluate_run(run.path, targets)["csv"])
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    command = "python scripts/make_results.py " + " ".join(shlex.quote(a) for a in argv)
    if args.roots:
        roots = args.roots
    else:
        sweep_dir = args.sweep_dir or default_sweep_dir("results")
        root, _ = launch("compare", study_overrides(args), sweep_dir, args.n_jobs)
        roots = [root]
    agg = aggregate(
        roots,
        out_dir=roots[0] / "aggregate",
        optimum_time_s=args.optimum_time,
        optimum_workers=args.optimum_workers,
        figure_dir=args.figures,
    )
    records = [r for r in map(sweep_record, roots) if r is not None]
    sources = [str(p) for p in args.transfer]
    if args.zero_shot:
        sources += [str(p) for p in zero_shot(agg)]
    transfer = read_transfer(sources) if sources else None
    args.page.parent.mkdir(parents=True, exist_ok=True)
    kept = other_sections(args.page)  # the other studies' sections stay on the page
    args.page.write_text(
        render(agg, args.page, records, command, transfer, sources).rstrip("\n") + "\n" + kept,
        encoding="utf-8",
    )
    print(f"{args.page} written from {len(agg.runs)} runs ({len(agg.problems)} left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
