"""Bodies nested too deep to decode safely, refused before any decoder sees
them (on every JSON route: the control plane and envd's Connect RPCs).

Strategy: a decoder recurses once per level of nesting, and tens of
thousands of levels (60 KB of ``[``) overflow the C stack of the process: a
crash of the whole server, not an exception. No request E2B's API or envd
takes is nested more than a few levels, so :data:`MAX_DEPTH` is far above
any real body. The depth is bounded without recursion and at C speed:
string literals are blanked, then innermost ``[]``/``{}`` pairs are deleted
round after round; each round takes one level off, and whatever brackets
cannot be paired (malformed JSON) count as levels too.
"""

from __future__ import annotations

import json
import re
from typing import Any

from connectrpc.code import Code
from connectrpc.codec import Codec
from connectrpc.errors import ConnectError

__all__ = ["MAX_DEPTH", "TooDeep", "check_depth", "guarded_codecs", "loads"]

MAX_DEPTH = 64
"""The deepest nesting of arrays and objects a JSON body may have."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


class TooDeep(ValueError):
    """A JSON body nested deeper than :data:`MAX_DEPTH` levels."""


def check_depth(data: bytes | bytearray, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`TooDeep` if ``data`` (JSON text, possibly malformed)
    may nest deeper than ``limit`` levels; never recurses."""
    if not any(bracket in data for bracket in (b"[", b"{")):
        return
    brackets = _NOT_BRACKET.sub(b"", _STRING.sub(b'""', bytes(data)))
    rounds = 0
    while brackets:
        fewer = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if len(fewer) == len(brackets):
            break
        brackets, rounds = fewer, rounds + 1
        if rounds > limit:
            break
    if rounds + len(brackets) > limit:
        raise TooDeep(f"the JSON body is nested deeper than {limit} levels")


def loads(data: bytes | bytearray) -> Any:
    """``json.loads`` of a body whose depth was checked first;
    ``ValueError`` (:class:`TooDeep` included) for anything undecodable."""
    check_depth(data)
    try:
        return json.loads(data)
    except RecursionError as exc:  # unreachable below MAX_DEPTH; never a crash
        raise TooDeep(str(exc)) from exc


class _Guarded:
    """A Connect codec that checks depth before ``inner`` decodes (JSON
    codecs only) and answers every undecodable message ``invalid_argument``,
    as envd does, never ``unknown``."""

    def __init__(self, inner: Codec[Any, Any], json_text: bool) -> None:
        self._inner = inner
        self._json = json_text

    def name(self) -> str:
        return self._inner.name()

    def encode(self, message: Any) -> bytes:
        return self._inner.encode(message)

    def decode(self, data: bytes | bytearray, message_class: type[Any]) -> Any:
        try:
            if self._json:
                check_depth(data)
            return self._inner.decode(data, message_class)
        except ConnectError:
            raise
        except Exception as exc:  # what a decoder raises on bad input varies
            raise ConnectError(
                Code.INVALID_ARGUMENT, f"invalid request body: {exc or type(exc).__name__}"
            ) from exc


def guarded_codecs() -> list[Codec[Any, Any]]:
    """The Connect codecs envd serves (protobuf binary, JSON), guarded."""
    from connectrpc.codec import proto_binary_codec, proto_json_codec

    return [_Guarded(proto_binary_codec(), False), _Guarded(proto_json_codec(), True)]
