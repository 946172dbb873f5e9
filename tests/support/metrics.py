"""A run's ``metrics.csv`` rows without the wall-clock columns, so that two runs that
should be identical compare equal."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

from egrl.agents.base import SCREEN_TIMING_COLUMN, TIMING_COLUMNS
from egrl.agents.mbo.agent import FIT_PHASE, SOLVE_PHASE
from egrl.ledger import CHECK_PHASE

#: the wall-clock columns of metrics.csv (a screening run's ``t_screening``, a
#: model-based run's ``t_check`` and a physics-first run's ``t_fit`` and ``t_solve``)
TIMINGS = (
    *TIMING_COLUMNS,
    SCREEN_TIMING_COLUMN,
    *(f"t_{phase}" for phase in (CHECK_PHASE, FIT_PHASE, SOLVE_PHASE)),
)


def read_metrics(run_dir: Path, drop: Sequence[str] = TIMINGS) -> list[dict]:
    """metrics.csv rows without the columns ``drop``: by default the wall-clock ones, so
    that two runs that should be identical compare equal (``drop=()``: every column)."""
    with open(Path(run_dir) / "metrics.csv", newline="", encoding="utf-8") as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def untimed(run_dir: Path) -> list[dict]:
    """metrics.csv rows without the wall-clock columns and MuZero's ``moves_per_s``."""
    return read_metrics(run_dir, drop=(*TIMINGS, "moves_per_s"))


def deterministic_rows(agent) -> str:
    """An agent's metrics rows less their timings, as JSON (NaN compares equal to NaN
    there)."""
    rows = [{k: v for k, v in r.items() if k not in TIMINGS} for r in agent.rows]
    return json.dumps(rows, sort_keys=True)
