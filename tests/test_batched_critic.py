"""The batched critic: S actions on one graph in one pass equal S separate passes.

The twin critic evaluates a minibatch of maps on the one decision graph of a run with its
samples held node-major (``policies.graph_ops.attention_on_copies``). These tests hold it
against a per-sample reference that runs every PyG convolution's own ``forward`` on each
sample alone: same values, same parameter gradients, same learner losses (to float
tolerance), for both encoder layouts; and a learner checkpoint with EGRL's two towers
still loads into a learner built with the shared encoder.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch_geometric.nn import global_max_pool, global_mean_pool

from egrl.agents.egrl.sac import SACConfig, SACDiscrete, noisy_one_hot
from egrl.replay import ReplayBuffer
from policies import TwinQCritic, graph_ops, seeded_init
from policies.critic import QEncoder
from policies.graph_ops import (
    attention_conv,
    attention_on_copies,
    undirected_with_self_loops,
    weighted_sum,
)

F, N, CHOICES = 5, 9, [3, 2]
EDGES = torch.tensor([[0, 1, 1, 2, 3, 4, 5, 6, 7, 2], [1, 2, 3, 4, 4, 5, 6, 7, 8, 8]])

pytestmark = pytest.mark.usefixtures("one_thread")


def graph(seed: int = 0) -> torch.Tensor:
    return torch.randn(N, F, generator=torch.Generator().manual_seed(seed))


def reference_encode(
    enc: QEncoder, x: torch.Tensor, action: torch.Tensor, edges: torch.Tensor, batch: torch.Tensor
) -> torch.Tensor:
    """One sample through PyG's own convolutions: pooled ``[G, 2 * hidden]``."""
    h = enc.act_fn(enc.state_in(x) + enc.action_in(action.reshape(x.size(0), -1)))
    for conv in enc.convs:
        h = h + enc.act_fn(conv(h, edges))
    size = int(batch.max()) + 1
    return torch.cat([global_mean_pool(h, batch, size), global_max_pool(h, batch, size)], -1)


def reference_q(critic: TwinQCritic, x, edge_index, actions, batch=None):
    """``(q1, q2)`` each ``[S, G]``: every sample alone, PyG convolutions, no batching."""
    edges = undirected_with_self_loops(edge_index, x.size(0))
    batch = torch.zeros(x.size(0), dtype=torch.long) if batch is None else batch
    q1, q2 = [], []
    for action in actions * critic.mask:
        if critic.shared_encoder:
            pooled = reference_encode(critic.encoder, x, action, edges, batch)
            q1.append(critic.readout1(pooled).squeeze(-1))
            q2.append(critic.readout2(pooled).squeeze(-1))
        else:
            for tower, out in ((critic.q1, q1), (critic.q2, q2)):
                pooled = reference_encode(tower, x, action, edges, batch)
                out.append(tower.readout(pooled).squeeze(-1))
    return torch.stack(q1), torch.stack(q2)


@pytest.mark.parametrize("kind", ["gat", "gatv2"])
def test_attention_on_copies_is_the_convolution_of_each_copy(kind):
    conv = seeded_init(0, lambda: attention_conv(kind, 8, 2))
    edges = undirected_with_self_loops(EDGES, N)
    h = torch.randn(N, 4, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)
    batched = attention_on_copies(conv, h, edges)
    single = torch.stack([conv(h[:, s], edges) for s in range(h.size(1))], dim=1)
    torch.testing.assert_close(batched, single, rtol=1e-5, atol=1e-6)
    weights = torch.randn(batched.shape, generator=torch.Generator().manual_seed(2))
    got = torch.autograd.grad((batched * weights).sum(), [h, *conv.parameters()])
    want = torch.autograd.grad((single * weights).sum(), [h, *conv.parameters()])
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def unfused_weighted_sum(x, alpha, src, dst):
    """What :func:`weighted_sum` replaces: the messages of every edge at once."""
    messages = x.index_select(0, src) * alpha.unsqueeze(-1)
    return messages.new_zeros(x.shape).index_add(0, dst, messages)


@pytest.mark.parametrize("block", [1, 24, 96, 1 << 18])
def test_weighted_sum_is_the_unfused_sum_bit_for_bit(monkeypatch, block):
    """Values and both gradients equal the one-shot gather, scale and index_add exactly,
    whatever the block (one edge at a time, several, the whole graph at once)."""
    monkeypatch.setattr(graph_ops, "MESSAGE_BLOCK", block)
    gen = torch.Generator().manual_seed(4)
    nodes, edges = 30, 200
    src = torch.randint(0, nodes, (edges,), generator=gen)
    dst = torch.randint(0, nodes, (edges,), generator=gen)
    grad = torch.randn(nodes, 3, 2, 4, generator=gen)
    results = []
    for fn in (weighted_sum, unfused_weighted_sum):
        x = torch.randn(nodes, 3, 2, 4, generator=torch.Generator().manual_seed(5))
        alpha = torch.rand(edges, 3, 2, generator=torch.Generator().manual_seed(6))
        x.requires_grad_(True)
        alpha.requires_grad_(True)
        out = fn(x * 1.5, alpha.exp(), src, dst)
        gx, galpha = torch.autograd.grad((out * grad).sum(), [x, alpha])
        results.append((out.detach(), gx, galpha))
    for got, want in zip(*results, strict=True):
        assert torch.equal(got, want)


def test_weighted_sum_gradients_and_edge_cases(monkeypatch):
    monkeypatch.setattr(graph_ops, "MESSAGE_BLOCK", 8)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(5, 2, 1, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    alpha = torch.rand(9, 2, 1, dtype=torch.float64, generator=gen, requires_grad=True)
    src, dst = torch.randint(0, 5, (2, 9), generator=gen)
    assert torch.autograd.gradcheck(weighted_sum, (x, alpha, src, dst))
    none = torch.zeros(0, dtype=torch.long)
    empty = weighted_sum(x, alpha[:0], none, none)
    assert torch.equal(empty, torch.zeros_like(x))
    (gx,) = torch.autograd.grad(weighted_sum(x, alpha.detach(), src, dst).sum(), [x])
    assert torch.equal(
        gx, torch.autograd.grad(unfused_weighted_sum(x, alpha, src, dst).sum(), [x])[0]
    )


def test_egrl_runs_the_same_with_messages_summed_block_by_block(monkeypatch, tmp_path):
    """A short EGRL run on the TPU game (learner updates included) writes the same
    metrics whether the convolutions sum their messages a few edges at a time or all at
    once (the code before :func:`weighted_sum`)."""
    from egrl import make_env
    from egrl.agents.egrl.agent import EGRLAgent
    from tests.support.egrl_runs import small_config
    from tests.support.metrics import read_metrics

    runs = {"blocks": tmp_path / "blocks", "unfused": tmp_path / "unfused"}
    with monkeypatch.context() as patch:
        patch.setattr(graph_ops, "MESSAGE_BLOCK", 64)
        EGRLAgent(make_env("tpu-cmem", "resnet18"), small_config(budget=60), runs["blocks"]).run()
    with monkeypatch.context() as patch:
        patch.setattr(graph_ops, "weighted_sum", unfused_weighted_sum)
        EGRLAgent(make_env("tpu-cmem", "resnet18"), small_config(budget=60), runs["unfused"]).run()
    blocks, unfused = read_metrics(runs["blocks"]), read_metrics(runs["unfused"])
    assert any(float(r["gradient_steps"]) > 0 for r in blocks)
    assert blocks == unfused


def test_attention_on_copies_refuses_settings_it_does_not_implement():
    from torch_geometric.nn import GATConv

    with pytest.raises(ValueError, match="add_self_loops"):
        attention_on_copies(GATConv(4, 2, heads=2), torch.zeros(3, 1, 4), EDGES[:, :2])


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("two_graphs", [False, True])
def test_batched_critic_equals_the_per_sample_reference(shared, two_graphs):
    critic = seeded_init(
        0, lambda: TwinQCritic(F, CHOICES, hidden=16, depth=2, heads=2, shared_encoder=shared)
    )
    x = graph()
    batch = torch.tensor([0] * 5 + [1] * 4) if two_graphs else None
    edge_index = EDGES[:, EDGES[0] // 5 == EDGES[1] // 5] if two_graphs else EDGES
    actions = torch.rand(6, N, 2, 3, generator=torch.Generator().manual_seed(3))
    got = critic(x, edge_index, actions, batch)
    want = reference_q(critic, x, edge_index, actions, batch)
    if batch is None:
        want = tuple(q[:, 0] for q in want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    target = torch.randn(got[0].shape, generator=torch.Generator().manual_seed(4))
    params = list(critic.parameters())
    loss = lambda q: ((q[0] - target) ** 2).mean() + ((q[1] - target) ** 2).mean()  # noqa: E731
    for g, w in zip(
        torch.autograd.grad(loss(got), params), torch.autograd.grad(loss(want), params), strict=True
    ):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)
    # One action [N, H, C] is the batch of one.
    single = critic(x, edge_index, actions[0], batch)
    torch.testing.assert_close(single[0], got[0][0].reshape(single[0].shape))


def _learner(shared: bool, seed: int = 0) -> SACDiscrete:
    config = SACConfig(batch_size=8, shared_critic_encoder=shared)
    return SACDiscrete.build(
        F, CHOICES, seed=seed, config=config, hidden=16, out=16, depth=2, heads=2
    )


def _buffer() -> ReplayBuffer:
    rng = np.random.default_rng(0)
    maps = np.stack([rng.integers(0, c, size=(40, N)) for c in CHOICES], -1)
    buffer = ReplayBuffer(100, N, len(CHOICES))
    buffer.add(maps, rng.normal(size=40), "gnn")
    return buffer


@pytest.mark.parametrize("shared", [False, True])
def test_update_critic_loss_equals_the_per_sample_reference(shared):
    """The learner's critic loss on a minibatch is the mean of the per-sample squared errors."""
    from torch_geometric.data import Data

    learner = _learner(shared)
    data = Data(x=graph(), edge_index=EDGES)
    buffer = _buffer()
    batch = buffer.sample(8, np.random.default_rng(1))
    state = learner.generator.get_state()
    critic = seeded_init(
        0, lambda: TwinQCritic(F, CHOICES, hidden=16, depth=2, heads=2, shared_encoder=shared)
    )
    critic.load_state_dict(learner.critic.state_dict())
    stats = learner.update(data, batch, buffer.reward_stats())

    generator = torch.Generator().manual_seed(0)
    generator.set_state(state)
    cfg = learner.config
    behaviour = noisy_one_hot(
        torch.as_tensor(batch["actions"]),
        learner.mask,
        cfg.action_noise_std,
        cfg.action_noise_clip,
        generator,
    )
    mean, std = buffer.reward_stats()
    target = (torch.as_tensor(batch["rewards"]) - mean) / std
    q1, q2 = reference_q(critic, data.x, data.edge_index, behaviour)
    want = ((q1[:, 0] - target) ** 2).mean() + ((q2[:, 0] - target) ** 2).mean()
    assert stats["critic_loss"] == pytest.approx(float(want), rel=1e-5)


def test_two_tower_checkpoint_loads_into_a_shared_encoder_learner():
    """A learner state from EGRL's two-tower critic (every checkpoint written before the
    shared encoder existed) restores into a learner built with the default layout."""
    from torch_geometric.data import Data

    old = _learner(shared=False)
    data, buffer = Data(x=graph(), edge_index=EDGES), _buffer()
    old.train_steps([(data, buffer)], 2, np.random.default_rng(0))
    state = copy.deepcopy(old.state_dict())  # as saved: no tensor shared with `old`

    restored = _learner(shared=True, seed=5)
    assert restored.critic.shared_encoder
    restored.load_state_dict(state)
    assert not restored.critic.shared_encoder
    assert not restored.config.shared_critic_encoder
    for key, value in old.critic.state_dict().items():
        torch.testing.assert_close(restored.critic.state_dict()[key], value, rtol=0, atol=0)
    # Both go on identically from the same minibatches.
    a = old.train_steps([(data, buffer)], 2, np.random.default_rng(9))
    b = restored.train_steps([(data, buffer)], 2, np.random.default_rng(9))
    assert a == b
