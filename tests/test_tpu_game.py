"""The memory-mapping game's rules (Wang et al., arXiv:2305.07440, Appendix A) on small
hand-made programs: legality, copy intervals, alias groups, Drop-backup, offsets, the
search baselines against brute force, and the latency function."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.tpu import COPY, DROP, NOCOPY, Game, IllegalActionError, Op, Program
from hwmodels.tpu.cost import program_latency_s
from hwmodels.tpu.heuristic import native_play, prod_hybrid
from hwmodels.tpu.observe import observe
from hwmodels.tpu.search import brute_force, evolution_strategies, random_search
from tests.support.tpu import KB, filler, params, random_program, tiny_program


def reuse_program() -> Program:
    """A weight read at two times far apart, an activation chain in between."""
    ops = [
        *filler(2),
        Op(("w",), ("a",), 1e-6),
        Op(("a",), ("b",), 1e-6),
        Op(("b",), ("c",), 1e-6),
        Op(("w", "c"), ("d",), 1e-6),
    ]
    return Program.from_ops(ops, {"w": KB, "a": KB, "b": KB, "c": KB, "d": KB}, params())


def two_copies_program() -> Program:
    """Two operands of one instruction whose copies each need 2 steps of supply."""
    ops = [*filler(4), Op(("u", "v"), ("o",), 0.0)]
    return Program.from_ops(ops, {"u": KB, "v": KB, "o": 10}, params())


def alias_program() -> Program:
    """``x`` read at t=3 and ``y`` written at t=5 must share one offset (an alias group);
    ``z`` is written at t=4 and lives until t=6, in between."""
    ops = [
        *filler(3, 1e-6),
        Op(("x",), ("q",), 1e-6),
        Op(("q",), ("z",), 1e-6),
        Op(("z",), ("y",), 1e-6),
        Op(("z", "y"), ("r",), 1e-6),
    ]
    sizes = {"x": 2 * KB, "q": 10, "z": 2 * KB, "y": 2 * KB, "r": 10}
    return Program.from_ops(ops, sizes, params(4 * KB), alias_groups=[[(3, "x"), (5, "y")]])


def buffer(p: Program, name: str) -> int:
    return p.buffer_names.index(name)


def play_to(game: Game, target: int, action: int = DROP) -> None:
    """Step ``action`` (Drop where not legal) until ``target`` is the current buffer."""
    while game.position < target:
        game.step(action if game.is_legal(action) else DROP)


# ---------------------------------------------------------------- the rules
def test_nocopy_without_an_earlier_allocation_is_refused():
    p = reuse_program()
    game = Game(p)
    assert game.legal_actions().tolist() == [True, True, False]  # w at t=2: nothing to extend
    with pytest.raises(IllegalActionError, match="NoCopy is not legal"):
        game.step(NOCOPY)
    assert game.position == 0 and game.ret == 0
    game.step(DROP)  # w stays in HBM at t=2 ...
    play_to(game, buffer(p, "w@5r"))
    assert not game.legal_actions()[NOCOPY]  # ... so its use at t=5 cannot extend anything
    with pytest.raises(IllegalActionError):
        game.step(NOCOPY)


def test_nocopy_extends_the_earlier_allocation_at_its_offset():
    p = reuse_program()
    game = Game(p)
    game.step(COPY)  # w prefetched for t=2
    copied = game.layout()
    w0 = buffer(p, "w@2r")
    assert copied.end[w0] == 2 and copied.start[w0] < 2 and copied.copy_end[w0] == 1
    play_to(game, buffer(p, "w@5r"))
    pl = game.placement(NOCOPY)
    assert pl.legal and (pl.start, pl.end, pl.offset) == (3, 5, copied.offset[w0])
    reward = game.step(NOCOPY).reward
    assert reward == pytest.approx(p.benefit_s[buffer(p, "w@5r")])


def test_copy_interval_is_the_latest_start_the_supply_allows():
    p = two_copies_program()
    game = Game(p)
    pl = game.placement(COPY)  # u at t=4: 1 us of copy over steps of 0.6 us supply
    assert (pl.copy_start, pl.copy_end, pl.start, pl.end) == (2, 3, 2, 4)
    game.step(COPY)
    supply = game.supply()
    assert supply[3] == 0 and supply[2] == p.supply_ps[2] - (p.demand_ps[0] - p.supply_ps[3])


def test_overlapping_copies_are_refused():
    p = two_copies_program()
    game = Game(p)
    game.step(COPY)  # u's copy spans steps 2-3
    assert game.legal_actions().tolist() == [True, False, False]  # v's would share 2 steps
    with pytest.raises(IllegalActionError, match="Copy is not legal"):
        game.step(COPY)
    fresh = Game(p)
    fresh.step(DROP)
    assert fresh.legal_actions()[COPY]  # without u's copy, v's fits


def test_copies_may_share_one_boundary_step():
    ops = [*filler(4), Op(("u",), ("o1",), 0.0), *filler(1, 0.3e-6), Op(("v",), ("o2",), 0.0)]
    p = Program.from_ops(ops, {"u": KB, "v": KB, "o1": 10, "o2": 10}, params())
    game = Game(p)
    game.step(COPY)  # u: steps 2-3, 0.2 us left at step 2
    play_to(game, buffer(p, "v@6r"))
    pl = game.placement(COPY)  # v: steps 5, 4 (0.6 + 0.3 < 1 us), would need step 3: taken
    assert not pl.legal


def test_an_output_copy_is_a_copy_out_after_its_instruction():
    ops = [Op((), ("o",), 0.0), *filler(3), Op(("o",), ("r",), 0.0)]
    p = Program.from_ops(ops, {"o": KB, "r": 10}, params())
    game = Game(p)
    pl = game.placement(COPY)
    assert (pl.start, pl.end, pl.copy_start, pl.copy_end) == (0, 2, 1, 2)
    nocopy = game.placement(NOCOPY)  # an output's NoCopy holds its whole live range
    assert (nocopy.start, nocopy.end) == (0, 4)


def test_offsets_are_the_lowest_free_over_the_interval():
    ops = [Op((), ("a",), 1e-6), Op((), ("b",), 1e-6), Op(("a", "b"), ("c",), 1e-6)]
    p = Program.from_ops(ops, {"a": 3 * KB, "b": 3 * KB, "c": 3 * KB}, params())
    game = Game(p)
    game.step(NOCOPY)  # a: [0, 2] at 0
    game.step(NOCOPY)  # b: [1, 2] at 3 KB
    assert game.layout().offset[:2].tolist() == [0, 3 * KB]
    play_to(game, buffer(p, "c@2w"))
    assert game.placement(NOCOPY).offset == 6 * KB
    small = Program.from_ops(ops, {"a": 3 * KB, "b": 3 * KB, "c": 3 * KB}, params(8 * KB))
    g2 = Game(small)
    g2.step(NOCOPY)
    g2.step(NOCOPY)
    play_to(g2, buffer(small, "c@2w"))
    assert not g2.is_legal(NOCOPY)  # 9 KB do not fit in 8 KB at t=2


def test_an_alias_group_is_all_in_cmem_at_one_offset_or_all_in_hbm():
    p = alias_program()
    x, y = buffer(p, "x@3r"), buffer(p, "y@5w")
    dropped = Game(p)
    dropped.step(DROP)  # x in HBM: y must follow
    play_to(dropped, y, COPY)
    assert dropped.legal_actions().tolist() == [True, False, False]
    kept = Game(p)
    kept.step(COPY)  # x in CMEM at offset 0: y must be there too, never in HBM
    play_to(kept, y)
    assert not kept.is_legal(DROP)
    assert kept.placement(NOCOPY).offset == kept.layout().offset[x] == 0


def test_drop_backup_rolls_back_and_drops_the_offending_group():
    p = alias_program()
    x, z, y = buffer(p, "x@3r"), buffer(p, "z@4w"), buffer(p, "y@5w")
    plan = np.full(p.num_buffers, COPY)
    plan[z] = NOCOPY  # z takes offset 0 over [4, 6] after x's interval ends: y cannot go there
    lost = Game(p, drop_backup=False)
    result = lost.play(plan)
    assert result.lost and lost.ret == 0 and lost.position == y
    game = Game(p)
    result = game.play(plan)
    assert not result.lost and result.backups == 1 and game.done
    assert result.actions[x] == result.actions[y] == DROP  # the whole group went to HBM
    assert result.actions[z] == NOCOPY and not result.replaced[z]
    assert result.replaced[[x, y]].all()
    replay = Game(p)
    assert replay.play(result.actions, repair=False).ret == pytest.approx(result.ret)


def test_stepping_into_a_dead_end_backs_up_with_a_negative_reward():
    p = alias_program()
    game = Game(p)
    game.step(COPY)  # x
    play_to(game, buffer(p, "z@4w"))
    game.step(NOCOPY)  # z over [4, 6] at offset 0, where y must go
    before = game.ret
    step = game.step(NOCOPY)  # z read at t=5; then y has no legal action
    assert step.backed_up and not step.done and game.position == 0 and game.backups == 1
    assert step.reward == pytest.approx(game.ret - before) and step.reward < 0
    assert game.legal_actions().tolist() == [True, False, False]  # x is dropped now


@pytest.mark.parametrize("seed", range(30))
def test_random_proposals_always_end_in_a_complete_legal_game(seed):
    rng = np.random.default_rng(seed)
    p = random_program(rng)
    game = Game(p)
    result = game.play(rng.integers(0, 3, p.num_buffers))
    layout = game.layout()
    assert game.done and not result.lost and (result.actions >= 0).all()
    assert layout.overlaps() == []
    in_cmem = layout.in_cmem
    for g in np.unique(p.alias):
        members = p.alias == g
        assert in_cmem[members].all() or not in_cmem[members].any()
        assert len(np.unique(layout.offset[members])) == 1
    assert (layout.offset[in_cmem] + p.size[in_cmem] <= p.params.cmem_bytes).all()
    assert ((layout.copy_ps >= 0) & (layout.copy_ps <= p.supply_ps)).all()
    again = Game(p).play(result.actions, repair=False)  # the repaired game is legal as it is
    assert (again.actions == result.actions).all() and again.ret == pytest.approx(result.ret)


def test_occupancy_is_never_oversubscribed_step_by_step():
    rng = np.random.default_rng(5)
    for _ in range(10):
        p = random_program(rng, 16)
        game = Game(p)
        game.play(rng.integers(0, 3, p.num_buffers))
        layout = game.layout()
        cells = np.zeros((p.num_instructions, p.params.cmem_bytes), dtype=np.int64)
        for g in np.unique(p.alias):  # one alias group may share its own bytes, no other
            mine = np.zeros_like(cells, dtype=bool)
            for b in np.flatnonzero(layout.allocated & (p.alias == g)):
                mine[
                    layout.start[b] : layout.end[b] + 1,
                    layout.offset[b] : layout.offset[b] + p.size[b],
                ] = True
            cells += mine
        assert cells.max() <= 1


# -------------------------------------------------------- state handling
def test_snapshot_restore_and_clone_are_independent():
    rng = np.random.default_rng(3)
    p = random_program(rng)
    game = Game(p)
    for _ in range(5):
        game.step(int(np.flatnonzero(game.legal_actions())[-1]))
    snap, twin = game.snapshot(), game.clone()
    tail = rng.integers(0, 3, p.num_buffers)
    first = game.play(tail)
    assert twin.position == 5 and not twin.done
    second = twin.play(tail)
    game.restore(snap)
    third = game.play(tail)
    assert first.ret == second.ret == third.ret
    assert (first.actions == second.actions).all() and (first.actions == third.actions).all()


def test_return_is_the_latency_saved_without_copy_contention():
    rng = np.random.default_rng(8)
    p = random_program(rng)
    game = Game(p)
    game.play(rng.integers(0, 3, p.num_buffers))
    layout = game.layout()
    assert layout.latency_s(contention=False) == pytest.approx(p.baseline_latency_s - game.ret)
    assert layout.latency_s(contention=True) >= layout.latency_s(contention=False)


def test_latency_is_monotone_in_what_is_in_cmem_and_in_copy_time():
    rng = np.random.default_rng(2)
    p = random_program(rng, 20)
    for _ in range(50):
        in_cmem = rng.random(p.num_buffers) < 0.5
        copy = rng.integers(0, p.supply_ps + 1)
        base = program_latency_s(p.compute_s, p.time, p.size, in_cmem, copy, p.params)
        b = rng.choice(np.flatnonzero(~in_cmem)) if (~in_cmem).any() else 0
        more = in_cmem.copy()
        more[b] = True
        assert program_latency_s(p.compute_s, p.time, p.size, more, copy, p.params) <= base
        busier = copy + rng.integers(0, 10**6, p.num_instructions)
        assert program_latency_s(p.compute_s, p.time, p.size, in_cmem, busier, p.params) >= base


# --------------------------------------------------- searches vs brute force
def test_brute_force_bounds_every_search_and_random_search_reaches_it():
    p = tiny_program()
    best = brute_force(p)
    rng = np.random.default_rng(0)
    rand = random_search(p, 400, rng)
    es = evolution_strategies(p, 5, rng, population=4)
    heur = Game(p)
    heur.play(native_play(p)[0].actions, repair=False)
    assert best.games > 10 and best.ret > 0
    assert (
        rand.ret <= best.ret + 1e-18 and es.ret <= best.ret + 1e-18 and heur.ret <= best.ret + 1e-18
    )
    assert rand.ret == pytest.approx(best.ret, rel=1e-12)
    assert Game(p).play(best.actions, repair=False).ret == pytest.approx(best.ret)


def test_brute_force_on_latency_and_the_prod_hybrid():
    p = tiny_program()
    fastest = brute_force(p, objective="latency")
    game = Game(p)
    game.play(fastest.actions, repair=False)
    assert game.layout().latency_s() == pytest.approx(-fastest.ret)
    hybrid = prod_hybrid(p, fastest.actions)
    assert hybrid.latency_s == min(hybrid.agent_latency_s, hybrid.heuristic_latency_s)
    assert hybrid.latency_s == pytest.approx(-fastest.ret)
    drop = prod_hybrid(p, np.zeros(p.num_buffers, dtype=np.int64))
    assert drop.latency_s <= p.baseline_latency_s


# ------------------------------------------------------------ observation
def test_observation_pieces_have_the_documented_shapes():
    rng = np.random.default_rng(4)
    p = random_program(rng)
    game = Game(p)
    for _ in range(6):
        game.step(int(np.flatnonzero(game.legal_actions())[-1]))
    obs = observe(game, grid=(16, 32), window=8, profile_bins=64, supply_window=10)
    assert obs["buffers"].shape == (6, p.features.shape[1])
    assert obs["same_tensor"].shape == (5, p.features.shape[1])
    assert obs["grid"].shape == (16, 32) and obs["profile"].shape == (64,)
    assert obs["supply"].shape == (10,) and obs["actions"].shape == (3, 4)
    assert obs["globals"].tolist()[:2] == [6, 6]
    assert obs["actions"][:, 0].tolist() == game.legal_actions().astype(float).tolist()
    if game.layout().allocated.any():
        assert obs["grid"].any()
