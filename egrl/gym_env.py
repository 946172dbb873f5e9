"""A gymnasium view of an :class:`egrl.Env`: one-step mapping episodes.

>>> import gymnasium as gym
>>> import egrl.gym_env  # registers "egrl/Mapping-v0"
>>> env = gym.make("egrl/Mapping-v0", hwmodel="nnpi", workload="resnet50")
>>> obs, info = env.reset(seed=0)          # float32 [N, F]: the policies' node features
>>> obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

As in EGRL (Table 2: one step per episode), an episode is one decision: the agent
sees the decision graph and answers with a whole map ``[N, H]``; the hardware
model evaluates it (Algorithm 1) and the episode ends.

The action space is a flat ``MultiDiscrete`` of length ``N * H`` (the map in row-major
order: unit 0's heads, then unit 1's, ...), which Stable-Baselines3 and other RL
libraries accept; ``flat_actions=False`` gives the ``[N, H]`` space instead. Either way
:meth:`MappingEnv.step` takes a flat action or a map ``[N, H]``. :class:`RecordBest`
keeps the best map an agent proposed (``docs/gym.md``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from egrl.env import Env, make_env

ENV_ID = "egrl/Mapping-v0"

#: every featurised value lies in [-FEATURE_BOUND, FEATURE_BOUND]: the featuriser's
#: ``sign(x) * log1p(|x|)`` of a finite float64 (:mod:`egrl.features`)
FEATURE_BOUND = float(np.log1p(np.finfo(np.float64).max))


class MappingEnv(gym.Env):
    """One-step episodes over an :class:`~egrl.env.Env`.

    Observation: the decision graph's node features as the policies read them,
    ``env.graph.x`` (featurised by :func:`egrl.features.featurise`), float32
    ``[N, F]`` in ``[-FEATURE_BOUND, FEATURE_BOUND]`` (about +-709.8, the featuriser's
    range); with ``observe_edges=True`` a ``Dict`` of those (``"x"``) and the edges
    (``"edge_index"``, int64 ``[2, E]`` in ``0..N-1``). Both are the same in every
    episode.

    Action: one choice per unit and head: a flat ``MultiDiscrete`` of length ``N * H``
    (the map ``[N, H]`` in row-major order; the default, what Stable-Baselines3
    accepts) or, with ``flat_actions=False``, a ``MultiDiscrete`` of shape ``[N, H]``.
    :meth:`step` takes either form.

    Reward: Algorithm 1's reward of the map. ``info`` holds ``latency_s`` (``None``
    where the chip did not run the map), ``speedup``, ``valid``, ``reassigned_ratio``
    and ``rectified`` (int64 ``[N, H]``, the map the compiler repaired it to).

    Args:
        env: the bound problem.
        observe_edges: also observe the edges (a ``Dict`` observation).
        flat_actions: a flat action space of length ``N * H`` (default) rather than
            ``[N, H]``.
    """

    metadata = {"render_modes": []}

    def __init__(self, env: Env, observe_edges: bool = False, flat_actions: bool = True) -> None:
        self.env = env
        self.observe_edges = bool(observe_edges)
        self.flat_actions = bool(flat_actions)
        graph = env.graph
        self._x = np.ascontiguousarray(graph.x.detach().cpu().numpy(), dtype=np.float32)
        self._edges = np.ascontiguousarray(graph.edge_index.detach().cpu().numpy(), np.int64)
        bound = np.float32(FEATURE_BOUND)
        x_space = spaces.Box(-bound, bound, shape=self._x.shape, dtype=np.float32)
        if self.observe_edges:
            n = max(env.num_units - 1, 0)
            edge_space = spaces.Box(0, n, shape=self._edges.shape, dtype=np.int64)
            self.observation_space = spaces.Dict({"x": x_space, "edge_index": edge_space})
        else:
            self.observation_space = x_space
        self.map_shape = (env.num_units, env.num_heads)
        nvec = np.tile(env.num_choices, (env.num_units, 1))
        self.action_space = spaces.MultiDiscrete(nvec.reshape(-1) if self.flat_actions else nvec)
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

    def to_map(self, action) -> np.ndarray:
        """The map int ``[N, H]`` of an action: flat ``[N * H]`` (row-major) or ``[N, H]``.

        Raises:
            ValueError: ``action`` has neither shape.
        """
        arr = np.asarray(action)
        n, h = self.map_shape
        if arr.shape == (n * h,):
            return arr.reshape(n, h)
        if arr.shape == (n, h):
            return arr
        raise ValueError(
            f"an action must be a flat array of length {n * h} (units x heads, row-major) "
            f"or a map of shape {[n, h]}, got shape {list(arr.shape)}"
        )

    def step(self, action) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Evaluate the map ``action`` (int ``[N * H]`` or ``[N, H]``); the episode ends.

        Raises:
            RuntimeError: the episode is over (call :meth:`reset`).
            ValueError: ``action`` is not a map of this problem.
        """
        if self._done:
            raise RuntimeError("the episode is over: call reset() before step()")
        ev = self.env.evaluate(self.to_map(action)[None])
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


class RecordBest(gym.Wrapper):
    """Remembers the best map proposed through it (any agent, any library).

    Attributes:
        best_reward: the highest reward seen (``-inf`` before the first step).
        best_map: int64 ``[N, H]``: the map that earned it (``None`` before).
        best_info: the ``info`` of that step.
        num_steps: steps taken through the wrapper.
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.best_reward = -np.inf
        self.best_map: np.ndarray | None = None
        self.best_info: dict[str, Any] = {}
        self.num_steps = 0

    def step(self, action) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step the wrapped env; keep the map if it beats the best so far."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.num_steps += 1
        if reward > self.best_reward:
            self.best_reward = float(reward)
            self.best_map = np.array(self.env.unwrapped.to_map(action), dtype=np.int64)
            self.best_info = dict(info)
        return obs, reward, terminated, truncated, info


def make_gym_env(
    hwmodel="nnpi",
    workload="resnet50",
    observe_edges: bool = False,
    flat_actions: bool = True,
    **kw,
) -> MappingEnv:
    """:func:`egrl.make_env` wrapped in a :class:`MappingEnv`.

    Args:
        hwmodel, workload, **kw: as for :func:`egrl.make_env` (names or objects,
            ``invalid_reward_scale``, hardware parameters).
        observe_edges, flat_actions: see :class:`MappingEnv`.
    """
    env = make_env(hwmodel=hwmodel, workload=workload, **kw)
    return MappingEnv(env, observe_edges, flat_actions)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="egrl.gym_env:make_gym_env")
