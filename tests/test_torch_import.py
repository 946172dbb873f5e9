"""from_torch on small hand-written modules: node counts, bytes, MACs, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.support.torch_models import TinyBlock, TinyCNN
from workloads import FEATURE_NAMES, UnsupportedOperatorError, WorkloadError, from_torch


class Cumprod(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).cumprod(-1)


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    module = TinyCNN()
    return module, from_torch(module, torch.randn(1, 3, 16, 16), name="tiny-cnn")


@pytest.fixture(scope="module")
def block():
    torch.manual_seed(0)
    module = TinyBlock()
    return module, from_torch(module, (torch.randint(0, 50, (1, 12)),), name="tiny-block")


def _param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # tied tensors listed once


def _check_common(module, w):
    assert w.features.shape == (w.num_nodes, len(FEATURE_NAMES))
    assert np.isfinite(w.features).all()
    assert (w.edge_index[0] < w.edge_index[1]).all()
    assert w.total_weight_bytes == _param_count(module)
    assert w.meta["parameters"] == _param_count(module)


def test_cnn_nodes(cnn):
    module, w = cnn
    _check_common(module, w)
    assert w.op_types == ["conv", "pool", "conv", "conv", "pool", "linear"]
    stem, maxpool, c1, c2, avgpool, fc = w.nodes
    assert w.node_names == [
        "stem/conv2d",
        "max_pool2d",
        "c1/conv2d_1",
        "c2/conv2d_2",
        "pool/adaptive_avg_pool2d",
        "fc/linear",
    ]
    # bn + relu fold into the convs; the residual add and relu into c2
    assert len(stem.fused) == 3 and len(c1.fused) == 3 and len(c2.fused) == 3
    assert c2.inputs == [c1.name, maxpool.name]
    # weights: conv + folded batch-norm scale / shift
    assert stem.weight_bytes == 8 * 3 * 9 + 16
    assert c2.weight_bytes == 8 * 4 * 9 + 8
    # MACs: output elements x (input channels / groups) x kernel area
    assert stem.macs == 8 * 8 * 8 * 3 * 9
    assert c2.macs == 8 * 4 * 4 * 4 * 9
    assert fc.macs == 5 * 8
    assert stem.attrs == {"groups": 1, "kernel": (3, 3), "stride": 2, "pad": 1, "dilation": 1}
    assert c2.attrs["groups"] == 2
    assert maxpool.attrs["kernel"] == (2, 2) and maxpool.attrs["stride"] == 2
    assert stem.output_shape == (1, 8, 8, 8)
    assert w.graph_inputs[0].shape == (1, 3, 16, 16)


def test_cnn_features(cnn):
    _, w = cnn
    col = {n: w.features[:, i] for i, n in enumerate(FEATURE_NAMES)}
    assert col["ofmx"][0] == 8 and col["ofmz"][0] == 8 and col["ifmz"][0] == 3
    assert col["ofm_size"][0] == 8 * 8 * 8
    assert col["stride"][0] == 2 and col["groups"][3] == 2
    assert col["n_w_left"][0] == w.total_weight_bytes
    assert col["n_ops_left"][-1] == 0


def test_module_mode_is_restored():
    module = TinyCNN().train()
    w = from_torch(module, torch.randn(1, 3, 16, 16))
    assert module.training
    assert w.name == "TinyCNN" and w.num_nodes == 6


def test_transformer_block(block):
    module, w = block
    _check_common(module, w)
    assert w.op_types == [
        "embedding",
        "norm",
        "linear",  # q
        "layout",
        "linear",  # k
        "layout",  # head split + K transpose, collapsed
        "linear",  # v
        "layout",
        "matmul",  # scores (+ scale + mask)
        "softmax",
        "matmul",
        "layout",
        "linear",  # o (+ residual)
        "norm",
        "linear",  # fc1 + tanh GELU
        "linear",  # fc2 (+ residual)
        "linear",  # tied head
    ]
    nodes = {n.name: n for n in w.nodes}
    emb, head = nodes["emb/embedding"], w.nodes[-1]
    assert emb.inputs == ["ids"] and emb.weight_bytes == 50 * 16
    assert head.weight_bytes == 0  # the tied table is charged to the embedding
    assert len(w.nodes[5].fused) == 2
    assert len(w.nodes[8].fused) == 3  # matmul, scale, masked_fill
    assert len(w.nodes[14].fused) == 9  # fc1 and the eight ops of the GELU formula
    assert w.nodes[15].inputs == [w.nodes[14].name, w.nodes[12].name]
    assert w.nodes[8].macs == 2 * 12 * 12 * 8
    assert w.meta["fusion"]["folded"]["const"] >= 2
    assert w.graph_input_bytes.tolist()[0] == 12


def test_tuple_and_single_tensor_inputs_agree():
    module = TinyCNN()
    x = torch.randn(1, 3, 16, 16)
    assert from_torch(module, x).to_dict() == from_torch(module, (x,)).to_dict()


def test_dtype_bytes_scales_every_size(cnn):
    module, w1 = cnn
    w2 = from_torch(module, torch.randn(1, 3, 16, 16), dtype_bytes=2)
    assert w2.total_weight_bytes == 2 * w1.total_weight_bytes
    assert (w2.output_bytes == 2 * w1.output_bytes).all()
    assert w2.graph_inputs[0].nbytes == 2 * 3 * 16 * 16


def test_unsupported_operator_names_op_and_node():
    with pytest.raises(UnsupportedOperatorError, match=r"aten\.cumprod.*'cumprod'") as info:
        from_torch(Cumprod(), torch.randn(2, 4))
    assert info.value.op == "aten.cumprod.default"
    assert info.value.node == "cumprod"


class FusedAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(1, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v)


class Einsum(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bsd,de->bse", x, self.w)


class Broken(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("no forward for you")


def test_fused_attention_is_one_matmul_node():
    w = from_torch(FusedAttention(), torch.randn(1, 8, 16))
    assert w.op_types == ["linear", "layout", "matmul"]
    scores = 2 * 8 * 8  # heads x queries x keys
    assert w.nodes[2].macs == scores * (8 + 8)
    assert w.nodes[2].vector_ops == 3 * scores


def test_einsum_with_a_parameter_is_linear():
    w = from_torch(Einsum(), torch.randn(1, 8, 16))
    assert w.op_types == ["linear"]
    assert w.nodes[0].macs == 8 * 4 * 16
    assert w.total_weight_bytes == 64


def test_export_failure_names_the_model():
    with pytest.raises(WorkloadError, match="torch.export of 'Broken' failed: no forward"):
        from_torch(Broken(), torch.randn(2))


class DataDependent(torch.nn.Module):
    """Control flow on a tensor's value: torch.export refuses it with a long message."""

    def forward(self, x):
        return x * 2 if x.sum() > 0 else x


def test_export_failure_is_one_line():
    with pytest.raises(WorkloadError, match="torch.export of 'DataDependent' failed: ") as err:
        from_torch(DataDependent(), torch.randn(2))
    assert "\n" not in str(err.value) and err.value.__cause__ is not None
