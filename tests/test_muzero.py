"""The planning agent (``agent=muzero``) and the game-playing baselines (``agent=es``,
``agent=random-legal``) on the TPU memory-mapping game: tree search, its targets, the
networks, the replay targets, the true-dynamics planner against brute force, and runs
through ``egrl-train``."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from egrl import make_env
from egrl.agents import make_agent
from egrl.agents.muzero import (
    Encoder,
    EncoderSpec,
    MuZeroNet,
    SearchConfig,
    TrueModel,
    search,
)
from egrl.agents.muzero.mcts import Expansion, LearnedModel
from egrl.agents.muzero.networks import NumpyHeads
from egrl.agents.muzero.replay import Replay, Trajectory, n_step_values
from egrl.agents.tpu_game import return_bound
from hwmodels.tpu import COPY, TPU, Game, Op, Program
from hwmodels.tpu.search import brute_force
from tests.nnpi_workloads import random_dag
from tests.support.agent_configs import muzero_config
from tests.support.envs import small_tpu_env
from tests.support.metrics import read_metrics, untimed
from tests.support.muzero import MUZERO_SMALL, net_for
from tests.support.paths import ROOT
from tests.support.tpu import KB, filler, params, random_program, tiny_program


class TrapModel:
    """A hand-made 3-step model: action 0 pays 0.1 now and nothing after; action 1 pays
    nothing now and 1.0 on the next step (whatever is played); action 2 pays 0 always.
    Priors favour action 0, values are 0: only looking ahead finds action 1."""

    def root(self) -> Expansion:
        return Expansion((), 0.0, np.array([0.4, 0.3, 0.3]), 0.0)

    def expand(self, state: tuple, action: int) -> Expansion:
        path = (*state, action)
        reward = {(0,): 0.1}.get(path, 1.0 if len(path) == 2 and path[0] == 1 else 0.0)
        return Expansion(path, reward, np.array([0.4, 0.3, 0.3]), 0.0, terminal=len(path) == 3)


def test_search_looks_past_an_immediate_reward_to_the_winning_move():
    result = search(
        TrapModel(), SearchConfig(simulations=100, discount=1.0, noise_fraction=0), None
    )
    assert np.argmax(result.visits) == 1
    assert result.visits.sum() == 100  # every simulation goes through one root child
    assert result.value > 0.5


def test_visit_counts_are_the_policy_target():
    result = search(
        TrapModel(), SearchConfig(simulations=25, discount=1.0), np.random.default_rng(0)
    )
    assert result.visits.sum() == 25
    np.testing.assert_allclose(result.policy, result.visits / 25)
    assert result.policy.sum() == pytest.approx(1.0)


def copy_wins_program() -> Program:
    """One weight read after three compute-only steps: Copy is legal (the fillers' supply
    hides it) and earns the benefit; Drop earns nothing; NoCopy is illegal."""
    ops = [*filler(3), Op(("w",), ("o",), 0.0)]
    return Program.from_ops(ops, {"w": KB, "o": 10}, params())


@pytest.mark.parametrize("dynamics", ["true", "learned"])
def test_the_planner_picks_the_move_that_pays(dynamics, one_thread):
    p = copy_wins_program()
    game = Game(p)
    assert game.legal_actions().tolist() == [True, True, False] and game.benefit() > 0
    net, enc = net_for(p, zero_value=True)
    heads = NumpyHeads(net)
    vector, grid = enc(game)
    cfg = SearchConfig(simulations=30, discount=1.0, noise_fraction=0)
    if dynamics == "true":
        model = TrueModel(net, heads, enc, game, return_bound(p))
    else:  # a reward head that pays 1 for Copy and 0 otherwise: the search must use it
        model = LearnedModel(net, heads, vector, grid, game.legal_actions(), 1.0)
        reward = heads.reward
        for w, b in zip(reward.weights, reward.biases):
            w[:] = 0.0
            b[:] = 0.0
        heads.action_cols[1][:] = 0.0
        heads.action_cols[1][COPY] = 1.0  # every hidden unit is 1 for Copy
        reward.weights[-1][:] = 1.0 / reward.weights[-1].shape[1]
    result = search(model, cfg, None)
    assert np.argmax(result.visits) == COPY and result.visits[2] == 0
    assert game.position == 0 and game.ret == 0  # the search left the game at the root


def plan(program: Program, simulations: int) -> Game:
    """A whole game by the true-dynamics planner: search at every move, take the most
    visited action (no noise, no discount, leaf values 0)."""
    net, enc = net_for(program, zero_value=True)
    heads = NumpyHeads(net)
    bound = return_bound(program)
    cfg = SearchConfig(simulations=simulations, discount=1.0, noise_fraction=0)
    game = Game(program)
    while not game.done:
        result = search(TrueModel(net, heads, enc, game, bound), cfg, None)
        game.step(int(np.argmax(result.visits)))
    return game


@pytest.mark.parametrize("which", ["tiny", "random3", "random5"])
def test_the_true_dynamics_planner_finds_the_brute_force_optimum(which, one_thread):
    if which == "tiny":
        p = tiny_program()
    else:
        p = random_program(np.random.default_rng(int(which[-1])), num_ops=4)
    best = brute_force(p)
    assert best.games > 3
    game = plan(p, simulations=300)
    assert game.ret == pytest.approx(best.ret, rel=1e-9)
    assert Game(p).play(game.actions, repair=False).ret == pytest.approx(best.ret, rel=1e-9)


def test_network_shapes_and_numpy_heads_match_torch(one_thread):
    spec = EncoderSpec(grid=16, window=32, profile_bins=20, supply_window=12)
    p = random_program(np.random.default_rng(1))
    enc = Encoder(p, spec)
    game = Game(p)
    game.step(int(np.flatnonzero(game.legal_actions())[-1]))
    vector, grid = enc(game)
    assert vector.shape == (spec.vector_size,) and vector.dtype == np.float32
    assert grid.shape == (16, 16) and np.isfinite(vector).all()
    net = MuZeroNet(spec.vector_size, spec.grid, hidden=24, latent=10)
    batch = 5
    v = torch.from_numpy(np.stack([vector] * batch))
    g = torch.from_numpy(np.stack([grid] * batch))
    with torch.no_grad():
        s = net.represent(v, g)
    assert s.shape == (batch, 10) and float(s.min()) >= 0 and float(s.max()) <= 1 + 1e-6
    nxt, r = net.dynamics(s, torch.tensor([0, 1, 2, 0, 1]))
    logits, value = net.predict(nxt)
    assert nxt.shape == (batch, 10) and r.shape == (batch,)
    assert logits.shape == (batch, 3) and value.shape == (batch,)
    heads = NumpyHeads(net)
    s1, r1 = heads.dynamics(s[1].detach().double().numpy(), 1)
    np.testing.assert_allclose(s1, nxt[1].detach().numpy(), atol=1e-5)
    assert r1 == pytest.approx(float(r[1].detach()), abs=1e-5)
    lg, val = heads.predict(s1)
    torch_lg, torch_val = net.predict(torch.from_numpy(s1).float()[None])
    np.testing.assert_allclose(lg, torch_lg[0].detach().numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="multiple of 4"):
        EncoderSpec(grid=10)


def test_n_step_value_targets_and_replay_batches():
    r = np.array([1.0, 2.0, 3.0, 4.0])
    v = np.array([10.0, 20.0, 30.0, 40.0])
    z = n_step_values(r, v, n=2, discount=0.5)
    np.testing.assert_allclose(z, [1 + 1 + 0.25 * 30, 2 + 1.5 + 0.25 * 40, 3 + 2, 4])
    traj = Trajectory()
    for i in range(4):
        traj.add(np.full(3, i, np.float32), np.zeros((4, 4)), i % 3, r[i], np.eye(3)[i % 3], v[i])
    replay = Replay(capacity=100, td_steps=2, discount=0.5)
    replay.add(traj)
    batch = replay.sample(64, unroll=2, rng=np.random.default_rng(0))
    starts = batch.vectors[:, 0].astype(int)
    for i, t in enumerate(starts):
        span = min(3, 4 - t)
        np.testing.assert_allclose(batch.values[i, :span], z[t : t + span], rtol=1e-6)
        assert (batch.values[i, span:] == 0).all() and (batch.policy_mask[i, span:] == 0).all()
        steps = min(2, 4 - t)
        np.testing.assert_allclose(batch.rewards[i, 1 : steps + 1], r[t : t + steps])
        assert batch.actions[i, :steps].tolist() == [(t + j) % 3 for j in range(steps)]
    replay.add(traj)
    small = Replay(capacity=5, td_steps=2, discount=0.5)
    small.add(traj), small.add(traj)
    assert small.positions == 4  # the oldest game went, the newest is kept whole


@pytest.mark.parametrize(("dynamics", "parallel"), [("learned", 1), ("true", 1), ("learned", 2)])
def test_every_self_play_game_is_paid_and_its_targets_are_visit_counts(
    dynamics, parallel, tmp_path, one_thread
):
    env = small_tpu_env()
    opts = dict(dynamics=dynamics, simulations=5, batch_size=8, parallel_games=parallel)
    agent = make_agent(env, muzero_config("muzero", budget=3, **opts, **MUZERO_SMALL), tmp_path)
    best = agent.run()
    assert agent.ledger.iterations == agent.games == 3 and env.num_evaluations <= 3
    rows = read_metrics(tmp_path)
    # parallel games per generation, fewer where the budget has fewer left
    assert [int(r["games"]) for r in rows] == {1: [1, 2, 3], 2: [2, 3]}[parallel]
    assert all(int(r["train_steps"]) > 0 for r in rows)
    game = agent.replay.games[-1]
    searched = game["policies"].max(axis=1) < 1
    counts = game["policies"][searched] * 5
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-5)  # visits of 5 simulations
    np.testing.assert_allclose(game["policies"].sum(axis=1), 1.0, rtol=1e-6)
    assert best.mapping is not None and env.evaluate(best.mapping).valid[0]
    replayed = Game(agent.program).play(agent.best_actions, repair=False)
    assert replayed.ret == pytest.approx(agent.best_return)
    assert float(rows[-1]["best_norm_return"]) == pytest.approx(agent.best_return / agent.bound)


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_resumed_run_continues_exactly(parallel, tmp_path, one_thread):
    opts = dict(simulations=4, batch_size=8, parallel_games=parallel, **MUZERO_SMALL)
    whole = make_agent(
        small_tpu_env(), muzero_config("muzero", budget=4, **opts), tmp_path / "whole"
    )
    whole.run()
    first = make_agent(small_tpu_env(), muzero_config("muzero", budget=2, **opts), tmp_path / "cut")
    first.run()
    again = make_agent(small_tpu_env(), muzero_config("muzero", budget=4, **opts), tmp_path / "cut")
    assert again.resume() and again.games == 2
    again.run()
    assert untimed(tmp_path / "cut") == untimed(tmp_path / "whole")


def test_bad_options_are_named(one_thread):
    env = small_tpu_env()
    with pytest.raises(ValueError, match="dynamics=.* is invalid: expected one of learned, true"):
        make_agent(env, muzero_config("muzero", dynamics="perfect"))
    with pytest.raises(ValueError, match="option grid=10 is invalid: expected a multiple of 4"):
        make_agent(env, muzero_config("muzero", grid=10))  # the encoder's rule, checked once
    with pytest.raises(KeyError, match="no option"):
        make_agent(env, muzero_config("muzero", simulation=3))
    with pytest.raises(ValueError, match="needs hwmodel=tpu-cmem"):
        make_agent(make_env("nnpi", random_dag(5, np.random.default_rng(0))), muzero_config("es"))


def test_es_improves_over_random_legal_play(one_thread):
    p_env = make_env(  # 126 buffers, a 16 KiB CMEM
        TPU(cmem_mib=16 / 1024), random_dag(40, np.random.default_rng(5), max_bytes=4096)
    )
    results = {}
    for name, opts in (("es", dict(population=4)), ("random-legal", dict(batch=8))):
        agent = make_agent(p_env, muzero_config(name, seed=0, budget=64, **opts))
        agent.run()
        assert agent.ledger.iterations == 64
        results[name] = agent.best_return / agent.bound
    assert results["es"] > results["random-legal"]


def test_random_legal_games_are_legal_as_played(one_thread):
    env = small_tpu_env()
    agent = make_agent(env, muzero_config("random-legal", budget=6, batch=4))
    agent.run()
    assert agent.games == 6 and agent.ledger.iterations <= 6
    game = Game(agent.program)
    assert game.play(agent.best_actions, repair=False).ret == pytest.approx(agent.best_return)


@pytest.mark.parametrize("agent", ["muzero", "muzero-true", "es", "random-legal"])
@pytest.mark.slow
def test_egrl_train_runs_the_game_agents(agent, tmp_path):
    extra = {
        "muzero": ["agent=muzero", "agent.simulations=2", "agent.batch_size=8"],
        "muzero-true": ["agent=muzero", "agent.dynamics=true", "agent.simulations=2"],
        "es": ["agent=es", "agent.population=1"],
        "random-legal": ["agent=random-legal", "agent.batch=2"],
    }[agent]
    out = subprocess.run(
        [sys.executable, "-m", "egrl.cli.train", "hwmodel=tpu-cmem", "workload=resnet18"]
        + ["budget=2", "progress=false", f"hydra.run.dir={tmp_path}", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = read_metrics(tmp_path)
    assert int(rows[-1]["iterations"]) == 2 and float(rows[-1]["best_norm_return"]) > 0
    best = json.loads((tmp_path / "best_mapping.json").read_text())
    assert {c["action"] for c in best["mapping"].values()} <= {"Drop", "Copy", "NoCopy"}


def test_a_passed_deadline_stops_the_planner_inside_its_game(one_thread):
    agent = make_agent(
        small_tpu_env(), muzero_config("muzero", budget=5, simulations=2, **MUZERO_SMALL)
    )
    agent.deadline = time.perf_counter()
    agent.run()
    assert agent.ledger.iterations == 0 and agent.games == 0
    assert agent.stop_reason == "wall-clock deadline reached"
