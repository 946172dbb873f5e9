"""A gymnasium view of an :class:`egrl.Env`: one-step mapping episodes.

>>> import gymnasium as gym
>>> import egrl.gym_env  # registers "egrl/Mapping-v0"
>>> env = gym.make("egrl/Mapping-v0", hwmodel="nnpi", workload="resnet50")
>>> obs, info = env.reset(seed=0)          # float32 [N, F]: the policies' node features
>>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

As in EGRL (Table 2: one step per episode), an episode is one decision: the agent
sees the decision graph and answers with a whole map ``[N, H]``; the hardware
model evaluates it (Algorithm 1) and the episode ends.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from egrl.env import Env, make_env

ENV_ID = "egrl/Mapping-v0"


class MappingEnv(gym.Env):
    """One-step episodes over an :class:`~egrl.env.Env`.

    Observation: the decision graph's node features as the policies read them,
    ``env.graph.x`` (featurised by :func:`egrl.features.featurise`), float32
    ``[N, F]``; with ``observe_edges=True`` a ``Dict`` of those (``"x"``) and the
    edges (``"edge_index"``, int64 ``[2, E]``). Both are the same in every episode.

    Action: ``MultiDiscrete`` of shape ``[N, H]``: one choice per unit and head.

    Reward: Algorithm 1's reward of the map. ``info`` holds ``latency_s`` (``None``
    where the chip did not run the map), ``speedup``, ``valid``, ``reassigned_ratio``
    and ``rectified`` (int64 ``[N, H]``, the map the compiler repaired it to).

    Args:
        env: the bound problem.
        observe_edges: also observe the edges (a ``Dict`` observation).
    """

    metadata = {"render_modes": []}

    def __init__(self, env: Env, observe_edges: bool = False) -> None:
        self.env = env
        self.observe_edges = bool(observe_edges)
        graph = env.graph
        self._x = np.ascontiguousarray(graph.x.detach().cpu().numpy(), dtype=np.float32)
        self._edges = np.ascontiguousarray(graph.edge_index.detach().cpu().numpy(), np.int64)
        x_space = spaces.Box(-np.inf, np.inf, shape=self._x.shape, dtype=np.float32)
        if self.observe_edges:
            n = max(env.num_units - 1, 0)
            edge_space = spaces.Box(0, n, shape=self._edges.shape, dtype=np.int64)
            self.observation_space = spaces.Dict({"x": x_space, "edge_index": edge_space})
        else:
            self.observation_space = x_space
        nvec = np.tile(env.num_choices, (env.num_units, 1))
        self.action_space = spaces.MultiDiscrete(nvec)
        self._done = True

    def _observation(self) -> np.ndarray | dict[str, np.ndarray]:
        if self.observe_edges:
            return {"x": self._x.copy(), "edge_index": self._edges.copy()}
        return self._x.copy()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray | dict[str, np.ndarray], dict[str, Any]]:
        """Start an episode: the observation and an empty ``info``."""
        super().reset(seed=seed)
        self._done = False
        return self._observation(), {}

    def step(self, action) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Evaluate the map ``action`` int ``[N, H]``; the episode ends.

        Raises:
            RuntimeError: the episode is over (call :meth:`reset`).
            ValueError: ``action`` is not a map of this problem.
        """
        if self._done:
            raise RuntimeError("the episode is over: call reset() before step()")
        ev = self.env.evaluate(np.asarray(action)[None])
        self._done = True
        latency = float(ev.latency_s[0])
        info = {
            "latency_s": None if np.isnan(latency) else latency,
            "speedup": float(ev.speedup[0]),
            "valid": bool(ev.valid[0]),
            "reassigned_ratio": float(ev.reassigned_ratio[0]),
            "rectified": ev.rectified[0],
        }
        return self._observation(), float(ev.reward[0]), True, False, info

    def __repr__(self) -> str:
        return f"MappingEnv({self.env!r})"


def make_gym_env(
    hwmodel="nnpi", workload="resnet50", observe_edges: bool = False, **kw
) -> MappingEnv:
    """:func:`egrl.make_env` wrapped in a :class:`MappingEnv`.

    Args:
        hwmodel, workload, **kw: as for :func:`egrl.make_env` (names or objects,
            ``invalid_reward_scale``, hardware parameters).
        observe_edges: see :class:`MappingEnv`.
    """
    return MappingEnv(make_env(hwmodel=hwmodel, workload=workload, **kw), observe_edges)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="egrl.gym_env:make_gym_env")
