"""Many runs read as one: the curves, tables and figures of a sweep (``egrl-experiment``).

>>> from egrl.aggregate import aggregate
>>> agg = aggregate(["multirun/compare/20261121-101500"], out_dir="results/compare")
>>> agg.groups[0].mean, agg.groups[0].std, agg.optimum["resnet50"].speedup

Runs are read from their directories (:mod:`egrl.runs`), so a sweep can be aggregated
while it runs, after some runs failed, or from several sweeps.
"""

from egrl.aggregate.aggregate import Aggregate, aggregate
from egrl.aggregate.curves import mean_band, step_values, write_curves
from egrl.aggregate.launch import SweepRecord, launch, sweep_record
from egrl.aggregate.optimum import OptimumInfo, optimum_speedups
from egrl.aggregate.summary import GroupStats, summarize, swept_keys

__all__ = [
    "Aggregate",
    "GroupStats",
    "OptimumInfo",
    "SweepRecord",
    "aggregate",
    "launch",
    "mean_band",
    "optimum_speedups",
    "step_values",
    "summarize",
    "swept_keys",
    "sweep_record",
    "write_curves",
]
