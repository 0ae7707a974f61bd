"""The run order of tests/run_order.py: long tests first, each
group in its collected order."""

from __future__ import annotations

from typing import Any

import pytest

from tests.run_order import pytest_collection_modifyitems


class _Item:
    def __init__(self, name: str, *markers: str) -> None:
        self.name = name
        self.markers = markers

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.markers else None


def test_long_and_untraced_tests_start_first_in_their_collected_order() -> None:
    items: list[Any] = [
        _Item("a"),
        _Item("b", "long"),
        _Item("c"),
        _Item("d", "untraced"),
        _Item("e", "parametrize"),
        _Item("f", "long", "untraced"),
    ]
    pytest_collection_modifyitems(items)
    assert [item.name for item in items] == ["b", "d", "f", "a", "c", "e"]


def test_this_run_starts_with_its_long_tests(request: pytest.FixtureRequest) -> None:
    """The plugin is on in this very run: no short test comes before a long one."""
    order = [
        any(item.get_closest_marker(name) for name in ("long", "untraced"))
        for item in request.session.items
    ]
    assert order == sorted(order, reverse=True)
