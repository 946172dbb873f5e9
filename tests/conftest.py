"""Fixtures shared by the test modules, and one torch thread in every test process.

Every test process computes with one torch thread, and the processes the tests start
(``OMP_NUM_THREADS``) with one OpenMP thread: the workers keep the cores busy already, and
more threads on the suite's small graphs only wait for each other (a noisy mbo run of 20
board runs took 36.0 s of CPU with torch's two threads, 1.9 s with one).
"""

from __future__ import annotations

import os

import pytest
import torch

from tests.support.command_line import study_runs_in_process
from tests.support.threads import one_torch_thread


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread in this process and one OpenMP thread in the ones it starts."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


@pytest.fixture
def one_thread():
    """One intra-op torch thread for the test (reproducible sums, no pool overhead)."""
    with one_torch_thread():
        yield


@pytest.fixture
def study_in_process(monkeypatch):
    """The study runner's ``egrl-train -m`` groups run in this process
    (:func:`tests.support.command_line.study_runs_in_process`); the group arguments, in
    the order they ran."""
    return study_runs_in_process(monkeypatch)
