"""egrl.ledger.Ledger on its own, on the small NNP-I problem: the budget of paid maps, the
measure cache (a map measured before, and the compiler's map, answered without paying),
the archive of every answered map, the best map, and a resume from its state."""

from __future__ import annotations

import numpy as np
import pytest

from egrl.budget import Budget
from egrl.env import Env, Evaluation
from egrl.evaluations import EvaluationLog
from egrl.ledger import Ledger, Timer, measure_cache
from egrl.record import COMPILER, CONFIRM, KINDS, SEARCH
from egrl.runtime import LocalRuntime, RuntimeConfig
from hwmodels.base import CheckRefused, ChipCallError, Measurement
from tests.support.envs import small_env


def make_ledger(env: Env, budget: int | Budget, cache_size: int = 1000, record_size: int = 1000):
    """A ledger as a run makes one (:class:`egrl.agents.base.SearchAgent`), without a
    screen or ``evaluations.csv``, its clock stopped at generation 1."""
    return Ledger(
        env,
        budget=budget,
        cache=measure_cache(env, cache_size),
        record_size=record_size,
        timer=Timer(),
        evaluation_log=EvaluationLog(env, None),
        stamp=lambda: (1, 0.0),
    )


def fresh_maps(env: Env, n: int, seed: int = 0) -> np.ndarray:
    """``n`` distinct random maps, none the compiler's (on this problem all invalid)."""
    maps = env.random_mappings(n, np.random.default_rng(seed))
    assert len(np.unique(maps.reshape(n, -1), axis=0)) == n
    assert not (maps == env.baseline_mapping).all(axis=(1, 2)).any()
    return maps


def neighbours(env: Env) -> np.ndarray:
    """The 52 maps one choice away from the compiler's (most of them valid), int64."""
    base = env.baseline_mapping
    maps = []
    for unit in range(env.num_units):
        for head in range(env.num_heads):
            for choice in range(int(env.num_choices[head])):
                if choice != base[unit, head]:
                    m = base.copy()
                    m[unit, head] = choice
                    maps.append(m)
    return np.stack(maps).astype(np.int64)


def assert_same_answers(a: Evaluation, b: Evaluation) -> None:
    assert len(a) == len(b)
    for name in ("latency_s", "valid", "reassigned_ratio", "reward", "speedup", "rectified"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def recorded(ledger: Ledger) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The archive's maps, rewards and sources, oldest first."""
    rec = ledger.archive
    order = rec.in_order()
    sources = [rec.source_names[s] for s in rec.source[order]]
    return rec.actions[order].astype(np.int64), rec.rewards[order], sources


# ------------------------------------------------------------------------- budget
def test_a_ledger_never_pays_for_more_maps_than_its_budget():
    env = small_env()
    ledger = make_ledger(env, budget=10)
    assert (ledger.iterations, ledger.remaining, ledger.done) == (0, 10, False)
    maps = fresh_maps(env, 30)

    assert len(ledger.evaluate(maps[:4], "random")) == 4
    assert (ledger.iterations, ledger.remaining, ledger.done) == (4, 6, False)
    # ten new maps, six paid for: the batch is cut after the sixth
    assert len(ledger.evaluate(maps[4:14], "random")) == 6
    assert (ledger.iterations, ledger.remaining, ledger.done) == (10, 0, True)
    assert len(ledger.evaluate(maps[14:], "random")) == 0
    assert ledger.iterations == ledger.paid_maps == ledger.proposals == 10
    assert env.num_evaluations == 10  # what the chip was asked


def test_a_batch_past_the_budget_is_cut_before_the_first_map_it_cannot_pay():
    env = small_env()
    ledger = make_ledger(env, budget=3)
    a, b, c, d = fresh_maps(env, 4)
    ledger.evaluate(a[None], "random")
    # b and c are paid (the last two of the budget); a is known and the compiler's map is
    # free; d cannot be paid: it and every map after it (a, known, included) go unanswered
    batch = np.stack([b, a, c, env.baseline_mapping, d, a])
    ticket = ledger.submit(batch, "random")
    assert len(ticket) == 4
    np.testing.assert_array_equal(ticket.maps, batch[:4])
    ((answered, ev),) = ledger.collect()
    assert answered.id == ticket.id and len(ev) == 4
    assert (ledger.iterations, ledger.proposals, ledger.remaining, ledger.done) == (3, 5, 0, True)
    assert env.num_evaluations == 3
    np.testing.assert_array_equal(recorded(ledger)[0], np.concatenate([a[None], batch[:4]]))


def test_maps_in_flight_count_as_paid_until_they_are_answered():
    env = small_env()
    ledger = make_ledger(env, budget=5)
    maps = fresh_maps(env, 6)
    first = ledger.submit(maps[:3], "a")
    assert (ledger.iterations, ledger.remaining, ledger.done) == (0, 2, False)
    # maps[2] is in flight: it waits for the first answer, unpaid; maps[3:5] take the
    # last of the budget and maps[5] is cut
    second = ledger.submit(maps[2:], "b")
    assert len(second) == 3 and ledger.remaining == 0
    (t1, ev1), (t2, ev2) = ledger.collect()
    assert (t1.id, t2.id) == (first.id, second.id)
    assert (ledger.iterations, ledger.proposals, ledger.done) == (5, 6, True)
    assert env.num_evaluations == 5
    assert ev2.reward[0] == ev1.reward[2] and ev2.latency_s[0] == ev1.latency_s[2]


# -------------------------------------------------------------------------- cache
def test_a_map_measured_before_is_answered_without_paying_again():
    env = small_env()
    ledger = make_ledger(env, budget=100)
    maps = neighbours(env)[:6]
    first = ledger.evaluate(maps[:4], "a")
    assert ledger.iterations == 4 == env.num_evaluations
    again = ledger.evaluate(maps[[2, 0, 0, 3]], "b")
    assert ledger.iterations == 4 == env.num_evaluations  # nothing paid
    assert ledger.proposals == 8
    for name in ("latency_s", "valid", "reward", "speedup", "rectified"):
        np.testing.assert_array_equal(
            getattr(again, name), getattr(first, name)[[2, 0, 0, 3]], err_msg=name
        )
    # a map repeated in a batch is measured (and paid) once
    ledger.evaluate(maps[[4, 4, 5, 4]], "c")
    assert ledger.iterations == 6 == env.num_evaluations and ledger.proposals == 12


def test_the_compilers_map_is_free_and_a_disabled_cache_pays_for_every_map():
    env = small_env()
    ledger = make_ledger(env, budget=10)
    base = env.baseline_mapping[None]
    ev = ledger.evaluate(np.concatenate([base, base]), "native")
    # measured when the target was bound: answered from the cache
    assert ledger.iterations == 0 == env.num_evaluations and ledger.proposals == 2
    assert ev.valid.all() and ev.speedup.tolist() == [1.0, 1.0]
    assert ev.latency_s.tolist() == [env.baseline_latency_s] * 2

    no_cache = make_ledger(env, budget=10, cache_size=0)
    again = no_cache.evaluate(np.concatenate([base, base]), "native")
    assert no_cache.iterations == 2 == env.num_evaluations
    assert_same_answers(again, ev)


# ------------------------------------------------------------------------ archive
def test_every_answered_map_is_recorded_with_its_reward_and_source():
    env = small_env()
    ledger = make_ledger(env, budget=100)
    near = neighbours(env)
    batches = [
        (near[:5], "a"),
        (near[[3, 5, 6]], "b"),  # one known map, two new
        (fresh_maps(env, 2), "random"),  # invalid: penalised
        (env.baseline_mapping[None], "native"),  # free
    ]
    evs = [ledger.evaluate(maps, source) for maps, source in batches]
    maps, rewards, sources = recorded(ledger)
    assert len(maps) == ledger.proposals == 11 and ledger.iterations == 9
    np.testing.assert_array_equal(maps, np.concatenate([m for m, _ in batches]))
    expected = np.concatenate([ev.reward for ev in evs])
    np.testing.assert_array_equal(rewards, expected.astype(np.float32))
    assert sources == ["a"] * 5 + ["b"] * 3 + ["random"] * 2 + ["native"]
    # the rewards are the chip's: measured afresh, the same maps earn the same
    np.testing.assert_allclose(expected, small_env().evaluate(maps).reward)
    # a valid map earns its speedup squared, an invalid one (the random ones) a penalty
    valid = np.concatenate([ev.valid for ev in evs])
    assert not valid[8:10].any() and valid[10] and expected[10] == 1.0
    np.testing.assert_array_equal(expected > 0, valid)


def test_a_full_archive_keeps_the_newest_maps():
    env = small_env()
    ledger = make_ledger(env, budget=100, record_size=4)
    near = neighbours(env)
    ledger.evaluate(near[:3], "a")
    ledger.evaluate(near[3:6], "b")
    maps, _, sources = recorded(ledger)
    np.testing.assert_array_equal(maps, near[2:6])
    assert sources == ["a", "b", "b", "b"] and ledger.proposals == 6


# ----------------------------------------------------------------------- best map
class TableChip:
    """A chip that answers each of ``maps`` with the given validity and speedup over the
    compiler's map (the maps run as proposed)."""

    def __init__(self, env: Env, maps: np.ndarray, valid: list[bool], speedups: list[float]):
        self.base = env.baseline_latency_s
        self.table = {m.tobytes(): (v, s) for m, v, s in zip(maps, valid, speedups)}

    def __call__(self, maps: np.ndarray, probs=None) -> Measurement:
        rows = [self.table[np.asarray(m, np.int64).tobytes()] for m in maps]
        valid = np.array([v for v, _ in rows])
        latency = np.array([self.base / s for _, s in rows])
        return Measurement(maps.copy(), valid, np.where(valid, 0.0, 0.5), latency)


def test_the_best_is_the_best_valid_map_and_a_tie_keeps_the_earlier():
    env = small_env()
    maps = neighbours(env)[:6]
    # map 1 would be ten times faster but the compiler refused it; maps 2 and 3 tie
    chip = TableChip(
        env, maps, [True, False, True, True, True, True], [1.2, 10, 1.5, 1.5, 1.1, 0.9]
    )
    ledger = make_ledger(env, budget=100)
    ledger.use_runtime(LocalRuntime(chip))
    assert ledger.best.mapping is None and ledger.best.speedup == 0.0

    ledger.evaluate(maps[[0, 1]], "a")
    best = ledger.best
    assert (best.speedup, best.iteration) == (pytest.approx(1.2), 1)
    np.testing.assert_array_equal(best.mapping, maps[0])

    ledger.evaluate(maps[[4, 2, 3]], "b")  # paid 3rd, 4th (the best) and 5th
    ledger.evaluate(maps[[5, 3, 2]], "c")  # worse, or a tie answered from the cache
    best = ledger.best
    assert best.speedup == pytest.approx(1.5) and best.iteration == 4
    assert best.reward == pytest.approx(1.5**2)  # reward=egrl: the speedup squared
    assert best.latency_s == pytest.approx(env.baseline_latency_s / 1.5)
    np.testing.assert_array_equal(best.mapping, maps[2])

    inside = make_ledger(env, budget=100)  # a tie inside one batch keeps its first map
    inside.use_runtime(LocalRuntime(chip))
    inside.evaluate(maps[[1, 3, 2]], "a")
    assert inside.best.iteration == 2
    np.testing.assert_array_equal(inside.best.mapping, maps[3])


def test_the_best_of_a_run_on_the_chip_is_its_best_valid_answer():
    env = small_env()
    ledger = make_ledger(env, budget=100)
    near = neighbours(env)
    ev = ledger.evaluate(np.concatenate([fresh_maps(env, 5), near]), "a")
    assert not ev.valid[:5].any() and ev.valid[5:].any()
    first = int(np.argmax(ev.speedup))  # the first of the fastest valid maps
    assert ledger.best.speedup == ev.speedup[first] == ev.speedup[ev.valid].max()
    assert ledger.best.iteration == first + 1
    np.testing.assert_array_equal(ledger.best.mapping, ev.rectified[first])


# ------------------------------------------------------------------------- resume
def test_a_ledger_restored_from_its_state_continues_as_the_original():
    env_a, env_b = small_env(), small_env()
    near = neighbours(env_a)
    original = make_ledger(env_a, budget=12)
    original.evaluate(near[:4], "a")
    original.evaluate(np.concatenate([near[2:6], env_a.baseline_mapping[None]]), "b")
    original.evaluate(fresh_maps(env_a, 2), "random")
    state = original.state_dict()
    assert (original.iterations, original.proposals) == (8, 11)
    assert original.best.speedup == 1.0 and original.best.iteration == 6  # the compiler's

    restored = make_ledger(env_b, budget=12)
    restored.load_state_dict(state)
    for name in ("iterations", "proposals", "paid_maps", "failed_maps", "remaining", "done"):
        assert getattr(restored, name) == getattr(original, name), name
    np.testing.assert_equal(restored.best.state_dict(), original.best.state_dict())
    np.testing.assert_equal(restored.archive.state_dict(), original.archive.state_dict())
    np.testing.assert_equal(restored.state_dict(), state)

    # known maps answered from the cache on both; the budget cuts both batches alike
    for batch, paid in ((near[[1, 6, 7, 0, 3]], 2), (np.concatenate([near[8:14], near[:2]]), 2)):
        before = env_a.num_evaluations, env_b.num_evaluations
        a, b = original.evaluate(batch, "c"), restored.evaluate(batch, "c")
        assert_same_answers(a, b)
        assert env_a.num_evaluations - before[0] == env_b.num_evaluations - before[1] == paid
    assert len(a) == 2 and original.done and restored.done
    assert (restored.iterations, restored.proposals) == (original.iterations, original.proposals)
    np.testing.assert_equal(restored.state_dict(), original.state_dict())


# ------------------------------------------------ one budget, one record, one road
def test_one_budget_holds_a_reserve_releases_it_and_closes_without_being_reassigned():
    budget = Budget(100)
    budget.hold(20)
    assert (budget.limit, budget.left) == (80, 80)
    budget.spend(30, maps=30, answered=31)
    assert (budget.spent, budget.left, budget.paid_maps, budget.proposals) == (30, 50, 30, 31)
    assert budget.release() == 20 and budget.limit == 100
    budget.close()
    assert (budget.limit, budget.left) == (30, 0)
    with pytest.raises(ValueError, match="cannot reserve 101 of a budget of 100"):
        Budget(100).hold(101)


def test_two_ledgers_on_one_budget_stop_together():
    env = small_env()
    first = make_ledger(env, budget=6)
    second = Ledger(
        env, first.budget, measure_cache(env, 100), 100, Timer(), first.evaluation_log, first.stamp
    )
    assert second.budget is first.budget
    maps = fresh_maps(env, 8)
    assert len(first.evaluate(maps[:4], "a")) == 4
    assert len(second.evaluate(maps[4:], "b")) == 2  # the shared budget pays two more
    assert first.done and second.done and first.iterations == second.iterations == 6


def test_the_record_tells_each_reader_of_each_reading_once_in_order():
    env = small_env()
    ledger = make_ledger(env, budget=20)
    told: list = []
    ledger.record.subscribe(lambda r: told.append(("all", r.kind, r.source, len(r))), KINDS)
    ledger.record.subscribe(lambda r: told.append(("search", r.kind, r.source, len(r))))
    maps = fresh_maps(env, 3)
    ledger.evaluate(maps[:2], "a")
    ledger.evaluate(np.stack([maps[0], env.baseline_mapping, maps[2]]), "b")  # two free
    ledger.read_again(maps[:1], "confirm")
    assert told == [
        ("all", SEARCH, "a", 2),
        ("search", SEARCH, "a", 2),
        ("all", SEARCH, "b", 3),
        ("search", SEARCH, "b", 3),
        ("all", CONFIRM, "confirm", 1),
    ]
    # the archive and the best keep the search's answers; the re-reading is paid
    assert recorded(ledger)[2] == ["a", "a", "b", "b", "b"]
    assert (ledger.iterations, ledger.paid_maps, ledger.proposals) == (4, 3, 6)
    assert ledger.record.counts == {COMPILER: 1, SEARCH: 5, CONFIRM: 1}
    latest_maps, _ = ledger.record.latest()
    assert len(latest_maps) == 4  # three maps and the compiler's, each once
    with pytest.raises(ValueError, match="unknown reading kind"):
        ledger.record.subscribe(print, ("guess",))


def test_checks_and_re_readings_go_through_the_runtime():
    env = small_env()
    ledger = make_ledger(env, budget=10)
    asked: list[int] = []

    def check(maps, probs=None):
        asked.append(len(maps))
        return env.target.check(maps)

    def measure(maps, probs=None):
        if (np.asarray(maps)[:, 0, 0] == 1).any():
            raise ChipCallError("the board did not answer")
        return env.measure(maps, probs)

    ledger.use_runtime(LocalRuntime(measure, RuntimeConfig(retries=1), check=check))
    maps = fresh_maps(env, 6)
    found = ledger.check(maps)
    assert asked == [6] and ledger.checks == 6 and ledger.runtime.answered["check"] == 6
    np.testing.assert_array_equal(found.valid, env.target.check(maps).valid)
    assert ledger.iterations == 0  # a check is never paid
    # a re-reading the board failed (again when sent alone): paid, not run, counted failed
    maps[0, 0, 0], maps[1, 0, 0] = 1, 0
    latency_s, ran, _ = ledger.read_again(maps[:2])
    assert not ran[0] and np.isnan(latency_s[0]) and np.isfinite(latency_s[1])
    assert (ledger.iterations, ledger.failed_maps) == (2, 1)


def test_a_chip_that_refuses_checks_is_asked_once():
    env = small_env()
    ledger = make_ledger(env, budget=10)
    asked: list[int] = []

    def refuse(maps, probs=None):
        asked.append(len(maps))
        raise CheckRefused("the chip answers no check requests")

    ledger.use_runtime(LocalRuntime(env.measure, check=refuse))
    assert ledger.check(fresh_maps(env, 3)) is None
    assert ledger.check(fresh_maps(env, 3)) is None
    assert asked == [3] and ledger.checks == 0
    assert ledger.unchecked == "the chip answers no check requests"
