"""Screening: features, the forest, the screen's choices, the agents that use it, the CLI."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from omegaconf import OmegaConf

from egrl import make_env
from egrl.agents import make_agent, train_config
from egrl.agents.base import METRIC_COLUMNS, TIMING_COLUMNS
from egrl.cli.resume import with_screen_of_its_time
from egrl.config import ScreenConfig, config_problems
from egrl.measure_cache import MeasureCache
from egrl.screening.features import Featurizer, one_hot
from egrl.screening.models import BoostModel, Domain, ForestModel, Measured
from egrl.screening.screen import SCREEN_COLUMNS, Screen, spearman, top_quarter
from egrl.validation import ConfigError
from tests.support.command_line import assert_refused, egrl_train, egrl_train_in_process
from tests.support.metrics import read_metrics
from tests.support.screening import assert_resumes_identically, run_config

pytestmark = pytest.mark.usefixtures("one_thread")


def config(agent: dict, budget: int, seed: int = 0, **screen):
    """A run on resnet18 with a forest screen (small pool, warmup and forest)."""
    screen = {"name": "forest", "pool": 3, "explore": 0.25, "warmup": 12, "trees": 16, **screen}
    return run_config(agent, budget, screen, seed)


# ------------------------------------------------------------------ features
def test_one_hot_has_one_block_per_unit_and_head():
    num_choices = np.array([3, 2])
    maps = np.array([[[0, 1], [2, 0]], [[1, 1], [0, 0]]])
    x = one_hot(maps, num_choices)
    assert x.shape == (2, 2 * 5) and x.dtype == np.float32
    blocks = x.reshape(2, 2, 5)
    assert (blocks[..., :3].sum(-1) == 1).all() and (blocks[..., 3:].sum(-1) == 1).all()
    assert blocks[0, 1, :3].argmax() == 2 and blocks[1, 0, 3:].argmax() == 1


def test_features_add_the_targets_description_when_it_has_one():
    env = make_env("nnpi", "resnet18")
    maps = env.random_mappings(5, np.random.default_rng(0))
    width = env.num_units * int(env.num_choices.sum())
    described = Featurizer(env.target, env.num_choices)
    names = env.target.description_names
    assert names and described(maps).shape == (5, width + len(names))
    assert np.isfinite(described(maps)).all()
    bare = Featurizer(SimpleNamespace(), env.num_choices)  # a target without describe
    assert bare(maps).shape == (5, width) and bare.description_names == []


# ------------------------------------------------------------------- models
def rows_domain(x: np.ndarray) -> tuple[Domain, np.ndarray]:
    """A domain whose map ``[[[i]]]`` has the features ``x[i]``, and those maps."""

    def featurize(maps: np.ndarray) -> np.ndarray:
        return x[maps[:, 0, 0]]

    maps = np.arange(len(x))[:, None, None]
    return Domain("rows", featurize, None, np.array([len(x)])), maps


def fit_and_rank(x: np.ndarray, reward: np.ndarray) -> tuple[float, float]:
    """Spearman and top-quarter share of a forest fitted on 200 maps, on 100 others."""
    domain, maps = rows_domain(x)
    model = ForestModel(seed=0, trees=32)
    model.fit([Measured(domain, maps[:200], reward[:200])])
    predicted = model.predict(domain, maps[200:])
    assert predicted.shape == (100,)
    return spearman(predicted, reward[200:]), top_quarter(predicted, reward[200:])


def test_forest_ranks_a_monotone_problem():
    rng = np.random.default_rng(0)
    maps = rng.integers(0, 3, size=(300, 12, 2))
    x = one_hot(maps, np.array([3, 3]))
    # reward grows with the choices of a few decisions: the one-hot alone ranks it
    rho, top = fit_and_rank(x, maps[:, :3, 0].sum(axis=1).astype(float))
    assert rho > 0.9 and top >= 0.7
    # a count over the whole map: trees on one-hot alone rank it poorly, a description
    # column (what Target.describe adds) ranks it well
    count = (maps == 2).sum(axis=(1, 2)).astype(float)
    weak, _ = fit_and_rank(x, count)
    rho, top = fit_and_rank(np.concatenate([x, count[:, None].astype(np.float32)], 1), count)
    assert weak < 0.7 and rho > 0.9 and top >= 0.7


def test_boosted_trees_predict_above_every_reward_they_were_fitted_on():
    """Two improvements seen apart, added: boosted stumps exceed their best training
    reward, the forest's average of trees cannot."""
    rng = np.random.default_rng(0)
    maps = rng.integers(0, 2, size=(200, 10, 1))
    maps[maps[:, 0, 0] == 1, 1, 0] = 0  # units 0 and 1 never both on choice 1
    reward = (maps[:, 0, 0] + maps[:, 1, 0]).astype(float) + 0.01 * rng.random(200)
    domain = SimpleNamespace(featurize=lambda m: one_hot(m, np.array([2])))
    both = np.zeros((1, 10, 1), dtype=np.int64)
    both[0, :2, 0] = 1
    stumps = BoostModel(seed=0, max_leaf_nodes=2)  # an additive model of the choices
    for model, above in ((stumps, True), (ForestModel(seed=0), False)):
        model.fit([Measured(domain, maps, reward)])
        assert (model.predict(domain, both)[0] > reward.max() + 0.5) == above


def test_quality_metrics():
    measured = np.arange(8.0)
    assert spearman(measured, measured) == pytest.approx(1.0)
    assert spearman(-measured, measured) == pytest.approx(-1.0)
    assert top_quarter(measured, measured) == 1.0 and top_quarter(-measured, measured) == 0.0
    assert np.isnan(spearman(np.ones(1), np.ones(1))) and np.isnan(
        top_quarter(np.ones(1), np.ones(1))
    )


# ------------------------------------------------------------------- select
class SumModel:
    """It predicts the sum of a map's choices (no fitting)."""

    def fit(self, data):
        pass

    def predict(self, domain, maps):
        return np.asarray(maps).reshape(len(maps), -1).sum(axis=1).astype(np.float64)


def fitted_screen(explore: float = 0.0, cache: MeasureCache | None = None) -> Screen:
    cache = cache if cache is not None else MeasureCache(100, max_choices=10)
    domain = Domain("toy", None, None, np.array([10]))
    screen = Screen(
        ScreenConfig(name="forest", pool=4, explore=explore, warmup=0), domain, cache, 0
    )
    screen.model = SumModel()
    return screen


def candidates(values) -> np.ndarray:
    """Maps ``[P, 1, 1]`` whose predicted reward is their value."""
    return np.asarray(values, dtype=np.int64).reshape(-1, 1, 1)


def test_select_keeps_the_top_new_maps_and_never_a_known_one():
    cache = MeasureCache(100, max_choices=10)
    maps = candidates([3, 9, 1, 7, 8, 9, 5, 2])
    known = maps[[1]]  # the 9s are known: free, never counted
    cache.remember(cache.keys(known)[0], known[0], True, 0.0, 1.0)
    screen = fitted_screen(cache=cache)
    picked = screen.select(maps, keep=3)
    assert picked.tolist() == [3, 4, 6]  # 7, 8 and 5; both 9s known
    assert screen.select(maps, keep=3, free=True).tolist() == [1, 3, 4, 6]
    assert screen.select(maps, keep=20).tolist() == [0, 2, 3, 4, 6, 7]  # no repeats


def test_select_explores_a_share_of_each_batch_at_random():
    screen = fitted_screen(explore=0.5)
    maps = candidates(range(40))
    picked = screen.select(maps, keep=10)
    assert len(picked) == 10 and len(set(picked.tolist())) == 10
    top = set(range(30, 40))
    assert len(top & set(picked.tolist())) == 5  # the other 5 drawn from the rest
    again = fitted_screen(explore=0.5).select(maps, keep=10)
    assert again.tolist() == picked.tolist()  # seeded


def test_select_chooses_per_group_and_choose_keeps_a_known_own_map():
    cache = MeasureCache(100, max_choices=10)
    pools = np.array([[1, 4, 2], [6, 3, 5], [0, 0, 7]]).reshape(3, 3, 1, 1)
    cache.remember(cache.keys(pools[1, :1])[0], pools[1, 0], True, 0.0, 1.0)
    screen = fitted_screen(cache=cache)
    flat = pools.reshape(9, 1, 1)
    groups = np.repeat(np.arange(3), 3)
    assert screen.select(flat, keep=1, groups=groups).tolist() == [1, 5, 8]
    # group 2 holds 0 twice: its two new maps are the first 0 and the 7
    assert screen.select(flat, keep=2, groups=groups).tolist() == [1, 2, 4, 5, 6, 8]
    # member 1's own map is known: it keeps it (free); the others take their best new map
    assert screen.choose(pools).tolist() == [1, 0, 2]


def test_without_a_model_the_agents_first_proposals_are_kept():
    screen = fitted_screen()
    screen.model = None
    assert screen.select(candidates([5, 1, 9, 3]), keep=2).tolist() == [0, 1]
    assert screen.choose(candidates(range(6)).reshape(2, 3, 1, 1)).tolist() == [0, 0]


def test_refit_waits_for_the_warmup_and_state_round_trips():
    env = make_env("nnpi", "resnet18")
    rng = np.random.default_rng(0)
    cfg = ScreenConfig(name="forest", pool=2, warmup=20, options={"trees": 8})
    screen = Screen(cfg, Domain.of(env), MeasureCache(0, 3), seed=1)
    maps = env.random_mappings(30, rng)
    screen.observe(maps[:10], rng.random(10))
    assert not screen.refit() and not screen.active
    screen.observe(maps[10:25], rng.random(15))
    assert screen.refit() and screen.active and not screen.refit()
    other = Screen(cfg, Domain.of(env), MeasureCache(0, 3), seed=1)
    other.load_state_dict(screen.state_dict())
    assert other.refit()
    np.testing.assert_array_equal(other.predict(maps[25:]), screen.predict(maps[25:]))


# ------------------------------------------------------------------- agents
@pytest.mark.parametrize(
    ("agent", "budget"),
    [({"name": "random", "batch": 10}, 60), ({"name": "ea", "use_learner": False}, 60)],
)
def test_screening_runs_log_the_model_and_resume_identically(agent, budget, tmp_path):
    env = make_env("nnpi", "resnet18")
    reference = tmp_path / "reference"
    run = make_agent(env, config(agent, budget), reference)
    run.run()
    assert run.ledger.iterations == budget == env.num_evaluations
    rows = read_metrics(reference)
    assert set(SCREEN_COLUMNS) <= set(rows[0])
    # no model in the first generation; past the warmup the model ranks the paid maps
    # (NaN where a generation paid fewer than two maps, or maps of one reward)
    for column in SCREEN_COLUMNS:
        quality = np.array([float(r[column]) for r in rows])
        assert np.isnan(quality[0]) and np.isfinite(quality).sum() >= len(rows) // 2

    assert_resumes_identically(reference, tmp_path / "resumed", config(agent, budget), 12)


@pytest.mark.parametrize(
    "agent",
    [
        {"name": "egrl"},
        {"name": "pg", "use_population": False, "migration": False},
        {"name": "ga", "population": 8},
        {"name": "sa", "chains": 2, "steps": 4},
    ],
)
def test_every_screening_agent_respects_its_budget(agent):
    env = make_env("nnpi", "resnet18")
    run = make_agent(env, config(agent, 40, warmup=10), None)
    run.run()
    assert run.ledger.iterations == 40 == env.num_evaluations
    assert run.ledger.screen is not None and len(run.ledger.screen) == 40
    assert np.isfinite([r["screen_spearman"] for r in run.rows[-2:]]).any()


def test_agents_that_do_not_screen_refuse_a_screen():
    with pytest.raises(ConfigError, match="agent 'greedy-dp' does not screen its proposals"):
        make_agent(make_env("nnpi", "resnet18"), config({"name": "greedy-dp"}, 10))


def test_without_screening_metrics_keep_their_columns():
    env = make_env("nnpi", "resnet18")
    run = make_agent(env, train_config({"agent": {"name": "random"}, "progress": False}))
    assert run.ledger.screen is None and run.ledger.pool == 1
    assert run.columns == METRIC_COLUMNS + TIMING_COLUMNS[1:]


# ------------------------------------------------------------------- config
def test_screen_values_are_checked():
    bad = {"screen": {"name": "bogus", "pool": 0, "explore": 1.0, "warmup": -1}}
    assert config_problems(bad) == [
        "screen.name=bogus is invalid: expected one of none, forest, boost, critic, gnn",
        "screen.pool=0 is invalid: expected an integer >= 1",
        "screen.explore=1.0 is invalid: expected a number in [0, 1)",
        "screen.warmup=-1 is invalid: expected an integer >= 0",
    ]


def test_a_run_saved_before_screening_resumes_as_screen_none():
    old = OmegaConf.create({"seed": 0})
    assert with_screen_of_its_time(old).screen.name == "none"
    new = OmegaConf.create({"screen": {"name": "forest"}})
    assert with_screen_of_its_time(new).screen.name == "forest"


def test_an_unknown_screen_is_refused_before_any_directory(tmp_path):
    args = ["workload=resnet18", "budget=20", "agent=ea", "screen=forest", "screen=bogus"]
    line = "screen=bogus is invalid: expected one of boost, critic, forest, gnn, none"
    assert_refused(egrl_train_in_process(*args, cwd=tmp_path), line)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("screen.pool=0", "screen.pool=0 is invalid: expected an integer >= 1"),
        ("screen.explore=1.5", "screen.explore=1.5 is invalid: expected a number in [0, 1)"),
        ("screen.warmup=-1", "screen.warmup=-1 is invalid: expected an integer >= 0"),
    ],
)
def test_bad_screen_options_are_refused_before_any_directory(tmp_path, override, line):
    args = ["workload=resnet18", "budget=20", "agent=ea", "screen=forest", override]
    assert_refused(egrl_train_in_process(*args, cwd=tmp_path), line)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_an_agent_that_does_not_screen_refuses_a_screen(tmp_path):
    """A real process: the line names the agents registered there (tests register more)."""
    args = ["workload=resnet18", "budget=20", "agent=greedy-dp", "screen=forest"]
    line = (
        "screen=forest is invalid: agent 'greedy-dp' does not screen its proposals "
        "(agents that do: ea, egrl, ga, mbo, pg, random, sa)"
    )
    assert_refused(egrl_train(*args, cwd=tmp_path), line)
    assert list(tmp_path.iterdir()) == []
