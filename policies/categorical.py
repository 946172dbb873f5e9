"""Masked multi-head categoricals: the action format every policy shares.

A policy over ``N`` decision units and ``H`` decision heads scores ``C = max(num_choices)``
choices per unit and head. Head ``h`` has only ``num_choices[h]`` real choices; the
entries beyond them are masked (logit ``-inf``, probability 0) so that one dense
``[..., N, H, C]`` tensor holds every head.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor


def check_num_choices(num_choices: Sequence[int]) -> list[int]:
    """Validate ``num_choices`` (one positive count per head) and return it as a list."""
    counts = [int(c) for c in num_choices]
    if not counts:
        raise ValueError("num_choices is empty: a policy needs at least one decision head")
    bad = [(h, c) for h, c in enumerate(counts) if c < 1]
    if bad:
        raise ValueError(f"num_choices must be >= 1 for every head; got {bad} as (head, count)")
    return counts


def choice_mask(num_choices: Sequence[int], device: torch.device | str | None = None) -> Tensor:
    """Bool ``[H, C]``: True where choice ``c`` exists for head ``h``."""
    counts = torch.as_tensor(check_num_choices(num_choices), device=device)
    width = int(counts.max())
    return torch.arange(width, device=device)[None, :] < counts[:, None]


def mask_logits(logits: Tensor, mask: Tensor) -> Tensor:
    """Set the logits ``[..., H, C]`` of missing choices (``~mask``, ``[H, C]``) to ``-inf``."""
    return logits.masked_fill(~mask, float("-inf"))


def gumbel_argmax(logits: Tensor, generator: torch.Generator) -> Tensor:
    """One categorical sample per row of ``logits [..., C]`` (Gumbel-max), long ``[...]``.

    ``-inf`` logits are never chosen. The noise comes from ``generator`` only.
    """
    uniform = torch.rand(
        logits.shape, generator=generator, device=logits.device, dtype=logits.dtype
    )
    tiny = torch.finfo(logits.dtype).tiny
    gumbel = -torch.log(-torch.log(uniform.clamp_min(tiny)))
    return torch.argmax(logits + gumbel, dim=-1)


def require_generator(generator: torch.Generator | None, what: str) -> torch.Generator:
    """Return ``generator`` or fail: random draws never come from the global state."""
    if generator is None:
        raise ValueError(f"{what} needs a torch.Generator (no global random state is used)")
    return generator


def safe_log(probs: Tensor) -> Tensor:
    """``log(probs)`` floored at ``log(tiny)`` (about -87 in float32): finite, and its
    gradient at 0 probabilities stays finite, so ``p * log p`` is 0 there with no NaN."""
    return torch.log(probs.clamp_min(torch.finfo(probs.dtype).tiny))


def entropy(probs: Tensor) -> Tensor:
    """Entropy ``-sum p log p`` over the last dim of ``probs [..., C]``: ``[...]``.

    Masked choices (probability 0) add 0, and the gradient stays finite.
    """
    return -(probs * safe_log(probs)).sum(dim=-1)


def sample_maps(
    logits: Tensor,
    num_samples: int,
    generator: torch.Generator | None,
    greedy: bool = False,
    noise_std: float = 0.0,
) -> Tensor:
    """Sample (or argmax) ``num_samples`` maps long ``[S, N, H]`` from logits ``[N, H, C]``.

    ``greedy=True`` takes each decision's most likely choice; with ``noise_std > 0`` it is
    the noisy rollout of EGRL's learner (Appendix C, "noise in its action space"): the
    argmax of the probabilities plus ``N(0, noise_std^2)`` noise, drawn independently per
    sample, choice and decision; missing choices are never taken. Noise on the
    probabilities keeps exploring after the policy's entropy has collapsed, where noise on
    logits of any fixed size no longer changes a decision (docs/learner.md). ``greedy=False``
    draws each decision from the softmax (Gumbel-max) and takes no noise. All noise comes
    from ``generator``, which may be ``None`` only for noise-free greedy maps.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if noise_std < 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    logits = logits.expand(num_samples, *logits.shape)
    if not greedy:
        if noise_std > 0:
            raise ValueError("noise_std > 0 perturbs the greedy map: pass greedy=True")
        return gumbel_argmax(logits, require_generator(generator, "sampling actions"))
    if noise_std == 0:
        return torch.argmax(logits, dim=-1)
    gen = require_generator(generator, "noisy action selection")
    probs = torch.log_softmax(logits, dim=-1).exp()
    noise = torch.randn(logits.shape, generator=gen, device=logits.device, dtype=logits.dtype)
    scores = (probs + noise_std * noise).masked_fill(torch.isneginf(logits), float("-inf"))
    return torch.argmax(scores, dim=-1)


def one_hot_maps(maps: Tensor, num_choices: Sequence[int]) -> Tensor:
    """Maps long ``[..., N, H]`` as float one-hot actions ``[..., N, H, C]`` (critic input)."""
    counts = torch.as_tensor(check_num_choices(num_choices), device=maps.device)
    if maps.dim() < 1 or maps.size(-1) != counts.numel():
        raise ValueError(f"maps must end in H={counts.numel()} heads, got {list(maps.shape)}")
    if bool((maps < 0).any()) or bool((maps >= counts).any()):
        raise ValueError(f"map entries out of range for num_choices {counts.tolist()}")
    return torch.nn.functional.one_hot(maps, int(counts.max())).float()


def to_numpy_maps(maps) -> np.ndarray:
    """Maps from a policy (tensor or array) as int64 numpy, ``[B, N, H]``."""
    if isinstance(maps, torch.Tensor):
        return maps.detach().cpu().numpy().astype(np.int64)
    return np.asarray(maps, dtype=np.int64)
