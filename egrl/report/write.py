"""Write a run's figures: ``umap.png`` (Figure 5), ``transitions.png`` and ``maps.png`` (Figure 6)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from egrl.report.runs import RunArtifacts
from egrl.report.transitions import plot_maps, plot_transitions
from egrl.report.umap_plot import UmapPanel, plot_umap, umap_panel

log = logging.getLogger(__name__)

REPORT_DIR = "report"
COMPARISON_FILE = "umap_runs.png"


@dataclass
class ReportOptions:
    """Thresholds and sizes of a report.

    Attributes:
        max_maps: most distinct maps projected per run (seeded subsample; best maps kept).
        competitive_tol: compiler-competitive means valid with ``|speedup - 1| <= tol``.
        best_within: best maps are valid maps within this fraction of the best speedup.
        top: if set, the best maps are the ``top`` fastest distinct valid maps instead.
        seed: seed of the subsample and of UMAP.
        umap: draw Figure 5 (needs umap-learn).
    """

    max_maps: int = 3000
    competitive_tol: float = 0.05
    best_within: float = 0.02
    top: int | None = None
    seed: int = 0
    umap: bool = True

    def __post_init__(self) -> None:
        if self.max_maps < 1:
            raise ValueError(f"max_maps must be >= 1, got {self.max_maps}")
        if self.competitive_tol < 0:
            raise ValueError(f"competitive_tol must be >= 0, got {self.competitive_tol}")
        if not 0 <= self.best_within < 1:
            raise ValueError(f"best_within must be in [0, 1), got {self.best_within}")
        if self.top is not None and self.top < 1:
            raise ValueError(f"top must be >= 1, got {self.top}")


@dataclass
class RunReport:
    """What :func:`write_run_report` wrote (``figures``) and left out (``skipped``: why)."""

    run: RunArtifacts
    figures: dict[str, Path] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    panel: UmapPanel | None = None


def write_run_report(run: RunArtifacts, out_dir: str | Path, options: ReportOptions) -> RunReport:
    """Write the figures of ``run`` into ``out_dir`` (created)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = RunReport(run)
    if options.umap:
        report.panel = umap_panel(
            run,
            max_maps=options.max_maps,
            competitive_tol=options.competitive_tol,
            best_within=options.best_within,
            top=options.top,
            seed=options.seed,
        )
        report.figures["umap"] = plot_umap([report.panel], out / "umap.png")
    if run.best_mapping is None:
        reason = "the run found no valid map"
        report.skipped.update(transitions=reason, maps=reason)
        log.warning("%s: %s; no transition figures", run.run_dir, reason)
    else:
        report.figures["transitions"] = plot_transitions(run, out / "transitions.png")
        report.figures["maps"] = plot_maps(run, out / "maps.png")
    return report


def write_comparison(reports: Sequence[RunReport], path: str | Path) -> Path:
    """The UMAP panels of several runs side by side."""
    panels = [r.panel for r in reports if r.panel is not None]
    return plot_umap(panels, path)
