"""The workload IR: validation of bad graphs, the Table-1 features, edges, save / load."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workloads import FEATURE_NAMES, Node, TensorInfo, Workload, WorkloadError
from workloads.ir import fmap_xyz

X = TensorInfo("x", (1, 3, 8, 8), 192)


def conv(name: str, src: str, shape_in=(1, 3, 8, 8), shape_out=(1, 4, 8, 8), **kw) -> Node:
    defaults = dict(
        weight_bytes=4 * 3 * 9,
        macs=4 * 64 * 27,
        vector_ops=256,
        attrs={"groups": 1, "kernel": (3, 3), "stride": 1, "pad": 1, "dilation": 1},
    )
    defaults.update(kw)
    return Node(name, "conv", [src], [shape_in], shape_out, **defaults)


def chain() -> Workload:
    """x -> c1 -> c2 -> fc, with c1 also feeding fc (a skip edge)."""
    nodes = [
        conv("c1", "x"),
        conv("c2", "c1", shape_in=(1, 4, 8, 8), weight_bytes=144, macs=9216, vector_ops=256),
        Node(
            "fc",
            "linear",
            ["c2", "c1"],
            [(1, 4, 8, 8), (1, 4, 8, 8)],
            (1, 10),
            weight_bytes=2570,
            macs=2560,
            vector_ops=10,
        ),
    ]
    return Workload("chain", nodes, [X])


# --------------------------------------------------------------------- bad input
def test_empty_graph_is_rejected():
    with pytest.raises(WorkloadError, match="empty"):
        Workload("nothing", [], [X])


def test_unknown_producer_is_named():
    nodes = [conv("c1", "x"), conv("c2", "ghost")]
    with pytest.raises(WorkloadError, match=r"'c2'.*'ghost'.*unknown producer"):
        Workload("w", nodes, [X])


def test_cycle_is_named():
    a = conv("a", "b")
    b = conv("b", "a")
    with pytest.raises(WorkloadError, match=r"'a'.*reads 'b'.*cycle"):
        Workload("w", [a, b], [X])


def test_duplicate_names_are_named():
    with pytest.raises(WorkloadError, match="duplicate name 'c1'"):
        Workload("w", [conv("c1", "x"), conv("c1", "x")], [X])
    with pytest.raises(WorkloadError, match="duplicate name 'x'"):
        Workload("w", [conv("x", "x")], [X])


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("weight_bytes", float("nan"), "NaN weight_bytes"),
        ("macs", -5, "negative macs"),
        ("vector_ops", float("nan"), "NaN vector_ops"),
    ],
)
def test_nan_and_negative_sizes_name_the_node(field, value, problem):
    bad = conv("c2", "c1", shape_in=(1, 4, 8, 8), **{field: value})
    with pytest.raises(WorkloadError, match=rf"'c2'.*{problem}"):
        Workload("w", [conv("c1", "x"), bad], [X])


def test_negative_and_nan_shapes_name_the_node():
    with pytest.raises(WorkloadError, match=r"'c1'.*negative size"):
        Workload("w", [conv("c1", "x", shape_out=(1, -4, 8, 8))], [X])
    with pytest.raises(WorkloadError, match=r"'c1'.*NaN"):
        Workload("w", [conv("c1", "x", shape_in=(1, 3, math.nan, 8))], [X])
    with pytest.raises(WorkloadError, match="graph input 'x'.*negative"):
        Workload("w", [conv("c1", "x")], [TensorInfo("x", (1, -3), 3)])


def test_unknown_op_type_is_rejected():
    node = Node("n", "fft", ["x"], [(1, 3, 8, 8)], (1, 3, 8, 8))
    with pytest.raises(WorkloadError, match=r"'n'.*unknown op type"):
        Workload("w", [node], [X])


# --------------------------------------------------------------------- structure
def test_edges_are_topological_and_deduplicated():
    w = chain()
    assert w.edge_index.tolist() == [[0, 0, 1], [1, 2, 2]]
    assert (w.edge_index[0] < w.edge_index[1]).all()
    assert w.last_use.tolist() == [2, 2, 2]


def test_byte_arrays():
    w = chain()
    assert w.output_bytes.tolist() == [256, 256, 10]
    assert w.input_bytes.tolist() == [192, 256, 512]
    assert w.graph_input_bytes.tolist() == [192, 0, 0]
    assert w.total_weight_bytes == 108 + 144 + 2570


# ---------------------------------------------------------------------- features
def test_feature_names_follow_table_1():
    assert FEATURE_NAMES == tuple(
        (
            "opid weight_size ifmx ifmy ifmz ofmx ofmy ofmz ifm_size ofm_size n_ops_left "
            "n_w_left groups kernelx kernely stride pad dilation batch"
        ).split()
    )


def test_features_columns():
    w = chain()
    f = w.features
    col = {n: f[:, i] for i, n in enumerate(FEATURE_NAMES)}
    assert f.shape == (3, 19)
    assert col["opid"].tolist() == [0, 0, 1]  # conv, conv, linear
    ops = [4 * 64 * 27 + 256, 9216 + 256, 2560 + 10]
    assert col["n_ops_left"].tolist() == [ops[1] + ops[2], ops[2], 0]
    assert col["n_w_left"].tolist() == [108 + 144 + 2570, 144 + 2570, 2570]
    # conv tensors [B, C, H, W] -> (x=W, y=H, z=C)
    assert f[0, 2:10].tolist() == [8, 8, 3, 8, 8, 4, 192, 256]
    assert col["kernelx"].tolist() == [3, 3, 0]
    assert col["groups"].tolist() == [1, 1, 0]
    assert col["batch"].tolist() == [1, 1, 1]


def test_fmap_axes():
    assert fmap_xyz((2, 16, 7, 5), conv_like=True) == (5, 7, 16)
    assert fmap_xyz((1, 512, 49), conv_like=True) == (49, 1, 512)  # conv1d [B, C, L]
    assert fmap_xyz((1, 128, 768), conv_like=False) == (128, 1, 768)
    assert fmap_xyz((1, 12, 128, 64), conv_like=False) == (128, 12, 64)
    # a tensor without the batch dimension keeps all its dimensions
    assert fmap_xyz((64, 49, 96), conv_like=False, batch=1) == (49, 64, 96)
    assert fmap_xyz((1, 49, 96), conv_like=False, batch=1) == (49, 1, 96)


def test_batch_comes_from_the_graph_inputs():
    x = TensorInfo("x", (4, 3, 8, 8), 768)
    node = conv("c1", "x", shape_in=(4, 3, 8, 8), shape_out=(4, 4, 8, 8))
    w = Workload("b4", [node], [x])
    assert w.batch == 4
    assert w.features[0, FEATURE_NAMES.index("batch")] == 4
    assert w.features[0, FEATURE_NAMES.index("ofm_size")] == 256


# -------------------------------------------------------------------- save / load
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_save_load_roundtrip(tmp_path, suffix):
    w = chain()
    path = tmp_path / f"chain{suffix}"
    w.save(path)
    back = Workload.load(path)
    assert back.to_dict() == Workload.from_dict(w.to_dict()).to_dict()
    assert np.array_equal(back.features, w.features)
    assert np.array_equal(back.edge_index, w.edge_index)


def test_gzip_files_are_reproducible(tmp_path):
    w = chain()
    w.save(tmp_path / "a.json.gz")
    w.save(tmp_path / "b.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()


def test_foreign_file_is_rejected():
    with pytest.raises(WorkloadError, match="not an egrl workload"):
        Workload.from_dict({"format": "other"})


def test_to_pyg():
    data = chain().to_pyg()
    assert tuple(data.x.shape) == (3, 19)
    assert data.edge_index.tolist() == [[0, 0, 1], [1, 2, 2]]
    assert data.node_names == ["c1", "c2", "fc"]
