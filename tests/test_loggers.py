"""Run callbacks and the ``logger`` group: what the run loop calls, TensorBoard, MLflow."""

from __future__ import annotations

import os

import pytest

from egrl.agents.egrl.agent import EGRLAgent, EntropyPlot
from egrl.callbacks import BestMapFile, Callback, MetricsFile, ProgressBar, SpeedupPlot
from tests.support.command_line import egrl_train, egrl_train_in_process
from tests.support.egrl_runs import small_config
from tests.support.envs import small_env
from tests.support.metrics import read_metrics
from tests.support.paths import ROOT

pytestmark = pytest.mark.usefixtures("one_thread")


class Recorder(Callback):
    """Every call, in order: ``(hook, generation)`` (and the path of checkpoints/snapshots)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.rows: list[dict] = []
        self.error: BaseException | None = None

    def on_run_start(self, agent):
        self.calls.append(("start", agent.generation))

    def on_generation_end(self, agent, row):
        self.calls.append(("generation", agent.generation))
        self.rows.append(dict(row))

    def on_checkpoint(self, agent, path):
        assert path.exists()
        self.calls.append(("checkpoint", agent.generation))

    def on_snapshot(self, agent, path):
        assert path.exists()
        self.calls.append(("snapshot", agent.generation))

    def on_run_end(self, agent, error=None):
        self.calls.append(("end", agent.generation))
        self.error = error


def test_the_run_loop_calls_its_callbacks(tmp_path):
    """Progress, metrics.csv and the outputs are callbacks; a user's own one hears of each
    snapshot and checkpoint the loop writes, then sees the generation's row, and the end."""
    cfg = small_config(budget=48)
    cfg.snapshot_every = 3
    trainer = EGRLAgent(small_env(), cfg, tmp_path / "run")
    kinds = [type(c) for c in trainer.default_callbacks()]
    assert kinds == [ProgressBar, MetricsFile, BestMapFile, SpeedupPlot, EntropyPlot]
    seen = Recorder()
    rows = []
    trainer.run(on_generation=rows.append, callbacks=[seen])

    last = trainer.generation
    assert seen.calls[0] == ("start", 0) and seen.calls[-1] == ("end", last)
    assert seen.error is None
    assert [g for hook, g in seen.calls if hook == "generation"] == list(range(1, last + 1))
    snapshots = [g for hook, g in seen.calls if hook == "snapshot"]
    assert snapshots == sorted({*range(3, last + 1, 3), last})
    checkpoints = [g for hook, g in seen.calls if hook == "checkpoint"]
    assert checkpoints == sorted({*range(2, last + 1, 2), last})
    # a callback hears of a generation's snapshot and checkpoint (snapshot first) before
    # its on_generation_end
    for g in set(snapshots) & set(checkpoints):
        i = seen.calls.index(("generation", g))
        assert seen.calls[i - 2 : i] == [("snapshot", g), ("checkpoint", g)]
    assert seen.rows == trainer.rows == rows
    assert len(read_metrics(tmp_path / "run", drop=())) == last


def test_a_failing_callback_stops_the_run_and_the_others_hear_of_it(tmp_path):
    class Boom(Exception):
        pass

    def boom(row):
        if row["generation"] == 2:
            raise Boom

    seen = Recorder()
    trainer = EGRLAgent(small_env(), small_config(budget=48), tmp_path / "run")
    with pytest.raises(Boom):
        trainer.run(on_generation=boom, callbacks=[seen])
    assert isinstance(seen.error, Boom) and seen.calls[-1] == ("end", 2)
    assert not (tmp_path / "run" / "best_mapping.json").exists()


SMALL = ["agent=sa", "workload=resnet18", "budget=30", "progress=false"]
#: the tests' modules importable in egrl-train's process
WITH_TESTS = {"PYTHONPATH": str(ROOT)}


@pytest.mark.slow
def test_tensorboard_logger_writes_rows_config_and_figures(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    out = egrl_train(
        *SMALL, "logger=tensorboard", f"hydra.run.dir={run_dir}", cwd=tmp_path, env=WITH_TESTS
    )
    assert out.returncode == 0, out.stderr[-2000:]
    events = EventAccumulator(
        str(run_dir / "tensorboard"), size_guidance={"images": 0, "scalars": 0, "tensors": 0}
    )
    events.Reload()
    rows = read_metrics(run_dir, drop=())
    curve = [(e.step, e.value) for e in events.Scalars("metrics/best_speedup")]
    assert curve == [(int(r["iterations"]), pytest.approx(float(r["best_speedup"]))) for r in rows]
    assert "metrics/t_evaluation" in events.Tags()["scalars"]
    assert events.Tags()["images"] == ["figures/speedup"]
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert '"name": "sa"' in config and '"budget": 30' in config


@pytest.mark.slow
def test_mlflow_logger_records_a_run_and_a_resume_continues_it(tmp_path):
    pytest.importorskip("mlflow")
    run_dir = tmp_path / "run"
    out = egrl_train(
        *SMALL, "logger=mlflow", f"hydra.run.dir={run_dir}", cwd=tmp_path, env=WITH_TESTS
    )
    assert out.returncode == 0, out.stderr[-2000:]
    run_id = (run_dir / "mlflow_run_id").read_text().strip()
    more = egrl_train(f"resume={run_dir}", "budget=50", cwd=tmp_path, env=WITH_TESTS)
    assert more.returncode == 0, more.stderr[-2000:]
    assert (run_dir / "mlflow_run_id").read_text().strip() == run_id

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "egrl"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert run.data.params["agent.name"] == "sa" and run.data.params["budget"] == "30"
    history = client.get_metric_history(run_id, "best_speedup")
    rows = read_metrics(run_dir, drop=())
    assert int(rows[-1]["iterations"]) == 50
    assert [m.step for m in history] == [int(r["iterations"]) for r in rows]
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.yaml", "metrics.csv", "best_mapping.json", "speedup.png"} <= artifacts


@pytest.mark.slow
def test_a_user_callback_from_the_command_line(tmp_path):
    module = tmp_path / "mycallbacks.py"
    module.write_text(
        "from egrl.callbacks import Callback\n\n\n"
        "class Count(Callback):\n"
        "    def __init__(self, path):\n"
        "        self.path = path\n\n"
        "    def on_run_end(self, agent, error=None):\n"
        "        open(self.path, 'w').write(str(agent.generation))\n"
    )
    run_dir = tmp_path / "run"
    spec = "logger.callbacks=[{_target_: mycallbacks.Count, path: count.txt}]"
    env_path = f"{tmp_path}{os.pathsep}{ROOT}"
    out = egrl_train(
        *SMALL, spec, f"hydra.run.dir={run_dir}", cwd=tmp_path, env={"PYTHONPATH": env_path}
    )
    assert out.returncode == 0, out.stderr[-2000:]
    generations = len(read_metrics(run_dir, drop=()))
    assert (tmp_path / "count.txt").read_text() == str(generations)


def test_an_unknown_logger_is_refused_before_the_run(tmp_path):
    out = egrl_train_in_process(*SMALL, "logger=bogus", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        "egrl-train: logger=bogus is invalid: expected one of csv, mlflow, tensorboard"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("logger=mlflow", "logger.tracking_uri=http://example.com"),
            "logger.tracking_uri=http://example.com is invalid: expected a local store "
            "(file:PATH or sqlite:///PATH); nothing is sent over the network",
        ),
        (
            ("logger.callbacks=[nowhere.Callback]",),
            "logger.callbacks: nowhere.Callback is invalid: no module named 'nowhere'",
        ),
    ],
)
def test_bad_logger_input_is_refused_before_the_run(tmp_path, args, line):
    out = egrl_train_in_process(*SMALL, *args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [f"egrl-train: {line}"]
    assert list(tmp_path.iterdir()) == []
