"""A module's inputs and outputs as ``torch.export`` needs them: flat tensors in, tensors out.

Users call a model the way it runs: positional and keyword inputs, some of them structures
(a Hugging Face ``DynamicCache`` of past keys and values, a tuple of tensors), and its
output may hold objects that are not tensors (the cache again). :func:`exportable` gives
``torch.export`` a shallow copy of the module whose ``forward`` takes every input tensor
as one flat positional argument, rebuilds the structures the model expects from them, and
returns only the tensors of the model's output (the rest is dropped with a log line). The
copy shares every submodule and parameter, so module paths and parameter names are the
module's own.

Each flat input is labelled (:class:`FlatInput`): its name (the ``forward`` argument's,
``past_key_values.layers.3.keys`` inside a cache) and whether it is *cached state*: a
tensor of a cache object (anything with ``layers`` that hold ``keys`` and ``values``, as
``transformers.cache_utils.Cache`` does) or under a keyword named like a cache
(:data:`CACHE_KEYWORDS`, a legacy tuple of tensors).
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from workloads.errors import WorkloadError

log = logging.getLogger(__name__)

#: keyword inputs whose tensors are cached state (past keys and values)
CACHE_KEYWORDS = ("past_key_values", "past_key_value", "cache", "cache_params")


@dataclass(frozen=True)
class FlatInput:
    """One tensor input of the flattened call.

    Attributes:
        name: the ``forward`` argument's name, with the path inside a structure
            (``x_1``, ``past_key_values.layers.0.values``).
        cache: the tensor is cached state (past keys or values), not an activation.
    """

    name: str
    cache: bool


def _layers(obj: Any) -> list | None:
    """The layers of a cache object (each with ``keys`` and ``values``), else None."""
    layers = getattr(obj, "layers", None)
    if isinstance(layers, (list, tuple)) and all(
        hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers
    ):
        return list(layers)
    return None


def _leaves(obj: Any, name: str, cache: bool) -> Iterator[tuple[FlatInput, torch.Tensor]]:
    """The tensors of ``obj`` in a fixed order, labelled."""
    if isinstance(obj, torch.Tensor):
        yield FlatInput(name, cache), obj
    elif isinstance(obj, (tuple, list)):
        for i, item in enumerate(obj):
            yield from _leaves(item, f"{name}_{i}", cache)
    elif isinstance(obj, dict):
        for key, item in obj.items():
            yield from _leaves(item, f"{name}_{key}", cache)
    elif (layers := _layers(obj)) is not None:
        for i, layer in enumerate(layers):
            for part in ("keys", "values"):
                value = getattr(layer, part)
                if value is not None:
                    yield from _leaves(value, f"{name}.layers.{i}.{part}", True)


def _rebuild(obj: Any, flat: Iterator[torch.Tensor]) -> Any:
    """``obj`` with each tensor replaced by the next of ``flat`` (the order of
    :func:`_leaves`); a cache object is copied with its layers' tensors replaced."""
    if isinstance(obj, torch.Tensor):
        return next(flat)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_rebuild(item, flat) for item in obj)
    if isinstance(obj, dict):
        return {key: _rebuild(item, flat) for key, item in obj.items()}
    if (layers := _layers(obj)) is not None:
        rebuilt = copy.copy(obj)
        rebuilt.layers = []
        for layer in layers:
            layer = copy.copy(layer)
            for part in ("keys", "values"):
                if getattr(layer, part) is not None:
                    setattr(layer, part, next(flat))
            rebuilt.layers.append(layer)
        return rebuilt
    return obj


def flat_inputs(
    module: torch.nn.Module, args: tuple, kwargs: dict
) -> tuple[list[FlatInput], list[torch.Tensor]]:
    """The labels and tensors of a call ``module(*args, **kwargs)``, in one order.

    Raises:
        WorkloadError: the inputs do not fit ``module.forward``'s signature.
    """
    signature = inspect.signature(module.forward)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        message = f"{type(module).__name__}.forward does not take these inputs: {exc}"
        raise WorkloadError(message) from None
    labels: list[FlatInput] = []
    tensors: list[torch.Tensor] = []
    for key, value in bound.arguments.items():
        kind = signature.parameters[key].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            items = list(value.items())
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            items = [(f"{key}_{i}", v) for i, v in enumerate(value)]
        else:
            items = [(key, value)]
        for name, item in items:
            for label, tensor in _leaves(item, name, name in CACHE_KEYWORDS):
                labels.append(label)
                tensors.append(tensor)
    return labels, tensors


def exportable(module: torch.nn.Module, args: tuple, kwargs: dict) -> torch.nn.Module:
    """A shallow copy of ``module`` whose ``forward(*flat)`` takes the tensors of
    :func:`flat_inputs` and returns the tensors of ``module``'s output, a tuple (other
    outputs are dropped, logged once)."""
    cls = type(module)
    template = (args, kwargs)

    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        call_args, call_kwargs = _rebuild(template, iter(flat))
        out = cls.forward(self, *call_args, **call_kwargs)
        leaves = pytree.tree_leaves(out)
        dropped = sorted({type(x).__name__ for x in leaves if not isinstance(x, torch.Tensor)})
        if dropped:
            log.info("%s: outputs that are not tensors dropped: %s", cls.__name__, dropped)
        return tuple(x for x in leaves if isinstance(x, torch.Tensor))

    namespace = {"forward": forward, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    clone = copy.copy(module)
    clone.__class__ = type(cls.__name__, (cls,), namespace)
    return clone


def check_cache(module: torch.nn.Module, labels: list[FlatInput], tensors: list) -> None:
    """Raise :class:`~workloads.errors.WorkloadError` (one line) if the cached keys and
    values do not match a Hugging Face model's config: one pair per layer, the config's
    key-value heads and head size (``[batch, kv_heads, length, head_dim]``)."""
    config = getattr(module, "config", None)
    cached = [(label, t) for label, t in zip(labels, tensors) if label.cache]
    if config is None or not cached:
        return
    get = getattr(config, "get_text_config", None)
    config = get(decoder=True) if get else config
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_key_value_heads", None) or getattr(
        config, "num_attention_heads", None
    )
    head_dim = getattr(config, "head_dim", None)
    if head_dim is None and heads and getattr(config, "hidden_size", None):
        head_dim = config.hidden_size // config.num_attention_heads
    where = f"{type(module).__name__} (config: {layers} layers, {heads} key-value heads"
    where += f" of {head_dim})"
    if layers is not None and len(cached) != 2 * layers:
        raise WorkloadError(
            f"the cache holds {len(cached)} key/value tensors, {where} needs {2 * layers}"
        )
    for label, tensor in cached:
        shape = tuple(tensor.shape)
        if len(shape) != 4 or (heads and shape[1] != heads) or (head_dim and shape[3] != head_dim):
            raise WorkloadError(
                f"cache tensor {label.name} has shape {list(shape)}, {where} needs "
                f"[batch, {heads}, length, {head_dim}]"
            )
