"""The planner's networks (MuZero, Schrittwieser et al. 2020; Wang et al., arXiv:2305.07440,
section 4.3.1): representation, dynamics and prediction.

* **representation** ``h(vector, grid) -> s``: a small convolutional encoder of the
  occupancy image and an MLP of the feature vector, concatenated and passed through an
  MLP (the paper's Figure 4 uses ResNet blocks and embeddings; here two strided
  convolutions stand in, for CPU); the latent state ``s [B, latent]`` is min-max scaled
  to ``[0, 1]`` per sample, as in MuZero.
* **dynamics** ``g(s, a) -> (s', r)``: an MLP of the latent state and the one-hot action,
  giving the next latent state (scaled the same way) and the reward.
* **prediction** ``f(s) -> (logits [B, 3], v)``: policy logits over Drop, Copy, NoCopy
  and the value.

Values and rewards are scalars (MuZero's categorical supports are left out): the value
is the remaining return over the program's return bound, the reward the step's reward
over the bound times ``N`` (per-buffer units, so that it is of order one).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

#: actions of the game (Drop, Copy, NoCopy)
NUM_ACTIONS = 3


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers of ``sizes`` with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def scale_latent(s: torch.Tensor) -> torch.Tensor:
    """Min-max scale each row of ``s [B, L]`` to ``[0, 1]``."""
    lo = s.min(dim=1, keepdim=True).values
    hi = s.max(dim=1, keepdim=True).values
    return (s - lo) / (hi - lo).clamp_min(1e-5)


class MuZeroNet(nn.Module):
    """Representation, dynamics and prediction networks (see the module docstring).

    Args:
        vector_size: length of the feature vector (:attr:`EncoderSpec.vector_size`).
        grid: side of the occupancy image (a multiple of 4).
        hidden: width of the hidden layers.
        latent: size of the latent state.
    """

    def __init__(self, vector_size: int, grid: int, hidden: int = 128, latent: int = 64) -> None:
        super().__init__()
        self.latent = latent
        side = grid // 4
        self.image = nn.Sequential(
            nn.Conv2d(1, 8, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(16 * side * side, hidden),
            nn.ReLU(),
        )
        self.vector = nn.Sequential(nn.Linear(vector_size, hidden), nn.ReLU())
        self.represent_head = mlp([2 * hidden, hidden, latent])
        self.dynamics_state = mlp([latent + NUM_ACTIONS, hidden, latent])
        self.dynamics_reward = mlp([latent + NUM_ACTIONS, hidden, 1])
        self.policy = mlp([latent, hidden, NUM_ACTIONS])
        self.value = mlp([latent, hidden, 1])

    def represent(self, vector: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        """Latent states ``[B, latent]`` of observations ``vector [B, F]``, ``grid [B, G, G]``."""
        img = self.image(grid.float().unsqueeze(1))
        return scale_latent(self.represent_head(torch.cat([self.vector(vector), img], dim=1)))

    def dynamics(
        self, state: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(next state [B, latent], reward [B])`` from ``state [B, latent]``, ``action [B]``."""
        x = torch.cat([state, nn.functional.one_hot(action, NUM_ACTIONS).float()], dim=1)
        return scale_latent(self.dynamics_state(x)), self.dynamics_reward(x).squeeze(1)

    def predict(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(policy logits [B, 3], value [B])`` of ``state [B, latent]``."""
        return self.policy(state), self.value(state).squeeze(1)


class NumpyMLP:
    """An :func:`mlp` copied into NumPy for fast single-sample inference in the search
    (a torch call costs tens of microseconds per layer at batch 1)."""

    def __init__(self, seq: nn.Sequential) -> None:
        linears = [m for m in seq if isinstance(m, nn.Linear)]
        self.weights = [m.weight.detach().double().numpy().copy() for m in linears]
        self.biases = [m.bias.detach().double().numpy().copy() for m in linears]

    def __call__(self, x: np.ndarray, first: np.ndarray | None = None) -> np.ndarray:
        """The MLP of ``x [in]``; ``first`` (``[hidden]``), if given, is added to the first
        layer's pre-activation (a one-hot action's column)."""
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = w @ x + b
            if i == 0 and first is not None:
                x = x + first
            if i < len(self.weights) - 1:
                x = np.maximum(x, 0.0)
        return x

    def batch(self, x: np.ndarray, first: np.ndarray | None = None) -> np.ndarray:
        """The MLP of each row of ``x [B, in]``, ``[B, out]``; ``first`` (``[B, hidden]``),
        if given, is added to the first layer's pre-activation row by row.

        The same operations in the same order as :meth:`__call__` (``x @ w.T`` over the
        weights as stored): at ``B = 1`` NumPy hands both to the same BLAS matrix-vector
        product and the results are bit for bit the same; at ``B > 1`` a matrix product
        may round the last bit differently."""
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = x @ w.T + b
            if i == 0 and first is not None:
                x = x + first
            if i < len(self.weights) - 1:
                x = np.maximum(x, 0.0)
        return x


class NumpyHeads:
    """Dynamics and prediction of a :class:`MuZeroNet`, frozen into NumPy: one sample
    (:meth:`dynamics`, :meth:`predict`) or a batch (:meth:`dynamics_batch`,
    :meth:`predict_batch`, for the batched search of :mod:`~egrl.agents.muzero.batched`).

    The latent state is float64 ``[latent]`` (``[B, latent]`` in a batch); an action
    enters the dynamics as the column of the first layer that its one-hot input selects.
    """

    def __init__(self, net: MuZeroNet) -> None:
        self.latent = net.latent
        self.state = NumpyMLP(net.dynamics_state)
        self.reward = NumpyMLP(net.dynamics_reward)
        self.policy = NumpyMLP(net.policy)
        self.value = NumpyMLP(net.value)
        # split each dynamics MLP's first layer into its state and action columns
        self.action_cols = []
        for m in (self.state, self.reward):
            w0 = m.weights[0]
            self.action_cols.append(w0[:, self.latent :].T.copy())  # [3, hidden]
            m.weights[0] = w0[:, : self.latent].copy()

    def dynamics(self, s: np.ndarray, action: int) -> tuple[np.ndarray, float]:
        """``(next latent state [latent], reward)`` of ``s [latent]`` and ``action``."""
        nxt = self.state(s, first=self.action_cols[0][action])
        lo, hi = nxt.min(), nxt.max()
        nxt = (nxt - lo) / max(hi - lo, 1e-5)
        return nxt, float(self.reward(s, first=self.action_cols[1][action])[0])

    def predict(self, s: np.ndarray) -> tuple[np.ndarray, float]:
        """``(policy logits [3], value)`` of ``s [latent]``."""
        return self.policy(s), float(self.value(s)[0])

    def dynamics_batch(self, s: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(next latent states [B, latent], rewards [B])`` of ``s [B, latent]`` and
        int ``actions [B]`` (row by row what :meth:`dynamics` computes)."""
        nxt = self.state.batch(s, first=self.action_cols[0][actions])
        lo = nxt.min(axis=1, keepdims=True)
        hi = nxt.max(axis=1, keepdims=True)
        nxt = (nxt - lo) / np.maximum(hi - lo, 1e-5)
        return nxt, self.reward.batch(s, first=self.action_cols[1][actions])[:, 0]

    def predict_batch(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(policy logits [B, 3], values [B])`` of ``s [B, latent]``."""
        return self.policy.batch(s), self.value.batch(s)[:, 0]
