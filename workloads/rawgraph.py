"""The importers' common language: a graph of source ops before fusion.

Each importer (``torch_import`` for ``torch.export`` programs, ``onnx_import`` for ONNX
files) translates its source ops into :class:`RawOp` records with one of the
:data:`KINDS` below; :func:`workloads.fusion.fuse` then groups them into the
mappable layers of a :class:`~workloads.ir.Workload`. Importers never fuse;
fusion never looks at a source format.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: What a source op is, for fusion. ``anchor`` kinds start a mappable layer and are the
#: op types of :data:`workloads.ir.OP_TYPES`; the rest are folded away.
ANCHOR_KINDS = (
    "conv",
    "linear",
    "matmul",
    "embedding",
    "pool",
    "norm",
    "softmax",
    "reduce",
    "layout",
)
#: ``eltwise``: elementwise op (activation, bias add, batch-norm in inference, residual
#: add, scale, ...), fused into the layer that produces its input where it can be.
#: ``alias``: a view that moves no data (reshape, flatten, squeeze, dropout at
#: inference, contiguous on a view, slicing, tuple getitem); its output *is* its input.
#: ``const``: produces a tensor that does not depend on graph inputs (arange, ones, ...);
#: folded at compile time.
KINDS = ANCHOR_KINDS + ("eltwise", "alias", "const")


@dataclass
class RawOp:
    """One source op.

    Attributes:
        name: unique name of the op's output value.
        kind: one of :data:`KINDS`.
        source_op: the source operator (``"aten.conv2d.default"``, ``"Conv"``), for errors.
        inputs: names of the *value* inputs (outputs of other ops or graph inputs), in
            argument order; parameters and constants are not listed here.
        output_shape: shape of the output value.
        params: ``{parameter name: number of elements}`` this op reads; a parameter read
            by several ops (tied weights) is charged once, to the first node that reads it.
        macs: multiply-accumulates (conv, linear, matmul).
        vector_ops: elementwise / reduction operations (usually the output size).
        attrs: conv-style attributes: ``groups``, ``kernel`` (kx, ky), ``stride``,
            ``pad``, ``dilation`` (ints; the x-axis value where they differ per axis).
    """

    name: str
    kind: str
    source_op: str
    inputs: list[str]
    output_shape: tuple[int, ...]
    params: dict[str, int] = field(default_factory=dict)
    macs: int = 0
    vector_ops: int = 0
    attrs: dict = field(default_factory=dict)
