"""Studies made of many runs: aggregation, Figure 3, tables.

>>> from egrl.experiments import aggregate
>>> agg = aggregate(["multirun/compare/20261121-101500"], out_dir="results/compare")
>>> agg.groups[0].mean, agg.groups[0].std, agg.optimum["resnet50"].speedup

Runs are read from their directories (``config.yaml`` and ``metrics.csv`` only), so a
study can be aggregated while it runs, after some runs failed, or from several sweeps.
"""

from egrl.experiments.aggregate import Aggregate, aggregate
from egrl.experiments.curves import mean_band, step_values, write_curves
from egrl.experiments.launch import SweepRecord, launch, sweep_record
from egrl.experiments.optimum import OptimumInfo, optimum_speedups
from egrl.experiments.runs import Problem, Run, RunSet, collect_runs, load_run
from egrl.experiments.summary import GroupStats, summarize, swept_keys

__all__ = [
    "Aggregate",
    "GroupStats",
    "OptimumInfo",
    "Problem",
    "Run",
    "RunSet",
    "SweepRecord",
    "aggregate",
    "collect_runs",
    "launch",
    "load_run",
    "mean_band",
    "optimum_speedups",
    "step_values",
    "summarize",
    "swept_keys",
    "sweep_record",
    "write_curves",
]
