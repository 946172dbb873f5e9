"""workloads.load with file paths: ONNX models, saved workloads, and the errors that name them."""

from __future__ import annotations

import pytest
from onnx import save as save_onnx

import workloads
from tests.support.onnx_models import onnx_cnn


def test_load_reads_onnx_and_saved_workloads(tmp_path):
    save_onnx(onnx_cnn(), tmp_path / "net.onnx")
    from_onnx = workloads.load(str(tmp_path / "net.onnx"))
    assert from_onnx.name == "net" and from_onnx.num_nodes > 0
    for name in ("net.json", "net.json.gz"):
        from_onnx.save(tmp_path / name)
        again = workloads.load(tmp_path / name)
        assert again.node_names == from_onnx.node_names


def test_zoo_names_still_load():
    assert workloads.load("resnet18").num_nodes == workloads.load("resnet18").num_nodes > 0


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing.onnx", "workload file 'missing.onnx' does not exist"),
        ("some/dir/model", "workload file 'some/dir/model' does not exist"),
        ("resnet-50", "unknown workload 'resnet-50'; built-in: bert-base"),
    ],
)
def test_missing_files_and_unknown_names_are_named(name, message):
    with pytest.raises(workloads.WorkloadError, match=message):
        workloads.load(name)


def test_unrecognised_or_broken_files_are_named(tmp_path):
    (tmp_path / "model.pt").write_bytes(b"\x80")
    with pytest.raises(workloads.WorkloadError, match=r"model.pt' is not in a recognised format"):
        workloads.load(str(tmp_path / "model.pt"))
    with pytest.raises(workloads.WorkloadError, match="not in a recognised format"):
        workloads.load(str(tmp_path))
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(workloads.WorkloadError, match="broken.json"):
        workloads.load(str(tmp_path / "broken.json"))
    (tmp_path / "junk.onnx").write_text("junk", encoding="utf-8")
    with pytest.raises(workloads.WorkloadError, match="junk.onnx"):
        workloads.load(str(tmp_path / "junk.onnx"))
