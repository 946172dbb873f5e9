"""The ``egrl-external/1`` protocol: reading a command's JSON answer and its fields."""

from __future__ import annotations

import json
import math

import numpy as np

from hwmodels.external.errors import CallFailed, Refused

PROTOCOL = "egrl-external/1"


def parse_answer(stdout: str) -> dict:
    """The JSON object a command printed: the whole stdout, else its last non-empty line.

    Raises:
        CallFailed: no JSON object could be read, or it carries ``"error"`` or another
            protocol's name.
    """
    text = stdout.strip()
    if not text:
        raise CallFailed("printed nothing on stdout (expected one JSON object)")
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        last = text.splitlines()[-1]
        try:
            answer = json.loads(last)
        except json.JSONDecodeError:
            raise CallFailed(
                f"stdout is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                f"stdout starts with {text[:200]!r}"
            ) from None
    if not isinstance(answer, dict):
        raise CallFailed(f"answer is a JSON {type(answer).__name__}, expected an object")
    if "error" in answer:
        raise Refused(f"answered with an error: {answer['error']}")
    if answer.get("protocol", PROTOCOL) != PROTOCOL:
        raise CallFailed(f"answered protocol {answer['protocol']!r}, expected {PROTOCOL!r}")
    return answer


# --------------------------------------------------------------------------- answers
def answer_key(answer: dict, key: str, batch: int) -> list:
    """``answer[key]`` as a list of ``batch`` entries."""
    if key not in answer:
        raise CallFailed(f"answer has no {key!r} (keys: {sorted(answer)})")
    value = answer[key]
    if not isinstance(value, list) or len(value) != batch:
        got = f"{len(value)} entries" if isinstance(value, list) else type(value).__name__
        raise CallFailed(f"{key!r} must be a list of {batch} entries (one per map), got {got}")
    return value


def parse_valid(answer: dict, batch: int) -> np.ndarray:
    """bool ``[B]`` from ``answer["valid"]`` (JSON booleans only)."""
    values = answer_key(answer, "valid", batch)
    bad = [i for i, v in enumerate(values) if not isinstance(v, bool)]
    if bad:
        raise CallFailed(f"'valid' must hold JSON booleans; map {bad[0]} has {values[bad[0]]!r}")
    return np.array(values, dtype=bool)


def parse_floats(answer: dict, key: str, batch: int) -> np.ndarray:
    """float64 ``[B]`` from ``answer[key]``; ``null`` becomes NaN."""
    values = answer_key(answer, key, batch)
    bad = [
        i
        for i, v in enumerate(values)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)))
    ]
    if bad:
        raise CallFailed(f"{key!r} must hold numbers or null; map {bad[0]} has {values[bad[0]]!r}")
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def parse_choices(value, shape: tuple[int, ...], what: str) -> np.ndarray:
    """int64 array of ``shape`` from nested JSON lists of integers."""
    try:
        arr = np.asarray(value)
    except ValueError:
        raise CallFailed(
            f"{what} is ragged: expected nested lists of shape {list(shape)}"
        ) from None
    if arr.shape != shape:
        raise CallFailed(f"{what} has shape {list(arr.shape)}, expected {list(shape)}")
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise CallFailed(f"{what} must hold integer choices (got {arr.dtype} values)")
    return arr.astype(np.int64)
