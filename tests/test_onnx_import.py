"""ONNX import: op translation, parameters vs constants, shapes, errors, and end to end."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egrl.workloads import MissingShapeError, UnsupportedOperatorError, WorkloadError
from egrl.workloads.onnx_import import translate

FLOAT = TensorProto.FLOAT
HAS_FUSION = importlib.util.find_spec("egrl.workloads.fusion") is not None
needs_fusion = pytest.mark.skipif(not HAS_FUSION, reason="egrl.workloads.fusion not available")


# ----------------------------------------------------------------- model builders
def _init(name: str, shape, dtype=np.float32, value=None) -> onnx.TensorProto:
    """An initializer named ``name``: zeros of ``shape`` unless ``value`` is given."""
    arr = np.zeros(shape, dtype=dtype) if value is None else np.asarray(value, dtype=dtype)
    return numpy_helper.from_array(arr, name)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, shape, dtype=FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def cnn() -> onnx.ModelProto:
    """conv-bn-relu, conv-bn, residual add, relu, global pool, reshape, gemm (1x3x16x16)."""
    n = helper.make_node
    bn = ("scale", "bias", "mean", "var")
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c1", *(f"bn1_{p}" for p in bn)], ["n1"], name="bn1"),
        n("Relu", ["n1"], ["r1"], name="relu1"),
        n("Conv", ["r1", "w2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        n("BatchNormalization", ["c2", *(f"bn2_{p}" for p in bn)], ["n2"], name="bn2"),
        n("Add", ["n2", "r1"], ["s"], name="residual"),
        n("Relu", ["s"], ["r2"], name="relu2"),
        n("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        n("Reshape", ["gap", "flat_shape"], ["flat"], name="flatten"),
        n("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    inits = [_init("w1", (8, 3, 3, 3)), _init("b1", (8,)), _init("w2", (8, 8, 3, 3))]
    inits += [_init(f"bn{i}_{p}", (8,)) for i in (1, 2) for p in bn]
    inits += [_init("flat_shape", (2,), np.int64, [1, -1]), _init("fc_w", (10, 8))]
    inits += [_init("fc_b", (10,))]
    return _model(nodes, [_vi("x", [1, 3, 16, 16])], [_vi("y", [1, 10])], inits)


CNN_PARAMS = 8 * 3 * 9 + 8 + 8 * 8 * 9 + 2 * 4 * 8 + 10 * 8 + 10


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
    inits = [_init("ln_g", (d,)), _init("ln_b", (d,))]
    inits += [_init(f"w{p}", (d, d)) for p in "qkvo"] + [_init(f"b{p}", (d,)) for p in "qkvo"]
    inits += [_init("heads_shape", (4,), np.int64, [1, seq, heads, hd])]
    inits += [_init("merge_shape", (3,), np.int64, [1, seq, d])]
    return _model(nodes, [_vi("x", [1, seq, d])], [_vi("y", [1, seq, d])], inits)


def _by_name(raw):
    return {op.name: op for op in raw.raw_ops}


def _all_params(raw) -> dict[str, int]:
    return {k: v for op in raw.raw_ops for k, v in op.params.items()}


# ------------------------------------------------------------------ translation
def test_cnn_kinds_costs_and_attrs():
    raw = translate(cnn())
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
    raw = translate(cnn())
    params = _all_params(raw)
    assert "flat_shape" not in params
    assert sum(params.values()) == CNN_PARAMS == raw.meta["parameters"]
    ops = _by_name(raw)
    assert ops["c1"].params == {"w1": 8 * 27, "b1": 8}
    assert set(ops["n1"].params) == {f"bn1_{p}" for p in ("scale", "bias", "mean", "var")}
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
        n("Constant", [], ["zero"], name="c0", value=_init("zero", (), np.int64, 0)),
        n("Gather", ["emb", "zero"], ["first"], name="pick", axis=1),
        n("Transpose", ["table"], ["table_t"], name="tie", perm=[1, 0]),
        n("MatMul", ["first", "table_t"], ["logits"], name="head"),
    ]
    model = _model(
        nodes,
        [_vi("ids", [1, 8], TensorProto.INT64)],
        [_vi("logits", [1, 100])],
        [_init("table", (100, 16))],
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
    model = _model(nodes, [_vi("x", [2, 8, 15, 15])], [_vi("p", None)], [_init("w", (8, 1, 5, 5))])
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
    model = _model(
        nodes, [_vi("x", [1, 8, 4])], [_vi("y", None)], [_init("sizes", (2,), np.int64, [4, 4])]
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
        _init("xs", (), value=0.1),
        _init("xz", (), np_q, 0),
        _init("wq", (4, 3, 3, 3), np_q),
        _init("ws", (4,), value=[0.1] * 4),
        _init("wz", (4,), np_q),
    ]
    return _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", None)], inits, opset=21)


@pytest.mark.parametrize(("qtype", "nbytes"), [(TensorProto.INT8, 1), (TensorProto.INT16, 2)])
def test_quantized_model_element_size_and_weight_tracing(qtype, nbytes):
    raw = translate(_qdq_conv(qtype))
    ops = _by_name(raw)
    assert raw.dtype_bytes == nbytes and raw.meta["quantized"]
    assert ops["y"].params == {"wq": 4 * 27}  # scales and zero points are constants
    assert ops["y"].inputs == ["xd"] and ops["xq"].kind == ops["xd"].kind == "alias"
    assert raw.graph_inputs[0].nbytes == 3 * 64 * nbytes


def test_float_model_defaults_to_int8_and_explicit_dtype_wins():
    assert translate(cnn()).dtype_bytes == 1
    assert not translate(cnn()).meta["quantized"]
    raw = translate(cnn(), dtype_bytes=4)
    assert raw.dtype_bytes == 4 and raw.graph_inputs[0].nbytes == 4 * 3 * 16 * 16


def test_constant_node_weight_is_a_parameter():
    n = helper.make_node
    w = _init("w_value", (16, 4))
    nodes = [
        n("Constant", [], ["w"], name="weight", value=w),
        n("MatMul", ["x", "w"], ["y"], name="fc"),
    ]
    model = _model(nodes, [_vi("x", [1, 16])], [_vi("y", None)])
    assert _by_name(translate(model))["y"].params == {"w": 64}


def test_nodes_out_of_order_are_sorted():
    shuffled = cnn()
    nodes = list(shuffled.graph.node)
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(nodes[::-1])
    ref = translate(cnn())
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
    onnx.save(_model(nodes, [_vi("x", [4])], [_vi("nz", None)]), path)
    with pytest.raises(UnsupportedOperatorError) as err:
        translate(*_load(path))
    msg = str(err.value)
    assert "NonZero" in msg and "find_nonzero" in msg and str(path) in msg
    assert err.value.op == "NonZero"


def test_custom_domain_operator_is_unsupported():
    node = helper.make_node("FusedConv", ["x"], ["y"], name="fc", domain="com.microsoft")
    with pytest.raises(UnsupportedOperatorError, match="com.microsoft.FusedConv"):
        translate(_model([node], [_vi("x", [1, 4])], [_vi("y", None)]))


def _load(path):
    from egrl.workloads.onnx_import import load_model

    return load_model(path)


def test_symbolic_batch_dimension_is_a_missing_shape(tmp_path):
    model = cnn()
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
    inputs = [_vi("x", [2, 6]), _vi("target", [2], TensorProto.INT64)]
    with pytest.raises(MissingShapeError) as err:
        translate(_model(nodes, inputs, [_vi("y", None)]))
    assert "'y'" in str(err.value) and "reshape_by_input" in str(err.value)


def test_cycle_is_reported_with_its_nodes():
    n = helper.make_node
    nodes = [
        n("Add", ["x", "z"], ["a"], name="add"),
        n("Relu", ["a"], ["z"], name="relu"),
    ]
    with pytest.raises(WorkloadError, match="cycle") as err:
        translate(_model(nodes, [_vi("x", [4])], [_vi("z", [4])]))
    assert "'add'" in str(err.value) and "'relu'" in str(err.value)


def test_secondary_output_consumer_is_an_error():
    n = helper.make_node
    nodes = [
        n("MaxPool", ["x"], ["p", "idx"], name="pool", kernel_shape=[2, 2]),
        n("Cast", ["idx"], ["y"], name="use_indices", to=TensorProto.FLOAT),
    ]
    with pytest.raises(WorkloadError, match="secondary output"):
        translate(_model(nodes, [_vi("x", [1, 1, 4, 4])], [_vi("y", None)]))
