"""The ATen operator table: what each supported ``torch.export`` op is and what it costs.

Every supported op (keyed by its ATen packet name, ``"aten.conv2d"``, or a custom op's,
``"transformers.grouped_mm_fallback"``) has a :class:`TorchRule`: the
:class:`~workloads.rawgraph.RawOp` kind it becomes and a cost function computing
``macs``, ``vector_ops`` and conv-style attributes from the FX node's arguments and the
``meta["val"]`` shapes of its inputs and output. An op outside the table makes
:func:`workloads.from_torch` raise :class:`~workloads.errors.UnsupportedOperatorError`.

Costs follow the same conventions as the ONNX table (:mod:`workloads.onnx_ops`):
``macs`` for conv / linear / matmul, ``vector_ops`` per output element for elementwise
ops and layouts (2 for an inference batch-norm, 3 for softmax, 5 for layer / group
norm), per input element for reductions, per output element and window element for
pooling, per element written for scatters (the functional forms of in-place updates).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import fx


@dataclass(frozen=True)
class Cost:
    """Cost of one op: multiply-accumulates, vector operations, conv-style attributes."""

    macs: int = 0
    vector_ops: int = 0
    attrs: dict = field(default_factory=dict)


CostFn = Callable[[fx.Node], Cost]


@dataclass(frozen=True)
class TorchRule:
    """How one ATen op is translated: its RawOp kind and its cost function."""

    kind: str
    cost: CostFn | None = None


def numel(shape: Sequence[int]) -> int:
    """Number of elements of a shape (1 for a scalar)."""
    return int(math.prod(shape)) if len(shape) else 1


def shape_of(value) -> tuple[int, ...]:
    """Static shape of an FX node's value, or of the first tensor of a tuple output."""
    val = value.meta.get("val") if isinstance(value, fx.Node) else value
    if isinstance(val, (tuple, list)):
        val = next((v for v in val if isinstance(v, torch.Tensor)), None)
    if not isinstance(val, torch.Tensor):
        return ()
    return tuple(int(d) for d in val.shape)


def arg(node: fx.Node, index: int, name: str, default=None):
    """Argument ``index`` of an FX node, or keyword ``name``, or ``default``."""
    if index < len(node.args):
        return node.args[index]
    return node.kwargs.get(name, default)


def _x(value, default: int) -> int:
    """x-axis (last spatial) value of an int or a per-axis list."""
    if value is None:
        return default
    if isinstance(value, (list, tuple)):
        return int(value[-1]) if value else default
    return int(value)


def _kernel_xy(kernel: Sequence[int]) -> tuple[int, int]:
    kernel = list(kernel) or [1]
    return int(kernel[-1]), int(kernel[-2]) if len(kernel) >= 2 else 1


# ----------------------------------------------------------------- cost functions
def per_output(factor: int = 1) -> CostFn:
    """``factor`` vector operations per output element."""
    return lambda n: Cost(vector_ops=factor * numel(shape_of(n)))


def per_input(factor: int = 1) -> CostFn:
    """``factor`` vector operations per element of the first input (reductions)."""
    return lambda n: Cost(vector_ops=factor * numel(shape_of(n.args[0])))


def _pad_before(node: fx.Node) -> int:
    """x-axis padding of an ``aten.pad`` / ``constant_pad_nd`` feeding ``node`` (else 0)."""
    src = node.args[0]
    if isinstance(src, fx.Node) and rule_key(src.target) in ("aten.pad", "aten.constant_pad_nd"):
        return int(src.args[1][0])
    return 0


def _conv_pad(padding, kernel: Sequence[int], dilation: int) -> int:
    """x-axis padding of a conv; ``"same"`` pads half the dilated kernel, ``"valid"`` none."""
    if isinstance(padding, str):
        return (dilation * (int(kernel[-1]) - 1)) // 2 if padding == "same" else 0
    return _x(padding, 0)


def conv(transposed: bool | None = False) -> CostFn:
    """Convolution; weight ``[M, C/g, k...]`` (``[C, M/g, k...]`` when transposed).

    Arguments follow ``aten.conv{1,2,3}d`` ``(x, w, b, stride, padding, dilation,
    groups)``, ``aten.conv_transpose*`` ``(x, w, b, stride, padding, output_padding,
    groups, dilation)`` or, with ``transposed=None``, ``aten.convolution`` ``(x, w, b,
    stride, padding, dilation, transposed, output_padding, groups)``. MACs: each output
    element (each input element when transposed) multiplies ``prod(w[1:])`` weights; a
    bias adds one vector op per output element. A pad op feeding the conv adds its
    x-axis padding to ``pad``.
    """

    def cost(node: fx.Node) -> Cost:
        if transposed is None:
            trans = bool(arg(node, 6, "transposed", False))
            groups, dilation = arg(node, 8, "groups", 1), arg(node, 5, "dilation", 1)
        elif transposed:
            trans = True
            groups, dilation = arg(node, 6, "groups", 1), arg(node, 7, "dilation", 1)
        else:
            trans = False
            groups, dilation = arg(node, 6, "groups", 1), arg(node, 5, "dilation", 1)
        w = shape_of(node.args[1])
        dilation = _x(dilation, 1)
        base = shape_of(node.args[0]) if trans else shape_of(node)
        attrs = {
            "groups": int(groups),
            "kernel": _kernel_xy(w[2:]),
            "stride": _x(arg(node, 3, "stride", 1), 1),
            "pad": _conv_pad(arg(node, 4, "padding", 0), w[2:], dilation) + _pad_before(node),
            "dilation": dilation,
        }
        vec = numel(shape_of(node)) if arg(node, 2, "bias") is not None else 0
        return Cost(macs=numel(base) * numel(w[1:]), vector_ops=vec, attrs=attrs)

    return cost


def pool(kernel_arg: int = 1, stride_arg: int = 2, pad_arg: int = 3) -> CostFn:
    """Windowed pooling ``(x, kernel, stride, padding, ...)``: out elements x window size.

    A window larger than the padded input (``AvgPool2d(1280)`` on a 7x7 map) is clipped
    to it, for the cost and the ``kernel`` and ``stride`` attributes alike.
    """

    def cost(node: fx.Node) -> Cost:
        kernel = arg(node, kernel_arg, "kernel_size")
        kernel = list(kernel) if isinstance(kernel, (list, tuple)) else [kernel]
        spatial = shape_of(node.args[0])[-len(kernel) :]
        pads = arg(node, pad_arg, "padding", 0)
        pads = list(pads) if isinstance(pads, (list, tuple)) else [pads] * len(kernel)
        pads = (pads * len(kernel))[: len(kernel)] if len(pads) == 1 else pads
        window = [min(int(k), int(i) + 2 * int(p)) for k, i, p in zip(kernel, spatial, pads)]
        attrs = {
            "kernel": _kernel_xy(window),
            "stride": min(_x(arg(node, stride_arg, "stride") or kernel, 1), window[-1]),
            "pad": _x(pads, 0) + _pad_before(node),
            "dilation": 1,
        }
        return Cost(vector_ops=numel(shape_of(node)) * numel(window), attrs=attrs)

    return cost


def adaptive_pool(node: fx.Node) -> Cost:
    """Adaptive pooling: every input element is read once; window = input / output."""
    x, out = shape_of(node.args[0]), shape_of(node)
    spatial = len(out) - 2
    window = [max(1, i // max(o, 1)) for i, o in zip(x[-spatial:], out[-spatial:])]
    attrs = {"kernel": _kernel_xy(window), "stride": window[-1], "pad": 0, "dilation": 1}
    return Cost(vector_ops=numel(x), attrs=attrs)


def linear(node: fx.Node) -> Cost:
    """``linear(x, w[N, K], b)``: ``K`` MACs per output element, a bias vector op each."""
    k = shape_of(node.args[1])[-1]
    vec = numel(shape_of(node)) if arg(node, 2, "bias") is not None else 0
    return Cost(macs=numel(shape_of(node)) * int(k), vector_ops=vec)


def matmul(a: int = 0, bias: int | None = None) -> CostFn:
    """``A[..., M, K] @ B[..., K, N]`` with ``A`` in argument ``a``: ``K`` MACs per output.

    ``bias`` names the argument of an added term (``addmm``): one vector op per output.
    """

    def cost(node: fx.Node) -> Cost:
        out = numel(shape_of(node))
        vec = out if bias is not None else 0
        return Cost(macs=out * int(shape_of(node.args[a])[-1]), vector_ops=vec)

    return cost


def einsum(node: fx.Node) -> Cost:
    """``einsum(equation, operands)``: per output element, one MAC per contracted point."""
    equation, operands = node.args[0].replace(" ", "").replace("...", ""), node.args[1]
    lhs, _, out = equation.partition("->")
    terms = lhs.split(",")
    if "->" not in equation:
        letters = "".join(terms)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    sizes: dict[str, int] = {}
    for letters, op in zip(terms, operands):
        shape = shape_of(op)
        sizes.update(zip(letters, shape[len(shape) - len(letters) :]))
    contracted = [sizes[c] for c in sizes if c not in out]
    return Cost(macs=numel(shape_of(node)) * numel(contracted))


def attention(node: fx.Node) -> Cost:
    """``scaled_dot_product_attention(q[..., L, E], k[..., S, E], v[..., S, Ev])``.

    Two matrix products (``L*S*E`` and ``L*S*Ev`` MACs per batch and head) and a
    softmax over the ``L x S`` scores (3 vector ops per score).
    """
    q, k, v = (shape_of(a) for a in node.args[:3])
    batch = numel(q[:-2])
    length, source, e, ev = q[-2], k[-2], q[-1], v[-1]
    scores = batch * length * source
    return Cost(macs=scores * (e + ev), vector_ops=3 * scores)


def sort(node: fx.Node) -> Cost:
    """A comparison sort along ``dim`` (``sort(x, dim=-1)``): ``ceil(log2 n)`` vector ops
    per element for rows of ``n``."""
    x = shape_of(node.args[0])
    n = x[int(arg(node, 1, "dim", -1)) % len(x)] if x else 1
    return Cost(vector_ops=numel(x) * max(1, math.ceil(math.log2(max(n, 1)))))


def meshgrid(node: fx.Node) -> Cost:
    """``meshgrid(tensors)``: one grid per input, one vector op per element of each."""
    return Cost(vector_ops=len(node.args[0]) * numel(shape_of(node)))


def written(source: int) -> CostFn:
    """A scatter into a copy of its first input: one vector op per element written, the
    elements of argument ``source`` (the source of ``slice_scatter``, the index of
    ``scatter``); the rest of the input stays in place."""
    return lambda n: Cost(vector_ops=numel(shape_of(n.args[source])))


def index_put(node: fx.Node) -> Cost:
    """``index_put(x, indices, values)``: one vector op per indexed position (the broadcast
    index shape times the dims no index covers; a boolean mask counts all its positions)."""
    x = shape_of(node.args[0])
    dim, covered, masked, shapes = 0, 1, 1, []
    for index in node.args[1]:
        if index is None:
            dim += 1
            continue
        if getattr(index.meta.get("val"), "dtype", None) == torch.bool:
            span = len(shape_of(index))
            masked *= numel(shape_of(index))
        else:
            span = 1
            shapes.append(shape_of(index))
        covered *= numel(x[dim : dim + span])
        dim += span
    positions = masked * (numel(torch.broadcast_shapes(*shapes)) if shapes else 1)
    return Cost(vector_ops=positions * (numel(x) // max(covered, 1)))


# ------------------------------------------------------------------------ the table
def _rules(names: str, rule: TorchRule) -> dict[str, TorchRule]:
    return {f"aten.{n}": rule for n in names.split()}


_ALIAS = TorchRule("alias")
_CONST = TorchRule("const")
_ELTWISE = TorchRule("eltwise", per_output())
_LAYOUT = TorchRule("layout", per_output())
_NORM = TorchRule("norm", per_output(5))
_REDUCE = TorchRule("reduce", per_input())
#: Ops with no tensor result that nothing reads (export-time assertions): skipped.
SKIP = TorchRule("skip")

#: ATen packet name (``"aten.conv2d"``; ``"getitem"`` for tuple indexing) -> rule.
TORCH_RULES: dict[str, TorchRule] = {
    # convolutions
    **_rules("conv1d conv2d conv3d", TorchRule("conv", conv(False))),
    **_rules("conv_transpose1d conv_transpose2d", TorchRule("conv", conv(True))),
    "aten.convolution": TorchRule("conv", conv(None)),
    # matrix products (fusion turns a matmul that reads a parameter into linear)
    "aten.linear": TorchRule("linear", linear),
    **_rules("matmul mm bmm", TorchRule("matmul", matmul(0))),
    **_rules("addmm baddbmm", TorchRule("matmul", matmul(1, bias=0))),
    "aten.einsum": TorchRule("matmul", einsum),
    **_rules(
        "scaled_dot_product_attention _scaled_dot_product_flash_attention_for_cpu "
        "_scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention "
        "_scaled_dot_product_cudnn_attention",
        TorchRule("matmul", attention),
    ),
    # mixture-of-experts: rows sorted by expert, each row times its expert's weight
    "aten._grouped_mm": TorchRule("matmul", matmul(0)),
    "transformers.grouped_mm_fallback": TorchRule("matmul", matmul(0)),
    "aten.embedding": TorchRule("embedding", per_output()),
    # pooling
    **_rules(
        "max_pool1d max_pool2d max_pool3d max_pool2d_with_indices max_pool3d_with_indices "
        "avg_pool1d avg_pool2d",
        TorchRule("pool", pool()),
    ),
    **_rules(
        "adaptive_avg_pool1d adaptive_avg_pool2d adaptive_max_pool2d",
        TorchRule("pool", adaptive_pool),
    ),
    # normalisation (inference batch-norm is a per-channel scale and shift)
    **_rules(
        "layer_norm group_norm instance_norm rms_norm native_layer_norm native_group_norm", _NORM
    ),
    **_rules(
        "_native_batch_norm_legit_no_training batch_norm", TorchRule("eltwise", per_output(2))
    ),
    **_rules("softmax _softmax log_softmax _log_softmax", TorchRule("softmax", per_output(3))),
    # reductions (a p-norm's power and sum are one multiply-add per element; top-k and a
    # histogram compare or count each element once)
    **_rules(
        "mean sum amax amin max min var std prod argmax argmin any all norm "
        "linalg_vector_norm topk histc",
        _REDUCE,
    ),
    # binary min / max are elementwise (overload entries win over packet entries)
    **{f"aten.{m}.other": _ELTWISE for m in ("max", "min")},
    # new layouts (materialised copies)
    **_rules(
        "permute transpose t cat stack roll flip pixel_shuffle repeat repeat_interleave tile",
        _LAYOUT,
    ),
    "aten.meshgrid": TorchRule("layout", meshgrid),
    **_rules("sort argsort", TorchRule("layout", sort)),
    # elementwise
    **_rules(
        "add sub rsub mul div pow relu relu6 hardtanh gelu silu sigmoid tanh exp log sqrt "
        "rsqrt abs neg reciprocal erf clamp clamp_min clamp_max minimum maximum hardswish "
        "hardsigmoid leaky_relu elu softplus mish sin cos floor ceil round sign square "
        "where masked_fill eq ne lt le gt ge logical_not logical_and logical_or __and__ "
        "__or__ bitwise_not bitwise_and bitwise_or diff cumsum gather index index_select "
        "tril triu _weight_norm _weight_norm_interface floor_divide remainder fmod copy log1p "
        "expm1",
        _ELTWISE,
    ),
    # writes into a copy of the first input (functional forms of in-place updates)
    **_rules("slice_scatter select_scatter", TorchRule("eltwise", written(1))),
    **_rules("scatter scatter_add", TorchRule("eltwise", written(2))),
    "aten.index_add": TorchRule("eltwise", written(3)),
    "aten.index_put": TorchRule("eltwise", index_put),
    # views: no data moves (type conversions are free under one element size)
    **_rules(
        "view _unsafe_view reshape flatten unflatten squeeze unsqueeze expand expand_as "
        "dropout clone contiguous slice select narrow split split_with_sizes chunk unbind "
        "alias detach _to_copy to type_as view_as pad constant_pad_nd as_strided",
        _ALIAS,
    ),
    "getitem": _ALIAS,
    # values known at compile time
    **_rules(
        "arange zeros ones full empty zeros_like ones_like full_like empty_like new_zeros "
        "new_ones new_full new_empty scalar_tensor lift_fresh_copy eye empty_permuted "
        "empty_strided fill",
        _CONST,
    ),
    **_rules("_assert_tensor_metadata _assert_scalar _assert_async sym_constrain_range", SKIP),
}


def rule_key(target) -> str:
    """Packet name of an FX call target: ``"aten.add"`` for ``aten.add.Tensor``."""
    if target is operator.getitem:
        return "getitem"
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        return str(packet)
    return str(getattr(target, "__name__", target))


def op_name(target) -> str:
    """Full name of an FX call target: ``"aten.add.Tensor"``."""
    return "getitem" if target is operator.getitem else str(target)


def lookup(target) -> TorchRule | None:
    """The rule of an FX call target: an overload entry first, then its packet's."""
    return TORCH_RULES.get(op_name(target)) or TORCH_RULES.get(rule_key(target))
