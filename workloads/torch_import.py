"""Import a ``torch.nn.Module`` as a :class:`~workloads.ir.Workload`.

The module is exported with ``torch.export.export(module, args, strict=False)`` and
``run_decompositions({})`` (core ATen ops, static shapes from the example inputs), in
eval mode. Each FX node is translated into a :class:`~workloads.rawgraph.RawOp` by
the rule :mod:`workloads.torch_ops` has for its ATen op; an op without a rule
raises :class:`~workloads.errors.UnsupportedOperatorError` naming the op and the
node. :func:`workloads.fusion.fuse` then groups the ops into layers.

What the translation reads:

* Parameters (``PARAMETER`` inputs of the exported program) are the weights, counted by
  element and keyed by their module path, so a tied weight is one parameter.
* Buffers (batch-norm statistics, ``position_ids``) and lifted constants are compile-time
  constants: they are neither weights nor value inputs.
* User tensor inputs are the graph inputs, integer ids included (``input_ids`` is a host
  tensor the embedding reads), named after ``forward``'s arguments.
* Cached keys and values of a decode step (a ``DynamicCache`` passed in ``example_kwargs``,
  :mod:`workloads.torch_inputs`) are state the map places like weights: each is a
  parameter of the op that reads it (``past_key_values.layers.3.keys``, counted in that
  node's ``weight_bytes``), and its size follows the cache's length.
* Outputs that are not tensors (the updated cache) are dropped with a log line.

Element size: every weight and activation counts ``dtype_bytes`` bytes per element,
1 (int8 inference, as in the EGRL paper) unless given, whatever the module's own dtype.
Node names are ``<module path>/<FX node name>`` (``encoder.layer.0.attention.self.query/
linear``), or the FX name for ops outside any submodule.
"""

from __future__ import annotations

import logging

import torch
from torch import fx
from torch.export.graph_signature import InputKind
from torch.utils import _pytree as pytree

from workloads.errors import UnsupportedOperatorError, WorkloadError
from workloads.fusion import check_granularity, fuse
from workloads.ir import TensorInfo, Workload
from workloads.rawgraph import RawOp
from workloads.torch_inputs import FlatInput, check_cache, exportable, flat_inputs
from workloads.torch_movement import movement_spec
from workloads.torch_ops import SKIP, lookup, numel, op_name, rule_key, shape_of

log = logging.getLogger(__name__)

_FLAT_ROW_OPS = ("aten.addmm", "aten.mm")
_RESHAPES = ("aten.view", "aten._unsafe_view", "aten.reshape")


def from_torch(
    module: torch.nn.Module,
    example_inputs,
    name: str | None = None,
    dtype_bytes: int = 1,
    granularity: str = "layer",
    example_kwargs: dict | None = None,
) -> Workload:
    """Export ``module`` on ``example_inputs`` and fuse it into a workload.

    Args:
        module: the model; exported in eval mode (its training flag is restored).
        example_inputs: one tensor or a tuple of positional inputs; their shapes fix
            every shape of the workload (batch included).
        name: workload name; the module's class name if None.
        dtype_bytes: bytes per element of weights and activations (1: int8).
        granularity: ``"layer"`` (fused layers) or ``"op"`` (one node per compute op),
            see :mod:`workloads.fusion`.
        example_kwargs: keyword inputs (a decode step's ``past_key_values``: its keys and
            values become parameters of the ops that read them).

    Raises:
        UnsupportedOperatorError: an ATen op without a rule in
            :data:`workloads.torch_ops.TORCH_RULES`.
        WorkloadError: ``torch.export`` failed, the inputs do not fit ``forward``, a
            cache does not match the model's config, the fused graph is malformed, or
            ``granularity`` is unknown.
    """
    check_granularity(granularity)
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    name = name or type(module).__name__
    labels, tensors = flat_inputs(module, args, dict(example_kwargs or {}))
    check_cache(module, labels, tensors)
    program = export(exportable(module, args, dict(example_kwargs or {})), tuple(tensors), name)
    raw_ops, graph_inputs, parameters = translate(program, dtype_bytes, name, labels)
    cached = {label.name for label in labels if label.cache}
    meta = {
        "source": "torch.export",
        "module": f"{type(module).__module__}.{type(module).__qualname__}",
        "parameters": int(sum(n for p, n in parameters.items() if p not in cached)),
        "module_parameters": int(sum(p.numel() for p in module.parameters())),
        "input_shapes": {t.name: list(t.shape) for t in graph_inputs},
    }
    if cached:
        meta["cache_elements"] = int(sum(n for p, n in parameters.items() if p in cached))
        meta["cache_shapes"] = {
            label.name: list(t.shape) for label, t in zip(labels, tensors) if label.cache
        }
    return fuse(
        raw_ops, graph_inputs, name, dtype_bytes=dtype_bytes, meta=meta, granularity=granularity
    )


def export(module: torch.nn.Module, args: tuple, name: str) -> torch.export.ExportedProgram:
    """``torch.export`` ``module`` in eval mode on ``args``, decomposed to core ATen ops."""
    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            program = torch.export.export(module, args, strict=False)
            return program.run_decompositions({})
    except Exception as exc:  # torch.export raises many exception types
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        first = lines[0] if lines else type(exc).__name__
        more = f" ({len(lines) - 1} more lines in the exception's cause)" if len(lines) > 1 else ""
        raise WorkloadError(f"torch.export of {name!r} failed: {first}{more}") from exc
    finally:
        module.train(training)


def translate(
    program: torch.export.ExportedProgram,
    dtype_bytes: int,
    source: str = "",
    labels: list[FlatInput] | None = None,
) -> tuple[list[RawOp], list[TensorInfo], dict[str, int]]:
    """Translate an exported program into raw ops.

    ``labels`` name the program's user inputs in order (:func:`workloads.torch_inputs.
    flat_inputs`); a cached one is a parameter under its name. Without them, inputs keep
    the program's placeholder names.

    Returns:
        ``(raw_ops, graph_inputs, parameters)``: the ops in graph order, the user tensor
        inputs (``nbytes`` at ``dtype_bytes`` per element) and ``{parameter path:
        elements}`` of every parameter (and cached tensor) some op reads.
    """
    params: dict[str, str] = {}
    user: dict[str, str] = {}  # placeholder -> graph input name
    users = [s for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    for spec in program.graph_signature.input_specs:
        if spec.kind == InputKind.PARAMETER:
            params[spec.arg.name] = spec.target
    for i, spec in enumerate(users):
        label = labels[i] if labels is not None and len(labels) == len(users) else None
        if label is not None and label.cache:
            params[spec.arg.name] = label.name
        else:
            user[spec.arg.name] = label.name if label is not None else spec.arg.name
    raw_ops: list[RawOp] = []
    graph_inputs: list[TensorInfo] = []
    names: dict[str, str] = {}  # FX node name -> value name in the raw graph
    read: dict[str, int] = {}
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in user:
            shape = shape_of(node)
            if isinstance(node.meta.get("val"), torch.Tensor):
                graph_inputs.append(TensorInfo(user[node.name], shape, numel(shape) * dtype_bytes))
                names[node.name] = user[node.name]
        elif node.op == "call_function":
            raw = _translate_node(node, params, names, source)
            if raw is not None:
                raw_ops.append(raw)
                names[node.name] = raw.name
                read.update(raw.params)
        elif node.op not in ("placeholder", "get_attr", "output"):
            raise UnsupportedOperatorError(f"{node.op} {node.target}", node.name, source)
    return raw_ops, graph_inputs, read


def _translate_node(
    node: fx.Node, params: dict[str, str], names: dict[str, str], source: str
) -> RawOp | None:
    """One FX call into a RawOp (None for skipped assertions)."""
    rule = lookup(node.target)
    if rule is None:
        raise UnsupportedOperatorError(op_name(node.target), node.name, source)
    if rule.kind == SKIP.kind:
        return None
    inputs, op_params = _operands(node, params, names)
    cost = rule.cost(node) if rule.cost is not None else None
    attrs = dict(cost.attrs) if cost else {}
    if rule.kind in ("alias", "layout"):  # its step, for data-movement elimination
        attrs["movement"] = movement_spec(node, names)
    return RawOp(
        name=_value_name(node),
        kind=rule.kind,
        source_op=op_name(node.target),
        inputs=inputs,
        output_shape=_output_shape(node),
        params=op_params,
        macs=cost.macs if cost else 0,
        vector_ops=cost.vector_ops if cost else 0,
        attrs=attrs,
    )


def _output_shape(node: fx.Node) -> tuple[int, ...]:
    """Shape of ``node``'s value; a matrix product on flattened rows (``addmm`` / ``mm``)
    whose only user reshapes it back takes that shape (``[B*S, N]`` -> ``[B, S, N]``)."""
    shape = shape_of(node)
    users = list(node.users)
    if rule_key(node.target) in _FLAT_ROW_OPS and len(users) == 1:
        user = users[0]
        if rule_key(user.target) in _RESHAPES and numel(shape_of(user)) == numel(shape):
            return shape_of(user)
    return shape


def _operands(
    node: fx.Node, params: dict[str, str], names: dict[str, str]
) -> tuple[list[str], dict[str, int]]:
    """Value inputs (in argument order) and ``{parameter path: elements}`` of an FX call."""
    inputs: list[str] = []
    op_params: dict[str, int] = {}
    leaves = pytree.tree_leaves((node.args, node.kwargs))
    for leaf in leaves:
        if not isinstance(leaf, fx.Node):
            continue
        if leaf.name in params:
            op_params[params[leaf.name]] = numel(shape_of(leaf))
        elif leaf.name in names and names[leaf.name] not in inputs:
            inputs.append(names[leaf.name])
    return inputs, op_params


def _value_name(node: fx.Node) -> str:
    """``<module path>/<FX name>`` of the innermost module running ``node``."""
    stack = node.meta.get("nn_module_stack") or {}
    path = next(reversed(stack.values()), ("", None))[0] if stack else ""
    return f"{path}/{node.name}" if path else node.name
