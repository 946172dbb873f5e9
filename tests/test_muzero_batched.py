"""The batched search (egrl.agents.muzero.batched) against the one-game reference
(egrl.agents.muzero.mcts.search): one game searched in the batch gets the reference's
visit counts and root value bit for bit, with the learned and the true dynamics, over
positions (early, middle, a few buffers from the end where the tree meets terminal
states) and seeds; a batch of games gets each game the visits it gets searched alone."""

from __future__ import annotations

import numpy as np
import pytest

from egrl.agents.muzero import SearchConfig, TrueModel, search
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
from tests.test_muzero import net_for
from tests.test_tpu_game import random_program

DYNAMICS = ("learned", "true")


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
