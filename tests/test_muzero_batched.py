"""The batched search (egrl.agents.muzero.batched) against the one-game reference
(egrl.agents.muzero.mcts.search): one game searched in the batch gets the reference's
visit counts and root value bit for bit, with the learned and the true dynamics, over
positions (early, middle, a few buffers from the end where the tree meets terminal
states) and seeds; a batch of games gets each game the visits it gets searched alone."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import egrl.agents.muzero.agent as agent_module
from egrl.agents.muzero import Encoder, EncoderSpec, MuZeroAgent, SearchConfig, TrueModel, search
from egrl.agents.muzero.agent import AUTO_PARALLEL_GAMES
from egrl.agents.muzero.batched import (
    LearnedBatch,
    TrueBatch,
    batched_search,
    masked_softmax_batch,
    represent_batch,
)
from egrl.agents.muzero.mcts import Expansion, LearnedModel, masked_softmax, represent
from egrl.agents.muzero.networks import NumpyHeads
from egrl.agents.tpu_game import return_bound
from hwmodels.tpu import Game, Program
from tests.support.agent_configs import muzero_config
from tests.support.command_line import assert_refused, egrl_train_in_process
from tests.support.envs import small_tpu_env
from tests.support.metrics import read_metrics, untimed
from tests.support.muzero import MUZERO_SMALL, net_for
from tests.support.tpu import random_program

DYNAMICS = ("learned", "true")
ENCODER_SMALL = dict(grid=8, window=16, profile_bins=16, supply_window=8)


def program() -> Program:
    """A small TPU program (12 ops: about 30 buffers, alias groups, Drop-backups)."""
    return random_program(np.random.default_rng(3), num_ops=12)


def position(p: Program, seed: int, where: float) -> Game:
    """A game played by random legal moves until ``where`` of its buffers are decided
    (1.0: three buffers before the end)."""
    rng = np.random.default_rng(seed)
    game = Game(p)
    stop = min(int(where * p.num_buffers), p.num_buffers - 3)
    while game.position < stop and not game.done:
        legal = np.flatnonzero(game.legal_actions())
        game.step(int(legal[rng.integers(len(legal))]))
    assert not game.done
    return game


class RootGiven(LearnedModel):
    """The learned model with its root latent state given (a batch's own)."""

    def __init__(self, latent: np.ndarray, *args) -> None:
        super().__init__(*args)
        self.latent = latent

    def root(self) -> Expansion:
        logits, value = self.heads.predict(self.latent)
        return Expansion(self.latent, 0.0, masked_softmax(logits, self.legal), value)


def models(dynamics: str, p: Program, games: list[Game], net_seed: int = 0):
    """``(reference models, batched model)`` of ``games``: the batched model's root
    latents are the references' own (one representation call per game)."""
    net, enc = net_for(p, seed=net_seed)
    heads = NumpyHeads(net)
    obs = [enc(g) for g in games]
    legal = np.stack([g.legal_actions() for g in games])
    latents = np.stack([represent(net, v, m) for v, m in obs])
    if dynamics == "learned":
        unit = 1.0 / p.num_buffers
        refs = [
            RootGiven(s, net, heads, v, m, ok, unit) for s, (v, m), ok in zip(latents, obs, legal)
        ]
        return refs, LearnedBatch(heads, latents, legal, unit)
    bound = return_bound(p)
    refs = [TrueModel(net, heads, enc, g, bound, o) for g, o in zip(games, obs)]
    return refs, TrueBatch(net, heads, enc, games, bound, latents, legal)


@pytest.mark.parametrize("dynamics", DYNAMICS)
@pytest.mark.parametrize("where", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_game_is_searched_exactly_as_the_reference(dynamics, where, seed, one_thread):
    p = program()
    game = position(p, seed, where)
    cfg = SearchConfig(simulations=40, discount=0.99, noise_alpha=0.3)
    (ref_model,), batch_model = models(dynamics, p, [game], net_seed=seed)
    if dynamics == "learned":  # the reference as the agent calls it: its own root latent
        m = ref_model
        ref_model = LearnedModel(m.net, m.heads, m.vector, m.grid, m.legal, m.reward_unit)
    ref_rng, rng = np.random.default_rng(seed), np.random.default_rng(seed)
    before = game.snapshot()
    ref = search(ref_model, cfg, ref_rng)
    got = batched_search(batch_model, cfg, rng)
    assert len(got) == 1
    one = got[0]
    assert one.visits.tolist() == ref.visits.tolist() and one.visits.sum() == 40
    assert one.value == ref.value  # bit for bit
    assert one.prior.tolist() == ref.prior.tolist()
    assert rng.bit_generator.state == ref_rng.bit_generator.state  # the same draws
    assert game.snapshot()[:6] == before[:6]  # the game is left at its root


def test_terminal_states_are_met_and_backed_up_as_the_reference(one_thread):
    """The last buffers of a game: simulations run past the end of the game."""
    p = program()
    game = position(p, 0, 1.0)
    cfg = SearchConfig(simulations=60, discount=1.0, noise_fraction=0)
    (ref_model,), batch_model = models("true", p, [game])
    ref = search(ref_model, cfg, None)
    got = batched_search(batch_model, cfg, None)
    assert got[0].visits.tolist() == ref.visits.tolist() and got[0].value == ref.value
    assert p.num_buffers - game.position <= 3  # every path ends within three moves
    assert got.nodes[0] < 30  # half the simulations or more re-reached a terminal state


@pytest.mark.parametrize("dynamics", DYNAMICS)
@pytest.mark.parametrize("noise", [0.0, 0.25])
def test_a_batch_gives_each_game_the_visits_it_gets_alone(dynamics, noise, one_thread):
    """Six games at different positions searched together, and one by one with the same
    generator (the noise is drawn game by game in order in both)."""
    p = program()
    games = [position(p, s, w) for s, w in zip(range(6), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0])]
    cfg = SearchConfig(simulations=30, discount=0.99, noise_alpha=0.3, noise_fraction=noise)
    refs, batch_model = models(dynamics, p, games)
    ref_rng, rng = np.random.default_rng(7), np.random.default_rng(7)
    alone = [search(m, cfg, ref_rng) for m in refs]
    got = batched_search(batch_model, cfg, rng)
    assert len(got) == len(games)
    for g, ref in enumerate(alone):
        assert got[g].visits.tolist() == ref.visits.tolist(), g
        # the networks' matrix products in a batch may round the last bits differently
        # (float32 representation of the true dynamics' leaves: about 1e-7)
        assert got[g].value == pytest.approx(ref.value, rel=1e-5, abs=1e-9), g
        np.testing.assert_allclose(got[g].prior, ref.prior, rtol=1e-12)
    assert rng.bit_generator.state == ref_rng.bit_generator.state


def test_batched_heads_and_softmax_match_the_one_sample_ones(one_thread):
    p = program()
    net, enc = net_for(p, seed=4)
    heads = NumpyHeads(net)
    games = [position(p, s, 0.3 * s) for s in range(4)]
    obs = [enc(g) for g in games]
    latents = represent_batch(net, np.stack([v for v, _ in obs]), np.stack([m for _, m in obs]))
    one = represent_batch(net, obs[0][0][None], obs[0][1][None])
    assert one[0].tolist() == represent(net, *obs[0]).tolist()
    actions = np.array([0, 1, 2, 1])
    nxt, reward = heads.dynamics_batch(latents, actions)
    logits, value = heads.predict_batch(nxt)
    legal = np.stack([g.legal_actions() for g in games])
    prior = masked_softmax_batch(logits, legal)
    for i, s in enumerate(latents):
        s1, r1 = heads.dynamics(s, int(actions[i]))
        lg, v = heads.predict(s1)
        np.testing.assert_allclose(nxt[i], s1, rtol=1e-12, atol=1e-15)
        assert reward[i] == pytest.approx(r1, rel=1e-12, abs=1e-15)
        np.testing.assert_allclose(logits[i], lg, rtol=1e-12, atol=1e-15)
        assert value[i] == pytest.approx(v, rel=1e-12, abs=1e-15)
        np.testing.assert_allclose(prior[i], masked_softmax(logits[i], legal[i]), rtol=1e-15)
    # one row: the same BLAS call as the one-sample heads, bit for bit
    s1, r1 = heads.dynamics_batch(latents[:1], actions[:1])
    assert s1[0].tolist() == heads.dynamics(latents[0], 0)[0].tolist()
    assert float(r1[0]) == heads.dynamics(latents[0], 0)[1]


@pytest.mark.parametrize("spec", [EncoderSpec(), EncoderSpec(**ENCODER_SMALL)])
def test_games_encoded_together_are_encoded_as_one_by_one(spec):
    """Encoder.batch against Encoder.__call__, bit for bit: positions of random legal
    games of two programs, their starts and ends included."""
    for p in (program(), small_tpu_env().target.program):
        rng = np.random.default_rng(1)
        games = [Game(p)]
        for _ in range(3):
            game = Game(p)
            while not game.done:
                legal = np.flatnonzero(game.legal_actions())
                game.step(int(legal[rng.integers(len(legal))]))
                if rng.random() < 0.3:
                    games.append(game.clone())
            games.append(game)
        enc = Encoder(p, spec)
        vectors, grids = enc.batch(games)
        assert vectors.dtype == np.float32 and grids.dtype == np.uint8
        for i, game in enumerate(games):
            vector, grid = enc(game)
            assert vectors[i].tobytes() == vector.tobytes(), i
            assert grids[i].tobytes() == grid.tobytes(), i


# ------------------------------------------------------------- batched self-play
class OneGameAgent(MuZeroAgent):
    """The agent on the one-game reference path (:meth:`MuZeroAgent.play_game`)."""

    def play_games(self, count: int, temperature: float):
        assert count == 1
        return [self.play_game(temperature)]


def run_agent(cls, run_dir, budget: int = 4, **options) -> MuZeroAgent:
    opts = dict(simulations=6, batch_size=8, updates_per_move=0.3, **MUZERO_SMALL)
    agent = cls(
        small_tpu_env(), muzero_config("muzero", budget=budget, **{**opts, **options}), run_dir
    )
    agent.run()
    return agent


@pytest.mark.parametrize("dynamics", DYNAMICS)
@pytest.mark.parametrize("together", ["default", "always"])
def test_one_parallel_game_plays_exactly_as_the_one_game_reference(
    dynamics, together, tmp_path, one_thread, monkeypatch
):
    """parallel_games=1: the same moves, targets, rng draws and learning as one game at a
    time through mcts.search (noise and temperature sampling on); a single search goes
    through mcts.search by default, through the batched search with ``always``."""
    if together == "always":
        monkeypatch.setattr(agent_module, "SEARCH_TOGETHER_FROM", {"learned": 1, "true": 1})
    batched = run_agent(MuZeroAgent, tmp_path / "batched", dynamics=dynamics, parallel_games=1)
    reference = run_agent(OneGameAgent, tmp_path / "reference", dynamics=dynamics, parallel_games=1)
    assert untimed(tmp_path / "batched") == untimed(tmp_path / "reference")
    rows = read_metrics(tmp_path / "batched")
    assert len(rows) == 4 and all(int(r["searched_moves"]) > 0 for r in rows)
    assert batched.best_actions.tolist() == reference.best_actions.tolist()
    assert len(batched.replay.games) == len(reference.replay.games) == 4
    for mine, ref in zip(batched.replay.games, reference.replay.games):
        assert mine.keys() == ref.keys()
        for key in mine:
            assert np.array_equal(mine[key], ref[key]), key
    for key, value in batched.net.state_dict().items():
        assert torch.equal(value, reference.net.state_dict()[key]), key
    assert batched.rng.bit_generator.state == reference.rng.bit_generator.state


@pytest.mark.parametrize("dynamics", DYNAMICS)
def test_games_searched_together_play_as_searched_one_by_one(
    dynamics, tmp_path, monkeypatch, one_thread
):
    """A generation of 8 games with every move's searches batched, and with them searched
    one by one through mcts.search: the same moves and visit counts (the root values, the
    value targets, agree to BLAS rounding)."""
    runs = {}
    for together, start in (("batched", 1), ("one-by-one", 1000)):
        monkeypatch.setattr(agent_module, "SEARCH_TOGETHER_FROM", {dynamics: start})
        runs[together] = run_agent(
            MuZeroAgent, tmp_path / together, budget=8, dynamics=dynamics, parallel_games=8
        )
    batched, alone = runs["batched"].replay.games, runs["one-by-one"].replay.games
    assert len(batched) == len(alone) == 8
    for mine, ref in zip(batched, alone):
        for key in ("actions", "rewards", "policies", "vectors", "grids"):
            assert np.array_equal(mine[key], ref[key]), key
        np.testing.assert_allclose(mine["targets"], ref["targets"], rtol=1e-5, atol=1e-6)
    assert runs["batched"].rows[0]["searched_moves"] > 8


def test_parallel_games_are_paid_stored_and_learnt_from_together(tmp_path, one_thread):
    agent = run_agent(MuZeroAgent, tmp_path, budget=6, parallel_games=3, simulations=5)
    rows = read_metrics(tmp_path)
    assert [int(r["games"]) for r in rows] == [3, 6] and agent.ledger.iterations == 6
    assert len(agent.replay.games) == 6
    moves = [len(g["actions"]) for g in agent.replay.games]
    assert int(rows[0]["moves"]) == sum(moves[:3]) and int(rows[1]["moves"]) == sum(moves[3:])
    # 0.3 training steps per move played, after each generation
    assert int(rows[0]["train_steps"]) == math.ceil(0.3 * sum(moves[:3]))
    assert int(rows[-1]["train_steps"]) == agent.train_steps
    for game in agent.replay.games:  # searched moves' targets: visits of 5 simulations
        counts = game["policies"] * 5
        np.testing.assert_allclose(counts, np.round(counts), atol=1e-5)
    best = max(range(6), key=lambda i: float(agent.replay.games[i]["rewards"].sum()))
    replayed = Game(agent.program).play(agent.best_actions, repair=False)
    assert replayed.ret == pytest.approx(agent.best_return)
    assert agent.best_return == pytest.approx(
        float(agent.replay.games[best]["rewards"].sum()) * agent.bound, rel=1e-5
    )


def test_games_the_deadline_cuts_are_neither_paid_nor_stored(one_thread):
    agent = MuZeroAgent(
        small_tpu_env(), muzero_config("muzero", budget=9, simulations=2, **MUZERO_SMALL)
    )
    agent.options = dataclasses.replace(agent.options, parallel_games=3)
    agent.parallel_games = 3
    calls = []

    def past_deadline() -> bool:  # passes after five moves of the three games
        calls.append(1)
        if len(calls) > 5:
            agent.stop_reason = "wall-clock deadline reached"
        return len(calls) > 5

    agent.past_deadline = past_deadline
    agent.run()
    assert agent.ledger.iterations == agent.games == 0 and agent.train_steps == 0
    assert not agent.replay.games and agent.generation == 1
    assert agent.rows[0]["moves"] == 15  # five moves of each game, played and dropped


def test_auto_plays_as_many_games_as_the_replay_buffer_holds(one_thread):
    env = small_tpu_env()
    n = env.target.program.num_buffers
    assert (
        MuZeroAgent(env, muzero_config("muzero", **MUZERO_SMALL)).parallel_games
        == AUTO_PARALLEL_GAMES
    )
    small = MuZeroAgent(env, muzero_config("muzero", replay_size=3 * n + 1, **MUZERO_SMALL))
    assert small.parallel_games == 3
    tiny = MuZeroAgent(env, muzero_config("muzero", replay_size=n - 1, **MUZERO_SMALL))
    assert tiny.parallel_games == 1  # one game is always kept whole


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("agent.parallel_games=0",),
            "agent 'muzero': option parallel_games=0 is invalid: expected an integer >= 1 or auto",
        ),
        (
            ("agent.parallel_games=many",),
            "agent 'muzero': option parallel_games=many is invalid: "
            "expected an integer >= 1 or auto",
        ),
        (
            ("agent.parallel_games=14", "agent.replay_size=1000"),
            "agent 'muzero': option parallel_games=14: 14 games of the program's 75 buffers "
            "do not fit in replay_size=1000 positions (at most 13)",
        ),
        (
            ("hwmodel=nnpi", "agent.parallel_games=8"),
            "agent=muzero is invalid: agent 'muzero' plays the TPU memory-mapping game and "
            "needs hwmodel=tpu-cmem; got a NNPITarget target",
        ),
    ],
)
def test_bad_parallel_games_are_refused_in_one_line(args, line, tmp_path):
    """agent.parallel_games=0, a count whose games do not fit in the replay buffer, and
    the planner on a target that is not the game: exit status 2, nothing made."""
    common = ("hwmodel=tpu-cmem", "workload=resnet18", "agent=muzero", "budget=10")
    out = egrl_train_in_process(*common, *args, cwd=tmp_path)
    assert_refused(out, line)
    assert list(tmp_path.iterdir()) == []
