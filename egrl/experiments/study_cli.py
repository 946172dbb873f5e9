"""What the study scripts (``scripts/ablation.py``, ``chip_transfer.py``, ``mcm_study.py``,
``samples_study.py``, ``tpu_study.py``) share: their common options, their logging, and
the command line each quotes under its section of the results page."""

from __future__ import annotations

import argparse
import logging
import shlex
from collections.abc import Sequence
from pathlib import Path


def study_parser(doc: str) -> argparse.ArgumentParser:
    """A parser described by the first line of the script's docstring ``doc``, with
    ``--out`` (the study's directory, required)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the study's directory")
    return parser


def add_run_options(
    parser: argparse.ArgumentParser, seeds: int | None, n_jobs: int | None = 2, defaults: str = ""
) -> None:
    """``--seeds`` (0..N-1), ``--n-jobs`` and ``--set`` (Hydra overrides for every run).
    A default of ``None`` leaves the choice to the study (e.g. its smoke preset), which
    ``defaults`` then states in the help."""
    text = f"default {seeds}" if seeds is not None else defaults
    parser.add_argument("--seeds", type=int, default=seeds, help=f"seeds 0..N-1 ({text})")
    parser.add_argument("--n-jobs", type=int, default=n_jobs, help="runs in parallel")
    parser.add_argument("--set", nargs="*", default=[], help="Hydra overrides for every run")


def add_report_options(parser: argparse.ArgumentParser, figures: bool = True) -> None:
    """``--report-only``, ``--page`` (the results page) and, with ``figures``, ``--figures``."""
    parser.add_argument("--report-only", action="store_true", help="no runs, only the report")
    parser.add_argument("--page", type=Path, default=Path("docs/results.md"))
    if figures:
        parser.add_argument("--figures", type=Path, default=Path("docs/figures"))


def start_logging() -> None:
    """INFO records of every logger on stderr, as the studies print their progress."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def command_line(source: str, argv: Sequence[str]) -> str:
    """``source`` (e.g. ``python scripts/ablation.py``) and ``argv``, quoted for a shell."""
    return " ".join([source, *(shlex.quote(a) for a in argv)])
