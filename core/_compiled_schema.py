"""JSON Schemas compiled to plain predicates: the fast path of argument
validation.

Strategy: ``jsonschema`` reads any schema and explains every error, and pays
for that generality on each call (a validator evolved per subschema, an
error iterator per keyword). A tool's schema uses a handful of keywords, and
almost every call it sees is valid. So :func:`compile_schema` turns a schema
built only from the keywords in :data:`COMPILED_KEYWORDS` into nested
closures that answer one question, "is this valid?", exactly as
``jsonschema``'s Draft 2020-12 validator (with ECMA-262 patterns,
:func:`ecma_regex`) would for plain JSON data. A schema with any other
keyword is not compiled (``None``), and its caller keeps using
``jsonschema`` alone. The predicates never explain anything: a caller that
gets ``False`` asks ``jsonschema`` for the reasons, so every message stays
``jsonschema``'s reading turned into plain words.

"Plain JSON data" is what :func:`is_plain_json` accepts: exact ``dict``,
``list``, ``str``, ``int``, ``float``, ``bool`` and ``None``, valid Unicode
text, finite numbers, shallow and small. On such data the predicates and
``jsonschema`` agree on every value (a property test holds them to it); on
anything else a caller must not ask them.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = [
    "COMPILED_KEYWORDS",
    "PLAIN_DEPTH",
    "PLAIN_VALUES",
    "Predicate",
    "compile_schema",
    "ecma_regex",
    "is_plain_json",
    "is_unicode",
]

Predicate = Callable[[Any], bool]
"""Whether plain JSON data is valid under a compiled schema."""

PLAIN_DEPTH: Final = 32
"""Containers nested deeper than this are not plain (the slow path judges them)."""
PLAIN_VALUES: Final = 10_000
"""Data holding more values than this is not plain (the slow path judges it)."""

_ANNOTATIONS: Final = frozenset(
    {"description", "title", "default", "examples", "$comment", "deprecated", "readOnly"}
    | {"writeOnly"}
)
"""Keywords that never make a value invalid."""


class _UnsupportedError(Exception):
    """The schema uses something the compiler does not read."""


def compile_schema(schema: object) -> Predicate | None:
    """A predicate saying whether plain JSON data is valid under ``schema``
    (a JSON Schema, Draft 2020-12), or ``None`` when the schema uses a
    keyword outside :data:`COMPILED_KEYWORDS` or a form of one the compiler
    does not read. Never raises."""
    try:
        return _compile(schema)
    except (_UnsupportedError, re.error, RecursionError, TypeError, ValueError):
        return None


def is_plain_json(value: object) -> bool:
    """Whether ``value`` is plain JSON data: exact builtin JSON types (no
    subclasses, no tuples), text that is valid Unicode (keys too), finite
    numbers, containers at most :data:`PLAIN_DEPTH` deep and at most
    :data:`PLAIN_VALUES` values in all. Such data reads the same to every
    JSON tool, which is what lets a compiled predicate judge it."""
    return 0 < _plain_count(value, 0) <= PLAIN_VALUES


def _plain_count(value: object, depth: int) -> int:
    """How many JSON values ``value`` holds, or -1 if it is not plain."""
    kind = type(value)
    if kind is str:
        return 1 if is_unicode(value) else -1  # type: ignore[arg-type]
    if kind is int or kind is bool or value is None:
        return 1
    if kind is float:
        return 1 if math.isfinite(value) else -1  # type: ignore[arg-type]
    if depth >= PLAIN_DEPTH:
        return -1
    total = 1
    if kind is dict:
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str or not is_unicode(key):
                return -1
            count = _plain_count(item, depth + 1)
            if count < 0:
                return -1
            total += count
            if total > PLAIN_VALUES:
                return -1
        return total
    if kind is list:
        for item in value:  # type: ignore[attr-defined]
            count = _plain_count(item, depth + 1)
            if count < 0:
                return -1
            total += count
            if total > PLAIN_VALUES:
                return -1
        return total
    return -1


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode text (no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def ecma_regex(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled to match as ECMA-262 (JSON Schema's dialect) does.

    Python's ``$`` also matches before a final newline; ECMA's (without the
    ``m`` flag) only at the very end, which Python spells ``\\Z``. Every ``$``
    outside a character class is translated; the patterns sandrail states use
    no other construct the two dialects read differently.
    """
    return _ecma_compiled(pattern)


@functools.lru_cache(maxsize=256)
def _ecma_compiled(pattern: str) -> re.Pattern[str]:
    out: list[str] = []
    in_class = escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = "\\Z"
        out.append(char)
    return re.compile("".join(out))


# --- the compiler ----------------------------------------------------------------------
#
# Each keyword becomes one predicate over the instance; like jsonschema's own
# keyword functions, a keyword about one type passes every value of another
# type. Plain data has exact types, so `type(x) is str` says what
# jsonschema's "string" says.


def _compile(schema: object) -> Predicate:
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, Mapping):
        raise _UnsupportedError("a schema is an object or a boolean")
    checks: list[Predicate] = []
    for keyword, value in schema.items():
        if keyword in _ANNOTATIONS or keyword in ("then", "else"):
            continue  # `then` and `else` are read by `if`, as jsonschema does
        make = _KEYWORDS.get(keyword)
        if make is None:
            raise _UnsupportedError(keyword)
        checks.append(make(value, schema))
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    every = tuple(checks)

    def all_hold(x: Any) -> bool:
        for check in every:  # noqa: SIM110 (a loop beats all() on the hot path)
            if not check(x):
                return False
        return True

    return all_hold


def _always(x: Any) -> bool:
    return True


def _never(x: Any) -> bool:
    return False


def _is_integer(x: Any) -> bool:
    kind = type(x)
    return kind is int or (kind is float and x.is_integer())


def _is_number(x: Any) -> bool:
    kind = type(x)
    return kind is int or kind is float


_TYPES: Final[Mapping[str, Predicate]] = {
    "string": lambda x: type(x) is str,
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda x: type(x) is bool,
    "null": lambda x: x is None,
    "object": lambda x: type(x) is dict,
    "array": lambda x: type(x) is list,
}


def _type(value: object, schema: Mapping[str, Any]) -> Predicate:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        raise _UnsupportedError("type")
    if not all(isinstance(name, str) and name in _TYPES for name in names):
        raise _UnsupportedError("type")
    tests = tuple(_TYPES[name] for name in names)
    if len(tests) == 1:
        return tests[0]
    return lambda x: any(test(x) for test in tests)


def _count(value: object) -> int:
    if type(value) is not int or value < 0:
        raise _UnsupportedError("a count must be a non-negative integer")
    return value


def _bound(value: object) -> int | float:
    if type(value) is not int and (type(value) is not float or not math.isfinite(value)):
        raise _UnsupportedError("a bound must be a finite number")
    return value


def _properties(value: object, schema: Mapping[str, Any]) -> Predicate:
    if not isinstance(value, Mapping):
        raise _UnsupportedError("properties")
    fields = tuple((str(name), _compile(sub)) for name, sub in value.items())

    def properties(x: Any) -> bool:
        if type(x) is not dict:
            return True
        for name, check in fields:  # noqa: SIM110 (a loop beats all() on the hot path)
            if name in x and not check(x[name]):
                return False
        return True

    return properties


def _required(value: object, schema: Mapping[str, Any]) -> Predicate:
    if not isinstance(value, list | tuple) or not all(isinstance(n, str) for n in value):
        raise _UnsupportedError("required")
    names = tuple(value)
    return lambda x: type(x) is not dict or all(name in x for name in names)


def _additional_properties(value: object, schema: Mapping[str, Any]) -> Predicate:
    if "patternProperties" in schema:
        raise _UnsupportedError("additionalProperties with patternProperties")
    declared = schema.get("properties", {})
    if not isinstance(declared, Mapping):
        raise _UnsupportedError("properties")
    known = frozenset(declared)
    if value is False:
        return lambda x: type(x) is not dict or x.keys() <= known
    check = _compile(value)

    def additional(x: Any) -> bool:
        if type(x) is not dict:
            return True
        for name, item in x.items():  # noqa: SIM110 (a loop beats all() on the hot path)
            if name not in known and not check(item):
                return False
        return True

    return additional


def _property_names(value: object, schema: Mapping[str, Any]) -> Predicate:
    check = _compile(value)
    return lambda x: type(x) is not dict or all(check(name) for name in x)


def _max_properties(value: object, schema: Mapping[str, Any]) -> Predicate:
    most = _count(value)
    return lambda x: type(x) is not dict or len(x) <= most


def _min_properties(value: object, schema: Mapping[str, Any]) -> Predicate:
    least = _count(value)
    return lambda x: type(x) is not dict or len(x) >= least


def _min_length(value: object, schema: Mapping[str, Any]) -> Predicate:
    least = _count(value)
    return lambda x: type(x) is not str or len(x) >= least


def _max_length(value: object, schema: Mapping[str, Any]) -> Predicate:
    most = _count(value)
    return lambda x: type(x) is not str or len(x) <= most


def _pattern(value: object, schema: Mapping[str, Any]) -> Predicate:
    if not isinstance(value, str):
        raise _UnsupportedError("pattern")
    search = ecma_regex(value).search
    return lambda x: type(x) is not str or search(x) is not None


def _minimum(value: object, schema: Mapping[str, Any]) -> Predicate:
    least = _bound(value)
    return lambda x: not _is_number(x) or x >= least


def _maximum(value: object, schema: Mapping[str, Any]) -> Predicate:
    most = _bound(value)
    return lambda x: not _is_number(x) or x <= most


def _exclusive_minimum(value: object, schema: Mapping[str, Any]) -> Predicate:
    least = _bound(value)
    return lambda x: not _is_number(x) or x > least


def _exclusive_maximum(value: object, schema: Mapping[str, Any]) -> Predicate:
    most = _bound(value)
    return lambda x: not _is_number(x) or x < most


def _enum(value: object, schema: Mapping[str, Any]) -> Predicate:
    if not isinstance(value, list | tuple):
        raise _UnsupportedError("enum")
    options = tuple(_plain_option(option) for option in value)
    if all(type(option) is str for option in options):
        texts = frozenset(options)
        return lambda x: type(x) is str and x in texts
    return lambda x: any(_json_equal(option, x) for option in options)


def _const(value: object, schema: Mapping[str, Any]) -> Predicate:
    option = _plain_option(value)
    return lambda x: _json_equal(option, x)


def _plain_option(value: object) -> Any:
    """An enum or const value as plain JSON (the schema stores arrays as
    tuples); unsupported if it is not JSON data."""
    if isinstance(value, Mapping):
        return {_text_key(key): _plain_option(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_option(item) for item in value]
    if value is None or type(value) in (str, bool, int):
        return value
    if type(value) is float and math.isfinite(value):
        return value
    raise _UnsupportedError("enum and const values must be JSON data")


def _text_key(key: object) -> str:
    if type(key) is not str:
        raise _UnsupportedError("object keys must be text")
    return key


def _json_equal(one: Any, two: Any) -> bool:
    """Equality as jsonschema's ``enum`` and ``const`` read it, for plain
    data: ``1`` equals ``1.0``, and ``true`` equals only ``true``."""
    kind_one, kind_two = type(one), type(two)
    if kind_one is str or kind_two is str:
        return kind_one is kind_two and one == two
    if kind_one is bool or kind_two is bool or one is None or two is None:
        return one is two
    if kind_one is list or kind_two is list:
        return (
            kind_one is kind_two
            and len(one) == len(two)
            and all(_json_equal(a, b) for a, b in zip(one, two, strict=True))
        )
    if kind_one is dict or kind_two is dict:
        return (
            kind_one is kind_two
            and len(one) == len(two)
            and all(key in two and _json_equal(item, two[key]) for key, item in one.items())
        )
    return bool(one == two)  # numbers


def _any_of(value: object, schema: Mapping[str, Any]) -> Predicate:
    branches = _branches(value)
    return lambda x: any(branch(x) for branch in branches)


def _all_of(value: object, schema: Mapping[str, Any]) -> Predicate:
    branches = _branches(value)
    return lambda x: all(branch(x) for branch in branches)


def _one_of(value: object, schema: Mapping[str, Any]) -> Predicate:
    branches = _branches(value)
    return lambda x: sum(1 for branch in branches if branch(x)) == 1


def _branches(value: object) -> tuple[Predicate, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise _UnsupportedError("a list of schemas")
    return tuple(_compile(branch) for branch in value)


def _not(value: object, schema: Mapping[str, Any]) -> Predicate:
    check = _compile(value)
    return lambda x: not check(x)


def _if(value: object, schema: Mapping[str, Any]) -> Predicate:
    condition = _compile(value)
    then = _compile(schema.get("then", True))
    otherwise = _compile(schema.get("else", True))
    return lambda x: then(x) if condition(x) else otherwise(x)


def _items(value: object, schema: Mapping[str, Any]) -> Predicate:
    if "prefixItems" in schema:
        raise _UnsupportedError("items with prefixItems")
    check = _compile(value)
    return lambda x: type(x) is not list or all(check(item) for item in x)


def _min_items(value: object, schema: Mapping[str, Any]) -> Predicate:
    least = _count(value)
    return lambda x: type(x) is not list or len(x) >= least


def _max_items(value: object, schema: Mapping[str, Any]) -> Predicate:
    most = _count(value)
    return lambda x: type(x) is not list or len(x) <= most


_KEYWORDS: Final[Mapping[str, Callable[[object, Mapping[str, Any]], Predicate]]] = {
    "type": _type,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional_properties,
    "propertyNames": _property_names,
    "maxProperties": _max_properties,
    "minProperties": _min_properties,
    "minLength": _min_length,
    "maxLength": _max_length,
    "pattern": _pattern,
    "minimum": _minimum,
    "maximum": _maximum,
    "exclusiveMinimum": _exclusive_minimum,
    "exclusiveMaximum": _exclusive_maximum,
    "enum": _enum,
    "const": _const,
    "anyOf": _any_of,
    "allOf": _all_of,
    "oneOf": _one_of,
    "not": _not,
    "if": _if,
    "items": _items,
    "minItems": _min_items,
    "maxItems": _max_items,
}

COMPILED_KEYWORDS: Final = frozenset(_KEYWORDS) | _ANNOTATIONS | {"then", "else"}
"""The keywords :func:`compile_schema` reads; any other leaves a schema uncompiled."""
