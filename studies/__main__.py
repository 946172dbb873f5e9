"""``python -m studies``: run a study, or write its report from its run directories.

    python -m studies list
    python -m studies run NAME [KEY=VALUE ...]
    python -m studies report NAME [KEY=VALUE ...]

``KEY=VALUE`` overrides the study's plan (``configs/study/NAME.yaml``): ``seeds=3``,
``budget=100``, ``out=/scratch/ablation``, ``launcher='[hydra/launcher=ray-tasks]'``.
"""

from __future__ import annotations

import argparse
import logging
import sys

from omegaconf.errors import OmegaConfBaseException

from studies import runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the studies and their plans")
    for name, text in (
        ("run", "run the unfinished runs, then the report"),
        ("report", "the report only"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("study", help="a plan under configs/study/")
        p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="changes to the plan")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "list":
        for name in runner.study_names():
            print(name)
        return 0
    try:
        if args.command == "report":
            print(runner.report(args.study, args.overrides))
            return 0
        return 1 if runner.run(args.study, args.overrides) else 0
    except (runner.StudyError, OmegaConfBaseException) as err:
        print(f"python -m studies: {err}".splitlines()[0], file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
