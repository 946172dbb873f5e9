"""The workload IR: one node per mappable layer, in execution order.

A :class:`Workload` is what importers (:mod:`workloads.torch_import`,
:mod:`workloads.onnx_import`) produce after fusion and what the built-in zoo
stores. It knows nothing about hardware: hardware models read its per-node arrays
(bytes, MACs, lifetimes, edges) and build their own cost models from them.

Conventions
-----------
* Nodes are stored in execution order; ``edge_index[0] < edge_index[1]`` always holds,
  so the order is a topological order of the graph.
* Sizes are in bytes of the workload's element type (``dtype_bytes``, 1 for int8
  inference unless a model says otherwise).
* A node reads the outputs of its producers (``inputs``) and, for the first layers,
  tensors fed by the host (``graph_inputs``); it writes exactly one activation tensor
  (``output_shape``) and may own one weight tensor (``weight_bytes``).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from workloads.errors import WorkloadError

#: The 19 node features of EGRL Table 1 (Appendix A), in that order.
FEATURE_NAMES: tuple[str, ...] = (
    "opid",
    "weight_size",
    "ifmx",
    "ifmy",
    "ifmz",
    "ofmx",
    "ofmy",
    "ofmz",
    "ifm_size",
    "ofm_size",
    "n_ops_left",
    "n_w_left",
    "groups",
    "kernelx",
    "kernely",
    "stride",
    "pad",
    "dilation",
    "batch",
)

#: Canonical op types of mappable layers; ``opid`` is the index in this tuple.
OP_TYPES: tuple[str, ...] = (
    "conv",  # convolution (any groups), absorbs bias / batch-norm / activation / eltwise
    "linear",  # activation x weight matrix (fully connected, projections)
    "matmul",  # activation x activation (attention scores, attention x values)
    "embedding",  # gather rows of a weight table
    "pool",  # max / average / adaptive pooling
    "norm",  # layer / group / instance / standalone batch norm
    "softmax",
    "reduce",  # mean / sum over axes
    "layout",  # permute / transpose / concat: materialises a new tensor layout
    "eltwise",  # an elementwise op that could not be fused into a producer
)


@dataclass(frozen=True)
class TensorInfo:
    """A tensor fed by the host (a graph input): its name, shape and bytes."""

    name: str
    shape: tuple[int, ...]
    nbytes: int


@dataclass
class Node:
    """One mappable layer after fusion.

    Attributes:
        name: unique node name (the name of the anchor op it grew from).
        op_type: one of :data:`OP_TYPES`.
        inputs: names of producer nodes or graph inputs, in argument order.
        input_shapes: shape of each entry of ``inputs``.
        output_shape: shape of the one activation tensor the node writes.
        weight_bytes: bytes of the parameters the node owns (0 if none).
        macs: multiply-accumulates of the anchor op (0 for data-movement ops).
        vector_ops: elementwise / reduction operations of the fused ops.
        attrs: conv-style attributes: groups, kernel (kx, ky), stride, pad, dilation.
        fused: names of the source ops folded into this node, anchor first.
    """

    name: str
    op_type: str
    inputs: list[str]
    input_shapes: list[tuple[int, ...]]
    output_shape: tuple[int, ...]
    weight_bytes: int = 0
    macs: int = 0
    vector_ops: int = 0
    attrs: dict = field(default_factory=dict)
    fused: list[str] = field(default_factory=list)


def _numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape)) if len(shape) else 1


def fmap_xyz(
    shape: Sequence[int], conv_like: bool, batch: int | None = None
) -> tuple[int, int, int]:
    """Feature-map extents (x, y, z) of a tensor, batch dimension excluded.

    The leading dimension is the batch when the tensor has more than one dimension and
    (if ``batch`` is given) it equals ``batch``; a tensor without one (a table computed
    from weights, attention windows folded into the leading axis) keeps all its
    dimensions. Conv-family tensors ``[B, C, H, W]`` give ``(W, H, C)`` and ``[B, C, L]``
    give ``(L, 1, C)``. Any other tensor ``[B, d1, ..., dk]`` gives ``z = dk``
    (features), ``x = d(k-1)`` and ``y`` the product of the remaining dimensions (1 if
    none). ``x * y * z`` is always the number of elements per batch item.
    """
    has_batch = len(shape) > 1 and (batch is None or int(shape[0]) == batch)
    dims = list(shape[1:]) if has_batch else list(shape)
    if conv_like and len(dims) == 3:
        c, h, w = dims
        return int(w), int(h), int(c)
    if conv_like and len(dims) == 2:
        c, length = dims
        return int(length), 1, int(c)
    if not dims:
        return 1, 1, 1
    z = dims[-1]
    x = dims[-2] if len(dims) >= 2 else 1
    y = _numel(dims[:-2]) if len(dims) >= 3 else 1
    return int(x), int(y), int(z)


def channel_first(op_type: str, shape: Sequence[int]) -> bool:
    """Whether a tensor a node of ``op_type`` reads or writes is laid out ``[B, C, ...]``.

    Conv and pool tensors are; so are 4-D tensors of elementwise, norm and layout nodes
    (they sit between convolutions); everything else is features-last.
    """
    return op_type in ("conv", "pool") or (
        len(shape) == 4 and op_type in ("eltwise", "norm", "layout")
    )


class Workload:
    """A neural-network workload as a DAG of mappable layers.

    Args:
        name: workload name (``"resnet50"``).
        nodes: the layers in execution order; every input names an earlier node or
            a graph input.
        graph_inputs: tensors fed by the host.
        dtype_bytes: bytes per element (1: int8 inference).
        meta: free-form provenance (source model, parameter count, fusion stats).

    Raises:
        WorkloadError: the graph is empty, names an unknown or later producer (a
            cycle or a bad order), repeats a node name, or has a NaN / negative size.
    """

    def __init__(
        self,
        name: str,
        nodes: Sequence[Node],
        graph_inputs: Sequence[TensorInfo] = (),
        dtype_bytes: int = 1,
        meta: dict | None = None,
    ) -> None:
        self.name = name
        self.nodes: list[Node] = list(nodes)
        self.graph_inputs: list[TensorInfo] = list(graph_inputs)
        self.dtype_bytes = int(dtype_bytes)
        self.meta: dict = dict(meta or {})
        self._validate()

    # ------------------------------------------------------------------ checks
    def _validate(self) -> None:
        if not self.nodes:
            raise WorkloadError(f"workload {self.name!r} is empty: it has no mappable node")
        if self.dtype_bytes <= 0:
            raise WorkloadError(f"workload {self.name!r}: dtype_bytes must be positive")
        index: dict[str, int] = {}
        inputs = {t.name for t in self.graph_inputs}
        if len(inputs) != len(self.graph_inputs):
            raise WorkloadError(f"workload {self.name!r}: two graph inputs share a name")
        for t in self.graph_inputs:
            _check_shape(self.name, f"graph input {t.name!r}", t.shape)
        for i, node in enumerate(self.nodes):
            where = f"node {node.name!r} ({node.op_type})"
            if node.name in index or node.name in inputs:
                raise WorkloadError(f"workload {self.name!r}: duplicate name {node.name!r}")
            if node.op_type not in OP_TYPES:
                raise WorkloadError(
                    f"workload {self.name!r}: {where} has unknown op type; "
                    f"expected one of {OP_TYPES}"
                )
            if len(node.inputs) != len(node.input_shapes):
                raise WorkloadError(f"workload {self.name!r}: {where}: inputs and shapes differ")
            for src in node.inputs:
                if src in inputs:
                    continue
                if src not in index:
                    later = any(n.name == src for n in self.nodes[i:])
                    problem = (
                        "a cycle or an order that is not topological"
                        if later
                        else ("an unknown producer")
                    )
                    raise WorkloadError(f"workload {self.name!r}: {where} reads {src!r}: {problem}")
            _check_shape(self.name, where + " output", node.output_shape)
            for s in node.input_shapes:
                _check_shape(self.name, where + " input", s)
            for attr in ("weight_bytes", "macs", "vector_ops"):
                _check_size(self.name, where, attr, getattr(node, attr))
            index[node.name] = i

    # -------------------------------------------------------------- properties
    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @cached_property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @cached_property
    def index(self) -> dict[str, int]:
        """Node name -> position in execution order."""
        return {n.name: i for i, n in enumerate(self.nodes)}

    @cached_property
    def op_types(self) -> list[str]:
        return [n.op_type for n in self.nodes]

    @cached_property
    def edge_index(self) -> np.ndarray:
        """Producer -> consumer edges between nodes, int64 ``[2, E]`` (deduplicated)."""
        pairs = sorted(
            {
                (self.index[s], i)
                for i, n in enumerate(self.nodes)
                for s in n.inputs
                if s in self.index
            }
        )
        if not pairs:
            return np.zeros((2, 0), dtype=np.int64)
        return np.asarray(pairs, dtype=np.int64).T.copy()

    @cached_property
    def weight_bytes(self) -> np.ndarray:
        """int64 ``[N]``: bytes of each node's weight tensor."""
        return np.array([n.weight_bytes for n in self.nodes], dtype=np.int64)

    @cached_property
    def output_bytes(self) -> np.ndarray:
        """int64 ``[N]``: bytes of each node's activation (output) tensor."""
        return np.array(
            [_numel(n.output_shape) * self.dtype_bytes for n in self.nodes], dtype=np.int64
        )

    @cached_property
    def input_bytes(self) -> np.ndarray:
        """int64 ``[N]``: bytes each node reads from producers and graph inputs."""
        return np.array(
            [sum(_numel(s) for s in n.input_shapes) * self.dtype_bytes for n in self.nodes],
            dtype=np.int64,
        )

    @cached_property
    def graph_input_bytes(self) -> np.ndarray:
        """int64 ``[N]``: bytes each node reads from graph inputs (host tensors)."""
        names = {t.name for t in self.graph_inputs}
        return np.array(
            [
                sum(_numel(s) for src, s in zip(n.inputs, n.input_shapes) if src in names)
                * self.dtype_bytes
                for n in self.nodes
            ],
            dtype=np.int64,
        )

    @cached_property
    def macs(self) -> np.ndarray:
        """int64 ``[N]``: multiply-accumulates per node."""
        return np.array([n.macs for n in self.nodes], dtype=np.int64)

    @cached_property
    def vector_ops(self) -> np.ndarray:
        """int64 ``[N]``: elementwise / reduction operations per node."""
        return np.array([n.vector_ops for n in self.nodes], dtype=np.int64)

    @cached_property
    def last_use(self) -> np.ndarray:
        """int64 ``[N]``: execution step of each output's last consumer (itself if none).

        An activation is live, and occupies its memory level, from step ``i`` (its
        producer runs) to step ``last_use[i]`` inclusive.
        """
        last = np.arange(self.num_nodes, dtype=np.int64)
        src, dst = self.edge_index
        np.maximum.at(last, src, dst)
        return last

    @cached_property
    def batch(self) -> int:
        """Batch size: ``meta["batch"]``, else the leading dimension of the first
        multi-dimensional graph input, else 1."""
        if "batch" in self.meta:
            return int(self.meta["batch"])
        shapes = [t.shape for t in self.graph_inputs if len(t.shape) > 1]
        return int(shapes[0][0]) if shapes else 1

    @cached_property
    def features(self) -> np.ndarray:
        """float64 ``[N, 19]``: the node features of EGRL Table 1, columns in :data:`FEATURE_NAMES`.

        Input extents are those of the node's first input (its output for a node with
        none), axes as :func:`fmap_xyz` assigns them; ``n_ops_left`` sums MACs and vector
        ops of all later nodes; ``n_w_left`` sums weight bytes from the node to the last;
        conv attributes are 0 where a node has none; ``batch`` is :attr:`batch`.
        """
        n = self.num_nodes
        ops = self.macs + self.vector_ops
        # Operations strictly after each node; weights from each node to the last.
        ops_left = np.concatenate([np.cumsum(ops[::-1])[::-1][1:], [0]])
        w_left = np.cumsum(self.weight_bytes[::-1])[::-1]
        feats = np.zeros((n, len(FEATURE_NAMES)), dtype=np.float64)
        feats[:, 0] = [OP_TYPES.index(t) for t in self.op_types]
        feats[:, 1] = self.weight_bytes
        feats[:, 2:5] = [
            self._xyz(nd, nd.input_shapes[0] if nd.input_shapes else nd.output_shape)
            for nd in self.nodes
        ]
        feats[:, 5:8] = [self._xyz(nd, nd.output_shape) for nd in self.nodes]
        feats[:, 8] = feats[:, 2:5].prod(axis=1)
        feats[:, 9] = feats[:, 5:8].prod(axis=1)
        feats[:, 10] = ops_left
        feats[:, 11] = w_left
        feats[:, 12:18] = [_conv_attrs(nd.attrs) for nd in self.nodes]
        feats[:, 18] = self.batch
        return feats

    def _xyz(self, node: Node, shape: Sequence[int]) -> tuple[int, int, int]:
        return fmap_xyz(shape, channel_first(node.op_type, shape), self.batch)

    @property
    def total_weight_bytes(self) -> int:
        """Bytes of every parameter, a decode step's cached keys and values included."""
        return int(self.weight_bytes.sum())

    @property
    def cache_bytes(self) -> int:
        """Bytes of a decode step's cached keys and values (0 for other workloads)."""
        return int(self.meta.get("cache_elements", 0)) * self.dtype_bytes

    @property
    def activation_bytes(self) -> int:
        """Bytes of every node's output, each written once per run of the workload."""
        return int(self.output_bytes.sum())

    @property
    def moved_bytes(self) -> int:
        """Bytes a run moves at least once: every parameter (cache included), every activation."""
        return self.total_weight_bytes + self.activation_bytes

    # ------------------------------------------------------------- conversion
    def to_pyg(self):
        """The workload as a ``torch_geometric.data.Data``.

        ``x`` float32 ``[N, 19]`` holds the raw Table-1 features, ``edge_index`` int64
        ``[2, E]`` the producer -> consumer edges; ``node_names`` and ``name`` ride along.
        """
        import torch
        from torch_geometric.data import Data

        return Data(
            x=torch.as_tensor(self.features, dtype=torch.float32),
            edge_index=torch.as_tensor(self.edge_index, dtype=torch.long),
            num_nodes=self.num_nodes,
            node_names=self.node_names,
            name=self.name,
        )

    def to_dict(self) -> dict:
        return {
            "format": "egrl-workload/1",
            "name": self.name,
            "dtype_bytes": self.dtype_bytes,
            "meta": self.meta,
            "graph_inputs": [asdict(t) for t in self.graph_inputs],
            "nodes": [asdict(n) for n in self.nodes],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Workload:
        if data.get("format") != "egrl-workload/1":
            raise WorkloadError(f"not an egrl workload file (format {data.get('format')!r})")
        nodes = []
        for d in data["nodes"]:
            d = dict(d)
            d["input_shapes"] = [tuple(s) for s in d["input_shapes"]]
            d["output_shape"] = tuple(d["output_shape"])
            attrs = dict(d.get("attrs", {}))
            if "kernel" in attrs:
                attrs["kernel"] = tuple(attrs["kernel"])
            d["attrs"] = attrs
            nodes.append(Node(**d))
        inputs = [
            TensorInfo(t["name"], tuple(t["shape"]), t["nbytes"]) for t in data["graph_inputs"]
        ]
        return cls(data["name"], nodes, inputs, data.get("dtype_bytes", 1), data.get("meta"))

    def save(self, path: str | Path) -> None:
        """Write the workload as compact JSON, gzipped (reproducibly) if the name ends in ``.gz``."""
        path = Path(path)
        text = json.dumps(self.to_dict(), separators=(",", ":"))
        if path.suffix == ".gz":
            with open(path, "wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as f:
                f.write(text.encode("utf-8"))
        else:
            path.write_text(text, encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Workload:
        path = Path(path)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    def __repr__(self) -> str:
        return (
            f"Workload({self.name!r}, nodes={self.num_nodes}, edges={self.edge_index.shape[1]}, "
            f"weights={self.total_weight_bytes / 2**20:.1f} MiB)"
        )


def _conv_attrs(attrs: dict) -> tuple[int, int, int, int, int, int]:
    """(groups, kernel x, kernel y, stride, pad, dilation) of a node, 0 where absent."""
    kx, ky = attrs.get("kernel", (0, 0))
    return (
        attrs.get("groups", 0),
        kx,
        ky,
        attrs.get("stride", 0),
        attrs.get("pad", 0),
        attrs.get("dilation", 0),
    )


def _check_size(workload: str, where: str, attr: str, value) -> None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        raise WorkloadError(f"workload {workload!r}: {where} has a NaN {attr}")
    if value < 0:
        raise WorkloadError(f"workload {workload!r}: {where} has a negative {attr} ({value})")


def _check_shape(workload: str, where: str, shape) -> None:
    for d in shape:
        if d is None or (isinstance(d, float) and math.isnan(d)):
            raise WorkloadError(
                f"workload {workload!r}: {where} has a NaN or unknown size in shape {shape}"
            )
        if d < 0:
            raise WorkloadError(
                f"workload {workload!r}: {where} has a negative size in shape {shape}"
            )
