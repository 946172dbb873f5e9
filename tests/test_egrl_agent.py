"""End-to-end tests of the EGRL generation loop: budget, outputs, determinism, resume."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
import torch

from egrl.agents.egrl.agent import TIMING_COLUMNS, EGRLAgent
from egrl.agents.egrl.config import PopulationConfig
from egrl.runtime import LocalRuntime
from tests.interrupt import kill_after_checkpoints
from tests.support.egrl_runs import small_config
from tests.support.envs import small_env
from tests.support.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")


def test_run_respects_budget_and_writes_run_directory(tmp_path):
    env = small_env()
    trainer = EGRLAgent(env, small_config(budget=101), tmp_path)
    best = trainer.run()
    assert trainer.ledger.iterations == 101 == env.num_evaluations
    # Every answered proposal, paid or answered from the cache, is a replay transition.
    assert len(trainer.buffer) == trainer.ledger.proposals >= 101
    rows = read_metrics(tmp_path)
    assert int(rows[-1]["iterations"]) == 101
    assert int(rows[-1]["proposals"]) == trainer.ledger.proposals
    assert [int(r["generation"]) for r in rows] == list(range(1, len(rows) + 1))
    for name in ("metrics.csv", "best_mapping.json", "speedup.png"):
        assert (tmp_path / name).is_file()
    assert any((tmp_path / "checkpoints").iterdir())
    snapshots = sorted((tmp_path / "policies").glob("iter_*.safetensors"))
    assert snapshots and snapshots[-1].name == "iter_000101.safetensors"
    saved = json.loads((tmp_path / "best_mapping.json").read_text())
    assert set(saved["mapping"]) == set(env.unit_names)
    # The saved best map is the one the trainer kept, and it is as good as claimed.
    assert best.mapping is not None
    ev = env.evaluate(best.mapping)
    assert ev.valid[0] and ev.speedup[0] == pytest.approx(best.speedup)
    assert saved["speedup"] == pytest.approx(best.speedup)


def test_same_seed_same_metrics(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    EGRLAgent(small_env(), small_config(seed=3, budget=90), a).run()
    EGRLAgent(small_env(), small_config(seed=3, budget=90), b).run()
    EGRLAgent(small_env(), small_config(seed=4, budget=90), tmp_path / "c").run()
    assert read_metrics(a) == read_metrics(b)
    assert read_metrics(a) != read_metrics(tmp_path / "c")


_CHILD = textwrap.dedent(
    """
    import sys, torch
    torch.set_num_threads(1)
    from egrl.agents.egrl.agent import EGRLAgent
    from tests.support.egrl_runs import small_config
    from tests.support.envs import small_env
    EGRLAgent(small_env(), small_config(seed=7, budget=int(sys.argv[2])), sys.argv[1]).run()
    """
)


@pytest.mark.slow
def test_resume_after_kill_matches_uninterrupted_run(tmp_path):
    budget = 200
    reference = tmp_path / "reference"
    EGRLAgent(small_env(), small_config(seed=7, budget=budget), reference).run()

    killed = tmp_path / "killed"
    kill_after_checkpoints(_CHILD, [str(killed), str(budget)], killed)
    partial = read_metrics(killed)
    assert 0 < int(partial[-1]["iterations"]) < budget

    trainer = EGRLAgent(small_env(), small_config(seed=7, budget=budget), killed)
    assert trainer.resume()
    assert trainer.ledger.iterations < budget
    trainer.run()
    assert read_metrics(killed) == read_metrics(reference)


def test_egrl_beats_random_search_at_the_same_budget(tmp_path):
    budget = 240
    egrl, rand = [], []
    for seed in range(2):
        env = small_env()
        egrl.append(EGRLAgent(env, small_config(seed=seed, budget=budget)).run().speedup)
        ev = env.evaluate(env.random_mappings(budget, np.random.default_rng(seed)))
        rand.append(ev.speedup.max())
    # Random maps are valid < 1% of the time here; EGRL learns the capacity rules.
    assert np.mean(egrl) > np.mean(rand)


def test_ea_only_and_pg_only_agents_run(tmp_path):
    for agent, sources in (
        ({"name": "ea", "use_learner": False}, {"gnn", "boltzmann"}),
        ({"name": "pg", "use_population": False}, {"learner"}),
    ):
        env = small_env()
        trainer = EGRLAgent(env, small_config(budget=40, **agent))
        best = trainer.run()
        assert (trainer.population is None) == ("gnn" not in sources)
        assert (trainer.portfolio is None) == ("learner" not in sources)
        counts = trainer.buffer.counts_by_source()
        assert set(counts) == sources and sum(counts.values()) == trainer.ledger.proposals
        assert trainer.ledger.iterations == 40 == env.num_evaluations
        # The answer is a valid map whose speedup the compiler's own model confirms.
        ev = env.evaluate(best.mapping)
        assert ev.valid[0] and ev.speedup[0] == pytest.approx(best.speedup) and best.speedup > 0
        held = trainer.buffer.actions[: len(trainer.buffer)].astype(np.int64)
        assert best.speedup == pytest.approx(env.evaluate(held).speedup.max())


def test_replay_entries_are_tagged_with_the_member_kind_that_made_them():
    cfg = small_config(budget=30)  # one generation: 8 members, 1 noisy and 1 clean learner map
    trainer = EGRLAgent(small_env(), cfg)
    trainer.step()
    buf = trainer.buffer
    tags = [buf.source_names[i] for i in buf.source[: len(buf)]]
    assert tags == ["gnn"] * 6 + ["boltzmann"] * 2 + ["learner"] * 2
    # The stored rewards are those of the stored maps.
    ev = trainer.env.evaluate(buf.actions[:8].astype(np.int64))
    np.testing.assert_array_equal(buf.rewards[:8], ev.reward.astype(np.float32))


def test_a_budget_that_ends_inside_the_population_ranks_the_rest_last():
    trainer = EGRLAgent(small_env(), small_config(budget=7))
    fitness = []
    trainer.population.set_fitness = fitness.append
    trainer.step()
    assert trainer.ledger.iterations == 7 and trainer.buffer.counts_by_source() == {
        "gnn": 6,
        "boltzmann": 1,
    }
    (fitness,) = fitness
    assert np.isfinite(fitness[:7]).all() and fitness[7] == -np.inf


def test_probabilities_reach_a_target_that_wants_them_and_only_then():
    env = small_env()
    seen: list[tuple[np.ndarray, np.ndarray | None]] = []
    measure = env.target.measure

    def measure_with_probs(maps, probs=None):
        seen.append((maps, probs))
        return measure(maps)

    env.target.measure = measure_with_probs
    env.target.wants_probabilities = True
    trainer = EGRLAgent(env, small_config(budget=30))
    trainer.step()
    assert [len(maps) for maps, _ in seen] == [6, 2, 1, 1]  # gnn, boltzmann, noisy, clean
    c = max(env.num_choices)
    for maps, probs in seen:
        assert probs.shape == (*maps.shape, c)
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    gnn_maps, gnn_probs = seen[0]
    np.testing.assert_array_equal(gnn_maps, gnn_probs.argmax(-1))  # greedy members
    clean_maps, clean_probs = seen[3]
    np.testing.assert_array_equal(clean_maps, clean_probs.argmax(-1))

    # A target that does not want them: no probabilities are computed at all.
    plain = EGRLAgent(small_env(), small_config(budget=30))

    def refuse(*args, **kwargs):
        raise AssertionError("probabilities computed for a target that does not want them")

    plain.population.act_with_probs = refuse
    plain.portfolio.learners[0].act_with_probs = refuse
    plain.step()
    assert plain.ledger.iterations == 10


def test_evaluate_checks_maps_before_anything_is_recorded():
    env = small_env()
    trainer = EGRLAgent(env, small_config(budget=30))
    bad = np.zeros((2, env.num_units, env.num_heads), dtype=np.int64)
    bad[1, 3, 0] = 7
    with pytest.raises(ValueError, match=f"map 1: unit {env.unit_names[3]!r}"):
        trainer.ledger.evaluate(bad, "gnn")
    assert len(trainer.buffer) == 0 and trainer.ledger.iterations == 0


def test_all_boltzmann_population_takes_the_learner_as_a_seeded_chromosome():
    cfg = small_config(budget=40)
    cfg.agent.population = PopulationConfig(size=4, boltzmann_fraction=1.0)
    trainer = EGRLAgent(small_env(), cfg)
    trainer.step()
    pop = trainer.population
    assert set(pop.kinds) == {"boltzmann"}
    # The learner migrated into one chromosome: its prior is the actor's log-posterior.
    (migrant,) = np.flatnonzero(pop.migrants)
    with torch.no_grad():
        probs = trainer.portfolio.learners[0].actor.distribution(trainer.graph)
    row = pop.chromosome_row(int(migrant))
    expected = torch.log(probs.clamp_min(1e-6)).masked_fill(~pop.chromosomes.mask, 0.0)
    torch.testing.assert_close(pop.chromosomes.prior[row], expected)
    trainer.run()
    assert trainer.ledger.iterations == 40


def test_learner_config_is_the_sac_config_and_refuses_unknown_keys():
    from egrl.agents import train_config
    from egrl.agents.egrl.sac import SACConfig

    cfg = train_config({"learner": {"alpha": 0.1, "rollouts": 2}})
    assert isinstance(cfg.agent.learner, SACConfig)
    assert cfg.agent.learner.alpha == 0.1 and cfg.agent.learner.rollouts == 2
    with pytest.raises(KeyError, match="alph"):
        train_config({"learner": {"alph": 0.1}})


@pytest.mark.parametrize("store_repaired", [False, True])
def test_store_repaired_adds_the_compilers_repair_beside_the_penalised_map(store_repaired):
    cfg = small_config(budget=30)
    cfg.agent.learner.store_repaired = store_repaired
    trainer = EGRLAgent(small_env(), cfg)
    evaluations = []  # every answer the generation puts in the replay buffer, in order
    trainer.ledger.record.subscribe(lambda reading: evaluations.append(reading.evaluation))
    trainer.step()
    invalid = np.concatenate([~ev.valid for ev in evaluations])
    assert invalid.any(), "the small env must produce invalid maps for this test"
    buf = trainer.buffer
    tags = np.array([buf.source_names[i] for i in buf.source[: len(buf)]])
    repaired = np.flatnonzero(tags == "repaired")
    assert len(buf) == trainer.ledger.proposals + len(repaired)  # repairs are not proposals
    if not store_repaired:
        assert len(repaired) == 0
        return
    rectified = np.concatenate([ev.rectified[~ev.valid] for ev in evaluations])
    assert len(repaired) == int(invalid.sum())
    np.testing.assert_array_equal(buf.actions[repaired], rectified)  # in evaluation order
    again = trainer.env.evaluate(buf.actions[repaired].astype(np.int64))
    assert again.valid.all() and (buf.rewards[repaired] > 0).all()
    np.testing.assert_allclose(buf.rewards[repaired], again.reward, rtol=1e-6)


class TrickleRuntime(LocalRuntime):
    """Measures out of process in spirit: a job is measured only when the trainer polls or
    waits, one job per call, so answers arrive while others are outstanding."""

    in_process = False

    def __init__(self, measure) -> None:
        super().__init__(measure)
        self._queued: list = []

    def _start(self, job) -> None:
        self._queued.append(job)

    def _advance(self, timeout_s) -> None:
        if self._queued:
            super()._start(self._queued.pop(0))


def overlap_run(overlap, runtime: bool) -> tuple[EGRLAgent, list[int]]:
    env = small_env()
    cfg = small_config(seed=4, budget=120, name="egrl", options={"overlap": overlap})
    trainer = EGRLAgent(env, cfg)
    if runtime:
        trainer.ledger.use_runtime(TrickleRuntime(env.measure))
    blocks: list[int] = []
    train = trainer._train

    def spy(replay, ups, done):
        blocks.append(ups)
        train(replay, ups, done)

    trainer._train = spy
    trainer.run()
    return trainer, blocks


def test_overlap_updates_while_maps_are_in_flight_and_makes_as_many_updates():
    sync, sync_blocks = overlap_run(False, runtime=True)
    assert len(sync_blocks) <= len(sync.rows)  # one block per generation, after every answer
    over, over_blocks = overlap_run("auto", runtime=True)  # auto: on, out of process
    assert over.overlap and not sync.overlap
    assert over_blocks.count(1) > len(over.rows)  # single updates between answers
    assert over.ledger.iterations == sync.ledger.iterations == 120
    assert over.ledger.dispatcher.open == 0 and over.ledger.dispatcher.in_flight == 0
    # every generation past the burn-in makes gradient_ratio updates per paid measurement
    steps = [r["gradient_steps"] for r in over.rows]
    paid = np.diff([0] + [r["iterations"] for r in over.rows])
    ratio = over.cfg.agent.learner.gradient_ratio
    expected = [0 if s == 0 else round(p * ratio) for s, p in zip(steps, paid)]
    assert steps == expected and sum(steps) > 0
    # the answers, not the order of updates, fix the budget: both runs paid 120 maps
    assert over.env.num_evaluations == sync.env.num_evaluations == 120


@pytest.mark.parametrize("update_on", ["paid", "proposal"])
def test_updates_are_owed_on_paid_measurements_or_on_every_proposal(update_on):
    cfg = small_config(seed=2, budget=120)
    cfg.agent.learner.update_on = update_on
    trainer = EGRLAgent(small_env(), cfg)
    trainer.run()
    steps = [r["gradient_steps"] for r in trainer.rows]
    column = "iterations" if update_on == "paid" else "proposals"
    owed = np.diff([0] + [r[column] for r in trainer.rows]) * cfg.agent.learner.gradient_ratio
    assert steps == [0 if s == 0 else round(n) for s, n in zip(steps, owed)] and sum(steps) > 0
    # the run answers maps from the cache, so the two counts differ
    assert trainer.ledger.proposals > trainer.ledger.iterations == 120


def test_overlap_auto_is_off_in_process_and_on_the_local_runtime_changes_nothing():
    auto, _ = overlap_run("auto", runtime=False)
    forced, _ = overlap_run(True, runtime=False)  # answers are in before any update
    assert not auto.overlap and forced.overlap
    strip = [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in auto.rows]
    other = [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in forced.rows]
    assert json.dumps(strip) == json.dumps(other)


def test_overlap_option_is_checked():
    with pytest.raises(
        ValueError, match="option overlap=sometimes is invalid: expected auto, true or false"
    ):
        EGRLAgent(small_env(), small_config(name="egrl", options={"overlap": "sometimes"}))
