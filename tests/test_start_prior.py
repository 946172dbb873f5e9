"""``agent.start=prior``: every agent that starts from maps pays the prior's solved map
first (as the target's compiler accepts it) and never ends below it; a target without a
prior refuses the option in one line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from egrl import deploy, make_env
from egrl.agents import make_agent
from egrl.agents.options import STARTS, start_mappings
from egrl.cli.build import train_config
from egrl.rundir import RunDir
from egrl.validation import ConfigError
from tests.support.command_line import assert_refused, egrl_train_in_process

ROOT = Path(__file__).resolve().parents[1]
#: the solve's time limit of these runs (ResNet-18 here: proven optimal in about 2 s)
LIMIT = 30.0
#: small runs: a few paid maps each, small policies and models
SMALL_POLICY = [
    "policy.hidden=16",
    "policy.out=16",
    "policy.depth=2",
    "policy.heads=2",
    "population.size=6",
    "agent.start_steps=20",
]
AGENTS = {
    "ea": SMALL_POLICY,
    "egrl": [*SMALL_POLICY, "learner.batch_size=8", "learner.burn_in=8"],
    "sa": ["agent.chains=2", "agent.steps=2"],
    "ga": ["agent.population=6"],
    "greedy-dp": [],
    "mbo": ["agent.depth=60", "agent.batch=4", "agent.steps=2"],
    "optuna": ["agent.batch=4"],
    "smac": ["agent.batch=4", "agent.n_initial=4"],
    "nevergrad": ["agent.batch=4"],
}
#: the optional libraries an agent needs
NEEDS = {"optuna": "optuna", "smac": "smac", "nevergrad": "nevergrad"}


def problem():
    """ResNet-18 on an NNP-I with 1 MiB of SRAM and 4 MiB of LLC: its optimum (the prior
    of a built-in target) is about 5% faster than the compiler's map and differs from it."""
    return make_env("nnpi", "resnet18", sram_mib=1.0, llc_mib=4.0)


@pytest.fixture(scope="module")
def env():
    return problem()


@pytest.fixture(scope="module")
def prior(env) -> np.ndarray:
    mapping = deploy.checked_prior(env, LIMIT)
    assert not np.array_equal(mapping, env.baseline_mapping)
    return mapping


def run_config(agent: str, budget: int = 12):
    """The run's config as ``egrl-train agent=AGENT agent.start=prior ...`` composes it."""
    overrides = [
        f"agent={agent}",
        "agent.start=prior",
        f"budget={budget}",
        f"prior_time_limit_s={LIMIT}",
        "record_evaluations=true",
        "progress=false",
        *AGENTS[agent],
    ]
    with initialize_config_module("configs", version_base=None):
        cfg = compose("train", overrides=overrides)
    return train_config(OmegaConf.to_container(cfg, resolve=True))


def test_prior_is_a_start_and_its_maps_are_the_checked_solution(env, prior):
    assert "prior" in STARTS
    maps = start_mappings(env, "prior", 3, np.random.default_rng(0), LIMIT)
    assert maps.shape == (3, env.num_units, env.num_heads) and maps.dtype == np.int64
    np.testing.assert_array_equal(maps, np.repeat(prior[None], 3, axis=0))
    assert env.evaluate(prior[None]).speedup[0] > 1.0


@pytest.mark.parametrize("agent", list(AGENTS))
def test_the_first_map_paid_is_the_priors_and_the_best_never_below_it(agent, env, prior, tmp_path):
    if agent in NEEDS and importlib.util.find_spec(NEEDS[agent]) is None:
        pytest.skip(f"{NEEDS[agent]} is not installed")
    run = make_agent(env, run_config(agent), tmp_path)
    best = run.run()
    first = run.ledger.archive.actions[run.ledger.archive.in_order()[0]]
    np.testing.assert_array_equal(first.astype(np.int64), prior)
    records = RunDir(tmp_path).read_evaluations()
    prior_speedup = float(env.evaluate(prior[None]).speedup[0])
    assert records["paid"][0] == 1
    assert records["speedup"][0] == pytest.approx(prior_speedup)
    assert best.speedup >= prior_speedup
    saved = RunDir(tmp_path).read_best_map()
    # the prior is proven optimal here: nothing beats it, and a tie keeps the earlier map
    assert saved["deployed"]["source"] == "prior"
    assert saved["deployed"]["speedup"] >= prior_speedup


def test_a_target_without_a_prior_refuses_the_start():
    """The TPU game has no model the toolkit solves: agent.start=prior is refused when
    the agent is made, naming the key and what is allowed."""
    tpu = make_env("tpu-cmem", "resnet18")
    assert not tpu.has_prior
    cfg = run_config("ga")
    with pytest.raises(ConfigError) as caught:
        make_agent(tpu, cfg, None)
    (line,) = caught.value.problems
    assert line.startswith("agent 'ga': option start=prior is invalid: TPUTarget on")
    assert line.endswith("expected one of initial, random, native, fallback")


def test_egrl_train_refuses_the_start_without_a_prior_before_making_anything(tmp_path):
    out = egrl_train_in_process(
        "agent=ga",
        "agent.start=prior",
        "hwmodel=tpu-cmem",
        "workload=resnet18",
        "budget=4",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=ROOT,
    )
    assert_refused(out, "agent 'ga': option start=prior is invalid: ", prefix=True)
    assert not (tmp_path / "run").exists()
