"""``agent=mbo``: model-based optimisation over every searcher, on maps the compiler accepts."""

from __future__ import annotations

import logging
import re
import shutil

import numpy as np
import pytest

import hwmodels
from egrl import make_env
from egrl.agents import make_agent
from egrl.agents.mbo.agent import distance
from egrl.agents.mbo.bandit import SearcherBandit
from egrl.agents.mbo.searchers import SEARCHERS, Context
from egrl.validation import ConfigError
from tests.support.chips import CHIP, CHIP_ARGS, tiny_workload
from tests.support.command_line import assert_refused, egrl_train_in_process
from tests.support.envs import noisy_env, small_env
from tests.support.metrics import read_metrics
from tests.support.paths import PY
from tests.support.screening import run_config

#: mbo's screen as ``configs/agent/mbo.yaml`` sets it up (a small forest)
SCREEN = {"name": "forest", "warmup": 0, "explore": 0.2, "options": {"trees": 16}}


def mbo_config(
    budget: int = 80, seed: int = 0, screen: dict | None = None, run: dict | None = None, **options
):
    """A small mbo run: rounds of 10 paid maps, 200 model calls each (``run``: more of the
    run's own keys)."""
    agent = {"name": "mbo", "depth": 200, "batch": 10, "steps": 4, **options}
    return run_config(agent, budget, {**SCREEN, **(screen or {})}, seed, **(run or {}))


def test_rounds_pay_only_maps_the_compiler_accepts_and_checks_are_not_paid(tmp_path):
    env = small_env()
    agent = make_agent(env, mbo_config(searchers=["egrl", "ea", "ga", "sa"]), tmp_path)
    agent.run()
    columns = set(read_metrics(tmp_path, drop=())[0])
    assert {"model_calls", "checks", "share_egrl", "t_check"} <= columns
    rows = agent.rows
    assert rows[-1]["iterations"] == 80  # the budget, every paid map a board run
    assert [r["batch_valid_fraction"] for r in rows] == [1.0] * len(rows)
    searched = rows[1:]  # the first round pays fresh maps: there is no model yet
    assert all(r["model_calls"] > 0 for r in searched)
    assert rows[-1]["checks"] >= rows[-1]["model_calls"] > 10 * rows[-1]["iterations"] / 10
    shares = np.array([[r[f"share_{s}"] for s in ("egrl", "ea", "ga", "sa")] for r in rows])
    np.testing.assert_allclose(shares.sum(axis=1), 1.0)
    assert rows[-1]["t_check"] > 0
    assert rows[-1]["best_reward"] > rows[0]["best_reward"]  # the search improved on the start


def test_without_check_the_model_alone_searches():
    agent = make_agent(small_env(), mbo_config(budget=40, check=False))
    agent.run()
    assert agent.ledger.checks == 0 and agent.model_calls > 0


def test_a_target_that_cannot_be_asked_is_searched_by_the_model_alone(caplog, monkeypatch):
    env = small_env()
    monkeypatch.setattr(type(env.target), "checks", property(lambda self: False))
    agent = make_agent(env, mbo_config(budget=40))
    with caplog.at_level(logging.INFO, logger="egrl.ledger"):
        agent.run()
    assert agent.ledger.checks == 0 and agent.model_calls > 0
    assert agent.ledger.unchecked == "NNPITarget has no compiler to ask alone"
    assert sum("checked by the model alone" in r.message for r in caplog.records) == 1


def test_one_searcher_gets_every_model_call():
    agent = make_agent(small_env(), mbo_config(budget=40, searchers=["sa"]))
    rows = [agent._generation() for _ in range(3)]
    assert [r["share_sa"] for r in rows] == [1.0] * 3


def test_refused_maps_can_be_repaired_instead_of_dropped():
    cfg = mbo_config(budget=40, searchers=["egrl", "sa"], refused="repair")
    agent = make_agent(small_env(), cfg)
    agent.run()
    assert agent.ledger.iterations == 40 and agent.model_calls > 0
    assert [r["batch_valid_fraction"] for r in agent.rows] == [1.0] * len(agent.rows)
    assert agent.rows[-1]["t_evolution"] > 0  # the searchers' own time


def test_a_trust_region_keeps_the_search_near_the_best_paid_maps():
    agent = make_agent(small_env(), mbo_config(budget=40, trust_radius=2))
    agent._generation()  # the first batch: a model to search
    agent.ledger.refit_screen()
    maps, _ = agent._search(agent.bandit.shares())
    assert (distance(maps, agent._best_paid(1)) <= 2).all()


def test_a_run_resumed_from_a_checkpoint_writes_the_same_metrics(tmp_path):
    env = small_env()
    reference = tmp_path / "reference"
    make_agent(env, mbo_config(), reference).run()
    ckpts = sorted((reference / "checkpoints").glob("gen_??????"))
    resumed = tmp_path / "resumed"
    shutil.copytree(ckpts[3], resumed / "checkpoints" / ckpts[3].name)
    again = make_agent(small_env(), mbo_config(), resumed)
    assert again.resume()
    again.run()
    assert read_metrics(resumed) == read_metrics(reference)


@pytest.mark.slow
def test_on_a_noisy_board_the_run_confirms_its_best():
    agent = make_agent(
        noisy_env(), mbo_config(budget=60, run={"confirm": {"top": 2, "repeats": 2}})
    )
    agent.run()
    assert agent.confirmation is not None and agent.ledger.iterations == 60
    assert agent.rows[-1]["confirmed_speedup"] > 0


def test_the_same_seed_gives_the_same_run():
    runs = []
    for _ in range(2):
        agent = make_agent(small_env(), mbo_config(budget=40, seed=3))
        agent.run()
        runs.append(agent.ledger.archive.state_dict())
    for key in runs[0]:
        np.testing.assert_array_equal(np.asarray(runs[0][key]), np.asarray(runs[1][key]))


@pytest.mark.parametrize(
    ("options", "screen", "problem"),
    [
        ({"depth": 0}, {}, "option depth=0 is invalid: expected an integer >= 1"),
        ({"searchers": ["ea", "pso"]}, {}, "option searchers=['ea', 'pso'] is invalid"),
        ({"searchers": []}, {}, "expected a non-empty list, each one of ea, egrl, ga, sa"),
        (
            {"trust_radius": 0},
            {},
            "option trust_radius=0 is invalid: expected an integer >= 1 or null",
        ),
        ({"refused": "keep"}, {}, "option refused=keep is invalid: expected one of repair, drop"),
        ({"spacing": 0}, {}, "option spacing=0 is invalid: expected an integer >= 1"),
        (
            {"searchers": ["ea", "sa"], "min_share": 0.6},
            {},
            "min_share=0.6 is invalid: expected a number in [0, 1/2]",
        ),
        ({"discount": 0}, {}, "option discount=0 is invalid: expected a number in (0, 1]"),
        (
            {},
            {"name": "none"},
            "screen=none is invalid: agent 'mbo' searches a model (screen=forest|boost|gnn)",
        ),
        (
            {},
            {"search": 10},
            "screen.search=10 is invalid: agent 'mbo' searches the model itself: its depth of search is agent.depth",
        ),
    ],
)
def test_bad_options_are_refused_in_one_line(options, screen, problem):
    with pytest.raises(ConfigError, match=re.escape(problem)):
        make_agent(small_env(), mbo_config(screen=screen, **options))


def test_a_game_target_is_refused():
    env = make_env("tpu-cmem", "resnet18")
    with pytest.raises(ConfigError, match="neither describes its maps nor has a compiler"):
        make_agent(env, mbo_config())


@pytest.mark.parametrize(
    ("override", "line"),
    [
        (
            "agent.depth=0",
            "agent 'mbo': option depth=0 is invalid: expected an integer >= 1",
        ),
        ("screen.kappa=-1", "screen.kappa=-1 is invalid: expected a number >= 0"),
    ],
)
def test_egrl_train_refuses_bad_input_with_exit_status_2(tmp_path, override, line):
    out = egrl_train_in_process("agent=mbo", "budget=20", override, cwd=tmp_path)
    assert_refused(out, line)
    assert not any(tmp_path.iterdir())  # nothing created


@pytest.mark.slow
def test_the_example_chip_answers_checks_and_a_refusing_one_is_searched_alone(tmp_path):
    for args, checked in ((CHIP_ARGS, True), ([*CHIP_ARGS, "--no-check"], False)):
        model = hwmodels.make("external", command=[PY, CHIP, *args], deterministic=True)
        env = make_env(model, tiny_workload())
        agent = make_agent(env, mbo_config(budget=20, depth=40, batch=5, steps=2))
        agent.run()
        assert (agent.ledger.checks > 0) == checked
        assert agent.ledger.iterations == 20


# ------------------------------------------------------------------ the parts
def test_the_bandit_moves_shares_to_the_searcher_whose_picks_pay():
    bandit = SearcherBandit(["ea", "ga", "sa"], min_share=0.1, discount=0.8)
    np.testing.assert_allclose(bandit.shares(), [1 / 3] * 3)
    for _ in range(5):
        owners = np.array([0, 0, 1, 1, 2, 2])
        bandit.update(owners, np.array([0.1, 0.2, 0.3, 0.2, 1.5, 1.4]), best_before=1.0)
    shares = bandit.shares()
    assert shares.sum() == pytest.approx(1.0)
    assert shares[2] > shares[1] and shares[2] > shares[0] and shares.min() >= 0.1


@pytest.mark.parametrize("name", sorted(set(SEARCHERS) - {"egrl"}))
def test_every_searcher_proposes_maps_in_range_and_keeps_its_best(name):
    rng = np.random.default_rng(0)
    num_choices = np.array([3, 2])
    maps = rng.integers(0, num_choices, size=(12, 7, 2))

    def value(m):  # the model: how many entries sit on choice 1
        return (m == 1).sum(axis=(1, 2)).astype(np.float64)

    searcher = SEARCHERS[name](maps, value(maps), Context(num_choices, 30), rng)
    best = searcher.values.max()
    for _ in range(30):
        asked = searcher.ask(rng)
        assert asked.shape == maps.shape and (asked >= 0).all() and (asked < num_choices).all()
        searcher.tell(asked, value(asked), rng)
    assert searcher.values.max() >= best and searcher.values.max() > value(maps).mean() + 2
