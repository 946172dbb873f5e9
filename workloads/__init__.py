"""Workloads: the IR, importers from PyTorch and ONNX, and the built-in zoo.

>>> import workloads
>>> workloads.names()[:3]
>>> w = workloads.load("resnet50")
>>> workloads.load("bert-base@op").num_nodes  # op granularity, see workloads.zoo
>>> w.num_nodes, w.features.shape
>>> workloads.datasets.split("mcm87")["test"][:2]  # named datasets, see workloads.datasets
"""

from __future__ import annotations

from workloads import datasets
from workloads.dme import eliminate_data_movement
from workloads.errors import MissingShapeError, UnsupportedOperatorError, WorkloadError
from workloads.ir import FEATURE_NAMES, OP_TYPES, Node, TensorInfo, Workload
from workloads.zoo import load, names


def from_torch(
    module,
    example_inputs,
    name: str | None = None,
    dtype_bytes: int = 1,
    granularity: str = "layer",
    example_kwargs: dict | None = None,
) -> Workload:
    """Import a ``torch.nn.Module`` by exporting it with ``torch.export`` and fusing it.

    ``granularity="op"`` keeps every compute op its own node; ``example_kwargs`` are
    keyword inputs (a decode step's ``past_key_values``). See
    :func:`workloads.torch_import.from_torch`.
    """
    from workloads.torch_import import from_torch as _from_torch

    return _from_torch(
        module,
        example_inputs,
        name=name,
        dtype_bytes=dtype_bytes,
        granularity=granularity,
        example_kwargs=example_kwargs,
    )


def from_onnx(
    path, name: str | None = None, dtype_bytes: int | None = None, granularity: str = "layer"
) -> Workload:
    """Import an ONNX file (shapes inferred with ONNX shape inference) and fuse it.

    ``granularity="op"`` keeps every compute op its own node. See
    :func:`workloads.onnx_import.from_onnx`.
    """
    from workloads.onnx_import import from_onnx as _from_onnx

    return _from_onnx(path, name=name, dtype_bytes=dtype_bytes, granularity=granularity)


__all__ = [
    "FEATURE_NAMES",
    "OP_TYPES",
    "MissingShapeError",
    "Node",
    "TensorInfo",
    "UnsupportedOperatorError",
    "Workload",
    "WorkloadError",
    "datasets",
    "eliminate_data_movement",
    "from_onnx",
    "from_torch",
    "load",
    "names",
]
