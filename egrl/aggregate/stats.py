"""Mean and spread over seeds, one implementation for the sweep tables of
:mod:`egrl.aggregate` and the studies of the checkout."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


def finite(values: Sequence[float]) -> np.ndarray:
    """float64 ``[K]``: the finite ones of ``values`` (NaN and inf dropped)."""
    a = np.asarray(values, dtype=np.float64)
    return a[np.isfinite(a)]


class MeanStd(NamedTuple):
    """Mean, sample standard deviation (0 for one value) and count of the finite values."""

    mean: float
    std: float
    n: int


def mean_std(values: Sequence[float]) -> MeanStd:
    """:class:`MeanStd` of the finite ``values`` (NaN, NaN, 0 when there are none)."""
    a = finite(values)
    if a.size == 0:
        return MeanStd(math.nan, math.nan, 0)
    return MeanStd(float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else 0.0, int(a.size))


def format_mean_std(
    values: Sequence[float] | MeanStd, fmt: str = "{:.4f}", empty: str = "-"
) -> str:
    """``"1.2340 ± 0.0560"`` of ``values`` (or of a :class:`MeanStd`); ``empty`` when none."""
    ms = values if isinstance(values, MeanStd) else mean_std(values)
    if ms.n == 0 or not math.isfinite(ms.mean):
        return empty
    if not math.isfinite(ms.std):
        return fmt.format(ms.mean)
    return f"{fmt.format(ms.mean)} ± {fmt.format(ms.std)}"
