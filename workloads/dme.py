"""Data-movement elimination: a workload transform that removes pure copies.

Zheng et al., *Optimizing Memory-Access Patterns for Deep Learning Accelerators*
(AWS, arXiv:2002.12798, 2020), Section 2.1: a data-movement operator (transpose, concat,
split, repeat, strided slice, ...) loads each element of its input and stores it in an
intermediate tensor ``t_s``. Composing the inverse of its store with its load gives
``g = f_l o f_s^-1`` from ``t_s``'s indices to its input's; composing every load that
reads ``t_s`` with ``g`` makes those loads read the input directly, and ``t_s`` and the
operator that wrote it disappear. Repeat until nothing changes.

In the IR, a data-movement operator is a ``layout`` node whose access is recorded in
``attrs["movement"]`` (:mod:`workloads.movement`); views the importer already folded
(reshape, slice, pad, expand, ...) are recorded in ``attrs["views"]`` of their
consumers and are part of the composed loads. :func:`eliminate_data_movement` removes
every layout node it can and gives each consumer it rewrote ``attrs["loads"]``: one
entry per operand (the node's inputs in order, then its views; a layout node has one),
``{"shape", "maps": {source: isl map text}, "fill"}``, which supersedes ``movement``
and ``views``. A layout node stays when:

* no access function was recorded for it (an ONNX import, a workload saved before
  access functions were recorded, an operator without one);
* its tensor is a graph output (no node reads it), so it must be written;
* a consumer reads it through a step without an access function;
* composing its access with a consumer's load fails (two paddings of different values).

:class:`DMEReport` gives the load/store pairs and bytes eliminated and each node kept
with its reason; :func:`verify` executes the original and the rewritten loads with
NumPy on random tensors and compares them.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from workloads import access as acc
from workloads import movement as mv
from workloads.access import Access, AccessError
from workloads.errors import WorkloadError
from workloads.ir import Node, Workload

log = logging.getLogger(__name__)

#: the IR op type of data-movement nodes
LAYOUT = "layout"


@dataclass(frozen=True)
class Opaque:
    """An operand whose load has no access function: why, and the inputs it reads."""

    reason: str
    sources: tuple[str, ...] = ()


Operand = Access | Opaque


@dataclass
class DMEReport:
    """What :func:`eliminate_data_movement` did to one workload.

    Pairs are load/store pairs, one per data-movement operator a compiler would run as
    its own loop nest; bytes are those of the intermediate tensors the pairs write.

    Attributes:
        workload: the workload's name.
        nodes_before, nodes_after: node counts.
        layout_nodes: layout (data-movement) nodes before the transform.
        eliminated: one entry per layout node removed: ``node``, ``pairs``, ``bytes``
            (its output tensor), ``step_bytes`` (every intermediate of its expression),
            ``consumers``.
        kept: one entry per layout node left: ``node``, ``reason``, ``pairs``, ``bytes``.
        view_pairs, view_bytes: views folded by the importer that the rewritten loads
            compose (their pairs are eliminated too; the IR never stored them).
        opaque_views: ``{node, reason}`` of views without an access function.
        passes: passes until a pass eliminated nothing (the fixed point).
    """

    workload: str
    nodes_before: int
    nodes_after: int
    layout_nodes: int
    eliminated: list[dict] = field(default_factory=list)
    kept: list[dict] = field(default_factory=list)
    view_pairs: int = 0
    view_bytes: int = 0
    opaque_views: list[dict] = field(default_factory=list)
    passes: int = 0

    @property
    def pairs_eliminated(self) -> int:
        """Pairs of removed layout nodes, of folded views, and of views composed into a
        kept node's load."""
        kept_composed = sum(k["pairs"] - 1 for k in self.kept if k["composed"])
        return sum(e["pairs"] for e in self.eliminated) + self.view_pairs + kept_composed

    @property
    def pairs_total(self) -> int:
        opaque = sum(v["pairs"] for v in self.opaque_views)
        return sum(e["pairs"] for e in self.eliminated + self.kept) + self.view_pairs + opaque

    @property
    def bytes_eliminated(self) -> int:
        """Bytes of the layout nodes' output tensors removed from the IR."""
        return sum(e["bytes"] for e in self.eliminated)

    @property
    def layout_bytes(self) -> int:
        """Bytes of all layout nodes' output tensors before the transform."""
        return sum(e["bytes"] for e in self.eliminated + self.kept)

    def summary(self) -> dict:
        """Counts only: what a results table shows."""
        return {
            "workload": self.workload,
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "layout_nodes": self.layout_nodes,
            "layout_eliminated": len(self.eliminated),
            "pairs_eliminated": self.pairs_eliminated,
            "pairs_total": self.pairs_total,
            "bytes_eliminated": self.bytes_eliminated,
            "layout_bytes": self.layout_bytes,
            "view_pairs": self.view_pairs,
            "view_bytes": self.view_bytes,
            "passes": self.passes,
        }

    def to_dict(self) -> dict:
        return {**asdict(self), **self.summary()}


# -------------------------------------------------------------------- operands
def _sources(node: Node, shapes: dict[str, tuple[int, ...]]) -> list[tuple[str, tuple]]:
    return [(name, tuple(shapes.get(name, s))) for name, s in zip(node.inputs, node.input_shapes)]


def _expr_operand(expr: dict, sources: list[tuple[str, tuple]]) -> Operand:
    try:
        return mv.to_access(expr, sources)
    except mv.OpaqueError as exc:
        return Opaque(str(exc), tuple(sources[k][0] for k in _leaf_inputs(expr)))


def operands(node: Node) -> list[Operand]:
    """The loads of ``node``: its rewritten ``loads`` if it has them; else its
    ``movement`` (layout node) or one identity load per input and one per view."""
    where = f"node {node.name!r} ({node.op_type})"
    sources = _sources(node, {})
    shapes = dict(sources)
    if "loads" in node.attrs:
        out: list[Operand] = []
        for entry in node.attrs["loads"]:
            if "opaque" in entry:
                out.append(Opaque(entry["opaque"], tuple(entry.get("sources", ()))))
                continue
            unknown = [s for s in entry["maps"] if s not in shapes]
            if unknown:
                raise WorkloadError(f"{where}: its loads read {unknown}, which are not its inputs")
            src = {s: shapes[s] for s in entry["maps"]}
            out.append(acc.from_text(entry["shape"], entry["maps"], src, entry.get("fill")))
        return out
    if node.op_type == LAYOUT:
        expr = node.attrs.get("movement")
        if expr is None:
            return [Opaque("no access function recorded for this layout node", tuple(node.inputs))]
        mv.check(expr, len(node.inputs), where)
        return [_expr_operand(expr, sources)]
    out = [acc.identity(name, shape) for name, shape in sources]
    for expr in node.attrs.get("views", []):
        mv.check(expr, len(node.inputs), where)
        out.append(_expr_operand(expr, sources))
    return out


def _loads_attr(ops: Sequence[Operand]) -> list[dict]:
    out = []
    for op in ops:
        if isinstance(op, Opaque):
            out.append({"opaque": op.reason, "sources": list(op.sources)})
        else:
            out.append({"shape": list(op.shape), "maps": op.text(), "fill": op.fill})
    return out


def _leaf_inputs(expr: dict) -> list[int]:
    if mv.is_leaf(expr):
        return [expr["input"]]
    return [k for a in expr.get("args", []) for k in _leaf_inputs(a)]


# ------------------------------------------------------------------- the transform
def eliminate_data_movement(workload: Workload) -> tuple[Workload, DMEReport]:
    """Remove the workload's data-movement (layout) nodes by rewriting their consumers'
    loads, to a fixed point.

    Returns:
        ``(rewritten workload, report)``; the input workload is not changed. The
        rewritten workload's ``meta["dme"]`` holds :meth:`DMEReport.summary`.

    Raises:
        WorkloadError: ``workload`` is not a :class:`Workload`, or a node's recorded
            movement, views or loads are malformed (named with the node).
    """
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"eliminate_data_movement takes a Workload, got {type(workload).__name__}"
        )
    nodes = {n.name: copy.deepcopy(n) for n in workload.nodes}
    order = list(nodes)
    ops = {name: operands(n) for name, n in nodes.items()}
    report = DMEReport(workload.name, workload.num_nodes, 0, workload.op_types.count(LAYOUT))
    _count_views(workload, report)
    pair_count = {n.name: _pairs(n) for n in workload.nodes if n.op_type == LAYOUT}
    out_bytes = dict(zip(workload.node_names, workload.output_bytes.tolist()))
    while True:
        report.passes += 1
        removed = _one_pass(nodes, order, ops, pair_count, out_bytes, report)
        if not removed:
            break
    report.kept = [
        _kept_entry(nodes[name], ops[name], pair_count[name], out_bytes[name], reason)
        for name, reason in _kept_reasons(nodes, order, ops).items()
    ]
    report.nodes_after = len(order)
    meta = {**workload.meta, "dme": report.summary()}
    rewritten = Workload(
        workload.name, [nodes[n] for n in order], workload.graph_inputs, workload.dtype_bytes, meta
    )
    log.info(
        "%s: %d of %d layout nodes eliminated, %d of %d pairs",
        workload.name,
        len(report.eliminated),
        report.layout_nodes,
        report.pairs_eliminated,
        report.pairs_total,
    )
    return rewritten, report


def _one_pass(nodes, order, ops, pair_count, out_bytes, report) -> int:
    """Eliminate every layout node that can go, in execution order; return how many."""
    removed = 0
    for name in list(order):
        node = nodes[name]
        if node.op_type != LAYOUT:
            continue
        consumers = [c for c in order if name in nodes[c].inputs]
        if _why_kept(node, ops[name], consumers, ops) is not None:
            continue
        (movement,) = ops[name]
        try:
            new_ops = {c: [_compose(op, name, movement) for op in ops[c]] for c in consumers}
        except AccessError:
            continue
        for c, c_ops in new_ops.items():
            _rewrite(nodes[c], c_ops, nodes, out_bytes)
            ops[c] = c_ops
        order.remove(name)
        del nodes[name]
        steps = _step_bytes(node)
        report.eliminated.append(
            {
                "node": name,
                "pairs": pair_count[name],
                "bytes": int(out_bytes[name]),
                "step_bytes": steps,
                "consumers": consumers,
            }
        )
        removed += 1
    return removed


def _why_kept(node: Node, node_ops: list[Operand], consumers: list[str], ops) -> str | None:
    (movement,) = node_ops
    if isinstance(movement, Opaque):
        return movement.reason
    if not consumers:
        return "its tensor is a graph output (no node reads it)"
    for c in consumers:
        for op in ops[c]:
            if isinstance(op, Opaque) and node.name in op.sources:
                return f"consumer {c!r} reads it through a step without an access function ({op.reason})"
    return None


def _kept_reasons(nodes, order, ops) -> dict[str, str]:
    reasons = {}
    for name in order:
        if nodes[name].op_type != LAYOUT:
            continue
        consumers = [c for c in order if name in nodes[c].inputs]
        why = _why_kept(nodes[name], ops[name], consumers, ops)
        reasons[name] = why or "composing its access with a consumer's load failed"
    return reasons


def _kept_entry(node: Node, node_ops, pairs: int, nbytes: int, reason: str) -> dict:
    composed = not isinstance(node_ops[0], Opaque)
    return {
        "node": node.name,
        "reason": reason,
        "pairs": pairs,
        "bytes": int(nbytes),
        "composed": composed,
    }


def _compose(op: Operand, source: str, movement: Access) -> Operand:
    if isinstance(op, Opaque) or source not in op.maps:
        return op
    return acc.compose(op, source, movement)


def _rewrite(node: Node, new_ops: list[Operand], nodes: dict[str, Node], out_bytes) -> None:
    """Give ``node`` the inputs its new loads read, and the loads themselves."""
    shapes = dict(zip(node.inputs, node.input_shapes))
    for op in new_ops:
        if isinstance(op, Access):
            shapes.update(op.source_shapes)
    inputs: list[str] = []
    for op in new_ops:
        for s in op.sources:
            if s not in inputs:
                inputs.append(s)
    node.inputs = inputs
    node.input_shapes = [tuple(shapes[s]) for s in inputs]
    node.attrs = {k: v for k, v in node.attrs.items() if k not in ("movement", "views")}
    node.attrs["loads"] = _loads_attr(new_ops)


def _pairs(node: Node) -> int:
    """Load/store pairs of a layout node: the operators of its movement (1 if unknown)."""
    expr = node.attrs.get("movement")
    if expr is None or "loads" in node.attrs:
        return 1
    return max(1, len(mv.steps(expr, node.input_shapes)))


def _step_bytes(node: Node) -> int:
    expr = node.attrs.get("movement")
    if expr is None:
        return 0
    return int(sum(n for _, n in mv.steps(expr, node.input_shapes)))


def _count_views(workload: Workload, report: DMEReport) -> None:
    """Pairs and bytes of the folded views; a view read by several nodes counts once."""
    seen: set[str] = set()
    for node in workload.nodes:
        for expr in node.attrs.get("views", []):
            mv.check(expr, len(node.inputs), f"node {node.name!r} ({node.op_type})")
            key = json.dumps(mv.substitute(expr, lambda e, n=node: {"ref": n.inputs[e["input"]]}))
            if key in seen:
                continue
            seen.add(key)
            steps = mv.steps(expr, node.input_shapes)
            why = mv.opaque_reason(expr)
            if why is not None:
                report.opaque_views.append({"node": node.name, "reason": why, "pairs": len(steps)})
                continue
            report.view_pairs += len(steps)
            report.view_bytes += int(sum(n for _, n in steps)) * workload.dtype_bytes


# ------------------------------------------------------------------ verification
def verify(
    original: Workload, rewritten: Workload, seed: int = 0, max_elements: int = 1 << 24
) -> dict:
    """Execute the original and the rewritten loads with NumPy and compare them.

    Every tensor that is not a layout node's output (graph inputs, compute nodes'
    outputs) gets random values (float32, from ``seed``); the original layout nodes are
    run with NumPy's own operators (:func:`workloads.movement.evaluate`). For every
    node the transform rewrote, each of its original operands (inputs, then views; the
    movement of a layout node) must equal the rewritten load, executed by
    :func:`workloads.access.gather` on the same tensors.

    Returns:
        ``{"nodes": rewritten nodes checked, "operands": ..., "elements": ...,
        "mismatches": [node names]}``.

    Raises:
        WorkloadError: a tensor has more than ``max_elements`` elements.
    """
    rng = np.random.default_rng(seed)
    values: dict[str, np.ndarray] = {}

    def random(name: str, shape) -> np.ndarray:
        if int(np.prod(shape)) > max_elements:
            raise WorkloadError(f"verify: tensor {name!r} {tuple(shape)} exceeds {max_elements}")
        return rng.standard_normal(shape).astype(np.float32)

    for t in original.graph_inputs:
        values[t.name] = random(t.name, t.shape)
    for node in original.nodes:
        expr = node.attrs.get("movement")
        if node.op_type == LAYOUT and expr is not None and mv.opaque_reason(expr) is None:
            values[node.name] = mv.evaluate(expr, [values[s] for s in node.inputs])
        else:
            values[node.name] = random(node.name, node.output_shape)
    before = {n.name: n for n in original.nodes}
    result = {"nodes": 0, "operands": 0, "elements": 0, "mismatches": []}
    for node in rewritten.nodes:
        if "loads" not in node.attrs:
            continue
        result["nodes"] += 1
        want = _reference_operands(before[node.name], values)
        got = operands(node)
        if len(want) != len(got):
            result["mismatches"].append(node.name)
            continue
        for w, g in zip(want, got):
            if w is None or isinstance(g, Opaque):
                continue
            arr = acc.gather(g, {s: values[s] for s in g.sources})
            result["operands"] += 1
            result["elements"] += int(arr.size)
            if arr.shape != w.shape or not np.array_equal(arr, w):
                result["mismatches"].append(node.name)
                break
    return result


def _reference_operands(node: Node, values: dict[str, np.ndarray]) -> list[np.ndarray | None]:
    """The original operands of ``node`` executed with NumPy (None where opaque)."""
    arrays = [values[s] for s in node.inputs]

    def run(expr: dict) -> np.ndarray | None:
        return None if mv.opaque_reason(expr) is not None else mv.evaluate(expr, arrays)

    if node.op_type == LAYOUT:
        expr = node.attrs.get("movement")
        return [None if expr is None else run(expr)]
    return arrays + [run(e) for e in node.attrs.get("views", [])]
