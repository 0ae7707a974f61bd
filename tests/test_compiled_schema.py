"""The compiled schemas of argument validation's fast path say
exactly what ``jsonschema`` says: on plain JSON data a compiled predicate
accepts a value if and only if jsonschema finds no error in it, for every
tool's schema in every profile and for schemas drawn at random; and
:func:`check_arguments` returns exactly the problems the whole way finds,
for any arguments at all (C5: a refused call ran nothing, so the reasons a
refusal gives must not depend on which path found it)."""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from sandrail.core import TOOLS
from sandrail.core._compiled_schema import (
    COMPILED_KEYWORDS,
    PLAIN_DEPTH,
    compile_schema,
    is_plain_json,
)
from sandrail.core._definitions import ToolDefinition
from sandrail.core._validation import (
    _checker_for,
    _problems,
    _to_plain_json,
    _Validator,
    check_arguments,
)
from sandrail.testing.strategies import (
    DEFINITIONS,
    PROFILES,
    anything,
    json_values,
    schema_values,
    tool_definitions,
)

_SCHEMAS: dict[str, dict[str, Any]] = {
    f"{profile}/{name}": json.loads(json.dumps(schema_of(definition)))
    for profile, schema_of in PROFILES.items()
    for name, definition in DEFINITIONS.items()
}
"""Every tool's arguments schema in every profile, as plain JSON."""

_EDGES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    1.0,
    1.5,
    -0.0,
    4,
    600,
    601,
    65_536,
    86_400,
    86_401,
    2**53 - 1,
    2**53,
    "",
    " ",
    "\t\n",
    "\x00",
    "a\x00b",
    "x",
    "a" * 64,
    "A" * 64,
    "python",
    "ruby",
    "PATH",
    "LD_PRELOAD",
    "1A",
    "é",
    [],
    [None],
    {},
    {"A": "x"},
    {"A": 1},
    {"PATH": "/bin"},
    [{"name": "A", "value": "x"}],
    [{"name": "A"}],
]
"""Values that sit on or next to the rules tool schemas state."""
_EDGES += [
    edge
    for scalar in _EDGES
    if not isinstance(scalar, list | dict)
    for edge in (
        [scalar],
        {"A": scalar},
        [{"name": "A", "value": scalar}],
        [{"name": scalar, "value": "x"}],
        *([{scalar: "x"}] if isinstance(scalar, str) else []),
    )
]

_edges = st.sampled_from(_EDGES)


@functools.cache
def _valid_values(schema_json: str) -> st.SearchStrategy[Any]:
    # Built once per schema: hypothesis validates a strategy when it is first drawn.
    return schema_values(json.loads(schema_json))


@st.composite
def _near(draw: st.DrawFn, schema: dict[str, Any]) -> Any:
    """A value valid under ``schema``, or one a small change away from it:
    a field replaced, dropped or added; most land on an edge of a rule."""
    value = draw(_valid_values(json.dumps(schema, sort_keys=True)))
    if not isinstance(value, dict) or draw(st.booleans()):
        return value
    names = sorted({*value, *schema.get("properties", {})})
    change = draw(st.sampled_from(["replace", "drop", "add"]))
    if change == "drop" and value:
        value.pop(draw(st.sampled_from(sorted(value))))
    elif change == "add":
        value[draw(st.text(max_size=4))] = draw(_edges)
    elif names:
        value[draw(st.sampled_from(names))] = draw(_edges | json_values(6))
    return value


def _jsonschema_accepts(schema: dict[str, Any], value: Any) -> bool:
    return not any(_Validator(schema).iter_errors(value))


def test_every_tool_schema_in_every_profile_compiles() -> None:
    """The fast path serves every tool sandrail defines, in every profile."""
    for name, schema in _SCHEMAS.items():
        assert compile_schema(schema) is not None, name


@pytest.mark.untraced
@pytest.mark.parametrize("name", sorted(_SCHEMAS))
def test_compiled_tool_schemas_agree_with_jsonschema_on_every_edge_of_every_field(
    name: str,
) -> None:
    """Each field of a minimal valid value, set to each edge in turn."""
    schema = _SCHEMAS[name]
    accepts = compile_schema(schema)
    assert accepts is not None
    base = _minimal(name, schema)
    for field in [*schema["properties"], "unknown"]:
        for edge in _EDGES:
            value = {**base, field: edge}
            assert is_plain_json(value)
            assert accepts(value) is _jsonschema_accepts(schema, value), value
        if field in base:
            value = {key: item for key, item in base.items() if key != field}
            assert accepts(value) is _jsonschema_accepts(schema, value) is False


def _minimal(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A minimal valid value of the tool ``name`` (``profile/tool``) in its
    profile: its record's example call, and ``null`` for each other field
    the profile requires (a strict profile's "not given")."""
    example = TOOLS[name.split("/", 1)[1]].example_arguments
    base = {field: example.get(field) for field in schema.get("required", ())}
    assert _jsonschema_accepts(schema, base), (name, base)
    return base


@pytest.mark.untraced
@pytest.mark.parametrize("name", sorted(_SCHEMAS))
@given(data=st.data())
def test_compiled_tool_schemas_accept_exactly_what_jsonschema_accepts(
    name: str, data: st.DataObject
) -> None:
    schema = _SCHEMAS[name]
    accepts = compile_schema(schema)
    assert accepts is not None
    value = data.draw(_near(schema))
    assume(is_plain_json(value))
    assert accepts(value) is _jsonschema_accepts(schema, value)


@pytest.mark.untraced
@given(tool_definitions(), st.data())
def test_check_arguments_fast_path_says_what_the_whole_way_says(
    definition: ToolDefinition, data: st.DataObject
) -> None:
    """For any arguments (valid, nearly valid, hostile, not JSON at all)."""
    schema = definition.to_dict()["parameters"]
    arguments = data.draw(_near(schema) | anything | st.dictionaries(st.text(), anything))
    validator = _checker_for(definition).validator
    assert check_arguments(definition, arguments) == _problems(definition, validator, arguments)


# --- schemas drawn at random --------------------------------------------------------


_names = st.sampled_from(["a", "b", "c"])
_numbers = st.sampled_from([0, 1, 2, -1, 1.5, 2.0, 10])
_scalars = st.sampled_from([None, True, False, 0, 1, 1.0, 2, "", "a", "ab", "b"])
_patterns = st.sampled_from(["^a", "b$", "^[ab]*$", "a|b", "^$", "^.{2}$"])


def _keywords(schemas: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """One keyword (with its value) of the compiled subset."""
    types = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array"])
    return st.one_of(
        st.builds(lambda t: {"type": t}, types | st.lists(types, min_size=1, max_size=3)),
        st.builds(lambda p: {"properties": p}, st.dictionaries(_names, schemas, max_size=3)),
        st.builds(lambda r: {"required": r}, st.lists(_names, max_size=3, unique=True)),
        st.builds(
            lambda a, p: {"additionalProperties": a, "properties": p},
            st.booleans() | schemas,
            st.dictionaries(_names, schemas, max_size=2),
        ),
        st.builds(lambda s: {"propertyNames": s}, schemas),
        st.builds(
            lambda k, n: {k: n},
            st.sampled_from(
                [
                    "maxProperties",
                    "minProperties",
                    "minLength",
                    "maxLength",
                    "minItems",
                    "maxItems",
                ]
            ),
            st.integers(0, 3),
        ),
        st.builds(lambda p: {"pattern": p}, _patterns),
        st.builds(
            lambda k, n: {k: n},
            st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
            _numbers,
        ),
        st.builds(
            lambda e: {"enum": e},
            st.lists(_scalars | st.lists(_scalars, max_size=2), min_size=1, max_size=4),
        ),
        st.builds(lambda c: {"const": c}, _scalars | st.dictionaries(_names, _scalars, max_size=2)),
        st.builds(
            lambda k, b: {k: b},
            st.sampled_from(["anyOf", "allOf", "oneOf"]),
            st.lists(schemas, min_size=1, max_size=3),
        ),
        st.builds(lambda s: {"not": s}, schemas),
        st.builds(
            lambda i, t, e: {"if": i, **t, **e},
            schemas,
            st.just({}) | st.builds(lambda s: {"then": s}, schemas),
            st.just({}) | st.builds(lambda s: {"else": s}, schemas),
        ),
        st.builds(lambda s: {"items": s}, schemas),
        st.just({"description": "annotations never decide"}),
    )


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    return merged


_schemas = st.recursive(
    st.booleans() | st.just({}),
    lambda inner: st.lists(_keywords(inner), min_size=1, max_size=3).map(_merge),
    max_leaves=6,
)

_small_values = st.recursive(
    _scalars | _numbers,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=6,
)


_SWEEP: list[Any] = [
    *(scalars := [None, True, False, 0, 1, -1, 1.0, 1.5, 2, 2.0, 10, -0.0, "", "a", "ab", "b"]),
    *([scalar] for scalar in scalars),
    *({name: scalar} for scalar in scalars for name in "ab"),
    [],
    {},
    {"a": "a", "b": "b"},
    {"c": 1},
    {"a": [1, "a"]},
    [1, 1.0],
    ["a", "b", "ab"],
]
"""Every scalar the drawn schemas name, alone and in a container."""


_TYPE_NAMES = ["string", "integer", "number", "boolean", "null", "object", "array"]
_ONE_KEYWORD: list[dict[str, Any]] = [
    *({"type": name} for name in _TYPE_NAMES),
    {"type": ["integer", "string"]},
    {"type": ["null", "boolean", "array"]},
    *(
        {keyword: bound}
        for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        for bound in (0, 1, 1.5, 2.0, -1)
    ),
    *(
        {keyword: count}
        for keyword in (
            "minLength",
            "maxLength",
            "minItems",
            "maxItems",
            "minProperties",
            "maxProperties",
        )
        for count in (0, 1, 2)
    ),
    *({"pattern": pattern} for pattern in ("^a", "b$", "^[ab]*$", "a|b", "^$", "^.{2}$")),
    *({"const": scalar} for scalar in (None, True, False, 0, 1, 1.0, "", "a", [1], {"a": 1})),
    {"enum": ["a", "b"]},
    {"enum": [1, True, None]},
    {"enum": [False, 0.0, [1.0], {"a": "a"}]},
    {"required": ["a"]},
    {"required": ["a", "b"]},
    {"properties": {"a": {"type": "integer"}, "b": False}},
    {"additionalProperties": False},
    {"additionalProperties": False, "properties": {"a": True}},
    {"additionalProperties": {"type": "string"}, "properties": {"a": {}}},
    {"propertyNames": {"pattern": "^a"}},
    {"propertyNames": {"maxLength": 0}},
    {"items": {"type": "integer"}},
    {"items": False},
    *({keyword: [{"type": "integer"}, {"minimum": 1}]} for keyword in ("anyOf", "allOf", "oneOf")),
    {"not": {"type": "string"}},
    {"if": {"type": "integer"}, "then": {"minimum": 1}},
    {"if": {"type": "integer"}, "else": {"type": "string"}},
    {"if": {"required": ["a"]}, "then": {"required": ["b"]}, "else": {"maxProperties": 0}},
    {"description": "annotations never decide"},
    True,
    False,
]
"""Each keyword of the subset alone, at values next to those the sweep holds."""


@pytest.mark.parametrize("schema", _ONE_KEYWORD, ids=json.dumps)
def test_each_keyword_alone_agrees_with_jsonschema(schema: Any) -> None:
    Draft202012Validator.check_schema(schema)
    accepts = compile_schema(schema)
    assert accepts is not None
    for value in _SWEEP:
        assert accepts(value) is _jsonschema_accepts(schema, value), value


@pytest.mark.untraced
@given(_schemas, st.lists(_small_values, max_size=8))
def test_compiled_schemas_agree_with_jsonschema_on_any_schema_of_the_subset(
    schema: Any, values: list[Any]
) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        assume(False)
    accepts = compile_schema(schema)
    assert accepts is not None
    for value in _SWEEP + values:
        assert accepts(value) is _jsonschema_accepts(schema, value), value


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "patternProperties": {"^a": {}}, "additionalProperties": False},
        {"$ref": "#/$defs/x", "$defs": {"x": {}}},
        {"type": "number", "multipleOf": 2},
        {"type": "array", "prefixItems": [{}], "items": False},
        {"type": "array", "uniqueItems": True},
        {"format": "email"},
        {"type": "strange"},
        {"enum": [float("nan")]},
        {"pattern": "("},
        "not a schema",
    ],
)
def test_schemas_outside_the_subset_are_left_to_jsonschema(schema: Any) -> None:
    assert compile_schema(schema) is None


def test_the_subset_is_named() -> None:
    assert {"type", "properties", "anyOf", "if", "pattern"} <= COMPILED_KEYWORDS
    assert "multipleOf" not in COMPILED_KEYWORDS


# --- plain JSON ------------------------------------------------------------------------


@pytest.mark.untraced
@given(anything | json_values(12))
def test_plain_json_is_what_the_whole_way_walks_without_a_problem_or_a_change(
    value: Any,
) -> None:
    """Whatever :func:`is_plain_json` accepts, the walker copies unchanged
    and finds nothing wrong with: the two paths judge the same data."""
    if not is_plain_json(value) or type(value) is not dict:
        return
    walked = _to_plain_json(value)
    assert not isinstance(walked, tuple) or not walked[1]
    assert isinstance(walked, tuple)
    assert json.dumps(walked[0], sort_keys=True) == json.dumps(value, sort_keys=True)


@pytest.mark.parametrize(
    "value",
    [
        {"a": "\ud800"},
        {"\udc00": 1},
        {"a": math.nan},
        {"a": math.inf},
        {"a": (1, 2)},
        {1: "a"},
        {"a": object()},
        {"a": type("S", (str,), {})("x")},
        {"a": type("D", (dict,), {})()},
    ],
)
def test_what_is_not_plain_json(value: Any) -> None:
    assert not is_plain_json(value)


def test_deep_or_large_data_is_not_plain() -> None:
    deep: Any = "leaf"
    for _ in range(PLAIN_DEPTH + 1):
        deep = [deep]
    assert not is_plain_json(deep)
    assert not is_plain_json({"a": list(range(20_000))})
    assert is_plain_json({"a": list(range(100))})


# --- the cache ---------------------------------------------------------------------------


def test_equal_definitions_share_one_checker_built_once() -> None:
    """Keyed by digest: a second port's equal definitions (other objects)
    find the checker without comparing schemas."""
    definition = DEFINITIONS["run_command"]
    rebuilt = ToolDefinition.from_dict(definition.to_dict())
    assert rebuilt is not definition
    assert _checker_for(rebuilt) is _checker_for(definition)
    assert _checker_for(definition).accepts is not None


def test_checkers_never_mistake_true_for_one() -> None:
    """A cache keyed by Python value would hand one schema's checker to the
    other (``True == 1`` and they hash alike); keyed by the definition's
    digest (canonical JSON, where ``true`` is not ``1``), each keeps its own."""
    base = DEFINITIONS["run_command"].to_dict()
    made = []
    for const in (True, 1):
        data = json.loads(json.dumps(base))
        data["parameters"]["properties"]["flag"] = {"const": const}
        made.append(ToolDefinition.from_dict(data))
    as_true, as_one = made
    assert as_true.digest != as_one.digest
    assert _checker_for(as_true) is not _checker_for(as_one)
    arguments = {"command": "x", "flag": 1}
    assert check_arguments(as_one, arguments) == ()
    assert [problem.path for problem in check_arguments(as_true, arguments)] == ["arguments.flag"]
    assert check_arguments(as_true, {"command": "x", "flag": True}) == ()
