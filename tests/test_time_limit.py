"""``time_limit_s``: a run stops once its wall time passes the limit (after the generation
under way; game-playing agents inside their game), resumes with the time it has left, and
refuses a bad value before anything is made."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from egrl.agents import make_agent, register_agent, train_config
from egrl.agents.base import TIME_LIMIT_REACHED
from egrl.agents.random_search import RandomSearch
from egrl.cli.train import run as train_run
from egrl.config import AgentConfig, TrainConfig, config_problems
from egrl.validation import ConfigError
from tests.support.agent_configs import muzero_config
from tests.support.command_line import compose, egrl_train_in_process
from tests.support.envs import small_tpu_env
from tests.support.metrics import read_metrics
from tests.support.muzero import MUZERO_SMALL

GENERATION_S = 0.05
LIMIT = 0.3


@register_agent("slow-random")
class SlowRandom(RandomSearch):
    """Random search whose generations take at least ``GENERATION_S`` of wall time."""

    def step(self) -> dict:
        time.sleep(GENERATION_S)
        return super().step()


ARGS = (
    "agent=random",
    "agent.name=slow-random",
    "agent.batch=4",
    "workload=resnet18",
    "budget=100000",
    "checkpoint_every=2",
    "progress=false",
)


def stopped_early(run_dir: Path) -> str | None:
    return json.loads((run_dir / "best_mapping.json").read_text(encoding="utf-8"))["stopped_early"]


def assert_stopped_at(rows: list[dict], limit: float) -> None:
    """The run stopped after the first generation that took its wall time past ``limit``."""
    wall = [float(r["wall_s"]) for r in rows]
    assert wall[-1] >= limit and all(w < limit for w in wall[:-1])


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize("value", [0, -1.5, "abc", True, float("inf")])
def test_a_non_positive_or_non_number_limit_is_refused(value):
    line = f"time_limit_s={value if not isinstance(value, bool) else 'true'} is invalid: "
    assert config_problems({"time_limit_s": value}) == [line + "expected a number > 0 or null"]
    with pytest.raises(ConfigError, match="time_limit_s"):
        train_config({"time_limit_s": value})


def test_a_positive_number_or_null_is_accepted():
    assert train_config({"time_limit_s": 2}).time_limit_s == 2
    assert train_config({"time_limit_s": None}).time_limit_s is None
    assert train_config({}).time_limit_s is None


def test_egrl_train_refuses_a_bad_limit_before_any_directory(tmp_path):
    out = egrl_train_in_process("time_limit_s=0", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        "egrl-train: time_limit_s=0 is invalid: expected a number > 0 or null"
    ]
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ runs
def test_a_run_stops_after_the_generation_that_passes_its_limit(tmp_path, one_thread):
    run_dir = tmp_path / "run"
    agent = train_run(compose(*ARGS, f"time_limit_s={LIMIT}"), run_dir)
    rows = read_metrics(run_dir, drop=())
    assert_stopped_at(rows, LIMIT)
    assert len(rows) >= 2 and agent.ledger.iterations < 100000
    assert agent.stop_reason.startswith(f"{TIME_LIMIT_REACHED} (time_limit_s={LIMIT:g})")
    assert stopped_early(run_dir) == agent.stop_reason
    # the generation it stopped after is checkpointed, whatever checkpoint_every says
    assert (run_dir / "checkpoints" / f"gen_{len(rows):06d}").is_dir()


def test_no_limit_by_default(tmp_path, one_thread):
    agent = train_run(compose(*ARGS, "budget=20", "agent.name=random"), tmp_path / "run")
    assert agent.ledger.iterations == 20 and agent.stop_reason is None


def test_a_stopped_run_is_finished_and_a_raised_limit_goes_on(tmp_path, one_thread):
    run_dir = tmp_path / "run"
    args = (*ARGS, f"time_limit_s={LIMIT}", "continue_runs=true")
    train_run(compose(*args), run_dir)
    first = read_metrics(run_dir, drop=())

    # continued (a re-launched sweep) or resumed as it is: it has no time left, adds nothing
    again = train_run(compose(*args), run_dir)
    assert read_metrics(run_dir, drop=()) == first and again.generation == len(first)
    assert stopped_early(run_dir).startswith(TIME_LIMIT_REACHED)
    resumed = train_run(compose(*ARGS, f"resume={run_dir}"), run_dir)
    assert read_metrics(run_dir, drop=()) == first and resumed.stop_reason.startswith(
        TIME_LIMIT_REACHED
    )

    # resumed with a higher limit: the same run goes on to it, with the time left
    more = train_run(
        compose(*ARGS, f"resume={run_dir}", "time_limit_s=0.6"), run_dir, ["time_limit_s"]
    )
    rows = read_metrics(run_dir, drop=())
    assert rows[: len(first)] == first and len(rows) > len(first)
    assert_stopped_at(rows, 0.6)
    assert more.stop_reason.startswith(f"{TIME_LIMIT_REACHED} (time_limit_s=0.6)")
    assert "time_limit_s: 0.6" in (run_dir / "config.yaml").read_text(encoding="utf-8")


def test_a_killed_run_resumes_with_the_time_it_had_left(tmp_path, one_thread):
    import shutil

    run_dir = tmp_path / "run"
    train_run(compose(*ARGS, f"time_limit_s={LIMIT}", "checkpoint_every=1"), run_dir)
    full = read_metrics(run_dir, drop=())
    # a kill after the second generation: later checkpoints and the outputs missing
    for late in sorted((run_dir / "checkpoints").glob("gen_??????"))[2:]:
        shutil.rmtree(late)
    (run_dir / "best_mapping.json").unlink()
    train_run(compose(*ARGS, f"resume={run_dir}"), run_dir)
    rows = read_metrics(run_dir, drop=())
    assert rows[:2] == full[:2] and len(rows) > 2
    assert_stopped_at(rows, LIMIT)
    assert stopped_early(run_dir).startswith(TIME_LIMIT_REACHED)


def test_the_planner_stops_inside_its_game(one_thread):
    cfg = muzero_config("muzero", budget=5, simulations=2, **MUZERO_SMALL)
    cfg.time_limit_s = 1e-9  # reached before the first move
    agent = make_agent(small_tpu_env(), cfg)
    agent.run()
    assert agent.generation == 1 and agent.ledger.iterations == 0 and agent.games == 0
    assert agent.stop_reason.startswith(TIME_LIMIT_REACHED)


def test_a_study_deadline_still_stops_the_planner(one_thread):
    """``deadline`` (the TPU study's wall-clock budget) works as before beside the limit."""
    cfg = muzero_config("muzero", budget=5, simulations=2, **MUZERO_SMALL)
    agent = make_agent(small_tpu_env(), cfg)
    agent.deadline = time.perf_counter()
    agent.run()
    assert agent.ledger.iterations == 0 and agent.stop_reason == "wall-clock deadline reached"


def test_the_python_api_takes_the_limit(one_thread):
    from egrl import make_env

    cfg = TrainConfig(
        budget=100000,
        progress=False,
        time_limit_s=LIMIT,
        agent=AgentConfig(name="slow-random", options={"batch": 4}),
    )
    agent = make_agent(make_env("nnpi", "resnet18"), cfg)
    agent.run()
    assert_stopped_at(agent.rows, LIMIT)
    assert agent.stop_reason.startswith(TIME_LIMIT_REACHED)
