"""A program for the memory-mapping game: instructions in execution order and their buffers.

Following Wang et al., "Optimizing Memory Mapping Using Deep Reinforcement Learning"
(arXiv:2305.07440), section 4.1 and Table 1: a program is a sequence of ``T``
instructions (the index is the logical time); each instruction reads operand buffers
and writes output buffers; a buffer is one use of a tensor by one instruction. The
game visits the ``N`` buffers in this order: instruction by instruction, operands first,
then outputs.

Per buffer (arrays of length ``N``, the paper's Table 1): ``size`` (bytes), ``is_output``,
``time`` (``target_time``, the instruction), ``tensor`` (``tensor_id``), ``alias``
(``alias_id``, groups numbered ``0..G-1``), ``live_start``/``live_end`` (``live_range``,
the tensor's definition to its last use), ``demand_ps`` (copy time at the copy
bandwidth) and ``benefit_s`` (latency saved by this buffer alone in CMEM). Per
instruction (length ``T``): ``compute_s`` and ``supply_ps`` (its latency with every
buffer in CMEM: the copy time it can hide, Appendix A).

Programs come from a workload (:meth:`Program.from_workload`: one instruction per node,
weights as operands) or from a hand-written list of operations (:meth:`Program.from_ops`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from hwmodels.tpu.cost import instruction_latency_s
from hwmodels.tpu.params import PS_PER_S, TPUParams
from workloads.ir import Workload


@dataclass(frozen=True)
class Op:
    """One instruction of a hand-written program: tensors read and written, compute time."""

    reads: Sequence[str]
    writes: Sequence[str]
    compute_s: float = 0.0


@dataclass(eq=False)
class Program:
    """The buffers of a program and the chip they are mapped onto (see the module doc).

    Build it with :meth:`from_ops` or :meth:`from_workload`; the constructor checks the
    arrays and raises ``ValueError`` naming the first bad buffer.
    """

    name: str
    params: TPUParams
    compute_s: np.ndarray  # float64 [T]
    size: np.ndarray  # int64 [N]
    is_output: np.ndarray  # bool [N]
    time: np.ndarray  # int64 [N]
    tensor: np.ndarray  # int64 [N]
    alias: np.ndarray  # int64 [N]
    live_start: np.ndarray  # int64 [N]
    live_end: np.ndarray  # int64 [N]
    ready: np.ndarray  # int64 [N]: first step a copy into CMEM may use
    buffer_names: list[str] = field(default_factory=list)
    tensor_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n, t = len(self.size), len(self.compute_s)
        for attr in ("is_output", "time", "tensor", "alias", "live_start", "live_end", "ready"):
            if len(getattr(self, attr)) != n:
                raise ValueError(
                    f"program {self.name!r}: {attr} has {len(getattr(self, attr))} entries, size has {n}"
                )
        if n == 0:
            raise ValueError(f"program {self.name!r} has no buffer")
        bad = np.flatnonzero(
            (self.size <= 0)
            | (self.time < 0)
            | (self.time >= t)
            | (self.live_start > self.time)
            | (self.live_end < self.time)
            | (self.live_end >= t)
            | (self.ready < 0)
        )
        if bad.size:
            raise ValueError(
                f"program {self.name!r}: buffer {self.describe(int(bad[0]))} has a bad size, time or live range"
            )
        back = np.flatnonzero(np.diff(self.time) < 0)
        if back.size:
            raise ValueError(
                f"program {self.name!r}: buffer {self.describe(int(back[0]) + 1)} is out of execution order"
            )
        if not np.all(np.isfinite(self.compute_s)) or (self.compute_s < 0).any():
            raise ValueError(f"program {self.name!r}: compute times must be finite and >= 0")
        groups = np.unique(self.alias)
        if groups[0] != 0 or groups[-1] != len(groups) - 1:
            raise ValueError(f"program {self.name!r}: alias ids must be 0..G-1")

    # ------------------------------------------------------------------ sizes
    @property
    def num_buffers(self) -> int:
        return len(self.size)

    @property
    def num_instructions(self) -> int:
        return len(self.compute_s)

    @cached_property
    def num_groups(self) -> int:
        return int(self.alias.max()) + 1

    @cached_property
    def num_tensors(self) -> int:
        return int(self.tensor.max()) + 1

    def describe(self, b: int) -> str:
        """A buffer's index and name, for messages."""
        name = self.buffer_names[b] if b < len(self.buffer_names) else ""
        return f"{b} ({name})" if name else str(b)

    # ---------------------------------------------------------- derived arrays
    @cached_property
    def instr_ptr(self) -> np.ndarray:
        """int64 ``[T + 1]``: the buffers of instruction ``t`` are ``ptr[t]:ptr[t + 1]``."""
        return np.searchsorted(self.time, np.arange(self.num_instructions + 1)).astype(np.int64)

    @cached_property
    def demand_ps(self) -> np.ndarray:
        """int64 ``[N]``: time to copy each buffer between HBM and CMEM, ps (at least 1)."""
        return np.maximum(np.ceil(self.size * self.params.copy_ps_per_byte), 1).astype(np.int64)

    @cached_property
    def instr_bytes(self) -> np.ndarray:
        """float64 ``[T]``: bytes each instruction moves (all its buffers)."""
        return np.bincount(self.time, weights=self.size, minlength=self.num_instructions)

    def latency_s(self, hbm_bytes, cmem_bytes, t) -> np.ndarray:
        """Roofline latency of instruction(s) ``t`` with the given bytes in each memory."""
        return instruction_latency_s(self.compute_s[t], hbm_bytes, cmem_bytes, self.params)

    @cached_property
    def hbm_latency_s(self) -> np.ndarray:
        """float64 ``[T]``: each instruction with every buffer in HBM."""
        all_t = np.arange(self.num_instructions)
        return self.latency_s(self.instr_bytes, 0.0, all_t)

    @cached_property
    def supply_ps(self) -> np.ndarray:
        """int64 ``[T]``: initial copy supply, each instruction's all-CMEM latency in ps."""
        all_t = np.arange(self.num_instructions)
        return np.floor(self.latency_s(0.0, self.instr_bytes, all_t) * PS_PER_S).astype(np.int64)

    @cached_property
    def benefit_s(self) -> np.ndarray:
        """float64 ``[N]``: initial benefit, ``L_t({}) - L_t({b})`` (Appendix A)."""
        total = self.instr_bytes[self.time]
        alone = self.latency_s(total - self.size, self.size.astype(np.float64), self.time)
        return self.hbm_latency_s[self.time] - alone

    @cached_property
    def group_size(self) -> np.ndarray:
        """int64 ``[G]``: buffers in each alias group."""
        return np.bincount(self.alias, minlength=self.num_groups)

    @cached_property
    def group_rank(self) -> np.ndarray:
        """int64 ``[N]``: position of each buffer among its alias group's buffers."""
        return rank_within(self.alias)

    @cached_property
    def next_same_tensor(self) -> np.ndarray:
        """int64 ``[N]``: the next buffer of the same tensor, -1 if none."""
        return next_within(self.tensor)

    @cached_property
    def baseline_latency_s(self) -> float:
        """Latency with every buffer in HBM (all-Drop), seconds."""
        return float(self.hbm_latency_s.sum())

    @cached_property
    def features(self) -> np.ndarray:
        """float64 ``[N, 10]``: the Table 1 features, columns :data:`FEATURE_NAMES`."""
        return np.stack(
            [
                self.size,
                self.is_output,
                self.time,
                self.tensor,
                self.alias,
                self.live_start,
                self.live_end,
                self.demand_ps / PS_PER_S,
                self.benefit_s,
                self.group_size[self.alias],
            ],
            axis=1,
        ).astype(np.float64)

    # ---------------------------------------------------------------- builders
    @classmethod
    def from_ops(
        cls,
        ops: Sequence[Op],
        sizes: dict[str, int],
        params: TPUParams | None = None,
        alias_groups: Iterable[Iterable[tuple[int, str]]] = (),
        name: str = "program",
    ) -> Program:
        """A program from operations in execution order.

        Args:
            ops: the instructions; each tensor is written at most once, and a tensor
                that no operation writes is a program input (in HBM from the start).
            sizes: bytes of every tensor.
            params: the chip (defaults: :class:`TPUParams`).
            alias_groups: groups of buffers that must share one CMEM offset (or all
                stay in HBM); a buffer is ``(op index, tensor name)``. Every other
                buffer is its own group.
            name: the program's name.

        Raises:
            ValueError: a tensor without a size, written twice, or read before it is
                written; an alias group naming a buffer that does not exist.
        """
        params = params or TPUParams()
        tensor_ids: dict[str, int] = {}
        defined: dict[str, int] = {}
        last: dict[str, int] = {}
        rows: list[tuple[int, str, bool]] = []  # (op, tensor, is_output)
        for t, op in enumerate(ops):
            for name_ in op.writes:
                if name_ in defined:
                    raise ValueError(
                        f"program {name!r}: op {t} writes {name_!r}, already written by op {defined[name_]}"
                    )
            for name_ in op.reads:
                if name_ in op.writes:
                    raise ValueError(f"program {name!r}: op {t} reads and writes {name_!r}")
            for name_ in dict.fromkeys(op.reads):
                rows.append((t, name_, False))
                last[name_] = t
            for name_ in dict.fromkeys(op.writes):
                rows.append((t, name_, True))
                defined[name_] = t
                last.setdefault(name_, t)
            for name_ in (*op.reads, *op.writes):
                if name_ not in sizes:
                    raise ValueError(f"program {name!r}: op {t} uses {name_!r}, which has no size")
                tensor_ids.setdefault(name_, len(tensor_ids))
        for t, op in enumerate(ops):
            for name_ in op.reads:
                if name_ in defined and defined[name_] > t:
                    raise ValueError(
                        f"program {name!r}: op {t} reads {name_!r} before op {defined[name_]} writes it"
                    )
        index = {(t, tn): i for i, (t, tn, _) in enumerate(rows)}
        alias = np.full(len(rows), -1, dtype=np.int64)
        for g, group in enumerate(alias_groups):
            for key in group:
                if tuple(key) not in index:
                    raise ValueError(
                        f"program {name!r}: alias group {g} names buffer {key!r}, which does not exist"
                    )
                if alias[index[tuple(key)]] >= 0:
                    raise ValueError(f"program {name!r}: buffer {key!r} is in two alias groups")
                alias[index[tuple(key)]] = g
        alias = _renumber_groups(alias)
        born = np.array([defined.get(tn, -1) for _, tn, _ in rows], dtype=np.int64)
        return cls(
            name=name,
            params=params,
            compute_s=np.array([op.compute_s for op in ops], dtype=np.float64),
            size=np.array([sizes[tn] for _, tn, _ in rows], dtype=np.int64),
            is_output=np.array([o for _, _, o in rows], dtype=bool),
            time=np.array([t for t, _, _ in rows], dtype=np.int64),
            tensor=np.array([tensor_ids[tn] for _, tn, _ in rows], dtype=np.int64),
            alias=alias,
            live_start=np.maximum(born, 0),
            live_end=np.array([last[tn] for _, tn, _ in rows], dtype=np.int64),
            ready=born + 1,
            buffer_names=[f"{tn}@{t}{'w' if o else 'r'}" for t, tn, o in rows],
            tensor_names=list(tensor_ids),
        )

    @classmethod
    def from_workload(
        cls,
        workload: Workload,
        params: TPUParams | None = None,
        repeats: int = 1,
        alias_ops: Sequence[str] = ("eltwise",),
    ) -> Program:
        """The program of a workload: one instruction per node, in execution order.

        A node reads its inputs (each distinct tensor once) and its weight tensor, and
        writes its output; its compute time is ``(2 * macs + vector_ops) / peak``.
        ``repeats > 1`` unrolls the workload that many times back to back (a serving
        loop over ``repeats`` requests): weights are the same tensors in every
        repetition, activations and graph inputs are new ones. A node whose op type is
        in ``alias_ops`` and whose first input is an activation of the same byte size
        that it reads last works in place: that operand and its output form an alias
        group.
        """
        params = params or TPUParams()
        if int(repeats) != repeats or repeats < 1:
            raise ValueError(f"tpu-cmem: repeats must be a positive integer, got {repeats!r}")
        dt = workload.dtype_bytes
        peak = params.peak_tflops * 1e12
        nodes = set(workload.node_names)
        last = workload.last_use
        ops: list[Op] = []
        sizes: dict[str, int] = {}
        groups: list[list[tuple[int, str]]] = []
        for r in range(int(repeats)):
            tag = f"#{r}" if repeats > 1 else ""
            for i, node in enumerate(workload.nodes):
                reads = []
                for src, shape in zip(node.inputs, node.input_shapes):
                    key = src + tag
                    sizes[key] = max(math.prod(shape) * dt, 1)
                    reads.append(key)
                if node.weight_bytes:
                    key = f"{node.name}.weight"
                    sizes[key] = int(node.weight_bytes)
                    reads.append(key)
                out = node.name + tag
                sizes[out] = max(int(workload.output_bytes[i]), 1)
                t = len(ops)
                ops.append(
                    Op(
                        tuple(dict.fromkeys(reads)),
                        (out,),
                        (2 * node.macs + node.vector_ops) / peak,
                    )
                )
                first = node.inputs[0] if node.inputs else None
                if (
                    node.op_type in alias_ops
                    and first in nodes
                    and last[workload.index[first]] == i
                    and sizes[first + tag] == sizes[out]
                ):
                    groups.append([(t, first + tag), (t, out)])
        name = workload.name if repeats == 1 else f"{workload.name}x{repeats}"
        return cls.from_ops(ops, sizes, params, groups, name=name)


#: columns of :attr:`Program.features` (Table 1; ``live_range`` is two columns,
#: ``demand`` is in seconds, and the alias group's size is added)
FEATURE_NAMES: tuple[str, ...] = (
    "size",
    "is_output",
    "target_time",
    "tensor_id",
    "alias_id",
    "live_start",
    "live_end",
    "demand_s",
    "benefit_s",
    "alias_size",
)


def _renumber_groups(alias: np.ndarray) -> np.ndarray:
    """Alias ids ``0..G-1`` in order of first buffer; ``-1`` entries get their own group."""
    out = np.empty_like(alias)
    seen: dict[int, int] = {}
    for i, g in enumerate(alias.tolist()):
        if g < 0:
            out[i] = len(seen)
            seen[-1 - i] = out[i]
        else:
            out[i] = seen.setdefault(g, len(seen))
    return out


def rank_within(key: np.ndarray) -> np.ndarray:
    """int64 ``[N]``: how many earlier entries share each entry's key."""
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    start = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    counts = np.diff(np.r_[start, len(key)])
    rank = np.arange(len(key)) - np.repeat(start, counts)
    out = np.empty_like(rank)
    out[order] = rank
    return out


def next_within(key: np.ndarray) -> np.ndarray:
    """int64 ``[N]``: index of the next entry with the same key, -1 if none."""
    order = np.argsort(key, kind="stable")
    nxt = np.full(len(key), -1, dtype=np.int64)
    same = key[order][1:] == key[order][:-1]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt
