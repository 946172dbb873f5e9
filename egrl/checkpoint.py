"""Checkpoints of nested state without pickle: tensors in safetensors, the rest in JSON.

A state is any nest of dicts, lists and tuples whose leaves are torch tensors, numpy
arrays, or JSON scalars (str, int, float, bool, None). :func:`save_state` splits it into
a ``.safetensors`` file (every array leaf, under its path ``"a/b/0/c"``) and a ``.json``
skeleton that records the structure and, for each array leaf, whether it was numpy or
torch. :func:`load_state` rebuilds the same nest, :func:`load_plain` the nest without its arrays
(from ``state.json`` alone). Loading never unpickles anything.

Integrity: ``state.json`` is one JSON object that starts with a fixed header,
``{"egrl_checkpoint": 2, "state_json_sha256": "<64 hex>", ...}``, and records the size
and sha256 of ``state.safetensors``. The ``state_json_sha256`` digest covers every byte
of ``state.json`` itself, the digest's own 64 characters read as zeros. A truncation or a
changed byte anywhere in either file (even one that leaves valid JSON, or the same
numbers written differently) fails :func:`verify_state` with a :class:`CheckpointError`
naming the file and the problem. Checkpoints written before checksums existed (the bare
skeleton as ``state.json``) still load, with a warning that they cannot be verified.

Writes are atomic: both files go to ``NAME.tmp``, which is renamed into place; a
checkpoint being replaced is first renamed ``NAME.old`` and removed last, so a run killed
at any moment leaves the previous checkpoint or the new one (:func:`list_checkpoints`
counts a leftover ``NAME.old`` and ignores ``NAME.tmp``). :func:`load_latest` resumes from
the newest intact checkpoint of a directory and :func:`prune_checkpoints` removes old
ones without ever removing the one just written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as dump_tensors

log = logging.getLogger(__name__)

_ARRAY = "__array__"
_TUPLE = "__tuple__"
_FLOAT = "__float__"
_DICT = "__dict__"

#: the files of one checkpoint directory
TENSORS_FILE = "state.safetensors"
SKELETON_FILE = "state.json"
#: version of the ``state.json`` layout written by :func:`save_state`
FORMAT = 2
#: every ``state.json`` of this format starts with these bytes, then its 64-hex digest
_HEADER = f'{{"egrl_checkpoint": {FORMAT}, "state_json_sha256": "'.encode()
_DIGEST_LEN = 64
_ZERO_DIGEST = "0" * _DIGEST_LEN
_CHECKPOINT_NAME = re.compile(r"gen_(\d{6})(\.old)?")


class CheckpointError(ValueError):
    """A checkpoint file is missing, truncated or corrupted.

    Attributes:
        path: the damaged file (or the directory, when no checkpoint in it is intact).
        problem: what is wrong with it.
    """

    def __init__(self, path: str | Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem


# ------------------------------------------------------------------------ nest <-> files
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
            _DICT: [[k, _split(v, f"{path}/{k}", tensors)] for k, v in obj.items()],
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


def _join(node: Any, tensors: dict[str, torch.Tensor] | None) -> Any:
    """Rebuild the nest of ``node``; array leaves are None when ``tensors`` is None."""
    if isinstance(node, list):
        return [_join(v, tensors) for v in node]
    if isinstance(node, dict):
        if _ARRAY in node:
            if tensors is None:
                return None
            t = tensors[node["key"]]
            return t.numpy() if node[_ARRAY] == "numpy" else t
        if _TUPLE in node:
            return tuple(_join(v, tensors) for v in node[_TUPLE])
        if _FLOAT in node:
            return float(node[_FLOAT])
        return {k: _join(v, tensors) for k, v in node[_DICT]}
    return node


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _render_skeleton_file(skeleton: Any, tensors_blob: bytes) -> bytes:
    """The bytes of ``state.json``: header, digests, skeleton (see the module docstring)."""
    doc = {
        "egrl_checkpoint": FORMAT,
        "state_json_sha256": _ZERO_DIGEST,
        "state_safetensors_sha256": _sha256(tensors_blob),
        "state_safetensors_bytes": len(tensors_blob),
        "skeleton": skeleton,
    }
    raw = json.dumps(doc).encode()
    assert raw.startswith(_HEADER + _ZERO_DIGEST.encode())
    return _with_digest(raw, _sha256(raw).encode())


def _with_digest(raw: bytes, digest: bytes) -> bytes:
    """``raw`` with the 64 bytes after :data:`_HEADER` replaced by ``digest``."""
    start = len(_HEADER)
    return raw[:start] + digest + raw[start + _DIGEST_LEN :]


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _sync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable (where the OS allows opening a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_state(state: Any, directory: str | Path) -> Path:
    """Atomically write ``state`` to ``directory`` (``state.safetensors`` + ``state.json``)."""
    directory = Path(directory)
    tmp = directory.with_name(directory.name + ".tmp")
    old = directory.with_name(directory.name + ".old")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    tensors: dict[str, torch.Tensor] = {}
    skeleton = _split(state, "", tensors)
    blob = dump_tensors(tensors)
    _write_synced(tmp / TENSORS_FILE, blob)
    _write_synced(tmp / SKELETON_FILE, _render_skeleton_file(skeleton, blob))
    if directory.exists():
        if old.exists():  # a stale copy left by a crash; ``directory`` is newer
            shutil.rmtree(old)
        directory.rename(old)
    tmp.rename(directory)
    _sync_dir(directory.parent)
    if old.exists():
        shutil.rmtree(old)
    return directory


# --------------------------------------------------------------------------- verifying
def _is_bare_skeleton(doc: Any) -> bool:
    """Whether ``doc`` is a ``state.json`` from before checksums (a bare skeleton)."""
    if isinstance(doc, dict):
        return len(doc) == 1 and next(iter(doc)) in (_DICT, _TUPLE, _FLOAT)
    return not isinstance(doc, dict)


def _require_dir(directory: Path) -> None:
    if not directory.is_dir():
        raise FileNotFoundError(f"no checkpoint in {directory} (the directory does not exist)")


def _read(path: Path) -> bytes:
    if not path.is_file():
        raise CheckpointError(path, "the file is missing")
    return path.read_bytes()


def _parse_skeleton_file(path: Path, raw: bytes) -> tuple[Any, bool]:
    """The skeleton in ``state.json`` and whether the file carried checksums (checked)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(
            path, f"not valid JSON, the file is truncated or corrupted ({len(raw)} bytes; {exc})"
        ) from None
    if _is_bare_skeleton(doc):
        return doc, False
    if not raw.startswith(_HEADER):
        raise CheckpointError(
            path, f"does not start with the checkpoint header {_HEADER.decode()!r}"
        )
    recorded = raw[len(_HEADER) : len(_HEADER) + _DIGEST_LEN].decode("ascii", "replace")
    actual = _sha256(_with_digest(raw, _ZERO_DIGEST.encode()))
    if recorded != actual:
        raise CheckpointError(
            path,
            f"content does not match its recorded sha256 (recorded {recorded}, computed "
            f"{actual}): the file was modified after it was written",
        )
    return doc, True


def _check_tensors_file(path: Path, blob: bytes, doc: dict) -> None:
    expected = int(doc["state_safetensors_bytes"])
    if len(blob) != expected:
        what = "truncated" if len(blob) < expected else "too long"
        raise CheckpointError(
            path, f"{what}: {len(blob)} bytes, state.json records {expected} bytes"
        )
    actual = _sha256(blob)
    if actual != doc["state_safetensors_sha256"]:
        raise CheckpointError(
            path,
            f"sha256 {actual} differs from {doc['state_safetensors_sha256']} recorded in "
            "state.json: the file is corrupted",
        )


def _read_checked(directory: Path) -> tuple[Any, bytes]:
    """The skeleton and the safetensors bytes of ``directory``, both verified if possible."""
    _require_dir(directory)
    skeleton_path, tensors_path = directory / SKELETON_FILE, directory / TENSORS_FILE
    raw = _read(skeleton_path)
    doc, checked = _parse_skeleton_file(skeleton_path, raw)
    blob = _read(tensors_path)
    if not checked:
        log.warning(
            "checkpoint %s has no checksum (written by an older version): it cannot be verified",
            directory,
        )
        return doc, blob
    _check_tensors_file(tensors_path, blob, doc)
    return doc["skeleton"], blob


def load_plain(directory: str | Path) -> Any:
    """The state of a checkpoint without its arrays (each array leaf is None).

    Reads and verifies ``state.json`` only, so it is cheap on a large checkpoint; use it
    for plain values such as ``load_plain(path)["iterations"]``.

    Raises:
        CheckpointError: ``state.json`` is missing, truncated or corrupted.
        FileNotFoundError: ``directory`` does not exist.
    """
    directory = Path(directory)
    _require_dir(directory)
    path = directory / SKELETON_FILE
    doc, checked = _parse_skeleton_file(path, _read(path))
    skeleton = doc["skeleton"] if checked else doc
    try:
        return _join(skeleton, None)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise CheckpointError(
            path, f"not a checkpoint skeleton ({type(exc).__name__}: {exc})"
        ) from None


def verify_state(directory: str | Path) -> None:
    """Check both files of a checkpoint against its checksums.

    Raises:
        CheckpointError: a file is missing, truncated or corrupted (the message names it).
        FileNotFoundError: ``directory`` does not exist.
    """
    _read_checked(Path(directory))


def load_state(directory: str | Path) -> Any:
    """Read and verify a state written by :func:`save_state`.

    Raises:
        CheckpointError: a file is missing, truncated or corrupted (the message names it).
        FileNotFoundError: ``directory`` does not exist.
    """
    directory = Path(directory)
    skeleton, blob = _read_checked(directory)
    tensors_path = directory / TENSORS_FILE
    try:
        tensors = load_tensors(blob)
    except Exception as exc:  # safetensors raises its own SafetensorError
        raise CheckpointError(tensors_path, f"not a readable safetensors file ({exc})") from None
    try:
        return _join(skeleton, tensors)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise CheckpointError(
            directory / SKELETON_FILE,
            f"does not match {TENSORS_FILE} ({type(exc).__name__}: {exc})",
        ) from None


# ------------------------------------------------------------- a directory of checkpoints
def _generation_of(path: Path) -> tuple[int, int]:
    """Sort key: generation, then a finished ``gen_X`` before its ``gen_X.old``."""
    match = _CHECKPOINT_NAME.fullmatch(path.name)
    return int(match.group(1)), 0 if match.group(2) else 1


def list_checkpoints(ckpt_dir: str | Path) -> list[Path]:
    """The checkpoints ``gen_XXXXXX`` (and leftover ``gen_XXXXXX.old``) of ``ckpt_dir``.

    Newest first; ``gen_XXXXXX.tmp`` (an unfinished write) is not a checkpoint.
    """
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    found = [p for p in ckpt_dir.iterdir() if _CHECKPOINT_NAME.fullmatch(p.name) and p.is_dir()]
    return sorted(found, key=_generation_of, reverse=True)


def _set_aside(path: Path) -> Path:
    """Rename a damaged checkpoint ``gen_X[.old]`` to ``gen_X.damaged`` (out of the way)."""
    target = path.with_name(path.name.removesuffix(".old") + ".damaged")
    if target.exists():
        shutil.rmtree(target)
    path.rename(target)
    return target


def _restore_old(path: Path) -> Path:
    """Rename a leftover ``gen_X.old`` back to ``gen_X`` when that name is free."""
    if not path.name.endswith(".old"):
        return path
    final = path.with_name(path.name.removesuffix(".old"))
    if final.exists():
        return path
    path.rename(final)
    return final


def load_latest(ckpt_dir: str | Path) -> tuple[Path, Any] | None:
    """Load the newest intact checkpoint of ``ckpt_dir``; None if it holds none at all.

    A damaged checkpoint is skipped with a warning naming it; once an intact one is found,
    the damaged newer ones are renamed ``gen_XXXXXX.damaged`` (so that later saves and
    pruning never count them) and a leftover ``gen_XXXXXX.old`` that was loaded gets its
    name back.

    Returns:
        ``(path, state)`` of the checkpoint loaded.

    Raises:
        CheckpointError: checkpoints exist but every one is damaged (the message names
            ``ckpt_dir`` and what is wrong with each).
    """
    ckpt_dir = Path(ckpt_dir)
    candidates = list_checkpoints(ckpt_dir)
    if not candidates:
        return None
    damaged: list[tuple[Path, CheckpointError]] = []
    for path in candidates:
        try:
            state = load_state(path)
        except CheckpointError as exc:
            log.warning("skipping damaged checkpoint: %s", exc)
            damaged.append((path, exc))
            continue
        for bad, _ in damaged:
            log.warning("damaged checkpoint %s renamed %s", bad, _set_aside(bad).name)
        if damaged:
            log.warning("resuming from %s, the newest intact checkpoint", path)
        return _restore_old(path), state
    problems = "; ".join(f"{e.path.relative_to(ckpt_dir)}: {e.problem}" for _, e in damaged)
    raise CheckpointError(
        ckpt_dir, f"no intact checkpoint, all {len(damaged)} are damaged ({problems})"
    )


def prune_checkpoints(ckpt_dir: str | Path, keep: int, written: Path) -> list[Path]:
    """Keep the newest ``keep`` checkpoints of ``ckpt_dir``, ``written`` always among them.

    Nothing is removed unless ``written`` (the checkpoint just saved) verifies, so pruning
    never leaves a run without an intact checkpoint.

    Returns:
        the checkpoints removed.
    """
    try:
        verify_state(written)
    except CheckpointError as exc:
        log.warning("not pruning old checkpoints: the one just written is damaged: %s", exc)
        return []
    others = [p for p in list_checkpoints(ckpt_dir) if p.name != Path(written).name]
    removed = others[max(1, keep) - 1 :]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
