"""Canonical JSON: the exact bytes every budget in sandrail measures.

The output agrees with RFC 8785 (JSON Canonicalization Scheme) for the values
tool results hold: ``None``, ``bool``, integers within IEEE-754's exact range,
finite floats, ``str``, lists/tuples, and dicts with string keys.

Strategy: a small recursive walk over containers, with every string escaped by
the C implementation of :func:`json.encoder.encode_basestring` (which applies
exactly RFC 8785's escaping rules: ``\\"``, ``\\\\``, the five short control
escapes and ``\\u00xx`` for the other control characters, everything else as
UTF-8). Results have a few dozen nodes but strings of up to megabytes, so the
cost lives in C.
"""

from __future__ import annotations

import json.encoder
import math
from collections.abc import Collection, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any, Final

__all__ = [
    "CanonicalJSONError",
    "canonical_json",
    "canonical_json_split",
    "canonical_size",
    "escaped_json_text",
    "escaped_size",
]

_MAX_SAFE_INTEGER: Final = 2**53 - 1

_escape: Any = encode_basestring


class CanonicalJSONError(ValueError):
    """A value has no canonical JSON form (bad key, unsafe number, lone surrogate, ...)."""


def canonical_json(value: object) -> bytes:
    """Return the RFC 8785 canonical JSON encoding of ``value`` as UTF-8 bytes.

    Raises :class:`CanonicalJSONError` for values JSON cannot carry exactly:
    non-string keys, integers beyond +/-(2**53 - 1), NaN and infinities,
    strings holding lone surrogates, and any other type.
    """
    text = _flat_text(value) if type(value) is dict else None
    if text is None:
        parts: list[str] = []
        _encode(value, parts.append)
        text = "".join(parts)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJSONError(
            f"text holds a lone surrogate at character {exc.start}; JSON text must be valid Unicode"
        ) from None


_make_encoder: Final[Any] = getattr(json.encoder, "c_make_encoder", None)


def _flat_text(value: dict[Any, Any]) -> str | None:
    """The canonical text of a flat object (keys ASCII strings, values
    strings, ``None``, booleans and safe integers), from the C JSON encoder;
    ``None`` for any other object (then the walk decides).

    Strategy: for such an object RFC 8785 and Python's encoder (sorted keys,
    compact separators, text as it is) write the same text: the same string
    escapes (:func:`~json.encoder.encode_basestring`), ASCII keys sort alike
    by code point and by UTF-16 unit, and these values have one form. Most
    of what sandrail measures (result contents, launch arguments) is such
    an object. A lone surrogate is left to the caller's UTF-8 encoding,
    which refuses it either way."""
    if _make_encoder is None:
        return None
    for item in value.values():
        kind = type(item)
        if kind is str or item is None or kind is bool:
            continue
        if kind is not int or not -_MAX_SAFE_INTEGER <= item <= _MAX_SAFE_INTEGER:
            return None
    try:
        if not "".join(value).isascii():
            return None
    except TypeError:
        return None  # a key that is not a string: the walk says so
    encode = _make_encoder(None, None, _escape, None, ":", ",", True, False, False)
    return "".join(encode(value, 0))


def canonical_size(value: object) -> int:
    """Byte length of :func:`canonical_json` of ``value``."""
    return len(canonical_json(value))


def escaped_size(text: str) -> int:
    """Bytes ``text`` occupies inside a canonical JSON string, quotes excluded."""
    escaped: str = _escape(text)
    if escaped.isascii():
        return len(escaped) - 2
    return len(escaped.encode("utf-8", "surrogatepass")) - 2


def canonical_json_split(
    value: Mapping[str, Any], holes: Collection[str]
) -> tuple[list[str], list[str]]:
    """The canonical JSON text of the object ``value``, cut open inside the
    string values of its top-level keys named in ``holes``.

    Returns ``(segments, order)``: ``order`` names those keys as the text
    meets them, and ``segments`` has one more entry than ``order``. The text
    with each hole's value escaped (:func:`escaped_json_text`) put between
    consecutive segments is exactly :func:`canonical_json` of ``value`` with
    those values, so a long string can be written out piece by piece without
    ever encoding it whole. The holes' own values in ``value`` are ignored.

    Raises :class:`CanonicalJSONError` as :func:`canonical_json` does.
    """
    segments: list[str] = []
    order: list[str] = []
    current: list[str] = ["{"]
    for number, key in enumerate(_sorted_keys(value)):
        if number:
            current.append(",")
        current.append(_escape(key))
        current.append(":")
        if key in holes:
            current.append('"')
            segments.append("".join(current))
            order.append(key)
            current = ['"']
        else:
            _encode(value[key], current.append)
    current.append("}")
    segments.append("".join(current))
    for segment in segments:
        _check_unicode(segment)
    return segments, order


def escaped_json_text(text: str) -> str:
    """``text`` as it appears inside a canonical JSON string, quotes excluded.

    Escaping goes character by character, so the escaped pieces of a text
    joined are the escaped text. Raises :class:`CanonicalJSONError` for a lone
    surrogate.
    """
    escaped: str = _escape(text)[1:-1]
    if not escaped.isascii():
        _check_unicode(escaped)
    return escaped


def _check_unicode(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJSONError(
            f"text holds a lone surrogate at character {exc.start}; JSON text must be valid Unicode"
        ) from None


def _encode(value: object, emit: Any) -> None:
    # Exact types first (the common case, and cheaper than ABC checks);
    # `bool` before `int`, since True is an int in Python.
    kind = type(value)
    if kind is str:
        emit(_escape(value))
    elif kind is dict:
        _encode_object(value, emit)  # type: ignore[arg-type]
    elif value is None:
        emit("null")
    elif value is True:
        emit("true")
    elif value is False:
        emit("false")
    elif kind is int:
        _encode_int(value, emit)  # type: ignore[arg-type]
    elif kind is list or kind is tuple:
        _encode_array(value, emit)  # type: ignore[arg-type]
    elif isinstance(value, str):
        emit(_escape(value))
    elif isinstance(value, int):
        _encode_int(value, emit)
    elif isinstance(value, Mapping):
        _encode_object(value, emit)
    elif isinstance(value, float):
        emit(_format_float(value))
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        _encode_array(value, emit)
    else:
        raise CanonicalJSONError(f"{type(value).__name__} has no JSON form")


def _encode_int(value: int, emit: Any) -> None:
    if -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER:
        emit(int.__repr__(value))
    else:
        raise CanonicalJSONError(f"integer {value} is outside JSON's exact range (+/-2**53-1)")


def _encode_array(value: Sequence[Any], emit: Any) -> None:
    emit("[")
    first = True
    for item in value:
        if not first:
            emit(",")
        first = False
        _encode(item, emit)
    emit("]")


def _encode_object(value: Mapping[Any, Any], emit: Any) -> None:
    emit("{")
    first = True
    for key in _sorted_keys(value):
        if not first:
            emit(",")
        first = False
        emit(_escape(key))
        emit(":")
        _encode(value[key], emit)
    emit("}")


def _sorted_keys(value: Mapping[Any, Any]) -> list[str]:
    keys = list(value)
    for key in keys:
        if not isinstance(key, str):
            raise CanonicalJSONError(f"object key {key!r} is not a string")
    # RFC 8785 orders keys by UTF-16 code units. Python orders by code point;
    # the two agree unless a key holds a character beyond the BMP, which is
    # rare enough to take the slow path only then.
    if "".join(keys).isascii():
        keys.sort()
    else:
        keys.sort(key=lambda key: key.encode("utf-16-be", "surrogatepass"))
    return keys


def _format_float(value: float) -> str:
    """ECMAScript Number::toString, as RFC 8785 section 3.2.2.3 requires."""
    if math.isnan(value) or math.isinf(value):
        raise CanonicalJSONError(f"{value} has no JSON form")
    if value == 0:
        return "0"
    if value < 0:
        return "-" + _format_float(-value)
    # repr gives the shortest digits that round-trip, as ECMAScript does.
    mantissa, _, exp_text = repr(value).partition("e")
    whole, _, fraction = mantissa.partition(".")
    if fraction == "0":
        fraction = ""
    digits = (whole + fraction).lstrip("0")
    # The decimal point sits `point` digits into `digits`.
    exponent10 = int(exp_text) if exp_text else 0
    if whole == "0":
        point = exponent10 - (len(fraction) - len(fraction.lstrip("0")))
    else:
        point = len(whole) + exponent10
    digits = digits.rstrip("0") or "0"
    if len(digits) <= point <= 21:
        return digits + "0" * (point - len(digits))
    if 0 < point <= 21:
        return digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return "0." + "0" * -point + digits
    exponent = point - 1
    sign = "+" if exponent >= 0 else "-"
    rest = "." + digits[1:] if len(digits) > 1 else ""
    return f"{digits[0]}{rest}e{sign}{abs(exponent)}"
