"""pUCT search over ``G`` games at once, the trees in preallocated flat arrays (the layout
of DeepMind's mctx).

:func:`batched_search` runs the search of :func:`egrl.agents.muzero.mcts.search` (the
readable one-game reference) for ``G`` trees side by side. Every tree has room for
``simulations + 1`` nodes (the root, then one node per simulation); node ``n`` of game
``g`` is row ``g * nodes + n`` of the flat arrays of :class:`Trees`. Each simulation is:

* **selection**, vectorised over games: from every root, one pUCT step per depth level
  for all games still descending (the 3 actions of all of them scored at once, absent
  children masked), until a game reaches an unexpanded child (its leaf) or an expanded
  node without children (a terminal state reached again: its value is 0);
* **expansion**: ONE call of the model for the leaves of all games (the learned model:
  batched NumPy dynamics and prediction; the true dynamics: each game replayed from its
  root's snapshot in Python, then one batched representation and prediction);
* **backup**, vectorised over games: the values each node of each game's path receives
  (``reward + discount * value`` from the leaf up, one depth level per step over all
  games), then visit counts, value sums, the parents' child statistics and the games'
  min-max bounds updated for all path nodes at once.

It reproduces :func:`~egrl.agents.muzero.mcts.search` game by game: the same pUCT
formula and order of floating-point operations (the ``log`` and ``sqrt`` of the parent's
visit count come from tables made with :mod:`math`, as the reference computes them),
ties broken towards the lowest action as Python's ``max`` over the children does,
Dirichlet noise at the roots drawn from ``rng`` game by game in order, a terminal state
reached again backing up 0. Searching one game gives the reference's visit counts and
root value bit for bit; in a batch of ``G`` games, the networks' matrix products (BLAS)
may round the last bit of a game's numbers differently than alone, which does not change
its visit counts unless two scores tie to within that bit (tests/test_muzero_batched.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from egrl.agents.muzero.encode import Encoder
from egrl.agents.muzero.mcts import SearchConfig, SearchResult
from egrl.agents.muzero.networks import NUM_ACTIONS, MuZeroNet, NumpyHeads
from hwmodels.tpu.game import Game


@dataclass
class Expansions:
    """What a batched model says about ``B`` states.

    Attributes:
        latent: float64 ``[B, latent]``: the latent states (None: the model keeps none).
        reward: float64 ``[B]``: reward of the transition into each (value units).
        prior: float64 ``[B, 3]``: policy probabilities (0 where illegal).
        value: float64 ``[B]``: estimated values.
        terminal: bool ``[B]``: the game is over (no children; value 0).
    """

    latent: np.ndarray | None
    reward: np.ndarray
    prior: np.ndarray
    value: np.ndarray
    terminal: np.ndarray


class Trees:
    """``G`` search trees of ``nodes`` nodes each, in flat arrays (row ``g * nodes + n``:
    node ``n`` of game ``g``; node 0 is the root, nodes are numbered as expanded).

    Attributes:
        visits: int64 ``[G * nodes]``; value_sum, reward: float64 ``[G * nodes]``.
        terminal: bool ``[G * nodes]``.
        parent: int64 ``[G * nodes]``: flat row of the parent (-1: a root).
        action: int64 ``[G * nodes]``: action from the parent (-1: a root).
        children: int64 ``[G * nodes, 3]``: flat row of each child (-1: unexpanded).
        prior: float64 ``[G * nodes, 3]``: each child's prior (the root's with noise).
        open: bool ``[G * nodes, 3]``: the child exists (prior > 0 when expanded; none
            below a terminal node).
        child_visits: int64 ``[G * nodes, 3]``: each child's visit count (0: unexpanded).
        child_q: float64 ``[G * nodes, 3]``: each child's ``reward + discount * value``
            (0 while unvisited), kept by the backup so that selection reads its children
            in one row.
        latent: float64 ``[G * nodes, latent]`` (None for a model without latents).
        size: int64 ``[G]``: nodes used per game.
    """

    def __init__(self, games: int, nodes: int, latent: int) -> None:
        rows = games * nodes
        self.games, self.nodes = games, nodes
        self.visits = np.zeros(rows, dtype=np.int64)
        self.value_sum = np.zeros(rows)
        self.reward = np.zeros(rows)
        self.terminal = np.zeros(rows, dtype=bool)
        self.parent = np.full(rows, -1, dtype=np.int64)
        self.action = np.full(rows, -1, dtype=np.int64)
        self.children = np.full((rows, NUM_ACTIONS), -1, dtype=np.int64)
        self.prior = np.zeros((rows, NUM_ACTIONS))
        self.open = np.zeros((rows, NUM_ACTIONS), dtype=bool)
        self.child_visits = np.zeros((rows, NUM_ACTIONS), dtype=np.int64)
        self.child_q = np.zeros((rows, NUM_ACTIONS))
        self.latent = np.zeros((rows, latent)) if latent else None
        self.size = np.zeros(games, dtype=np.int64)

    @property
    def roots(self) -> np.ndarray:
        """int64 ``[G]``: flat rows of the roots."""
        return np.arange(self.games, dtype=np.int64) * self.nodes

    def path(self, row: int) -> tuple[int, ...]:
        """The actions from the root of ``row``'s game down to ``row``."""
        out = []
        while self.parent[row] >= 0:
            out.append(int(self.action[row]))
            row = int(self.parent[row])
        return tuple(reversed(out))

    def add(self, rows: np.ndarray, exp: Expansions) -> None:
        """Store the expansions of the new nodes ``rows [B]`` (parents and actions set)."""
        self.reward[rows] = exp.reward
        self.terminal[rows] = exp.terminal
        live = ~exp.terminal
        self.prior[rows[live]] = exp.prior[live]
        self.open[rows[live]] = exp.prior[live] > 0
        if self.latent is not None and exp.latent is not None:
            self.latent[rows] = exp.latent


class BatchModel(Protocol):
    """What :func:`batched_search` expands states with."""

    #: size of the latent states kept in the tree (0: none)
    latent_size: int

    def roots(self) -> Expansions:
        """The ``G`` games' current states."""

    def expand(self, trees: Trees, parents: np.ndarray, actions: np.ndarray) -> Expansions:
        """The states after ``actions [B]`` from the nodes at flat rows ``parents [B]``
        (of ``B`` different games)."""


def masked_softmax_batch(logits: np.ndarray, legal: np.ndarray | None) -> np.ndarray:
    """float64 ``[B, 3]``: softmax of each row of ``logits [B, 3]`` over its ``legal``
    actions (bool ``[B, 3]``; all if None); row by row what
    :func:`egrl.agents.muzero.mcts.masked_softmax` computes."""
    x = np.asarray(logits, dtype=np.float64)
    if legal is not None:
        x = np.where(legal, x, -np.inf)
    x = np.exp(x - x.max(axis=1, keepdims=True))
    total = (x[:, 0] + x[:, 1]) + x[:, 2]  # NumPy's order for a sum of 3
    return x / total[:, None]


@torch.inference_mode()
def represent_batch(net: MuZeroNet, vectors: np.ndarray, grids: np.ndarray) -> np.ndarray:
    """float64 ``[B, latent]``: latent states of observations ``vectors [B, F]`` and
    ``grids [B, grid, grid]``, one torch call (at ``B = 1`` what
    :func:`~egrl.agents.muzero.mcts.represent` gives)."""
    s = net.represent(torch.from_numpy(vectors), torch.from_numpy(grids))
    return s.double().numpy()


class LearnedBatch:
    """MuZero's model for ``G`` games: their root latent states (the representation,
    computed by the caller in one batch), the learned dynamics below.

    Args:
        heads: the dynamics and prediction networks in NumPy.
        latents: float64 ``[G, latent]``: the roots' latent states.
        legal: bool ``[G, 3]``: the roots' legal actions (below the roots all are open).
        reward_unit: factor from the dynamics' reward output to value units (``1 / N``).
    """

    def __init__(
        self, heads: NumpyHeads, latents: np.ndarray, legal: np.ndarray, reward_unit: float
    ) -> None:
        self.heads, self.latents, self.legal = heads, latents, legal
        self.reward_unit = reward_unit
        self.latent_size = latents.shape[1]

    def roots(self) -> Expansions:
        logits, value = self.heads.predict_batch(self.latents)
        g = len(self.latents)
        prior = masked_softmax_batch(logits, self.legal)
        return Expansions(self.latents, np.zeros(g), prior, value, np.zeros(g, dtype=bool))

    def expand(self, trees: Trees, parents: np.ndarray, actions: np.ndarray) -> Expansions:
        s, r = self.heads.dynamics_batch(trees.latent[parents], actions)
        logits, value = self.heads.predict_batch(s)
        prior = masked_softmax_batch(logits, None)
        return Expansions(s, r * self.reward_unit, prior, value, np.zeros(len(s), dtype=bool))


class TrueBatch:
    """The true dynamics for ``G`` games: each leaf is reached by restoring its game's
    root snapshot and replaying the path (Python, game by game), then the leaves are
    encoded together (:meth:`Encoder.batch`) and go through ONE batched representation
    and prediction.

    Args:
        net, heads: the networks and their prediction in NumPy.
        encoder: the observation encoder.
        games: the ``G`` games at their roots (left there after every expansion).
        bound: the program's return bound (rewards are divided by it).
        latents: float64 ``[G, latent]``: the roots' latent states.
        legal: bool ``[G, 3]``: the roots' legal actions.
    """

    latent_size = 0

    def __init__(
        self,
        net: MuZeroNet,
        heads: NumpyHeads,
        encoder: Encoder,
        games: list[Game],
        bound: float,
        latents: np.ndarray,
        legal: np.ndarray,
    ) -> None:
        self.net, self.heads, self.encoder = net, heads, encoder
        self.games, self.bound = games, bound
        self.latents, self.legal = latents, legal
        self.snaps = [game.snapshot() for game in games]

    def roots(self) -> Expansions:
        logits, value = self.heads.predict_batch(self.latents)
        g = len(self.games)
        prior = masked_softmax_batch(logits, self.legal)
        return Expansions(None, np.zeros(g), prior, value, np.zeros(g, dtype=bool))

    def expand(self, trees: Trees, parents: np.ndarray, actions: np.ndarray) -> Expansions:
        b = len(parents)
        reward = np.zeros(b)
        terminal = np.zeros(b, dtype=bool)
        games = [self.games[row // trees.nodes] for row in parents.tolist()]
        for i, (row, action) in enumerate(zip(parents.tolist(), actions.tolist())):
            game = games[i]  # to the leaf: the root's snapshot, then the path
            game.restore(self.snaps[row // trees.nodes])
            for a in trees.path(row):
                game.step(a)
            reward[i] = game.step(action).reward / self.bound
            terminal[i] = game.done
        prior = np.zeros((b, NUM_ACTIONS))
        value = np.zeros(b)
        live = np.flatnonzero(~terminal)
        if len(live):
            leaves = [games[i] for i in live.tolist()]
            vectors, grids = self.encoder.batch(leaves)
            legal = np.stack([game.legal_actions() for game in leaves])
            latents = represent_batch(self.net, vectors, grids)
            logits, v = self.heads.predict_batch(latents)
            prior[live] = masked_softmax_batch(logits, legal)
            value[live] = v
        for row in parents.tolist():  # every game back at its root
            self.games[row // trees.nodes].restore(self.snaps[row // trees.nodes])
        return Expansions(None, reward, prior, value, terminal)


@dataclass(frozen=True)
class BatchResult:
    """Outcome of a batched search of ``G`` games.

    Attributes:
        visits: int64 ``[G, 3]``: visit counts of the roots' children.
        value: float64 ``[G]``: the roots' mean values.
        prior: float64 ``[G, 3]``: the roots' priors before noise.
        nodes: int64 ``[G]``: nodes each tree grew to (fewer than ``simulations + 1``
            where simulations ended on a terminal state reached again).
    """

    visits: np.ndarray
    value: np.ndarray
    prior: np.ndarray
    nodes: np.ndarray

    def __len__(self) -> int:
        return len(self.value)

    def __getitem__(self, g: int) -> SearchResult:
        """Game ``g``'s result as :func:`~egrl.agents.muzero.mcts.search` gives it."""
        return SearchResult(self.visits[g].copy(), float(self.value[g]), self.prior[g].copy())


def ucb_table(cfg: SearchConfig) -> np.ndarray:
    """float64 ``[S + 1, S + 1]`` (``S`` simulations): the exploration factor of pUCT,
    ``(log((n + c2 + 1) / c2) + c1) * (sqrt(n) / (m + 1))`` for a parent of ``n`` visits
    and a child of ``m``, with :mod:`math` and in the order of
    :func:`egrl.agents.muzero.mcts.ucb` (NumPy's ``log`` may differ in the last bit)."""
    n = range(cfg.simulations + 1)
    base = np.array([math.log((v + cfg.c2 + 1) / cfg.c2) + cfg.c1 for v in n])
    root = np.array([math.sqrt(v) for v in n])
    m = np.arange(cfg.simulations + 1)
    return base[:, None] * (root[:, None] / (m[None, :] + 1))


def add_noise(trees: Trees, cfg: SearchConfig, rng: np.random.Generator | None) -> None:
    """Mix Dirichlet noise into each root's prior over its children, game by game in
    order (``rng.dirichlet([alpha] * children)``, as the reference draws it)."""
    if rng is None or not cfg.noise_fraction > 0:
        return
    f = cfg.noise_fraction
    for root in trees.roots.tolist():
        acts = np.flatnonzero(trees.open[root])
        if not len(acts):
            continue
        noise = rng.dirichlet([cfg.noise_alpha] * len(acts))
        trees.prior[root, acts] = (1 - f) * trees.prior[root, acts] + f * noise


def select(
    trees: Trees, cfg: SearchConfig, table: np.ndarray, bounds: np.ndarray, path: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One descent in every tree by the pUCT rule, one level of all games at a time.

    Args:
        table: :func:`ucb_table` of ``cfg``.
        bounds: float64 ``[G, 2]``: each game's min-max bounds of Q (lo, hi).
        path: int64 ``[G, simulations + 2]``, filled here: the flat rows each descent
            went through, from the root (-1 past its end).

    Returns:
        ``(leaf_games, leaf_parents, leaf_actions, stopped, depth)``: the games whose
        descent reached an unexpanded child (int64 ``[B]``), with the flat rows and
        actions that lead to it; the games (int64) whose descent ended on an expanded
        node without children (a terminal state); int64 ``[G]``: the column of ``path``
        where each descent ended (the leaf's parent, or the node without children).
    """
    lo_g, hi_g = bounds[:, 0], bounds[:, 1]
    spread_g = hi_g > lo_g
    width_g = hi_g - lo_g  # as the reference computes it, (hi - lo), at every use
    side = table.shape[1]
    flat_table = table.ravel()
    children = trees.children.ravel()
    g = np.arange(trees.games, dtype=np.int64)
    row = trees.roots
    depth = np.zeros(trees.games, dtype=np.int64)
    path.fill(-1)
    leaf_games, leaf_parents, leaf_actions, stop_g = [], [], [], []
    level = 0
    while len(row):
        path[g, level] = row
        op = trees.open[row]
        has = op.any(axis=1)
        if not has.all():
            stop_g.append(g[~has])
            depth[g[~has]] = level
            g, row, op = g[has], row[has], op[has]
            if not len(row):
                break
        n_child = trees.child_visits[row]
        pb = flat_table[(trees.visits[row] * side)[:, None] + n_child]
        lo, width = lo_g[g][:, None], width_g[g][:, None]
        q = trees.child_q[row]
        q = np.where(spread_g[g][:, None], (q - lo) / width, q)
        score = np.where(n_child > 0, q, 0.0) + pb * trees.prior[row]
        score[~op] = -np.inf
        a = score.argmax(axis=1)  # the first of equal scores: the lowest action
        nxt = children[row * NUM_ACTIONS + a]
        leaf = nxt < 0
        if leaf.all():
            leaf_games.append(g)
            leaf_parents.append(row)
            leaf_actions.append(a)
            depth[g] = level
            break
        if leaf.any():
            leaf_games.append(g[leaf])
            leaf_parents.append(row[leaf])
            leaf_actions.append(a[leaf])
            depth[g[leaf]] = level
            deeper = ~leaf
            g, nxt = g[deeper], nxt[deeper]
        row = nxt
        level += 1
    empty = np.zeros(0, dtype=np.int64)
    return (
        np.concatenate(leaf_games) if leaf_games else empty,
        np.concatenate(leaf_parents) if leaf_parents else empty,
        np.concatenate(leaf_actions) if leaf_actions else empty,
        np.concatenate(stop_g) if stop_g else empty,
        depth,
    )


def backup(
    trees: Trees,
    cfg: SearchConfig,
    path: np.ndarray,
    length: np.ndarray,
    values: np.ndarray,
    bounds: np.ndarray,
) -> None:
    """Back each game's value up its path: visit counts, value sums, the parents' child
    statistics, the games' ``bounds [G, 2]``.

    Args:
        path: int64 ``[G, >= max(length)]``: flat rows from the root down.
        length: int64 ``[G]``: nodes on each path.
        values: float64 ``[G]``: the value at each path's last node.
    """
    games = len(length)
    d = int(length.max())
    rows_gd = path[:, :d]
    valid = np.arange(d) < length[:, None]
    reward = trees.reward[np.where(valid, rows_gd, 0)]
    end = (length - 1)[:, None] == np.arange(d)
    # the value each node receives, from the last node up: value = reward + discount * value
    value = np.empty((games, d))
    cur = np.zeros(games)
    for c in range(d - 1, -1, -1):
        if c < d - 1:
            cur = reward[:, c + 1] + cfg.discount * cur
        cur = np.where(end[:, c], values, cur)
        value[:, c] = cur
    rows = rows_gd[valid]
    total = trees.value_sum[rows] + value[valid]
    visits = trees.visits[rows] + 1
    trees.value_sum[rows] = total
    trees.visits[rows] = visits
    q = reward[valid] + cfg.discount * (total / visits)
    per_game = np.full((games, d), np.inf)
    per_game[valid] = q
    bounds[:, 0] = np.minimum(bounds[:, 0], per_game.min(axis=1))
    per_game[~valid] = -np.inf
    bounds[:, 1] = np.maximum(bounds[:, 1], per_game.max(axis=1))
    parent = trees.parent[rows]
    below = parent >= 0
    at = parent[below] * NUM_ACTIONS + trees.action[rows[below]]
    trees.child_visits.ravel()[at] = visits[below]
    trees.child_q.ravel()[at] = q[below]


def batched_search(
    model: BatchModel, cfg: SearchConfig, rng: np.random.Generator | None
) -> BatchResult:
    """Run ``cfg.simulations`` simulations in each of the model's ``G`` games at once
    (Dirichlet noise at the roots when ``rng`` is given and ``cfg.noise_fraction > 0``,
    drawn game by game in order); see the module docstring."""
    first = model.roots()
    games = len(first.value)
    nodes = cfg.simulations + 1
    trees = Trees(games, nodes, model.latent_size)
    roots = trees.roots
    trees.add(roots, first)
    trees.size[:] = 1
    add_noise(trees, cfg, rng)
    table = ucb_table(cfg)
    bounds = np.empty((games, 2))
    bounds[:, 0], bounds[:, 1] = np.inf, -np.inf
    path = np.full((games, nodes + 1), -1, dtype=np.int64)
    values = np.zeros(games)
    for _ in range(cfg.simulations):
        # (q - lo) / (hi - lo) is computed, and not used, for trees not spread yet
        with np.errstate(divide="ignore", invalid="ignore"):
            g, parents, actions, stopped, depth = select(trees, cfg, table, bounds, path)
        length = depth + 1
        values[stopped] = 0.0  # a terminal state reached again
        if len(g):
            new = g * nodes + trees.size[g]
            trees.size[g] += 1
            trees.parent[new] = parents
            trees.action[new] = actions
            trees.children[parents, actions] = new
            exp = model.expand(trees, parents, actions)
            trees.add(new, exp)
            values[g] = np.where(exp.terminal, 0.0, exp.value)
            path[g, depth[g] + 1] = new
            length[g] += 1
        backup(trees, cfg, path, length, values, bounds)
    ch = trees.children[roots]
    visits = np.where(ch >= 0, trees.visits[np.maximum(ch, 0)], 0)
    n_root = trees.visits[roots]
    value = np.where(n_root > 0, trees.value_sum[roots] / np.maximum(n_root, 1), 0.0)
    return BatchResult(visits.astype(np.int64), value, first.prior, trees.size.copy())
