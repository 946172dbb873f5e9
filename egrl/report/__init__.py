"""Figures of the maps a run found (the EGRL paper's Figures 5 and 6).

>>> from egrl.report import load_artifacts, write_run_report, ReportOptions
>>> run = load_artifacts("runs/nnpi/resnet50/egrl/seed0-...")   # config, checkpoint, re-evaluated maps
>>> write_run_report(run, run.run_dir / "report", ReportOptions()).figures
{'umap': ..., 'transitions': ..., 'maps': ...}

``egrl-report RUN_DIR...`` (:mod:`egrl.cli.report`) does the same from the command
line; ``docs/report.md`` describes the figures.
"""

from egrl.report.runs import RunArtifacts, load_artifacts
from egrl.report.selection import MapSet, active_decisions, map_set, one_hot, subsample
from egrl.report.transitions import (
    plot_maps,
    plot_transitions,
    row_fractions,
    run_transitions,
    transition_counts,
)
from egrl.report.umap_plot import UmapPanel, embed, plot_umap, umap_panel
from egrl.report.write import ReportOptions, RunReport, write_comparison, write_run_report

__all__ = [
    "MapSet",
    "ReportOptions",
    "RunArtifacts",
    "RunReport",
    "UmapPanel",
    "active_decisions",
    "embed",
    "load_artifacts",
    "map_set",
    "one_hot",
    "plot_maps",
    "plot_transitions",
    "plot_umap",
    "row_fractions",
    "run_transitions",
    "subsample",
    "transition_counts",
    "umap_panel",
    "write_comparison",
    "write_run_report",
]
