"""egrl.heap.keep_freed_memory: glibc keeps freed blocks in the heap; nothing else changes."""

from __future__ import annotations

import platform
import sys

import numpy as np
import pytest
import torch

from egrl.heap import keep_freed_memory


def test_keep_freed_memory_applies_once_and_large_blocks_still_work():
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    if not glibc:
        pytest.skip("mallopt is glibc's")
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # once per process, then a no-op
    for _ in range(3):  # blocks above glibc's mmap threshold (32 MiB), freed and made again
        block = np.ones(48 << 20, dtype=np.uint8)
        assert int(block[::4096].sum()) == len(block[::4096])
        tensor = torch.zeros(12 << 20)
        assert float(tensor.sum()) == 0.0
