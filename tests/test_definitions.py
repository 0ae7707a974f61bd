"""Tool definitions: names per owner mode, schemas, metadata,
round trips and the request-definition equality check."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from sandrail.core import (
    CODE_TOOL_NAMES,
    COMMAND_TOOL_NAMES,
    TOOL_NAMES,
    TOOLS,
    ToolKind,
    code_tool_definitions,
    command_tool_definitions,
)
from sandrail.core._canonical import canonical_json
from sandrail.core._definitions import (
    COMMAND_PATTERN,
    DEFAULT_MAX_OUTPUT_BYTES,
    LANGUAGE_ALIASES,
    LANGUAGES,
    MAX_ENV_ENTRIES,
    MAX_ENV_NAME_LENGTH,
    MAX_ENV_VALUE_LENGTH,
    MAX_TIMEOUT_SECONDS,
    MIN_MAX_OUTPUT_BYTES,
    NO_NUL_PATTERN,
    READ_MAX_BYTES,
    RETAINED_OUTPUT_LIMIT,
    SANDBOX_ID_PATTERN,
    SHELL_WHITESPACE,
    TASK_ID_PATTERN,
    ToolDefinition,
    definitions_equal,
    resolve_language,
)
from sandrail.core._env import ENV_NAME_PATTERN
from sandrail.testing.strategies import (
    Raising,
    UnreadableDict,
    foreground_timeouts,
    junk,
    tool_definitions,
)


def _leaf_paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaf_paths(item, (*path, index))
    else:
        yield path


def _edited(value: Any) -> Any:
    """A different JSON value (by canonical form) of a similar kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    return "edited"


# --- owner modes and names ------------------------------------------------------------


def test_tool_sets_have_the_reference_names_per_owner_mode() -> None:
    assert tuple(d.name for d in command_tool_definitions()) == COMMAND_TOOL_NAMES
    assert [d.name for d in code_tool_definitions()] == ["run_code"]
    assert [d.name for d in code_tool_definitions(agent_owner=True)] == ["sandbox_run_code"]
    assert TOOL_NAMES == COMMAND_TOOL_NAMES + CODE_TOOL_NAMES


# --- schemas ---------------------------------------------------------------------------


@pytest.mark.untraced
@given(tool_definitions())
def test_every_schema_is_a_closed_draft_2020_12_object_schema(definition: ToolDefinition) -> None:
    check_schema(definition)


def check_schema(definition: ToolDefinition) -> None:
    """What every tool's schema is, in every profile: a closed Draft
    2020-12 object schema, each property described, each default valid."""
    schema = definition.to_dict()["parameters"]
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) <= set(schema["properties"])
    for name, field in schema["properties"].items():
        assert field["description"].strip(), name
        if "default" in field:
            assert Draft202012Validator(field).is_valid(field["default"]), name


def test_schemas_carry_the_reference_limits() -> None:
    schemas = {d.name: d.to_dict()["parameters"] for d in command_tool_definitions()}
    status, run = schemas["sandbox_status"], schemas["run_command"]
    read, stop = schemas["read_command_output"], schemas["stop_command"]
    (code,) = (d.to_dict()["parameters"] for d in code_tool_definitions())
    assert status["properties"] == {}
    assert status["required"] == []

    props = run["properties"]
    assert run["required"] == ["command"]
    assert props["command"]["type"] == "string"
    assert props["command"]["minLength"] == 1
    assert props["background"]["type"] == "boolean"
    for name in ("timeout", "background_timeout"):
        seconds, null = props[name]["anyOf"]
        assert seconds == {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECONDS}
        assert null == {"type": "null"}
    env, null = props["env"]["anyOf"]
    assert env == {
        "type": "object",
        "propertyNames": {"pattern": ENV_NAME_PATTERN, "maxLength": MAX_ENV_NAME_LENGTH},
        "additionalProperties": {
            "type": "string",
            "pattern": NO_NUL_PATTERN,
            "maxLength": MAX_ENV_VALUE_LENGTH,
        },
        "maxProperties": MAX_ENV_ENTRIES,
    }
    assert props["cwd"]["anyOf"] == [
        {"type": "string", "pattern": NO_NUL_PATTERN},
        {"type": "null"},
    ]
    assert props["command"]["pattern"] == COMMAND_PATTERN
    assert run["if"] == {"properties": {"background": {"const": True}}, "required": ["background"]}
    assert run["else"] == {"properties": {"background_timeout": {"type": "null"}}}

    props = read["properties"]
    assert read["required"] == ["task_id"]
    assert props["task_id"]["pattern"] == TASK_ID_PATTERN
    for name in ("stdout_cursor", "stderr_cursor"):
        assert (props[name]["minimum"], props[name]["maximum"]) == (0, 2**53 - 1)
    assert (props["max_bytes"]["minimum"], props["max_bytes"]["maximum"]) == (4, 65536)
    assert props["max_bytes"]["default"] == READ_MAX_BYTES == 65536
    assert (props["wait_seconds"]["minimum"], props["wait_seconds"]["maximum"]) == (0, 600)

    assert stop["required"] == ["task_id"]
    assert set(stop["properties"]) == {"task_id"}

    assert code["required"] == ["code"]
    assert set(code["properties"]) == {"code", "language", "timeout", "env"}
    assert code["properties"]["language"] == {
        **code["properties"]["language"],
        "type": "string",
        "default": "python",
        "enum": [
            "python",
            "javascript",
            "bash",
            "py",
            "python3",
            "js",
            "node",
            "nodejs",
            "sh",
            "shell",
        ],
    }


def test_env_limits_keep_every_entry_under_the_kernel_limit() -> None:
    """A NAME=VALUE string of 128 KiB or more cannot be passed to exec; the
    character limits the schema states keep the worst case (4 UTF-8 bytes a
    value character) below it."""
    assert MAX_ENV_NAME_LENGTH + 1 + 4 * MAX_ENV_VALUE_LENGTH < 128 * 1024


def test_blank_means_what_str_strip_removes() -> None:
    everything = (chr(code) for code in range(0x110000))
    assert "".join(char for char in everything if char.isspace()) == SHELL_WHITESPACE


def test_module_constants_match_design_limits() -> None:
    assert MAX_TIMEOUT_SECONDS == 86_400
    assert DEFAULT_MAX_OUTPUT_BYTES == 24_000
    assert MIN_MAX_OUTPUT_BYTES == 256
    assert RETAINED_OUTPUT_LIMIT == 16 * 1024 * 1024
    assert SANDBOX_ID_PATTERN == r"^[A-Za-z0-9_-]{1,128}$"
    assert TASK_ID_PATTERN == r"^[a-f0-9]{64}$"


# --- metadata ----------------------------------------------------------------------------


@given(foreground_timeouts)
def test_metadata_per_tool(foreground: int) -> None:
    """Each tool's metadata is the one its record's definition has at the
    default foreground timeout (pinned, tool by tool, in
    ``tests/test_tools.py``), whatever the foreground timeout, but for a
    launch's own timeout, which is 20 s over the foreground one."""
    for name, record in TOOLS.items():
        definition, default = record.define(foreground), record.define(300)
        assert definition.read_only is default.read_only, name
        assert definition.concurrent_safe is definition.read_only, name
        assert definition.permissions == default.permissions, name
        assert definition.recovery_policy == default.recovery_policy, name
        assert definition.background_command_policy == default.background_command_policy, name
        if record.kind is ToolKind.LAUNCHES:
            assert definition.timeout_ms == foreground * 1000 + 20_000, name
        else:
            assert definition.timeout_ms == default.timeout_ms, name
        as_dict = definition.to_dict()
        assert ("recovery_policy" in as_dict) is (definition.recovery_policy is not None)
        assert ("background_command_policy" in as_dict) is (
            definition.background_command_policy is not None
        )


@pytest.mark.parametrize("foreground", [0, -1, MAX_TIMEOUT_SECONDS + 1, True, 1.0, "300", None])
def test_foreground_timeout_outside_1_to_86400_is_refused(foreground: Any) -> None:
    with pytest.raises(ValueError, match="foreground_timeout_seconds"):
        command_tool_definitions(foreground)
    with pytest.raises(ValueError, match="foreground_timeout_seconds"):
        code_tool_definitions(foreground, agent_owner=True)


def test_foreground_timeout_bounds_are_inclusive() -> None:
    assert command_tool_definitions(1)[1].timeout_ms == 21_000
    assert code_tool_definitions(MAX_TIMEOUT_SECONDS)[0].timeout_ms == 86_420_000


# --- round trips and immutability -------------------------------------------------------


@pytest.mark.untraced
@given(tool_definitions())
def test_to_dict_from_dict_round_trip(definition: ToolDefinition) -> None:
    data = definition.to_dict()
    again = ToolDefinition.from_dict(data)
    assert again == definition
    assert hash(again) == hash(definition)
    assert again.to_dict() == data
    assert canonical_json(again.to_dict()) == canonical_json(data)


@given(tool_definitions())
def test_to_dict_is_fresh_and_parameters_are_read_only(definition: ToolDefinition) -> None:
    first = definition.to_dict()
    first["parameters"]["properties"]["injected"] = {"type": "string"}
    first["parameters"]["required"].append("injected")
    first["permissions"].append("sandbox:everything")
    assert definition.to_dict() != first
    with pytest.raises(TypeError):
        definition.parameters["type"] = "array"  # type: ignore[index]
    with pytest.raises(TypeError):
        definition.parameters["properties"]["x"] = {}


def test_construction_copies_the_schema_it_is_given() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    definition = ToolDefinition.from_dict(
        {**command_tool_definitions()[0].to_dict(), "parameters": schema}
    )
    schema["properties"]["late"] = {"type": "string"}
    assert definition.to_dict()["parameters"]["properties"] == {}


def test_parameters_equality_is_json_equality() -> None:
    base = command_tool_definitions()[0].to_dict()
    with_true = {**base, "parameters": {**base["parameters"], "x-flag": True}}
    with_one = {**base, "parameters": {**base["parameters"], "x-flag": 1}}
    assert ToolDefinition.from_dict(with_true) != ToolDefinition.from_dict(with_one)


_MALFORMED_EDITS: list[tuple[str, Any]] = [
    ("name", 7),
    ("description", None),
    ("parameters", {"type": "object"}),
    ("parameters", {"type": "array", "additionalProperties": False}),
    ("parameters", {"type": "object", "additionalProperties": False, "x": {1: 2}}),
    ("parameters", {"type": "object", "additionalProperties": False, "x": object()}),
    ("parameters", "schema"),
    ("read_only", 1),
    ("concurrent_safe", "yes"),
    ("permissions", "sandbox:execute"),
    ("permissions", [1]),
    ("timeout_ms", 0),
    ("timeout_ms", True),
    ("timeout_ms", 1.5),
    ("recovery_policy", 3),
    ("background_command_policy", ["x"]),
]


@pytest.mark.parametrize(("key", "value"), _MALFORMED_EDITS)
def test_from_dict_refuses_malformed_fields(key: str, value: Any) -> None:
    data = command_tool_definitions()[1].to_dict()
    data[key] = value
    with pytest.raises(ValueError, match="malformed tool definition"):
        ToolDefinition.from_dict(data)


def test_from_dict_refuses_unknown_and_missing_keys_and_non_objects() -> None:
    data = command_tool_definitions()[1].to_dict()
    with pytest.raises(ValueError, match="unknown tool definition keys: context_role"):
        ToolDefinition.from_dict({**data, "context_role": "none"})
    del data["timeout_ms"]
    with pytest.raises(ValueError, match="malformed"):
        ToolDefinition.from_dict(data)
    with pytest.raises(ValueError, match="must be a JSON object"):
        ToolDefinition.from_dict(["run_command"])


# --- definitions_equal ------------------------------------------------------------------


@given(tool_definitions())
def test_definitions_equal_accepts_ours_and_its_dict_form(definition: ToolDefinition) -> None:
    assert definitions_equal(definition, definition)
    assert definitions_equal(definition.to_dict(), definition)
    assert definitions_equal(ToolDefinition.from_dict(definition.to_dict()), definition)
    assert definitions_equal(copy.deepcopy(definition.to_dict()), definition)


@given(tool_definitions(), st.data())
def test_definitions_equal_refuses_any_single_field_edit(
    definition: ToolDefinition, data: st.DataObject
) -> None:
    supplied = definition.to_dict()
    paths = [path for path in _leaf_paths(supplied) if path]
    path = data.draw(st.sampled_from(paths))
    target = supplied
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = _edited(target[path[-1]])
    assert not definitions_equal(supplied, definition)


@given(tool_definitions(), st.sampled_from(["drop", "add", "null_policy"]))
def test_definitions_equal_refuses_dropped_added_or_nulled_keys(
    definition: ToolDefinition, edit: str
) -> None:
    supplied = definition.to_dict()
    if edit == "drop":
        del supplied["timeout_ms"]
    elif edit == "add":
        supplied["context_role"] = "none"
    else:
        supplied.setdefault("recovery_policy", None)
        supplied.setdefault("background_command_policy", None)
    assert not definitions_equal(supplied, definition)


@pytest.mark.untraced
@given(junk, tool_definitions())
def test_definitions_equal_never_raises_for_junk(supplied: Any, definition: ToolDefinition) -> None:
    assert definitions_equal(supplied, definition) is False


def test_definitions_equal_survives_hostile_mappings() -> None:
    definition = command_tool_definitions()[0]
    looped: dict[str, Any] = definition.to_dict()
    looped["parameters"]["self"] = looped
    assert not definitions_equal(UnreadableDict(definition.to_dict()), definition)
    assert not definitions_equal(looped, definition)
    assert not definitions_equal({**definition.to_dict(), "name": Raising()}, definition)


# --- languages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "python"),
        ("", "python"),
        ("python", "python"),
        ("  PY ", "python"),
        ("Python3", "python"),
        ("js", "javascript"),
        ("Node", "javascript"),
        ("nodejs", "javascript"),
        ("JavaScript", "javascript"),
        ("sh", "bash"),
        ("\tSHELL\n", "bash"),
        ("bash", "bash"),
        ("   ", None),
        ("ruby", None),
        ("python 3", None),
        (3, None),
    ],
)
def test_resolve_language_follows_reference_aliases(value: Any, expected: str | None) -> None:
    assert resolve_language(value) == expected


def test_languages_name_suffix_and_runner() -> None:
    assert dict(LANGUAGES) == {
        "python": (".py", "python"),
        "javascript": (".js", "node"),
        "bash": (".sh", "bash"),
    }
    assert set(LANGUAGE_ALIASES.values()) <= set(LANGUAGES)


@given(st.text())
def test_resolve_language_is_total(value: str) -> None:
    assert resolve_language(value) in (None, *LANGUAGES)
