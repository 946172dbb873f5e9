"""One intra-op torch thread."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """One intra-op torch thread inside the block (reproducible sums, no pool overhead);
    the fixture ``one_thread`` of ``conftest.py`` for a whole test."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
