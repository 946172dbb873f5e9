"""Warm starts: agent.start puts a map into every agent's first proposals."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from egrl.agents import config_class, make_agent
from egrl.agents.egrl.agent import EGRLAgent
from egrl.agents.egrl.warm_start import imitate
from egrl.config import TrainConfig
from policies import GraphUNetActor, seeded_init
from tests.support.egrl_runs import greedy, small_config
from tests.support.envs import small_env
from tests.support.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", ["egrl", "ea"])
def test_native_start_never_leaves_the_champion_below_the_compiler(name):
    env = small_env()
    cfg = small_config(budget=200, name=name, use_learner=name == "egrl")
    cfg.agent.options = {"start": "native"}
    trainer = EGRLAgent(env, cfg)
    trainer.start_policies()  # as the first generation does
    pop = trainer.population
    # One chromosome proposes the compiler's map; the first two GNN members act it greedily.
    row = pop.indices("boltzmann")[0]
    maps, _ = pop.act(trainer.graph, torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(maps[row].numpy(), env.baseline_mapping)
    for i in pop.indices("gnn")[:2]:
        np.testing.assert_array_equal(greedy(pop.gnn(int(i)), trainer.graph), env.baseline_mapping)
    trainer.step()
    assert trainer.ledger.best.speedup >= 1.0
    assert pop.fitness[pop.champion()[0]] >= 1.0  # reward = speedup ** 2
    trainer.step()  # evolution kept the seeded elite
    assert pop.fitness[pop.champion()[0]] >= 1.0


def test_the_default_start_is_the_papers_and_leaves_members_untouched():
    env = small_env()
    fresh = EGRLAgent(env, small_config(budget=50))
    native = small_config(budget=50)
    native.agent.options = {"start": "native"}
    warm = EGRLAgent(small_env(), native)
    assert warm.warm_start_due and not fresh.warm_start_due
    warm.start_policies()
    assert fresh.start == "initial"
    a, b = fresh.population.gnn(0), warm.population.gnn(0)
    assert not all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    # Members past start_gnns are the same as a fresh run's.
    c, d = fresh.population.gnn(3), warm.population.gnn(3)
    assert all(torch.equal(x, y) for x, y in zip(c.parameters(), d.parameters()))


def test_a_resumed_warm_started_run_keeps_its_checkpoints_policies_and_ends_as_the_uninterrupted(
    tmp_path,
):
    def native():
        cfg = small_config(budget=60, name="ea", use_learner=False)
        cfg.agent.options = {"start": "native", "start_steps": 50}
        return cfg

    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    EGRLAgent(small_env(), native(), reference).run()
    checkpoints = sorted((reference / "checkpoints").glob("gen_??????"))
    middle = checkpoints[len(checkpoints) // 2]
    shutil.copytree(middle, resumed / "checkpoints" / middle.name)
    again = EGRLAgent(small_env(), native(), resumed)
    assert again.warm_start_due and again.resume() and not again.warm_start_due
    again.run()
    assert read_metrics(resumed) == read_metrics(reference)


def test_pg_start_teaches_the_learner():
    env = small_env()
    cfg = small_config(budget=50, name="pg", use_population=False)
    cfg.agent.options = {"start": "fallback"}
    trainer = EGRLAgent(env, cfg)
    trainer.start_policies()
    actor = trainer.portfolio.learners[0].actor
    np.testing.assert_array_equal(greedy(actor, trainer.graph), env.fallback_mapping)


def test_imitate_reaches_the_map_and_reports_its_accuracy():
    env = small_env()
    actor = seeded_init(
        0, lambda: GraphUNetActor(env.graph.x.shape[1], list(env.num_choices), 16, 16, 2, 2)
    )
    target = env.random_mappings(1, np.random.default_rng(0))[0]
    assert imitate(actor, env.graph, target, steps=0) < 1.0
    assert imitate(actor, env.graph, target, steps=1000) == 1.0
    np.testing.assert_array_equal(greedy(actor, env.graph), target)


@pytest.mark.parametrize("name", ["ga", "sa", "greedy-dp", "nevergrad"])
def test_native_start_of_the_baselines_measures_the_compilers_map_first(name):
    if name == "nevergrad":
        pytest.importorskip("nevergrad")
    env = small_env()
    options = {"ga": {"population": 8}, "sa": {"chains": 2}, "greedy-dp": {}, "nevergrad": {}}
    options = options[name]
    cfg = TrainConfig(
        budget=40,
        progress=False,
        agent=config_class(name)(name=name, options={**options, "start": "native"}),
    )
    agent = make_agent(env, cfg)
    agent.step()
    assert agent.ledger.best.speedup >= 1.0


def test_an_unknown_start_names_the_agent():
    cfg = small_config(budget=10)
    cfg.agent.options = {"start": "sram"}
    with pytest.raises(ValueError, match="agent 'egrl': option start"):
        EGRLAgent(small_env(), cfg)
