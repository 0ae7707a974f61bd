"""Honest schemas: an argument a tool's schema accepts is never
refused as invalid, in every profile and owner mode; the strict profiles are
what strict vendors take, and the port takes their arguments back."""

from __future__ import annotations

import json
import pickle
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sandrail
from sandrail.core import (
    COMMAND_TOOL_NAMES,
    PROFILES,
    TOOLS,
    VENDOR_UNSUPPORTED,
    ErrorCode,
    Profile,
    ToolResult,
    canonical_arguments,
    code_tool_definitions,
    command_tool_definitions,
    stated_schema,
    tool_schema,
)
from sandrail.core._definitions import TASK_ID_PATTERN
from sandrail.core._env import (
    ENV_NAME_PATTERN,
    REFUSED_ENV_NAMES,
    RESERVED_ENV_PREFIXES,
    SHELL_OWNED_ENV_NAMES,
    env_name_problem,
)
from sandrail.core._env_strict import STRICT_ENV_NAME_PATTERN
from sandrail.core._profiles import _PATTERN_WORDS, VENDOR_PATTERNS
from sandrail.core._validation import ecma_regex
from sandrail.interpreters.simulator import Simulator
from sandrail.testing import native_identity
from sandrail.testing.strategies import schema_values
from tests.embed_rig import ARGUMENT_ERRORS
from tests.jsonschema_draws import jsonschema_values

TOOLS_WITH_ARGUMENTS = (
    *(name for name in COMMAND_TOOL_NAMES if TOOLS[name].define(300).parameters["properties"]),
    "code",  # the code tool of each owner mode (see _name)
)


def _honesty_examples() -> int:
    """At least 500 draws a tool and profile in the ci and campaign profiles."""
    configured = settings.default.max_examples
    return max(configured, 500) if configured >= 300 else configured


def _deny(request: object) -> sandrail.Deny:
    return sandrail.Deny(reason="honesty check: arguments passed")


def _toolset(owner_mode: str) -> sandrail.Toolset:
    common: dict[str, Any] = {
        "backend": Simulator(),
        "session_id": "honesty",
        "authorize": _deny,
        "assert_authority": lambda request: True,
    }
    if owner_mode == "agent":
        return sandrail.Toolset(owner=sandrail.AgentOwner(agent_id="agent-1"), **common)
    scope = {"tenant": "t1"}
    owner = sandrail.NativeOwner(scope=scope)
    return sandrail.Toolset(owner=owner, identity=native_identity(scope=scope), **common)


TOOLSETS = {mode: _toolset(mode) for mode in ("agent", "native")}


def _name(tool: str, owner_mode: str) -> str:
    if tool != "code":
        return tool
    return "sandbox_run_code" if owner_mode == "agent" else "run_code"


def _definition(name: str) -> sandrail.ToolDefinition:
    return TOOLS[name].define(300)


def _assert_accepted(result: ToolResult) -> None:
    assert result.error_type not in ARGUMENT_ERRORS, result.to_json()
    # Denied by policy: every argument check ran, and passed, before the policy.
    assert result.error_type == ErrorCode.POLICY_DENIED.value, result.to_json()


@pytest.mark.untraced
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("tool", TOOLS_WITH_ARGUMENTS)
def test_schema_valid_arguments_are_never_refused_as_invalid(tool: str, profile: Profile) -> None:
    """The property: every argument drawn from a tool's stated schema, in each
    profile and owner mode, passes every argument check of the port."""
    drawn = st.one_of(
        [
            st.tuples(
                st.just(mode),
                schema_values(stated_schema(TOOLSETS[mode].definition(_name(tool, mode)), profile)),
            )
            for mode in sorted(TOOLSETS)
        ]
    )

    @settings(
        max_examples=_honesty_examples(),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(drawn)
    def check(case: tuple[str, dict[str, Any]]) -> None:
        mode, arguments = case
        toolset = TOOLSETS[mode]
        result = toolset.call_sync(
            _name(tool, mode),
            arguments,
            call_id="c1",
            operation_key=toolset.operation_key("c1"),
            profile=profile,
        )
        _assert_accepted(result)

    check()


@pytest.mark.untraced
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("tool", TOOLS_WITH_ARGUMENTS)
def test_cross_check_with_hypothesis_jsonschema(tool: str, profile: Profile) -> None:
    """The same property drawn by hypothesis-jsonschema, an independent
    reading of JSON Schema (fewer draws: it rebuilds strategies per draw)."""
    definition = TOOLSETS["agent"].definition(_name(tool, "agent"))
    # hypothesis-jsonschema rebuilds a pattern's strategy on every draw; the
    # lookaround form of the env-name rule matches the same names (tested
    # below) and is 20 times shorter.
    schema = json.dumps(stated_schema(definition, profile)).replace(
        json.dumps(STRICT_ENV_NAME_PATTERN), json.dumps(ENV_NAME_PATTERN)
    )

    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
    @given(jsonschema_values(schema))
    def check(arguments: dict[str, Any]) -> None:
        toolset = TOOLSETS["agent"]
        result = toolset.call_sync(
            definition.name, arguments, call_id="c1", operation_key="k", profile=profile
        )
        _assert_accepted(result)

    check()


def test_sandbox_status_takes_only_the_empty_object() -> None:
    for profile in PROFILES:
        for mode, toolset in TOOLSETS.items():
            result = toolset.call_sync(
                "sandbox_status", {}, call_id="c", operation_key="k", profile=profile
            )
            _assert_accepted(result)
            assert (
                stated_schema(toolset.definition("sandbox_status"), profile)["properties"] == {}
            ), mode


# --- the strict profiles ----------------------------------------------------------------

DEFINITIONS = (
    command_tool_definitions() + code_tool_definitions() + code_tool_definitions(agent_owner=True)
)


def _walk(node: Any) -> list[dict[str, Any]]:
    found = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


@pytest.mark.parametrize("profile", ["openai-strict", "anthropic-strict"])
@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.name)
def test_strict_profiles_are_closed_required_and_nullable(
    definition: Any, profile: Profile
) -> None:
    schema = tool_schema(definition, profile)
    for node in _walk(schema):
        if node.get("type") == "object":
            assert node["additionalProperties"] is False
            assert node["required"] == list(node["properties"])
        for banned in ("default", "propertyNames", "maxProperties", "if", "else", "allOf", "oneOf"):
            assert banned not in node
        for lookaround in ("(?=", "(?!", "(?<=", "(?<!"):
            assert lookaround not in node.get("pattern", "")
        for kept in VENDOR_UNSUPPORTED[profile] & set(node):
            assert kept == "pattern"  # one Anthropic documents it takes
            assert node["pattern"] in VENDOR_PATTERNS[profile]
    root = schema["properties"]
    full = definition.to_dict()["parameters"]
    for name, field in root.items():
        if name not in full["required"]:
            assert {"type": "null"} in field["anyOf"], name
    if "env" in root:
        listed = root["env"]["anyOf"][0]
        assert listed["type"] == "array"
        assert set(listed["items"]["properties"]) == {"name", "value"}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.name)
def test_the_handed_schema_states_every_dropped_rule_in_words(
    definition: Any, profile: Profile
) -> None:
    """What a vendor cannot take as a keyword the model still reads."""
    handed, stated = tool_schema(definition, profile), stated_schema(definition, profile)
    dropped = [node for node in _walk(stated) if VENDOR_UNSUPPORTED[profile] & set(node)]
    text = json.dumps(handed)
    for node in dropped:
        for key in VENDOR_UNSUPPORTED[profile] & set(node):
            if key == "pattern" and node[key] in VENDOR_PATTERNS[profile]:
                assert json.dumps(node[key])[1:-1] in text  # kept as a keyword
            elif key == "pattern" and node[key] in _PATTERN_WORDS:
                assert json.dumps(_PATTERN_WORDS[node[key]])[1:-1] in text
            else:
                assert json.dumps(f"{node[key]}")[1:-1] in text
    assert json.loads(json.dumps(handed)) == handed
    assert pickle.loads(pickle.dumps(handed)) == handed
    handed["properties"]["mutated"] = True  # a fresh copy: nothing here changes
    assert "mutated" not in tool_schema(definition, profile)["properties"]


def test_the_strict_env_name_rule_is_the_full_one_without_lookaround() -> None:
    pattern = ecma_regex(STRICT_ENV_NAME_PATTERN)
    near: set[str] = {"", "_", "a", "9", "é", "A B", "FOO\n"}
    for word in [*REFUSED_ENV_NAMES, *RESERVED_ENV_PREFIXES]:
        for cut in range(len(word) + 1):
            for tail in ("", "X", "_", "9", "x", "é"):
                near.add(word[:cut] + tail)
        near.update({word + "A", "A" + word, word.lower(), word + word})
    for name in near:
        assert (pattern.search(name) is not None) == (env_name_problem(name) is None), name


@pytest.mark.parametrize("profile", ["openai-strict", "anthropic-strict"])
def test_schema_honesty_strict_profiles_refuse_the_names_bash_owns_in_their_shape(
    profile: Profile,
) -> None:
    """UID, PPID, RANDOM, ...: the strict schemas refuse what the port refuses,
    and the refusal names the entry as the profile has it (never
    ``arguments.env.UID``, a path the model never wrote)."""
    toolset = TOOLSETS["agent"]
    stated = stated_schema(toolset.definition("run_command"), profile)
    name_rule = stated["properties"]["env"]["anyOf"][0]["items"]["properties"]["name"]
    for name in sorted(SHELL_OWNED_ENV_NAMES):
        assert not ecma_regex(name_rule["pattern"]).search(name), name
        arguments = {
            "command": "true",
            "cwd": None,
            "timeout": None,
            "background": None,
            "env": [{"name": "FINE", "value": "1"}, {"name": name, "value": "1"}],
        }
        result = toolset.call_sync(
            "run_command", arguments, call_id="c", operation_key="k", profile=profile
        )
        assert result.error_type == ErrorCode.ARGUMENTS_INVALID.value
        assert [p["field"] for p in result.content["problems"]] == ["arguments.env[1].name"]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.name)
def test_schema_honesty_the_env_description_names_every_refused_name(
    definition: Any, profile: Profile
) -> None:
    """A model reads the description; every name and prefix the port refuses
    is in it, in every profile."""
    schema = tool_schema(definition, profile)
    if "env" not in schema["properties"]:
        return
    description = schema["properties"]["env"]["description"]
    for word in [*REFUSED_ENV_NAMES, *RESERVED_ENV_PREFIXES]:
        assert word in description, word


@given(st.text(alphabet="ABCDEFGHILMNOPRSTUVX_049abc", max_size=12))
def test_c17_strict_env_names_agree_with_the_port_on_any_name(name: str) -> None:
    assert (ecma_regex(STRICT_ENV_NAME_PATTERN).search(name) is not None) == (
        env_name_problem(name) is None
    )


def test_strict_arguments_convert_to_the_canonical_ones() -> None:
    run = _definition("run_command")
    strict = {
        "command": "x",
        "cwd": None,
        "timeout": 30,
        "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}],
        "background": True,
    }
    assert canonical_arguments(run, "openai-strict", strict) == {
        "command": "x",
        "env": {"A": "2"},
        "background": True,
        "background_timeout": 30,
    }
    assert canonical_arguments(run, "anthropic-strict", {**strict, "background": None}) == {
        "command": "x",
        "timeout": 30,
        "env": {"A": "2"},
    }
    assert canonical_arguments(run, "full", strict) is strict


def test_conversion_problems_name_the_field_in_the_profiles_shape() -> None:
    run = _definition("run_command")
    problems = canonical_arguments(
        run,
        "anthropic-strict",
        {
            "command": "x",
            "cwd": None,
            "timeout": 0,
            "background": None,
            "env": [{"name": "1A", "value": "v"}],
        },
    )
    assert isinstance(problems, tuple)
    assert [(p.path, p.reason) for p in problems] == [
        (
            "arguments.env[0].name",
            "must be a shell variable name: letters, digits and _, not starting with a digit",
        ),
        ("arguments.timeout", "must be an integer from 1 to 86400"),
    ]


def test_unknown_profiles_are_refused() -> None:
    with pytest.raises(ValueError, match="profile must be one of"):
        tool_schema(DEFINITIONS[0], "gemini")  # type: ignore[arg-type]


def test_anthropic_strict_tools_stay_within_anthropics_limits() -> None:
    """Anthropic compiles all strict tools of a request into one grammar and
    documents limits on it: at most 20 strict tools, 24 optional parameters
    and 16 parameters written with anyOf or type lists, across all of them."""
    for definitions in (
        command_tool_definitions() + code_tool_definitions(agent_owner=True),
        command_tool_definitions() + code_tool_definitions(),
    ):
        schemas = [tool_schema(d, "anthropic-strict") for d in definitions]
        assert len(schemas) <= 20
        properties = [field for s in schemas for field in s["properties"].values()]
        optional = sum(len(s["properties"]) - len(s["required"]) for s in schemas)
        unions = sum(
            1 for field in properties if "anyOf" in field or isinstance(field.get("type"), list)
        )
        assert optional <= 24
        assert unions <= 16


def _as_anthropic_sends(node: Any) -> Any:
    """``node`` as ``anthropic.transform_schema`` leaves a schema it has
    nothing to move from: the same, less ``type`` beside an ``enum``."""
    if isinstance(node, dict):
        kept = {key: _as_anthropic_sends(value) for key, value in node.items()}
        if "enum" in kept:
            kept.pop("type", None)
        return kept
    if isinstance(node, list):
        return [_as_anthropic_sends(item) for item in node]
    return node


def _without_kept_patterns(node: Any) -> Any:
    """``node`` with the patterns the profile keeps removed (Anthropic's own
    transform moves every pattern, kept ones too, into the description, as
    ``\n\n{pattern: ...}`` at its end)."""
    if isinstance(node, dict):
        return {
            key: (
                value.split("\n\n{pattern: ", 1)[0]
                if key == "description" and isinstance(value, str)
                else _without_kept_patterns(value)
            )
            for key, value in node.items()
            if key != "pattern"
        }
    if isinstance(node, list):
        return [_without_kept_patterns(item) for item in node]
    return node


@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.name)
def test_anthropic_strict_schemas_are_what_anthropics_own_transform_keeps(definition: Any) -> None:
    """Anthropic's SDK (``transform_schema``) and pydantic-ai's Anthropic
    strict conversion move every keyword Anthropic's strict tool use may
    refuse into the description, patterns included (the env-name rule as
    4.6 KB of regular expression). The profile already states those in
    words, so both leave it as it is, but for the patterns written in the
    subset Anthropic documents, which the profile keeps and the
    transform moves: what the API is sent is what the port checks on return,
    and the model reads it as it was written."""
    import anthropic
    from pydantic_ai.providers.anthropic import AnthropicJsonSchemaTransformer

    handed = tool_schema(definition, "anthropic-strict")
    for transformed in (
        anthropic.transform_schema(handed),
        AnthropicJsonSchemaTransformer(handed, strict=True).walk(),
    ):
        assert _without_kept_patterns(transformed) == _without_kept_patterns(
            _as_anthropic_sends(handed)
        )
    assert len(json.dumps(handed)) < 4_000
    for node in _walk(handed):
        assert node.get("pattern", TASK_ID_PATTERN) in VENDOR_PATTERNS["anthropic-strict"]


def test_anthropic_strict_keeps_every_pattern_in_anthropics_documented_subset() -> None:
    """The task id keeps its pattern (64 hex), so a strict model cannot send
    a malformed one; every pattern it keeps uses only anchors, classes of
    literal characters and ranges, ``\\s``/``\\S`` and counts (no lookaround,
    backreference, ``\\b`` or ``\\u`` escape); every other pattern is
    stated in words."""
    subset = re.compile(r"\^?(\[([a-zA-Z0-9_-]|\\[sSdw])+\]([*+?]|\{\d+(,\d+)?\})?)+\$?")
    read = tool_schema(_definition("read_command_output"), "anthropic-strict")
    assert read["properties"]["task_id"]["pattern"] == TASK_ID_PATTERN
    for pattern in VENDOR_PATTERNS["anthropic-strict"]:
        assert subset.fullmatch(pattern), pattern
    run = tool_schema(_definition("run_command"), "anthropic-strict")
    assert "pattern" not in run["properties"]["command"]
    assert "not blank" in run["properties"]["command"]["description"]


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.name)
def test_schema_honesty_every_text_field_states_the_valid_unicode_rule(
    definition: Any, profile: Profile
) -> None:
    """A lone surrogate (JSON text can spell ``\\ud800``)
    in a command, cwd, snippet or env value was refused although no schema
    said so. Every such field states the rule, in every profile, and the
    port's refusal is that rule."""
    schema = tool_schema(definition, profile)
    stated = [name for name in ("command", "cwd", "code", "env") if name in schema["properties"]]
    for name in stated:
        assert "valid Unicode text" in schema["properties"][name]["description"], name
    if "command" in stated and profile == "full":
        result = TOOLSETS["agent"].call_sync(
            definition.name, {"command": "echo \ud800"}, call_id="c", operation_key="k"
        )
        assert result.error_type == ErrorCode.ARGUMENTS_INVALID.value
        assert "valid Unicode text" in result.to_json()


@pytest.mark.parametrize("profile", PROFILES)
def test_schema_honesty_patterns_read_as_ecma_262_in_the_schema_and_the_port(
    profile: Profile,
) -> None:
    """``"a" * 64 + "\\n"`` and the env name ``"FOO\\n"``
    pass a validator that reads ``$`` as Python does (before a final
    newline). JSON Schema's dialect is ECMA-262, where ``$`` is the end of the
    text: the schema read that way and the port refuse them alike, the
    descriptions say so, and the task_id's length says it in any dialect."""
    toolset = TOOLSETS["agent"]
    for tool in ("read_command_output", "stop_command"):
        rule = stated_schema(toolset.definition(tool), profile)["properties"]["task_id"]
        assert not ecma_regex(rule["pattern"]).search("a" * 64 + "\n")
        assert (
            "ECMA-262"
            in tool_schema(toolset.definition(tool), profile)["properties"]["task_id"][
                "description"
            ]
        )
    if profile == "full":
        assert (
            toolset.definition("stop_command").parameters["properties"]["task_id"]["maxLength"]
            == 64
        )
    result = toolset.call_sync(
        "stop_command",
        {"task_id": "a" * 64 + "\n"},
        call_id="c",
        operation_key="k1",
        profile=profile,
    )
    assert result.error_type == ErrorCode.ARGUMENTS_INVALID.value
    env = tool_schema(toolset.definition("run_command"), profile)["properties"]["env"]
    assert "ECMA-262" in env["description"]
    assert "not even a newline" in env["description"]
    stated_env = stated_schema(toolset.definition("run_command"), profile)["properties"]["env"]
    names = stated_env["anyOf"][0]
    name_rule = (
        names["propertyNames"] if "propertyNames" in names else names["items"]["properties"]["name"]
    )
    assert not ecma_regex(name_rule["pattern"]).search("FOO\n")
