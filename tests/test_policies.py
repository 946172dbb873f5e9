"""Tests of the policies: Graph U-Net actor, twin-Q critic, Boltzmann chromosomes."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch_geometric.data import Batch, Data

from policies import (
    BoltzmannChromosome,
    GraphUNetActor,
    Policy,
    TwinQCritic,
    entropy,
    num_parameters,
    one_hot_maps,
    seeded_init,
)
from policies.categorical import sample_maps
from policies.graph_ops import square_adjacency, undirected_with_self_loops

F = 19
CHOICES = [3, 2]  # the second head has fewer choices: its last entry is masked


def make_graph(num_nodes: int, seed: int) -> Data:
    """A chain with a few random forward skip edges and log1p features of varied scale."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.arange(num_nodes - 1)
    edges = [torch.stack([src, src + 1])]
    if num_nodes > 2:
        a = torch.randint(0, num_nodes - 1, (num_nodes // 3,), generator=gen)
        b = torch.clamp(a + 2, max=num_nodes - 1)
        edges.append(torch.stack([a, b]))
    scale = 10 ** (7 * torch.rand(num_nodes, F, generator=gen))  # sizes from 1 to 1e7
    x = torch.log1p(torch.rand(num_nodes, F, generator=gen) * scale)
    return Data(x=x, edge_index=torch.cat(edges, dim=1))


def small_actor(seed: int = 0, **kwargs) -> GraphUNetActor:
    return seeded_init(seed, lambda: GraphUNetActor(F, CHOICES, hidden=32, out=32, **kwargs))


def small_critic(seed: int = 0) -> TwinQCritic:
    return seeded_init(seed, lambda: TwinQCritic(F, CHOICES, hidden=32, depth=2))


# ---------------------------------------------------------------- actor


@pytest.mark.parametrize("attention", ["gatv2", "gat"])
@pytest.mark.parametrize("num_nodes", [1, 7, 60])
def test_actor_shapes_and_masking(num_nodes, attention):
    actor = small_actor(attention=attention)
    graph = make_graph(num_nodes, seed=num_nodes)
    logits = actor(graph.x, graph.edge_index)
    assert logits.shape == (num_nodes, 2, 3)
    assert torch.isneginf(logits[:, 1, 2]).all()
    assert torch.isfinite(logits[:, 0, :]).all() and torch.isfinite(logits[:, 1, :2]).all()
    probs = actor.distribution(graph)
    assert probs.shape == (num_nodes, 2, 3)
    assert (probs[:, 1, 2] == 0).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(num_nodes, 2))


def test_actor_default_size_runs_on_400_nodes():
    torch.manual_seed(0)
    actor = GraphUNetActor(F, [3, 3])
    graph = make_graph(400, seed=4)
    with torch.no_grad():
        assert actor(graph.x, graph.edge_index).shape == (400, 2, 3)


def test_actor_on_batch_matches_each_graph_alone():
    actor = small_actor()
    graphs = [make_graph(n, seed=n) for n in (9, 1, 23)]
    batch = Batch.from_data_list(graphs)
    together = actor.distribution(batch)
    assert together.shape == (33, 2, 3)
    alone = torch.cat([actor.distribution(g) for g in graphs])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)


def pyg_actor_forward(actor: GraphUNetActor, x, edge_index, batch=None) -> torch.Tensor:
    """The Graph U-Net through PyG's own ``GATv2Conv.forward`` and ``TopKPooling.forward``
    with the actor's parameters: the reference the lean forward must match."""
    edges = undirected_with_self_loops(edge_index, x.size(0))
    batch = torch.zeros(x.size(0), dtype=torch.long) if batch is None else batch
    h = actor.act_fn(actor.embed(x))
    h = h + actor.act_fn(actor.down[0](h, edges))
    skips, levels, perms = [], [], []
    for pool, conv in zip(actor.pools, actor.down[1:]):
        skips.append(h)
        levels.append(edges)
        edges = square_adjacency(edges, h.size(0))
        h, edges, _, batch, perm, _ = pool(h, edges, batch=batch)
        h = h + actor.act_fn(conv(h, edges))
        perms.append(perm)
    for conv, skip, level, perm in zip(
        actor.up, reversed(skips), reversed(levels), reversed(perms)
    ):
        h = skip.index_add(0, perm, h)
        h = h + actor.act_fn(conv(h, level))
    h = actor.act_fn(actor.project(h))
    width = actor.mask.size(1)
    logits = torch.stack(
        [torch.nn.functional.pad(head(h), (0, width - head.out_features)) for head in actor.heads],
        dim=1,
    )
    return logits.masked_fill(~actor.mask, float("-inf"))


@pytest.mark.parametrize("attention,pool_ratio", [("gatv2", 0.5), ("gat", 0.5), ("gatv2", 1.0)])
def test_actor_matches_pyg_modules(attention, pool_ratio):
    """The lean forward (own attention and gPool on the modules' parameters) computes what
    PyG's modules compute, values and gradients, on one graph and on a batch (a pool ratio
    of 1 keeps one node per graph, as PyG reads it)."""
    actor = small_actor(attention=attention, pool_ratio=pool_ratio)
    for n in (1, 7, 60):
        graph = make_graph(n, seed=n)
        torch.testing.assert_close(
            actor(graph.x, graph.edge_index),
            pyg_actor_forward(actor, graph.x, graph.edge_index),
            atol=1e-5,
            rtol=1e-4,
        )
    batch = Batch.from_data_list([make_graph(n, seed=n) for n in (9, 1, 23)])
    ours = actor(batch.x, batch.edge_index, batch.batch)
    ref = pyg_actor_forward(actor, batch.x, batch.edge_index, batch.batch)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-4)
    weights = torch.randn(ours.shape).masked_fill(~actor.mask, 0.0)
    grads = []
    for logits in (ours, ref):
        actor.zero_grad()
        logits.masked_fill(~actor.mask, 0.0).mul(weights).sum().backward()
        grads.append({k: p.grad.clone() for k, p in actor.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grad, grads[1][name], atol=1e-4, rtol=1e-3, msg=name)


def test_actor_is_deterministic_and_depends_on_the_graph():
    actor = small_actor()
    graph = make_graph(30, seed=1)
    first = actor(graph.x, graph.edge_index)
    torch.testing.assert_close(actor(graph.x, graph.edge_index), first, atol=0, rtol=0)
    other = make_graph(30, seed=2)
    assert not torch.allclose(actor(other.x, other.edge_index), first)


def test_greedy_act_is_argmax():
    actor = small_actor()
    graph = make_graph(60, seed=3)
    maps = actor.act(graph, num_samples=2, generator=None, greedy=True)
    assert maps.shape == (2, 60, 2) and maps.dtype == torch.long
    expected = actor.distribution(graph).argmax(-1)
    assert torch.equal(maps[0], expected) and torch.equal(maps[1], expected)


def test_seeded_sampling_is_reproducible_and_respects_the_mask():
    actor = small_actor()
    graph = make_graph(60, seed=5)
    a = actor.act(graph, 8, torch.Generator().manual_seed(11))
    b = actor.act(graph, 8, torch.Generator().manual_seed(11))
    c = actor.act(graph, 8, torch.Generator().manual_seed(12))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert a[..., 1].max() <= 1 and a.min() >= 0 and a.max() <= 2


def test_sampling_needs_a_generator():
    actor = small_actor()
    graph = make_graph(7, seed=0)
    with pytest.raises(ValueError, match="Generator"):
        actor.act(graph, 1, None)
    with pytest.raises(ValueError, match="Generator"):
        actor.act(graph, 1, None, greedy=True, noise_std=0.5)


def test_noisy_greedy_rollouts_explore():
    actor = small_actor()
    graph = make_graph(60, seed=6)
    plain = actor.act(graph, 1, None, greedy=True)[0]
    noisy = actor.act(graph, 4, torch.Generator().manual_seed(0), greedy=True, noise_std=5.0)
    assert (noisy != plain).any()
    assert noisy[..., 1].max() <= 1  # noise never unmasks a missing choice


def test_rollout_noise_is_on_the_probabilities_and_needs_the_greedy_map():
    # A saturated policy: logit noise of any moderate size would never change a decision,
    # probability noise of std 0.3 flips about 2% of them (docs/learner.md).
    logits = torch.tensor([[[20.0, 0.0, 0.0], [0.0, 20.0, float("-inf")]]]).expand(500, 2, 3)
    gen = torch.Generator().manual_seed(0)
    noisy = sample_maps(logits, 8, gen, greedy=True, noise_std=0.3)
    greedy = torch.tensor([0, 1])
    flipped = (noisy != greedy).float().mean().item()
    assert 0.005 < flipped < 0.05
    assert noisy[..., 1].max() <= 1  # never the missing choice
    no_noise = torch.Generator().manual_seed(0)
    assert (sample_maps(logits, 8, no_noise, greedy=True) == greedy).all()
    with pytest.raises(ValueError, match="greedy=True"):
        sample_maps(logits, 1, gen, greedy=False, noise_std=0.3)


@pytest.mark.parametrize("greedy, noise_std", [(False, 0.0), (True, 0.0), (True, 0.5)])
def test_act_with_probs_gives_the_same_maps_and_the_distribution(greedy, noise_std):
    graph = make_graph(20, seed=8)
    pop = BoltzmannChromosome.random(2, 20, CHOICES, torch.Generator().manual_seed(0))
    for policy in (small_actor(), pop.view(1)):
        maps = policy.act(graph, 3, torch.Generator().manual_seed(4), greedy, noise_std)
        again, probs = policy.act_with_probs(
            graph, 3, torch.Generator().manual_seed(4), greedy, noise_std
        )
        assert torch.equal(maps, again)
        torch.testing.assert_close(probs, policy.distribution(graph))
        assert probs.shape == (20, 2, 3) and (probs[:, 1, 2] == 0).all()


def test_gradients_reach_every_actor_parameter():
    actor = small_actor()
    graph = make_graph(60, seed=7)
    target = torch.Generator().manual_seed(0)
    weights = torch.rand(60, 2, 3, generator=target)
    probs = actor.distribution(graph)
    loss = (probs * weights).sum() + entropy(probs).sum()
    loss.backward()
    for name, param in actor.named_parameters():
        assert param.grad is not None, name
        assert param.grad.abs().sum() > 0, name


def test_log_distribution_is_finite_and_matches_probs():
    actor = small_actor()
    graph = make_graph(20, seed=15)
    logp = actor.log_distribution(graph)
    probs = actor.distribution(graph)
    assert torch.isfinite(logp).all()
    torch.testing.assert_close(logp.exp(), probs)
    sac_like = (probs * (0.05 * logp - torch.rand(20, 2, 3))).sum()
    sac_like.backward()
    assert all(torch.isfinite(p.grad).all() for p in actor.parameters())


def test_bad_configurations_are_named():
    with pytest.raises(ValueError, match="attention"):
        small_actor(attention="gcn")
    with pytest.raises(ValueError, match="multiple of heads"):
        GraphUNetActor(F, CHOICES, hidden=30, heads=4)
    with pytest.raises(ValueError, match="num_choices"):
        GraphUNetActor(F, [3, 0])


def test_actor_rejects_bad_graphs():
    actor = small_actor()
    graph = make_graph(7, seed=0)
    with pytest.raises(ValueError, match="node features"):
        actor(graph.x[:, :5], graph.edge_index)
    bad = graph.edge_index.clone()
    bad[1, 2] = 7
    with pytest.raises(ValueError, match="edge 2"):
        actor(graph.x, bad)


def test_square_adjacency_matches_dense_product():
    graph = make_graph(20, seed=8)
    edges = undirected_with_self_loops(graph.edge_index, 20)
    dense = torch.zeros(20, 20)
    dense[edges[0], edges[1]] = 1
    expected = (dense @ dense > 0).nonzero().t()
    assert torch.equal(square_adjacency(edges, 20), expected)


# ---------------------------------------------------------------- critic


def test_critic_shapes_with_and_without_sample_dim():
    critic = small_critic()
    graph = make_graph(12, seed=9)
    gen = torch.Generator().manual_seed(0)
    actions = one_hot_maps(torch.randint(0, 2, (5, 12, 2), generator=gen), CHOICES)
    q1, q2 = critic(graph.x, graph.edge_index, actions[0])
    assert q1.shape == q2.shape == (1,)
    q1, q2 = critic(graph.x, graph.edge_index, actions)
    assert q1.shape == q2.shape == (5,)
    assert not torch.allclose(q1, q2)  # independent heads

    batch = Batch.from_data_list([make_graph(12, seed=9), make_graph(4, seed=10)])
    batch_actions = torch.cat([actions, actions[:, :4]], dim=1)
    b1, b2 = critic(batch.x, batch.edge_index, batch_actions, batch.batch)
    assert b1.shape == b2.shape == (5, 2)
    torch.testing.assert_close(b1[:, 0], q1, atol=1e-5, rtol=1e-4)
    s1, _ = critic(batch.x, batch.edge_index, batch_actions[0], batch.batch)
    assert s1.shape == (2,)


def test_critic_sample_dim_equals_one_call_per_action():
    critic = small_critic()
    graph = make_graph(15, seed=11)
    gen = torch.Generator().manual_seed(1)
    actions = torch.rand(4, 15, 2, 3, generator=gen)  # soft actions are allowed
    q1, q2 = critic(graph.x, graph.edge_index, actions)
    for s in range(4):
        one1, one2 = critic(graph.x, graph.edge_index, actions[s])
        torch.testing.assert_close(one1[0], q1[s], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(one2[0], q2[s], atol=1e-5, rtol=1e-4)
    assert q1.std() > 0  # the value depends on the action


def test_critic_ignores_missing_choices_and_checks_shapes():
    critic = small_critic()
    graph = make_graph(6, seed=12)
    actions = torch.rand(6, 2, 3)
    poked = actions.clone()
    poked[:, 1, 2] += 10.0
    torch.testing.assert_close(
        critic(graph.x, graph.edge_index, actions), critic(graph.x, graph.edge_index, poked)
    )
    with pytest.raises(ValueError, match="actions"):
        critic(graph.x, graph.edge_index, actions[:5])


def test_critic_gradients_reach_both_towers():
    critic = small_critic()
    graph = make_graph(10, seed=13)
    actions = one_hot_maps(torch.zeros(3, 10, 2, dtype=torch.long), CHOICES)
    q1, q2 = critic(graph.x, graph.edge_index, actions)
    (q1.square().mean() + q2.square().mean()).backward()
    for name, param in critic.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert num_parameters(critic.q1) == num_parameters(critic.q2)


# ---------------------------------------------------------------- Boltzmann


def test_boltzmann_sampling_follows_the_softmax():
    units = 4000
    prior = torch.tensor([[1.0, 0.0, -1.0], [0.5, -0.5, 9.0]])  # head 1's third entry is masked
    temperature = torch.tensor([0.5, 2.0])
    pop = BoltzmannChromosome(
        prior.expand(1, units, 2, 3).clone(), temperature.expand(1, units, 2).clone(), CHOICES
    )
    maps = pop.sample(torch.Generator().manual_seed(0))
    assert maps.shape == (1, units, 2)
    freq = torch.stack([torch.bincount(maps[0, :, h], minlength=3) for h in range(2)]) / units
    expected = torch.softmax(
        (prior / temperature[:, None]).masked_fill(
            torch.tensor([[0, 0, 0], [0, 0, 1]]).bool(), -1e9
        ),
        dim=-1,
    )
    torch.testing.assert_close(freq, expected, atol=0.03, rtol=0)
    torch.testing.assert_close(pop.probs()[0, 0], expected)


def test_boltzmann_random_is_reproducible_and_sample_has_one_map_per_chromosome():
    a = BoltzmannChromosome.random(5, 30, CHOICES, torch.Generator().manual_seed(3), 1.5)
    b = BoltzmannChromosome.random(5, 30, CHOICES, torch.Generator().manual_seed(3), 1.5)
    assert torch.equal(a.prior, b.prior) and (a.temperature == 1.5).all()
    maps = a.sample(torch.Generator().manual_seed(0))
    assert maps.shape == (5, 30, 2) and maps[..., 1].max() <= 1
    assert torch.equal(maps, b.sample(torch.Generator().manual_seed(0)))
    assert torch.equal(a.greedy(), a.probs().argmax(-1))


def test_seed_from_gnn_makes_a_cold_chromosome_follow_the_gnn():
    actor = small_actor()
    graph = make_graph(40, seed=14)
    with torch.no_grad():
        probs = actor.distribution(graph)
    pop = BoltzmannChromosome.random(4, 40, CHOICES, torch.Generator().manual_seed(0))
    before = pop.prior.clone()
    pop.seed_from(2, probs, seed_temperature=0.01)
    assert torch.equal(pop.greedy()[2], probs.argmax(-1))
    assert torch.equal(pop.sample(torch.Generator().manual_seed(1))[2], probs.argmax(-1))
    assert torch.equal(pop.prior[[0, 1, 3]], before[[0, 1, 3]])  # others untouched
    pop.seed_from(torch.tensor([0, 3]), torch.stack([probs, probs]))  # default T = 1
    torch.testing.assert_close(pop.probs()[0], probs, atol=1e-5, rtol=0)
    assert torch.equal(pop.greedy()[3], probs.argmax(-1))


def test_temperature_is_clamped_on_read():
    pop = BoltzmannChromosome.random(2, 5, CHOICES, torch.Generator().manual_seed(0))
    pop.temperature[0] = -3.0
    assert torch.isfinite(pop.probs()[..., :2]).all()
    assert (pop.clamped_temperature() >= pop.t_min).all()
    pop.clamp_()
    assert (pop.temperature[0] == pop.t_min).all()


def test_boltzmann_state_dict_round_trip(tmp_path):
    pop = BoltzmannChromosome.random(3, 8, CHOICES, torch.Generator().manual_seed(0), t_max=4.0)
    path = tmp_path / "boltzmann.safetensors"
    save_file(pop.state_dict(), str(path))
    other = BoltzmannChromosome.random(1, 2, [4], torch.Generator().manual_seed(1))
    other.load_state_dict(load_file(str(path)))
    assert torch.equal(other.prior, pop.prior) and torch.equal(other.temperature, pop.temperature)
    assert other.num_choices == CHOICES and other.t_max == 4.0
    gen = torch.Generator().manual_seed(5)
    assert torch.equal(other.sample(gen), pop.sample(torch.Generator().manual_seed(5)))


def test_chromosome_view_is_a_policy():
    pop = BoltzmannChromosome.random(3, 7, CHOICES, torch.Generator().manual_seed(0))
    view = pop.view(1)
    graph = make_graph(7, seed=0)
    assert isinstance(view, Policy) and isinstance(small_actor(), Policy)
    torch.testing.assert_close(view.distribution(graph), pop.probs()[1])
    assert torch.equal(view.act(graph, 2, None, greedy=True)[0], pop.greedy()[1])
    assert view.act(graph, 6, torch.Generator().manual_seed(0)).shape == (6, 7, 2)
    with pytest.raises(ValueError, match="7 units"):
        view.act(make_graph(8, seed=0), 1, None, greedy=True)
    with pytest.raises(IndexError):
        pop.view(3)


def test_subset_copies_chosen_chromosomes():
    pop = BoltzmannChromosome.random(4, 6, CHOICES, torch.Generator().manual_seed(0))
    sub = pop.subset([3, 1])
    assert torch.equal(sub.prior, pop.prior[[3, 1]])
    sub.prior += 1.0
    assert not torch.equal(sub.prior, pop.prior[[3, 1]])
