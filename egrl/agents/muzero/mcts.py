"""Monte Carlo tree search with pUCT (MuZero's pseudocode, Schrittwieser et al. 2020).

One search from the current game state runs ``simulations`` simulations. Each walks
down the tree by the pUCT rule

    a = argmax  Q(s, a) + P(s, a) * sqrt(N(s)) / (1 + N(s, a)) * (c1 + log((N(s) + c2 + 1) / c2))

(``Q`` min-max normalised over the tree, ``r + discount * V`` of the child), expands the
leaf it reaches with the :class:`Model` and backs its value up the path with the rewards
on the way. The root's prior is mixed with Dirichlet noise, ``(1 - f) P + f Dir(alpha)``
over the legal actions. The visit counts of the root's children are the policy target;
the root's mean value is the value the n-step targets bootstrap from.

Two models plan: :class:`LearnedModel` (MuZero: the representation network at the root,
then the learned dynamics; every action is open below the root) and :class:`TrueModel`
(the AlphaZero-style ablation: expansions step the real game from the root's snapshot,
so rewards, legal actions and the end of the game are exact; the prediction network
still gives the prior and the value at the leaf).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from egrl.agents.muzero.encode import Encoder
from egrl.agents.muzero.networks import NUM_ACTIONS, MuZeroNet, NumpyHeads
from hwmodels.tpu.game import Game


@dataclass(frozen=True)
class SearchConfig:
    """pUCT search parameters (MuZero's ``c1``, ``c2``; Wang et al., Appendix C for the
    rest: 400 simulations, discount 0.9999, noise fraction 0.25 and alpha 0.03).

    Attributes:
        simulations: simulations per search.
        discount: reward discount.
        c1, c2: pUCT constants.
        noise_alpha, noise_fraction: Dirichlet noise at the root (fraction 0: none).
    """

    simulations: int = 16
    discount: float = 0.9999
    c1: float = 1.25
    c2: float = 19652.0
    noise_alpha: float = 0.03
    noise_fraction: float = 0.25


@dataclass
class Expansion:
    """What a model says about a state.

    Attributes:
        state: the model's handle of the state (a latent tensor, or the action path).
        reward: reward of the transition into it (scaled to the value's units).
        prior: float64 ``[3]``: policy probabilities (0 where illegal).
        value: estimated value of the state.
        terminal: the game is over in it (no children; its value is 0).
    """

    state: object
    reward: float
    prior: np.ndarray
    value: float
    terminal: bool = False


class Model(Protocol):
    """What the search expands states with."""

    def root(self) -> Expansion:
        """The current game state."""

    def expand(self, state: object, action: int) -> Expansion:
        """The state after ``action`` from ``state``."""


class Node:
    """One state of the search tree."""

    __slots__ = ("prior", "reward", "state", "children", "visits", "value_sum", "terminal")

    def __init__(self, prior: float) -> None:
        self.prior = prior
        self.reward = 0.0
        self.state: object = None
        self.children: dict[int, Node] = {}
        self.visits = 0
        self.value_sum = 0.0
        self.terminal = False

    @property
    def expanded(self) -> bool:
        return self.state is not None

    def value(self) -> float:
        return self.value_sum / self.visits if self.visits else 0.0

    def expand(self, exp: Expansion) -> None:
        self.state, self.reward, self.terminal = exp.state, exp.reward, exp.terminal
        if not exp.terminal:
            self.children = {
                int(a): Node(float(exp.prior[a])) for a in np.flatnonzero(exp.prior > 0)
            }


class MinMax:
    """Running bounds of the tree's Q values, to normalise them to [0, 1]."""

    def __init__(self) -> None:
        self.lo, self.hi = math.inf, -math.inf

    def update(self, q: float) -> None:
        self.lo, self.hi = min(self.lo, q), max(self.hi, q)

    def normalize(self, q: float) -> float:
        return (q - self.lo) / (self.hi - self.lo) if self.hi > self.lo else q


@dataclass(frozen=True)
class SearchResult:
    """Outcome of one search.

    Attributes:
        visits: int64 ``[3]``: visit counts of the root's children (0: illegal or unvisited).
        value: the root's mean value.
        prior: float64 ``[3]``: the root's prior before noise.
    """

    visits: np.ndarray
    value: float
    prior: np.ndarray

    @property
    def policy(self) -> np.ndarray:
        """float64 ``[3]``: visit counts normalised, the policy target."""
        return self.visits / max(self.visits.sum(), 1)


def ucb(parent: Node, child: Node, cfg: SearchConfig, bounds: MinMax) -> float:
    """pUCT score of ``child`` (see the module docstring)."""
    pb = math.log((parent.visits + cfg.c2 + 1) / cfg.c2) + cfg.c1
    pb *= math.sqrt(parent.visits) / (child.visits + 1)
    q = bounds.normalize(child.reward + cfg.discount * child.value()) if child.visits else 0.0
    return q + pb * child.prior


def search(model: Model, cfg: SearchConfig, rng: np.random.Generator | None) -> SearchResult:
    """Run ``cfg.simulations`` simulations from the model's root (Dirichlet noise at the
    root when ``rng`` is given and ``cfg.noise_fraction > 0``)."""
    root = Node(1.0)
    first = model.root()
    root.expand(first)
    if rng is not None and cfg.noise_fraction > 0 and root.children:
        acts = list(root.children)
        noise = rng.dirichlet([cfg.noise_alpha] * len(acts))
        for a, n in zip(acts, noise):
            child = root.children[a]
            child.prior = (1 - cfg.noise_fraction) * child.prior + cfg.noise_fraction * n
    bounds = MinMax()
    for _ in range(cfg.simulations):
        node, path, action = root, [root], -1
        while node.expanded and node.children:
            action, node = max(
                node.children.items(), key=lambda kv: ucb(path[-1], kv[1], cfg, bounds)
            )
            path.append(node)
        if node.expanded:  # a terminal state reached again
            value = 0.0
        else:
            exp = model.expand(path[-2].state, action)
            node.expand(exp)
            value = 0.0 if exp.terminal else exp.value
        for n in reversed(path):
            n.value_sum += value
            n.visits += 1
            bounds.update(n.reward + cfg.discount * n.value())
            value = n.reward + cfg.discount * value
    visits = np.zeros(NUM_ACTIONS, dtype=np.int64)
    for a, child in root.children.items():
        visits[a] = child.visits
    return SearchResult(visits, root.value(), first.prior)


def masked_softmax(logits: np.ndarray, legal: np.ndarray | None) -> np.ndarray:
    """float64 ``[3]``: softmax of ``logits [3]`` over the ``legal`` actions (all if None)."""
    x = np.asarray(logits, dtype=np.float64)
    if legal is not None:
        x = np.where(legal, x, -np.inf)
    x = np.exp(x - x.max())
    return x / x.sum()


@torch.inference_mode()
def represent(net: MuZeroNet, vector: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """float64 ``[latent]``: the latent state of one observation."""
    s = net.represent(torch.from_numpy(vector)[None], torch.from_numpy(grid)[None])
    return s[0].double().numpy()


class LearnedModel:
    """MuZero's model: representation at the root, learned dynamics below it.

    Args:
        net: the networks (representation, in torch).
        heads: its dynamics and prediction frozen into NumPy (:class:`NumpyHeads`).
        vector, grid: the root's encoded observation.
        legal: bool ``[3]``: the root's legal actions (below the root all are open).
        reward_unit: factor from the dynamics' reward output to value units (``1 / N``).
        latent: float64 ``[latent]``: the root's latent state if the caller has it.
    """

    def __init__(
        self,
        net: MuZeroNet,
        heads: NumpyHeads,
        vector: np.ndarray,
        grid: np.ndarray,
        legal: np.ndarray,
        reward_unit: float,
        latent: np.ndarray | None = None,
    ) -> None:
        self.net, self.heads, self.vector, self.grid = net, heads, vector, grid
        self.legal, self.reward_unit, self.latent = legal, reward_unit, latent

    def root(self) -> Expansion:
        s = self.latent
        if s is None:
            s = represent(self.net, self.vector, self.grid)
        logits, value = self.heads.predict(s)
        return Expansion(s, 0.0, masked_softmax(logits, self.legal), value)

    def expand(self, state: object, action: int) -> Expansion:
        s, r = self.heads.dynamics(state, action)
        logits, value = self.heads.predict(s)
        return Expansion(s, r * self.reward_unit, masked_softmax(logits, None), value)


class TrueModel:
    """The true dynamics (AlphaZero-style): the game itself, stepped from the root.

    A state is the tuple of actions from the root; expanding it restores the root's
    snapshot and replays them, then steps ``action``. The prediction network on the
    representation of the real observation gives the prior and the leaf value.

    Args:
        net, heads: the networks and their prediction head in NumPy.
        encoder: the observation encoder.
        game: the game at the root (left at the root after every expansion).
        bound: the program's return bound (rewards are divided by it).
        observation: the root's ``(vector, grid)`` if the caller has encoded it.
        latent: float64 ``[latent]``: the root's latent state if the caller has it.
    """

    def __init__(
        self,
        net: MuZeroNet,
        heads: NumpyHeads,
        encoder: Encoder,
        game: Game,
        bound: float,
        observation: tuple[np.ndarray, np.ndarray] | None = None,
        latent: np.ndarray | None = None,
    ) -> None:
        self.net, self.heads, self.encoder = net, heads, encoder
        self.game, self.bound = game, bound
        self.observation = observation  # the root's encoding, if already made
        self.latent = latent  # the root's latent state, if already made
        self.snap = game.snapshot()

    def _evaluate(self, path: tuple, reward: float) -> Expansion:
        if self.game.done:
            return Expansion(path, reward, np.zeros(NUM_ACTIONS), 0.0, terminal=True)
        if not path and self.latent is not None:
            s = self.latent
        else:
            if not path and self.observation is not None:
                vector, grid = self.observation
            else:
                vector, grid = self.encoder(self.game)
            s = represent(self.net, vector, grid)
        logits, value = self.heads.predict(s)
        prior = masked_softmax(logits, self.game.legal_actions())
        return Expansion(path, reward, prior, value)

    def root(self) -> Expansion:
        return self._evaluate((), 0.0)

    def expand(self, state: object, action: int) -> Expansion:
        game = self.game
        game.restore(self.snap)
        for a in state:
            game.step(a)
        reward = game.step(action).reward / self.bound
        exp = self._evaluate((*state, action), reward)
        game.restore(self.snap)
        return exp
