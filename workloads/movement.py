"""Data-movement expressions: what a layout node (or a folded view) does to its inputs.

The importer records, on a ``layout`` node, ``attrs["movement"]``: an expression tree
whose leaves are the node's inputs and whose inner nodes are data-movement operators;
on any other node that reads an input through folded views (reshape, slice, pad, ...),
``attrs["views"]``: one expression per such read. The format is plain JSON:

* a leaf ``{"input": k}``: the node's ``k``-th input (``node.inputs[k]``);
* an operator ``{"op": name, <parameters>, "args": [expression, ...]}`` with ``name``
  in :data:`OPS` (parameters below, as in PyTorch);
* ``{"opaque": why, "args": [...]}``: a step without an access function (an operator
  this module does not know, a constant operand, an elementwise op fused into the
  layout); such an expression cannot be rewritten.

=========== ======================================= ================================
op          parameters                              meaning
=========== ======================================= ================================
reshape     ``shape``                               row-major view (``-1`` inferred)
permute     ``perm``                                output dim ``j`` = input ``perm[j]``
expand      ``shape``                               broadcast size-1 dims
repeat      ``repeats``                             ``torch.Tensor.repeat`` (tile)
slice       ``dim``, ``start``, ``stop``, ``step``  strided slice
select      ``dim``, ``index``                      drop one dim at one index
flip        ``dims``                                reverse
roll        ``shifts``, ``dims``                    cyclic shift
pad         ``pads``, ``value``                     ``F.pad`` order, constant mode
cat         ``dim``                                 concatenate the args
stack       ``dim``                                 stack the args on a new dim
=========== ======================================= ================================

:func:`to_access` turns an expression into an :class:`~workloads.access.Access` (the
isl map of its load); :func:`evaluate` executes it with plain NumPy operators, the
independent reference the access maps are checked against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from workloads import access as acc
from workloads.access import Access, AccessError

Expr = dict

#: operator -> (access pattern, NumPy reference); both take the args' values first.
OPS: dict[str, tuple[Callable, Callable]] = {
    "reshape": (
        lambda a, e: acc.reshape(a[0], e["shape"]),
        lambda x, e: x[0].reshape(e["shape"]),
    ),
    "permute": (
        lambda a, e: acc.permute(a[0], e["perm"]),
        lambda x, e: np.transpose(x[0], e["perm"]),
    ),
    "expand": (
        lambda a, e: acc.expand(a[0], e["shape"]),
        lambda x, e: np.broadcast_to(
            x[0],
            [
                x[0].shape[k - len(e["shape"]) + x[0].ndim] if d == -1 else d
                for k, d in enumerate(e["shape"])
            ],
        ),
    ),
    "repeat": (
        lambda a, e: acc.repeat(a[0], e["repeats"]),
        lambda x, e: np.tile(x[0], e["repeats"]),
    ),
    "slice": (
        lambda a, e: acc.slice_(a[0], e["dim"], e.get("start"), e.get("stop"), e.get("step", 1)),
        lambda x, e: x[0][
            (slice(None),) * (e["dim"] % x[0].ndim)
            + (slice(e.get("start"), e.get("stop"), e.get("step", 1)),)
        ],
    ),
    "select": (
        lambda a, e: acc.select(a[0], e["dim"], e["index"]),
        lambda x, e: np.take(x[0], e["index"], axis=e["dim"]),
    ),
    "flip": (lambda a, e: acc.flip(a[0], e["dims"]), lambda x, e: np.flip(x[0], e["dims"])),
    "roll": (
        lambda a, e: acc.roll(a[0], e["shifts"], e["dims"]),
        lambda x, e: np.roll(x[0], e["shifts"], e["dims"]),
    ),
    "pad": (
        lambda a, e: acc.pad(a[0], e["pads"], e.get("value", 0.0)),
        lambda x, e: _np_pad(x[0], e["pads"], e.get("value", 0.0)),
    ),
    "cat": (lambda a, e: acc.cat(a, e["dim"]), lambda x, e: np.concatenate(x, axis=e["dim"])),
    "stack": (lambda a, e: acc.stack(a, e["dim"]), lambda x, e: np.stack(x, axis=e["dim"])),
}


class OpaqueError(AccessError):
    """An expression holds a step without an access function."""


def is_leaf(expr: Expr) -> bool:
    return "input" in expr


def check(expr: Expr, n_inputs: int, where: str) -> None:
    """Raise :class:`AccessError` naming ``where`` unless ``expr`` is well formed over
    ``n_inputs`` inputs (opaque steps are well formed)."""
    if not isinstance(expr, dict):
        raise AccessError(f"{where}: a movement expression must be a dict, got {expr!r}")
    if is_leaf(expr):
        k = expr["input"]
        if not isinstance(k, int) or not 0 <= k < n_inputs:
            raise AccessError(f"{where}: leaf {expr} names no input (the node has {n_inputs})")
        return
    if "opaque" not in expr and expr.get("op") not in OPS:
        raise AccessError(f"{where}: unknown movement op {expr.get('op')!r}; known: {sorted(OPS)}")
    args = expr.get("args", [])
    if not isinstance(args, list) or (not args and "opaque" not in expr):
        raise AccessError(f"{where}: {expr.get('op', 'opaque')} step has no args")
    for a in args:
        check(a, n_inputs, where)


def opaque_reason(expr: Expr) -> str | None:
    """Why ``expr`` has no access function (the first opaque step), or None."""
    if is_leaf(expr):
        return None
    if "opaque" in expr:
        return str(expr["opaque"])
    for a in expr["args"]:
        if (why := opaque_reason(a)) is not None:
            return why
    return None


def to_access(expr: Expr, sources: Sequence[tuple[str, tuple[int, ...]]]) -> Access:
    """The load of ``expr`` over ``sources`` (``(name, shape)`` of each input, in order).

    Raises:
        OpaqueError: the expression holds an opaque step.
        AccessError: a step's parameters do not fit its operand.
    """
    if is_leaf(expr):
        name, shape = sources[expr["input"]]
        return acc.identity(name, shape)
    if "opaque" in expr:
        raise OpaqueError(str(expr["opaque"]))
    args = [to_access(a, sources) for a in expr["args"]]
    return OPS[expr["op"]][0](args, expr)


def evaluate(expr: Expr, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Execute ``expr`` on the inputs' ``arrays`` with NumPy's own operators."""
    if is_leaf(expr):
        return np.asarray(arrays[expr["input"]])
    if "opaque" in expr:
        raise OpaqueError(str(expr["opaque"]))
    return np.ascontiguousarray(
        OPS[expr["op"]][1]([evaluate(a, arrays) for a in expr["args"]], expr)
    )


def steps(expr: Expr, shapes: Sequence[tuple[int, ...]]) -> list[tuple[str, int]]:
    """``(op, output elements)`` of every operator of ``expr``, innermost first.

    Each operator is one load/store pair of a compiler that runs it as its own loop nest,
    writing an intermediate tensor of that many elements. Opaque steps are skipped; an
    operator above one whose shape is unknown counts 0 elements.
    """
    out: list[tuple[str, int]] = []

    def walk(e: Expr) -> tuple[int, ...] | None:
        if is_leaf(e):
            return tuple(shapes[e["input"]])
        arg_shapes = [walk(a) for a in e.get("args", [])]
        if "opaque" in e:
            return arg_shapes[0] if len(arg_shapes) == 1 else None
        if any(s is None for s in arg_shapes):  # below an opaque step: size unknown
            out.append((e["op"], 0))
            return None
        shape = _shape(e, arg_shapes)
        out.append((e["op"], math.prod(shape)))
        return shape

    walk(expr)
    return out


def _shape(expr: Expr, arg_shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Output shape of one operator, from a dry run of its access on its args' shapes."""
    args = [acc.identity(f"a{k}", s) for k, s in enumerate(arg_shapes)]
    return OPS[expr["op"]][0](args, expr).shape


def substitute(expr: Expr, leaf: Callable[[Expr], Expr]) -> Expr:
    """``expr`` with every leaf replaced by ``leaf(leaf_expr)``."""
    if is_leaf(expr) or "ref" in expr:
        return leaf(expr)
    return {**expr, "args": [substitute(a, leaf) for a in expr.get("args", [])]}


def _np_pad(x: np.ndarray, pads: Sequence[int], value: float) -> np.ndarray:
    """``F.pad`` (constant mode, negative pads crop) with NumPy."""
    widths = [[0, 0] for _ in range(x.ndim)]
    for j in range(len(pads) // 2):
        widths[x.ndim - 1 - j] = [int(pads[2 * j]), int(pads[2 * j + 1])]
    crop = tuple(slice(-b if b < 0 else None, a if a < 0 else None) for b, a in widths)
    x = x[crop]
    return np.pad(x, [[max(b, 0), max(a, 0)] for b, a in widths], constant_values=value)
