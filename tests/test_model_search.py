"""Model-based search (``screen.search``, ``screen.kappa``): the acquisition, the agents
that search the model between paid batches, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from egrl import make_env
from egrl.agents import make_agent, train_config
from egrl.cli.checks import configured_agents, screen_problems
from egrl.config import ScreenConfig, config_problems
from egrl.measure_cache import MeasureCache
from egrl.screening.base import Domain, Measured
from egrl.screening.models import ForestModel
from egrl.screening.screen import Screen, expected_improvement
from egrl.validation import ConfigError
from tests.support.command_line import assert_refused, compose, egrl_train_in_process

pytestmark = pytest.mark.usefixtures("one_thread")


def config(agent: dict, budget: int, **screen):
    screen = {"name": "forest", "pool": 2, "warmup": 10, **screen}
    return train_config({"budget": budget, "progress": False, "agent": agent, "screen": screen})


def forest_screen(kappa: float, acquisition: str = "ucb") -> tuple[Screen, np.ndarray]:
    """A forest fitted on 60 measured maps of resnet18 on NNP-I, and 20 more maps."""
    env = make_env("nnpi", "resnet18")
    rng = np.random.default_rng(0)
    maps = env.random_mappings(80, rng)
    rewards = env.evaluate(maps[:60]).reward
    cache = MeasureCache(100, env.max_choices)
    domain = Domain.of(env)
    screen_cfg = ScreenConfig(name="forest", kappa=kappa, acquisition=acquisition)
    screen = Screen(screen_cfg, domain, cache, seed=0)
    screen.model = ForestModel(seed=0, trees=16)
    screen.model.fit([Measured(domain, maps[:60], rewards)])
    screen.observe(maps[:60], rewards)
    return screen, maps[60:]


def test_expected_improvement_is_the_normal_excess_over_the_best_paid():
    mean, std = np.array([1.0, 2.0, 2.0, 0.5]), np.array([0.0, 0.0, 1.0, 1.0])
    ei = expected_improvement(mean, std, best=1.5)
    assert ei[0] == 0.0 and ei[1] == 0.5  # no spread: the mean's excess, 0 at least
    # a normal of mean 2, sd 1 over 1.5: 0.5 * Phi(0.5) + phi(0.5)
    np.testing.assert_allclose(ei[2], 0.5 * 0.691462461 + 0.352065327, rtol=1e-6)
    assert 0 < ei[3] < ei[2]
    np.testing.assert_array_equal(expected_improvement(mean, std, -np.inf), mean)


def test_ei_scores_unpaid_maps_by_their_improvement_and_paid_maps_at_most_0():
    screen, maps = forest_screen(kappa=0.0, acquisition="ei")
    mean, spread = screen.model.predict_with_spread(screen.domain, maps)
    best = screen.best_paid()
    np.testing.assert_allclose(screen.acquisition(maps), expected_improvement(mean, spread, best))
    assert (screen.acquisition(maps) >= 0).all()
    paid, _ = forest_screen(kappa=0.0, acquisition="ei")
    measured = np.asarray(paid.value(paid_maps(paid)))
    assert (measured <= 0).all() and measured.max() == 0.0  # the best paid map itself


def paid_maps(screen: Screen) -> np.ndarray:
    """The maps the screen has seen paid, int64 ``[M, N, H]``."""
    return (
        np.stack([np.frombuffer(k, np.int16) for k in screen._paid])
        .reshape(len(screen._paid), screen.domain.num_units, -1)
        .astype(np.int64)
    )


def test_the_acquisition_is_the_mean_plus_kappa_spreads():
    plain, maps = forest_screen(kappa=0.0)
    assert np.array_equal(plain.acquisition(maps), plain.predict(maps))  # kappa 0: the mean
    optimistic, _ = forest_screen(kappa=2.0)
    mean, spread = optimistic.model.predict_with_spread(optimistic.domain, maps)
    np.testing.assert_allclose(mean, optimistic.predict(maps), rtol=1e-9, atol=1e-12)
    assert (spread >= 0).all() and spread.max() > 0
    np.testing.assert_allclose(optimistic.acquisition(maps), mean + 2.0 * spread)


@pytest.mark.parametrize(
    ("agent", "screen"),
    [
        ({"name": "sa", "chains": 2, "steps": 4}, {"search": 8, "kappa": 0.5}),
        ({"name": "random", "batch": 8}, {"search": 16}),
        ({"name": "ea", "use_learner": False, "migration": False}, {"search": 3}),
        ({"name": "ga", "population": 8}, {"search": 4, "kappa": 0.5}),
    ],
)
def test_model_search_keeps_the_budget_and_the_seed(agent, screen):
    env = make_env("nnpi", "resnet18")
    run = make_agent(env, config(agent, 40, **screen))
    run.run()
    assert run.ledger.iterations == 40 == env.num_evaluations
    assert run.ledger.screen.active and len(run.ledger.screen) == 40
    again = make_agent(make_env("nnpi", "resnet18"), config(agent, 40, **screen))
    again.run()
    assert [r["best_reward"] for r in again.rows] == [r["best_reward"] for r in run.rows]


def test_sa_proposes_from_its_walk_on_the_model():
    """Once the model is fitted, each chain's paid map is one its walk on the model visited:
    the walk's steps are ``search``, so it differs from the one-neighbour pool of today."""
    env = make_env("nnpi", "resnet18")
    agent = make_agent(env, config({"name": "sa", "chains": 2, "steps": 2}, 60, search=6))
    walked = []
    walk = agent._model_walk
    agent._model_walk = lambda first, temp: walked.append(walk(first, temp)) or walked[-1]
    agent.run()
    assert walked and all(w.shape[:2] == (2, 6) for w in walked)


def test_ea_pays_the_best_unseen_maps_its_population_visited_on_the_model():
    """Once the model is fitted, a generation evolves the population ``search`` times on
    the acquisition and pays one map per member: the top of what it visited by the
    acquisition (no explore share here), none of them known before."""
    env = make_env("nnpi", "resnet18")
    agent_cfg = {"name": "ea", "use_learner": False, "migration": False}
    agent = make_agent(env, config(agent_cfg, 60, search=3, explore=0.0))
    searches, paid = [], []
    generations, submit = agent._model_generations, agent.ledger.submit

    def record_generations():
        maps, kinds, probs = generations()
        known = agent.ledger.screen.known(maps)
        searches.append((maps, kinds, agent.ledger.screen.acquisition(maps), known))
        return maps, kinds, probs

    def record_submit(maps, source, probs=None):
        if len(searches) == 1:  # the first generation that searched the model
            paid.append(np.asarray(maps).copy())
        return submit(maps, source, probs=probs)

    agent._model_generations, agent.ledger.submit = record_generations, record_submit
    agent.run()
    size = agent.population.size
    assert searches and all(len(maps) == 3 * size for maps, *_ in searches)
    maps, kinds, score, known = searches[0]
    assert list(kinds[:size]) == list(agent.population.kinds)
    paid = np.concatenate(paid)
    rows = np.array([np.flatnonzero((maps == m).all(axis=(1, 2)))[0] for m in paid])
    assert len(set(agent.ledger.cache.keys(paid))) == len(rows) == size and not known[rows].any()
    unpaid = np.ones(len(maps), dtype=bool)
    unpaid[rows] = False
    for row in np.flatnonzero(unpaid & ~known):  # a new map left unpaid ranks lower
        assert score[row] <= score[rows].min() or (maps[row] == maps[rows]).all(axis=(1, 2)).any()


def test_pg_has_no_population_to_search_the_model_with():
    with pytest.raises(ConfigError, match="screen.search=2 is invalid: agent 'pg' cannot"):
        make_agent(
            make_env("nnpi", "resnet18"),
            config({"name": "pg", "use_population": False}, 10, search=2),
        )


@pytest.mark.parametrize(
    ("screen", "line"),
    [
        ({"search": -1}, "screen.search=-1 is invalid: expected an integer >= 0 or auto"),
        ({"search": 1.5}, "screen.search=1.5 is invalid: expected an integer >= 0 or auto"),
        ({"kappa": -1}, "screen.kappa=-1 is invalid: expected a number >= 0"),
        ({"acquisition": "pi"}, "screen.acquisition=pi is invalid: expected one of ucb, ei"),
    ],
)
def test_bad_search_values_are_named(screen, line):
    assert config_problems({"screen": screen}) == [line]


@pytest.mark.parametrize(
    ("agent", "screen", "generations"),
    [
        ({"name": "ea"}, "forest", 10),
        ({"name": "egrl"}, "forest", 10),
        ({"name": "egrl"}, "gnn", 10),
        ({"name": "ga"}, "forest", 0),
        ({"name": "sa"}, "forest", 0),
        ({"name": "random"}, "forest", 0),
        ({"name": "egrl"}, "critic", 0),  # searching the critic did not pay: its default is 0
        ({"name": "pg", "use_population": False}, "forest", 0),  # no population to search with
    ],
)
def test_a_screen_searches_the_model_where_the_study_found_it_pays(agent, screen, generations):
    """``screen=forest`` and ``screen=gnn`` default to ``screen.search=auto``: model search
    for EA and EGRL, pool re-ranking for the rest."""
    section = OmegaConf.to_container(compose(f"screen={screen}").screen)
    assert section["search"] == ("auto" if screen != "critic" else 0)
    section = {**section, "warmup": 10}
    cfg = train_config({"budget": 20, "progress": False, "agent": agent, "screen": section})
    assert make_agent(make_env("nnpi", "resnet18"), cfg).search_generations == generations


def test_auto_without_a_screen_searches_nothing_and_is_not_refused():
    assert config_problems({"screen": {"search": "auto"}}) == []
    cfg = config({"name": "sa"}, 10, name="none", search="auto")
    assert make_agent(make_env("nnpi", "resnet18"), cfg).search_generations == 0


def test_an_agent_that_cannot_search_the_model_refuses_it(tmp_path):
    """pg has no population to search with; an agent that does not screen is refused its
    screen; model search without a screen has no model."""
    args = ["workload=resnet18", "budget=20", "agent=pg", "screen=forest", "screen.search=4"]
    # in this process other tests may have registered more agents (subclasses of these)
    can = configured_agents("searches_model")
    assert {"ea", "egrl", "ga", "random", "sa"} <= set(can) and not {"greedy-dp", "pg"} & set(can)
    line = (
        "screen.search=4 is invalid: agent 'pg' cannot search the model "
        f"(agents that can: {', '.join(can)})"
    )
    assert_refused(egrl_train_in_process(*args, cwd=tmp_path), line)
    args = ["workload=resnet18", "budget=20", "agent=greedy-dp", "screen=forest", "screen.search=4"]
    refused = egrl_train_in_process(*args, cwd=tmp_path)
    task = {"screen": {"name": "forest", "search": 4}, "agent": {"name": "greedy-dp"}}
    (line,) = screen_problems(task)
    assert line.startswith("screen=forest is invalid: agent 'greedy-dp' does not screen")
    assert_refused(refused, line)
    args = ["workload=resnet18", "budget=20", "agent=ea", "screen.search=4"]
    line = (
        "screen.search=4 is invalid: screen=none has no model to search "
        "(choose one: screen=forest|boost|critic|gnn)"
    )
    assert_refused(egrl_train_in_process(*args, cwd=tmp_path), line)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="screen.search=4 is invalid: screen=none has no"):
        make_agent(make_env("nnpi", "resnet18"), config({"name": "sa"}, 10, name="none", search=4))
