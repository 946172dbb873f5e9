"""Fold the integer shape arithmetic of an ONNX graph so that shape inference sees through it.

Exporters often compute shapes and index tensors at run time from constants
(``Expand(positions, Where(Equal(ConstantOfShape(...), ...), ...))``); ONNX data
propagation stops at such ops and leaves symbolic dimensions behind, although every
value involved is known. :func:`shape_model` evaluates those values with the ONNX
reference implementation, rounds of shape inference in between (``Shape`` of a tensor
becomes known once the tensor's shape is), and returns a copy of the model in which
they are initializers. Only int32 / int64 / bool values of at most :data:`MAX_ELEMENTS`
elements are folded, so weights (float or quantised) are never touched, and the copy
serves shape inference only: the importer still translates the original graph.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator

log = logging.getLogger(__name__)

#: Largest folded value, in elements.
MAX_ELEMENTS = 1 << 16
#: At most this many rounds of shape inference and folding.
MAX_ROUNDS = 8
_FOLD_TYPES = (TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL)
_FOLD_DTYPES = (np.int64, np.int32, np.bool_)


def shape_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` with its static integer values as initializers, for shape inference.

    Args:
        model: a model whose nodes are in topological order.

    Returns:
        The copy; nodes whose outputs were all folded are removed from it.
    """
    values = _integer_constants(model.graph)
    dead: set[int] = set()  # nodes that cannot be folded
    folded: set[int] = set()
    for _ in range(MAX_ROUNDS):
        copy = _with_values(model, values, folded)
        try:
            inferred = onnx.shape_inference.infer_shapes(copy, data_prop=True)
        except Exception:  # the importer's own inference call reports the problem
            log.debug("shape inference failed while folding", exc_info=True)
            break
        new = _fold_round(model.graph, values, _static_shapes(inferred.graph), folded, dead)
        if not new:
            break
        log.debug("folded %d integer values", new)
    return _with_values(model, values, folded)


def _integer_constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Small int / bool initializers whose data is loaded."""
    return {
        t.name: numpy_helper.to_array(t)
        for t in graph.initializer
        if t.data_type in _FOLD_TYPES
        and t.data_location != TensorProto.EXTERNAL
        and int(np.prod(t.dims)) <= MAX_ELEMENTS
    }


def _static_shapes(graph: onnx.GraphProto) -> dict[str, tuple[int, ...]]:
    """Value name -> shape, for values whose inferred shape is fully static."""
    shapes: dict[str, tuple[int, ...]] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and t.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
            if all(d >= 0 for d in dims):
                shapes[vi.name] = tuple(dims)
    for t in graph.initializer:
        shapes[t.name] = tuple(t.dims)
    return shapes


def _fold_round(
    graph: onnx.GraphProto,
    values: dict[str, np.ndarray],
    shapes: dict[str, tuple[int, ...]],
    folded: set[int],
    dead: set[int],
) -> int:
    """Evaluate every node that has become foldable; return how many were folded."""
    count = 0
    for i, node in enumerate(graph.node):
        if i in folded or i in dead:
            continue
        outs = _evaluate(node, values, shapes)
        if outs is None:
            continue
        if not all(_foldable(v) for v in outs):
            dead.add(i)
            continue
        values.update(zip(node.output, outs))
        folded.add(i)
        count += 1
    return count


def _evaluate(node, values, shapes) -> list[np.ndarray] | None:
    """Output values of ``node`` if its inputs are known now, else ``None``."""
    if node.domain not in ("", "ai.onnx") or any(a.type in _GRAPH_ATTRS for a in node.attribute):
        return None
    if node.op_type in ("Shape", "Size"):
        shape = shapes.get(node.input[0])
        return None if shape is None else [_shape_op(node, shape)]
    if not all(x in values for x in node.input if x):
        return None
    try:
        outs = ReferenceEvaluator(node).run(None, {x: values[x] for x in node.input if x})
    except Exception:  # an op the reference implementation cannot run: leave it to inference
        log.debug("cannot fold %s %r", node.op_type, node.name, exc_info=True)
        return None
    return [np.asarray(v) for v in outs]


_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def _shape_op(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    """``Shape`` (with its ``start`` / ``end`` attributes) or ``Size`` of a static shape."""
    if node.op_type == "Size":
        return np.asarray(int(np.prod(shape)), dtype=np.int64)
    attrs = {a.name: a.i for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return np.asarray(shape[slice(start, end)], dtype=np.int64)


def _foldable(value: np.ndarray) -> bool:
    return value.dtype in _FOLD_DTYPES and value.size <= MAX_ELEMENTS


def _with_values(
    model: onnx.ModelProto, values: dict[str, np.ndarray], folded: set[int]
) -> onnx.ModelProto:
    """Copy of ``model`` without the folded nodes, their outputs given as initializers."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    if not folded:
        return copy
    graph = copy.graph
    outputs = {o for i in folded for o in graph.node[i].output if o}
    kept = [n for i, n in enumerate(model.graph.node) if i not in folded]
    infos = [v for v in model.graph.value_info if v.name not in outputs]
    del graph.node[:]
    graph.node.extend(kept)  # extend copies the messages
    del graph.value_info[:]
    graph.value_info.extend(infos)
    graph.initializer.extend(numpy_helper.from_array(values[o], o) for o in sorted(outputs))
    return copy
