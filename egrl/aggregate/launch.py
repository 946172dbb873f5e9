"""Starting a study (``egrl-train -m experiment=PRESET ...``) and reading back how it was run.

Hydra writes ``multirun.yaml`` at the top of every sweep directory: the overrides typed
on the command line and the launcher's settings. :func:`sweep_record` reads them back so
that a report can state the exact command and the parallelism its wall times come from.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

MULTIRUN_FILE = "multirun.yaml"


@dataclass
class SweepRecord:
    """How one multirun was launched (from its ``multirun.yaml``)."""

    root: Path
    task_overrides: list[str] = field(default_factory=list)
    hydra_overrides: list[str] = field(default_factory=list)
    n_jobs: int | None = None
    launcher: str = ""

    @property
    def command(self) -> str:
        """The ``egrl-train -m`` command line that produced the sweep.

        ``hydra.sweep.dir`` is given as :attr:`root`, the path the sweep was read from,
        so a page made from relative paths states a command that runs from any checkout.
        """
        implied = ("hydra.mode=",)  # -m sets it
        hydra = [
            f"hydra.sweep.dir={self.root}" if o.startswith("hydra.sweep.dir=") else o
            for o in self.hydra_overrides
            if not o.startswith(implied)
        ]
        args = [*self.task_overrides, *hydra]
        return "egrl-train -m " + " ".join(shlex.quote(a) for a in args)


def sweep_record(root: str | Path) -> SweepRecord | None:
    """The record of the multirun at ``root``; None if ``root`` has no ``multirun.yaml``."""
    root = Path(root)
    path = root / MULTIRUN_FILE
    if not path.exists():
        return None
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    hydra = data.get("hydra") or {}
    overrides = hydra.get("overrides") or {}
    launcher = hydra.get("launcher") or {}
    n_jobs = launcher.get("n_jobs")
    return SweepRecord(
        root=root,
        task_overrides=[str(o) for o in overrides.get("task") or []],
        hydra_overrides=[str(o) for o in overrides.get("hydra") or []],
        n_jobs=int(n_jobs) if isinstance(n_jobs, int) else None,
        launcher=str(launcher.get("_target_", "")).rsplit(".", 1)[-1],
    )


def default_sweep_dir(preset: str, base: str | Path = "multirun") -> Path:
    """``multirun/<preset>/<date-time>`` (the presets' own default layout)."""
    return Path(base) / preset / time.strftime("%Y%m%d-%H%M%S")


def launch(
    preset: str,
    overrides: Sequence[str] = (),
    sweep_dir: str | Path | None = None,
    n_jobs: int | None = None,
    cwd: str | Path | None = None,
) -> tuple[Path, int]:
    """Run ``egrl-train -m experiment=<preset> <overrides>`` to completion.

    Args:
        preset: a name under ``configs/experiment/`` (``compare``, ``sweep-population`` ...).
        overrides: further Hydra overrides (``budget=1000``, ``agent=ea,random`` ...).
        sweep_dir: the multirun directory (default :func:`default_sweep_dir`).
        n_jobs: parallel runs of the joblib launcher (default: the preset's).
        cwd: working directory of the run (relative paths resolve against it).

    Returns:
        The sweep directory and the exit status (non-zero if any run failed; the runs that
        finished are in the directory all the same).
    """
    sweep_dir = Path(sweep_dir) if sweep_dir is not None else default_sweep_dir(preset)
    cmd = [
        sys.executable,
        "-m",
        "egrl.cli.train",
        "-m",
        f"experiment={preset}",
        *overrides,
        f"hydra.sweep.dir={sweep_dir}",
    ]
    if n_jobs is not None:
        cmd.append(f"hydra.launcher.n_jobs={int(n_jobs)}")
    log.info("launching %s", " ".join(shlex.quote(c) for c in cmd))
    status = subprocess.run(cmd, cwd=cwd, check=False).returncode
    if status != 0:
        log.warning("egrl-train -m exited with status %d: some runs failed", status)
    root = sweep_dir if sweep_dir.is_absolute() or cwd is None else Path(cwd) / sweep_dir
    return root, status
