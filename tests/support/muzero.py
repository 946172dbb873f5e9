"""MuZero's small encoder and networks."""

from __future__ import annotations

import torch

from egrl.agents.muzero import Encoder, EncoderSpec, MuZeroNet
from hwmodels.tpu import Program

#: MuZero's small encoder and networks
MUZERO_SMALL = dict(grid=8, window=16, profile_bins=16, supply_window=8, hidden=16, latent=8)


def net_for(program: Program, zero_value: bool = False, seed: int = 0) -> tuple[MuZeroNet, Encoder]:
    """A small network (seeded by ``seed``) and an encoder of ``program`` (``zero_value``:
    the value head outputs 0)."""
    spec = EncoderSpec(grid=8, window=16, profile_bins=16, supply_window=8)
    torch.manual_seed(seed)
    net = MuZeroNet(spec.vector_size, spec.grid, hidden=16, latent=8)
    if zero_value:  # leaf values 0: the search's values are the rewards it has seen
        torch.nn.init.zeros_(net.value[-1].weight)
        torch.nn.init.zeros_(net.value[-1].bias)
    return net, Encoder(program, spec)
