"""Decoding a cassette's effects and outcomes without the general converter.

A replay decodes every step of its cassette when it loads it (a bad line is
reported at load, with its line number). The cattrs converter of
:mod:`._cassette_codec` does that for any shape, and costs for it. This module
compiles, once per class, a decoder for the shapes the effects and outcomes
have (flat attrs classes of strings, numbers, booleans, optional ones,
literals, a string mapping, a nested attrs class) from the classes' own
fields, so a new field or effect needs nothing here.

Strategy: the fast path only ever answers when it is sure. Anything it does
not recognise exactly (an unknown tag, a missing or extra key, a value of
another type, a field type it has no check for, a value the class's own
validators refuse) is handed to the converter, which decodes it or names
what is wrong in its own words. So the fast path decodes exactly what the
converter decodes, to the same values of the same types (a property in
``tests/test_fast_paths.py`` holds it to that on random data), and every
error message stays the converter's.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import attrs

__all__ = ["FastDecoder"]


class _Miss(Exception):
    """The data is not exactly one the fast path knows: ask the converter."""


_MISS: Final = _Miss()

_Check = Callable[[Any], Any]


def _exact(kind: type) -> _Check:
    def check(value: Any) -> Any:
        if type(value) is not kind:
            raise _MISS
        return value

    return check


def _number(value: Any) -> Any:
    kind = type(value)
    if kind is float:
        return value
    if kind is int:
        return float(value)
    raise _MISS


def _optional(inner: _Check) -> _Check:
    def check(value: Any) -> Any:
        return None if value is None else inner(value)

    return check


def _literal(options: tuple[Any, ...]) -> _Check | None:
    if not all(type(option) is str for option in options):
        return None
    allowed = frozenset(options)

    def check(value: Any) -> Any:
        if type(value) is not str or value not in allowed:
            raise _MISS
        return value

    return check


def _string_mapping(value: Any) -> Any:
    if type(value) is not dict:
        raise _MISS
    for key, item in value.items():
        if type(key) is not str or type(item) is not str:
            raise _MISS
    return dict(value)


_SIMPLE: Final[Mapping[Any, _Check]] = {
    str: _exact(str),
    int: _exact(int),
    bool: _exact(bool),
    float: _number,
}


class FastDecoder:
    """Decoders for the members of a tagged union of attrs classes (tag
    ``"type"``, the class name), each compiled on first use; ``None`` from
    :meth:`decode` means "ask the converter"."""

    def __init__(self, members: tuple[type, ...]) -> None:
        self._members = {member.__name__: member for member in members}
        self._decoders: dict[type, Callable[[dict[str, Any]], Any] | None] = {}

    def decode(self, data: dict[str, Any]) -> Any:
        """The value ``data`` (with its tag) stands for, or ``None``."""
        tag = data.get("type")
        kind = self._members.get(tag) if type(tag) is str else None
        if kind is None:
            return None
        decoder = self._decoder(kind)
        if decoder is None:
            return None
        try:
            return decoder(data)
        except _Miss:
            return None

    def _decoder(self, kind: type) -> Callable[[dict[str, Any]], Any] | None:
        if kind not in self._decoders:
            self._decoders[kind] = _compile(kind, tagged=True)
        return self._decoders[kind]


def _compile(kind: type, *, tagged: bool) -> Callable[[dict[str, Any]], Any] | None:
    """A decoder of ``kind`` from a dict, or ``None`` when one of its fields
    has a type the fast path has no check for."""
    hints = typing.get_type_hints(kind)
    checks: dict[str, _Check] = {}
    required: set[str] = set()
    for field in attrs.fields(kind):
        if not field.init or field.alias != field.name:
            return None
        check = _check_for(hints[field.name])
        if check is None:
            return None
        checks[field.name] = check
        if field.default is attrs.NOTHING:
            required.add(field.name)
    most = len(checks) + (1 if tagged else 0)

    def decode(data: dict[str, Any]) -> Any:
        if len(data) > most:
            raise _MISS
        values: dict[str, Any] = {}
        for key, value in data.items():
            check = checks.get(key)
            if check is None:
                if tagged and key == "type":
                    continue
                raise _MISS
            values[key] = check(value)
        if not required.issubset(values):
            raise _MISS
        try:
            return kind(**values)
        except (TypeError, ValueError):
            raise _MISS from None  # a validator's refusal: the converter words it

    return decode


def _check_for(hint: Any) -> _Check | None:
    simple = _SIMPLE.get(hint)
    if simple is not None:
        return simple
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is Literal:
        return _literal(arguments)
    if origin in (typing.Union, types.UnionType):
        rest = [argument for argument in arguments if argument is not type(None)]
        if len(rest) != 1 or len(arguments) != 2:
            return None
        inner = _check_for(rest[0])
        return None if inner is None else _optional(inner)
    if origin is Mapping and arguments == (str, str):
        return _string_mapping
    if isinstance(hint, type) and attrs.has(hint):
        nested = _compile(hint, tagged=False)
        if nested is None:
            return None

        def check(value: Any) -> Any:
            if type(value) is not dict:
                raise _MISS
            return nested(value)

        return check
    return None
