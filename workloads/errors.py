"""Errors raised for bad workloads: each names the problem and where it is."""


class WorkloadError(ValueError):
    """A malformed workload: empty, cyclic, unknown producer, NaN or negative size."""


class UnsupportedOperatorError(WorkloadError):
    """An operator the importer has no rule for; names the op and the node."""

    def __init__(self, op: str, node: str, source: str = "") -> None:
        where = f" in {source}" if source else ""
        super().__init__(
            f"unsupported operator {op!r} at node {node!r}{where}: add a rule for it to the "
            "importer's op table (workloads/torch_ops.py or onnx_ops.py) or replace it "
            "in the model"
        )
        self.op = op
        self.node = node


class MissingShapeError(WorkloadError):
    """A tensor whose shape is unknown (e.g. an ONNX file without shape inference)."""
