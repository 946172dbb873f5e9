"""The built-in zoo: every shipped workload loads and matches its provenance."""

from __future__ import annotations

import numpy as np
import pytest

import workloads
from workloads import FEATURE_NAMES, OP_TYPES, WorkloadError

NAMES = workloads.names()
#: Operational layers the EGRL paper counts (Section 4).
PAPER_NODES = {"resnet50": 57, "resnet101": 108, "bert-large": 376}
#: Public parameter counts of the reference architectures.
PARAMETERS = {
    "resnet50": 25_557_032,
    "bert-base": 109_482_240,
    "vit-b16": 86_567_656,
    "llama3.2-1b": 1_235_814_400,  # tied embeddings, no LM head beside them
    "qwen2.5-0.5b": 494_032_768,
}
#: decode steps: (layers, key-value heads, head size) and the tokens cached
DECODERS = {"llama3.2-1b-decode": (16, 8, 64), "qwen2.5-0.5b-decode": (24, 2, 64)}
CACHED = 4096


def test_zoo_holds_the_required_models_and_more():
    assert {"resnet50", "resnet101", "bert-base", "bert-large"} <= set(NAMES)
    assert len(NAMES) >= 12
    assert len({workloads.load(n).meta["family"] for n in NAMES}) >= 10


@pytest.mark.parametrize("name", NAMES)
def test_workload_loads_and_is_consistent(name):
    w = workloads.load(name)
    assert w.name == name
    assert w.features.shape == (w.num_nodes, len(FEATURE_NAMES))
    assert np.isfinite(w.features).all() and (w.features >= 0).all()
    assert set(w.op_types) <= set(OP_TYPES)
    assert (w.edge_index[0] < w.edge_index[1]).all()
    placed = w.meta["parameters"] + w.meta.get("cache_elements", 0)  # a decode step's cache
    assert w.total_weight_bytes == placed * w.dtype_bytes
    assert w.meta["fusion"]["parameter_elements"] == placed
    assert w.meta["source_class"].startswith("transformers.")
    assert w.meta["input_shapes"]
    # one connected computation: the last node is the only one nobody reads
    sinks = set(range(w.num_nodes)) - set(w.edge_index[0].tolist())
    assert sinks == {w.num_nodes - 1}
    assert w.macs.sum() > 0


@pytest.mark.parametrize(("name", "paper"), sorted(PAPER_NODES.items()))
def test_node_counts_within_ten_percent_of_the_paper(name, paper):
    assert abs(workloads.load(name).num_nodes - paper) <= 0.1 * paper


@pytest.mark.parametrize(("name", "count"), sorted(PARAMETERS.items()))
def test_parameter_counts_match_the_reference_models(name, count):
    w = workloads.load(name)
    assert w.meta["parameters"] == count
    assert w.dtype_bytes == 1 and w.total_weight_bytes == count


@pytest.mark.parametrize(("name", "shape"), sorted(DECODERS.items()))
def test_a_decode_step_places_its_cache_beside_the_prefills_weights(name, shape):
    layers, heads, head_dim = shape
    step, prefill = workloads.load(name), workloads.load(name.removesuffix("-decode"))
    assert step.meta["cache_elements"] == 2 * layers * heads * CACHED * head_dim
    assert (
        step.meta["cached_tokens"] == CACHED and step.meta["parameters"] == PARAMETERS[prefill.name]
    )
    assert step.meta["input_shapes"] == {"input_ids": [1, 1]}
    assert prefill.meta["input_shapes"] == {"input_ids": [1, 512]}
    assert step.num_nodes == prefill.num_nodes
    # one token reads each weight once (a MAC per weight), far below the prefill of 512
    assert step.macs.sum() < prefill.macs.sum() / 100


def test_resnet50_macs_are_the_known_four_gigamacs():
    macs = workloads.load("resnet50").macs.sum()
    assert 4.0e9 < macs < 4.2e9


def test_bert_layers_repeat():
    base, large = workloads.load("bert-base"), workloads.load("bert-large")
    # embeddings + pooler are shared; each encoder layer adds the same number of nodes
    per_layer = (large.num_nodes - base.num_nodes) / (24 - 12)
    assert per_layer == int(per_layer)
    assert base.num_nodes - 12 * per_layer == large.num_nodes - 24 * per_layer


def test_unknown_name_is_an_error():
    with pytest.raises(WorkloadError, match="unknown workload 'resnet-9000'"):
        workloads.load("resnet-9000")


def test_load_by_path(tmp_path):
    path = tmp_path / "mine.json.gz"
    workloads.load("resnet18").save(path)
    assert workloads.load(path).to_dict() == workloads.load("resnet18").to_dict()


# --- op granularity (zoo/unfused/) ---------------------------------------------------

OP_NAMES = workloads.names(granularity="op")


def test_op_zoo_holds_the_partitioning_models():
    assert {"bert-base@op", "bert-large@op", "resnet50@op", "gpt2@op"} <= set(OP_NAMES)
    assert all("@" not in n for n in NAMES)  # the plain names stay the fused zoo


@pytest.mark.parametrize("name", OP_NAMES)
def test_op_workload_matches_its_fused_model(name):
    op, layer = workloads.load(name), workloads.load(name.split("@")[0])
    assert op.name == name and op.meta["fusion"]["granularity"] == "op"
    assert op.features.shape == (op.num_nodes, len(FEATURE_NAMES))
    assert set(op.op_types) <= set(OP_TYPES)
    assert (op.edge_index[0] < op.edge_index[1]).all()
    assert op.num_nodes > layer.num_nodes
    assert all(len(n.fused) == 1 for n in op.nodes)
    assert op.macs.sum() == layer.macs.sum()
    assert op.vector_ops.sum() == layer.vector_ops.sum()
    assert op.total_weight_bytes == layer.total_weight_bytes == op.meta["parameters"]
    assert sorted(m for n in layer.nodes for m in n.fused) == sorted(op.node_names)
    sinks = set(range(op.num_nodes)) - set(op.edge_index[0].tolist())
    assert sinks == {op.num_nodes - 1}


def test_layer_suffix_names_the_fused_zoo():
    assert workloads.load("bert-base@layer") is workloads.load("bert-base")


def test_op_names_that_are_not_built_are_errors():
    with pytest.raises(WorkloadError, match="'resnet18' is not built at op granularity"):
        workloads.load("resnet18@op")
    with pytest.raises(WorkloadError, match="unknown granularity 'ops'"):
        workloads.load("bert-base@ops")
    with pytest.raises(WorkloadError, match="unknown granularity"):
        workloads.names(granularity="ops")
