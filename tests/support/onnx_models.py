"""ONNX graphs built by hand for the ONNX importer: the builders and a small CNN."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT


def onnx_init(name: str, shape, dtype=np.float32, value=None) -> onnx.TensorProto:
    """An initializer named ``name``: zeros of ``shape`` unless ``value`` is given."""
    arr = np.zeros(shape, dtype=dtype) if value is None else np.asarray(value, dtype=dtype)
    return numpy_helper.from_array(arr, name)


def onnx_model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def onnx_vi(name: str, shape, dtype=FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def onnx_cnn() -> onnx.ModelProto:
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
    inits = [onnx_init("w1", (8, 3, 3, 3)), onnx_init("b1", (8,)), onnx_init("w2", (8, 8, 3, 3))]
    inits += [onnx_init(f"bn{i}_{p}", (8,)) for i in (1, 2) for p in bn]
    inits += [onnx_init("flat_shape", (2,), np.int64, [1, -1]), onnx_init("fc_w", (10, 8))]
    inits += [onnx_init("fc_b", (10,))]
    return onnx_model(nodes, [onnx_vi("x", [1, 3, 16, 16])], [onnx_vi("y", [1, 10])], inits)


#: parameters of :func:`onnx_cnn` (batch norms: scale and shift)
CNN_PARAMS = 8 * 3 * 9 + 8 + 8 * 8 * 9 + 2 * 2 * 8 + 10 * 8 + 10
