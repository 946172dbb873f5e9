"""Fixtures shared by the test modules, and how the parallel run groups the tests.

The suite runs on ``pytest-xdist`` with ``--dist loadgroup`` (``setup.cfg``): each test is
sent on its own to the next free worker, except that the tests of a module that use one of
its module- or class-scoped fixtures (a study's smoke run, a local Ray, a bound chip) go
to one worker together, so that the fixture is made once.
"""

from __future__ import annotations

import pytest

from tests.support.threads import one_torch_thread

#: fixture scopes that several tests share: their tests run on one worker
SHARED_SCOPES = ("module", "class", "package")


@pytest.fixture
def one_thread():
    """One intra-op torch thread for the test (reproducible sums, no pool overhead)."""
    with one_torch_thread():
        yield


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The module of ``item`` when it uses a fixture made once for several tests there (a
    module-, class- or package-scoped one), else None."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    for name in info.names_closure:
        defs = info.name2fixturedefs.get(name, ())
        if defs and defs[-1].scope in SHARED_SCOPES:
            return item.nodeid.split("::", 1)[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests that share a module's fixture with ``xdist_group`` (their module)."""
    for item in items:
        group = shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
