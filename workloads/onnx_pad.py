"""Explicit ONNX ``Pad`` ops folded into the sliding-window ops that read them.

Exporters write ``F.pad(x, ...)`` followed by a convolution as a ``Pad`` node feeding a
``Conv``; ``from_torch`` treats the same ``aten.pad`` as a view whose x-axis padding is
added to the consuming conv's ``pad`` attribute. For both importers to give the same
layers, a ``Pad`` folds (becomes a view: no node, no bytes, no vector ops, its x-axis
padding added to each reader's ``pad``) when all of these hold:

* ``mode`` is ``constant`` and the padding value is absent or zero;
* ``pads`` (and ``constant_value`` / ``axes`` when given) are static: an attribute
  (opset < 11), an initializer, a ``Constant``, or an integer value the importer folds for
  shape inference (:mod:`workloads.onnx_fold`);
* every pad is non-negative (no cropping) and the batch and channel axes are not padded;
* the output is not a graph output, and every reader is an op of
  :data:`~workloads.onnx_ops.PAD_ABSORBING` reading it as its data input (slot 0).

Any other ``Pad`` (reflect / edge / wrap mode, a non-zero value, pads computed from
activations, a reader such as ``Relu`` or ``ConvTranspose``) stays a ``layout`` node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from workloads.onnx_ops import PAD_ABSORBING

log = logging.getLogger(__name__)

#: Axes before the spatial ones (batch, channels): padding them is not window padding.
_LEADING_AXES = 2

#: Value name -> its static array, ``None`` if it is not static.
Static = Callable[[str], np.ndarray | None]


def folded_pads(graph: onnx.GraphProto, inferred: onnx.GraphProto) -> dict[str, int]:
    """The ``Pad`` outputs that fold into their readers, with their x-axis padding before.

    Args:
        graph: the sorted graph the importer translates.
        inferred: the same graph after shape inference on the folded copy (its
            initializers include the folded integer values; its ``value_info`` the ranks).

    Returns:
        ``{Pad output name: padding before the last axis}`` for every folding ``Pad``.
    """
    readers = _readers(graph)
    outputs = {o.name for o in graph.output}
    static, rank = _static_values(inferred), _ranks(inferred)
    folds: dict[str, int] = {}
    for node in graph.node:
        if node.op_type != "Pad" or not node.output or node.output[0] in outputs:
            continue
        uses = readers.get(node.output[0], [])
        if not uses or not all(op in PAD_ABSORBING and slot == 0 for op, slot in uses):
            continue
        pad = x_pad_before(node, static, rank.get(node.input[0]))
        if pad is not None:
            folds[node.output[0]] = pad
    if folds:
        log.debug("folding %d Pad ops into the windows of their readers", len(folds))
    return folds


def x_pad_before(node: onnx.NodeProto, static: Static, rank: int | None) -> int | None:
    """Padding before the last axis of a foldable ``Pad`` (module docstring), else ``None``.

    Args:
        node: the ``Pad`` node.
        static: value name -> its static array, ``None`` if not static.
        rank: rank of the padded tensor, ``None`` if unknown.
    """
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attrs.get("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else str(mode)) != "constant":
        return None
    if rank is None or rank <= _LEADING_AXES:
        return None
    if "pads" in attrs:  # opset < 11: pads and value are attributes
        pads, value, axes = np.asarray(attrs["pads"]), np.asarray(attrs.get("value", 0.0)), None
    else:
        slot = list(node.input) + [""] * (4 - len(node.input))
        pads = static(slot[1]) if slot[1] else None
        value = static(slot[2]) if slot[2] else np.zeros(())
        axes = static(slot[3]) if slot[3] else None
        if pads is None or value is None or (slot[3] and axes is None):
            return None
    axes = np.arange(rank) if axes is None else np.asarray(axes).ravel() % rank
    pads = pads.ravel().astype(np.int64)
    if pads.size != 2 * axes.size or np.any(value != 0) or np.any(pads < 0):
        return None
    before, after = pads[: axes.size], pads[axes.size :]
    if np.any((before + after)[axes < _LEADING_AXES] != 0):
        return None
    return int(before[axes == rank - 1].sum())


# ----------------------------------------------------------------------- internals
def _readers(graph: onnx.GraphProto) -> dict[str, list[tuple[str, int]]]:
    """Value name -> ``(op_type, input slot)`` of every node input that reads it."""
    readers: dict[str, list[tuple[str, int]]] = {}
    for node in graph.node:
        for slot, x in enumerate(node.input):
            if x:
                readers.setdefault(x, []).append((node.op_type, slot))
    return readers


def _static_values(graph: onnx.GraphProto) -> Static:
    """Lookup of initializer and ``Constant`` values (``None``: not static or unreadable)."""
    tensors = {t.name: t for t in graph.initializer}
    constants = {
        n.output[0]: n.attribute[0] for n in graph.node if n.op_type == "Constant" and n.attribute
    }

    def value(name: str) -> np.ndarray | None:
        try:
            if name in tensors:
                return numpy_helper.to_array(tensors[name])
            if name in constants:
                v = helper.get_attribute_value(constants[name])
                return (
                    numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else np.asarray(v)
                )
        except Exception:  # external or sparse data: treated as not static
            log.debug("cannot read the static value %r", name, exc_info=True)
        return None

    return value


def _ranks(graph: onnx.GraphProto) -> dict[str, int]:
    """Value name -> rank, for values whose inferred type has a shape."""
    return {
        vi.name: len(vi.type.tensor_type.shape.dim)
        for vi in (*graph.input, *graph.value_info, *graph.output)
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
    }


__all__ = ["folded_pads", "x_pad_before"]
