"""Hypothesis strategies shared by the test modules."""

from __future__ import annotations

import enum
import functools
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import hypothesis_jsonschema
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from sandrail.core._budget import SHRINKABLE_FIELDS, fixed_size
from sandrail.core._definitions import (
    MAX_TIMEOUT_SECONDS,
    REFUSED_WITH_OWN_CODE,
    TASK_ID_PATTERN,
    ToolDefinition,
    code_tool_definitions,
    command_tool_definitions,
)
from sandrail.core._validation import ArgumentProblem

MAX_SAFE = 2**53 - 1

# Text without lone surrogates: what JSON text can carry.
json_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
escape_heavy_text = st.text(
    st.sampled_from(['"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "€", "😀", "a", "\u2028"]),
    max_size=40,
)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-MAX_SAFE, max_value=MAX_SAFE),
    st.floats(allow_nan=False, allow_infinity=False),
    json_text,
    escape_heavy_text,
)


def json_values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values as Python data (dict keys may hold any character)."""
    return st.recursive(
        json_scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.dictionaries(st.one_of(json_text, escape_heavy_text), children, max_size=5),
        ),
        max_leaves=max_leaves,
    )


identifiers = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=24
)


# ---------------------------------------------------------------------------
# Fault plans for the simulator


def fault_plans(max_faults: int = 4, max_occurrence: int = 6) -> st.SearchStrategy[Any]:
    """Fault plans with at most one fault per (effect, occurrence) slot."""
    from sandrail.interpreters._sim_faults import SANDBOX_EFFECT_NAMES
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan

    faults = st.builds(
        Fault,
        effect=st.sampled_from(SANDBOX_EFFECT_NAMES),
        occurrence=st.integers(0, max_occurrence),
        kind=st.sampled_from(list(FaultKind)),
        when=st.sampled_from(["before", "after"]),
    )
    return st.lists(faults, max_size=max_faults, unique_by=lambda f: (f.effect, f.occurrence)).map(
        lambda fs: FaultPlan(tuple(fs))
    )


# ---------------------------------------------------------------------------
# Budget: result contents and the text they carry

# Canonical JSON rejects lone surrogates, so no text holds one.
_any_char = st.characters(codec="utf-8")
multibyte_chars = st.sampled_from("éßЖ中文日本語한국어€∑😀🎉🚀𝄞")
_escape_char = st.sampled_from('"\\\n\r\t\b\f\x00\x01\x1f\x7f/ a')
_log_char = st.sampled_from("abcdefghij0123456789 :=-_/.[]\n")

_piece = st.one_of(
    st.text(_any_char, min_size=1, max_size=40),
    st.text(multibyte_chars, min_size=1, max_size=20),
    st.text(_escape_char, min_size=1, max_size=20),
    st.text(_log_char, min_size=1, max_size=80),
)


def _repeat(head: str, piece: str, times: int, tail: str) -> str:
    return head + piece * times + tail


small_texts = st.one_of(
    st.text(_any_char, max_size=30),
    st.text(multibyte_chars, max_size=40),
    st.text(_escape_char, max_size=40),
    st.builds(_repeat, st.text(_log_char, max_size=40), _piece, st.integers(0, 8), st.just("")),
)
"""Text from empty to a few hundred bytes: tiny, multi-byte, escape-heavy, log-like."""

_ends = st.text(_any_char, max_size=12) | st.text(_escape_char, max_size=12)
huge_texts = st.builds(_repeat, _ends, _piece, st.integers(100, 6000), _ends)
"""Text of up to a few hundred thousand characters, made cheaply by repetition."""

presentation_texts = st.one_of(small_texts, huge_texts)

result_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(_any_char, max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(_any_char, max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)
"""Any JSON value a result's fixed part may hold."""

_fixed_keys = st.text(_any_char, max_size=12).filter(lambda key: key not in SHRINKABLE_FIELDS)


@st.composite
def contents(draw: st.DrawFn) -> dict[str, Any]:
    """A result content: shrinkable text fields, sometimes non-text values under
    shrinkable names, and any number of fixed fields."""
    content: dict[str, Any] = draw(st.dictionaries(_fixed_keys, result_json_values, max_size=4))
    for key in SHRINKABLE_FIELDS:
        value = draw(
            st.one_of(
                st.just(None),
                presentation_texts,
                presentation_texts,
                result_json_values.filter(bool),
            )
        )
        if value is not None:
            content[key] = value
    return content


@st.composite
def contents_and_budgets(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """A content and a budget: anywhere from 256 up, or near its fixed size."""
    content = draw(contents())
    fixed = fixed_size(content)
    budget = draw(
        st.one_of(
            st.integers(256, 60_000),
            st.integers(max(0, fixed - 3), fixed + 120),
            st.integers(fixed, fixed + 2_000),
        )
    )
    return content, budget


sandbox_ids = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789"), min_size=1, max_size=128
)


@st.composite
def locators(draw: st.DrawFn) -> dict[str, Any]:
    """The identity part of an uncertain result: owner identity, session, operation, call."""
    identity: dict[str, Any]
    if draw(st.booleans()):
        identity = {"agent_id": draw(st.text(_any_char, min_size=1, max_size=64))}
    else:
        identity = {
            "scope": draw(
                st.dictionaries(st.text(_any_char, max_size=8), result_json_values, max_size=3)
            ),
            "run_id": draw(st.text(_any_char, max_size=40)),
            "turn_id": draw(st.text(_any_char, max_size=40)),
            "build_id": draw(st.text(_any_char, max_size=40)),
            "task_chain_id": draw(st.text(_any_char, max_size=40)),
            "parent_run_id": draw(st.none() | st.text(_any_char, max_size=40)),
            "execution_fence": draw(st.integers(0, 2**53 - 1)),
        }
    return {
        **identity,
        "session_id": draw(st.text(_any_char, min_size=1, max_size=64)),
        "operation_key": draw(st.text(_any_char, min_size=1, max_size=128)),
        "call_id": draw(st.text(_any_char, min_size=1, max_size=64)),
    }


# ---------------------------------------------------------------------------
# Tool definitions and arguments

foreground_timeouts = st.integers(min_value=1, max_value=MAX_TIMEOUT_SECONDS)


@st.composite
def tool_definitions(draw: st.DrawFn) -> ToolDefinition:
    """Any of our definitions, for any foreground timeout and owner mode."""
    foreground = draw(foreground_timeouts)
    every = command_tool_definitions(foreground) + code_tool_definitions(
        foreground, agent_owner=draw(st.booleans())
    )
    return draw(st.sampled_from(every))


# Junk of every kind, for the equality check that must never raise.


class Raising:
    """An object that fails however it is compared, hashed or read."""

    def __str__(self) -> str:
        raise RuntimeError("str")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        raise RuntimeError("hash")


class UnreadableDict(dict[str, Any]):
    def items(self) -> Any:
        raise RuntimeError("items")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iter")


junk_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(st.characters(exclude_categories=()))
)
junk_odd_values = (
    st.builds(object)
    | st.builds(Raising)
    | st.sampled_from(
        [UnreadableDict(a=1), b"bytes", frozenset({1, 2}), 1j, math.nan, math.inf, 10**400]
    )
)
junk = st.recursive(
    junk_scalars | junk_odd_values,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=4)
    ),
    max_leaves=20,
)


# Arguments, valid and not, for argument validation.

DEFINITIONS: dict[str, ToolDefinition] = {
    definition.name: definition
    for definition in command_tool_definitions()
    + code_tool_definitions()
    + code_tool_definitions(agent_owner=True)
}
DEFINITIONS_WITH_FIELDS = [
    d for d in DEFINITIONS.values() if d.to_dict()["parameters"]["properties"]
]


def valid_arguments(definition: ToolDefinition) -> st.SearchStrategy[Any]:
    """Arguments drawn from the definition's own schema by hypothesis-jsonschema
    (an independent reading of JSON Schema, not ours)."""
    return _schema_strategy(definition)


@functools.cache
def _schema_strategy(definition: ToolDefinition) -> st.SearchStrategy[Any]:
    return hypothesis_jsonschema.from_schema(definition.to_dict()["parameters"])


@functools.cache
def jsonschema_values(schema_json: str) -> st.SearchStrategy[Any]:
    """hypothesis-jsonschema's values for a schema given as JSON text."""
    return hypothesis_jsonschema.from_schema(json.loads(schema_json))


argument_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def one_bad_field(draw: st.DrawFn) -> tuple[ToolDefinition, dict[str, Any], str]:
    """Valid arguments with exactly one field replaced by a value its schema
    refuses (by a rule argument validation reports: the rules the port answers
    with codes of their own are left to it)."""
    definition = draw(st.sampled_from(DEFINITIONS_WITH_FIELDS))
    arguments = draw(valid_arguments(definition))
    properties = definition.to_dict()["parameters"]["properties"]
    name = draw(st.sampled_from(sorted(properties)))
    schema = dict(properties[name])
    for rule in REFUSED_WITH_OWN_CODE.get(definition.name, ()):
        if rule[:2] == ("properties", name) and len(rule) == 3:
            schema.pop(rule[2], None)
    field = Draft202012Validator(schema)
    arguments[name] = draw(argument_json_values.filter(lambda value: not field.is_valid(value)))
    return definition, arguments, name


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
    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def strip(self, chars: str | None = None) -> str:
        raise RuntimeError("strip")


class HostileInt(int):
    def __repr__(self) -> str:
        raise RuntimeError("repr")


class UnreadableMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("getitem")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iter")

    def __len__(self) -> int:
        return 1


class LyingList(list[Any]):
    def __len__(self) -> int:
        return 10**6


class Color(enum.IntEnum):
    RED = 5


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

problems_lists = st.lists(
    st.builds(
        ArgumentProblem,
        st.text(st.characters(exclude_categories=()), max_size=600)
        | st.text(max_size=3).map(lambda t: t * 5000),
        st.text(st.characters(exclude_categories=()), max_size=400),
    ),
    max_size=80,
)


# Values drawn from a JSON Schema, for the schema-honesty property.
#
# Strategy: hypothesis-jsonschema is the independent reading (a cross-check
# draws from it), but it rebuilds strategies on every draw (about 20 ms each),
# too slow for 500 draws per tool and profile. This compiler covers exactly
# the keywords sandrail's schemas use, refuses any other keyword (so a new
# rule cannot be skipped silently), and leans on edges: bounds, lengths at
# their limits, names next to the reserved ones.

_ANNOTATIONS = frozenset({"description", "title", "default"})
_HANDLED = frozenset(
    {
        "type",
        "anyOf",
        "enum",
        "const",
        "minimum",
        "maximum",
        "pattern",
        "minLength",
        "maxLength",
        "items",
        "minItems",
        "maxItems",
        "properties",
        "required",
        "additionalProperties",
        "propertyNames",
        "maxProperties",
        "if",
        "then",
        "else",
    }
)


def schema_values(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid under ``schema`` (sandrail's JSON Schema subset; patterns
    read as ECMA-262). Raises ``ValueError`` for a keyword it does not know."""
    unknown = set(schema) - _HANDLED - _ANNOTATIONS
    if unknown:
        raise ValueError(f"schema_values does not know {sorted(unknown)}")
    if "anyOf" in schema:
        return st.one_of([schema_values(branch) for branch in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema["type"]
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        edges = [value for value in (low, high) if value is not None]
        return st.integers(low, high) | st.sampled_from(edges or [0])
    if kind == "string":
        return _strings(schema)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        most = min(schema.get("maxItems", 6), 6)
        return st.lists(
            schema_values(schema["items"]), min_size=schema.get("minItems", 0), max_size=most
        )
    assert kind == "object", kind
    return _objects(schema)


def _strings(schema: Mapping[str, Any]) -> st.SearchStrategy[str]:
    least, most = schema.get("minLength", 0), schema.get("maxLength")
    if schema.get("pattern") == TASK_ID_PATTERN and most is None and least == 0:
        # Exactly the strings the pattern matches, drawn as 32 bytes in one
        # choice instead of 64 (hypothesis's cost is per choice).
        return st.binary(min_size=32, max_size=32).map(bytes.hex)
    if "pattern" in schema:
        from sandrail.core._validation import ecma_regex

        regex = ecma_regex(schema["pattern"])
        drawn = st.from_regex(regex)
        if most is not None:
            # Also the longest legal strings: the shortest match padded by repeating a
            # character the pattern allows where it repeats (checked by the filter).
            drawn = drawn | st.builds(lambda text: text * (most // max(len(text), 1)), drawn)
        return drawn.filter(
            lambda text: least <= len(text) <= (most or len(text)) and regex.search(text)
        )
    short = st.text(min_size=least, max_size=least + 20)
    if most is None:
        return short
    return short | st.builds(lambda char: char * most, st.characters(codec="utf-8"))


def _objects(schema: Mapping[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    if isinstance(extra, Mapping):
        names = schema.get("propertyNames", {})
        keys = _strings({"type": "string", **names}) | st.sampled_from(_NEAR_RESERVED).filter(
            lambda name: _matches(names, name)
        )
        most = min(schema.get("maxProperties", 6), 6)
        drawn: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
            keys, schema_values(extra), max_size=most
        )
    else:
        assert extra is False, "open objects are not sandrail's"
        drawn = st.fixed_dictionaries(
            {name: schema_values(properties[name]) for name in sorted(required)},
            optional={
                name: schema_values(field)
                for name, field in properties.items()
                if name not in required
            },
        )
    if "if" in schema:
        validator = Draft202012Validator(
            {key: schema[key] for key in ("if", "then", "else") if key in schema}
        )
        drawn = drawn.filter(validator.is_valid)
    return drawn


def _matches(names: Mapping[str, Any], name: str) -> bool:
    from sandrail.core._validation import ecma_regex

    pattern = names.get("pattern")
    return (pattern is None or bool(ecma_regex(pattern).search(name))) and len(name) <= names.get(
        "maxLength", len(name)
    )


def _near_reserved() -> list[str]:
    from sandrail.core._env import RESERVED_ENV_NAMES, RESERVED_ENV_PREFIXES

    near: set[str] = set()
    for word in [*RESERVED_ENV_NAMES, *RESERVED_ENV_PREFIXES]:
        for cut in range(1, len(word) + 1):
            near.update({word[:cut], word[:cut] + "X", word[:cut] + "_", word[:cut] + "9"})
        near.update({word + "A", "A" + word, word.lower()})
    return sorted(near)


_NEAR_RESERVED = _near_reserved()
