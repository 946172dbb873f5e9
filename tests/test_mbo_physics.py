"""``agent=mbo`` physics first: the prior calibrated to the readings, a residual, the
acquisition solved exactly in a trust region (:mod:`egrl.agents.mbo.physics`)."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from egrl import make_env
from egrl.agents import make_agent
from egrl.agents.mbo.agent import CALIBRATION_FILE, distance
from egrl.agents.mbo.physics import (
    ChipReadings,
    TrustRegion,
    fit_model,
    one_hot,
    solve_batch,
    window_units,
)
from egrl.validation import ConfigError
from hwmodels.nnpi.calibrate import Calibration
from hwmodels.nnpi.prior import own_prior
from tests.nnpi_workloads import residual
from tests.support.chips import CHIP
from tests.support.command_line import assert_refused, egrl_train_in_process
from tests.support.envs import noisy_env, small_env
from tests.support.metrics import read_metrics
from tests.support.paths import PY
from tests.support.screening import run_config
from tests.support.units import KIB

#: mbo's screen as ``configs/agent/mbo.yaml`` sets it up (a small forest)
SCREEN = {"name": "forest", "warmup": 0, "explore": 0.2, "options": {"trees": 16}}
#: the datasheet of :func:`chip_env`'s chip: its capacities and NNP-I's default bandwidths
#: and compute rate (the chip's DRAM is slower, and each DRAM transfer pays a set-up time)
DATASHEET = {"name": "nnpi", "sram_mib": 1.0, "llc_mib": 2.0}
#: the chip's own figures, which the datasheet does not give
CHIP_FIGURES = ["--dram-gbps", "40", "--dram-access-us", "1"]


def physics_config(budget: int = 30, seed: int = 0, run: dict | None = None, **options):
    """A small physics-first run: rounds of 4 solved maps, searchers of 60 model calls."""
    agent = {
        "name": "mbo",
        "depth": 60,
        "batch": 4,
        "steps": 2,
        "solutions": 4,
        "solve_time_s": 0.5,
        **options,
    }
    return run_config(agent, budget, SCREEN, seed, **(run or {}))


def chip_workload():
    """The 13-node residual network of :func:`tests.support.envs.small_env`."""
    return residual(4, act_bytes=96 * KIB, weight_bytes=700 * KIB, macs=2_000_000)


def chip_env():
    """The example chip (1 MiB of SRAM, 2 MiB of LLC) with :data:`DATASHEET` as its prior."""
    command = [PY, CHIP, "--sram-kib", "1024", "--llc-kib", "2048", *CHIP_FIGURES]
    return make_env("external", chip_workload(), command=command, prior=DATASHEET)


@pytest.fixture(scope="module")
def chip_run():
    env = chip_env()
    agent = make_agent(env, physics_config(budget=25))
    agent.run()
    return env, agent


# ------------------------------------------------------------------ the loop
def test_on_a_chip_with_a_prior_physics_is_on_and_pays_the_solved_prior_first(chip_run):
    env, agent = chip_run
    assert agent.datasheet is env.target.prior and agent.start == "prior"
    prior_map = env.prior_solution(60.0).mapping
    archive = agent.ledger.archive
    first = archive.actions[archive.in_order()[0]]
    np.testing.assert_array_equal(first, prior_map)
    prior_speedup = float(env.evaluate(prior_map[None]).speedup[0])
    speedups = [row["best_speedup"] for row in agent.rows]
    assert min(speedups) >= prior_speedup - 1e-12  # its best never falls below the prior's
    assert agent.ledger.iterations == 25


def test_a_physics_round_solves_distinct_unread_maps_the_compiler_accepts(chip_run):
    env, agent = chip_run
    rows = agent.rows
    assert all(r["solves"] >= 0 for r in rows) and sum(r["solves"] for r in rows) > 0
    maps = agent.ledger.archive.actions[agent.ledger.archive.in_order()]
    assert len(np.unique(maps.reshape(len(maps), -1), axis=0)) == len(maps)
    assert env.target.check(maps).valid.all()  # every paid map as the compiler accepts it
    assert {"radius", "solves", "solver_refused", "model_spread", "t_fit", "t_solve"} <= set(
        rows[-1]
    )


def test_the_calibration_is_fitted_to_the_readings_and_carries_over(chip_run, tmp_path):
    env, agent = chip_run
    model = agent.model
    assert model.calibration is not None and model.calibration.readings == len(agent.readings)
    assert model.calibration.spread < 0.5 * model.calibration.start_spread
    # a run directory keeps the latest calibration; a new run's prior starts from it
    path = model.calibration.save(tmp_path / CALIBRATION_FILE)
    loaded = Calibration.load(path)
    assert loaded.figures == model.calibration.figures
    again = make_env(
        "external",
        chip_workload(),
        command=env.target.model.command,
        prior=loaded.prior_config(path),
    )
    assert again.target.prior.figures == model.calibration.figures


def test_the_run_directory_holds_the_calibration(tmp_path):
    agent = make_agent(chip_env(), physics_config(budget=9), tmp_path)
    agent.run()
    assert Calibration.load(tmp_path / CALIBRATION_FILE).readings == len(agent.readings)


def test_the_same_seed_gives_the_same_run():
    runs = []
    for _ in range(2):
        agent = make_agent(small_env(), physics_config(budget=20, seed=3, physics="on"))
        agent.run()
        runs.append(agent.ledger.archive.state_dict())
    for key in runs[0]:
        np.testing.assert_array_equal(np.asarray(runs[0][key]), np.asarray(runs[1][key]))


def test_a_resumed_run_writes_the_same_metrics(tmp_path):
    reference = tmp_path / "reference"
    cfg = physics_config(budget=21, physics="on")
    make_agent(small_env(), cfg, reference).run()
    ckpts = sorted((reference / "checkpoints").glob("gen_??????"))
    resumed = tmp_path / "resumed"
    shutil.copytree(ckpts[2], resumed / "checkpoints" / ckpts[2].name)
    again = make_agent(small_env(), cfg, resumed)
    assert again.resume()
    again.run()
    assert read_metrics(resumed) == read_metrics(reference)


def test_on_a_built_in_model_the_prior_is_the_model_and_its_optimum_is_paid_first():
    env = small_env()
    agent = make_agent(env, physics_config(budget=20, physics="on"))
    agent.run()
    best = env.optimum(time_limit_s=30).latency_s
    assert agent.ledger.best.latency_s <= best * (1 + 1e-9)


@pytest.mark.parametrize(
    "options",
    [
        {"acquire": "searchers"},
        {"residual": "forest"},
        {"region": False},
        {"calibrate": False},
        {"anywhere": 0},
    ],
)
def test_every_ablation_runs_and_keeps_the_prior(options):
    env = small_env()
    agent = make_agent(env, physics_config(budget=14, physics="on", **options))
    agent.run()
    prior = float(env.evaluate(env.prior_solution(60.0).mapping[None]).speedup[0])
    assert agent.ledger.iterations == 14 and agent.ledger.best.speedup >= prior - 1e-12


def test_maps_solved_anywhere_are_solved_over_every_unit_and_the_rest_in_the_region():
    env = small_env()
    agent = make_agent(
        env, physics_config(budget=17, physics="on", residual="none", anywhere=1, radius=1)
    )
    agent.run()
    agent.ledger.budget.total += 4  # a round more: the solve below may pay 4 maps
    read = agent._fit()
    agent.region.radius = 1
    found = agent._solve(read)
    anchors, _ = agent.readings.best(agent.options.anchors)
    assert len(found) == 4 and len(np.unique(found.reshape(4, -1), axis=0)) == 4
    keys = {m.tobytes() for m in read.astype(np.int16)}
    assert all(m.astype(np.int16).tobytes() not in keys for m in found)  # none read
    assert (distance(found[1:], anchors, units=True) <= 1).all()  # the rest in the region
    # the first is the model's best unread map over every unit, here outside the region
    anywhere, _ = solve_batch(
        agent.model, anchors[0], anchors, None, read, 1, 0.5, agent._accepts, agent._round_rng()
    )
    np.testing.assert_array_equal(found[0], anywhere[0])
    assert distance(found[:1], anchors, units=True)[0] > 1


@pytest.mark.slow
def test_on_a_noisy_board_calibration_reads_means_and_the_run_confirms():
    env = noisy_env()
    agent = make_agent(
        env, physics_config(budget=24, physics="on", run={"confirm": {"top": 2, "repeats": 2}})
    )
    agent.run()
    assert agent.confirmation is not None and agent.ledger.iterations == 24
    _, latency = agent.readings.arrays()
    assert np.isfinite(latency).all() and len(latency) <= agent.ledger.budget.paid_maps + 1


def test_physics_off_is_todays_mbo():
    env = chip_env()
    agent = make_agent(env, physics_config(budget=5, physics="off"))
    assert agent.datasheet is None and agent.start == "none"


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"radius": 0}, "option radius=0 is invalid: expected an integer >= 1"),
        (
            {"radius": 2, "radius_min": 3},
            "radius=2 is invalid with radius_min=3 and radius_max=64: expected radius_min "
            "<= radius <= radius_max",
        ),
        ({"residual": "gp"}, "option residual=gp is invalid: expected one of linear, forest, none"),
        ({"acquire": "bo"}, "option acquire=bo is invalid: expected one of solver, searchers"),
        ({"solve_time_s": 0}, "option solve_time_s=0 is invalid"),
        ({"prior_weight": -1}, "option prior_weight=-1 is invalid"),
        ({"physics": "yes"}, "option physics=yes is invalid: expected one of auto, on, off"),
        ({"window": 0}, "option window=0 is invalid: expected an integer >= 1 or null"),
        ({"solutions": 0}, "option solutions=0 is invalid: expected an integer >= 1"),
        ({"anywhere": -1}, "option anywhere=-1 is invalid: expected an integer >= 0"),
    ],
)
def test_bad_options_are_refused_in_one_line(options, problem):
    with pytest.raises(ConfigError, match=re.escape(problem)):
        make_agent(small_env(), physics_config(**options))


def test_physics_on_without_an_nnpi_prior_is_refused():
    env = make_env("mcm", "resnet18", reward="repaired")
    with pytest.raises(ConfigError, match=re.escape("agent.physics=on is invalid on MCMTarget")):
        make_agent(env, physics_config(physics="on"))


def test_egrl_train_refuses_a_bad_radius_with_exit_status_2(tmp_path):
    out = egrl_train_in_process("agent=mbo", "budget=20", "agent.radius=0", cwd=tmp_path)
    assert_refused(out, "agent 'mbo': option radius=0 is invalid: expected an integer >= 1")
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------ the parts
def test_readings_keep_each_map_once_at_the_mean_of_its_latencies():
    env = small_env()
    readings = ChipReadings(env)
    assert len(readings) == 1  # the compiler's map, read at binding
    maps = env.random_mappings(2, np.random.default_rng(0))
    readings.add(maps[[0, 0, 1]], np.array([1.0, 3.0, 5.0]))
    assert readings.latency_of(maps).tolist() == [2.0, 5.0]
    best, latency = readings.best(1)
    assert latency[0] == min(env.baseline_latency_s, 2.0)
    again = ChipReadings(env)
    again.load_state_dict(readings.state_dict())
    np.testing.assert_array_equal(again.arrays()[1], readings.arrays()[1])


def test_the_trust_region_grows_after_two_wins_shrinks_after_two_losses_and_restarts():
    region = TrustRegion(start=4, low=2, high=8)
    assert [region.update(True), region.update(True)] == [False, False] and region.radius == 8
    region.update(True), region.update(True)
    assert region.radius == 8  # at most high
    for _ in range(4):
        assert not region.update(False)
    assert region.radius == 2
    assert not region.update(False) and region.update(False)  # below low: restart
    assert region.radius == 4 and region.restarts == 1


def test_a_linear_residual_learns_a_planted_per_choice_effect():
    env = small_env()
    prior = own_prior(env.target)
    rng = np.random.default_rng(0)
    maps = env.target.rectify(env.random_mappings(120, rng))[0]
    planted = np.zeros((env.num_units, env.num_heads, int(env.num_choices.max())))
    planted[3, 0, 2] = 0.3  # unit 3's weights on choice 2 read 35% slower than modelled
    latency = prior.latency_s(maps) * np.exp(one_hot(maps, env.num_choices) @ planted.ravel())
    model = fit_model(env.target, prior, maps, latency, env.num_choices, False, "linear", 1.0, 0)
    w = model.weights
    assert w[3, 0, 2] - w[3, 0, :2].mean() > 0.15
    others = np.delete(w.reshape(-1), np.ravel_multi_index((3, 0, 2), w.shape))
    assert np.abs(others).max() < 0.5 * (w[3, 0, 2] - w[3, 0, :2].mean())
    assert model.spread < np.std(np.log(latency) - np.log(prior.latency_s(maps)))


def test_solve_batch_answers_distinct_maps_in_the_region_and_replaces_refused_ones():
    env = small_env()
    prior = own_prior(env.target)
    model = fit_model(
        env.target,
        prior,
        np.zeros((0, env.num_units, 2), np.int64),
        np.zeros(0),
        env.num_choices,
        False,
        "none",
        1.0,
        0,
    )
    base = env.baseline_mapping
    refuse_first = {"calls": 0}

    def accept(maps):
        refuse_first["calls"] += 1
        ok = np.ones(len(maps), dtype=bool)
        if refuse_first["calls"] == 1:
            ok[0] = False
        return ok

    rng = np.random.default_rng(0)
    found, info = solve_batch(model, base, base[None], 2, base[None], 3, 0.5, accept, rng)
    assert len(found) == 3 and info["refused"] == 1 and info["solves"] == 4
    assert len(np.unique(found.reshape(3, -1), axis=0)) == 3
    assert (distance(found, base[None], units=True) <= 2).all()
    assert not (found == base).all(axis=(1, 2)).any()


def test_a_windowed_solve_changes_only_its_window_and_is_exact_there():
    env = make_env("nnpi", "resnet18", sram_mib=1.0, llc_mib=4.0)
    prior = own_prior(env.target)
    base = env.baseline_mapping
    free = window_units(env.num_units, 5, np.random.default_rng(1))
    assert free.sum() == 5 and np.ptp(np.flatnonzero(free)) == 4  # five consecutive units
    solution = prior.solve(base, time_limit_s=30, free_units=free)
    assert solution.proven
    np.testing.assert_array_equal(solution.mapping[~free], base[~free])
    # no map that changes only the window is faster (all 9 ** 5 of them, as the prior reads them)
    choices = np.stack(np.meshgrid(*[np.arange(3)] * 10, indexing="ij"), -1).reshape(-1, 5, 2)
    maps = np.repeat(base[None], len(choices), axis=0)
    maps[:, free] = choices
    nnpi = prior.nnpi_maps(maps)
    _, moved = prior.target.rectify(nnpi)
    fastest = prior.latency_s(maps[moved == 0]).min()
    assert solution.latency_s <= fastest * (1 + 1e-12)
