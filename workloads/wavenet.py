"""A Parallel-WaveNet-like model, built on demand for data-movement elimination.

Parallel WaveNet (van den Oord et al., *Parallel WaveNet: Fast High-Fidelity Speech
Synthesis*, ICML 2018) is a stack of inverse-autoregressive flows, each a WaveNet of
dilated causal convolutions conditioned on an upsampled mel spectrogram. Zheng et al.
(*Optimizing Memory-Access Patterns for Deep Learning Accelerators*, arXiv:2002.12798)
removed 123 of its 124 load/store pairs by data-movement elimination. The model here
has the same kinds of data movement a PyTorch implementation of it has:

* conditioning upsampled by repeating each frame ``hop`` times (unsqueeze, expand,
  reshape);
* the causal shift of each flow's input (pad one step on the left, drop the last);
* a causal dilated convolution per layer (left pad by the dilation);
* gated activations on the two halves of the filter output (``chunk``);
* skip connections gathered with ``torch.stack`` and summed;
* a per-sample output head applied channels-last (transpose, linear, transpose);
* the location and log-scale taken as channel slices of the head's output;
* the log-scales of all flows concatenated, and the audio flattened to ``[B, T]``.

:func:`wavenet_workload` imports it with :func:`workloads.from_torch`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from workloads.ir import Workload

#: layers per flow in Parallel WaveNet (four flows of 10, 10, 10 and 30 layers)
PAPER_FLOWS = (10, 10, 10, 30)


class GatedLayer(nn.Module):
    """One residual layer: causal dilated conv, conditioning, gate, residual and skip."""

    def __init__(self, channels: int, cond: int, skip: int, dilation: int) -> None:
        super().__init__()
        self.dilation = dilation
        self.filter = nn.Conv1d(channels, 2 * channels, 2, dilation=dilation)
        self.cond = nn.Conv1d(cond, 2 * channels, 1)
        self.res = nn.Conv1d(channels, channels, 1)
        self.skip = nn.Conv1d(channels, skip, 1)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x ``[B, C, T]``, c ``[B, M, T]`` -> (residual ``[B, C, T]``, skip ``[B, S, T]``)."""
        h = self.filter(F.pad(x, (self.dilation, 0))) + self.cond(c)
        a, b = h.chunk(2, dim=1)
        z = torch.tanh(a) * torch.sigmoid(b)
        return x + self.res(z), self.skip(z)


class Flow(nn.Module):
    """One inverse-autoregressive flow: a WaveNet giving location and log-scale."""

    def __init__(self, layers: int, channels: int, cond: int, skip: int, cycle: int) -> None:
        super().__init__()
        self.inp = nn.Conv1d(1, channels, 1)
        self.layers = nn.ModuleList(
            GatedLayer(channels, cond, skip, 2 ** (k % cycle)) for k in range(layers)
        )
        self.head = nn.Linear(skip, skip)
        self.out = nn.Conv1d(skip, 2, 1)

    def forward(self, z: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z ``[B, 1, T]`` -> (new z ``[B, 1, T]``, log-scale ``[B, 1, T]``)."""
        shifted = F.pad(z, (1, 0))[:, :, :-1]  # causal: sample t sees samples before t
        x = self.inp(shifted)
        skips = []
        for layer in self.layers:
            x, s = layer(x, c)
            skips.append(s)
        h = torch.relu(torch.stack(skips, dim=0).sum(dim=0))
        h = torch.relu(self.head(h.transpose(1, 2))).transpose(1, 2)  # channels-last head
        o = self.out(h)
        mu, log_s = o[:, 0:1], o[:, 1:2]
        return z * torch.exp(log_s) + mu, log_s


class ParallelWaveNetLike(nn.Module):
    """Flows of WaveNets on upsampled mel conditioning.

    Args:
        flows: layers of each flow.
        channels, skip: residual and skip channels.
        mels: mel bands of the conditioning.
        hop: audio samples per conditioning frame.
        cycle: dilations cycle through ``1, 2, ..., 2**(cycle-1)``.
    """

    def __init__(
        self,
        flows: Sequence[int] = PAPER_FLOWS,
        channels: int = 64,
        skip: int = 64,
        mels: int = 80,
        hop: int = 256,
        cycle: int = 10,
    ) -> None:
        super().__init__()
        self.hop = hop
        self.flows = nn.ModuleList(Flow(n, channels, mels, skip, cycle) for n in flows)

    def forward(self, z: torch.Tensor, mel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z ``[B, 1, T]`` noise, mel ``[B, M, T / hop]`` -> (audio ``[B, T]``, log-scales
        ``[B, flows, T]``)."""
        b, m, frames = mel.shape
        c = mel.unsqueeze(-1).expand(b, m, frames, self.hop).reshape(b, m, frames * self.hop)
        scales = []
        for flow in self.flows:
            z, log_s = flow(z, c)
            scales.append(log_s)
        audio = z.transpose(1, 2).reshape(b, -1)
        return audio, torch.cat(scales, dim=1)


def example_inputs(frames: int = 4, mels: int = 80, hop: int = 256, batch: int = 1, seed: int = 0):
    """``(z [B, 1, frames*hop], mel [B, mels, frames])`` from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(batch, 1, frames * hop, generator=g),
        torch.randn(batch, mels, frames, generator=g),
    )


def wavenet_workload(
    granularity: str = "op",
    flows: Sequence[int] = PAPER_FLOWS,
    channels: int = 64,
    frames: int = 4,
    hop: int = 256,
    seed: int = 0,
) -> Workload:
    """The Parallel-WaveNet-like model imported at ``granularity`` (random weights)."""
    torch.manual_seed(seed)
    model = ParallelWaveNetLike(flows, channels=channels, skip=channels, hop=hop)
    name = "parallel-wavenet-like" + ("@op" if granularity == "op" else "")
    return _import(model, example_inputs(frames, hop=hop, seed=seed), name, granularity)


def _import(model: nn.Module, inputs, name: str, granularity: str) -> Workload:
    from workloads.torch_import import from_torch

    return from_torch(model, inputs, name=name, granularity=granularity)
