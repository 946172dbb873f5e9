"""Fusion rules on hand-built raw op lists (no importer involved)."""

from __future__ import annotations

import pytest

from tests.support.sums import totals
from workloads import TensorInfo, WorkloadError
from workloads.fusion import fuse
from workloads.rawgraph import RawOp

IMG = (1, 8, 4, 4)
SEQ = (1, 16, 32)


def op(name, kind, inputs=(), shape=IMG, params=None, macs=0, vec=None, **attrs) -> RawOp:
    """A raw op; vector ops default to the output size for eltwise ops."""
    size = 1
    for d in shape:
        size *= d
    vector_ops = vec if vec is not None else (size if kind == "eltwise" else 0)
    return RawOp(
        name,
        kind,
        f"test.{name}",
        list(inputs),
        tuple(shape),
        dict(params or {}),
        macs,
        vector_ops,
        attrs,
    )


def inputs(*names, shape=IMG) -> list[TensorInfo]:
    return [TensorInfo(n, shape, 128) for n in names]


def test_conv_bn_relu_add_is_one_node_with_two_inputs():
    ops = [
        op("conv", "conv", ["x"], params={"w": 576, "b": 8}, macs=4608, groups=1),
        op("bn", "eltwise", ["conv"], params={"gamma": 8, "beta": 8}),
        op("relu", "eltwise", ["bn"]),
        op("add", "eltwise", ["relu", "y"]),
    ]
    w = fuse(ops, inputs("x", "y"), "block")
    assert w.num_nodes == 1
    node = w.nodes[0]
    assert node.name == "conv" and node.op_type == "conv"
    assert node.inputs == ["x", "y"]
    assert node.fused == ["conv", "bn", "relu", "add"]
    assert node.weight_bytes == 576 + 8 + 8 + 8
    assert node.macs == 4608 and node.vector_ops == 3 * 128
    assert node.attrs == {"groups": 1}
    assert w.meta["fusion"]["folded"] == {"eltwise": 3}


def test_residual_add_fuses_into_the_later_producer():
    ops = [
        op("c1", "conv", ["x"], params={"w1": 10}),
        op("c2", "conv", ["c1"], params={"w2": 10}),
        op("c3", "conv", ["c2"], params={"w3": 10}),
        op("add", "eltwise", ["c1", "c3"]),
    ]
    w = fuse(ops, inputs("x"), "res")
    assert w.node_names == ["c1", "c2", "c3"]
    assert w.nodes[2].inputs == ["c2", "c1"]
    assert w.nodes[2].fused == ["c3", "add"]
    assert (w.edge_index[0] < w.edge_index[1]).all()


def test_tanh_gelu_formula_fuses_entirely():
    # GPT-2: 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h**3)))
    ops = [
        op("fc", "linear", ["x"], shape=SEQ, params={"w": 32 * 32, "b": 32}, macs=16 * 32 * 32),
        op("half", "eltwise", ["fc"], shape=SEQ),
        op("cube", "eltwise", ["fc"], shape=SEQ),
        op("scale", "eltwise", ["cube"], shape=SEQ),
        op("inner", "eltwise", ["fc", "scale"], shape=SEQ),
        op("scale2", "eltwise", ["inner"], shape=SEQ),
        op("tanh", "eltwise", ["scale2"], shape=SEQ),
        op("one_plus", "eltwise", ["tanh"], shape=SEQ),
        op("gelu", "eltwise", ["half", "one_plus"], shape=SEQ),
        op("fc2", "linear", ["gelu"], shape=SEQ, params={"w2": 32 * 32}),
    ]
    w = fuse(ops, inputs("x", shape=SEQ), "mlp")
    assert w.node_names == ["fc", "fc2"]
    assert len(w.nodes[0].fused) == 9
    assert w.nodes[0].vector_ops == 8 * 16 * 32
    assert w.nodes[1].inputs == ["fc"]
    assert w.meta["fusion"]["internal_reads"] == 0


def test_constants_fold_away():
    scores = (1, 2, 16, 16)
    ops = [
        op("pos", "const", shape=(16,)),
        op("pos_view", "alias", ["pos"], shape=(1, 1, 16, 1)),
        op("keep", "eltwise", ["pos_view"], shape=(1, 1, 16, 1)),  # all-const: const
        op("mask", "eltwise", ["keep"], shape=(1, 1, 16, 16)),
        op("qk", "matmul", ["q", "k"], shape=scores, macs=2 * 16 * 16 * 8),
        op("masked", "eltwise", ["qk", "mask"], shape=scores),
        op("soft", "softmax", ["masked"], shape=scores),
    ]
    w = fuse(ops, inputs("q", "k", shape=(1, 2, 16, 8)), "attn")
    assert w.node_names == ["qk", "soft"]
    assert w.nodes[0].inputs == ["q", "k"]
    assert w.nodes[0].fused == ["qk", "masked"]
    folded = w.meta["fusion"]["folded"]
    assert folded["const"] == 4 and folded["eltwise"] == 1


def test_an_op_reading_a_parameter_is_not_constant():
    # token-type embedding: table lookup at constant indices is a real layer
    ops = [
        op("ids", "const", shape=(1, 16)),
        op("emb", "embedding", ["ids"], shape=SEQ, params={"table": 2 * 32}),
        op("add", "eltwise", ["x", "emb"], shape=SEQ),
    ]
    w = fuse(ops, inputs("x", shape=SEQ), "emb")
    assert w.node_names == ["emb"]
    assert w.nodes[0].inputs == ["x"]
    assert w.nodes[0].weight_bytes == 64


def test_tied_parameters_are_charged_once():
    ops = [
        op("emb", "embedding", ["ids"], shape=SEQ, params={"tok": 100 * 32}),
        op("ln", "norm", ["emb"], shape=SEQ, params={"g": 32, "b": 32}),
        op("head", "linear", ["ln"], shape=(1, 16, 100), params={"tok": 100 * 32}),
    ]
    w = fuse(ops, inputs("ids", shape=(1, 16)), "lm", dtype_bytes=2)
    assert w.weight_bytes.tolist() == [2 * 3200, 2 * 64, 0]
    assert w.total_weight_bytes == 2 * (3200 + 64)
    assert w.meta["fusion"]["parameter_elements"] == 3264
    assert w.graph_input_bytes.tolist() == [2 * 16, 0, 0]


def test_weight_only_values_charge_their_reader():
    # ViT: the class token is expanded (an alias of a parameter) and concatenated
    ops = [
        op("cls", "alias", [], shape=(1, 1, 32), params={"cls_token": 32}),
        op("cat", "layout", ["cls", "x"], shape=(1, 17, 32)),
        op("pos", "eltwise", ["cat"], shape=(1, 17, 32), params={"pos_embed": 17 * 32}),
    ]
    w = fuse(ops, inputs("x", shape=SEQ), "vit")
    assert w.node_names == ["cat"]
    assert w.nodes[0].weight_bytes == 32 + 17 * 32
    assert w.meta["fusion"]["folded"]["weight_only"] == 1


def test_matmul_reading_a_parameter_is_linear():
    ops = [op("mm", "matmul", ["x"], shape=SEQ, params={"w": 32 * 32})]
    assert fuse(ops, inputs("x", shape=SEQ), "mm").op_types == ["linear"]


def test_consecutive_layouts_collapse_only_with_a_single_consumer():
    heads, kt = (1, 2, 16, 16), (1, 2, 16, 16)
    collapse = [
        op("k", "linear", ["x"], shape=SEQ, params={"wk": 32 * 32}),
        op("split", "alias", ["k"], shape=(1, 16, 2, 16)),
        op("perm", "layout", ["split"], shape=heads),
        op("kt", "layout", ["perm"], shape=kt),
    ]
    w = fuse(collapse, inputs("x", shape=SEQ), "k")
    assert w.op_types == ["linear", "layout"]
    assert w.nodes[1].fused == ["perm", "kt"]
    # a second reader of the permuted value keeps the two layouts apart
    shared = [*collapse, op("other", "softmax", ["perm"], shape=heads)]
    w = fuse(shared, inputs("x", shape=SEQ), "k2")
    assert w.op_types == ["linear", "layout", "layout", "softmax"]


def test_unfusable_eltwise_becomes_its_own_node():
    ops = [
        op("scale", "eltwise", ["x"]),  # reads only a graph input
        op("conv", "conv", ["scale"], params={"w": 9}),
    ]
    w = fuse(ops, inputs("x"), "pre")
    assert w.op_types == ["eltwise", "conv"]
    assert w.nodes[0].inputs == ["x"]


def test_internal_value_read_elsewhere_blocks_fusion_and_is_counted():
    ops = [
        op("conv", "conv", ["x"], params={"w": 9}),
        op("relu", "eltwise", ["conv"]),
        op("pool", "pool", ["conv"]),  # reads the pre-activation value of node conv
        op("sig", "eltwise", ["conv"]),  # conv's value is read elsewhere: no fusion
    ]
    w = fuse(ops, inputs("x"), "branch")
    assert w.op_types == ["conv", "pool", "eltwise"]
    assert w.nodes[2].inputs == ["conv"]
    assert w.meta["fusion"]["internal_reads"] == 2


def test_parameter_sum_matches_unique_elements():
    ops = [
        op("c1", "conv", ["x"], params={"a": 5, "b": 7}),
        op("bn", "eltwise", ["c1"], params={"c": 3}),
        op("c2", "conv", ["bn"], params={"a": 5, "d": 11}),
    ]
    w = fuse(ops, inputs("x"), "p", dtype_bytes=1)
    assert w.total_weight_bytes == 5 + 7 + 3 + 11


# -------------------------------------------------------------------- bad input
def test_unknown_kind_names_the_op():
    with pytest.raises(WorkloadError, match=r"'weird'.*unknown kind 'fft'"):
        fuse([op("weird", "fft", ["x"])], inputs("x"), "bad")


def test_unknown_value_names_the_op_and_value():
    with pytest.raises(WorkloadError, match=r"'conv'.*reads 'ghost'"):
        fuse([op("conv", "conv", ["ghost"])], inputs("x"), "bad")


def test_duplicate_value_names_are_rejected():
    ops = [op("c", "conv", ["x"]), op("c", "conv", ["x"])]
    with pytest.raises(WorkloadError, match="duplicate value name 'c'"):
        fuse(ops, inputs("x"), "bad")


def test_all_constant_graph_is_empty():
    with pytest.raises(WorkloadError, match="empty"):
        fuse([op("a", "const"), op("b", "eltwise", ["a"])], [], "consts")


# --- op granularity -------------------------------------------------------------------


def test_op_granularity_keeps_every_compute_op_a_node():
    ops = [
        op("conv", "conv", ["x"], params={"w": 576, "b": 8}, macs=4608, groups=1),
        op("bn", "eltwise", ["conv"], params={"gamma": 8, "beta": 8}),
        op("relu", "eltwise", ["bn"]),
        op("add", "eltwise", ["relu", "y"]),
    ]
    layer = fuse(ops, inputs("x", "y"), "block")
    w = fuse(ops, inputs("x", "y"), "block", granularity="op")
    assert w.node_names == ["conv", "bn", "relu", "add"]
    assert w.op_types == ["conv", "eltwise", "eltwise", "eltwise"]
    assert [n.inputs for n in w.nodes] == [["x"], ["conv"], ["bn"], ["relu", "y"]]
    assert w.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]]
    assert [n.weight_bytes for n in w.nodes] == [584, 16, 0, 0]
    assert totals(w) == totals(layer)
    assert w.meta["fusion"]["granularity"] == "op"
    assert w.meta["fusion"]["internal_reads"] == 0
    assert "granularity" not in layer.meta["fusion"]  # the default leaves meta as it was


def test_op_granularity_keeps_consecutive_layouts_apart():
    ops = [
        op("k", "linear", ["x"], shape=SEQ, params={"wk": 32 * 32}),
        op("split", "alias", ["k"], shape=(1, 16, 2, 16)),
        op("perm", "layout", ["split"], shape=(1, 2, 16, 16)),
        op("kt", "layout", ["perm"], shape=(1, 2, 16, 16)),
    ]
    w = fuse(ops, inputs("x", shape=SEQ), "k", granularity="op")
    assert w.op_types == ["linear", "layout", "layout"]
    assert w.nodes[1].inputs == ["k"]  # the alias vanished: perm reads the linear
    assert w.meta["fusion"]["folded"] == {"alias": 1}


def test_op_granularity_still_folds_constants_weight_values_and_aliases():
    scores = (1, 2, 16, 16)
    ops = [
        op("pos", "const", shape=(16,)),
        op("mask", "eltwise", ["pos"], shape=(1, 1, 16, 16)),
        op("cls", "alias", [], shape=(1, 1, 32), params={"cls_token": 32}),
        op("qk", "matmul", ["q", "k"], shape=scores, macs=2 * 16 * 16 * 8),
        op("view", "alias", ["qk"], shape=scores),
        op("masked", "eltwise", ["view", "mask"], shape=scores),
        op("soft", "softmax", ["masked"], shape=scores, params={"cls_token": 32}),
    ]
    layer = fuse(ops, inputs("q", "k", shape=(1, 2, 16, 8)), "attn")
    w = fuse(ops, inputs("q", "k", shape=(1, 2, 16, 8)), "attn", granularity="op")
    assert w.node_names == ["qk", "masked", "soft"]
    assert w.nodes[1].inputs == ["qk"]
    assert w.meta["fusion"]["folded"] == {"alias": 1, "const": 2, "weight_only": 1}
    assert totals(w) == totals(layer)
    assert w.meta["fusion"]["parameter_elements"] == layer.meta["fusion"]["parameter_elements"]


def test_unknown_granularity_is_an_error():
    with pytest.raises(WorkloadError, match="unknown granularity 'ops'"):
        fuse([op("a", "conv", ["x"])], inputs("x"), "g", granularity="ops")
