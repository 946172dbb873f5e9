"""Small hand-built workloads for the NNP-I tests (no zoo needed)."""

from __future__ import annotations

import numpy as np

from workloads.ir import Node, TensorInfo, Workload


def layer(
    name: str,
    inputs: list[str],
    in_bytes: list[int],
    out_bytes: int,
    weight_bytes: int = 0,
    macs: int = 0,
    vector_ops: int = 0,
) -> Node:
    """A node whose tensors are 1-D int8 vectors of the given byte sizes."""
    return Node(
        name=name,
        op_type="linear" if weight_bytes else "eltwise",
        inputs=inputs,
        input_shapes=[(1, b) for b in in_bytes],
        output_shape=(1, out_bytes),
        weight_bytes=weight_bytes,
        macs=macs,
        vector_ops=vector_ops,
    )


def random_dag(
    num_nodes: int, rng: np.random.Generator, max_bytes: int = 4096, name: str = "dag"
) -> Workload:
    """A random DAG: a chain with random skip edges, random sizes and MACs.

    Node 0 reads a host input; some nodes have no weights, some are compute-bound.
    """
    out = rng.integers(1, max_bytes, size=num_nodes)
    weights = np.where(rng.random(num_nodes) < 0.7, rng.integers(1, max_bytes, num_nodes), 0)
    macs = rng.integers(0, 40 * max_bytes, size=num_nodes)
    host = int(rng.integers(1, max_bytes))
    nodes = [layer("n0", ["x"], [host], int(out[0]), int(weights[0]), int(macs[0]))]
    for i in range(1, num_nodes):
        srcs = [i - 1]
        if i >= 2 and rng.random() < 0.5:
            srcs.append(int(rng.integers(0, i - 1)))
        names = [f"n{s}" for s in srcs]
        sizes = [int(out[s]) for s in srcs]
        nodes.append(layer(f"n{i}", names, sizes, int(out[i]), int(weights[i]), int(macs[i])))
    return Workload(name, nodes, [TensorInfo("x", (1, host), host)])


def residual(num_blocks: int, act_bytes: int, weight_bytes: int, macs: int) -> Workload:
    """ResNet-like: a stem, then blocks of two weighted layers and an add with a skip."""
    nodes = [layer("stem", ["x"], [act_bytes], act_bytes, weight_bytes, macs)]
    prev = "stem"
    for b in range(num_blocks):
        a, c, add = f"b{b}a", f"b{b}b", f"b{b}add"
        nodes.append(layer(a, [prev], [act_bytes], act_bytes, weight_bytes, macs))
        nodes.append(layer(c, [a], [act_bytes], act_bytes, weight_bytes, macs))
        nodes.append(layer(add, [c, prev], [act_bytes, act_bytes], act_bytes, 0, 0, act_bytes))
        prev = add
    return Workload(f"residual{num_blocks}", nodes, [TensorInfo("x", (1, act_bytes), act_bytes)])
