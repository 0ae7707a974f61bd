"""Strategies for tool definitions, arguments and requests.

Arguments are drawn from a tool's own JSON Schema (the schema is the
contract: an argument it accepts must never be refused as invalid). Which
schema is a *profile*: ``"full"`` is the definition's JSON Schema 2020-12;
other profiles (vendors' strict shapes) plug in with
:func:`register_profile`, so every strategy that takes ``profile=`` draws
arguments in that shape.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import sandrail
from sandrail.core import (
    MAX_TIMEOUT_SECONDS,
    ArgumentProblem,
    Profile,
    ToolDefinition,
    code_tool_definitions,
    command_tool_definitions,
    stated_schema,
    tool_record,
)
from sandrail.core import (
    PROFILES as CORE_PROFILES,
)

from ._calls import native_identity
from ._st_json import identifiers
from ._st_schema import schema_values

__all__ = [
    "DEFINITIONS",
    "DEFINITIONS_WITH_FIELDS",
    "PROFILES",
    "argument_json_values",
    "definition_for",
    "foreground_timeouts",
    "one_bad_field",
    "problems_lists",
    "register_profile",
    "schema_values",
    "tool_arguments",
    "tool_definitions",
    "tool_requests",
    "valid_arguments",
]

Mode = Literal["agent", "native"]

foreground_timeouts = st.integers(min_value=1, max_value=MAX_TIMEOUT_SECONDS)


@st.composite
def tool_definitions(draw: st.DrawFn) -> ToolDefinition:
    """Any of our definitions, for any foreground timeout and owner mode."""
    foreground = draw(foreground_timeouts)
    every = command_tool_definitions(foreground) + code_tool_definitions(
        foreground, agent_owner=draw(st.booleans())
    )
    return draw(st.sampled_from(every))


DEFINITIONS: dict[str, ToolDefinition] = {
    definition.name: definition
    for definition in command_tool_definitions()
    + code_tool_definitions()
    + code_tool_definitions(agent_owner=True)
}
"""Every tool's default definition, by name (``run_code`` is the native
owner's snippet tool, ``sandbox_run_code`` the agent owner's)."""
DEFINITIONS_WITH_FIELDS = [
    d for d in DEFINITIONS.values() if d.to_dict()["parameters"]["properties"]
]


def definition_for(tool: str, *, owner: Mode = "agent") -> ToolDefinition:
    """The default definition of ``tool`` for an owner mode; ``ValueError``
    for a tool that mode does not have (``run_code`` is native-only,
    ``sandbox_run_code`` agent-only)."""
    code = code_tool_definitions(agent_owner=owner == "agent")
    for definition in command_tool_definitions() + code:
        if definition.name == tool:
            return definition
    raise ValueError(f"an {owner} owner has no tool {tool!r}")


# -- profiles ---------------------------------------------------------------------------

SchemaOf = Callable[[ToolDefinition], Mapping[str, Any]]


def _stated(definition: ToolDefinition, *, profile: Profile) -> Mapping[str, Any]:
    return stated_schema(definition, profile)


PROFILES: dict[str, SchemaOf] = {
    profile: functools.partial(_stated, profile=profile) for profile in CORE_PROFILES
}
"""Profile name -> the arguments schema of a definition in that profile."""


def register_profile(name: str, schema_of: SchemaOf) -> None:
    """Make ``profile=name`` draw arguments from ``schema_of(definition)``
    (a JSON Schema that :func:`schema_values` understands)."""
    PROFILES[name] = schema_of


def valid_arguments(
    definition: ToolDefinition, *, profile: str = "full"
) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments valid under the definition's own schema in ``profile``
    (``full``, ``openai-strict``, ``anthropic-strict``, or one registered with
    :func:`register_profile`): every required field, any subset of the
    optional ones, with edges (bounds, lengths at their limits, env names next
    to the reserved ones) drawn often."""
    return schema_values(PROFILES[profile](definition))


def tool_arguments(
    tool: str, *, owner: Mode = "agent", profile: str = "full"
) -> st.SearchStrategy[dict[str, Any]]:
    """Valid arguments for ``tool`` of an owner mode, in ``profile``'s shape.

    Valid means the schema accepts them, so the port never refuses them as
    invalid arguments; it may still refuse them for what they ask (a task
    this session does not own, a snippet language the tool lacks a runner
    for is not among them).
    """
    return valid_arguments(definition_for(tool, owner=owner), profile=profile)


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
    for rule in tool_record(definition.name).own_code_rules:
        if rule[:2] == ("properties", name) and len(rule) == 3:
            schema.pop(rule[2], None)
    field = Draft202012Validator(schema)
    arguments[name] = draw(argument_json_values.filter(lambda value: not field.is_valid(value)))
    return definition, arguments, name


problems_lists = st.lists(
    st.builds(
        ArgumentProblem,
        st.text(st.characters(exclude_categories=()), max_size=600)
        | st.text(max_size=3).map(lambda t: t * 5000),
        st.text(st.characters(exclude_categories=()), max_size=400),
    ),
    max_size=80,
)


# -- requests -------------------------------------------------------------------------------


_FENCES = st.integers(1, 3)


@st.composite
def tool_requests(
    draw: st.DrawFn,
    port: sandrail.ToolPort,
    *,
    tools: Sequence[str] | None = None,
    keys: Sequence[str] | st.SearchStrategy[str] = ("op-a", "op-b", "op-c"),
    tasks_of: Sequence[str] = (),
    profile: str = "full",
    fences: st.SearchStrategy[int] = _FENCES,
) -> sandrail.ToolRequest:
    """A well-formed request for ``port``: one of its tools (or of ``tools``),
    valid arguments, an operation key from ``keys`` (a small pool, so that
    retries and conflicts happen), a fresh call id, and the identity of the
    port's owner (native: a fence from ``fences``).

    ``read_command_output`` and ``stop_command`` target the task of one of
    ``tasks_of`` (operation keys this session may have launched) or, when it
    is empty, one of ``keys``.
    """
    names = list(tools) if tools is not None else [d.name for d in port.definitions]
    name = draw(st.sampled_from(names))
    definition = port.definition(name)
    arguments = draw(valid_arguments(definition, profile=profile))
    settings = port.settings
    if "task_id" in arguments:
        pool = list(tasks_of) or (list(keys) if not isinstance(keys, st.SearchStrategy) else [])
        if pool:
            target = draw(st.sampled_from(pool))
            arguments["task_id"] = sandrail.task_id(settings.session_id, settings.owner, target)
    key = draw(keys if isinstance(keys, st.SearchStrategy) else st.sampled_from(list(keys)))
    owner = settings.owner
    identity: sandrail.AgentIdentity | sandrail.NativeIdentity
    if isinstance(owner, sandrail.NativeOwner):
        identity = native_identity(fence=draw(fences), scope=owner.scope)
    else:
        identity = sandrail.AgentIdentity(agent_id=owner.agent_id)
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name=name, call_id=draw(identifiers), arguments=arguments),
        operation_key=key,
        session_id=settings.session_id,
        definition=definition,
        identity=identity,
    )
