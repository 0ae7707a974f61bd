"""Long tests start first.

Under pytest-xdist a run ends when its last test ends: a test that holds a
worker for many seconds, handed out last, leaves the other cores idle while
it runs. So tests marked ``long`` (many seconds of wall time: fleets,
campaigns, signalled command lines) or ``untraced`` (the heavy property
tests) move to the front of the collected order, and the short ones fill
the end. Both groups keep their collected order (a stable sort), so every
worker sees the same order, as pytest-xdist requires.
"""

from __future__ import annotations

import pytest

__all__ = ["FIRST"]

FIRST = ("long", "untraced")
"""The markers of the tests that start first."""


def _starts_late(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(name) for name in FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the long tests to the front, keeping each group's order."""
    items.sort(key=_starts_late)
