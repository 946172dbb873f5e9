"""Fusion: group the source ops of an importer into the mappable layers of a workload.

Importers translate their source format into :class:`~workloads.rawgraph.RawOp`
records; :func:`fuse` turns that list into a :class:`~workloads.ir.Workload`. The
rules (also in ``docs/workloads.md``, where they are part of the specification):

1. **Constants fold.** A ``const`` op, or any op none of whose value inputs depends on a
   graph input and that reads no parameter, is evaluated at compile time and vanishes.
2. **Weight-only values fold.** An ``alias`` / ``eltwise`` / ``layout`` op whose value
   inputs are all constant but which reads parameters (a transposed weight, an expanded
   class token, a gathered bias table) makes a *weight value*: no node; whichever op
   reads it reads those parameters.
3. **Aliases vanish.** An ``alias`` op (view, reshape, dropout, slice, getitem, ...)
   with a live input produces no node: its output *is* its first live input. An alias
   that reads a parameter is handled as ``eltwise``.
4. **Anchors start nodes.** An op of an anchor kind starts a node whose ``op_type`` is
   the kind (``matmul`` reading a parameter is ``linear``). A ``layout`` op whose only
   live input is the running output of a ``layout`` node, read by nothing else, joins
   that node instead (consecutive permutes collapse).
5. **Eltwise ops fuse into a producer.** Among the nodes producing the op's live inputs,
   take the one created last, X. The op joins X if it reads X's running output, or if
   every value it reads from X is internal to X and not yet read by another node; its
   output becomes X's running output, and its other live inputs become extra inputs
   of X. Otherwise the op becomes its own ``eltwise`` node.
6. **Parameters are charged once**, to the node holding the first op that reads them
   (tied weights), so ``sum(weight_bytes) == unique parameter elements * dtype_bytes``.
7. A node reading an internal (non-final) value of another node gets the edge from that
   node; such reads are counted in ``meta["fusion"]["internal_reads"]``.

Nodes are emitted in creation order, which is topological: every input of a node comes
from a node created before it (rule 5 only joins the latest producer).

**Granularity.** The rules above are ``granularity="layer"``, the default. With
``granularity="op"`` rules 1 to 3 and 6 hold (constants, weight-only values and aliases
move no data, so they still make no node) but nothing joins an existing node: rule 4's
layout collapse and rule 5 are off, so every remaining compute op is its own node (an
eltwise or layout op is an ``eltwise`` / ``layout`` node). MACs, vector ops and weight
bytes add up to the same totals at both granularities; the op graph has no internal
reads. ``meta["fusion"]["granularity"]`` is recorded for ``"op"`` only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from workloads.errors import WorkloadError
from workloads.ir import Node, TensorInfo, Workload
from workloads.movement_fusion import MovementTracker
from workloads.rawgraph import ANCHOR_KINDS, KINDS, RawOp

#: Kinds whose output is folded into a weight value when only parameters feed them.
_WEIGHT_FOLDABLE = ("alias", "eltwise", "layout")
#: ``"layer"``: fuse source ops into mappable layers; ``"op"``: one node per compute op.
GRANULARITIES = ("layer", "op")


@dataclass
class _Group:
    """A node under construction: its anchor, member ops and running output."""

    anchor: RawOp
    op_type: str
    latest: str
    members: list[str] = field(default_factory=list)
    inputs: dict[str, None] = field(default_factory=dict)  # ordered set of value names
    params: dict[str, int] = field(default_factory=dict)
    macs: int = 0
    vector_ops: int = 0


@dataclass
class _Classified:
    """Result of the first pass: what each op is and which live values it reads."""

    live: list[tuple[RawOp, list[str], dict[str, int]]]  # (op, live inputs, params)
    resolve: dict[str, str]  # alias value -> the value it stands for
    consumers: Counter  # live value -> number of live ops reading it
    folded: Counter  # kind -> ops folded as const / weight value / alias


def fuse(
    raw_ops: Sequence[RawOp],
    graph_inputs: Sequence[TensorInfo],
    name: str,
    dtype_bytes: int = 1,
    meta: dict | None = None,
    granularity: str = "layer",
) -> Workload:
    """Fuse source ops into mappable layers (or, at ``granularity="op"``, one node per op).

    Args:
        raw_ops: the source ops in a topological (execution) order.
        graph_inputs: tensors fed by the host; ops name them in ``inputs``.
        name: workload name.
        dtype_bytes: bytes per element of weights and activations (1: int8).
        meta: provenance to store; ``meta["fusion"]`` is added (folded ops per kind,
            internal reads, unique parameter elements).
        granularity: ``"layer"`` (rules 1 to 7) or ``"op"`` (no op joins another's
            node); see the module docstring.

    Returns:
        The fused :class:`Workload`.

    Raises:
        WorkloadError: an op has an unknown kind, repeats a name, or reads a value
            that no earlier op or graph input produces; the fused graph is empty; or
            ``granularity`` is not one of :data:`GRANULARITIES`.
    """
    check_granularity(granularity)
    shapes = _check_ops(raw_ops, graph_inputs, name)
    tracker = MovementTracker(raw_ops)
    classified = _classify(raw_ops, tracker)
    groups, owner, folded = _group(classified, fuse_ops=granularity == "layer", tracker=tracker)
    nodes, internal_reads = _emit(groups, owner, shapes, dtype_bytes, tracker)
    meta = dict(meta or {})
    charged = [g.params for g in groups]
    meta["fusion"] = {
        "source_ops": len(raw_ops),
        "nodes": len(nodes),
        "folded": dict(sorted((classified.folded + folded).items())),
        "internal_reads": internal_reads,
        "parameter_elements": int(sum(sum(p.values()) for p in charged)),
    }
    if granularity != "layer":  # absent at the default: layer workloads stay as they were
        meta["fusion"]["granularity"] = granularity
    return Workload(name, nodes, graph_inputs, dtype_bytes=dtype_bytes, meta=meta)


def check_granularity(granularity: str) -> None:
    """Raise :class:`WorkloadError` unless ``granularity`` is one of :data:`GRANULARITIES`."""
    if granularity not in GRANULARITIES:
        raise WorkloadError(
            f"unknown granularity {granularity!r}; expected one of {', '.join(GRANULARITIES)}"
        )


def _check_ops(
    raw_ops: Sequence[RawOp], graph_inputs: Sequence[TensorInfo], name: str
) -> dict[str, tuple[int, ...]]:
    """Validate kinds, names and references; return value name -> shape."""
    shapes: dict[str, tuple[int, ...]] = {t.name: tuple(t.shape) for t in graph_inputs}
    for op in raw_ops:
        where = f"workload {name!r}: op {op.name!r} ({op.source_op})"
        if op.kind not in KINDS:
            raise WorkloadError(f"{where} has unknown kind {op.kind!r}; expected one of {KINDS}")
        if op.name in shapes:
            raise WorkloadError(f"{where}: duplicate value name {op.name!r}")
        for src in op.inputs:
            if src not in shapes:
                raise WorkloadError(
                    f"{where} reads {src!r}, which no earlier op or graph input produces"
                )
        shapes[op.name] = tuple(int(d) for d in op.output_shape)
    return shapes


def _classify(raw_ops: Sequence[RawOp], tracker: MovementTracker | None = None) -> _Classified:
    """First pass: fold constants, weight values and aliases; count live consumers.

    ``tracker`` records the data-movement steps of the folded views.
    """
    tracker = tracker or MovementTracker(())
    resolve: dict[str, str] = {}
    const: set[str] = set()
    weight_values: dict[str, dict[str, int]] = {}
    live: list[tuple[RawOp, list[str], dict[str, int]]] = []
    folded: Counter = Counter()
    for op in raw_ops:
        params = dict(op.params)
        live_in: list[str] = []
        for src in op.inputs:
            src = resolve.get(src, src)
            if src in const:
                continue
            if src in weight_values:
                params.update(weight_values[src])
            elif src not in live_in:
                live_in.append(src)
        if op.kind == "const" or (not live_in and not params):
            const.add(op.name)
            folded["const"] += 1
            tracker.fold(op, "const")
        elif not live_in and op.kind in _WEIGHT_FOLDABLE:
            weight_values[op.name] = params
            folded["weight_only"] += 1
            tracker.fold(op, "weight_only")
        elif op.kind == "alias" and not params:
            resolve[op.name] = live_in[0]
            folded["alias"] += 1
            tracker.fold(op, "alias")
        else:
            live.append((op, live_in, params))
    consumers: Counter = Counter(v for _, live_in, _ in live for v in live_in)
    return _Classified(live, resolve, consumers, folded)


def _group(
    classified: _Classified, fuse_ops: bool = True, tracker: MovementTracker | None = None
) -> tuple[list[_Group], dict[str, int], Counter]:
    """Second pass: assign every live op to a node; return groups, owner map, folds.

    With ``fuse_ops`` False (op granularity) every live op starts its own node;
    ``tracker`` composes the data-movement steps of layout nodes.
    """
    tracker = tracker or MovementTracker(())
    groups: list[_Group] = []
    owner: dict[str, int] = {}  # live value -> index of the group computing it
    read_outside: set[str] = set()  # values read by a group other than their owner
    charged: set[str] = set()
    folded: Counter = Counter()
    for op, live_in, params in classified.live:
        target = (
            _target_group(op, live_in, groups, owner, read_outside, classified.consumers)
            if fuse_ops
            else None
        )
        if target is None:
            op_type = op.kind if op.kind in ANCHOR_KINDS else "eltwise"
            if op_type == "matmul" and params:
                op_type = "linear"
            groups.append(_Group(anchor=op, op_type=op_type, latest=op.name))
            target = len(groups) - 1
            tracker.start(target, op, lambda v: owner.get(v) == len(groups) - 1)
        else:
            folded[op.kind] += 1
            tracker.join(target, op, groups[target].latest, lambda v, t=target: owner.get(v) == t)
        group = groups[target]
        for src in live_in:
            if owner.get(src) != target:
                group.inputs[src] = None
                if src in owner:
                    read_outside.add(src)
        for p, numel in params.items():
            if p not in charged:
                charged.add(p)
                group.params[p] = int(numel)
        group.members.append(op.name)
        group.latest = op.name
        group.macs += int(op.macs)
        group.vector_ops += int(op.vector_ops)
        owner[op.name] = target
    return groups, owner, folded


def _target_group(
    op: RawOp,
    live_in: list[str],
    groups: list[_Group],
    owner: dict[str, int],
    read_outside: set[str],
    consumers: Counter,
) -> int | None:
    """Index of the existing group ``op`` joins (rules 4 and 5), or None for a new node."""
    producers = [owner[v] for v in live_in if v in owner]
    if not producers:
        return None
    last = max(producers)
    group = groups[last]
    if op.kind == "layout":
        joins = (
            group.op_type == "layout"
            and live_in == [group.latest]
            and consumers[group.latest] == 1
            and group.latest not in read_outside
        )
        return last if joins else None
    if op.kind not in ("eltwise", "alias"):
        return None
    reads = [v for v in live_in if owner.get(v) == last]
    if group.latest in reads or not any(v in read_outside for v in reads):
        return last
    return None


def _emit(
    groups: list[_Group],
    owner: dict[str, int],
    shapes: dict[str, tuple[int, ...]],
    dtype_bytes: int,
    tracker: MovementTracker | None = None,
) -> tuple[list[Node], int]:
    """Build IR nodes from groups; return them and the number of internal reads."""
    tracker = tracker or MovementTracker(())

    def source(value: str) -> tuple[str, bool]:
        if value not in owner:
            return value, True
        producer = groups[owner[value]]
        return producer.anchor.name, value == producer.latest

    nodes: list[Node] = []
    internal_reads = 0
    for index, group in enumerate(groups):
        inputs: list[str] = []
        input_shapes: list[tuple[int, ...]] = []
        for src in group.inputs:
            if src in owner:
                producer = groups[owner[src]]
                internal_reads += src != producer.latest
                src_name = producer.anchor.name
            else:
                src_name = src
            if src_name not in inputs:
                inputs.append(src_name)
                input_shapes.append(shapes[src])
        nodes.append(
            Node(
                name=group.anchor.name,
                op_type=group.op_type,
                inputs=inputs,
                input_shapes=input_shapes,
                output_shape=shapes[group.latest],
                weight_bytes=int(sum(group.params.values())) * dtype_bytes,
                macs=group.macs,
                vector_ops=group.vector_ops,
                attrs={
                    **{k: v for k, v in group.anchor.attrs.items() if k != "movement"},
                    **tracker.node_attrs(index, source, inputs),
                },
                fused=list(group.members),
            )
        )
    return nodes, internal_reads
