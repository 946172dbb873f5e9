"""Byte units of the tests."""

from __future__ import annotations

#: bytes in a KiB
KIB = 1024
