"""What each operator requires of the bank layouts of its tensors.

Following Zheng et al. (2020), section 2.2: operators that run on the systolic array
need the dimension they multiply over spread across the banks, one bank per row of
the array, and their result spread by output channels; everything else adapts. Per op
type of :data:`workloads.ir.OP_TYPES` (axes are bank axes, :mod:`hwmodels.banked.layouts`):

=============  ===========================================  ===============================
op             inputs read from other nodes                  output
=============  ===========================================  ===============================
``conv``       feature map: channels (``axis1``)             channels (``axis1``)
``pool``       feature map: channels (``axis1``)             channels (``axis1``)
``linear``     activation: its last axis (the contraction)    last or second-last axis
``matmul``     A: last axis; B: second-last (the contraction) last or second-last axis
``norm``       same layout as the output                      any axis but the normalised
                                                              last one (channels for a
                                                              ``[B, C, H, W]`` tensor)
``softmax``    same layout as the output                      any axis but the last
``eltwise``    same layout as the output                      any
``layout``,    any (the op is itself a copy)                  any
``embedding``,
``reduce``
=============  ===========================================  ===============================

* Output of ``linear`` / ``matmul``: the array puts the free dimension of its stationary
  operand across the banks of the result; computing ``C = A B`` or ``C^T = B^T A^T``
  picks the second-last or the last axis of ``C``.
* ``norm`` and ``softmax`` reduce along an axis; a reduction across banks would move
  data between banks, which the paper calls "very slow", so that axis stays inside
  the banks.
* "Same layout as the output": an operand of the op's own shape (an elementwise
  operand, including the residual operand fused into a ``conv`` or ``linear``) is read
  element by element alongside the output, so it must sit in the same banks. An
  operand of another shape (broadcast, reshaped, or the main input of a shape-changing
  op) may be read in any layout.
* A required axis of extent 1 requires nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hwmodels.banked.layouts import L, bank_axes, valid_layouts
from workloads.ir import Node, Workload, channel_first

#: op types whose output may be read in any layout and whose inputs need nothing
FREE_OPS = ("layout", "embedding", "reduce")
#: op types whose same-shape operands follow the output's layout
ELEMENTWISE_OPS = ("eltwise", "norm", "softmax")


@dataclass(frozen=True)
class SlotRule:
    """What a node requires of one input read from another node.

    Attributes:
        producer: index of the producing node.
        kind: ``"any"`` (nothing), ``"axis"`` (a fixed axis) or ``"same"`` (the node's
            output layout).
        axis: for ``"axis"``, the required axis in the input's own bank axes.
        dims: the input's bank axes (as the consumer reads it).
    """

    producer: int
    kind: str
    axis: int
    dims: tuple[int, ...]


@dataclass(frozen=True)
class NodeRule:
    """A node's requirements: the layouts its output may take, and one rule per input."""

    allowed: tuple[int, ...]
    slots: tuple[SlotRule, ...]


def _main_operands(op: str) -> int:
    """How many leading inputs of ``op`` are read by its own (non-elementwise) rule."""
    return {"conv": 1, "pool": 1, "linear": 1, "matmul": 2}.get(op, 0)


def output_axes(node: Node, dims: Sequence[int]) -> list[int]:
    """Axes the output of ``node`` (bank axes ``dims``) may be spread on, before validity."""
    rank = len(dims)
    last = list(range(rank))
    if node.op_type in ("conv", "pool"):
        return [0]
    if node.op_type in ("linear", "matmul"):
        return [a for a in (rank - 2, rank - 1) if a >= 0]
    if node.op_type == "norm" and channel_first("norm", node.output_shape):
        return [0]
    if node.op_type in ("norm", "softmax"):
        return last[:-1]
    return last


def _input_axis(op: str, slot: int, dims: Sequence[int]) -> int | None:
    """The fixed axis a main operand must be spread on, or None."""
    rank = len(dims)
    if op in ("conv", "pool"):
        axis = 0
    elif op == "linear" or (op == "matmul" and slot == 0):
        axis = rank - 1
    elif op == "matmul":
        axis = rank - 2
    else:
        return None
    if axis < 0 or dims[axis] <= 1:
        return None
    return axis


def node_rule(workload: Workload, i: int) -> NodeRule:
    """The requirements of node ``i`` of ``workload``."""
    node, batch = workload.nodes[i], workload.batch
    out = bank_axes(node.output_shape, batch)
    valid = valid_layouts(out)
    allowed = tuple(a for a in output_axes(node, out) if a in valid and a < L) or tuple(valid)
    slots = []
    for k, (src, shape) in enumerate(zip(node.inputs, node.input_shapes)):
        if src not in workload.index:
            continue  # a graph input: loaded from off-chip memory in whatever layout it needs
        dims = bank_axes(shape, batch)
        axis = _input_axis(node.op_type, k, dims) if k < _main_operands(node.op_type) else None
        if axis is not None:
            slots.append(SlotRule(workload.index[src], "axis", axis, dims))
        elif node.op_type not in FREE_OPS and k >= _main_operands(node.op_type) and dims == out:
            slots.append(SlotRule(workload.index[src], "same", -1, dims))
        else:
            slots.append(SlotRule(workload.index[src], "any", -1, dims))
    return NodeRule(allowed, tuple(slots))


def rules(workload: Workload) -> list[NodeRule]:
    """The requirements of every node of ``workload``, in execution order."""
    return [node_rule(workload, i) for i in range(workload.num_nodes)]
