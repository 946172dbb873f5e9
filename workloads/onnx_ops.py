"""The ONNX operator table: what each supported ``op_type`` is for fusion and what it costs.

Every rule gives the :class:`~workloads.rawgraph.RawOp` kind of the op and says which
input slots are what:

* ``data`` slots carry the tensors the op computes on. When a slot holds a *static*
  value (an initializer, a ``Constant``, or something computed only from those), the
  parameters behind it are traced through it (``Reshape(W)``, ``DequantizeLinear(W_q)``).
* ``weights`` slots are where a static value is a *parameter* of the op (conv / linear
  weights and biases, normalisation scales and shifts, the table of an embedding, the
  bias of an ``Add``), charged with its element count.
* every other slot is *meta*: shapes, axes, pads, clip bounds, quantisation scales and
  zero points, gather indices, ``Where`` conditions, batch-norm running statistics. A
  static value there is a constant, never a weight (an int64 ``Reshape`` shape
  initializer costs nothing).

``immediates`` marks elementwise arithmetic, where a one-element static operand
(``x / 8.0``, ``x + 1``) is an immediate of the instruction, not a weight tensor.

Costs are operation counts derived from shapes: ``macs`` for conv / linear / matmul,
``vector_ops`` for the rest (per output element unless noted in the table).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: ``data`` / ``weights`` value meaning "every input slot" (variadic ops: Concat, Sum, Add).
ALL = "all"

Slots = tuple[int, ...] | str


@dataclass(frozen=True)
class OpView:
    """What a cost function may look at for one ONNX node.

    Attributes:
        op_type: the ONNX operator.
        kind: the resolved RawOp kind.
        attrs: the node's attributes, as ``onnx.helper.get_attribute_value`` gives them.
        out_shape: shape of the output being described.
        present: which input slots are given (optional inputs may be empty).
        shape: ``shape(slot)`` -> shape of that input; raises ``MissingShapeError``.
        pad_before: x-axis padding of a ``Pad`` folded into this op's input 0
            (:mod:`workloads.onnx_pad`); added to a sliding window's ``pad``.
    """

    op_type: str
    kind: str
    attrs: dict
    out_shape: tuple[int, ...]
    present: tuple[bool, ...]
    shape: Callable[[int], tuple[int, ...]]
    pad_before: int = 0

    def has(self, slot: int) -> bool:
        return slot < len(self.present) and self.present[slot]


@dataclass(frozen=True)
class Cost:
    """Cost of one op: multiply-accumulates, vector operations, conv-style attributes."""

    macs: int = 0
    vector_ops: int = 0
    attrs: dict = field(default_factory=dict)


CostFn = Callable[[OpView], Cost]


@dataclass(frozen=True)
class OpRule:
    """How one ONNX operator is translated (see the module docstring)."""

    kind: str
    data: Slots = (0,)
    weights: Slots = ()
    cost: CostFn | None = None
    immediates: bool = False
    resolve: Callable[[Sequence[bool]], str] | None = None

    def slots(self, which: Slots, n_inputs: int) -> range | tuple[int, ...]:
        """Input positions named by ``which`` (``data`` or ``weights``) for ``n_inputs`` inputs."""
        return range(n_inputs) if which == ALL else tuple(i for i in which if i < n_inputs)

    def kind_for(self, live: Sequence[bool]) -> str:
        """The RawOp kind, given which input slots carry activations."""
        return self.resolve(live) if self.resolve else self.kind


def numel(shape: Sequence[int]) -> int:
    return int(math.prod(shape)) if len(shape) else 1


# ---------------------------------------------------------------- cost functions
def per_output(factor: int = 1) -> CostFn:
    """``factor`` vector operations per output element."""
    return lambda v: Cost(vector_ops=factor * numel(v.out_shape))


def per_input(factor: int = 1) -> CostFn:
    """``factor`` vector operations per element of input 0 (reductions)."""
    return lambda v: Cost(vector_ops=factor * numel(v.shape(0)))


def _xy(values: Sequence[int]) -> tuple[int, int]:
    """(x, y) of per-spatial-axis values: x is the last axis, y the one before (1 if none)."""
    return int(values[-1]), int(values[-2]) if len(values) >= 2 else 1


def _x_pad(v: OpView, kernel: Sequence[int], strides: Sequence[int], dil: Sequence[int]) -> int:
    """Padding before the x-axis (the last spatial axis), honouring ``auto_pad``."""
    auto = v.attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        size, s, k, d = v.shape(0)[-1], strides[-1], kernel[-1], dil[-1]
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        return total // 2 if auto == "SAME_UPPER" else total - total // 2
    pads = v.attrs.get("pads")
    return int(pads[len(kernel) - 1]) if pads and auto == "NOTSET" else 0


def _window_attrs(v: OpView, kernel: Sequence[int]) -> dict:
    """kernel / stride / pad / dilation of a sliding-window op, x-axis values.

    ``pad`` includes the padding of a ``Pad`` folded into the op (``v.pad_before``).
    """
    nd = len(kernel)
    strides = v.attrs.get("strides") or [1] * nd
    dil = v.attrs.get("dilations") or [1] * nd
    return {
        "kernel": _xy(kernel),
        "stride": int(strides[-1]),
        "pad": _x_pad(v, kernel, strides, dil) + v.pad_before,
        "dilation": int(dil[-1]),
    }


def conv(weight: int, bias: int | None, transpose: bool = False) -> CostFn:
    """Convolution with weight ``[M, C/g, k...]`` (``[C, M/g, k...]`` transposed) in ``weight``.

    MACs: every output element (every input element when transposed) multiplies one
    weight row of ``prod(w[1:])`` elements; a bias adds one vector op per output element.
    """

    def cost(v: OpView) -> Cost:
        w = v.shape(weight)
        kernel = v.attrs.get("kernel_shape") or list(w[2:])
        base = v.shape(0) if transpose else v.out_shape
        attrs = {"groups": int(v.attrs.get("group", 1)), **_window_attrs(v, kernel)}
        vec = numel(v.out_shape) if bias is not None and v.has(bias) else 0
        return Cost(macs=numel(base) * numel(w[1:]), vector_ops=vec, attrs=attrs)

    return cost


def pool(v: OpView) -> Cost:
    """Windowed pooling: one vector op per output element and window element."""
    kernel = v.attrs["kernel_shape"]
    return Cost(vector_ops=numel(v.out_shape) * numel(kernel), attrs=_window_attrs(v, kernel))


def global_pool(v: OpView) -> Cost:
    """Global pooling: the window is the whole input feature map."""
    x = v.shape(0)
    attrs = {"kernel": _xy(x[2:] or (1,)), "stride": 1, "pad": 0, "dilation": 1}
    return Cost(vector_ops=numel(x), attrs=attrs)


def matmul(a: int) -> CostFn:
    """``A[..., M, K] @ B[..., K, N]``: ``K`` MACs per output element (``A`` in slot ``a``)."""
    return lambda v: Cost(macs=numel(v.out_shape) * int(v.shape(a)[-1]))


def gemm(v: OpView) -> Cost:
    """``Y = A' B' + C``: ``K`` MACs per output element, one vector op each for ``C``."""
    a = v.shape(0)
    k = a[0] if v.attrs.get("transA", 0) else a[-1]
    vec = numel(v.out_shape) if v.has(2) else 0
    return Cost(macs=numel(v.out_shape) * int(k), vector_ops=vec)


# ----------------------------------------------------------------- kind resolvers
def mm_kind(a: int, b: int) -> Callable[[Sequence[bool]], str]:
    """``matmul`` when both operands are activations, ``linear`` when one is static."""
    return lambda live: "matmul" if live[a] and live[b] else "linear"


def gather_kind(live: Sequence[bool]) -> str:
    """Rows of a static table picked by activation indices are an embedding; the rest slice."""
    return "alias" if live[0] else "embedding"


# ------------------------------------------------------------------------ the table
def _rules(names: str, rule: OpRule) -> dict[str, OpRule]:
    return dict.fromkeys(names.split(), rule)


_ELTWISE = OpRule("eltwise", cost=per_output())
_BINARY = OpRule("eltwise", data=ALL, weights=ALL, cost=per_output(), immediates=True)
_COMPARE = OpRule("eltwise", data=ALL, cost=per_output())
_ALIAS = OpRule("alias")
_CONST = OpRule("const", data=())
_LAYOUT = OpRule("layout", cost=per_output())
_NORM = OpRule("norm", weights=(1, 2), cost=per_output(5))
_REDUCE = OpRule("reduce", cost=per_input())

#: ONNX ``op_type`` (default domain) -> rule.
OP_RULES: dict[str, OpRule] = {
    # convolutions
    "Conv": OpRule("conv", weights=(1, 2), cost=conv(1, 2)),
    "ConvTranspose": OpRule("conv", weights=(1, 2), cost=conv(1, 2, transpose=True)),
    "ConvInteger": OpRule("conv", weights=(1,), cost=conv(1, None)),
    "QLinearConv": OpRule("conv", weights=(3, 8), cost=conv(3, 8)),
    # matrix products: linear when one operand is static, matmul when both are activations
    "MatMul": OpRule("linear", (0, 1), (0, 1), matmul(0), resolve=mm_kind(0, 1)),
    "MatMulInteger": OpRule("linear", (0, 1), (0, 1), matmul(0), resolve=mm_kind(0, 1)),
    "QLinearMatMul": OpRule("linear", (0, 3), (0, 3), matmul(0), resolve=mm_kind(0, 3)),
    "Gemm": OpRule("linear", (0, 1, 2), (0, 1, 2), gemm, resolve=mm_kind(0, 1)),
    # embedding lookup or slicing
    **_rules(
        "Gather GatherElements GatherND",
        OpRule("embedding", weights=(0,), cost=per_output(), resolve=gather_kind),
    ),
    # pooling
    **_rules("MaxPool AveragePool LpPool", OpRule("pool", cost=pool)),
    **_rules("GlobalAveragePool GlobalMaxPool GlobalLpPool", OpRule("pool", cost=global_pool)),
    # normalisation: 5 ops per element (sum, square sum, normalise, scale, shift)
    **_rules("LayerNormalization InstanceNormalization GroupNormalization", _NORM),
    **_rules("LpNormalization MeanVarianceNormalization", OpRule("norm", cost=per_output(5))),
    # inference batch-norm is a per-channel scale and shift; the running statistics fold
    # into them at compile time (from_torch charges the parameters, not the buffers)
    "BatchNormalization": OpRule("eltwise", weights=(1, 2), cost=per_output(2)),
    # softmax: 3 ops per element (exp, sum, divide)
    **_rules("Softmax LogSoftmax", OpRule("softmax", cost=per_output(3))),
    **_rules(
        "ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 "
        "ReduceSumSquare ReduceLogSum ReduceLogSumExp ArgMax ArgMin",
        _REDUCE,
    ),
    # new layouts (materialised copies)
    "Concat": OpRule("layout", data=ALL, weights=ALL, cost=per_output()),
    # (a zero Pad read only by PAD_ABSORBING ops is a view instead: workloads.onnx_pad)
    **_rules("Transpose Pad Tile Resize Upsample DepthToSpace SpaceToDepth", _LAYOUT),
    "ScatterND": OpRule("layout", data=(0, 2), weights=(0, 2), cost=per_output()),
    # unary elementwise
    **_rules(
        "Relu Sigmoid Tanh Gelu Erf HardSwish HardSigmoid LeakyRelu Elu Selu Celu Softplus "
        "Softsign Mish Abs Log Sqrt Reciprocal Neg Exp Floor Ceil Round Sign Sin Cos Not "
        "IsNaN IsInf Clip Trilu CumSum",
        _ELTWISE,
    ),
    "PRelu": OpRule("eltwise", data=(0, 1), weights=(1,), cost=per_output()),
    # binary / variadic elementwise arithmetic: a static operand is a bias / scale tensor
    **_rules("Add Sub Mul Div Pow Max Min Sum Mean Mod", _BINARY),
    "Where": OpRule("eltwise", (1, 2), (1, 2), per_output(), immediates=True),
    **_rules("Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor", _COMPARE),
    # views: no data moves (type conversions are free under one element size)
    **_rules(
        "Identity Dropout Reshape Flatten Squeeze Unsqueeze Expand Slice Split Cast CastLike "
        "QuantizeLinear DequantizeLinear",
        _ALIAS,
    ),
    # values known at compile time
    **_rules("Shape Size Constant ConstantOfShape Range EyeLike", _CONST),
}

#: Ops that emit one RawOp per output (all others describe their first output only).
MULTI_OUTPUT = frozenset({"Split"})

#: Sliding-window ops whose own padding absorbs a zero ``Pad`` of their input 0
#: (:mod:`workloads.onnx_pad`). Not ConvTranspose: its ``pads`` crop the output.
PAD_ABSORBING = frozenset(
    {"Conv", "ConvInteger", "QLinearConv", "MaxPool", "AveragePool", "LpPool"}
)

#: Ops whose integer tensors reveal a quantised model's element type.
QUANT_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "ConvInteger",
        "MatMulInteger",
    }
)
