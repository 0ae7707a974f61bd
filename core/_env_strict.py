"""The env-name rule of :mod:`._env`, written without lookaround.

:data:`~sandrail.core._env.ENV_NAME_PATTERN` refuses reserved names with a
negative lookahead, which strict decoders (OpenAI's and Anthropic's strict
tool calls) do not take. :data:`STRICT_ENV_NAME_PATTERN` matches the same
names, derived from the same lists (:data:`~sandrail.core._env.RESERVED_ENV_PREFIXES`
and :data:`~sandrail.core._env.REFUSED_ENV_NAMES`, the reserved names and those
bash owns): a trie of the refused prefixes and names, walked into
alternatives that never complete a refused name nor enter a refused prefix.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ._env import REFUSED_ENV_NAMES, RESERVED_ENV_PREFIXES

__all__ = ["STRICT_ENV_NAME_PATTERN"]

_NAME_FIRST: Final = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_"
_NAME_REST: Final = _NAME_FIRST + "0123456789"


class _Node:
    __slots__ = ("blocked_name", "blocked_prefix", "children")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.blocked_prefix = False
        self.blocked_name = False


def _class(chars: Iterable[str]) -> str:
    """A regex character class of ``chars`` (ASCII letters, digits, ``_``), with ranges."""
    codes = sorted({ord(char) for char in chars})
    parts: list[str] = []
    start = previous = codes[0]
    for code in [*codes[1:], None]:
        if code is not None and code == previous + 1:
            previous = code
            continue
        parts.append(chr(start) if start == previous else f"{chr(start)}-{chr(previous)}")
        if code is not None:
            start = previous = code
    return "[" + "".join(parts) + "]"


def _avoiding(node: _Node, first: bool) -> str:
    """A regex for the rest of a shell name, after the path to ``node``, that
    never completes a blocked name nor enters a blocked prefix."""
    allowed = _NAME_FIRST if first else _NAME_REST
    branches = [
        char + _avoiding(child, first=False)
        for char, child in sorted(node.children.items())
        if not child.blocked_prefix
    ]
    free = [char for char in allowed if char not in node.children]
    if free:
        branches.append(_class(free) + "[A-Za-z0-9_]*")
    body = "(?:" + "|".join(branches) + ")"
    if first or node.blocked_name:
        return body
    return body + "?"


def _strict_env_name_pattern(prefixes: Iterable[str], names: Iterable[str]) -> str:
    root = _Node()
    for text, is_prefix in [*((p, True) for p in prefixes), *((n, False) for n in names)]:
        node = root
        for char in text:
            node = node.children.setdefault(char, _Node())
        if is_prefix:
            node.blocked_prefix = True
        else:
            node.blocked_name = True
    return "^" + _avoiding(root, first=True) + "$"


STRICT_ENV_NAME_PATTERN: Final = _strict_env_name_pattern(RESERVED_ENV_PREFIXES, REFUSED_ENV_NAMES)
"""The env-name rule of :data:`~sandrail.core._env.ENV_NAME_PATTERN`, derived
from the same lists, written without lookaround (which strict decoders
refuse): the same names match."""
