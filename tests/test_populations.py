"""Tests of the mixed EA population: operators, one generation, migration, state."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from egrl.checkpoint import load_state, save_state
from policies import seeded_init
from policies.graph_unet import GraphUNetActor
from populations import EvolutionParams, MixedPopulation, boltzmann_ops, gnn_ops, selection

FEATURES = 5
UNITS = 12
CHOICES = [3, 2]


def make_graph(seed: int = 0) -> Data:
    gen = torch.Generator().manual_seed(seed)
    src = torch.arange(UNITS - 1)
    skip = torch.arange(UNITS - 3)
    edges = torch.stack([torch.cat([src, skip]), torch.cat([src + 1, skip + 3])])
    return Data(x=torch.randn(UNITS, FEATURES, generator=gen), edge_index=edges)


def make_gnn() -> GraphUNetActor:
    return GraphUNetActor(FEATURES, CHOICES, hidden=8, out=8, depth=2, heads=2)


def seeded_gnn(seed: int) -> GraphUNetActor:
    """A GNN whose initial weights depend on ``seed`` only (the learner's stand-in)."""
    return seeded_init(seed, make_gnn)


def make_population(seed: int = 0, size: int = 10, **options) -> MixedPopulation:
    return MixedPopulation(
        make_gnn,
        UNITS,
        CHOICES,
        rng=np.random.default_rng(seed),
        generator=torch.Generator().manual_seed(seed),
        size=size,
        boltzmann_fraction=0.3,
        **options,
    )


def gen(seed: int = 1) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def weights(pop: MixedPopulation, index: int) -> dict[str, torch.Tensor]:
    return gnn_ops.snapshot(pop.gnn(index))


def rows_from_two(child: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> bool:
    """Every row of ``child`` equals the same row of ``first`` or of ``second``."""
    dims = tuple(range(1, child.dim()))
    same_a = (child == first).all(dim=dims) if dims else child == first
    same_b = (child == second).all(dim=dims) if dims else child == second
    return bool((same_a | same_b).all())


def one_cut(child: torch.Tensor, first: torch.Tensor, second: torch.Tensor) -> int | None:
    """The cut ``c`` with ``child[:c] == first[:c]`` and ``child[c:] == second[c:]``, if any."""
    for cut in range(1, child.size(0)):
        if torch.equal(child[:cut], first[:cut]) and torch.equal(child[cut:], second[cut:]):
            return cut
    return None


# --------------------------------------------------------------------------- layout


def test_layout_and_act_shapes():
    pop = make_population()
    assert pop.size == 10
    assert pop.kinds.tolist() == ["gnn"] * 7 + ["boltzmann"] * 3
    maps, kinds = pop.act(make_graph(), gen())
    assert maps.shape == (10, UNITS, len(CHOICES)) and maps.dtype == torch.long
    assert kinds.tolist() == pop.kinds.tolist()
    for h, c in enumerate(CHOICES):
        assert int(maps[..., h].min()) >= 0 and int(maps[..., h].max()) < c
    assert len(set(pop.ids.tolist())) == 10


@pytest.mark.parametrize("gnn_greedy", [True, False])
def test_act_with_probs_gives_the_same_maps_and_every_members_distribution(gnn_greedy):
    pop = make_population(gnn_greedy=gnn_greedy)
    graph = make_graph()
    maps, kinds = pop.act(graph, gen(4))
    again, kinds_again, probs = pop.act_with_probs(graph, gen(4))
    assert torch.equal(maps, again) and kinds.tolist() == kinds_again.tolist()
    assert probs.shape == (10, UNITS, len(CHOICES), max(CHOICES))
    with torch.no_grad():
        for i in range(pop.size):
            torch.testing.assert_close(probs[i], pop.policy(i).distribution(graph))
    assert (probs[:, :, 1, 2] == 0).all()  # zeros past the second head's two choices
    torch.testing.assert_close(probs.sum(-1), torch.ones(10, UNITS, len(CHOICES)))


def test_gnn_members_act_greedily_by_default():
    pop = make_population()
    graph = make_graph()
    maps, _ = pop.act(graph, gen())
    for i in pop.indices("gnn"):
        with torch.no_grad():
            expected = pop.gnn(int(i)).distribution(graph).argmax(-1)
        assert torch.equal(maps[i], expected)


def test_gnn_members_differ_at_start():
    pop = make_population()
    a, b = weights(pop, 0), weights(pop, 1)
    assert any(not torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- operators


def test_gnn_crossover_rows_come_from_the_two_parents_at_one_cut():
    pop = make_population()
    base, mate = weights(pop, 0), weights(pop, 1)
    child = gnn_ops.crossover_rows(base, mate, np.random.default_rng(3))
    exchanged = 0
    for name, value in child.items():
        if value.dim() == 0 or value.size(0) < 2:
            assert torch.equal(value, base[name])
            continue
        cut = one_cut(value, base[name], mate[name])
        assert cut is not None, name
        exchanged += int(not torch.equal(value, base[name]))
    assert exchanged > 0


def test_chromosome_crossover_is_single_point_over_units():
    gen_ = gen(4)
    shape = (5, UNITS, 2, 3)
    bp, mp = torch.rand(shape, generator=gen_), torch.rand(shape, generator=gen_)
    bt, mt = torch.rand(shape[:3], generator=gen_), torch.rand(shape[:3], generator=gen_)
    prior, temp = boltzmann_ops.crossover_nodes(bp, mp, bt, mt, np.random.default_rng(0))
    for k in range(5):
        cut = one_cut(prior[k], bp[k], mp[k])
        assert cut is not None and 1 <= cut < UNITS
        assert torch.equal(temp[k, :cut], bt[k, :cut]) and torch.equal(temp[k, cut:], mt[k, cut:])


def test_gnn_mutation_touches_the_expected_fraction():
    net = GraphUNetActor(FEATURES, CHOICES, hidden=32, out=32, depth=2, heads=2)
    params = EvolutionParams(mutation_frac=0.2, super_mutation_prob=0.0, reset_prob=0.0)
    before = gnn_ops.snapshot(net)
    drawn = gnn_ops.mutate_weights(net, params, gen(5))
    after = gnn_ops.snapshot(net)
    changed = total = 0
    for name, p in net.named_parameters():
        diff = after[name] != before[name]
        if p.dim() >= 2:
            nonzero = before[name] != 0
            changed += int(diff[nonzero].sum())
            total += int(nonzero.sum())
        else:  # vectors are drawn 25x less often (0.2 * 0.04)
            assert int(diff.sum()) <= max(3, 0.05 * diff.numel())
    assert total > 5000
    assert abs(changed / total - 0.2) < 0.02
    assert drawn >= changed
    # the mutation is relative: a changed weight moved by about 10% of its size
    for name, p in net.named_parameters():
        if p.dim() >= 2:
            moved = after[name] != before[name]
            ratio = ((after[name] - before[name])[moved] / before[name][moved]).abs()
            assert float(ratio.median()) < 0.2


def test_gnn_reset_redraws_and_limit_clamps():
    net = make_gnn()
    params = EvolutionParams(
        mutation_frac=1.0, vector_mutation_scale=1.0, super_mutation_prob=0.0, reset_prob=1.0,
        reset_std=5.0, weight_limit=0.5,
    )  # fmt: skip
    gnn_ops.mutate_weights(net, params, gen(6))
    values = torch.cat([p.detach().flatten() for p in net.parameters()])
    assert float(values.abs().max()) == pytest.approx(0.5)
    assert float((values.abs() == 0.5).float().mean()) > 0.8  # N(0, 5) mostly beyond 0.5


def test_chromosome_mutation_moves_priors_and_keeps_temperatures_positive():
    valid = boltzmann_ops.valid_choices(CHOICES)
    gen_ = gen(7)
    prior = torch.randn(4, UNITS, 2, 3, generator=gen_)
    temp = torch.full((4, UNITS, 2), 0.2)
    params = EvolutionParams()
    new_prior, new_temp = boltzmann_ops.mutate_chromosomes(prior, temp, gen_, valid, params)
    assert bool((new_prior != prior)[..., valid].all())
    assert torch.equal(new_prior[..., ~valid], prior[..., ~valid])
    assert float((new_prior - prior)[..., valid].std()) == pytest.approx(0.1, rel=0.2)
    assert float((new_temp / temp).mean()) == pytest.approx(0.95, abs=0.03)
    wild = EvolutionParams(temperature_mutation_mean=0.5, temperature_mutation_std=5.0)
    _, wild_temp = boltzmann_ops.mutate_chromosomes(prior, temp, gen_, valid, wild)
    assert float(wild_temp.min()) == pytest.approx(0.1) and float(wild_temp.max()) <= 10.0
    assert bool((wild_temp == 0.1).any())  # negative factors were clipped, not kept


def test_tournament_uses_deap_without_touching_global_random_state():
    random.seed(123)
    expected = random.random()
    random.seed(123)
    fitness = np.arange(10.0)
    winners = selection.tournament(fitness, np.arange(10), 50, 3, np.random.default_rng(0))
    assert random.random() == expected
    again = selection.tournament(fitness, np.arange(10), 50, 3, np.random.default_rng(0))
    assert np.array_equal(winners, again)
    # a tournament of 3 never picks the two worst of ten members... unless all three were worse
    assert winners.mean() > 5.5
    only = selection.tournament(fitness, np.array([2, 7]), 20, 3, np.random.default_rng(1))
    assert set(only.tolist()) <= {2, 7}


# --------------------------------------------------------------------------- one generation


def evolve_once(pop: MixedPopulation, fitness: np.ndarray, graph: Data):
    before_gnn = {int(i): weights(pop, int(i)) for i in pop.indices("gnn")}
    chromo = pop.chromosomes
    before_prior, before_temp = chromo.prior.clone(), chromo.temperature.clone()
    pop.set_fitness(fitness)
    report = pop.evolve(graph, gen(9))
    return report, before_gnn, before_prior, before_temp


def test_elites_are_the_best_and_untouched():
    pop = make_population(mutation_prob=1.0, crossover_prob=1.0)
    graph = make_graph()
    fitness = np.array([0.5, 3.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 2.0, 0.8])
    ids_before = pop.ids.copy()
    report, before_gnn, before_prior, before_temp = evolve_once(pop, fitness, graph)
    assert report.elites.tolist() == [1, 8]
    assert sorted(report.children.tolist() + report.elites.tolist()) == list(range(10))
    assert report.mutated.all()
    assert pop.size == 10 and pop.kinds.tolist() == ["gnn"] * 7 + ["boltzmann"] * 3
    after = weights(pop, 1)
    assert all(torch.equal(after[k], before_gnn[1][k]) for k in after)
    row = pop.chromosome_row(8)
    assert torch.equal(pop.chromosomes.prior[row], before_prior[row])
    assert torch.equal(pop.chromosomes.temperature[row], before_temp[row])
    assert pop.ids[[1, 8]].tolist() == ids_before[[1, 8]].tolist()
    assert set(pop.ids[report.children].tolist()).isdisjoint(ids_before.tolist())
    assert pop.evaluated.tolist() == [i in (1, 8) for i in range(10)]
    assert pop.champion() == (1, "gnn")
    for child in report.children:  # every mutated GNN child differs from its parent
        if pop.kinds[child] == "gnn":
            now = weights(pop, int(child))
            base = before_gnn[int(report.bases[report.children == child][0])]
            assert any(not torch.equal(now[k], base[k]) for k in now)


def test_crossover_keeps_encodings_apart():
    pop = make_population(crossover_prob=1.0, mutation_prob=0.0, seed_prob=0.0)
    graph = make_graph()
    fitness = np.array([5.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 4.0, 0.8])  # elites 0 (gnn), 8
    report, before_gnn, before_prior, before_temp = evolve_once(pop, fitness, graph)
    kinds = pop.kinds
    assert (kinds[report.bases] == kinds[report.children]).all()
    assert report.crossed.any()
    assert (kinds[report.mates[report.crossed]] == kinds[report.children[report.crossed]]).all()
    for child, base, mate, crossed in zip(
        report.children, report.bases, report.mates, report.crossed
    ):
        if kinds[child] == "gnn":
            now = weights(pop, int(child))
            parent_a = before_gnn[int(base)]
            parent_b = before_gnn[int(mate)] if crossed else parent_a
            for k in now:
                if crossed:
                    assert rows_from_two(now[k], parent_a[k], parent_b[k]), k
                else:
                    assert torch.equal(now[k], parent_a[k]), k
        else:
            row, b = pop.chromosome_row(int(child)), pop.chromosome_row(int(base))
            m = pop.chromosome_row(int(mate)) if kinds[mate] == "boltzmann" else b
            prior, temp = pop.chromosomes.prior[row], pop.chromosomes.temperature[row]
            assert rows_from_two(prior, before_prior[b], before_prior[m])
            assert rows_from_two(temp, before_temp[b], before_temp[m])


def test_seeding_gives_a_cold_chromosome_the_gnn_argmax():
    graph = make_graph()
    pop = make_population(size=6, crossover_prob=0.0, mutation_prob=0.0, seed_prob=1.0)
    # members 0-3 gnn, 4-5 boltzmann; the two GNN elites are every chromosome's mate
    fitness = np.array([9.0, 8.0, 0.1, 0.2, 0.3, 0.4])
    pop.set_fitness(fitness)
    report = pop.evolve(graph, gen(2))
    chromo = report.children[pop.kinds[report.children] == "boltzmann"]
    assert report.seeded[pop.kinds[report.children] == "boltzmann"].all() and chromo.size == 2
    pop.chromosomes.temperature.fill_(0.1)
    greedy = pop.chromosomes.greedy()
    for child in chromo:
        mate = int(report.mates[report.children == child][0])
        with torch.no_grad():
            expected = pop.gnn(mate).distribution(graph).argmax(-1)
        assert torch.equal(greedy[pop.chromosome_row(int(child))], expected)


def test_no_seeding_when_seed_prob_is_zero():
    graph = make_graph()
    pop = make_population(size=6, crossover_prob=0.0, mutation_prob=0.0, seed_prob=0.0)
    pop.set_fitness(np.array([9.0, 8.0, 0.1, 0.2, 0.3, 0.4]))
    before = pop.chromosomes.prior.clone()
    report = pop.evolve(graph, gen(2))
    assert not report.seeded.any()
    # each chromosome child is an unchanged copy of a chromosome base
    for child, base in zip(report.children, report.bases):
        if pop.kinds[child] == "boltzmann":
            row, b = pop.chromosome_row(int(child)), pop.chromosome_row(int(base))
            assert torch.equal(pop.chromosomes.prior[row], before[b])


def test_evolve_needs_fitness_of_every_member():
    pop = make_population()
    with pytest.raises(RuntimeError, match=r"missing: \[0, 1"):
        pop.evolve(make_graph(), gen())
    with pytest.raises(ValueError, match=r"member\(s\) \[3, 5\]"):
        pop.set_fitness(np.array([1.0, 2, 3, np.nan, 5, np.inf, 7, 8, 9, 10]))
    pop.set_fitness(np.array([1.0, 2, 3, -np.inf, 5, 6, 7, 8, 9, 10]))  # -inf: not evaluated
    report = pop.evolve(make_graph(), gen())
    assert report.elites.tolist() == [9, 8] and 3 in report.children
    with pytest.raises(RuntimeError, match="missing"):
        pop.evolve(make_graph(), gen())


def test_swapped_operator_is_used():
    pop = make_population(crossover_prob=1.0, mutation_prob=0.0)
    calls = []

    def mate_first(base, mate, rng):
        calls.append(1)
        return base

    pop.toolbox.register("mate_gnn", mate_first)
    pop.set_fitness(np.array([5.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 4.0, 0.8]))
    report = pop.evolve(make_graph(), gen())
    gnn_crossed = report.crossed & (pop.kinds[report.children] == "gnn")
    assert len(calls) == int(gnn_crossed.sum()) > 0


# --------------------------------------------------------------------------- migration


def test_migration_replaces_the_weakest_gnn():
    pop = make_population()
    actor = make_gnn()
    fitness = np.array([0.5, 0.6, 0.7, 0.05, 0.9, 1.0, 1.1, 0.0, 0.01, 0.02])  # 7-9: chromosomes
    pop.set_fitness(fitness)
    old_id = pop.ids[3]
    index = pop.migrate(actor)
    assert index == 3
    mine, theirs = weights(pop, 3), gnn_ops.snapshot(actor)
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert pop.ids[3] != old_id and not pop.evaluated[3] and np.isnan(pop.fitness[3])
    assert pop.champion() == (6, "gnn")


def test_a_second_migration_replaces_the_unevaluated_migrant():
    pop = make_population(size=4, mutation_prob=0.0)  # 3 gnn + 1 boltzmann, 2 elites
    pop.set_fitness(np.array([1.0, -2.0, 5.0, 0.0]))
    report = pop.evolve(make_graph(), gen())
    assert report.elites.tolist() == [2, 0]
    first, second = make_gnn(), make_gnn()
    assert pop.migrate(first) == 1
    assert pop.migrate(second) == 1  # the first migrant was never evaluated
    mine, theirs = weights(pop, 1), gnn_ops.snapshot(second)
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_a_migrant_placed_before_evolve_survives_the_generation():
    graph = make_graph()
    pop = make_population(mutation_prob=1.0, crossover_prob=1.0)
    pop.set_fitness(np.array([0.5, 0.6, 0.7, 0.05, 0.9, 1.0, 1.1, 0.0, 0.01, 0.02]))
    actor = seeded_gnn(1)
    assert pop.migrate(actor) == 3
    report = pop.evolve(graph, gen())
    assert 3 not in report.children and 3 not in report.elites and 3 not in report.bases
    assert report.children.size == 10 - 2 - 1
    mine, theirs = weights(pop, 3), gnn_ops.snapshot(actor)
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert pop.migrants[3] and not pop.evaluated[3]
    pop.set_fitness(np.zeros(10))
    assert not pop.migrants.any() and pop.evaluated.all()


def check_inherited_descent(pop: MixedPopulation, before: np.ndarray, report) -> None:
    """Every child carries its base's flags, its mate's when mixed in, and seeding if seeded."""
    for child, base, mate, crossed, seeded in zip(
        report.children, report.bases, report.mates, report.crossed, report.seeded
    ):
        expected = int(before[base]) | (int(before[mate]) if crossed or seeded else 0)
        expected |= 2 if seeded else 0
        assert int(pop.descent[child]) == expected


def test_descent_follows_migrants_and_seeded_chromosomes_through_generations():
    graph = make_graph()
    pop = make_population(mutation_prob=0.0, crossover_prob=1.0, seed_prob=1.0)
    assert [pop.descent_label(i) for i in range(pop.size)] == ["none"] * pop.size
    pop.set_fitness(np.array([0.5, 0.6, 0.7, 0.05, 0.9, 1.0, 1.1, 0.0, 0.01, 0.02]))
    migrant = pop.migrate(seeded_gnn(1))
    assert pop.descent_label(migrant) == "learner"
    for generation in range(3):
        before = pop.descent.copy()
        report = pop.evolve(graph, gen(generation))
        check_inherited_descent(pop, before, report)
        assert (pop.descent[report.elites] == before[report.elites]).all()
        pop.set_fitness(np.where(pop.descent & 1, 1.0, 0.0) + np.linspace(0, 0.1, pop.size))
    assert report.seeded.any()  # seed_prob=1: chromosome children with a GNN mate
    labels = {pop.descent_label(i) for i in range(pop.size)}
    assert "learner" in labels or "learner+seeding" in labels
    assert labels & {"seeding", "learner+seeding"}


def test_migration_into_a_weakest_chromosome_seeds_it():
    graph = make_graph()
    pop = make_population(migration_target="any")
    actor = make_gnn()
    pop.set_fitness(np.array([0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 0.3, -1.0, 0.2]))
    with pytest.raises(ValueError, match="needs the graph"):
        pop.migrate(actor)
    assert pop.migrate(actor, graph) == 8
    pop.chromosomes.temperature.fill_(0.1)
    with torch.no_grad():
        expected = actor.distribution(graph).argmax(-1)
    assert torch.equal(pop.chromosomes.greedy()[pop.chromosome_row(8)], expected)


# --------------------------------------------------------------------------- determinism, state


def run_generations(pop: MixedPopulation, graph: Data, generations: int) -> list[torch.Tensor]:
    torch_gen = gen(11)
    maps_seen = []
    for g in range(generations):
        maps, _ = pop.act(graph, torch_gen)
        maps_seen.append(maps)
        fitness = (maps == 1).float().mean(dim=(1, 2)).numpy() + 0.01 * g
        pop.set_fitness(fitness)
        pop.evolve(graph, torch_gen)
        pop.migrate(seeded_gnn(100 + g))
    return maps_seen


def test_same_seeds_same_run():
    graph = make_graph()
    a = run_generations(make_population(seed=5), graph, 3)
    b = run_generations(make_population(seed=5), graph, 3)
    c = run_generations(make_population(seed=6), graph, 3)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))


def test_state_round_trip_through_a_checkpoint(tmp_path):
    graph = make_graph()
    pop = make_population(seed=3)
    run_generations(pop, graph, 2)
    save_state(pop.state_dict(), tmp_path / "pop")
    other = make_population(seed=99)
    other.load_state_dict(load_state(tmp_path / "pop"))
    assert np.array_equal(other.ids, pop.ids)
    assert np.array_equal(other.evaluated, pop.evaluated)
    assert np.array_equal(other.fitness, pop.fitness, equal_nan=True)
    assert np.array_equal(other.descent, pop.descent)
    assert other.params == pop.params
    for i in pop.indices("gnn"):
        mine, theirs = weights(pop, int(i)), weights(other, int(i))
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    # both continue identically (the population's own rng is part of the state)
    a = run_generations(pop, graph, 2)
    b = run_generations(other, graph, 2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_a_registered_operator_survives_loading_a_state(tmp_path):
    """load_state_dict keeps the user's toolbox: a swapped operator is still used after it,
    also when the state's params differ (the default operators are bound to those)."""
    graph = make_graph()
    saved = make_population(seed=3, crossover_prob=1.0, mutation_prob=0.0)
    run_generations(saved, graph, 1)
    save_state(saved.state_dict(), tmp_path / "pop")
    calls = []

    def mate_first(base, mate, rng):
        calls.append(1)
        return base

    for options in ({"crossover_prob": 1.0, "mutation_prob": 0.0}, {"tournament_size": 5}):
        pop = make_population(seed=3, **options)
        pop.toolbox.register("mate_gnn", mate_first)
        pop.toolbox.register("my_extra", len)
        pop.load_state_dict(load_state(tmp_path / "pop"))
        assert pop.params == saved.params
        assert pop.toolbox.my_extra([1, 2]) == 2
        assert pop.toolbox.select.keywords["tournament_size"] == saved.params.tournament_size
        calls.clear()
        pop.set_fitness(np.linspace(1.0, 0.1, pop.size))
        report = pop.evolve(graph, gen())
        gnn_crossed = report.crossed & (pop.kinds[report.children] == "gnn")
        assert len(calls) == int(gnn_crossed.sum()) > 0


def test_state_of_another_layout_is_refused():
    pop = make_population()
    other = make_population(size=8)
    with pytest.raises(ValueError, match="kinds"):
        other.load_state_dict(pop.state_dict())


def test_unknown_option_is_named():
    with pytest.raises(TypeError, match="mutation_strength"):
        make_population(mutation_strength=0.1)
    with pytest.raises(ValueError, match="crossover_prob"):
        make_population(crossover_prob=1.5)
