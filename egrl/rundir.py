"""The files of a run directory: their names, and reading and writing them.

A run directory is what ``egrl-train`` (alone or as one job of a multirun) and
``egrl-transfer pretrain`` write::

    config.yaml             the resolved config                 (write_config / read_config)
    metrics.csv             one row per generation               (append_metrics / read_metrics_rows)
    evaluations.csv         one row per answered map, if asked   (append_evaluations / read_evaluations)
    best_mapping.json       the best map and how it was found    (write_best_map / read_best_map)
    speedup.png             best speedup against iterations
    checkpoints/gen_XXXXXX/ the state to resume from             (egrl.checkpoint)
    policies/iter_XXXXXX.safetensors  GNN policy snapshots       (policies.snapshot)
    transfer/transfer.csv   zero-shot transfer results (pretraining, egrl-transfer evaluate)
    .hydra/overrides.yaml   the command-line overrides (Hydra)

The measure cache (:mod:`egrl.measure_cache`) has no file of its own: it is saved in
each checkpoint. :class:`RunDir` names every path and reads and writes the files in the
formats they have always had, so existing run directories stay readable.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

import workloads
from egrl.checkpoint import (
    SKELETON_FILE,
    list_checkpoints,
    load_latest,
    prune_checkpoints,
    save_state,
)

if TYPE_CHECKING:
    from omegaconf import DictConfig

#: the resolved config of a run
CONFIG_FILE = "config.yaml"
#: one row per generation (``egrl.agents.base.METRIC_COLUMNS`` and the agent's own)
METRICS_FILE = "metrics.csv"
#: one row per answered map, written when the run asks for it (``record_evaluations``)
EVALUATIONS_FILE = "evaluations.csv"
#: the columns of every evaluations.csv row; the values a target reports beside the
#: latency (``hwmodels.base.Target.map_values``, e.g. ``game_return``) follow them
EVALUATION_COLUMNS = (
    "proposal",
    "generation",
    "iterations",
    "paid",
    "wall_s",
    "source",
    "valid",
    "reward",
    "speedup",
    "latency_s",
)
#: the best map found, keyed by unit name, with how and when it was found
BEST_FILE = "best_mapping.json"
#: the best-speedup curve
SPEEDUP_PLOT = "speedup.png"
#: checkpoints ``gen_XXXXXX`` (:mod:`egrl.checkpoint`)
CHECKPOINTS_DIR = "checkpoints"
#: policy snapshots ``iter_XXXXXX.safetensors`` (:mod:`policies.snapshot`)
POLICIES_DIR = "policies"
SNAPSHOT_GLOB = "iter_*.safetensors"
#: zero-shot transfer outputs (``transfer.csv``, ``transfer.png``, ``transfer.md``)
TRANSFER_DIR = "transfer"
TRANSFER_CSV = "transfer.csv"
#: Hydra's record of the command-line overrides of a run
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"
#: sub-directories of a run that never hold runs themselves
SUBDIRS = frozenset({CHECKPOINTS_DIR, POLICIES_DIR, ".hydra", "figures"})


def workload_label(name: str) -> str:
    """A workload's name for a directory or a file: a zoo name as it is, a workload file by
    its file name, ending included (``models/mynet.onnx`` -> ``mynet.onnx``), so runs of
    ``mynet.onnx`` and ``mynet.json.gz`` land apart."""
    if not workloads.zoo.is_path(name):
        return str(name)
    return Path(str(name)).name


def append_metrics_row(path: Path, columns: tuple[str, ...], row: Mapping) -> None:
    """Append one row to a metrics CSV, writing the header first if the file is new.

    An existing file keeps its own header (a run resumed by a newer version writes the
    columns it had, in its order; a column it lacks is left out of its rows).
    """
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        with open(path, newline="", encoding="utf-8") as f:
            columns = tuple(next(csv.reader(f), columns))
    with open(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def is_run_dir(path: str | Path) -> bool:
    """``path`` holds a run: a config, metrics or a Hydra record."""
    path = Path(path)
    return (
        (path / CONFIG_FILE).exists()
        or (path / METRICS_FILE).exists()
        or (path / OVERRIDES_FILE).exists()
    )


def is_checkpoint(path: str | Path) -> bool:
    """``path`` is one checkpoint directory (it holds ``state.json``)."""

    return (Path(path) / SKELETON_FILE).is_file()


def snapshot_name(iterations: int) -> str:
    """The file name of the policy snapshot taken after ``iterations`` evaluations."""
    return f"iter_{int(iterations):06d}.safetensors"


def checkpoint_name(generation: int) -> str:
    """The directory name of the checkpoint written after ``generation``."""
    return f"gen_{int(generation):06d}"


@dataclass(frozen=True)
class RunDir:
    """One run directory: the path of each of its files, and their readers and writers."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    # ------------------------------------------------------------------ names
    @property
    def config(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def evaluations(self) -> Path:
        return self.path / EVALUATIONS_FILE

    @property
    def best_map(self) -> Path:
        return self.path / BEST_FILE

    @property
    def speedup_plot(self) -> Path:
        return self.path / SPEEDUP_PLOT

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    @property
    def policies(self) -> Path:
        return self.path / POLICIES_DIR

    @property
    def overrides(self) -> Path:
        return self.path / OVERRIDES_FILE

    @property
    def transfer_dir(self) -> Path:
        return self.path / TRANSFER_DIR

    @property
    def transfer_csv(self) -> Path:
        return self.transfer_dir / TRANSFER_CSV

    def checkpoint(self, generation: int) -> Path:
        """The checkpoint directory written after ``generation``."""
        return self.checkpoints / checkpoint_name(generation)

    def snapshot(self, iterations: int) -> Path:
        """The policy snapshot taken after ``iterations`` evaluations."""
        return self.policies / snapshot_name(iterations)

    def is_run_dir(self) -> bool:
        """The directory holds a run (:func:`is_run_dir`)."""
        return is_run_dir(self.path)

    # ----------------------------------------------------------------- config
    def write_config(self, cfg: Any, resolve: bool = True) -> Path:
        """Write ``cfg`` (a DictConfig or a plain mapping) as ``config.yaml``."""
        from omegaconf import OmegaConf  # start-up time: ``egrl-report`` loads no omegaconf

        self.config.write_text(OmegaConf.to_yaml(cfg, resolve=resolve), encoding="utf-8")
        return self.config

    def read_config(self) -> dict:
        """``config.yaml`` as a plain nested dict, as YAML reads it (interpolations kept).

        Raises:
            FileNotFoundError: there is no ``config.yaml``.
            yaml.YAMLError: it is not YAML.
        """
        return yaml.safe_load(self.config.read_text(encoding="utf-8")) or {}

    def config_node(self) -> DictConfig:
        """``config.yaml`` as an OmegaConf config (to merge, or resolve interpolations)."""
        from omegaconf import OmegaConf  # start-up time

        return OmegaConf.load(self.config)

    def resolved_config(self) -> dict:
        """``config.yaml`` as a plain nested dict with its interpolations resolved."""
        from omegaconf import OmegaConf  # start-up time

        return OmegaConf.to_container(self.config_node(), resolve=True)

    def read_overrides(self) -> list[str]:
        """``.hydra/overrides.yaml`` as written (``key=value`` items); empty if absent."""
        if not self.overrides.exists():
            return []
        return [str(item) for item in yaml.safe_load(self.overrides.read_text("utf-8")) or []]

    # ---------------------------------------------------------------- metrics
    def append_metrics(self, columns: tuple[str, ...], row: Mapping) -> None:
        """Append one row to ``metrics.csv`` (:func:`append_metrics_row`)."""
        append_metrics_row(self.metrics, columns, row)

    def clear_metrics(self) -> None:
        """Remove ``metrics.csv`` (rows of an attempt that is started again)."""
        self.metrics.unlink(missing_ok=True)

    def rewrite_metrics(self, columns: tuple[str, ...], rows: list[Mapping]) -> None:
        """``metrics.csv`` anew with ``rows`` (a resumed run's, from its checkpoint)."""
        self.clear_metrics()
        for row in rows:
            self.append_metrics(columns, row)

    def read_metrics_rows(self) -> list[dict[str, str]]:
        """Every row of ``metrics.csv`` as strings keyed by column."""
        with open(self.metrics, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    # ------------------------------------------------------------ evaluations
    def append_evaluations(self, columns: tuple[str, ...], rows: list[Mapping]) -> None:
        """Append rows (one per answered map) to ``evaluations.csv``, header first if new."""
        if not rows:
            return
        new = not self.evaluations.exists() or self.evaluations.stat().st_size == 0
        with open(self.evaluations, "a", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerows(rows)

    def truncate_evaluations(self, proposals: int) -> None:
        """Keep the rows of the first ``proposals`` answered maps (a run resumed from a
        checkpoint answers the later ones again); nothing to do without the file."""
        if not self.evaluations.exists():
            return
        with open(self.evaluations, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = tuple(reader.fieldnames or ())
            rows = [r for r in reader if int(r["proposal"]) <= proposals]
        self.evaluations.unlink()
        if columns:
            with open(self.evaluations, "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=columns)
                writer.writeheader()
                writer.writerows(rows)

    def read_evaluations(self) -> dict[str, np.ndarray]:
        """``evaluations.csv`` by column: ``source`` as str ``[R]``, the others float64 ``[R]``
        (in the order the maps were answered).

        Raises:
            FileNotFoundError: the run did not record its evaluations.
        """
        with open(self.evaluations, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = list(reader.fieldnames or ())
            rows = list(reader)
        return {
            c: np.array([r[c] for r in rows], dtype=str if c == "source" else np.float64)
            for c in columns
        }

    # --------------------------------------------------------------- best map
    def write_best_map(self, best: Mapping) -> Path:
        """Write ``best_mapping.json`` (one-space indented JSON)."""
        self.best_map.write_text(json.dumps(best, indent=1), encoding="utf-8")
        return self.best_map

    def read_best_map(self) -> dict | None:
        """``best_mapping.json`` as written, or None if the run has none."""
        if not self.best_map.exists():
            return None
        return json.loads(self.best_map.read_text(encoding="utf-8"))

    # ------------------------------------------------------------ checkpoints
    def list_checkpoints(self) -> list[Path]:
        """Checkpoints ``gen_XXXXXX`` (and leftover ``.old``), newest first."""
        return list_checkpoints(self.checkpoints)

    def latest_checkpoint(self) -> Path | None:
        """The newest complete ``checkpoints/gen_XXXXXX`` (its ``state.json`` written), or None.

        Nothing is loaded, verified or renamed (see :meth:`load_latest_checkpoint`).
        """
        done = sorted(p for p in self.checkpoints.glob("gen_??????") if is_checkpoint(p))
        return done[-1] if done else None

    def load_latest_checkpoint(self) -> tuple[Path, Any] | None:
        """``(path, state)`` of the newest intact checkpoint, or None if there is none.

        Damaged checkpoints are skipped and set aside (:func:`egrl.checkpoint.load_latest`).
        """
        return load_latest(self.checkpoints)

    def save_checkpoint(self, state: dict, generation: int, keep: int) -> Path:
        """Write ``state`` as the checkpoint after ``generation`` (atomically) and keep the
        newest ``keep`` checkpoints."""
        path = save_state(state, self.checkpoint(generation))
        prune_checkpoints(self.checkpoints, keep, path)
        return path

    # --------------------------------------------------------------- policies
    def snapshots(self) -> list[Path]:
        """The policy snapshot files ``policies/iter_*.safetensors``, sorted by name."""
        return sorted(self.policies.glob(SNAPSHOT_GLOB))


__all__ = [
    "BEST_FILE",
    "CHECKPOINTS_DIR",
    "CONFIG_FILE",
    "EVALUATIONS_FILE",
    "EVALUATION_COLUMNS",
    "METRICS_FILE",
    "OVERRIDES_FILE",
    "POLICIES_DIR",
    "SNAPSHOT_GLOB",
    "SPEEDUP_PLOT",
    "SUBDIRS",
    "TRANSFER_CSV",
    "TRANSFER_DIR",
    "RunDir",
    "append_metrics_row",
    "checkpoint_name",
    "is_checkpoint",
    "is_run_dir",
    "snapshot_name",
]
