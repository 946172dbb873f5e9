"""The TPU memory-mapping game's programs: parameters of a slow chip, filler
instructions, random programs and a four-instruction one."""

from __future__ import annotations

import numpy as np

from hwmodels.tpu import Op, Program, TPUParams

#: bytes in the game's KB
KB = 1000
#: 1 byte/ns copies and HBM, 10 bytes/ns CMEM: a 1000-byte copy takes 1 us
SLOW_TPU = dict(copy_gbps=1.0, hbm_gbps=1.0, cmem_gbps=10.0, peak_tflops=1.0)


def params(cmem_bytes: int = 10 * KB, **kw) -> TPUParams:
    """:data:`SLOW_TPU` with ``cmem_bytes`` of CMEM (``kw``: more parameters)."""
    return TPUParams(cmem_mib=cmem_bytes / 2**20, **(SLOW_TPU | kw))


def filler(n: int, compute_s: float = 0.6e-6) -> list[Op]:
    """``n`` instructions without buffers: ``compute_s`` of copy supply each."""
    return [Op((), (), compute_s) for _ in range(n)]


def random_program(rng: np.random.Generator, num_ops: int = 12) -> Program:
    """Random reads of earlier tensors and weights, random sizes, a few alias groups."""
    ops, sizes, groups = [], {}, []
    for t in range(num_ops):
        reads = [f"t{int(rng.integers(t))}" for _ in range(int(rng.integers(0, 3)))] if t else []
        if rng.random() < 0.5:
            reads.append(f"w{int(rng.integers(4))}")
        ops.append(Op(tuple(dict.fromkeys(reads)), (f"t{t}",), float(rng.uniform(0.2e-6, 2e-6))))
    for op in ops:
        for name in (*op.reads, *op.writes):
            sizes.setdefault(name, int(rng.integers(200, 3 * KB)))
    for t in range(2, num_ops, 4):  # the output of t aliases an operand read 1-3 steps later
        later = [u for u in range(t + 1, min(t + 4, num_ops)) if ops[u].reads]
        if later:
            groups.append([(t, f"t{t}"), (later[0], ops[later[0]].reads[0])])
    groups = [g for g in groups if len({b for b in g}) == 2 and not _shared(g, groups)]
    return Program.from_ops(ops, sizes, params(5 * KB), alias_groups=groups, name="random")


def _shared(group, groups) -> bool:
    """The group shares a buffer with an earlier group."""
    earlier = groups[: groups.index(group)]
    return any(set(group) & set(g) for g in earlier)


def tiny_program() -> Program:
    """Four instructions on five buffers, one alias group, 2 KB of CMEM."""
    ops = [
        Op((), ("a",), 0.8e-6),
        Op(("w",), ("b",), 0.2e-6),
        Op(("a", "b"), ("c",), 0.2e-6),
        Op(("w", "c"), ("d",), 0.2e-6),
    ]
    sizes = {"a": 1500, "w": 800, "b": 600, "c": 700, "d": 300}
    return Program.from_ops(ops, sizes, params(2 * KB), alias_groups=[[(1, "b"), (2, "b")]])
