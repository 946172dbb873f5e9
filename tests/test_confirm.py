"""A confirmed best on a noisy target: the interval, the choice of candidates, the
interleaved readings, and a run that reserves, spends and reports them."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from egrl import confirm, make_env
from egrl.agents import config_class, make_agent
from egrl.config import ConfirmConfig, TrainConfig, config_problems
from egrl.rundir import RunDir
from egrl.runs import Run
from egrl.validation import ConfigError
from tests.support.envs import noisy_env, small_env


def test_the_interval_of_a_ratio_of_noisy_means_covers_at_its_level():
    """Lognormal readings of mean 1 (CV 5%), five per side: the 95% interval holds the
    true ratio in about 95% of 4,000 draws, and narrows with more readings."""
    rng = np.random.default_rng(0)
    sigma = np.sqrt(np.log(1 + 0.05**2))
    true_base, true_map = 2.0, 1.6  # true speedup 1.25

    def draw(mean, n):
        return mean * rng.lognormal(-(sigma**2) / 2, sigma, size=n)

    held, widths = [], {5: [], 20: []}
    for n in (5, 20):
        for _ in range(2000):
            ratio, low, high = confirm.speedup_interval(draw(true_base, n), draw(true_map, n))
            assert low < ratio < high
            held.append(low <= 1.25 <= high)
            widths[n].append(high - low)
    assert 0.93 <= np.mean(held) <= 0.97
    assert np.median(widths[20]) < 0.5 * np.median(widths[5])


def test_the_interval_needs_two_readings_a_side():
    ratio, low, high = confirm.speedup_interval(np.array([2.0]), np.array([1.0, 1.0]))
    assert ratio == 2.0 and np.isnan(low) and np.isnan(high)
    assert confirm.speedup_interval(np.array([2.0, 2.0]), np.array([1.0, 1.0])) == (2.0, 2.0, 2.0)


def test_each_maps_latest_answer_is_the_one_a_confirmation_ranks():
    maps = np.array([[[0]], [[1]], [[0]], [[2]], [[1]]])
    assert confirm.latest(maps).tolist() == [2, 3, 4]
    speedups = np.array([1.5, 1.2, 1.1, 1.3, 1.2])  # map 0: a lucky first reading, then 1.1
    last = confirm.latest(maps)
    chosen = last[confirm.top_maps(maps[last], speedups[last], 2)]
    assert chosen.tolist() == [3, 4]


def test_top_maps_are_distinct_ran_and_best_first():
    maps = np.array([[[0]], [[1]], [[1]], [[2]], [[3]]])
    speedups = np.array([1.1, 1.3, 1.3, 0.0, 1.2])
    assert confirm.top_maps(maps, speedups, 3).tolist() == [1, 4, 0]
    assert confirm.top_maps(maps, speedups, 9).tolist() == [1, 4, 0]  # 2: a repeat, 3: no run


def test_rounds_read_the_compiler_first_and_score_on_fresh_readings_only():
    batches = []
    truth = {0: 2.0, 1: 1.0, 2: 1.6}  # map id -> latency; the compiler's is map 0

    def read(maps):
        batches.append(maps[:, 0, 0].tolist())
        lat = np.array([truth[int(m)] for m in maps[:, 0, 0]])
        lat[-1] = np.nan if len(batches) == 2 else lat[-1]  # one failed reading of map 2
        return lat, np.isfinite(lat), maps

    found = confirm.confirm(
        read, np.array([[0]]), np.array([[[1]], [[2]]]), np.array([9.0, 9.0]), 4, 3
    )
    assert batches == [[0, 1, 2]] * 4
    assert found.best.speedup == 2.0 and found.best.search_speedup == 9.0
    assert found.candidates[1].failed == 1 and len(found.candidates[1].readings_s) == 3
    assert found.noise_cv == 0.0 and found.board_runs == 4 * 3 * 3
    back = confirm.Confirmation.from_state(found.state_dict())
    assert back.best.speedup == 2.0 and back.candidates[1].failed == 1


def test_the_first_half_of_the_rounds_chooses_and_the_later_half_scores():
    """Map 1 reads fast in rounds 1-2 and slow after; map 2 the reverse: map 1 is chosen,
    and reported from its slow rounds (4 rounds: 2 choose, 2 score)."""
    table = {0: [2.0] * 4, 1: [1.0, 1.0, 2.0, 2.0], 2: [1.6, 1.6, 1.0, 1.0]}
    calls = []

    def read(maps):
        calls.append(len(calls))
        r = calls[-1]
        return np.array([table[int(m)][r] for m in maps[:, 0, 0]]), np.ones(len(maps), bool), maps

    found = confirm.confirm(read, np.array([[0]]), np.array([[[1]], [[2]]]), np.ones(2), 4)
    assert found.selection_rounds == 2
    assert found.best.mapping[0, 0] == 1 and found.best.speedup == 1.0
    assert found.best.selection_speedup == 2.0 and found.candidates[1].speedup == 2.0
    alone = confirm.confirm(read, np.array([[0]]), np.array([[[2]]]), np.ones(1), 0)
    assert alone.selection_rounds == 0


def test_splitting_the_rounds_removes_the_overstatement_of_the_best_of_three():
    """Three maps of the same true speedup 1.25, 5% noise, 6 rounds: scored on the rounds
    that chose it the best overstates its map by about 3%; scored on the others, not."""
    rng = np.random.default_rng(1)
    sigma = np.sqrt(np.log(1 + 0.05**2))
    truth = np.array([2.0, 1.6, 1.6, 1.6])
    ratios = []
    for _ in range(300):

        def read(maps):
            noise = rng.lognormal(-(sigma**2) / 2, sigma, size=len(maps))
            return truth[maps[:, 0, 0]] * noise, np.ones(len(maps), bool), maps

        found = confirm.confirm(
            read, np.array([[0]]), np.array([[[1]], [[2]], [[3]]]), np.ones(3), 6
        )
        ratios.append(found.best.speedup / 1.25)
    assert abs(np.median(ratios) - 1.0) < 0.01


# ------------------------------------------------------------------ in a run
def search_config(budget: int = 100, **confirm_keys) -> TrainConfig:
    """Random search, 10 maps a generation (the confirmation is the agent's base's)."""
    return TrainConfig(
        seed=1,
        budget=budget,
        progress=False,
        checkpoint_every=2,
        agent=config_class("random")(name="random", options={"batch": 10}),
        confirm=ConfirmConfig(**confirm_keys),
    )


def test_a_noisy_run_reserves_its_confirmation_and_reports_it(tmp_path):
    env = noisy_env()
    agent = make_agent(env, search_config(budget=100, top=3, repeats=4), tmp_path)
    agent.run()
    assert agent.confirm_reserve == 16
    assert agent.ledger.iterations == 100  # 84 for the search, 16 for (3 + 1) maps x 4 rounds
    search_rows, last = agent.rows[:-1], agent.rows[-1]
    assert search_rows[-1]["iterations"] == 84 == search_rows[-1]["paid_maps"]
    assert last["paid_maps"] == 84  # read again: board runs, not new maps
    assert all(np.isnan(r["confirmed_speedup"]) for r in search_rows)
    found = agent.confirmation
    assert last["confirmed_speedup"] == found.best.speedup
    assert last["confirmed_low"] < found.best.speedup < last["confirmed_high"]
    assert len(found.candidates) == 3 and len(found.baseline_readings_s) == 4
    assert 0 < found.noise_cv < 0.2
    saved = json.loads(RunDir(tmp_path).best_map.read_text())["confirmed"]
    assert saved["speedup"] == found.best.speedup and saved["board_runs"] == 16
    assert len(saved["candidates"][0]["readings_s"]) == 4


def test_a_run_that_confirmed_is_complete_though_whole_rounds_left_board_runs(tmp_path):
    """top=4, repeats=5 reserve (4 + 1) x 5 = 25 readings; with two candidates found, rounds
    of 3 maps: 8 rounds, 24 readings, one board run of the budget left unspent."""
    env = noisy_env()
    cfg = search_config(budget=60, top=4, repeats=5)
    agent = make_agent(env, cfg, tmp_path)
    agent.ledger.archive.add = _keep_two(agent.ledger.archive.add)
    agent.run()
    assert len(agent.confirmation.candidates) == 2 and agent.ledger.iterations == 59
    run = Run(
        tmp_path,
        "random",
        "w",
        "nnpi",
        1,
        60,
        {},
        {},
        np.array([35, 59]),
        np.ones(2),
        np.ones(2),
        {"confirmed_speedup": "1.2"},
    )
    assert run.confirmed and run.complete
    assert not replace(run, last_row={"confirmed_speedup": "nan"}).complete
    again = make_agent(noisy_env(seed=1), cfg, tmp_path)
    assert again.resume() and again.ledger.done  # nothing more to search


def _keep_two(add):
    """The record's ``add`` with every map after the second a copy of the first two."""
    seen: list = []

    def keep(actions, rewards, source, done=True):
        actions = np.array(actions, copy=True)
        for i in range(len(actions)):
            if len(seen) < 2:
                seen.append(actions[i].copy())
            else:
                actions[i] = seen[i % 2]
        return add(actions, rewards, source, done)

    return keep


def test_a_finished_noisy_run_resumed_does_not_confirm_again(tmp_path):
    make_agent(noisy_env(), search_config(budget=60, top=2, repeats=3), tmp_path).run()
    again = make_agent(noisy_env(seed=1), search_config(budget=60, top=2, repeats=3), tmp_path)
    assert again.resume() and again.confirmation is not None
    before = again.confirmation.best.speedup
    again.run()
    assert again.ledger.iterations == 60 and again.confirmation.best.speedup == before


def test_more_budget_after_a_confirmation_searches_then_confirms_again(tmp_path):
    make_agent(noisy_env(), search_config(budget=60, top=2, repeats=3), tmp_path).run()
    longer = make_agent(noisy_env(seed=1), search_config(budget=90, top=2, repeats=3), tmp_path)
    assert longer.resume()
    longer.run()
    assert longer.ledger.iterations == 90


def test_best_mapping_json_says_the_confirmed_answer_at_its_top_level(tmp_path):
    env = noisy_env()
    agent = make_agent(env, search_config(budget=100, top=3, repeats=4), tmp_path)
    agent.run()
    saved = json.loads(RunDir(tmp_path).best_map.read_text())
    found, reading = agent.confirmation.best, agent.ledger.best
    assert saved["mapping"] == env.mapping_to_dict(found.mapping)
    assert (saved["speedup"], saved["speedup_low"], saved["speedup_high"]) == (
        found.speedup,
        found.low,
        found.high,
    )
    compiler_s = float(np.mean(agent.confirmation.baseline_readings_s))
    assert saved["latency_s"] == pytest.approx(compiler_s / found.speedup)
    assert saved["reward"] is None and saved["iteration"] is None
    # the best single reading keeps its own key, and overstates its map
    best = saved["best_reading"]
    assert best["mapping"] == env.mapping_to_dict(reading.mapping)
    assert (best["speedup"], best["iteration"]) == (reading.speedup, reading.iteration)
    assert saved["confirmed"]["mapping"] == saved["mapping"]


def test_best_mapping_json_of_a_deterministic_run_is_its_best_reading(tmp_path):
    env = make_env("nnpi", "resnet18")
    agent = make_agent(env, search_config(budget=40), tmp_path)
    agent.run()
    saved = json.loads(RunDir(tmp_path).best_map.read_text())
    best = agent.ledger.best
    assert saved["mapping"] == env.mapping_to_dict(best.mapping)
    assert (saved["speedup"], saved["iteration"]) == (best.speedup, best.iteration)
    assert "best_reading" not in saved and "confirmed" not in saved
    assert list(saved)[:6] == ["agent", "workload", "speedup", "latency_s", "reward", "iteration"]


def test_a_deterministic_run_confirms_nothing():
    agent = make_agent(small_env(), search_config(budget=40))
    agent.run()
    assert agent.confirm_reserve == 0 and agent.confirmation is None
    assert "confirmed_speedup" not in agent.columns and agent.ledger.iterations == 40


def test_a_budget_the_confirmation_would_eat_is_refused():
    with pytest.raises(ConfigError, match="confirm.top=3 is invalid"):
        make_agent(noisy_env(), search_config(budget=20, top=3, repeats=5))
    make_agent(noisy_env(), replace(search_config(budget=20), confirm=ConfirmConfig(top=0)))


@pytest.mark.parametrize(
    "key, value", [("top", -1), ("repeats", 0), ("repeats", 1), ("top", 1.5), ("reread", -1)]
)
def test_bad_confirm_values_name_the_key(key, value):
    (line,) = config_problems({"confirm": {key: value}})
    assert line.startswith(f"confirm.{key}={value} is invalid")
