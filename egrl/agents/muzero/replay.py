"""Self-play games and the replay buffer the planner learns from.

A :class:`Trajectory` is one self-play game as played, move by move (a Drop-backup's
undone moves included: the backup's negative reward is part of the trajectory): the
encoded observation, the action, the reward (over the program's return bound), the
search's visit distribution and root value, the legal actions.

:class:`Replay` keeps the newest games up to ``capacity`` positions and samples training
batches: for a position ``t`` and ``K`` unroll steps, the observation at ``t``, the actions
``t .. t+K-1``, and for ``k = 0..K`` the policy target (visits at ``t+k``), the value
target (the ``n``-step return ``sum_{j<n} d^j r_{t+k+j} + d^n v_{t+k+n}``, ``v`` the
search's root value) and the reward target ``r_{t+k-1}``. Past the end of the game the
state is absorbing: value and reward targets 0, the policy not trained.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from egrl.agents.muzero.networks import NUM_ACTIONS


@dataclass
class Trajectory:
    """One self-play game, built move by move with :meth:`add` (``M`` moves)."""

    vectors: list[np.ndarray] = field(default_factory=list)
    grids: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    policies: list[np.ndarray] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def add(
        self,
        vector: np.ndarray,
        grid: np.ndarray,
        action: int,
        reward: float,
        policy: np.ndarray,
        value: float,
    ) -> None:
        self.vectors.append(vector)
        self.grids.append(grid)
        self.actions.append(int(action))
        self.rewards.append(float(reward))
        self.policies.append(np.asarray(policy, dtype=np.float32))
        self.values.append(float(value))

    def __len__(self) -> int:
        return len(self.actions)


def n_step_values(rewards: np.ndarray, values: np.ndarray, n: int, discount: float) -> np.ndarray:
    """float64 ``[M]``: ``z_t = sum_{j<n} d^j r_{t+j} + d^n v_{t+n}`` (terms past the end
    are 0). ``rewards``, ``values``: ``[M]``."""
    m = len(rewards)
    z = np.zeros(m)
    for j in range(n):
        z[: m - j] += discount**j * rewards[j:]
    if n < m:
        z[: m - n] += discount**n * values[n:]
    return z


@dataclass
class Batch:
    """A training batch (``B`` positions, ``K`` unroll steps), NumPy arrays.

    Attributes:
        vectors: float32 ``[B, F]``; grids: uint8 ``[B, G, G]``: observations at ``t``.
        actions: int64 ``[B, K]``.
        values: float32 ``[B, K + 1]``; rewards: float32 ``[B, K + 1]`` (column 0 unused).
        policies: float32 ``[B, K + 1, 3]``; policy_mask: float32 ``[B, K + 1]``.
    """

    vectors: np.ndarray
    grids: np.ndarray
    actions: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    policies: np.ndarray
    policy_mask: np.ndarray


class Replay:
    """The newest games, up to ``capacity`` positions in all (the oldest go first; the
    newest game is always kept whole).

    Args:
        capacity: positions kept (the paper's replay_size).
        td_steps: ``n`` of the value targets.
        discount: reward discount.
    """

    def __init__(self, capacity: int, td_steps: int, discount: float) -> None:
        self.capacity, self.td_steps, self.discount = capacity, td_steps, discount
        self.games: list[dict[str, np.ndarray]] = []

    @property
    def positions(self) -> int:
        return sum(len(g["actions"]) for g in self.games)

    def add(self, traj: Trajectory) -> None:
        """Store a finished game (its value targets computed now)."""
        if not len(traj):
            return
        rewards = np.asarray(traj.rewards)
        self.add_arrays(
            {
                "vectors": np.stack(traj.vectors).astype(np.float32),
                "grids": np.stack(traj.grids).astype(np.uint8),
                "actions": np.asarray(traj.actions, dtype=np.int64),
                "rewards": rewards.astype(np.float32),
                "policies": np.stack(traj.policies).astype(np.float32),
                "targets": n_step_values(
                    rewards, np.asarray(traj.values), self.td_steps, self.discount
                ).astype(np.float32),
            }
        )

    def add_arrays(self, game: dict[str, np.ndarray]) -> None:
        self.games.append(game)
        total = self.positions
        while len(self.games) > 1 and total > self.capacity:
            total -= len(self.games.pop(0)["actions"])

    def sample(self, batch: int, unroll: int, rng: np.random.Generator) -> Batch:
        """``batch`` positions drawn uniformly over all stored positions."""
        sizes = np.array([len(g["actions"]) for g in self.games])
        if sizes.sum() == 0:
            raise ValueError("the replay buffer is empty")
        flat = rng.integers(0, sizes.sum(), batch)
        which = np.searchsorted(np.cumsum(sizes), flat, side="right")
        starts = flat - np.concatenate([[0], np.cumsum(sizes)])[which]
        k1 = unroll + 1
        out = Batch(
            vectors=np.empty((batch, self.games[0]["vectors"].shape[1]), np.float32),
            grids=np.empty((batch, *self.games[0]["grids"].shape[1:]), np.uint8),
            actions=rng.integers(0, NUM_ACTIONS, (batch, unroll)),
            values=np.zeros((batch, k1), np.float32),
            rewards=np.zeros((batch, k1), np.float32),
            policies=np.full((batch, k1, NUM_ACTIONS), 1 / NUM_ACTIONS, np.float32),
            policy_mask=np.zeros((batch, k1), np.float32),
        )
        for i, (g, t) in enumerate(zip(which, starts)):
            game = self.games[g]
            m = len(game["actions"])
            out.vectors[i] = game["vectors"][t]
            out.grids[i] = game["grids"][t]
            end = min(t + k1, m)
            span = end - t
            out.values[i, :span] = game["targets"][t:end]
            out.policies[i, :span] = game["policies"][t:end]
            out.policy_mask[i, :span] = 1.0
            steps = min(t + unroll, m) - t
            out.actions[i, :steps] = game["actions"][t : t + steps]
            out.rewards[i, 1 : steps + 1] = game["rewards"][t : t + steps]
        return out

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        return {"games": [dict(g) for g in self.games]}

    def load_state_dict(self, state: dict) -> None:
        self.games = [{k: np.asarray(v) for k, v in g.items()} for g in state["games"]]
