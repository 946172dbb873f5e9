"""Experiment trackers as run callbacks: the ``logger`` config group of ``egrl-train``.

    egrl-train logger=csv            # the default: metrics.csv, config.yaml, PNGs (as always)
    egrl-train logger=tensorboard    # also TensorBoard event files in RUN_DIR/tensorboard
    egrl-train logger=mlflow         # also an MLflow run in the local store ./mlruns

Every logger records, beside the run directory's own files, each ``metrics.csv`` row (step:
the paid measurements so far, the x axis of ``speedup.png``), the run's resolved config,
and at the end its figures (``*.png``) and ``best_mapping.json``. Nothing is sent over the
network: TensorBoard writes files, and MLflow is given a local store only (``file:`` or
``sqlite:``), with its telemetry switched off. Both are extras (``pip install
'egrl[tensorboard]'``, ``'egrl[mlflow]'``), imported only when asked for.

``logger.callbacks`` adds a user's own :class:`egrl.callbacks.Callback` objects, each a
Hydra ``_target_`` node: ``'+logger.callbacks=[{_target_: mypkg.PrintBest}]'``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hydra.utils import instantiate

from egrl.callbacks import Callback, RunView
from egrl.rundir import BEST_FILE, CONFIG_FILE, METRICS_FILE

log = logging.getLogger(__name__)

#: the options of the ``logger`` group (``configs/logger/``)
LOGGERS = ("csv", "tensorboard", "mlflow")
#: the package each logger needs, and the extra that installs it
PACKAGES = {"tensorboard": ("tensorboard", "tensorboard"), "mlflow": ("mlflow", "mlflow")}
#: tracking URIs of a local MLflow store (anything else would send data over a network)
LOCAL_SCHEMES = ("file:", "sqlite:")
#: the file of a run directory that holds its MLflow run id (a resumed run continues it)
MLFLOW_RUN_FILE = "mlflow_run_id"
TENSORBOARD_DIR = "tensorboard"


def numeric_metrics(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row (booleans as 0/1; NaN, text and None left out)."""
    out = {}
    for key, value in row.items():
        if isinstance(value, bool):
            value = float(value)
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out[key] = number
    return out


def flat_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as ``{"a.b": "value"}`` (values as text, lists as JSON)."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat_config(value, f"{name}."))
        elif isinstance(value, (list, tuple, Mapping)):
            out[name] = json.dumps(value, default=str)
        else:
            out[name] = str(value)
    return out


def run_config(agent: RunView, config: Mapping | None) -> dict:
    """The config a logger records: the one it was given (``egrl-train``'s resolved config),
    else the agent's :class:`~egrl.config.TrainConfig` with the target and workload names."""
    if config is not None:
        return dict(config)
    return {
        **asdict(agent.cfg),
        "hwmodel": {"name": type(agent.env.target).__name__},
        "workload": {"name": agent.env.workload.name},
    }


def figures(run_dir: Path | None) -> list[Path]:
    """The run's figures (``*.png`` at the top of its directory), sorted."""
    return sorted(run_dir.glob("*.png")) if run_dir is not None else []


def missing_package(name: str) -> str | None:
    """Why logger ``name`` cannot run here (its package is not installed), or None."""
    if name not in PACKAGES:
        return None
    module, extra = PACKAGES[name]
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed (pip install 'egrl[{extra}]')"
    return None


def is_local_uri(uri: str) -> bool:
    """A tracking URI of a local store: ``file:...``, ``sqlite:...`` or a plain path."""
    text = str(uri)
    return text.startswith(LOCAL_SCHEMES) or "://" not in text


# ------------------------------------------------------------------ TensorBoard
class TensorBoardLogger(Callback):
    """TensorBoard event files: scalars per metrics column, the config as text, the
    figures as images. ``log_dir`` default: ``RUN_DIR/tensorboard``."""

    def __init__(self, log_dir: str | Path | None = None, config: Mapping | None = None) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.config = config
        self.writer = None

    def on_run_start(self, agent: RunView) -> None:
        why = missing_package("tensorboard")
        if why is not None:
            raise ImportError(f"logger=tensorboard: {why}")
        from torch.utils.tensorboard import SummaryWriter  # optional dependency

        if self.log_dir is None:
            if agent.run_dir is None:
                raise ValueError("TensorBoardLogger needs a log_dir when the run has none")
            self.log_dir = agent.run_dir / TENSORBOARD_DIR
        self.writer = SummaryWriter(log_dir=str(self.log_dir))
        text = json.dumps(run_config(agent, self.config), indent=2, default=str)
        # markdown: a code block is indented by four spaces
        self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()))

    def on_generation_end(self, agent: RunView, row: dict) -> None:
        step = int(agent.ledger.iterations)
        for key, value in numeric_metrics(row).items():
            self.writer.add_scalar(f"metrics/{key}", value, global_step=step)

    def on_run_end(self, agent: RunView, error: BaseException | None = None) -> None:
        if self.writer is None:
            return
        if error is None:
            from matplotlib.image import imread  # start-up time

            for path in figures(agent.run_dir):
                image = imread(path)
                self.writer.add_image(
                    f"figures/{path.stem}",
                    image[..., :3],
                    agent.ledger.iterations,
                    dataformats="HWC",
                )
            self.writer.add_text("best", json.dumps(agent.ledger.best.state_dict(), default=str))
        self.writer.close()
        self.writer = None


# ------------------------------------------------------------------ MLflow
def _quiet_mlflow(uri: str) -> None:
    """MLflow's environment before it is imported: no telemetry, and (MLflow 3.7+
    refuses it otherwise) the file store allowed when that is the store asked for."""
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    os.environ["DO_NOT_TRACK"] = "true"
    if not str(uri).startswith("sqlite:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


def _chunks(items: Sequence, size: int):
    for i in range(0, len(items), size):
        yield items[i : i + size]


class MLflowLogger(Callback):
    """An MLflow run in a local store: the config as parameters (and ``config.yaml`` as an
    artifact), every metrics column per generation, the figures, ``best_mapping.json``
    and ``metrics.csv`` at the end. A resumed run continues its MLflow run (its id is
    kept in ``RUN_DIR/mlflow_run_id``).

    Args:
        tracking_uri: a local store, ``file:./mlruns`` (read it with ``mlflow ui
            --backend-store-uri ./mlruns``) or ``sqlite:///mlflow.db``.
        experiment: the MLflow experiment the run goes to.
        run_name: the MLflow run's name (default: the run directory, or the agent's name).
        config: the resolved config to record (default: the agent's TrainConfig).
    """

    def __init__(
        self,
        tracking_uri: str = "file:./mlruns",
        experiment: str = "egrl",
        run_name: str | None = None,
        config: Mapping | None = None,
    ) -> None:
        if not is_local_uri(tracking_uri):
            raise ValueError(
                f"logger.tracking_uri={tracking_uri} is invalid: expected a local store "
                "(file:PATH or sqlite:///PATH); nothing is sent over the network"
            )
        self.tracking_uri = str(tracking_uri)
        self.experiment = str(experiment)
        self.run_name = run_name
        self.config = config
        self.client = None
        self.run_id: str | None = None

    def _experiment_id(self) -> str:
        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(self.experiment)
        except Exception:  # noqa: BLE001 - another job of a sweep made it first
            return self.client.get_experiment_by_name(self.experiment).experiment_id

    def on_run_start(self, agent: RunView) -> None:
        why = missing_package("mlflow")
        if why is not None:
            raise ImportError(f"logger=mlflow: {why}")
        _quiet_mlflow(self.tracking_uri)
        from mlflow import MlflowClient  # optional dependency
        from mlflow.entities import Param  # optional dependency

        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        id_file = agent.run_dir / MLFLOW_RUN_FILE if agent.run_dir is not None else None
        logged: dict[str, str] = {}
        if id_file is not None and id_file.exists():
            self.run_id = id_file.read_text(encoding="utf-8").strip()
            self.client.update_run(self.run_id, status="RUNNING")
            logged = dict(self.client.get_run(self.run_id).data.params)
        else:
            name = self.run_name or (str(agent.run_dir) if agent.run_dir else agent.name)
            tags = {"agent": agent.name, "workload": agent.env.workload.name}
            if agent.run_dir is not None:
                tags["run_dir"] = str(agent.run_dir.resolve())
            run = self.client.create_run(self._experiment_id(), run_name=name, tags=tags)
            self.run_id = run.info.run_id
            if id_file is not None:
                id_file.write_text(self.run_id + "\n", encoding="utf-8")
        params = flat_config(run_config(agent, self.config))
        new = [Param(k, v[:6000]) for k, v in params.items() if k not in logged]
        for chunk in _chunks(new, 100):
            self.client.log_batch(self.run_id, params=chunk)
        if agent.run_dir is not None and (agent.run_dir / CONFIG_FILE).exists():
            self.client.log_artifact(self.run_id, str(agent.run_dir / CONFIG_FILE))

    def on_generation_end(self, agent: RunView, row: dict) -> None:
        from mlflow.entities import Metric  # optional dependency

        now = int(time.time() * 1000)
        step = int(agent.ledger.iterations)
        metrics = [Metric(k, v, now, step) for k, v in numeric_metrics(row).items()]
        for chunk in _chunks(metrics, 1000):
            self.client.log_batch(self.run_id, metrics=chunk)

    def on_run_end(self, agent: RunView, error: BaseException | None = None) -> None:
        if self.client is None or self.run_id is None:
            return
        if error is None and agent.run_dir is not None:
            for path in [*figures(agent.run_dir), agent.run_dir / BEST_FILE]:
                if path.exists():
                    self.client.log_artifact(self.run_id, str(path))
            if (agent.run_dir / METRICS_FILE).exists():
                self.client.log_artifact(self.run_id, str(agent.run_dir / METRICS_FILE))
        if error is None:
            status = "FINISHED"
        else:
            status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED"
        self.client.set_terminated(self.run_id, status=status)


# ------------------------------------------------------------------ the config group
def locate(path: str) -> Any:
    """The object named by a dotted path (``mypkg.mymodule.MyCallback``); ``ImportError``
    in one line when it cannot be imported."""
    parts = str(path).split(".")
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not name.startswith(exc.name):
                raise ImportError(f"cannot import {name} ({exc})") from exc
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                raise ImportError(f"module {name} has no {'.'.join(parts[i:])}")
            obj = getattr(obj, attr)
        return obj
    raise ImportError(f"no module named {parts[0]!r}")


def user_callbacks(specs: Sequence[Any]) -> list[Callback]:
    """``logger.callbacks``: each a Hydra ``_target_`` node (or a dotted class name) of a
    :class:`~egrl.callbacks.Callback`, made with its other keys as arguments."""
    out = []
    for spec in specs or ():
        made = locate(spec)() if isinstance(spec, str) else instantiate(spec)
        if not isinstance(made, Callback):
            raise TypeError(f"logger.callbacks: {made!r} is not an egrl.callbacks.Callback")
        out.append(made)
    return out


def make_loggers(
    logger: Mapping | None, run_dir: Path | None, config: Mapping | None = None
) -> list[Callback]:
    """The callbacks of the ``logger`` group: none for ``csv`` (the run directory's own
    files are the run's), a :class:`TensorBoardLogger` or an :class:`MLflowLogger`, then
    the user's ``logger.callbacks``. ``config`` is the resolved config they record."""
    logger = dict(logger or {"name": "csv"})
    name = str(logger.get("name", "csv"))
    if name not in LOGGERS:
        raise ValueError(f"logger={name} is invalid: expected one of {', '.join(LOGGERS)}")
    out: list[Callback] = []
    if name == "tensorboard":
        log_dir = logger.get("dir") or (run_dir / TENSORBOARD_DIR if run_dir else None)
        out.append(TensorBoardLogger(log_dir, config))
    elif name == "mlflow":
        out.append(
            MLflowLogger(
                tracking_uri=logger.get("tracking_uri") or "file:./mlruns",
                experiment=logger.get("experiment") or "egrl",
                run_name=logger.get("run_name"),
                config=config,
            )
        )
    return out + user_callbacks(logger.get("callbacks") or [])


def logger_problems(logger: Mapping | None) -> list[str]:
    """Why the ``logger`` config cannot run here, one line each (for the checks before a
    run): a missing package, a tracking URI that is not a local store, a callback that
    cannot be imported."""
    logger = dict(logger or {})
    name = str(logger.get("name", "csv"))
    if name not in LOGGERS:
        return [f"logger={name} is invalid: expected one of {', '.join(LOGGERS)}"]
    problems = []
    why = missing_package(name)
    if why is not None:
        problems.append(f"logger={name} is invalid: {why}")
    uri = logger.get("tracking_uri")
    if name == "mlflow" and uri is not None and not is_local_uri(uri):
        problems.append(
            f"logger.tracking_uri={uri} is invalid: expected a local store (file:PATH or "
            "sqlite:///PATH); nothing is sent over the network"
        )
    for spec in logger.get("callbacks") or []:
        target = spec if isinstance(spec, str) else (spec or {}).get("_target_")
        try:
            cls = locate(str(target))
        except ImportError as exc:
            problems.append(f"logger.callbacks: {target} is invalid: {exc}")
            continue
        if not (isinstance(cls, type) and issubclass(cls, Callback)):
            problems.append(
                f"logger.callbacks: {target} is invalid: not an egrl.callbacks.Callback"
            )
    return problems


__all__ = [
    "LOGGERS",
    "MLflowLogger",
    "TensorBoardLogger",
    "logger_problems",
    "make_loggers",
    "numeric_metrics",
    "user_callbacks",
]
