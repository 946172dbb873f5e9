"""What a data-movement ATen op does, as a :mod:`workloads.movement` step.

:func:`movement_spec` reads an FX node of a view (``alias`` kind) or layout op and
returns its step: ``{"op": ..., <parameters>, "args": [{"ref": name}, ...]}`` whose
leaves name the raw-graph values it reads (``names`` maps FX node names to them).
Shapes come from the nodes' ``meta["val"]``. :func:`workloads.fusion.fuse` chains the
steps of folded views and layouts into the expressions stored on nodes.

An op outside the table gets ``{"opaque": <op>, "args": [...]}``; a view that moves
nothing (dropout, clone, contiguous, a dtype conversion) gets ``{"op": "identity"}``,
which fusion drops.
"""

from __future__ import annotations

import math

from torch import fx

from workloads.torch_ops import arg, rule_key, shape_of

_RESHAPES = {
    "aten.view",
    "aten._unsafe_view",
    "aten.reshape",
    "aten.flatten",
    "aten.unflatten",
    "aten.squeeze",
    "aten.unsqueeze",
    "aten.view_as",
}
_IDENTITY = {
    "aten.clone",
    "aten.contiguous",
    "aten.alias",
    "aten.detach",
    "aten.dropout",
    "aten._to_copy",
    "aten.to",
    "aten.type_as",
    "aten.lift_fresh_copy",
}
_SPLITS = {"aten.split", "aten.split_with_sizes", "aten.chunk", "aten.unbind"}


def movement_spec(node: fx.Node, names: dict[str, str]) -> dict:
    """The step of one FX call of a view or layout op (see the module docstring)."""
    key = rule_key(node.target)
    x = node.args[0] if node.args else None
    if key == "getitem":
        return _getitem(node, names)
    if key in _IDENTITY:
        return {"op": "identity", "args": [_leaf(x, names)]}
    if key in _SPLITS:
        return {"op": "identity", "args": [_leaf(x, names)]}  # read through getitem
    out = list(shape_of(node))
    ndim = len(shape_of(x)) if isinstance(x, fx.Node) else 0
    if key in _RESHAPES:
        spec = {"op": "reshape", "shape": out}
    elif key in ("aten.expand", "aten.expand_as"):
        spec = {"op": "expand", "shape": out}
    elif key == "aten.permute":
        spec = {"op": "permute", "perm": [int(d) % max(ndim, 1) for d in node.args[1]]}
    elif key in ("aten.transpose", "aten.t"):
        d0, d1 = (node.args[1], node.args[2]) if key == "aten.transpose" else (0, -1)
        perm = list(range(ndim))
        if ndim:
            perm[d0 % ndim], perm[d1 % ndim] = perm[d1 % ndim], perm[d0 % ndim]
        spec = {"op": "permute", "perm": perm}
    elif key == "aten.slice":
        spec = _slice(node, ndim)
    elif key == "aten.narrow":
        dim, start, length = (int(a) for a in node.args[1:4])
        start = start % shape_of(x)[dim] if start < 0 else start
        spec = {"op": "slice", "dim": dim % ndim, "start": start, "stop": start + length, "step": 1}
    elif key == "aten.select":
        spec = {"op": "select", "dim": int(node.args[1]) % ndim, "index": int(node.args[2])}
    elif key in ("aten.pad", "aten.constant_pad_nd"):
        spec = _pad(node, key)
    elif key in ("aten.cat", "aten.stack"):
        tensors = node.args[0]
        dim = int(arg(node, 1, "dim", 0))
        nd = len(shape_of(tensors[0])) + (key == "aten.stack")
        spec = {"op": key.split(".")[1], "dim": dim % nd}
        return {**spec, "args": [_leaf(t, names) for t in tensors]}
    elif key == "aten.repeat":
        spec = {"op": "repeat", "repeats": [int(r) for r in node.args[1]]}
    elif key == "aten.flip":
        spec = {"op": "flip", "dims": [int(d) % ndim for d in node.args[1]]}
    elif key == "aten.roll" and arg(node, 2, "dims", []):
        shifts, dims = node.args[1], arg(node, 2, "dims")
        shifts = [shifts] if isinstance(shifts, int) else list(shifts)
        dims = [dims] if isinstance(dims, int) else list(dims)
        spec = {
            "op": "roll",
            "shifts": [int(s) for s in shifts],
            "dims": [int(d) % ndim for d in dims],
        }
    else:
        spec = {"opaque": f"no access function for {node.target}"}
    return {**spec, "args": [_leaf(x, names)]}


def _leaf(value, names: dict[str, str]) -> dict:
    """A value leaf, or an opaque one for a constant / parameter operand."""
    if isinstance(value, fx.Node) and value.name in names:
        return {"ref": names[value.name]}
    return {"opaque": f"operand {value} is a constant or a parameter", "args": []}


def _slice(node: fx.Node, ndim: int) -> dict:
    size = shape_of(node.args[0])
    dim = int(arg(node, 1, "dim", 0)) % ndim
    start, stop = arg(node, 2, "start", None), arg(node, 3, "end", None)
    step = int(arg(node, 4, "step", 1) or 1)
    start, stop, step = slice(start, stop, step).indices(size[dim])
    return {"op": "slice", "dim": dim, "start": start, "stop": max(stop, start), "step": step}


def _pad(node: fx.Node, key: str) -> dict:
    pads = [int(p) for p in node.args[1]]
    if key == "aten.pad":
        mode = arg(node, 2, "mode", "constant")
        if mode != "constant":
            return {"opaque": f"{node.target} in {mode} mode is not a constant pad"}
        value = arg(node, 3, "value", None)
    else:
        value = arg(node, 2, "value", 0)
    return {"op": "pad", "pads": pads, "value": float(value or 0.0)}


def _getitem(node: fx.Node, names: dict[str, str]) -> dict:
    """``split(x)[i]`` / ``chunk(x)[i]`` / ``unbind(x)[i]`` as a slice (select) of ``x``;
    item 0 of any other tuple is that op's value itself."""
    source, index = node.args[0], int(node.args[1])
    key = rule_key(source.target) if isinstance(source, fx.Node) else ""
    if key not in _SPLITS:
        if index == 0:
            return {"op": "identity", "args": [_leaf(source, names)]}
        return {"opaque": f"item {index} of {getattr(source, 'target', source)}", "args": []}
    x = source.args[0]
    size = shape_of(x)
    if key == "aten.unbind":
        dim = int(arg(source, 1, "dim", 0)) % len(size)
        return {"op": "select", "dim": dim, "index": index, "args": [_leaf(x, names)]}
    dim = int(arg(source, 2, "dim", 0)) % len(size)
    if key == "aten.split_with_sizes":
        sizes = [int(s) for s in source.args[1]]
    else:
        step = int(source.args[1])
        if key == "aten.chunk":
            step = math.ceil(size[dim] / step)
        sizes = [min(step, size[dim] - s) for s in range(0, size[dim], step)]
    start = sum(sizes[:index])
    spec = {"op": "slice", "dim": dim, "start": start, "stop": start + sizes[index], "step": 1}
    return {**spec, "args": [_leaf(x, names)]}
