"""The multi-chip paper's Figure 5 and Table 2 for this toolkit, in one command.

    python scripts/mcm_study.py --out multirun/mcm-study              # full study (long)
    python scripts/mcm_study.py --out /tmp/mcm-smoke --smoke           # pipeline check, minutes
    python scripts/mcm_study.py --out multirun/mcm-study --report-only # report from what exists

Steps (docs/mcm.md, "Studies"): ``egrl-transfer pretrain`` of one SAC learner on the 66
training graphs of mcm87 (hwmodel=mcm, reward=repaired), the snapshot with the best
validation geomean, its zero-shot maps on the 16 test graphs, random search, simulated
annealing, PG and EGRL from scratch and PG/EGRL fine-tuned from the snapshot (Hydra
multiruns), the contiguous DP and the CP-SAT optimum per test graph, then
``OUT/report/figure5.png`` and ``OUT/report/mcm_study.md``. Running the same command again
continues a killed study. Run from the repository root.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from egrl.experiments.mcm_pipeline import full_config, report, run_study, smoke_config
from egrl.experiments.results_sections import write_section
from egrl.experiments.study_cli import (
    add_run_options,
    command_line,
    start_logging,
    study_parser,
)

SOURCE = "python scripts/mcm_study.py"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = study_parser(__doc__)
    add_run_options(parser, seeds=None, n_jobs=None, defaults="default 5; smoke 2")
    parser.add_argument("--budget", type=int, help="paid samples per run (default 2000; smoke 60)")
    parser.add_argument("--pretrain-budget", type=int, help="default 20000; smoke 80")
    parser.add_argument("--snapshot-every", type=int, help="pretraining generations per snapshot")
    parser.add_argument("--optimum-time", type=float, help="CP-SAT seconds per test graph")
    parser.add_argument(
        "--scratch-agents", nargs="*", help="searches from scratch (default random sa pg egrl)"
    )
    parser.add_argument(
        "--finetune-agents", nargs="*", help="searches from the snapshot (default pg egrl)"
    )
    parser.add_argument("--reference", help="RL from scratch, for Table 2's reductions (pg)")
    parser.add_argument(
        "--pretrain-set",
        nargs="*",
        default=[],
        help="overrides of the pretraining only (samples=4)",
    )
    parser.add_argument("--smoke", action="store_true", help="2 test graphs, 2 seeds, tiny sizes")
    parser.add_argument("--report-only", action="store_true", help="no runs, only the report")
    parser.add_argument(
        "--page",
        type=Path,
        help="also put the report into the mcm-study section of this page (docs/results.md), "
        "its figure into docs/figures/mcm_figure5.png",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    start_logging()
    given = {
        "seeds": args.seeds,
        "budget": args.budget,
        "pretrain_budget": args.pretrain_budget,
        "snapshot_every": args.snapshot_every,
        "n_jobs": args.n_jobs,
        "optimum_time_s": args.optimum_time,
        "scratch_agents": None if args.scratch_agents is None else tuple(args.scratch_agents),
        "finetune_agents": None if args.finetune_agents is None else tuple(args.finetune_agents),
        "reference": args.reference,
    }
    kwargs = {k: v for k, v in given.items() if v is not None}
    cfg = (smoke_config if args.smoke else full_config)(args.out, **kwargs)
    cfg.overrides += args.set
    cfg.pretrain_overrides += args.pretrain_set
    command = command_line(SOURCE, argv)
    result = report(cfg, command) if args.report_only else run_study(cfg, command)
    for row in result.rows:
        print(f"{row.method}: geomean at end {row.final_mean:.4f} ({row.seeds} seeds)")
    print(
        f"{result.paths['md']} and {result.paths['png']} written ({len(result.problems)} left out)"
    )
    if args.page is not None:
        publish(result.paths, args.page)
        print(f"section mcm-study of {args.page} written")
    return 0


def publish(paths: dict, page: Path) -> None:
    """The report as the ``mcm-study`` section of ``page``, its figure beside the page's."""
    figure = page.parent / "figures" / "mcm_figure5.png"
    figure.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(paths["png"], figure)
    text = Path(paths["md"]).read_text(encoding="utf-8")
    text = text.replace("(figure5.png)", f"({figure.relative_to(page.parent).as_posix()})")
    write_section("mcm-study", text, source="python scripts/mcm_study.py --page", page=page)


if __name__ == "__main__":
    sys.exit(main())
