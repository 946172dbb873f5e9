"""Quantities as people read them: latencies in s, ms, µs or ns with 4 significant digits."""

from __future__ import annotations

import math

#: (unit, seconds per unit), largest first
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def format_latency(seconds: float | None, digits: int = 4) -> str:
    """``seconds`` in the largest unit that keeps it >= 1, to ``digits`` significant digits.

    >>> format_latency(7.3090e-05), format_latency(2.474e-4), format_latency(0.004765)
    ('73.09 µs', '247.4 µs', '4.765 ms')
    >>> format_latency(2e-10), format_latency(float("nan"))
    ('0.2000 ns', 'n/a')

    None, NaN and infinite values (no valid map) read ``n/a``.
    """
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    if seconds == 0:
        return "0 s"
    unit, scale = next(((u, s) for u, s in TIME_UNITS if abs(seconds) >= s), TIME_UNITS[-1])
    value = seconds / scale
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    if abs(float(text)) >= 1000 and unit != "s":  # rounding reached the next unit
        return format_latency(math.copysign(1000 * scale, seconds), digits)
    return f"{text} {unit}"
