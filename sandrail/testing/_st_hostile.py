"""Values that fail however they are looked at: for the robustness lines
("returns a result or raises the named error, never anything else")."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator, Mapping
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "Color",
    "Hostile",
    "HostileInt",
    "HostileStr",
    "LyingList",
    "Raising",
    "UnreadableDict",
    "UnreadableMapping",
    "anything",
    "junk",
]


class Raising:
    """An object that fails however it is compared, hashed or read."""

    def __str__(self) -> str:
        raise RuntimeError("str")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        raise RuntimeError("hash")


class UnreadableDict(dict[str, Any]):
    """A dict whose items cannot be read."""

    def items(self) -> Any:
        raise RuntimeError("items")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iter")


class Hostile:
    """Fails however it is looked at."""

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def __str__(self) -> str:
        raise RuntimeError("str")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        raise RuntimeError("hash")


class HostileStr(str):
    """A string whose methods fail."""

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def strip(self, chars: str | None = None) -> str:
        raise RuntimeError("strip")


class HostileInt(int):
    def __repr__(self) -> str:
        raise RuntimeError("repr")


class UnreadableMapping(Mapping[str, Any]):
    """A mapping that claims one item and gives none."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("getitem")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iter")

    def __len__(self) -> int:
        return 1


class LyingList(list[Any]):
    """A list that claims a million items."""

    def __len__(self) -> int:
        return 10**6


class Color(enum.IntEnum):
    RED = 5


_junk_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.characters(exclude_categories=()))
)
_junk_odd_values = (
    st.builds(object)
    | st.builds(Raising)
    | st.sampled_from(
        [UnreadableDict(a=1), b"bytes", frozenset({1, 2}), 1j, math.nan, math.inf, 10**400]
    )
)
junk = st.recursive(
    _junk_scalars | _junk_odd_values,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=4)
    ),
    max_leaves=20,
)
"""Junk of every kind: values no equality check or reader may choke on."""


def _odd_argument_values() -> st.SearchStrategy[Any]:
    return (
        st.builds(Hostile)
        | st.builds(HostileStr, st.just("x"))
        | st.builds(HostileInt, st.just(3))
        | st.sampled_from(
            [
                object,
                b"bytes",
                frozenset({1}),
                1j,
                math.nan,
                -math.inf,
                10**400,
                UnreadableMapping(),
                LyingList([1, 2]),
                Color.RED,
                "\ud800",
            ]
        )
    )


anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.characters(exclude_categories=()))
    | _odd_argument_values(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=()), max_size=8) | st.integers() | st.none(),
            children,
            max_size=4,
        )
    ),
    max_leaves=25,
)
"""Anything at all, hostile objects included: what arguments may be."""
