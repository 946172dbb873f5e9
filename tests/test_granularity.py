"""Op granularity through the importers and wherever a workload name is accepted."""

from __future__ import annotations

import pytest
import torch

import workloads
from tests.support.onnx_models import CNN_PARAMS, onnx_cnn
from tests.support.sums import totals
from tests.support.torch_models import TinyBlock, TinyCNN
from workloads import WorkloadError, from_onnx, from_torch


def _check_op_graph(layer: workloads.Workload, op: workloads.Workload) -> None:
    assert totals(op) == totals(layer)
    assert op.num_nodes > layer.num_nodes
    assert all(len(n.fused) == 1 for n in op.nodes)
    assert (op.edge_index[0] < op.edge_index[1]).all()
    fusion = op.meta["fusion"]
    assert fusion["granularity"] == "op" and fusion["internal_reads"] == 0
    # every source op is a node or folded away as a constant, weight value or alias
    assert op.num_nodes + sum(fusion["folded"].values()) == fusion["source_ops"]
    # the layer graph's nodes are made of exactly the op graph's nodes
    assert sorted(m for n in layer.nodes for m in n.fused) == sorted(op.node_names)


@pytest.mark.parametrize(
    ("module", "example"),
    [
        (TinyCNN, lambda: torch.randn(1, 3, 16, 16)),
        (TinyBlock, lambda: torch.randint(0, 50, (1, 12))),
    ],
)
def test_from_torch_op_granularity_keeps_totals(module, example):
    torch.manual_seed(0)
    model, args = module(), example()
    layer = from_torch(model, args, name="m")
    op = from_torch(model, args, name="m", granularity="op")
    _check_op_graph(layer, op)
    assert from_torch(model, args, name="m").to_dict() == layer.to_dict()


def test_from_torch_rejects_an_unknown_granularity_before_exporting():
    with pytest.raises(WorkloadError, match="unknown granularity 'fine'"):
        from_torch(TinyCNN(), torch.randn(1, 3, 16, 16), granularity="fine")


def test_from_onnx_passes_granularity_through():
    layer, op = from_onnx(onnx_cnn()), from_onnx(onnx_cnn(), granularity="op")
    _check_op_graph(layer, op)
    assert op.total_weight_bytes == CNN_PARAMS
    assert op.op_types[:3] == ["conv", "eltwise", "eltwise"]  # conv, batch norm, relu


def test_op_zoo_names_load_through_make_env():
    from egrl import make_env

    env = make_env("mcm", "resnet50@op")
    assert env.num_units == workloads.load("resnet50@op").num_nodes
    assert env.num_units > make_env("mcm", "resnet50").num_units


def test_egrl_train_takes_an_op_zoo_name():
    from egrl.cli.checks import workload_problem
    from egrl.cli.overrides import rewrite_workload_paths
    from egrl.cli.train import workload_label

    assert rewrite_workload_paths(["workload=bert-base@op"]) == ["workload.name=bert-base@op"]
    assert workload_problem("bert-base@op") is None
    assert "not built at op granularity" in workload_problem("resnet18@op")
    assert workload_label("bert-base@op") == "bert-base@op"
