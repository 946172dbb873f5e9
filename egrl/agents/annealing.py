"""Simulated annealing on the integer map, ``chains`` independent chains in lock-step.

Each chain holds a map and its reward. One move proposes one neighbour per chain
(``moves`` distinct (unit, head) entries of the map set to a different choice, uniformly)
and evaluates all proposals in one batch; each chain accepts its proposal by the
Metropolis rule on the reward (maximised): always if it is not worse, else with
probability ``exp((r_new - r) / T)``. The temperature follows a geometric schedule from
``t_start`` to ``t_end`` over the moves the budget allows, so the whole schedule is spent
whatever the budget. The first generation evaluates the distinct starting maps; every
later one makes ``steps`` moves (a generation is only the grain of metrics.csv and of
checkpoints: the search is the same whatever ``steps``).

On a noisy target (``Env.deterministic`` false) one lucky reading would hold a chain at a
map forever, every honest neighbour rejected against it. A chain's map that has stood
``confirm.reread`` times its readings moves is read again (a paid board run, past the
measure cache) and the chain carries the mean reward of its readings; a deterministic
target is never read again.

With screening (``screen``, :mod:`egrl.screening`) every chain draws ``screen.pool``
neighbours per move and the screen picks the one measured (the usual neighbour, the
first, when the measure cache already knows it).

Rewards are EGRL's (Algorithm 1): ``speedup ** 2`` for valid maps, minus the ratio of
re-assigned bytes for invalid ones, so temperatures are in those units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from egrl.agents import register_agent
from egrl.agents.base import SCREEN_PHASE, SearchAgent
from egrl.agents.options import parse_options, resolve_start, start_mappings, start_rule
from egrl.config import TrainConfig
from egrl.env import Env
from egrl.validation import at_least, positive, ruled


@dataclass(frozen=True)
class AnnealingOptions:
    """Parameters of ``agent=sa``.

    Attributes:
        chains: independent chains, i.e. maps per move (one ``env.evaluate`` call).
        steps: moves of every chain per generation (``chains * steps`` evaluations).
        moves: (unit, head) entries changed by one proposal.
        t_start: temperature of the first move.
        t_end: temperature of the last move the budget allows.
        start: first map of every chain: ``initial`` (the target's initial map; alias
            ``dram``, NNP-I's name for it), ``random``, ``native`` or ``fallback``.
    """

    chains: int = ruled(at_least(1), 2)
    steps: int = ruled(at_least(1), 10)
    moves: int = ruled(at_least(1), 2)
    t_start: float = ruled(positive(), 0.02)
    t_end: float = ruled(positive(), 1e-4)
    start: str = ruled(start_rule(), "initial")


def neighbours(
    maps: np.ndarray, num_choices: np.ndarray, moves: int, rng: np.random.Generator
) -> np.ndarray:
    """One neighbour per map: ``moves`` distinct entries changed to another choice.

    Args:
        maps: int64 ``[C, N, H]``.
        num_choices: int64 ``[H]``.

    Returns:
        int64 ``[C, N, H]``.
    """
    c, n, h = maps.shape
    flat = maps.reshape(c, n * h).copy()
    # Distinct entries per map: the first `moves` of a random permutation of each row.
    entries = np.argsort(rng.random((c, n * h)), axis=1)[:, :moves]
    choices = np.tile(num_choices, n)[entries]
    rows = np.arange(c)[:, None]
    shift = rng.integers(1, np.maximum(choices, 2))  # in 1..choices-1: the choice changes
    flat[rows, entries] = (flat[rows, entries] + shift) % choices
    return flat.reshape(c, n, h)


def metropolis(delta: np.ndarray, temp: float, rng: np.random.Generator) -> np.ndarray:
    """bool ``[C]``: accept each change of reward ``delta`` (float ``[C]``, maximised):
    always if it is not worse, else with probability ``exp(delta / temp)``."""
    with np.errstate(over="ignore"):
        return (delta >= 0) | (rng.random(len(delta)) < np.exp(np.minimum(delta, 0) / temp))


@register_agent("sa")
class SimulatedAnnealing(SearchAgent):
    """Batched simulated annealing (see the module docstring)."""

    extra_columns = ("temperature", "accept_rate", "chain_mean_reward")
    screens = True
    model_search = True

    def __init__(self, env: Env, cfg: TrainConfig, run_dir: str | Path | None = None) -> None:
        super().__init__(env, cfg, run_dir)
        o = self.options = parse_options(AnnealingOptions, cfg)
        self.start = resolve_start(o.start, env, self.name)
        if o.moves > env.num_units * env.num_heads:
            raise ValueError(
                f"agent {self.name!r}: moves={o.moves} exceeds the {env.num_units * env.num_heads}"
                " entries of a map"
            )
        self.current: np.ndarray | None = None  # int64 [C, N, H]
        self.reward: np.ndarray | None = None  # float64 [C]: mean reward of its readings
        self.readings = np.ones(o.chains, dtype=np.int64)  # readings of each chain's map
        self.stood = np.zeros(o.chains, dtype=np.int64)  # moves since its last reading
        self.rereads = 0  # board runs spent reading chains' maps again
        self.moves_done = 0
        self.num_moves = 1  # generations of moves the budget allows (set at the start)

    def temperature(self, move: int) -> float:
        """Geometric schedule: ``t_start`` at move 0, ``t_end`` at the last move."""
        o = self.options
        frac = move / max(self.num_moves - 1, 1)
        return o.t_start * (o.t_end / o.t_start) ** min(frac, 1.0)

    def step(self) -> dict:
        """``steps`` Metropolis moves of every chain (the first generation: the starts)."""
        if self.current is None:
            return self._start()
        temps, accepted = [], []
        for _ in range(self.options.steps):
            if self.ledger.done:
                break
            temps.append(self.temperature(self.moves_done))
            accepted.append(self._move(temps[-1]))
            self._reread()
        return {
            "temperature": temps[-1],
            "accept_rate": float(np.concatenate(accepted).mean()),
            "chain_mean_reward": float(self.reward.mean()),
        }

    def _move(self, temp: float) -> np.ndarray:
        """One proposal per chain, evaluated as one batch; returns bool ``[C']``: accepted
        (``C' < C`` when the budget cut the batch)."""
        current = (
            self.current if self.screen is None else np.repeat(self.current, self.ledger.pool, 0)
        )
        with self.timer("evolution"):
            proposals = neighbours(current, self.env.num_choices, self.options.moves, self.rng)
        if self.screen is not None:
            pools = proposals.reshape(len(self.current), self.ledger.pool, *proposals.shape[1:])
            if self.searching:
                with self.timer(SCREEN_PHASE):
                    pools = self._model_walk(pools[:, 0], temp)
            proposals = pools[np.arange(len(pools)), self.ledger.choose(pools)]
        ev = self.ledger.evaluate(proposals, "sa")
        k = len(ev)
        accept = metropolis(ev.reward - self.reward[:k], temp, self.rng)
        self.current[:k][accept] = proposals[:k][accept]
        self.reward[:k][accept] = ev.reward[accept]
        self.stood[:k] += 1
        self.readings[:k][accept], self.stood[:k][accept] = 1, 0
        self.moves_done += 1
        return accept

    def _reread(self) -> None:
        """A noisy target: read again each chain's map (one that earned a speedup) that has
        stood ``confirm.reread`` moves per reading, and carry the mean of its readings."""
        every = self.cfg.confirm.reread
        if self.env.deterministic or not every or self.ledger.done:
            return
        due = np.flatnonzero((self.stood >= every * self.readings) & (self.reward > 0))
        if not len(due):
            return
        new = self.ledger.read_rewards(self.current[due], "sa-reread")
        due, self.rereads = due[: len(new)], self.rereads + len(new)
        read = due[np.isfinite(new)]
        n = self.readings[read]
        self.reward[read] = (self.reward[read] * n + new[np.isfinite(new)]) / (n + 1)
        self.readings[read] += 1
        self.stood[due] = 0

    def _model_walk(self, first: np.ndarray, temp: float) -> np.ndarray:
        """Model-based search (``screen.search=G``): from each chain's map, ``G`` Metropolis
        moves on the screen's acquisition instead of the chip, at the chain's temperature.
        Returns the maps visited, int64 ``[C, G, N, H]``: ``first`` (each chain's usual
        neighbour, ``[C, N, H]``) and the walk's proposals after it, for the screen to pick
        one per chain (:meth:`~egrl.screening.screen.Screen.choose`)."""
        steps = self.search_generations
        state = self.current.copy()
        value = self.screen.value(state)
        visited = [first]
        for _ in range(steps - 1):
            proposal = neighbours(state, self.env.num_choices, self.options.moves, self.rng)
            predicted = self.screen.value(proposal)
            accept = metropolis(predicted - value, temp, self.rng)
            state[accept], value[accept] = proposal[accept], predicted[accept]
            visited.append(proposal)
        return np.stack(visited, axis=1)

    def _start(self) -> dict:
        """Evaluate the distinct starting maps; fit the schedule to the rest of the budget."""
        o = self.options
        limit = self.cfg.prior_time_limit_s
        starts = start_mappings(self.env, self.start, o.chains, self.rng, limit)
        unique, inverse = np.unique(starts, axis=0, return_inverse=True)
        ev = self.ledger.evaluate(unique, "sa-start")
        self.current = starts
        self.reward = np.full(o.chains, -np.inf)
        known = inverse.reshape(-1) < len(ev)
        self.reward[known] = ev.reward[inverse.reshape(-1)[known]]
        self.num_moves = max(1, math.ceil(self.ledger.remaining / o.chains))
        return {"chain_mean_reward": float(self.reward.mean())}

    # ------------------------------------------------------------ checkpoints
    def agent_state(self) -> dict:
        return {
            "current": None if self.current is None else self.current.copy(),
            "reward": None if self.reward is None else self.reward.copy(),
            "moves_done": self.moves_done,
            "num_moves": self.num_moves,
            "readings": self.readings.copy(),
            "stood": self.stood.copy(),
            "rereads": self.rereads,
        }

    def load_agent_state(self, state: dict) -> None:
        started = state["current"] is not None
        self.current = np.asarray(state["current"], np.int64).copy() if started else None
        self.reward = np.asarray(state["reward"], np.float64).copy() if started else None
        self.moves_done = int(state["moves_done"])
        self.num_moves = int(state["num_moves"])
        chains = self.options.chains  # checkpoints before re-reading: one reading each
        self.readings = np.asarray(state.get("readings", np.ones(chains)), np.int64).copy()
        self.stood = np.asarray(state.get("stood", np.zeros(chains)), np.int64).copy()
        self.rereads = int(state.get("rereads", 0))
