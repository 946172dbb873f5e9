"""Checkpoints of nested state without pickle: tensors in safetensors, the rest in JSON.

A state is any nest of dicts, lists and tuples whose leaves are torch tensors, numpy
arrays, or JSON scalars (str, int, float, bool, None). :func:`save_state` splits it into
a ``.safetensors`` file (every array leaf, under its path ``"a/b/0/c"``) and a ``.json``
skeleton that records the structure and, for each array leaf, whether it was numpy or
torch. :func:`load_state` rebuilds the same nest. Loading never unpickles anything.

Writes are atomic: both files go to a temporary directory that is renamed into place,
so a run killed at any moment leaves either the previous checkpoint or the new one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

_ARRAY = "__array__"
_TUPLE = "__tuple__"
_FLOAT = "__float__"


def _split(obj: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        tensors[path] = obj.detach().cpu().contiguous()
        return {_ARRAY: "torch", "key": path}
    if isinstance(obj, np.ndarray):
        tensors[path] = torch.from_numpy(np.ascontiguousarray(obj))
        return {_ARRAY: "numpy", "key": path}
    if isinstance(obj, dict):
        for k in obj:
            if not isinstance(k, str | int):
                raise TypeError(f"checkpoint key {k!r} at {path or '/'} is not a str or int")
        return {
            "__dict__": [[k, _split(v, f"{path}/{k}", tensors)] for k, v in obj.items()],
        }
    if isinstance(obj, list | tuple):
        items = [_split(v, f"{path}/{i}", tensors) for i, v in enumerate(obj)]
        return {_TUPLE: items} if isinstance(obj, tuple) else items
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return {_FLOAT: repr(obj)}
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    raise TypeError(f"cannot checkpoint {type(obj).__name__} at {path or '/'}")


def _join(node: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(node, list):
        return [_join(v, tensors) for v in node]
    if isinstance(node, dict):
        if _ARRAY in node:
            t = tensors[node["key"]]
            return t.numpy() if node[_ARRAY] == "numpy" else t
        if _TUPLE in node:
            return tuple(_join(v, tensors) for v in node[_TUPLE])
        if _FLOAT in node:
            return float(node[_FLOAT])
        return {k: _join(v, tensors) for k, v in node["__dict__"]}
    return node


def save_state(state: Any, directory: str | Path) -> Path:
    """Atomically write ``state`` to ``directory`` (``state.safetensors`` + ``state.json``)."""
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _split(state, "", tensors)
    save_file(tensors, str(tmp / "state.safetensors"))
    (tmp / "state.json").write_text(json.dumps(skeleton), encoding="utf-8")
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    old = directory.with_name(directory.name + ".old")
    if directory.exists():
        directory.rename(old)
    tmp.rename(directory)
    if old.exists():
        shutil.rmtree(old)
    return directory


def load_state(directory: str | Path) -> Any:
    """Read a state written by :func:`save_state`."""
    directory = Path(directory)
    if not (directory / "state.json").exists():
        raise FileNotFoundError(f"no checkpoint in {directory} (state.json missing)")
    skeleton = json.loads((directory / "state.json").read_text(encoding="utf-8"))
    tensors = load_file(str(directory / "state.safetensors"))
    return _join(skeleton, tensors)
