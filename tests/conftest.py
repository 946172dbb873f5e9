"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest

from tests.support.threads import one_torch_thread


@pytest.fixture
def one_thread():
    """One intra-op torch thread for the test (reproducible sums, no pool overhead)."""
    with one_torch_thread():
        yield
