"""The columns of a run's ``metrics.csv``: what every agent writes, and what a run adds.

One row per generation (a round of paid maps). ``iterations`` counts board runs (the
budget's unit: a chip read ``R`` times per map costs ``R``), ``proposals`` maps answered,
paid or not; the ``wall_s`` and ``t_*`` columns are wall-clock timings, the rest is a
deterministic function of the seed.
"""

from __future__ import annotations

from egrl import confirm
from egrl.screening.screen import SCREEN_COLUMNS
from egrl.timing import PHASES, SCREEN_PHASE

#: metrics.csv columns shared by every agent; agents may add their own (``extra_columns``)
METRIC_COLUMNS = (
    "generation",
    "iterations",
    "proposals",
    "wall_s",
    "best_reward",
    "best_speedup",
    "best_latency_s",
    "batch_best_reward",
    "batch_mean_reward",
    "batch_valid_fraction",
)
#: metrics.csv column of the distinct maps paid for, where ``iterations`` (board runs)
#: differs: a chip that reads each map several times, or a run that confirms its best
PAID_MAPS_COLUMN = "paid_maps"
#: the wall-clock columns: the run's and each phase's (:data:`egrl.timing.PHASES`)
TIMING_COLUMNS = ("wall_s", *(f"t_{phase}" for phase in PHASES))
#: a screening run's time fitting its model and choosing candidates, after the timings
SCREEN_TIMING_COLUMN = f"t_{SCREEN_PHASE}"


def metric_columns(
    extra: tuple[str, ...], confirms: bool, runs_are_not_maps: bool, screens: bool
) -> tuple[str, ...]:
    """metrics.csv's columns: :data:`METRIC_COLUMNS`, the agent's ``extra``, then
    :data:`PAID_MAPS_COLUMN` where board runs are not maps (a chip read ``R`` times, a
    confirmation, a kept map read again), a confirming run's ``confirmed_*`` columns, and
    the timings (a screening run's with :data:`SCREEN_COLUMNS` before them and
    :data:`SCREEN_TIMING_COLUMN` after)."""
    confirmed = confirm.COLUMNS if confirms else ()
    if confirms or runs_are_not_maps:
        confirmed = (PAID_MAPS_COLUMN, *confirmed)
    timings = TIMING_COLUMNS[1:]
    if screens:
        timings = SCREEN_COLUMNS + timings + (SCREEN_TIMING_COLUMN,)
    return METRIC_COLUMNS + extra + confirmed + timings
