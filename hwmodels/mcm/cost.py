"""The analytical cost model, vectorised over a batch of partitions ``[B, N]``.

Each chip runs its nodes one after the other and moves its share of the ring traffic;
the package is a pipeline, so its throughput is the reciprocal of the slowest chip:

* ``compute[d]``: sum of ``compute_ps`` of the nodes on chip ``d``;
* ``link[d]``: bytes crossing link ``d -> d+1``: every output tensor travels once
  from its producer's chip ``a`` to the farthest chip ``b`` that reads it, crossing
  links ``a .. b-1`` (chips in between forward it);
* ``time[d] = compute[d] + (link[d-1] + link[d]) * ps_per_byte``: a chip receives
  on its input link and sends on its output link, not overlapped with compute;
* ``latency = max_d time[d]``, ``throughput = 1 / latency``.

Memory (the bytes a chip must hold, checked against its SRAM): the resident bytes of
its nodes (weights, output tensors, host inputs) plus one buffer for every tensor
produced on another chip and read on this one. Tensors only forwarded through a chip
need no buffer.
"""

from __future__ import annotations

import numpy as np

from hwmodels.mcm.dataflow import Dataflow


def chip_sums(parts: np.ndarray, values: np.ndarray, num_chips: int) -> np.ndarray:
    """int64 ``[B, C]``: sum of ``values`` (``[N]`` or ``[B, N]``) over the nodes of each chip."""
    b = len(parts)
    idx = parts + num_chips * np.arange(b, dtype=np.int64)[:, None]
    weights = np.broadcast_to(values, parts.shape).ravel().astype(np.float64)
    sums = np.bincount(idx.ravel(), weights=weights, minlength=b * num_chips)
    return np.rint(sums).astype(np.int64).reshape(b, num_chips)


def link_bytes(flow: Dataflow, parts: np.ndarray) -> np.ndarray:
    """int64 ``[B, C]``: bytes crossing link ``d -> d+1`` (the last column is always 0)."""
    c = flow.num_chips
    far = flow.farthest_reader(parts)
    # +bytes where a tensor enters the ring, -bytes where it leaves; prefix sum over d.
    delta = chip_sums(parts, flow.out_bytes, c) - chip_sums(far, flow.out_bytes, c)
    return np.cumsum(delta, axis=1)


def compute_ps(flow: Dataflow, parts: np.ndarray) -> np.ndarray:
    """int64 ``[B, C]``: compute time of each chip in ps."""
    return chip_sums(parts, flow.compute_ps, flow.num_chips)


def chip_traffic_bytes(flow: Dataflow, parts: np.ndarray) -> np.ndarray:
    """int64 ``[B, C]``: bytes on each chip's input and output links together."""
    link = link_bytes(flow, parts)
    inbound = np.pad(link[:, :-1], ((0, 0), (1, 0)))
    return inbound + link


def chip_time_ps(flow: Dataflow, parts: np.ndarray) -> np.ndarray:
    """int64 ``[B, C]``: compute plus input and output link time of each chip in ps."""
    return compute_ps(flow, parts) + chip_traffic_bytes(flow, parts) * flow.ps_per_byte


def latency_ps(flow: Dataflow, parts: np.ndarray) -> np.ndarray:
    """int64 ``[B]``: time of the slowest chip in ps (the reciprocal of throughput)."""
    return chip_time_ps(flow, parts).max(axis=1)


def memory_bytes(flow: Dataflow, parts: np.ndarray) -> np.ndarray:
    """int64 ``[B, C]``: bytes each chip holds: resident bytes plus received tensors."""
    b, n = parts.shape
    c = flow.num_chips
    held = chip_sums(parts, flow.resident_bytes, c)
    if not flow.num_edges:
        return held
    need = np.zeros((b, n, c), dtype=bool)
    rows = np.arange(b)[:, None]
    need[rows, flow.src[None, :], parts[:, flow.dst]] = True
    need[rows, np.arange(n)[None, :], parts] = False  # a chip does not receive its own output
    received = np.einsum("bnc,n->bc", need, flow.out_bytes.astype(np.float64))
    return held + np.rint(received).astype(np.int64)
