"""Import an ONNX model as a :class:`~workloads.ir.Workload`.

The file is read without its external weight data (only shapes matter), its nodes are
put in topological order, ONNX shape inference runs on it (strict, falling back to the
lenient mode with a warning), and every node is translated into
:class:`~workloads.rawgraph.RawOp` records by the rules of
:mod:`workloads.onnx_ops`; :func:`workloads.fusion.fuse` then builds the
workload. A zero constant ``Pad`` read only by convolutions / pooling is a view whose
padding joins their ``pad`` attribute (:mod:`workloads.onnx_pad`).

Static values. Initializers and ``Constant`` outputs are static, and so is every value
computed only from static values, plus the outputs of ``Shape`` / ``Size`` /
``ConstantOfShape`` / ``Range`` / ``EyeLike`` (shapes are static). Static subgraphs are
folded here: they produce no RawOp and are not listed as inputs. A static value read in
a *weights* slot of an op with activation inputs is a parameter: the initializers (or
``Constant`` tensors) it is computed from are charged with their element counts, each
once per workload. A static value read in any other slot (a ``Reshape`` shape, axes,
pads, quantisation scales, gather indices) is a constant and costs nothing.

Element size. ``dtype_bytes=None`` means the project's convention, int8 inference
(1 byte per element), for float models too, as :func:`workloads.from_torch` does.
Only a quantised model says otherwise: the widest integer type around its
``QuantizeLinear`` / ``DequantizeLinear`` / ``QLinear*`` / ``*Integer`` ops sets it (int8 /
uint8 / int4 / float8 -> 1, int16 / uint16 -> 2). An explicit ``dtype_bytes`` wins.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import TensorProto, external_data_helper, helper

from workloads.errors import MissingShapeError, UnsupportedOperatorError, WorkloadError
from workloads.ir import TensorInfo, Workload
from workloads.onnx_fold import shape_model
from workloads.onnx_ops import MULTI_OUTPUT, OP_RULES, QUANT_OPS, OpRule, OpView, numel
from workloads.onnx_pad import folded_pads
from workloads.rawgraph import RawOp

log = logging.getLogger(__name__)

_DEFAULT_DOMAINS = ("", "ai.onnx")
_FIX_HINT = (
    "run ONNX shape inference (onnx.shape_inference.infer_shapes) or export the model with "
    "static shapes (torch.onnx.export without dynamic_axes)"
)
#: Integer initializer types whose values shape inference may need.
_INDEX_TYPES = (TensorProto.INT64, TensorProto.INT32)
#: Bytes per element of the integer / low-precision types a quantised model stores.
_QUANT_BYTES = {
    getattr(TensorProto, t): b
    for t, b in {
        "INT8": 1,
        "UINT8": 1,
        "INT4": 1,
        "UINT4": 1,
        "INT2": 1,
        "UINT2": 1,
        "FLOAT8E4M3FN": 1,
        "FLOAT8E4M3FNUZ": 1,
        "FLOAT8E5M2": 1,
        "FLOAT8E5M2FNUZ": 1,
        "FLOAT4E2M1": 1,
        "INT16": 2,
        "UINT16": 2,
    }.items()
    if hasattr(TensorProto, t)
}


@dataclass
class RawImport:
    """An ONNX model translated to raw ops, before fusion.

    Attributes:
        raw_ops: one record per source op output that carries activations, in
            execution order.
        graph_inputs: host tensors read by some raw op (``nbytes`` in ``dtype_bytes``).
        dtype_bytes: element size of the workload.
        meta: provenance: source, opset, producer, quantised, parameter elements.
    """

    raw_ops: list[RawOp]
    graph_inputs: list[TensorInfo]
    dtype_bytes: int
    meta: dict = field(default_factory=dict)


def from_onnx(
    path: str | Path | onnx.ModelProto,
    name: str | None = None,
    dtype_bytes: int | None = None,
    granularity: str = "layer",
) -> Workload:
    """Import an ONNX model file (or an in-memory ``ModelProto``) and fuse it into layers.

    Args:
        path: the ``.onnx`` file, or a loaded ``onnx.ModelProto``.
        name: workload name; the file's stem (or the graph's name) if ``None``.
        dtype_bytes: bytes per element; ``None`` follows the rule in the module docstring.
        granularity: ``"layer"`` (fused layers) or ``"op"`` (one node per compute op),
            see :mod:`workloads.fusion`.

    Raises:
        UnsupportedOperatorError: an op without a rule in :mod:`workloads.onnx_ops`.
        MissingShapeError: a tensor whose shape is unknown or symbolic after inference.
        WorkloadError: a cyclic or empty graph, a dangling input, or an unreadable file.
    """
    from workloads.fusion import check_granularity, fuse

    check_granularity(granularity)
    model, source = load_model(path)
    raw = translate(model, source, dtype_bytes)
    if name is None:
        name = Path(path).stem if not isinstance(path, onnx.ModelProto) else _graph_name(model)
    return fuse(
        raw.raw_ops,
        raw.graph_inputs,
        name,
        dtype_bytes=raw.dtype_bytes,
        meta=raw.meta,
        granularity=granularity,
    )


def load_model(path: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """The model (a copy, external weight data left on disk) and a label for errors."""
    if isinstance(path, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(path)
        return copy, f"<ONNX model {_graph_name(path)!r}>"
    source = str(path)
    try:
        model = onnx.load(source, load_external_data=False)
    except FileNotFoundError:
        raise
    except Exception as exc:  # protobuf decode errors have no common public base class
        raise WorkloadError(f"{source}: not a readable ONNX model ({exc})") from exc
    _load_index_tensors(model, Path(source).parent, source)
    return model, source


def _load_index_tensors(model: onnx.ModelProto, base_dir: Path, source: str) -> None:
    """Read the external data of integer initializers only (shapes, axes, indices).

    Shape inference needs their values; weights stay on disk, only their dims are read.
    """
    for tensor in model.graph.initializer:
        if tensor.data_type in _INDEX_TYPES and external_data_helper.uses_external_data(tensor):
            try:
                external_data_helper.load_external_data_for_tensor(tensor, str(base_dir))
            except OSError as exc:
                raise WorkloadError(
                    f"{source}: cannot read the external data of initializer {tensor.name!r} "
                    f"({exc})"
                ) from exc
            tensor.data_location = TensorProto.DEFAULT
            del tensor.external_data[:]


def translate(
    model: onnx.ModelProto, source: str = "<ONNX model>", dtype_bytes: int | None = None
) -> RawImport:
    """Check and sort ``model`` (in place), infer its shapes, and translate it to raw ops.

    Shapes come from ONNX shape inference on a copy whose static integer values are
    folded (:func:`workloads.onnx_fold.shape_model`); the ops come from ``model``.
    ``Pad`` ops that fold into their readers are found on the inferred graph
    (:func:`workloads.onnx_pad.folded_pads`).
    """
    graph = model.graph
    check_supported(graph, source)
    sort_nodes(graph, source)
    inferred = infer_shapes(shape_model(model), source)
    types = _ValueTypes(inferred.graph, source)
    if dtype_bytes is None:
        dtype_bytes = quantized_bytes(graph, types) or 1
    pads = folded_pads(graph, inferred.graph)
    return _Translator(graph, types, source, int(dtype_bytes), pads).run(model)


def check_supported(graph: onnx.GraphProto, source: str) -> None:
    """Raise :class:`UnsupportedOperatorError` for the first op without a rule."""
    for node in graph.node:
        if node.domain not in _DEFAULT_DOMAINS:
            raise UnsupportedOperatorError(f"{node.domain}.{node.op_type}", _name(node), source)
        if node.op_type not in OP_RULES:
            raise UnsupportedOperatorError(node.op_type, _name(node), source)


def sort_nodes(graph: onnx.GraphProto, source: str) -> None:
    """Put the nodes in topological order (stable: file order where it is already valid).

    Raises:
        WorkloadError: a value produced twice, or a cycle (naming the nodes it blocks).
    """
    producer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for out in filter(None, node.output):
            if out in producer:
                raise WorkloadError(
                    f"{source}: value {out!r} is produced by both {_label(graph.node[producer[out]])} "
                    f"and {_label(node)}"
                )
            producer[out] = i
    consumers: list[list[int]] = [[] for _ in graph.node]
    waiting = [0] * len(graph.node)
    for i, node in enumerate(graph.node):
        deps = {producer[x] for x in node.input if x in producer}
        waiting[i] = len(deps)
        for d in deps:
            consumers[d].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in consumers[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < len(graph.node):
        stuck = [_label(graph.node[i]) for i in range(len(graph.node)) if waiting[i] > 0]
        more = f" and {len(stuck) - 5} more" if len(stuck) > 5 else ""
        raise WorkloadError(
            f"{source}: the graph has a cycle; nodes on it or behind it: "
            f"{', '.join(stuck[:5])}{more}"
        )
    if order != sorted(order):
        log.info("%s: nodes reordered into topological order", source)
        nodes = [graph.node[i] for i in order]
        copies = [onnx.NodeProto() for _ in nodes]
        for c, n in zip(copies, nodes):
            c.CopyFrom(n)
        del graph.node[:]
        graph.node.extend(copies)


def infer_shapes(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """ONNX shape inference with data propagation: strict, else lenient with a warning."""
    try:
        return onnx.shape_inference.infer_shapes(
            model, check_type=True, strict_mode=True, data_prop=True
        )
    except Exception as strict_exc:  # InferenceError, or a checker error
        log.warning(
            "%s: strict ONNX shape inference failed (%s); retrying leniently", source, strict_exc
        )
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:
        raise WorkloadError(f"{source}: ONNX shape inference failed: {exc}") from exc


def quantized_bytes(graph: onnx.GraphProto, types: _ValueTypes) -> int | None:
    """Element size of a quantised model's integer tensors, ``None`` for a float model."""
    sizes = [
        _QUANT_BYTES[t]
        for node in graph.node
        if node.op_type in QUANT_OPS
        for v in (*node.input, *node.output)
        if (t := types.elem_type(v)) in _QUANT_BYTES
    ]
    return max(sizes) if sizes else None


# ----------------------------------------------------------------------- internals
def _name(node: onnx.NodeProto) -> str:
    """A node's name, or its first output's name for an unnamed node."""
    return node.name or (node.output[0] if node.output else "")


def _label(node: onnx.NodeProto) -> str:
    """How errors name a node: its name (or first output) and op type."""
    who = repr(node.name) if node.name else f"producing {_name(node)!r}"
    return f"node {who} ({node.op_type})"


def _graph_name(model: onnx.ModelProto) -> str:
    return model.graph.name or "onnx-model"


class _ValueTypes:
    """Element types and (possibly unknown) shapes of the values of an inferred graph."""

    def __init__(self, graph: onnx.GraphProto, source: str) -> None:
        self.source = source
        self._types: dict[str, onnx.TypeProto.Tensor] = {}
        for vi in (*graph.input, *graph.value_info, *graph.output):
            if vi.type.HasField("tensor_type"):
                self._types.setdefault(vi.name, vi.type.tensor_type)
        self._init = {t.name: t for t in graph.initializer}

    def elem_type(self, value: str) -> int | None:
        if value in self._init:
            return self._init[value].data_type
        t = self._types.get(value)
        return t.elem_type if t is not None else None

    def shape(self, value: str, role: str) -> tuple[int, ...]:
        """Static shape of ``value``; ``role`` says where it sits (for the error).

        Raises:
            MissingShapeError: no shape, unknown rank, or an unknown / symbolic dimension.
        """
        if value in self._init:
            return tuple(int(d) for d in self._init[value].dims)
        t = self._types.get(value)
        if t is None or not t.HasField("shape"):
            self._missing(value, role, "has no shape after ONNX shape inference")
        dims = []
        for axis, d in enumerate(t.shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:
                dims.append(int(d.dim_value))
                continue
            what = f"symbolic dimension {d.dim_param!r}" if d.dim_param else "an unknown dimension"
            if axis == 0 and "graph input" in role:
                self._missing(
                    value,
                    role,
                    f"has a {what} at axis 0 (the batch dimension); fix it to a number: "
                    "re-export with a static batch size, or set "
                    "graph.input[...].type.tensor_type.shape.dim[0].dim_value and save the model",
                )
            self._missing(value, role, f"has {what} at axis {axis}")
        return tuple(dims)

    def _missing(self, value: str, role: str, problem: str) -> None:
        raise MissingShapeError(f"{self.source}: tensor {value!r} ({role}) {problem}; {_FIX_HINT}")


def _constant_numel(node: onnx.NodeProto) -> int:
    """Element count of a ``Constant`` node's value."""
    attr = node.attribute[0] if node.attribute else None
    if attr is None:
        return 0
    value = helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        return numel(value.dims)
    if isinstance(value, onnx.SparseTensorProto):
        return numel(value.dims)
    if isinstance(value, list | tuple):
        return len(value)
    return 1


class _Translator:
    """One pass over a sorted, inferred graph: which values are static, and the raw ops.

    ``pads`` maps the output of each folding ``Pad`` to its x-axis padding before: that
    ``Pad`` is a view, and its readers add the padding to their ``pad`` attribute.
    """

    def __init__(
        self,
        graph: onnx.GraphProto,
        types: _ValueTypes,
        source: str,
        dtype: int,
        pads: dict[str, int] | None = None,
    ):
        self.graph, self.types, self.source, self.dtype = graph, types, source, dtype
        self.pads = pads or {}
        # static value -> the initializers / Constant tensors it is computed from
        self.roots: dict[str, frozenset[str]] = {
            t.name: frozenset((t.name,)) for t in graph.initializer
        }
        self.root_numel: dict[str, int] = {t.name: numel(t.dims) for t in graph.initializer}
        self.graph_inputs = {i.name for i in graph.input if i.name not in self.roots}
        self.active: set[str] = set(self.graph_inputs)
        self.unmodelled: dict[str, str] = {}  # secondary outputs -> their node
        self.ops: list[RawOp] = []
        self.charged: dict[str, int] = {}

    def run(self, model: onnx.ModelProto) -> RawImport:
        for node in self.graph.node:
            self._node(node)
        read = {x for op in self.ops for x in op.inputs}
        inputs = [
            TensorInfo(i.name, shape, numel(shape) * self.dtype)
            for i in self.graph.input
            if i.name in read and i.name not in self.roots
            for shape in [self.types.shape(i.name, "graph input")]
        ]
        opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), 0)
        meta = {
            "source": self.source,
            "format": "onnx",
            "opset": int(opset),
            "producer": f"{model.producer_name} {model.producer_version}".strip(),
            "quantized": quantized_bytes(self.graph, self.types) is not None,
            "parameters": int(sum(self.charged.values())),
        }
        return RawImport(self.ops, inputs, self.dtype, meta)

    def _node(self, node: onnx.NodeProto) -> None:
        rule = OP_RULES[node.op_type]
        ins = list(node.input)
        for x in filter(None, ins):
            if x not in self.active and x not in self.roots:
                self._dangling(node, x)
        live = [bool(x) and x in self.active for x in ins]
        if rule.kind == "const" or not any(live):
            self._fold(node, rule, ins)
            return
        folds = node.op_type == "Pad" and node.output[0] in self.pads
        kind = "alias" if folds else rule.kind_for(live)
        params = self._params(rule, ins, live)
        for x in (x for x, is_live in zip(ins, live) if is_live):
            self.types.shape(x, self._reader_role(x, node))
        outs = [o for o in node.output if o] if node.op_type in MULTI_OUTPUT else node.output[:1]
        for out in outs:
            self._emit(node, rule, kind, ins, live, params, out)
        for extra in filter(None, node.output[len(outs) :]):
            self.unmodelled[extra] = _label(node)

    def _fold(self, node: onnx.NodeProto, rule: OpRule, ins: list[str]) -> None:
        """A node with static inputs only (or a shape query): its outputs are static."""
        if node.op_type == "Constant":
            out = node.output[0]
            self.root_numel[out] = _constant_numel(node)
            roots = frozenset((out,))
        else:
            slots = {*rule.slots(rule.data, len(ins)), *rule.slots(rule.weights, len(ins))}
            roots = frozenset().union(*(self.roots[ins[i]] for i in slots if ins[i]))
        for out in filter(None, node.output):
            self.roots[out] = roots

    def _params(self, rule: OpRule, ins: list[str], live: list[bool]) -> dict[str, int]:
        """Parameters read through the static values in the rule's weights slots."""
        params: dict[str, int] = {}
        for i in rule.slots(rule.weights, len(ins)):
            if not ins[i] or live[i]:
                continue
            for root in sorted(self.roots[ins[i]]):
                n = self.root_numel[root]
                if rule.immediates and n <= 1:
                    continue
                params[root] = n
                self.charged[root] = n
        return params

    def _emit(self, node, rule, kind, ins, live, params, out) -> None:
        role = f"output of {_label(node)}"
        shape = self.types.shape(out, role)
        cost = None
        if rule.cost is not None and kind not in ("alias", "const"):
            view = OpView(
                op_type=node.op_type,
                kind=kind,
                attrs={a.name: helper.get_attribute_value(a) for a in node.attribute},
                out_shape=shape,
                present=tuple(bool(x) for x in ins),
                shape=lambda slot: self.types.shape(ins[slot], f"input {slot} of {_label(node)}"),
                pad_before=self.pads.get(ins[0], 0) if live and live[0] else 0,
            )
            cost = rule.cost(view)
        self.ops.append(
            RawOp(
                name=out,
                kind=kind,
                source_op=node.op_type,
                inputs=[x for x, is_live in zip(ins, live) if is_live],
                output_shape=shape,
                params=dict(params),
                macs=cost.macs if cost else 0,
                vector_ops=cost.vector_ops if cost else 0,
                attrs=dict(cost.attrs) if cost else {},
            )
        )
        self.active.add(out)

    def _reader_role(self, value: str, node: onnx.NodeProto) -> str:
        where = "graph input" if value in self.graph_inputs else "activation"
        return f"{where}, read by {_label(node)}"

    def _dangling(self, node: onnx.NodeProto, value: str) -> None:
        if value in self.unmodelled:
            raise WorkloadError(
                f"{self.source}: {_label(node)} reads {value!r}, a secondary output of "
                f"{self.unmodelled[value]}; only the first output of that operator is modelled"
            )
        raise WorkloadError(
            f"{self.source}: {_label(node)} reads {value!r}, which no node, initializer or "
            "graph input provides"
        )


__all__ = [
    "RawImport",
    "check_supported",
    "from_onnx",
    "infer_shapes",
    "load_model",
    "quantized_bytes",
    "sort_nodes",
    "translate",
]
