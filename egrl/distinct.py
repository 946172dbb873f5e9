"""Distinct maps: which rows of a batch of maps are repeats.

Every routine that drops repeated maps (the confirmation's candidates, the maps an
earlier run paid for, a report's distinct maps) goes through these, so that two maps are
the same exactly when all their choices are equal.
"""

from __future__ import annotations

import numpy as np


def first_rows(maps: np.ndarray) -> np.ndarray:
    """int64 ``[U]``: the row of each distinct map of ``maps`` ``[M, ...]`` where it first
    occurs, ascending (so in the order the maps first came)."""
    maps = np.asarray(maps)
    if not len(maps):
        return np.zeros(0, dtype=np.int64)
    _, first = np.unique(maps.reshape(len(maps), -1), axis=0, return_index=True)
    return np.sort(first).astype(np.int64)


def last_rows(maps: np.ndarray) -> np.ndarray:
    """int64 ``[U]``: the row of each distinct map of ``maps`` ``[M, ...]`` where it last
    occurs, ascending."""
    return np.sort(len(maps) - 1 - first_rows(np.asarray(maps)[::-1]))


def counts(maps: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """int64 ``[len(rows)]``: how often the map at each of ``rows`` occurs in ``maps``."""
    flat = np.asarray(maps).reshape(len(maps), -1)
    if not len(flat):
        return np.zeros(0, dtype=np.int64)
    _, inverse, count = np.unique(flat, axis=0, return_inverse=True, return_counts=True)
    return count[inverse.reshape(-1)[rows]].astype(np.int64)
