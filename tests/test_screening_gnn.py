"""``screen=gnn``: a graph network over the workload graph and the map ranks candidates."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from egrl import make_env
from egrl.agents import make_agent, train_config
from egrl.screening.features import Featurizer
from egrl.screening.gnn import GNNModel
from egrl.screening.models import Domain, Ensemble, ForestModel, Measured, build_model
from egrl.screening.screen import SCREEN_COLUMNS, spearman, top_quarter
from egrl.validation import ConfigError
from tests.support.screening import earlier_run

pytestmark = pytest.mark.usefixtures("one_thread")


def bare_domain(env) -> Domain:
    """The workload of ``env`` without the target's description: graph and map alone."""
    domain = Domain.of(env)
    featurize = Featurizer(SimpleNamespace(), env.num_choices)
    return Domain(domain.name, featurize, domain.graph, domain.num_choices, domain.num_units)


def random_measured(env, count: int, seed: int) -> Measured:
    maps = env.random_mappings(count, np.random.default_rng(seed))
    return Measured(Domain.of(env), maps.astype(np.int16), env.evaluate(maps).reward)


def test_gnn_ranks_a_reward_that_lies_in_the_graph():
    env = make_env("nnpi", "resnet18")
    domain = bare_domain(env)
    maps = env.random_mappings(500, np.random.default_rng(0))
    # neighbouring layers whose first head agrees (say, producer and consumer in the same
    # memory level): only the graph says which units are neighbours
    source, dest = env.graph.edge_index.numpy()
    agree = (maps[:, source, 0] == maps[:, dest, 0]).sum(axis=1).astype(np.float64)
    train, test = slice(0, 400), slice(400, 500)
    predicted = {}
    for name, model in [("gnn", GNNModel(seed=0)), ("forest", ForestModel(seed=0, trees=32))]:
        model.fit([Measured(domain, maps[train], agree[train])])
        predicted[name] = model.predict(domain, maps[test])
        assert predicted[name].shape == (100,) and predicted[name].dtype == np.float64
    assert spearman(predicted["gnn"], agree[test]) > 0.6
    assert top_quarter(predicted["gnn"], agree[test]) >= 0.5
    assert spearman(predicted["forest"], agree[test]) < 0.3  # a one-hot map sees no edges

    # the simulator's own rewards, from the graph and the map alone (no description)
    reward = env.evaluate(maps[:300]).reward
    model = GNNModel(seed=0)
    model.fit([Measured(domain, maps[:200], reward[:200])])
    assert spearman(model.predict(domain, maps[200:300]), reward[200:]) > 0.6


def test_a_fit_depends_on_the_seed_and_the_data_alone():
    env = make_env("nnpi", "resnet18")
    data = [random_measured(env, 60, 0)]
    maps = env.random_mappings(20, np.random.default_rng(1))
    torch.manual_seed(123)
    state = torch.get_rng_state()
    options = {"steps": 40, "hidden": 8}
    first = build_model("gnn", 7, options)
    first.fit(data)
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is untouched
    torch.rand(3)  # whatever happens in between
    second = build_model("gnn", 7, options)
    second.fit(data)
    np.testing.assert_array_equal(
        first.predict(data[0].domain, maps), second.predict(data[0].domain, maps)
    )
    other = build_model("gnn", 8, options)
    other.fit(data)
    assert not np.array_equal(
        other.predict(data[0].domain, maps), first.predict(data[0].domain, maps)
    )


def test_gnn_fits_on_several_workloads_and_ranks_another():
    data = [
        random_measured(make_env("nnpi", w), 40, i) for i, w in enumerate(("resnet18", "resnet34"))
    ]
    assert data[0].maps.shape[1] != data[1].maps.shape[1]  # two graphs
    model = GNNModel(seed=0, steps=60)
    model.fit(data)
    target = make_env("nnpi", "mobilenet-v2")
    maps = target.random_mappings(30, np.random.default_rng(2))
    predicted = model.predict(Domain.of(target), maps)
    assert predicted.shape == (30,) and np.isfinite(predicted).all()
    # in the scale of the first set's rewards
    own = model.predict(data[0].domain, np.asarray(data[0].maps))
    assert abs(own.mean() - data[0].rewards.mean()) < data[0].rewards.std()

    chips = make_env("mcm", "mobilenet-d50-w50-k5-e4")  # other heads: refused, named
    with pytest.raises(ValueError, match="has heads"):
        model.predict(Domain.of(chips), chips.random_mappings(2, np.random.default_rng(0)))


def gnn_run(budget: int, **screen):
    screen = {"name": "gnn", "pool": 3, "explore": 0.25, "warmup": 12, "steps": 40, **screen}
    return train_config(
        {
            "seed": 0,
            "budget": budget,
            "progress": False,
            "agent": {"name": "random", "batch": 10},
            "screen": screen,
        }
    )


def test_a_random_search_screened_by_the_gnn_respects_its_budget():
    env = make_env("nnpi", "resnet18")
    run = make_agent(env, gnn_run(50))
    run.run()
    assert run.ledger.iterations == 50 == env.num_evaluations
    assert run.ledger.screen is not None and len(run.ledger.screen) == 50
    assert isinstance(run.ledger.screen.model, GNNModel)
    assert run.ledger.pool == 3
    for column in SCREEN_COLUMNS:
        quality = np.array([r[column] for r in run.rows])
        assert np.isnan(quality[0]) and np.isfinite(quality[2:]).all()


def test_a_gnn_ensemble_ranks_by_its_mean_and_spreads_across_its_members():
    env = make_env("nnpi", "resnet18")
    data = [random_measured(env, 60, 0)]
    maps = env.random_mappings(20, np.random.default_rng(1))
    options = {"steps": 40, "hidden": 8}
    assert isinstance(build_model("gnn", 7, {**options, "ensemble": 1}), GNNModel)
    ensemble = build_model("gnn", 7, {**options, "ensemble": 3})
    assert isinstance(ensemble, Ensemble) and len(ensemble.members) == 3
    ensemble.fit(data)
    domain = data[0].domain
    each = np.stack([m.predict(domain, maps) for m in ensemble.members])
    mean, spread = ensemble.predict_with_spread(domain, maps)
    np.testing.assert_allclose(mean, each.mean(axis=0))
    np.testing.assert_allclose(spread, each.std(axis=0))
    assert (spread > 0).all()  # members with their own seeds disagree
    np.testing.assert_array_equal(ensemble.predict(domain, maps), mean)
    again = build_model("gnn", 7, {**options, "ensemble": 3})
    again.fit(data)
    np.testing.assert_array_equal(again.predict(domain, maps), mean)  # seed and data alone


def test_gnn_options_are_checked():
    env = make_env("nnpi", "resnet18")
    with pytest.raises(ConfigError, match=r"screen.hidden=0 is invalid: expected an integer >= 1"):
        make_agent(env, gnn_run(20, hidden=0))
    with pytest.raises(ConfigError, match=r"screen.lr=0 is invalid: expected a number > 0"):
        make_agent(env, gnn_run(20, lr=0))
    with pytest.raises(ConfigError, match=r"screen.ensemble=0 is invalid: expected an integer"):
        make_agent(env, gnn_run(20, ensemble=0))
    with pytest.raises(ConfigError, match=r"screen 'gnn' has no option 'trees'"):
        make_agent(env, gnn_run(20, trees=8))


def test_a_gnn_screen_starts_from_an_earlier_run_of_another_workload(tmp_path):
    earlier = earlier_run(tmp_path / "resnet18", "resnet18", budget=40)
    run = make_agent(make_env("nnpi", "resnet34"), gnn_run(30, warmup=0, init_from=[str(earlier)]))
    assert [m.domain.name for m in run.ledger.screen.earlier] == ["resnet18"]
    assert run.ledger.screen.refit() and run.ledger.screen.active  # fitted on resnet18 alone
    run.run()
    assert run.ledger.iterations == 30
    assert np.isfinite(float(run.rows[0]["screen_spearman"]))
