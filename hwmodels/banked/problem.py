"""The bank-mapping problem of one workload: per-tensor and per-read cost tables.

One decision unit per node: the layout of the node's output tensor (the one tensor a
node of the IR writes). :class:`BankProblem` holds everything the evaluator, the
compilers and the exact solver need, as NumPy tables built once at bind time:

* per tensor ``i`` and layout ``a`` (``[N, L]``): allowed by the producer's
  requirement, bank parallelism ``min(extent, num_banks)``, fits in the banks, time to
  write it, time to read it by readers that take any layout, spill traffic;
* per read ``e`` (an input of a node produced by another node, ``[E]``): producer,
  consumer, kind (``any`` / ``axis`` / ``same``) and the layout it requires in the
  producer's axes (:data:`~hwmodels.banked.layouts.FOREIGN` when the producer has no
  such axis), with its read time.

Times are integer femtoseconds (:mod:`hwmodels.banked.params`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hwmodels.banked.layouts import FOREIGN, L, axis_map, bank_axes
from hwmodels.banked.params import BankedParams
from hwmodels.banked.requirements import rules
from workloads.ir import Workload

#: read kinds
ANY, AXIS, SAME = 0, 1, 2


@dataclass
class BankProblem:
    """Cost tables of one workload on one banked memory (shapes in the attribute names'
    docs; ``N`` tensors, ``L`` layouts, ``E`` reads).

    Attributes:
        size: int64 ``[N]``: bytes of each tensor.
        allowed: bool ``[N, L]``: layouts the producer's requirement accepts.
        parallel: int64 ``[N, L]``: banks a layout spreads the tensor over.
        fits: bool ``[N, L]``: the tensor fits in the banks in that layout.
        preferred: int64 ``[N]``: the allowed layout with the most banks (the first on
            ties): each operator's own, local choice.
        write_fs: int64 ``[N, L]``: time to write the tensor.
        read_any_fs: int64 ``[N, L]``: time of the reads that take any layout.
        spill_bytes: int64 ``[N]``: off-chip bytes of a tensor that does not fit
            (stored once, loaded by each reader).
        spill_fs: int64 ``[N, L]``: time of that traffic where it does not fit.
        copy_on_fs, copy_off_fs: int64 ``[N]``: time of one on-chip copy of the tensor
            and of one copy through off-chip memory (out and back in).
        src, dst, kind: int64 ``[E]``: producer, consumer and kind of each read.
        static_req: int64 ``[E]``: required layout of an ``axis`` read (producer axes).
        same_req: int64 ``[E, L]``: required layout of a ``same`` read for each layout of
            the consumer.
        read_fs: int64 ``[E, L]``: time of the read of an ``axis`` (column 0) or ``same``
            read (per consumer layout).
        fixed_fs: time every map pays: off-chip weights, graph inputs and outputs, and
            the ``axis`` reads.
        fixed_bytes: off-chip bytes every map moves (weights, graph inputs, outputs).
    """

    size: np.ndarray
    allowed: np.ndarray
    parallel: np.ndarray
    fits: np.ndarray
    preferred: np.ndarray
    write_fs: np.ndarray
    read_any_fs: np.ndarray
    spill_bytes: np.ndarray
    spill_fs: np.ndarray
    copy_on_fs: np.ndarray
    copy_off_fs: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    kind: np.ndarray
    static_req: np.ndarray
    same_req: np.ndarray
    read_fs: np.ndarray
    fixed_fs: int
    fixed_bytes: int

    @property
    def num_units(self) -> int:
        return len(self.size)

    @classmethod
    def build(cls, workload: Workload, params: BankedParams) -> BankProblem:
        """The tables of ``workload`` on the memory ``params``."""
        banks, n = params.num_banks, workload.num_nodes
        elem = params.element_bytes or workload.dtype_bytes
        scale = elem / workload.dtype_bytes
        node_rules = rules(workload)
        dims = [bank_axes(node.output_shape, workload.batch) for node in workload.nodes]
        size = np.array([math.prod(d) * elem for d in dims], dtype=np.int64)
        extent = np.ones((n, L), dtype=np.int64)
        for i, d in enumerate(dims):
            extent[i, : min(L, len(d))] = d[:L]
        parallel = np.minimum(extent, banks)
        per_bank = np.ceil(extent / banks) * (size[:, None] / extent)
        fits = per_bank <= params.bank_bytes
        allowed = np.zeros((n, L), dtype=bool)
        for i, rule in enumerate(node_rules):
            allowed[i, list(rule.allowed)] = True
        preferred = np.argmax(np.where(allowed, parallel, -1), axis=1)

        bank_fs, dram_fs = (
            params.fs_per_byte(params.bank_gbps),
            params.fs_per_byte(params.dram_gbps),
        )
        src, dst, kind, static_req, same_req, read_fs = [], [], [], [], [], []
        for c, rule in enumerate(node_rules):
            for slot in rule.slots:
                p = slot.producer
                mapped = axis_map(dims[p], slot.dims)
                to_src = [m if m is not None and m < L else FOREIGN for m in mapped]
                to_src += [FOREIGN] * (L - len(to_src))
                full = np.minimum(np.array(slot.dims, dtype=np.int64), banks)
                width = np.ones(L, dtype=np.int64)
                width[: min(L, len(full))] = full[:L]
                src.append(p)
                dst.append(c)
                kind.append({"any": ANY, "axis": AXIS, "same": SAME}[slot.kind])
                static_req.append(to_src[slot.axis] if slot.kind == "axis" else -1)
                same_req.append(to_src[:L])
                cols = np.full(L, full[slot.axis]) if slot.kind == "axis" else width
                read_fs.append(np.rint(size[p] * bank_fs / cols))
        e = len(src)
        src = np.array(src, dtype=np.int64).reshape(e)
        dst = np.array(dst, dtype=np.int64).reshape(e)
        kind = np.array(kind, dtype=np.int64).reshape(e)
        read_fs = np.array(read_fs, dtype=np.int64).reshape(e, L)
        readers = np.bincount(src, minlength=n)
        any_reads = np.bincount(src[kind == ANY], minlength=n)
        one_read = np.rint(size[:, None] * bank_fs / parallel).astype(np.int64)
        spill_bytes = np.where(readers > 0, size * (1 + readers), 0)
        fixed_bytes = int(
            round(
                (workload.total_weight_bytes + workload.graph_input_bytes.sum()) * scale
                + size[readers == 0].sum()
            )
        )
        return cls(
            size=size,
            allowed=allowed,
            parallel=parallel,
            fits=fits,
            preferred=preferred.astype(np.int64),
            write_fs=one_read,
            read_any_fs=any_reads[:, None] * one_read,
            spill_bytes=spill_bytes.astype(np.int64),
            spill_fs=np.where(fits, 0, np.rint(spill_bytes * dram_fs)[:, None]).astype(np.int64),
            copy_on_fs=np.rint(size * params.fs_per_byte(params.copy_gbps)).astype(np.int64),
            copy_off_fs=np.rint(2 * size * dram_fs).astype(np.int64),
            src=src,
            dst=dst,
            kind=kind,
            static_req=np.array(static_req, dtype=np.int64).reshape(e),
            same_req=np.array(same_req, dtype=np.int64).reshape(e, L),
            read_fs=read_fs,
            fixed_fs=int(round(fixed_bytes * dram_fs)) + int(read_fs[kind == AXIS, 0].sum()),
            fixed_bytes=fixed_bytes,
        )
