"""Discrete SAC learner: losses, targets, noise, entropy, learning on a toy problem.

The networks here are small per-node MLPs with the policies' signatures, so the tests
check the learner's mathematics and stay fast; one test builds the real Graph U-Net pair.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch import nn
from torch_geometric.data import Data

from egrl.agents.egrl.sac import (
    SACConfig,
    SACDiscrete,
    decision_entropy,
    masked_log_probs,
    noisy_one_hot,
    policy_action,
)
from egrl.checkpoint import load_state, save_state
from egrl.replay import ReplayBuffer
from policies import GraphUNetActor, Policy, TwinQCritic
from policies.categorical import choice_mask
from tests.support.paths import ROOT

NUM_CHOICES = [3, 2]  # head 1 has a masked third choice
NUM_NODES = 4
CONFIGS = ROOT / "configs"
#: EGRL's learner (configs/learner/sac-paper.yaml): the tests of the loss math start from it
PAPER = {
    "alpha": 0.05,
    "entropy_reduction": "mean",
    "reward_norm": "none",
    "reward_scale": 5.0,
    "shared_critic_encoder": False,
}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: one intra-op thread avoids thread-pool overhead on a loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class TinyActor(nn.Module, Policy):
    """Per-node MLP with ``GraphUNetActor``'s signatures: logits ``[N, H, C]``; it acts
    through :class:`policies.Policy`, like the real actor."""

    def __init__(self, in_dim: int, num_choices: list[int], hidden: int = 16):
        super().__init__()
        self.mask = choice_mask(num_choices)
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ELU(), nn.Linear(hidden, self.mask.numel())
        )

    def forward(self, x, edge_index, batch=None):
        logits = self.net(x).view(x.size(0), *self.mask.shape)
        return logits.masked_fill(~self.mask, float("-inf"))

    def policy_logits(self, data):
        return self(data.x, data.edge_index)


class TinyCritic(nn.Module):
    """Sum over nodes of a per-node MLP of ``[x, action]``, two heads: ``TwinQCritic``'s shapes."""

    def __init__(self, in_dim: int, num_choices: list[int], hidden: int = 32):
        super().__init__()
        width = len(num_choices) * max(num_choices)
        self.q1 = nn.Sequential(nn.Linear(in_dim + width, hidden), nn.ELU(), nn.Linear(hidden, 1))
        self.q2 = nn.Sequential(nn.Linear(in_dim + width, hidden), nn.ELU(), nn.Linear(hidden, 1))

    def forward(self, x, edge_index, actions, batch=None):
        if actions.dim() == 3:
            actions = actions[None]
        flat = actions.flatten(-2)  # [S, N, H*C]
        feats = torch.cat([x.expand(flat.size(0), *x.shape), flat], dim=-1)
        return self.q1(feats).sum(dim=(1, 2)), self.q2(feats).sum(dim=(1, 2))


def _graph() -> Data:
    x = torch.eye(NUM_NODES)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    return Data(x=x, edge_index=edge_index)


def _learner(seed: int = 0, **overrides) -> SACDiscrete:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        actor = TinyActor(NUM_NODES, NUM_CHOICES)
        critic = TinyCritic(NUM_NODES, NUM_CHOICES)
    config = SACConfig(**{**PAPER, **overrides})
    return SACDiscrete(actor, critic, NUM_CHOICES, config, seed=seed)


def _toy_rewards(rng: np.random.Generator) -> np.ndarray:
    """Per-decision rewards ``w [N, H, C]`` with one clearly best choice per decision."""
    w = rng.uniform(0.0, 0.3, size=(NUM_NODES, len(NUM_CHOICES), max(NUM_CHOICES)))
    for n in range(NUM_NODES):
        for h, c in enumerate(NUM_CHOICES):
            w[n, h, rng.integers(c)] = 1.0
    return w


def _reward(w: np.ndarray, maps: np.ndarray) -> np.ndarray:
    """Additive reward: mean over decisions of ``w[n, h, map[n, h]]``; float ``[B]``."""
    picked = np.take_along_axis(w[None], maps[..., None], axis=-1)[..., 0]
    return picked.mean(axis=(1, 2))


def _random_maps(rng: np.random.Generator, count: int) -> np.ndarray:
    cols = [rng.integers(0, c, size=(count, NUM_NODES)) for c in NUM_CHOICES]
    return np.stack(cols, axis=-1)


# ------------------------------------------------------------------- math pieces
def test_entropy_matches_the_analytic_value_with_masked_choices():
    mask = choice_mask(NUM_CHOICES)
    p0 = torch.tensor([0.5, 0.25, 0.25])
    logits = torch.zeros(NUM_NODES, 2, 3)
    logits[:, 0] = p0.log()
    logits[:, 1, 2] = 50.0  # a masked choice: must be ignored, not dominate
    logits.requires_grad_(True)
    probs, log_probs = masked_log_probs(logits, mask)
    h = decision_entropy(probs, log_probs)
    expected = 0.5 * (-(p0 * p0.log()).sum().item() + math.log(2.0))
    assert h.item() == pytest.approx(expected, rel=1e-6)
    assert probs[:, 1, 2].abs().max().item() == 0.0
    h.backward()
    assert torch.isfinite(logits.grad).all()


def test_noisy_one_hot_respects_clip_mask_and_range():
    mask = choice_mask(NUM_CHOICES)
    actions = torch.from_numpy(_random_maps(np.random.default_rng(0), 500))
    gen = torch.Generator().manual_seed(0)
    clip = 0.25
    noisy = noisy_one_hot(actions, mask, std=1.0, clip=clip, generator=gen, clamp=True)
    one_hot = torch.nn.functional.one_hot(actions, 3).float()
    diff = noisy - one_hot
    assert noisy.shape == (500, NUM_NODES, 2, 3)
    assert diff.abs().max().item() <= clip + 1e-6
    assert (noisy >= 0).all() and (noisy <= 1).all()
    assert (noisy[..., 1, 2] == 0).all()  # the missing choice of head 1 stays empty
    assert diff.abs().max().item() > 0.9 * clip  # std 1 >> clip: the clip is reached
    unclamped = noisy_one_hot(actions, mask, std=1.0, clip=clip, generator=gen, clamp=False)
    assert unclamped.min().item() < 0 and unclamped.max().item() > 1


def test_policy_action_modes():
    probs = torch.tensor([[[0.2, 0.5, 0.3]]])
    assert torch.equal(policy_action(probs, "probs"), probs)
    assert torch.allclose(policy_action(probs, "argmax_probs"), torch.tensor([[[0.0, 0.5, 0.0]]]))
    with pytest.raises(ValueError, match="actor_action"):
        SACConfig(actor_action="gumbel")


# ---------------------------------------------------------------------- updates
def _batch(rng: np.random.Generator, size: int, done: bool = True) -> dict:
    maps = _random_maps(rng, size)
    return {
        "actions": maps,
        "rewards": rng.normal(size=size).astype(np.float32),
        "done": np.full(size, done),
    }


def test_one_step_target_is_the_scaled_reward():
    learner = _learner(reward_scale=5.0, reward_shift=0.5)
    batch = _batch(np.random.default_rng(0), 24, done=True)
    stats = learner.update(_graph(), batch)
    assert stats["target_mean"] == pytest.approx(5.0 * (batch["rewards"].mean() + 0.5), rel=1e-5)


def test_bootstrapped_target_uses_target_critic_and_entropy():
    learner = _learner(gamma=0.9, alpha=0.2, reward_scale=2.0)
    graph = _graph()
    batch = _batch(np.random.default_rng(1), 8, done=False)
    with torch.no_grad():
        probs, log_probs = masked_log_probs(
            learner.actor_target(graph.x, graph.edge_index), learner.mask
        )
        q1, q2 = learner.critic_target(graph.x, graph.edge_index, probs[None])
        soft_value = min(q1.item(), q2.item()) + 0.2 * decision_entropy(probs, log_probs).item()
    stats = learner.update(graph, batch)
    expected = 2.0 * batch["rewards"].mean() + 0.9 * soft_value
    assert stats["target_mean"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_soft_update_moves_targets_by_tau():
    tau = 0.1
    learner = _learner(tau=tau)
    old_critic = [p.detach().clone() for p in learner.critic_target.parameters()]
    old_actor = [p.detach().clone() for p in learner.actor_target.parameters()]
    learner.update(_graph(), _batch(np.random.default_rng(2), 24))
    for module, target, old in (
        (learner.critic, learner.critic_target, old_critic),
        (learner.actor, learner.actor_target, old_actor),
    ):
        for p, t, o in zip(module.parameters(), target.parameters(), old, strict=True):
            assert torch.allclose(t, (1 - tau) * o + tau * p.detach(), atol=1e-6)
            assert not torch.allclose(t, o)  # it moved


def test_without_target_actor_there_is_none():
    learner = _learner(target_actor=False)
    assert learner.actor_target is None
    stats = learner.update(_graph(), _batch(np.random.default_rng(3), 4, done=False))
    assert math.isfinite(stats["critic_loss"])


def test_update_leaves_the_global_random_state_alone():
    learner = _learner()
    before = torch.get_rng_state()
    learner.update(_graph(), _batch(np.random.default_rng(4), 24))
    assert torch.equal(before, torch.get_rng_state())


def test_autotuned_alpha_rises_when_entropy_is_below_target():
    learner = _learner(alpha="auto", target_entropy_ratio=1.0, lr_alpha=0.1)
    alpha0 = learner.alpha
    learner.update(_graph(), _batch(np.random.default_rng(5), 24))
    assert learner.alpha > alpha0  # any non-uniform policy is below the uniform entropy


def test_act_clean_is_greedy_and_noisy_explores():
    learner = _learner(noise_std=5.0)
    graph = _graph()
    gen = torch.Generator().manual_seed(0)
    clean = learner.act(graph, 3, gen, noisy=False)
    greedy = learner.actor(graph.x, graph.edge_index).argmax(dim=-1)
    assert clean.shape == (3, NUM_NODES, 2)
    assert all(torch.equal(m, greedy) for m in clean)
    noisy = learner.act(graph, 16, gen, noisy=True)
    assert (noisy != greedy).any()
    assert (noisy[..., 1] < 2).all()  # never the missing choice


def test_act_is_the_actors_noisy_rollout_and_probs_change_no_draw():
    learner = _learner(noise_std=0.7)
    graph = _graph()
    for noisy, noise_std in ((True, 0.7), (False, 0.0)):
        mine = learner.act(graph, 5, torch.Generator().manual_seed(3), noisy=noisy)
        actor = learner.actor.act(graph, 5, torch.Generator().manual_seed(3), True, noise_std)
        assert torch.equal(mine, actor)
        maps, probs = learner.act_with_probs(graph, 5, torch.Generator().manual_seed(3), noisy)
        assert torch.equal(maps, mine)
        expected = torch.softmax(learner.actor(graph.x, graph.edge_index), dim=-1)
        assert torch.allclose(probs, expected)
        assert probs[:, 1, 2].eq(0).all()  # zeros past the second head's two choices


def test_train_steps_draw_from_every_graph_and_buffer_pair():
    rng = np.random.default_rng(8)
    buffers = [ReplayBuffer(capacity=50, num_units=NUM_NODES, num_heads=2) for _ in range(2)]
    for buffer in buffers:
        maps = _random_maps(rng, 20)
        buffer.add(maps, rng.normal(size=20), source="learner")
    graphs = [_graph(), _graph()]
    graphs[1].x = -graphs[1].x
    seen = []

    class Recording(SACDiscrete):
        def update(self, graph, batch, reward_stats=None):
            pick = int(graph is graphs[1])
            assert reward_stats == buffers[pick].reward_stats()  # each buffer's own statistics
            seen.append(bool(pick))
            return {"critic_loss": float(len(seen))}

    base = _learner()
    learner = Recording(base.actor, base.critic, NUM_CHOICES, SACConfig(reward_norm="buffer"))
    stats = learner.train_steps(list(zip(graphs, buffers)), 40, rng)
    assert len(seen) == 40 and 0 < sum(seen) < 40
    assert stats == {"critic_loss": np.mean(np.arange(1, 41))}
    seen.clear()
    learner.train_steps([(graphs[0], buffers[0])], 5, rng)
    assert seen == [False] * 5


# ---------------------------------------------------------- learning a toy problem
def test_learns_the_toy_problem():
    """Additive reward with one best choice per decision: Q fits k*r, greedy map = best map.

    alpha is raised to 0.5 here: the entropy is averaged over decisions while Q sums them,
    and with alpha = 0.05 the toy actor turns deterministic (vanishing softmax gradient)
    before the critic ranks every choice right, leaving some decisions stuck.
    """
    rng = np.random.default_rng(0)
    w = _toy_rewards(rng)
    best = w.argmax(axis=-1)  # masked choices have weight 0 < 1
    buffer = ReplayBuffer(capacity=400, num_units=NUM_NODES, num_heads=2)
    maps = _random_maps(rng, 200)
    buffer.add(maps, _reward(w, maps), source="boltzmann")
    learner = _learner(lr_actor=1e-2, lr_critic=1e-2, alpha=0.5)
    graph = _graph()
    learner.train_steps([(graph, buffer)], 400, rng)

    with torch.no_grad():
        held = torch.from_numpy(maps)
        one_hot = torch.nn.functional.one_hot(held, 3).float() * learner.mask
        q1, q2 = learner.critic(graph.x, graph.edge_index, one_hot)
    scaled = 5.0 * _reward(w, maps)
    q = torch.min(q1, q2).numpy()
    assert np.corrcoef(q, scaled)[0, 1] > 0.95
    assert np.abs(q - scaled).mean() < 0.1 * (scaled.max() - scaled.min())
    greedy = learner.act(graph, 1, torch.Generator().manual_seed(0), noisy=False)[0].numpy()
    assert np.array_equal(greedy, best)


# ------------------------------------------------------------------ checkpoints
def test_state_round_trip_resumes_identically(tmp_path):
    rng = np.random.default_rng(6)
    batches = [_batch(rng, 24, done=bool(i % 2)) for i in range(3)]
    learner = _learner(alpha="auto")
    learner.update(_graph(), batches[0])
    save_state(learner.state_dict(), tmp_path / "learner")

    restored = _learner(seed=123, alpha="auto")  # different weights and generator
    restored.load_state_dict(load_state(tmp_path / "learner"))
    assert restored.num_updates == 1
    for b in batches[1:]:
        assert restored.update(_graph(), b) == learner.update(_graph(), b)
    for a, b in zip(learner.actor.parameters(), restored.actor.parameters(), strict=True):
        assert torch.equal(a, b)


def test_checkpoint_of_other_heads_is_refused():
    state = _learner().state_dict()
    state["num_choices"] = [3, 3]
    with pytest.raises(ValueError, match="num_choices"):
        _learner().load_state_dict(state)


# ---------------------------------------------------------- the real networks
def test_build_with_graph_unet_networks_is_seeded():
    kwargs = dict(hidden=16, out=16, depth=2, heads=2)
    before = torch.get_rng_state()
    kwargs["config"] = SACConfig(**PAPER)
    a = SACDiscrete.build(NUM_NODES, NUM_CHOICES, seed=3, **kwargs)
    assert torch.equal(before, torch.get_rng_state())  # built on a fork of the global RNG
    b = SACDiscrete.build(NUM_NODES, NUM_CHOICES, seed=3, **kwargs)
    assert isinstance(a.actor, GraphUNetActor) and isinstance(a.critic, TwinQCritic)
    for p, q in zip(a.critic.parameters(), b.critic.parameters(), strict=True):
        assert torch.equal(p, q)
    stats = [m.update(_graph(), _batch(np.random.default_rng(7), 6)) for m in (a, b)]
    assert stats[0] == stats[1]
    assert all(math.isfinite(v) for v in stats[0].values())
    maps = a.act(_graph(), 2, torch.Generator().manual_seed(0), noisy=True)
    assert maps.shape == (2, NUM_NODES, 2)


def test_config_reads_the_learner_config_group():
    values = OmegaConf.to_container(OmegaConf.load(CONFIGS / "learner" / "sac.yaml"))
    config = SACConfig.from_dict(values)
    assert config == SACConfig()  # the group and the dataclass agree on every default
    assert (config.alpha, config.entropy_reduction, config.reward_norm) == ("auto", "sum", "buffer")
    paper = SACConfig.from_dict(
        OmegaConf.to_container(OmegaConf.load(CONFIGS / "learner" / "sac-paper.yaml"))
    )
    assert paper == SACConfig(**PAPER)
    assert (paper.gamma, paper.alpha, paper.tau, paper.reward_scale) == (0.99, 0.05, 1e-3, 5.0)
    assert (config.lr_actor, config.lr_critic, config.batch_size) == (1e-3, 1e-3, 24)


# ------------------------------------------------- temperature and reward scale
@pytest.mark.parametrize("alpha_init", [1e-3, 10.0])
def test_learned_alpha_drives_the_entropy_to_its_target(alpha_init):
    """From far below or far above, alpha moves so that one decision's entropy nears its target.

    A wrong sign in the temperature loss moves alpha away from the target instead: from 1e-3
    it falls further and the actor collapses; from 10 it grows and the actor stays uniform.
    """
    rng = np.random.default_rng(0)
    w = _toy_rewards(rng)
    buffer = ReplayBuffer(capacity=400, num_units=NUM_NODES, num_heads=2)
    maps = _random_maps(rng, 200)
    buffer.add(maps, _reward(w, maps), source="boltzmann")
    learner = _learner(
        alpha="auto",
        alpha_init=alpha_init,
        lr_alpha=0.05,
        target_entropy_ratio=0.5,
        entropy_reduction="sum",
        reward_norm="buffer",
        reward_scale=1.0,
        lr_actor=1e-2,
        lr_critic=1e-2,
    )
    graph = _graph()
    learner.train_steps([(graph, buffer)], 300, rng)
    with torch.no_grad():
        probs, log_probs = masked_log_probs(learner.actor(graph.x, graph.edge_index), learner.mask)
    entropy = decision_entropy(probs, log_probs).item()
    assert (learner.alpha > alpha_init) if alpha_init < 1 else (learner.alpha < alpha_init)
    assert abs(entropy - learner.target_entropy) < 0.35 * learner.target_entropy


def test_summed_entropy_weighs_every_decision_with_alpha():
    mean = _learner(alpha=0.3, entropy_reduction="mean")
    summed = _learner(alpha=0.3, entropy_reduction="sum")
    graph = _graph()
    with torch.no_grad():
        probs, log_probs = masked_log_probs(mean.actor(graph.x, graph.edge_index), mean.mask)
    term_mean, per_decision = mean._entropy_term(probs, log_probs)
    term_sum, _ = summed._entropy_term(probs, log_probs)
    assert term_mean.item() == pytest.approx(per_decision.item())
    assert term_sum.item() == pytest.approx(per_decision.item() * NUM_NODES * len(NUM_CHOICES))


def test_reward_norm_standardises_with_the_buffers_statistics():
    rng = np.random.default_rng(8)
    buffer = ReplayBuffer(capacity=50, num_units=NUM_NODES, num_heads=2)
    for _ in range(3):  # 90 maps into 50 slots: the statistics are those of the held rewards
        maps = _random_maps(rng, 30)
        buffer.add(maps, rng.normal(0.7, 0.3, size=30), source="gnn")
    held = buffer.rewards[: len(buffer)].astype(np.float64)
    mean, std = buffer.reward_stats()
    assert (mean, std) == (pytest.approx(held.mean()), pytest.approx(held.std()))

    learner = _learner(reward_norm="buffer", reward_scale=2.0)
    batch = buffer.sample(24, rng)
    stats = learner.update(_graph(), batch, buffer.reward_stats())
    expected = 2.0 * ((batch["rewards"].astype(np.float64) - mean) / std).mean()
    assert stats["target_mean"] == pytest.approx(expected, rel=1e-4, abs=1e-5)
    with pytest.raises(ValueError, match="reward_stats"):
        learner.update(_graph(), batch)
