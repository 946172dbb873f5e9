"""Pay once per map: the measurement cache, the budget of paid maps, resume, stale searches."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from egrl.agents import make_agent
from egrl.agents.egrl.agent import EGRLAgent
from egrl.config import AgentConfig, ConfirmConfig, TrainConfig
from egrl.measure_cache import MeasureCache
from hwmodels.base import Measurement
from tests.support.egrl_runs import small_config
from tests.support.envs import small_env

pytestmark = pytest.mark.usefixtures("one_thread")


class Recorder:
    """A ``measure(maps, probs)`` that answers from each map's sum and records its calls."""

    def __init__(self) -> None:
        self.calls: list[np.ndarray] = []

    def __call__(self, maps: np.ndarray, probs=None) -> Measurement:
        self.calls.append(maps.copy())
        total = maps.reshape(len(maps), -1).sum(axis=1).astype(np.float64)
        return Measurement(maps.copy(), total % 2 == 0, total / 100, 1.0 + total)


def maps_of(*rows: int) -> np.ndarray:
    """Maps ``[B, 3, 1]`` whose three entries all equal each row's value."""
    return np.repeat(np.array(rows, dtype=np.int64)[:, None, None], 3, axis=1)


def test_repeats_inside_a_batch_and_across_batches_are_measured_once():
    cache, measure = MeasureCache(100, max_choices=3), Recorder()
    first = cache.answer(maps_of(0, 1, 0, 2, 1), None, measure, budget=10)
    assert len(measure.calls) == 1 and measure.calls[0][:, 0, 0].tolist() == [0, 1, 2]
    assert first.paid.tolist() == [True, True, False, True, False]
    np.testing.assert_array_equal(first.measurement.latency_s, [1, 4, 1, 7, 4])
    second = cache.answer(maps_of(2, 1, 2), None, measure, budget=10)
    assert len(measure.calls) == 1 and not second.paid.any()
    np.testing.assert_array_equal(second.measurement.rectified, maps_of(2, 1, 2))
    np.testing.assert_array_equal(second.measurement.valid, [True, False, True])


def test_a_batch_with_more_new_maps_than_the_budget_stops_at_the_first_unpaid_one():
    cache, measure = MeasureCache(100, max_choices=3), Recorder()
    cache.answer(maps_of(1), None, measure, budget=1)
    answer = cache.answer(maps_of(1, 0, 1, 2, 1), None, measure, budget=1)
    # 1 is cached, 0 is paid, its repeat 1 is free, 2 is past the budget: the answer
    # stops there and the cached 1 after it is not answered either.
    assert answer.paid.tolist() == [False, True, False]
    assert measure.calls[-1][:, 0, 0].tolist() == [0]


def test_the_least_recently_used_map_is_forgotten_first():
    cache, measure = MeasureCache(2, max_choices=3), Recorder()
    cache.answer(maps_of(0, 1), None, measure, budget=10)
    cache.answer(maps_of(0), None, measure, budget=10)  # 0 is now the most recent
    cache.answer(maps_of(2), None, measure, budget=10)  # evicts 1
    assert len(cache) == 2
    assert cache.answer(maps_of(0, 2, 1), None, measure, budget=10).paid.tolist() == [
        False,
        False,
        True,
    ]


def test_probabilities_are_part_of_the_key_and_a_disabled_cache_pays_everything():
    cache, measure = MeasureCache(10, max_choices=3), Recorder()
    probs = np.full((2, 3, 1, 3), 1 / 3)
    probs[1, 0, 0] = [0.5, 0.25, 0.25]
    assert cache.answer(maps_of(1, 1), probs, measure, budget=10).paid.all()
    off = MeasureCache(10, max_choices=3, enabled=False)
    assert off.answer(maps_of(1, 1, 1), None, measure, budget=2).paid.tolist() == [True, True]


def test_state_dict_round_trip_keeps_entries_and_their_order():
    cache, measure = MeasureCache(3, max_choices=3), Recorder()
    cache.answer(maps_of(0, 1, 2), None, measure, budget=10)
    cache.answer(maps_of(0), None, measure, budget=10)
    copy = MeasureCache(3, max_choices=3)
    copy.load_state_dict(cache.state_dict())
    copy.answer(maps_of(3), None, measure, budget=10)  # evicts 1, the least recent
    calls = len(measure.calls)
    assert not copy.answer(maps_of(0, 2, 3), None, measure, budget=10).paid.any()
    assert len(measure.calls) == calls
    assert copy.answer(maps_of(1), None, measure, budget=10).paid.all()


def test_the_budget_counts_paid_maps_and_the_replay_buffer_gets_every_proposal():
    env = small_env()
    trainer = EGRLAgent(env, small_config(budget=60, name="ea", use_learner=False))
    trainer.run()
    assert trainer.ledger.iterations == 60 == env.num_evaluations
    assert trainer.ledger.proposals == len(trainer.buffer) > 60
    # Every map was paid once: the paid maps are the distinct maps of the buffer.
    held = trainer.buffer.actions[: len(trainer.buffer)].astype(np.int64)
    assert len(np.unique(held, axis=0)) == 60


def test_a_noisy_target_answers_a_repeat_from_its_reading_and_reads_only_to_confirm():
    env = small_env()
    env.target.deterministic = False
    cfg = replace(
        small_config(budget=60, name="ea", use_learner=False),
        confirm=ConfirmConfig(top=0, reread=0),
    )
    trainer = EGRLAgent(env, cfg)
    trainer.run()
    assert trainer.ledger.iterations == env.num_evaluations == 60 < trainer.ledger.proposals
    held = trainer.buffer.actions[: len(trainer.buffer)].astype(np.int64)
    assert len(np.unique(held, axis=0)) == 60  # repeats were proposed, none paid again


def test_a_map_kept_on_a_noisy_target_is_read_again_and_answered_by_its_mean():
    """confirm.reread=2: a map answered from memory twice per reading is paid again; the
    board runs stay within the budget and paid_maps counts distinct maps only."""
    env = small_env()
    env.target.deterministic = False
    sent: list[np.ndarray] = []
    measure = env.target.measure
    env.target.measure = lambda maps, probs=None: sent.append(maps.copy()) or measure(maps)
    cfg = replace(
        small_config(budget=60, name="ea", use_learner=False),
        confirm=ConfirmConfig(top=0, reread=2),
    )
    trainer = EGRLAgent(env, cfg)
    trainer.run()
    maps = np.concatenate(sent)
    distinct = len(np.unique(maps, axis=0))
    assert trainer.ledger.iterations == len(maps) == 60 and distinct < 60
    assert trainer.ledger.paid_maps == distinct


def test_the_cache_reads_a_kept_map_again_on_its_schedule_and_averages():
    cache = MeasureCache(8, 3, reread=2)
    (key,) = cache.keys(np.zeros((1, 2, 1), np.int64))
    rectified = np.zeros((2, 1), np.int64)
    assert cache.lookup(key) is None and not cache.due(key)
    cache.remember(key, rectified, True, 0.0, 1.0)
    answers = [cache.lookup(key) for _ in range(3)]
    assert [a is None for a in answers] == [False, False, True]  # 2 answers a reading
    assert cache.due(key)
    kept = cache.remember(key, rectified, True, 0.0, 2.0)
    assert kept[3] == 1.5 and cache.readings(key) == 2 and not cache.due(key)
    assert [cache.lookup(key) is None for _ in range(5)] == [False] * 4 + [True]
    restored = MeasureCache(8, 3, reread=2)
    restored.load_state_dict(cache.state_dict())
    assert restored.due(key) and restored.readings(key) == 2
    plain = MeasureCache(8, 3)  # a deterministic target: answered from memory for ever
    plain.remember(key, rectified, True, 0.0, 1.0)
    assert all(plain.lookup(key) is not None for _ in range(20)) and not plain.due(key)


def test_a_resumed_run_never_measures_a_map_measured_before_the_kill(tmp_path):
    cfg = small_config(seed=2, budget=40, name="ea", use_learner=False)
    env = small_env()
    before = EGRLAgent(env, cfg, tmp_path)
    before.run()  # checkpoints at its end, as a killed run's last checkpoint
    first = before.buffer.actions[: len(before.buffer)].astype(np.int64)
    env = small_env()
    measured: list[np.ndarray] = []
    measure = env.target.measure
    env.target.measure = lambda maps, probs=None: measured.append(maps.copy()) or measure(maps)
    after = EGRLAgent(env, replace(cfg, budget=120), tmp_path)
    assert after.resume() and after.ledger.iterations == 40
    after.run()
    assert after.ledger.iterations == 120
    new = np.concatenate(measured)
    assert len(new) == 80
    seen = {m.tobytes() for m in first}
    assert not any(m.tobytes() in seen for m in new)
    # The resumed run did propose maps of the first part: the restored cache answered them.
    later = after.buffer.actions[len(first) : len(after.buffer)].astype(np.int64)
    assert any(m.tobytes() in seen for m in later)


def test_a_search_that_stops_proposing_new_maps_stops_and_says_so(tmp_path, caplog):
    env = small_env()
    cfg = TrainConfig(
        budget=10_000,
        progress=False,
        max_stale_generations=3,
        agent=AgentConfig(name="greedy-dp", options={"restart": False}),
    )
    agent = make_agent(env, cfg, tmp_path)
    agent.run()
    assert agent.ledger.iterations < 10_000 and agent.stop_reason is not None
    assert "no new map in 3 generations" in agent.stop_reason
    assert "no new map" in caplog.text
    saved = json.loads((tmp_path / "best_mapping.json").read_text())
    assert saved["stopped_early"] == agent.stop_reason
    assert saved["iterations"] == agent.ledger.iterations < saved["proposals"]
