"""The roofline cost model of one instruction, and the latency of a whole program.

An instruction ``t`` computes for ``compute_s[t] = (2 * macs + vector_ops) / peak`` and
moves its buffers' bytes from (or to) the memory each buffer was placed in; it takes
the longer of the two (a roofline)::

    L_t(S) = max(compute_s[t], hbm_bytes / hbm_bw + cmem_bytes / cmem_bw)

where ``S`` is the set of its buffers in CMEM. The game's benefit of a buffer and the
supply of an instruction are read from ``L_t`` (Appendix A of Wang et al., 2023, with
this model in place of their per-instruction hardware measurements).

The program's latency adds one effect the game's proxy reward leaves out: a copy
between HBM and CMEM streams through HBM, so the bytes copied during an instruction
share HBM bandwidth with the instruction's own HBM traffic (``contention=True``).
"""

from __future__ import annotations

import numpy as np

from hwmodels.tpu.params import PS_PER_S, TPUParams


def instruction_latency_s(
    compute_s: np.ndarray, hbm_bytes: np.ndarray, cmem_bytes: np.ndarray, params: TPUParams
) -> np.ndarray:
    """Roofline latency, seconds; all arguments broadcast (e.g. ``[T]``)."""
    memory = hbm_bytes / (params.hbm_gbps * 1e9) + cmem_bytes / (params.cmem_gbps * 1e9)
    return np.maximum(compute_s, memory)


def program_latency_s(
    compute_s: np.ndarray,
    time: np.ndarray,
    size: np.ndarray,
    in_cmem: np.ndarray,
    copy_ps: np.ndarray | None,
    params: TPUParams,
) -> float:
    """Latency of a program for one layout, seconds.

    Args:
        compute_s: float ``[T]``, compute time of each instruction.
        time, size: int ``[N]``, each buffer's instruction and bytes.
        in_cmem: bool ``[N]``, the buffer is read or written in CMEM.
        copy_ps: int ``[T]``, copy time (ps) the layout's copies spend in each
            instruction, or ``None`` to leave copies out (then the latency is exactly
            the all-HBM latency minus the game's return).
        params: the chip.
    """
    num = len(compute_s)
    in_cmem = np.asarray(in_cmem, dtype=bool)
    hbm = np.bincount(time, weights=np.where(in_cmem, 0, size), minlength=num)
    cmem = np.bincount(time, weights=np.where(in_cmem, size, 0), minlength=num)
    if copy_ps is not None:
        hbm = hbm + np.asarray(copy_ps, dtype=np.float64) / PS_PER_S * params.copy_gbps * 1e9
    return float(instruction_latency_s(compute_s, hbm, cmem, params).sum())
