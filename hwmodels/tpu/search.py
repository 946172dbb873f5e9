"""Baselines that play the game directly: uniformly random legal play, evolution
strategies (Salimans et al., 2017) on a linear policy, and brute force for tiny programs.

Each returns the actions of the best game it found, so its layout can be replayed with
:meth:`hwmodels.tpu.game.Game.play`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from hwmodels.tpu.game import ACTIONS, Game
from hwmodels.tpu.program import Program


@dataclass
class SearchResult:
    """The best game a search found.

    Attributes:
        actions: int64 ``[N]``: its actions.
        ret: its return.
        games: complete games played.
        history: ``(games so far, wall seconds, best return)`` after each improvement
            (ES: after each iteration).
    """

    actions: np.ndarray
    ret: float
    games: int
    history: list[tuple[int, float, float]] = field(default_factory=list)


def random_play(program: Program, rng: np.random.Generator, drop_backup: bool = True) -> Game:
    """One game with a uniformly random legal action at every step; the finished game."""
    game = Game(program, drop_backup=drop_backup)
    while not game.done:
        legal = np.flatnonzero(game.legal_actions())
        game.step(int(legal[rng.integers(len(legal))]))
    return game


def random_search(
    program: Program, games: int, rng: np.random.Generator, time_limit_s: float = np.inf
) -> SearchResult:
    """The best of ``games`` random legal games (stops early at ``time_limit_s``)."""
    start = time.perf_counter()
    best: SearchResult | None = None
    for i in range(games):
        game = random_play(program, rng)
        if best is None or game.ret > best.ret:
            best = SearchResult(game.actions, game.ret, i + 1, best.history if best else [])
            best.history.append((i + 1, time.perf_counter() - start, game.ret))
        best.games = i + 1
        if time.perf_counter() - start > time_limit_s:
            break
    return best


#: length of :func:`policy_features`
NUM_POLICY_FEATURES = 8 + 3 * len(ACTIONS)


def policy_features(game: Game) -> np.ndarray:
    """float64 ``[NUM_POLICY_FEATURES]``: a small description of the current state for a
    linear policy: log-scaled size, benefit (now), demand and remaining life of the
    buffer, is_output, its alias group's size, supply left at its step, a bias; per
    action legality, log interval length and relative offset."""
    p = game.program
    b = game.position
    t = int(p.time[b])
    cap = p.params.cmem_bytes
    head = [
        np.log1p(p.size[b]) / 20,
        game.benefit() * 1e6,
        p.demand_ps[b] / 1e6,
        np.log1p(p.live_end[b] - t),
        float(p.is_output[b]),
        np.log(p.group_size[p.alias[b]]),
        np.log1p(game._supply[t]) / 20,
        1.0,
    ]
    acts = []
    for a in range(len(ACTIONS)):
        pl = game.placement(a)
        acts += [float(pl.legal), np.log1p(max(pl.end - pl.start + 1, 0)), max(pl.offset, 0) / cap]
    return np.array(head + acts)


def linear_policy_play(program: Program, theta: np.ndarray) -> Game:
    """One game where each action is the legal argmax of ``theta`` ``[3, F] @ features``."""
    game = Game(program)
    while not game.done:
        logits = theta @ policy_features(game)
        logits[~game.legal_actions()] = -np.inf
        game.step(int(np.argmax(logits)))
    return game


def initial_theta() -> np.ndarray:
    """float64 ``[3, NUM_POLICY_FEATURES]``: a linear policy that prefers Copy, then
    NoCopy, then Drop where legal (bias weights only)."""
    theta = np.zeros((len(ACTIONS), NUM_POLICY_FEATURES))
    theta[:, 7] = (0.0, 0.2, 0.1)  # bias: Copy > NoCopy > Drop
    return theta


@dataclass
class LinearES:
    """OpenAI-ES (Salimans et al., 2017) on a linear policy over :func:`policy_features`,
    as an ask / tell loop.

    :meth:`ask` draws ``population`` perturbations and their antithetic twins
    ``[2 * population, 3, F]``; the caller plays ``theta + sigma * eps`` for each and hands
    the returns to :meth:`tell`, which turns them into centred ranks and steps
    ``theta += lr / (2 * population * sigma) * sum(rank * eps)``.
    """

    population: int = 8
    sigma: float = 0.1
    lr: float = 0.05
    theta: np.ndarray = field(default_factory=initial_theta)

    def ask(self, rng: np.random.Generator) -> np.ndarray:
        """float64 ``[2 * population, 3, F]``: the perturbations ``eps`` (antithetic)."""
        eps = rng.standard_normal((self.population, *self.theta.shape))
        return np.concatenate([eps, -eps])

    def policies(self, eps: np.ndarray) -> np.ndarray:
        """The perturbed policies ``theta + sigma * eps``, ``[P, 3, F]``."""
        return self.theta + self.sigma * eps

    def tell(self, eps: np.ndarray, returns: np.ndarray) -> None:
        """Step ``theta`` from the returns ``[P]`` of the policies of ``eps``."""
        ranks = np.empty(len(returns))
        ranks[np.argsort(returns, kind="stable")] = np.arange(len(returns))
        ranks = ranks / max(len(returns) - 1, 1) - 0.5
        self.theta = self.theta + self.lr / (len(eps) * self.sigma) * np.tensordot(
            ranks, eps, axes=1
        )


def evolution_strategies(
    program: Program,
    iterations: int,
    rng: np.random.Generator,
    population: int = 8,
    sigma: float = 0.1,
    lr: float = 0.05,
    time_limit_s: float = np.inf,
) -> SearchResult:
    """OpenAI-ES (:class:`LinearES`) for ``iterations`` iterations of ``2 * population``
    games each; the best game seen is kept. Starts from :func:`initial_theta`."""
    start = time.perf_counter()
    es = LinearES(population, sigma, lr)
    first = linear_policy_play(program, es.theta)
    best = SearchResult(first.actions, first.ret, 1, [(1, time.perf_counter() - start, first.ret)])
    for _ in range(iterations):
        eps = es.ask(rng)
        rets = np.empty(len(eps))
        for i, theta in enumerate(es.policies(eps)):
            game = linear_policy_play(program, theta)
            rets[i] = game.ret
            best.games += 1
            if game.ret > best.ret:
                best.actions, best.ret = game.actions, game.ret
        es.tell(eps, rets)
        best.history.append((best.games, time.perf_counter() - start, best.ret))
        if time.perf_counter() - start > time_limit_s:
            break
    return best


def brute_force(
    program: Program, objective: str = "return", max_games: int = 200_000
) -> SearchResult:
    """Every complete legal game of a tiny program, by depth-first search.

    Args:
        objective: ``"return"`` (highest game return) or ``"latency"`` (lowest program
            latency; ``ret`` of the result is then minus that latency).
        max_games: give up (``ValueError``) past this many complete games.
    """
    if objective not in ("return", "latency"):
        raise ValueError(f"brute_force objective must be 'return' or 'latency', got {objective!r}")
    game = Game(program, drop_backup=False)
    best = SearchResult(np.zeros(0, dtype=np.int64), -np.inf, 0)

    def visit() -> None:
        if game.done:
            if game.lost:
                return
            best.games += 1
            if best.games > max_games:
                raise ValueError(
                    f"brute force: {program.name!r} has more than {max_games} complete games"
                )
            value = game.ret if objective == "return" else -game.layout().latency_s()
            if value > best.ret:
                best.actions, best.ret = game.actions, value
            return
        snap = game.snapshot()
        for a in np.flatnonzero(game.legal_actions()):
            game.step(int(a))
            visit()
            game.restore(snap)

    visit()
    return best
