"""Data-movement elimination: the rewrite, its fixed point, its report, its checks."""

from __future__ import annotations

import copy

import pytest
import torch

import workloads
from tests.support.paths import ROOT
from tests.support.torch_models import TinyBlock
from workloads import WorkloadError
from workloads.dme import DMEReport, eliminate_data_movement, verify
from workloads.ir import Node, TensorInfo, Workload
from workloads.wavenet import wavenet_workload


@pytest.fixture(scope="module")
def wavenet() -> Workload:
    return wavenet_workload("op", flows=(3, 2), channels=4, frames=2, hop=4)


@pytest.fixture(scope="module")
def block() -> Workload:
    torch.manual_seed(0)
    return workloads.from_torch(TinyBlock(), torch.randint(0, 50, (1, 6)), granularity="op")


def _eliminated_bytes(w: Workload, report: DMEReport) -> int:
    out = dict(zip(w.node_names, w.output_bytes.tolist()))
    return sum(out[e["node"]] for e in report.eliminated)


@pytest.mark.parametrize("name", ["wavenet", "block"])
def test_rewrite_matches_numpy_and_reaches_a_fixed_point(name, request):
    w = request.getfixturevalue(name)
    rewritten, report = eliminate_data_movement(w)
    assert report.eliminated, "something to eliminate"
    check = verify(w, rewritten, seed=1)
    assert check["mismatches"] == [] and check["nodes"] > 0
    assert check["elements"] > 0
    again, second = eliminate_data_movement(rewritten)
    assert second.eliminated == [] and again.num_nodes == rewritten.num_nodes
    assert [k["node"] for k in second.kept] == [k["node"] for k in report.kept]


def test_report_counts_add_up(wavenet):
    rewritten, report = eliminate_data_movement(wavenet)
    layout = [n.name for n in wavenet.nodes if n.op_type == "layout"]
    assert report.layout_nodes == len(layout) == len(report.eliminated) + len(report.kept)
    assert report.nodes_after == rewritten.num_nodes == wavenet.num_nodes - len(report.eliminated)
    assert not set(rewritten.node_names) & {e["node"] for e in report.eliminated}
    assert report.bytes_eliminated == _eliminated_bytes(wavenet, report) > 0
    kept_pairs = sum(1 if k["composed"] else k["pairs"] for k in report.kept)
    assert report.pairs_eliminated + kept_pairs == report.pairs_total
    # only the two graph outputs stay: the flattened audio and the concatenated scales
    assert (
        sorted(k["reason"] for k in report.kept)
        == ["its tensor is a graph output (no node reads it)"] * 2
    )
    assert rewritten.meta["dme"] == report.summary()
    assert report.passes == 2  # one that eliminates, one that finds nothing left


def test_consumers_read_the_sources_directly(block):
    rewritten, report = eliminate_data_movement(block)
    gone = {e["node"] for e in report.eliminated}
    for node in rewritten.nodes:
        assert not gone & set(node.inputs)
        if "loads" in node.attrs:
            assert "movement" not in node.attrs and "views" not in node.attrs
            read = {s for entry in node.attrs["loads"] for s in entry.get("maps", {})}
            assert read <= set(node.inputs)
    assert (rewritten.edge_index[0] < rewritten.edge_index[1]).all()


def test_rewritten_workload_survives_save_and_load(block, tmp_path):
    rewritten, _ = eliminate_data_movement(block)
    rewritten.save(tmp_path / "w.json.gz")
    loaded = Workload.load(tmp_path / "w.json.gz")
    assert verify(block, loaded)["mismatches"] == []
    assert eliminate_data_movement(loaded)[1].eliminated == []


def _without_movement(w: Workload) -> Workload:
    nodes = copy.deepcopy(w.nodes)
    for n in nodes:
        n.attrs.pop("movement", None)
        n.attrs.pop("views", None)
    return Workload(w.name, nodes, w.graph_inputs, w.dtype_bytes, w.meta)


def test_a_layout_without_an_access_function_is_left_in_place(block):
    legacy = _without_movement(block)
    rewritten, report = eliminate_data_movement(legacy)
    assert report.eliminated == [] and rewritten.num_nodes == legacy.num_nodes
    assert {k["reason"] for k in report.kept} == {
        "no access function recorded for this layout node"
    }


def test_an_opaque_step_is_left_in_place_with_its_reason():
    x = TensorInfo("x", (2, 3), 6)
    shuffle = {"opaque": "no access function for aten.pixel_shuffle", "args": [{"input": 0}]}
    flip = {"op": "flip", "dims": [1], "args": [{"input": 0}]}
    nodes = [
        Node("a", "eltwise", ["x"], [(2, 3)], (2, 3)),
        Node("shuffle", "layout", ["a"], [(2, 3)], (2, 3), attrs={"movement": shuffle}),
        Node("flip", "layout", ["a"], [(2, 3)], (2, 3), attrs={"movement": flip}),
        Node("b", "eltwise", ["shuffle", "flip"], [(2, 3), (2, 3)], (2, 3)),
    ]
    w = Workload("opaque", nodes, [x])
    rewritten, report = eliminate_data_movement(w)
    assert [e["node"] for e in report.eliminated] == ["flip"]
    assert report.kept == [
        {
            "node": "shuffle",
            "reason": "no access function for aten.pixel_shuffle",
            "pairs": 1,
            "bytes": 6,
            "composed": False,
        }
    ]
    assert rewritten.nodes[-1].inputs == ["shuffle", "a"]
    assert verify(w, rewritten)["mismatches"] == []


def test_bad_input_is_named():
    with pytest.raises(WorkloadError, match="takes a Workload, got str"):
        eliminate_data_movement("bert-base")
    bad = {"op": "flip", "dims": [0], "args": [{"input": 2}]}
    w = Workload(
        "bad",
        [Node("t", "layout", ["x"], [(4,)], (4,), attrs={"movement": bad})],
        [TensorInfo("x", (4,), 4)],
    )
    with pytest.raises(WorkloadError, match="node 't' \\(layout\\).*names no input"):
        eliminate_data_movement(w)


def test_the_public_name_and_a_zoo_file_without_access_functions():
    assert workloads.eliminate_data_movement is eliminate_data_movement
    shipped = workloads.load("bert-base@op")
    rewritten, report = workloads.eliminate_data_movement(shipped)
    if not any("movement" in n.attrs for n in shipped.nodes):  # built before access functions
        assert report.eliminated == [] and rewritten.num_nodes == shipped.num_nodes
    assert report.layout_nodes == shipped.op_types.count("layout") > 0


def test_benchmark_writes_its_json_and_its_section(tmp_path):
    import importlib.util
    import json

    path = ROOT / "benchmarks" / "dme.py"
    spec = importlib.util.spec_from_file_location("dme_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    page, out = tmp_path / "results.md", tmp_path / "dme.json"
    page.write_text("# Results\n")
    name = "parallel-wavenet-like@op"
    args = ["--workloads", name, "--hw-workloads", name, "--wavenet-flows", "2", "1"]
    args += ["--time-limit", "2", "--workers", "1", "--json", str(out), "--page", str(page)]
    assert bench.main(args) == 0
    results = json.loads(out.read_text())
    dme = results["dme"][name]
    assert dme["verify"]["mismatches"] == [] and dme["layout_eliminated"] > 0
    assert set(results["hardware"]) == {f"{name} on nnpi", f"{name} on mcm"}
    for pair in results["hardware"].values():
        assert pair["after"]["nodes"] == dme["nodes_after"] < pair["before"]["nodes"]
    text = page.read_text()
    assert text.startswith("# Results\n") and "## Data-movement elimination" in text
    assert "python benchmarks/dme.py" in text and name in text


def test_make_env_option_rewrites_the_workload_before_binding(wavenet):
    from egrl import make_env

    plain = make_env("nnpi", wavenet)
    rewritten = make_env("nnpi", wavenet, eliminate_data_movement=True)
    expected, report = eliminate_data_movement(wavenet)
    assert report.pairs_eliminated > 0
    assert rewritten.num_units == expected.num_nodes < plain.num_units
