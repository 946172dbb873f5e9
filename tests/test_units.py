"""Latencies printed with 4 significant digits in a unit that fits (issue 25, point 6)."""

from __future__ import annotations

import doctest

import pytest

import egrl.units
from egrl.units import format_latency


@pytest.mark.parametrize(
    "seconds, text",
    [
        (7.3090494064e-05, "73.09 µs"),  # resnet18 on NNP-I: was "0.0731 ms"
        (2.0e-7, "200.0 ns"),  # was "0.0002 ms"
        (2.474e-4, "247.4 µs"),
        (0.004764922036352, "4.765 ms"),
        (1.5, "1.500 s"),
        (1234.5, "1234 s"),
        (0.99999996e-3, "1.000 ms"),  # rounding up to the next unit
        (0.0, "0 s"),
        (float("nan"), "n/a"),
        (None, "n/a"),
        (float("inf"), "n/a"),
    ],
)
def test_format_latency(seconds, text):
    assert format_latency(seconds) == text


def test_every_nonzero_latency_keeps_four_significant_digits():
    for seconds in (3.3e-10, 4.2e-8, 6.1e-6, 9.9e-4, 0.25, 12.0):
        value = float(format_latency(seconds).split()[0])
        digits = format_latency(seconds).split()[0].replace(".", "").lstrip("0")
        assert len(digits) == 4 and value > 0, format_latency(seconds)


def test_doctests():
    assert doctest.testmod(egrl.units).failed == 0
