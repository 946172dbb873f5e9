"""Chain the data-movement steps of source ops into the expressions stored on nodes.

:func:`workloads.fusion.fuse` folds views (reshape, slice, pad, getitem of a split, ...)
away and groups layout ops into ``layout`` nodes. An importer that records each view's
and layout's step (``RawOp.attrs["movement"]``, see :mod:`workloads.torch_movement`)
gets, through :class:`MovementTracker`, the composed expressions of
:mod:`workloads.movement` on the nodes: ``attrs["movement"]`` on a layout node (its
folded input views, then its own ops) and ``attrs["views"]`` on a node that reads an
input through folded views. An importer that records no steps (ONNX today) gets none,
and its workloads are exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from workloads.errors import WorkloadError
from workloads.movement import substitute
from workloads.rawgraph import RawOp

Expr = dict


def _opaque(why: str, args: Sequence[Expr] = ()) -> Expr:
    return {"opaque": why, "args": list(args)}


class MovementTracker:
    """Expressions over live values while fusion runs; node attributes when it emits.

    Leaves are ``{"ref": name}`` of live values until :meth:`node_attrs` turns them
    into ``{"input": k}`` of the node's inputs.
    """

    def __init__(self, raw_ops: Sequence[RawOp]) -> None:
        self.enabled = any("movement" in op.attrs for op in raw_ops)
        self.exprs: dict[str, Expr] = {}  # folded view value -> expression over live values
        self.dead: set[str] = set()  # constants and weight values
        self.movement: dict[int, Expr] = {}  # layout group -> its expression
        self.views: dict[int, list[Expr]] = {}  # group -> expressions of its input views

    # ---------------------------------------------------------- the classify pass
    def fold(self, op: RawOp, how: str) -> None:
        """``op`` was folded away as ``"const"``, ``"weight_only"`` or ``"alias"``."""
        if not self.enabled:
            return
        if how != "alias":
            self.dead.add(op.name)
            return
        self.exprs[op.name] = self._resolve(self._spec(op))

    def _spec(self, op: RawOp) -> Expr:
        spec = op.attrs.get("movement")
        if spec is None:
            args = [{"ref": v} for v in op.inputs[:1]]
            return _opaque(f"no access function recorded for {op.source_op}", args)
        return spec

    def _resolve(self, spec: Expr) -> Expr:
        """``spec`` over live values: folded views substituted, identities dropped."""

        def leaf(e: Expr) -> Expr:
            v = e.get("ref")
            if v in self.exprs:
                return self.exprs[v]
            if v in self.dead:
                return _opaque(f"operand {v!r} is a compile-time constant or a weight")
            return e

        expr = substitute(spec, leaf)
        while expr.get("op") == "identity":
            expr = expr["args"][0]
        return expr

    # ------------------------------------------------------------- the group pass
    def start(self, group: int, op: RawOp, owned: Callable[[str], bool]) -> None:
        """``op`` starts node ``group``."""
        if not self.enabled:
            return
        if op.kind == "layout":
            self.movement[group] = self._resolve(self._spec(op))
        self.views[group] = []
        self._add_views(group, op, owned)

    def join(self, group: int, op: RawOp, latest: str, owned: Callable[[str], bool]) -> None:
        """``op`` joins node ``group``, whose running output was ``latest``."""
        if not self.enabled:
            return
        if group in self.movement:
            before = self.movement[group]
            if op.kind == "layout":

                def leaf(e: Expr) -> Expr:
                    return before if e.get("ref") == latest else e

                self.movement[group] = substitute(self._resolve(self._spec(op)), leaf)
            else:
                why = f"{op.source_op} is fused into the layout"
                self.movement[group] = _opaque(why, [before])
        self._add_views(group, op, owned)

    def _add_views(self, group: int, op: RawOp, owned: Callable[[str], bool]) -> None:
        if op.kind == "layout":
            return
        for src in op.inputs:
            expr = self.exprs.get(src)
            if expr is None or "ref" in expr or any(owned(v) for v in _values(expr)):
                continue
            if expr not in self.views[group]:
                self.views[group].append(expr)

    # ------------------------------------------------------------------ emitting
    def node_attrs(
        self, group: int, source: Callable[[str], tuple[str, bool]], inputs: list[str]
    ) -> dict:
        """The attributes node ``group`` gets: ``movement`` and / or ``views``.

        ``source(value)`` gives the node (or graph input) name holding ``value`` and
        whether the value is that node's final output; ``inputs`` are the node's inputs.
        """
        if not self.enabled:
            return {}

        def leaf(e: Expr) -> Expr:
            name, final = source(e["ref"])
            if not final:
                return _opaque(f"reads an internal value of node {name!r}")
            if name not in inputs:
                raise WorkloadError(f"a movement step reads {name!r}, not an input of its node")
            return {"input": inputs.index(name)}

        attrs = {}
        if group in self.movement:
            attrs["movement"] = substitute(self.movement[group], leaf)
        if self.views.get(group):
            attrs["views"] = [substitute(v, leaf) for v in self.views[group]]
        return attrs


def _values(expr: Expr) -> list[str]:
    """Live values an expression reads."""
    if "ref" in expr:
        return [expr["ref"]]
    return [v for a in expr.get("args", []) for v in _values(a)]
