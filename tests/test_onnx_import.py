"""ONNX import: op translation, parameters vs constants, shapes, errors, and end to end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.support.onnx_models import CNN_PARAMS, onnx_cnn, onnx_init, onnx_model, onnx_vi
from workloads import MissingShapeError, UnsupportedOperatorError, WorkloadError
from workloads.onnx_import import translate
from workloads.onnx_ops import numel
from workloads.onnx_pad import x_pad_before


# ------------------------------------- model builders (onnx_cnn and the pieces: helpers)
def transformer_block(seq: int = 8, d: int = 16, heads: int = 2) -> onnx.ModelProto:
    """Pre-norm self-attention block: LayerNorm, Q/K/V/O projections, softmax, residual."""
    n = helper.make_node
    hd = d // heads
    nodes = [n("LayerNormalization", ["x", "ln_g", "ln_b"], ["h"], name="ln", axis=-1)]
    for p in "qkv":
        nodes += [
            n("MatMul", ["h", f"w{p}"], [f"{p}0"], name=f"{p}_proj"),
            n("Add", [f"{p}0", f"b{p}"], [f"{p}1"], name=f"{p}_bias"),
            n("Reshape", [f"{p}1", "heads_shape"], [f"{p}2"], name=f"{p}_split"),
        ]
    nodes += [
        n("Transpose", ["q2"], ["q"], name="q_t", perm=[0, 2, 1, 3]),
        n("Transpose", ["k2"], ["kT"], name="k_t", perm=[0, 2, 3, 1]),
        n("Transpose", ["v2"], ["v"], name="v_t", perm=[0, 2, 1, 3]),
        n("MatMul", ["q", "kT"], ["scores"], name="qk"),
        n("Constant", [], ["scale"], name="scale_c", value_float=float(np.sqrt(hd))),
        n("Div", ["scores", "scale"], ["scaled"], name="scale"),
        n("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        n("MatMul", ["probs", "v"], ["ctx"], name="pv"),
        n("Transpose", ["ctx"], ["ctx_t"], name="ctx_t", perm=[0, 2, 1, 3]),
        n("Reshape", ["ctx_t", "merge_shape"], ["ctx2"], name="merge"),
        n("MatMul", ["ctx2", "wo"], ["o0"], name="o_proj"),
        n("Add", ["o0", "bo"], ["o1"], name="o_bias"),
        n("Add", ["o1", "x"], ["y"], name="residual"),
    ]
    inits = [onnx_init("ln_g", (d,)), onnx_init("ln_b", (d,))]
    inits += [onnx_init(f"w{p}", (d, d)) for p in "qkvo"] + [
        onnx_init(f"b{p}", (d,)) for p in "qkvo"
    ]
    inits += [onnx_init("heads_shape", (4,), np.int64, [1, seq, heads, hd])]
    inits += [onnx_init("merge_shape", (3,), np.int64, [1, seq, d])]
    return onnx_model(nodes, [onnx_vi("x", [1, seq, d])], [onnx_vi("y", [1, seq, d])], inits)


def _by_name(raw):
    return {op.name: op for op in raw.raw_ops}


def _all_params(raw) -> dict[str, int]:
    return {k: v for op in raw.raw_ops for k, v in op.params.items()}


# ------------------------------------------------------------------ translation
def test_cnn_kinds_costs_and_attrs():
    raw = translate(onnx_cnn())
    ops = _by_name(raw)
    kinds = [(op.name, op.kind) for op in raw.raw_ops]
    assert kinds == [
        ("c1", "conv"),
        ("n1", "eltwise"),
        ("r1", "eltwise"),
        ("c2", "conv"),
        ("n2", "eltwise"),
        ("s", "eltwise"),
        ("r2", "eltwise"),
        ("gap", "pool"),
        ("flat", "alias"),
        ("y", "linear"),
    ]
    assert ops["c1"].macs == 8 * 16 * 16 * 3 * 9
    assert ops["c1"].vector_ops == 8 * 16 * 16  # bias
    assert ops["c2"].vector_ops == 0  # no bias
    assert ops["c1"].attrs == {"groups": 1, "kernel": (3, 3), "stride": 1, "pad": 1, "dilation": 1}
    assert ops["y"].macs == 8 * 10
    assert ops["gap"].vector_ops == 8 * 16 * 16
    assert ops["gap"].attrs["kernel"] == (16, 16)
    assert ops["s"].inputs == ["n2", "r1"]
    assert ops["flat"].inputs == ["gap"] and ops["flat"].output_shape == (1, 8)
    assert raw.graph_inputs[0].shape == (1, 3, 16, 16)
    assert raw.graph_inputs[0].nbytes == 3 * 16 * 16


def test_parameters_are_weights_and_shape_initializers_are_constants():
    raw = translate(onnx_cnn())
    params = _all_params(raw)
    assert "flat_shape" not in params
    assert sum(params.values()) == CNN_PARAMS == raw.meta["parameters"]
    ops = _by_name(raw)
    assert ops["c1"].params == {"w1": 8 * 27, "b1": 8}
    assert ops["n1"].params == {"bn1_scale": 8, "bn1_bias": 8}  # running stats are constants
    assert ops["s"].params == {}  # residual add of two activations


def test_transformer_linear_vs_matmul_and_scalar_constant():
    raw = translate(transformer_block())
    ops = _by_name(raw)
    by_kind: dict[str, list[str]] = {}
    for op in raw.raw_ops:
        by_kind.setdefault(op.kind, []).append(op.name)
    assert by_kind["linear"] == ["q0", "k0", "v0", "o0"]
    assert by_kind["matmul"] == ["scores", "ctx"]
    assert by_kind["softmax"] == ["probs"] and by_kind["norm"] == ["h"]
    assert by_kind["layout"] == ["q", "kT", "v", "ctx_t"]
    assert ops["scores"].macs == 2 * 8 * 8 * 8  # heads x seq x seq x head_dim
    assert ops["q0"].macs == 8 * 16 * 16
    assert ops["scaled"].params == {}  # a scalar Constant is an immediate
    assert ops["q1"].params == {"bq": 16}
    assert sum(_all_params(raw).values()) == 2 * 16 + 4 * (16 * 16 + 16)
    assert "scale" not in {x for op in raw.raw_ops for x in op.inputs}


def test_embedding_slice_and_tied_weights():
    n = helper.make_node
    nodes = [
        n("Gather", ["table", "ids"], ["emb"], name="embed"),
        n("Constant", [], ["zero"], name="c0", value=onnx_init("zero", (), np.int64, 0)),
        n("Gather", ["emb", "zero"], ["first"], name="pick", axis=1),
        n("Transpose", ["table"], ["table_t"], name="tie", perm=[1, 0]),
        n("MatMul", ["first", "table_t"], ["logits"], name="head"),
    ]
    model = onnx_model(
        nodes,
        [onnx_vi("ids", [1, 8], TensorProto.INT64)],
        [onnx_vi("logits", [1, 100])],
        [onnx_init("table", (100, 16))],
    )
    ops = _by_name(translate(model))
    assert ops["emb"].kind == "embedding" and ops["emb"].params == {"table": 1600}
    assert ops["emb"].inputs == ["ids"] and ops["emb"].output_shape == (1, 8, 16)
    assert ops["first"].kind == "alias" and ops["first"].params == {}
    # the tied output projection reads the same table through a folded Transpose
    assert ops["logits"].kind == "linear" and ops["logits"].params == {"table": 1600}
    assert "table_t" not in ops


def test_grouped_strided_conv_same_padding_and_pool_attrs():
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w"], ["c"], name="dw", group=8, strides=[2, 2], auto_pad="SAME_UPPER"),
        n(
            "MaxPool",
            ["c"],
            ["p"],
            name="pool",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[0, 1, 0, 1],
        ),
    ]
    model = onnx_model(
        nodes, [onnx_vi("x", [2, 8, 15, 15])], [onnx_vi("p", None)], [onnx_init("w", (8, 1, 5, 5))]
    )
    ops = _by_name(translate(model))
    assert ops["c"].output_shape == (2, 8, 8, 8)
    # SAME_UPPER, k=5, s=2, in=15: out 8, total pad (8-1)*2+5-15 = 4, 2 before
    assert ops["c"].attrs == {"groups": 8, "kernel": (5, 5), "stride": 2, "pad": 2, "dilation": 1}
    assert ops["c"].macs == 2 * 8 * 8 * 8 * 25
    # pads [y0, x0, y1, x1] = [0, 1, 0, 1]: the x-axis (width) is padded, the y-axis is not
    assert ops["p"].output_shape == (2, 8, 3, 4)
    assert ops["p"].attrs == {"kernel": (3, 3), "stride": 2, "pad": 1, "dilation": 1}
    assert ops["p"].vector_ops == 2 * 8 * 3 * 4 * 9


def test_split_gives_one_alias_per_output():
    n = helper.make_node
    nodes = [
        n("Split", ["x", "sizes"], ["a", "b"], name="split", axis=1),
        n("Mul", ["a", "b"], ["y"], name="gate"),
    ]
    model = onnx_model(
        nodes,
        [onnx_vi("x", [1, 8, 4])],
        [onnx_vi("y", None)],
        [onnx_init("sizes", (2,), np.int64, [4, 4])],
    )
    ops = _by_name(translate(model))
    assert [ops[o].kind for o in "ab"] == ["alias", "alias"]
    assert ops["a"].output_shape == ops["b"].output_shape == (1, 4, 4)
    assert ops["y"].inputs == ["a", "b"] and ops["y"].params == {}


def _qdq_conv(qtype: int) -> onnx.ModelProto:
    """QuantizeLinear/DequantizeLinear around a conv whose weight is a dequantised integer tensor."""
    n = helper.make_node
    np_q = {TensorProto.INT8: np.int8, TensorProto.INT16: np.int16}[qtype]
    nodes = [
        n("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q"),
        n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq"),
        n("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], name="wdq", axis=0),
        n("Conv", ["xd", "wd"], ["y"], name="conv", kernel_shape=[3, 3]),
    ]
    inits = [
        onnx_init("xs", (), value=0.1),
        onnx_init("xz", (), np_q, 0),
        onnx_init("wq", (4, 3, 3, 3), np_q),
        onnx_init("ws", (4,), value=[0.1] * 4),
        onnx_init("wz", (4,), np_q),
    ]
    return onnx_model(nodes, [onnx_vi("x", [1, 3, 8, 8])], [onnx_vi("y", None)], inits, opset=21)


@pytest.mark.parametrize(("qtype", "nbytes"), [(TensorProto.INT8, 1), (TensorProto.INT16, 2)])
def test_quantized_model_element_size_and_weight_tracing(qtype, nbytes):
    raw = translate(_qdq_conv(qtype))
    ops = _by_name(raw)
    assert raw.dtype_bytes == nbytes and raw.meta["quantized"]
    assert ops["y"].params == {"wq": 4 * 27}  # scales and zero points are constants
    assert ops["y"].inputs == ["xd"] and ops["xq"].kind == ops["xd"].kind == "alias"
    assert raw.graph_inputs[0].nbytes == 3 * 64 * nbytes


def test_float_model_defaults_to_int8_and_explicit_dtype_wins():
    assert translate(onnx_cnn()).dtype_bytes == 1
    assert not translate(onnx_cnn()).meta["quantized"]
    raw = translate(onnx_cnn(), dtype_bytes=4)
    assert raw.dtype_bytes == 4 and raw.graph_inputs[0].nbytes == 4 * 3 * 16 * 16


def test_constant_node_weight_is_a_parameter():
    n = helper.make_node
    w = onnx_init("w_value", (16, 4))
    nodes = [
        n("Constant", [], ["w"], name="weight", value=w),
        n("MatMul", ["x", "w"], ["y"], name="fc"),
    ]
    model = onnx_model(nodes, [onnx_vi("x", [1, 16])], [onnx_vi("y", None)])
    assert _by_name(translate(model))["y"].params == {"w": 64}


def test_static_operands_parameters_or_constants():
    """Layer scale and class token are parameters; clip bounds and a mask are constants."""
    n = helper.make_node
    nodes = [
        n("Mul", ["x", "gamma"], ["scaled"], name="layer_scale"),
        n("Clip", ["scaled", "lo", "hi"], ["clipped"], name="clip"),
        n("Where", ["mask", "clipped", "fill"], ["masked"], name="mask"),
        n("Concat", ["cls", "masked"], ["tokens"], name="prepend_cls", axis=1),
    ]
    inits = [
        onnx_init("gamma", (16,)),
        onnx_init("lo", (), value=0.0),
        onnx_init("hi", (), value=6.0),
        onnx_init("mask", (1, 4, 16), np.bool_),
        onnx_init("fill", (), value=-1.0),
        onnx_init("cls", (1, 1, 16)),
    ]
    model = onnx_model(nodes, [onnx_vi("x", [1, 4, 16])], [onnx_vi("tokens", None)], inits)
    ops = _by_name(translate(model))
    assert ops["scaled"].params == {"gamma": 16}
    assert ops["clipped"].params == {} and ops["clipped"].inputs == ["scaled"]
    assert ops["masked"].params == {}  # condition is meta, the fill value a scalar immediate
    assert ops["tokens"].kind == "layout" and ops["tokens"].params == {"cls": 16}
    assert ops["tokens"].output_shape == (1, 5, 16)


def test_conv_transpose_and_gemm_trans_a():
    n = helper.make_node
    nodes = [
        n("ConvTranspose", ["x", "w"], ["up"], name="up", strides=[2, 2], kernel_shape=[2, 2]),
        n("Flatten", ["up"], ["flat"], name="flat"),
        n("Transpose", ["flat"], ["flat_t"], name="t", perm=[1, 0]),
        n("Gemm", ["flat_t", "fc_w"], ["y"], name="fc", transA=1),
    ]
    inits = [onnx_init("w", (4, 2, 2, 2)), onnx_init("fc_w", (2 * 8 * 8, 5))]
    model = onnx_model(nodes, [onnx_vi("x", [1, 4, 4, 4])], [onnx_vi("y", None)], inits)
    ops = _by_name(translate(model))
    assert ops["up"].output_shape == (1, 2, 8, 8)
    assert ops["up"].macs == 4 * 4 * 4 * 2 * 2 * 2  # every input element x (M/g) x k x k
    assert ops["up"].params == {"w": 32}
    assert ops["y"].macs == 5 * 128 and ops["y"].kind == "linear"


@pytest.mark.parametrize("threshold", [0, 1024])
def test_external_weight_data_is_not_needed(tmp_path, threshold):
    path = tmp_path / "external.onnx"
    onnx.save(
        onnx_cnn(), path, save_as_external_data=True, location="w.bin", size_threshold=threshold
    )
    if threshold:  # only w2 (2304 bytes) is external: drop it, its dims are enough
        (tmp_path / "w.bin").unlink()
    raw = translate(*_load(path))  # with threshold 0 the int64 reshape shape is external too
    assert sum(_all_params(raw).values()) == CNN_PARAMS
    assert _by_name(raw)["flat"].output_shape == (1, 8)


def _exporter_style_positions() -> onnx.ModelProto:
    """Position ids expanded to a shape computed by Where(Equal(ConstantOfShape ...)) chains,
    as the legacy torch exporter writes them for transformers models."""
    n = helper.make_node

    def const(name, value):
        return n(
            "Constant", [], [name], value=onnx_init(name + "_v", np.shape(value), np.int64, value)
        )

    ones = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    nodes = [
        const("ids", [list(range(8))]),
        const("target", [1, 8]),
        const("rank", [2]),
        const("minus1", -1),
        n("ConstantOfShape", ["rank"], ["ones"], value=ones),
        n("Mul", ["ones", "minus1"], ["neg"]),
        n("Equal", ["target", "neg"], ["is_neg"]),
        n("Where", ["is_neg", "ones", "target"], ["shape"]),
        n("Expand", ["ids", "shape"], ["pos"]),
        n("Gather", ["pos_table", "pos"], ["pe"], name="position_lookup"),
        n("Add", ["x", "pe"], ["y"], name="add_positions"),
    ]
    inputs = [onnx_vi("x", [1, 8, 16])]
    return onnx_model(nodes, inputs, [onnx_vi("y", None)], [onnx_init("pos_table", (32, 16))])


def test_integer_shape_arithmetic_is_folded_for_shape_inference():
    from workloads.onnx_fold import shape_model

    model = _exporter_style_positions()
    plain = onnx.shape_inference.infer_shapes(model, data_prop=True)
    pe = next(v for v in plain.graph.value_info if v.name == "pe").type.tensor_type.shape
    assert not pe.dim[0].HasField("dim_value")  # ONNX data propagation alone stops short
    folded = shape_model(model)
    assert "pos" in {t.name for t in folded.graph.initializer}
    ops = _by_name(translate(model))
    assert list(ops) == ["y"]  # the whole position branch is static
    assert ops["y"].output_shape == (1, 8, 16)
    assert ops["y"].params == {"pos_table": 32 * 16}


def test_nodes_out_of_order_are_sorted():
    shuffled = onnx_cnn()
    nodes = list(shuffled.graph.node)
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(nodes[::-1])
    ref = translate(onnx_cnn())
    got = translate(shuffled)
    assert [op.name for op in got.raw_ops] == [op.name for op in ref.raw_ops]
    assert [op.macs for op in got.raw_ops] == [op.macs for op in ref.raw_ops]


# ------------------------------------------------------------------------ errors
def test_unsupported_operator_names_op_node_and_file(tmp_path):
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["r"], name="relu"),
        n("NonZero", ["r"], ["nz"], name="find_nonzero"),
    ]
    path = tmp_path / "unsupported.onnx"
    onnx.save(onnx_model(nodes, [onnx_vi("x", [4])], [onnx_vi("nz", None)]), path)
    with pytest.raises(UnsupportedOperatorError) as err:
        translate(*_load(path))
    msg = str(err.value)
    assert "NonZero" in msg and "find_nonzero" in msg and str(path) in msg
    assert err.value.op == "NonZero"


def test_custom_domain_operator_is_unsupported():
    node = helper.make_node("FusedConv", ["x"], ["y"], name="fc", domain="com.microsoft")
    with pytest.raises(UnsupportedOperatorError, match="com.microsoft.FusedConv"):
        translate(onnx_model([node], [onnx_vi("x", [1, 4])], [onnx_vi("y", None)]))


def _load(path):
    from workloads.onnx_import import load_model

    return load_model(path)


def test_symbolic_batch_dimension_is_a_missing_shape(tmp_path):
    model = onnx_cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, path)
    with pytest.raises(MissingShapeError) as err:
        translate(*_load(path))
    msg = str(err.value)
    assert "'x'" in msg and "'batch'" in msg and "batch dimension" in msg
    assert "conv1" in msg and str(path) in msg and "static" in msg


def test_data_dependent_shape_is_a_missing_shape():
    n = helper.make_node
    nodes = [
        n("Relu", ["x"], ["r"], name="relu"),
        n("Reshape", ["r", "target"], ["y"], name="reshape_by_input"),
    ]
    inputs = [onnx_vi("x", [2, 6]), onnx_vi("target", [2], TensorProto.INT64)]
    with pytest.raises(MissingShapeError) as err:
        translate(onnx_model(nodes, inputs, [onnx_vi("y", None)]))
    assert "'y'" in str(err.value) and "reshape_by_input" in str(err.value)


def test_cycle_is_reported_with_its_nodes():
    n = helper.make_node
    nodes = [
        n("Add", ["x", "z"], ["a"], name="add"),
        n("Relu", ["a"], ["z"], name="relu"),
    ]
    with pytest.raises(WorkloadError, match="cycle") as err:
        translate(onnx_model(nodes, [onnx_vi("x", [4])], [onnx_vi("z", [4])]))
    assert "'add'" in str(err.value) and "'relu'" in str(err.value)


def test_secondary_output_consumer_is_an_error():
    n = helper.make_node
    nodes = [
        n("MaxPool", ["x"], ["p", "idx"], name="pool", kernel_shape=[2, 2]),
        n("Cast", ["idx"], ["y"], name="use_indices", to=TensorProto.FLOAT),
    ]
    with pytest.raises(WorkloadError, match="secondary output"):
        translate(onnx_model(nodes, [onnx_vi("x", [1, 1, 4, 4])], [onnx_vi("y", None)]))


# --------------------------------------------------------------------- end to end
def test_cnn_fuses_into_conv_conv_pool_linear(tmp_path):
    from workloads import from_onnx

    path = tmp_path / "tiny_cnn.onnx"
    onnx.save(onnx_cnn(), path)
    w = from_onnx(path)
    assert w.name == "tiny_cnn" and w.meta["source"] == str(path)
    assert w.op_types == ["conv", "conv", "pool", "linear"]
    assert w.total_weight_bytes == CNN_PARAMS
    assert w.nodes[1].fused == ["c2", "n2", "s", "r2"]  # bn, residual add and relu fold in
    assert w.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]]
    assert from_onnx(path, name="other", dtype_bytes=2).total_weight_bytes == 2 * CNN_PARAMS


def test_transformer_block_end_to_end():
    from workloads import from_onnx

    w = from_onnx(transformer_block())
    assert w.op_types.count("linear") == 4 and w.op_types.count("matmul") == 2
    assert w.op_types.count("softmax") == 1 and w.op_types.count("norm") == 1
    assert w.total_weight_bytes == 2 * 16 + 4 * (16 * 16 + 16)
    assert w.features.shape == (w.num_nodes, 19)


def test_graph_of_views_only_is_empty():
    from workloads import from_onnx

    node = helper.make_node("Identity", ["x"], ["y"], name="noop")
    with pytest.raises(WorkloadError, match="empty"):
        from_onnx(onnx_model([node], [onnx_vi("x", [1, 4])], [onnx_vi("y", [1, 4])]))


# ------------------------------------------------------------- Pad folding
#: [y0, x0, y1, x1] padding of H and W: 1 above, 2 left, 0 below, 1 right.
PAD_HW = [1, 2, 0, 1]


def _padded(
    reader: str = "Conv",
    pad_form: str = "initializer",
    mode: str = "constant",
    value: float | None = None,
    pads=(0, 0, *PAD_HW[:2], 0, 0, *PAD_HW[2:]),
) -> onnx.ModelProto:
    """``x [1, 3, 8, 8] -> Pad -> reader`` (a 3x3 conv with pads 1, a 3x3 max pool or Relu).

    ``reader="none"`` leaves the Pad out (the conv reads ``x``); ``"Conv+Relu"`` makes both
    read the Pad. ``pad_form``: ``initializer``, ``constant`` (a Constant node) or
    ``attribute`` (opset 10, pads and value as attributes).
    """
    n = helper.make_node
    src = "x" if reader == "none" else "xp"
    conv = n("Conv", [src, "w"], ["y"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    readers = {
        "none": [conv],
        "Conv": [conv],
        "MaxPool": [n("MaxPool", [src], ["y"], name="pool", kernel_shape=[3, 3])],
        "Relu": [n("Relu", [src], ["y"], name="relu")],
        "Conv+Relu": [conv, n("Relu", [src], ["r"], name="relu")],
    }[reader]
    inits, outputs = [onnx_init("w", (8, 3, 3, 3))], [onnx_vi("y", None)]
    outputs += [onnx_vi("r", None)] if reader == "Conv+Relu" else []
    opset, extra = 17, {}
    if pad_form == "attribute":
        opset, extra = 10, {"pads": list(pads), **({} if value is None else {"value": value})}
        pad = n("Pad", ["x"], ["xp"], name="pad", mode=mode, **extra)
        nodes = [pad]
    else:
        ins = ["x", "pads"] + ([] if value is None else ["value"])
        pads_value = onnx_init("pads_v", (8,), np.int64, list(pads))
        if pad_form == "constant":
            nodes = [n("Constant", [], ["pads"], name="pads_c", value=pads_value)]
        else:
            nodes, inits = [], inits + [onnx_init("pads", (8,), np.int64, list(pads))]
        inits += [] if value is None else [onnx_init("value", (), value=value)]
        nodes.append(n("Pad", ins, ["xp"], name="pad", mode=mode))
    nodes = ([] if reader == "none" else nodes) + readers
    return onnx_model(nodes, [onnx_vi("x", [1, 3, 8, 8])], outputs, inits, opset=opset)


@pytest.mark.parametrize(
    ("pad_form", "value"), [("initializer", None), ("constant", 0.0), ("attribute", None)]
)
def test_zero_pad_folds_into_the_conv(pad_form, value):
    ops = _by_name(translate(_padded("Conv", pad_form, value=value)))
    assert ops["xp"].kind == "alias" and ops["xp"].vector_ops == 0
    assert ops["y"].inputs == ["xp"] and ops["y"].output_shape == (1, 8, 9, 11)
    assert ops["y"].attrs["pad"] == 1 + PAD_HW[1]  # the conv's own x padding + the Pad's
    assert ops["y"].macs == 8 * 9 * 11 * 27  # from the conv's own output, as without folding


def test_folded_pad_gives_the_nodes_of_the_graph_without_it():
    from workloads import from_onnx

    folded, plain = from_onnx(_padded("Conv")), from_onnx(_padded("none"))
    assert folded.num_nodes == plain.num_nodes == 1 and folded.op_types == ["conv"]
    assert folded.nodes[0].attrs["pad"] == plain.nodes[0].attrs["pad"] + PAD_HW[1]
    # the layer reads the unpadded input: the Pad adds no bytes
    assert folded.nodes[0].input_shapes == plain.nodes[0].input_shapes == [(1, 3, 8, 8)]
    assert folded.input_bytes.tolist() == plain.input_bytes.tolist()


def test_zero_pad_folds_into_a_pool():
    ops = _by_name(translate(_padded("MaxPool")))
    assert ops["xp"].kind == "alias"
    assert ops["y"].attrs["pad"] == PAD_HW[1] and ops["y"].output_shape == (1, 3, 7, 9)


@pytest.mark.parametrize(
    ("reader", "mode", "value", "pads"),
    [
        ("Conv", "reflect", None, (0, 0, *PAD_HW[:2], 0, 0, *PAD_HW[2:])),
        ("Conv", "edge", None, (0, 0, *PAD_HW[:2], 0, 0, *PAD_HW[2:])),
        ("Conv", "constant", 1.0, (0, 0, *PAD_HW[:2], 0, 0, *PAD_HW[2:])),
        ("Relu", "constant", None, (0, 0, *PAD_HW[:2], 0, 0, *PAD_HW[2:])),
        ("Conv+Relu", "constant", None, (0, 0, *PAD_HW[:2], 0, 0, *PAD_HW[2:])),
        ("Conv", "constant", None, (0, 0, 0, 1, 0, 0, 0, -1)),  # crops the x axis
    ],
)
def test_other_pads_stay_layout_nodes(reader, mode, value, pads):
    ops = _by_name(translate(_padded(reader, mode=mode, value=value, pads=pads)))
    assert ops["xp"].kind == "layout" and ops["xp"].vector_ops == numel(ops["xp"].output_shape)
    if reader.startswith("Conv"):
        assert ops["y"].attrs["pad"] == 1  # the conv's own padding only


def test_channel_padding_stays_a_layout_node():
    """Padding the channel axis adds data (more channels), not window padding."""
    n = helper.make_node
    nodes = [
        n("Pad", ["x", "pads"], ["xp"], name="pad"),
        n("Conv", ["xp", "w"], ["y"], name="conv", kernel_shape=[3, 3]),
    ]
    inits = [
        onnx_init("pads", (8,), np.int64, [0, 1, 0, 0, 0, 0, 0, 0]),
        onnx_init("w", (8, 4, 3, 3)),
    ]
    ops = _by_name(
        translate(onnx_model(nodes, [onnx_vi("x", [1, 3, 8, 8])], [onnx_vi("y", None)], inits))
    )
    assert ops["xp"].kind == "layout" and ops["y"].attrs["pad"] == 0


def test_pad_without_static_pads_is_not_folded():
    n = helper.make_node
    pad = n("Pad", ["x", "pads", "value"], ["xp"], name="pad")
    static = {"pads": np.array([0, 0, 1, 2, 0, 0, 1, 1]), "value": np.zeros(())}
    assert x_pad_before(pad, static.get, 4) == 2
    assert x_pad_before(pad, lambda name: None, 4) is None  # pads computed at run time
    assert x_pad_before(pad, {"pads": static["pads"]}.get, 4) is None  # value unknown
    assert x_pad_before(pad, static.get, None) is None  # rank unknown
    with_axes = n("Pad", ["x", "p2", "", "axes"], ["xp"], name="pad_axes")
    axes = {"p2": np.array([3, 5]), "axes": np.array([-1])}
    assert x_pad_before(with_axes, axes.get, 4) == 3
    assert x_pad_before(with_axes, {"p2": axes["p2"]}.get, 4) is None  # axes unknown


# ------------------------------------------------------------ torch.onnx.export
def _torch_modules():
    import torch

    nn = torch.nn

    class TinyCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8, 10)

        def forward(self, x):
            h = torch.relu(self.c1(x))
            h = torch.relu(self.c2(h) + h)
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(h, 1), 1))

    class TinyBlock(nn.Module):
        def __init__(self, d: int = 16, heads: int = 2) -> None:
            super().__init__()
            self.ln, self.qkv, self.o = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.heads = heads

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (
                z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                for z in self.qkv(self.ln(x)).split(d, dim=-1)
            )
            att = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
            return x + self.o((att @ v).transpose(1, 2).reshape(b, t, d))

    def tiny_mobile() -> nn.Module:
        """Stem conv, max pool, depthwise-separable block with batch norms, classifier."""
        return nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1, bias=False),
            nn.BatchNorm2d(16),
            nn.Hardswish(),
            nn.MaxPool2d(3, 2, 1),
            nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU6(),
            nn.Conv2d(16, 32, 1, bias=False),
            nn.BatchNorm2d(32),
            nn.Sigmoid(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Dropout(0.1),
            nn.Linear(32, 10),
        )

    gen = torch.Generator().manual_seed(0)
    cases = [(TinyCNN(), torch.randn(1, 3, 16, 16, generator=gen))]
    cases.append((TinyBlock(), torch.randn(1, 8, 16, generator=gen)))
    cases.append((tiny_mobile(), torch.randn(1, 3, 32, 32, generator=gen)))
    for module, _ in cases:
        with torch.no_grad():  # distinct values: the exporter merges equal initializers
            for p in module.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
        module.eval()
    return torch, cases


def _export(torch, module, example, path) -> None:
    import warnings

    # The TorchScript exporter (dynamo=False) needs no package beyond torch and onnx.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (example,),
            str(path),
            dynamo=False,
            opset_version=17,
            training=torch.onnx.TrainingMode.PRESERVE,  # keep batch norms unfolded
        )


def test_torch_export_weights_equal_module_parameters(tmp_path):
    from workloads import from_onnx

    torch, cases = _torch_modules()
    attention = ["norm", "linear", "layout", "layout", "layout", "matmul", "softmax", "matmul"]
    mobile = ["conv", "pool", "conv", "conv", "pool", "linear"]
    expected_types = [["conv", "conv", "pool", "linear"], [*attention, "layout", "linear"], mobile]
    for i, ((module, example), types) in enumerate(zip(cases, expected_types, strict=True)):
        path = tmp_path / f"case{i}.onnx"
        _export(torch, module, example, path)
        w = from_onnx(path)
        assert w.total_weight_bytes == sum(p.numel() for p in module.parameters())
        assert w.op_types == types


def test_from_onnx_agrees_with_from_torch(tmp_path):
    from workloads import from_onnx, from_torch

    torch, cases = _torch_modules()
    for i, (module, example) in enumerate(cases):
        path = tmp_path / f"case{i}.onnx"
        _export(torch, module, example, path)
        w_onnx, w_torch = from_onnx(path), from_torch(module, (example,))
        assert w_onnx.num_nodes == w_torch.num_nodes, (w_onnx.op_types, w_torch.op_types)
        assert w_onnx.op_types == w_torch.op_types
        assert w_onnx.total_weight_bytes == w_torch.total_weight_bytes
        assert w_onnx.macs.tolist() == w_torch.macs.tolist()


def test_explicit_pad_gives_the_same_nodes_from_onnx_and_from_torch(tmp_path):
    import torch

    from workloads import from_onnx, from_torch

    class PadConv(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 3, stride=2)

        def forward(self, x):
            h = torch.relu(self.c1(torch.nn.functional.pad(x, (2, 1, 1, 0))))
            return self.c2(torch.nn.functional.pad(h, (1, 1, 1, 1)))

    gen = torch.Generator().manual_seed(0)
    module, example = PadConv().eval(), torch.randn(1, 3, 12, 12, generator=gen)
    path = tmp_path / "pad_conv.onnx"
    _export(torch, module, example, path)
    assert "Pad" in {node.op_type for node in onnx.load(path).graph.node}
    w_onnx, w_torch = from_onnx(path), from_torch(module, (example,))
    assert w_onnx.op_types == w_torch.op_types == ["conv", "conv"]
    assert [n.attrs["pad"] for n in w_onnx.nodes] == [n.attrs["pad"] for n in w_torch.nodes]
    assert [n.attrs["pad"] for n in w_onnx.nodes] == [2, 1]
    assert w_onnx.macs.tolist() == w_torch.macs.tolist()
    assert w_onnx.features.tolist() == w_torch.features.tolist()
