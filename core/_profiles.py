"""Tool schemas as each model vendor takes them, and arguments back from them.

A tool's definition holds its ``full`` schema (JSON Schema 2020-12), which
states every rule the port enforces: an argument it accepts is never refused
as invalid (only state can refuse it: ownership, conflicts, policy). Vendors
that constrain decoding to a schema ("strict" tool calls) accept only a
subset of JSON Schema, so two more profiles say the same rules in that
subset:

- every property is required; an optional one takes ``null`` for "not
  given" (defaults are stated in the description instead of ``default``);
- no open maps: ``env`` is a list of ``{name, value}`` objects (a name given
  twice keeps its last value, as in a shell);
- no cross-field rules: ``run_command`` has one ``timeout``, for the
  foreground or, with ``background: true``, for the background command (the
  full schema's ``background_timeout``);
- no lookaround in patterns (the env-name rule is rewritten without it).

:func:`stated_schema` is a profile's schema with every rule as a keyword.
:func:`tool_schema` is what a framework is handed: the same schema with the
keywords the vendor's strict mode refuses moved into the description, where
the model still reads them (``openai-strict``: string lengths;
``anthropic-strict``: numeric bounds, string lengths, array sizes and every
pattern but those written in the regular-expression subset Anthropic
documents, :data:`VENDOR_PATTERNS`). Those rules are still checked:
:func:`canonical_arguments` validates arguments against the stated schema
and answers argument problems with paths in the profile's own shape
(``arguments.env[2].name``), then converts them to the canonical (``full``)
arguments the port takes.

Which profiles are honest, and what the strict ones give up:

- ``full`` is honest as handed: every rule the port checks is a keyword, so
  an argument the schema accepts is never refused as invalid.
- A strict profile's *stated* schema is honest the same way. The schema a
  framework is *handed* is not, for the rules moved into descriptions: the
  vendor's constrained decoding cannot enforce them, so a model can send a
  value the handed schema admits and the port refuses (naming the field,
  nothing run): ``openai-strict`` gives up string lengths (a command of
  100,001 characters); ``anthropic-strict`` gives up numeric bounds
  (``timeout: 0``), lengths, ``maxItems``, and the patterns it moves (a
  blank command, a NUL character, a reserved env name).
- Both strict profiles also change the shape, by design: every property is
  required (``null`` for "not given"; the port also takes a property left
  out), ``env`` is a list of ``{name, value}``, and ``run_command`` has one
  ``timeout``. An argument written for ``full`` is not one for them.

Two things no profile can state. Arguments are I-JSON (RFC 7493): a string
holding a lone surrogate is not text, and the port refuses it (MCP's own
JSON parser already does). And the ``full`` profile uses ``propertyNames``
and ``if``/``else``: a client whose model vendor takes neither should list a
strict profile instead.

Strategy: the strict schemas are derived from the full one by a few
mechanical rules, never written by hand, so a rule added to a definition
reaches every profile; the schema-honesty tests draw arguments from each
profile's stated schema and check the port accepts them all.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal, get_args

from ._definitions import COMMAND_PATTERN, NO_NUL_PATTERN, TASK_ID_PATTERN, ToolDefinition
from ._env_strict import STRICT_ENV_NAME_PATTERN
from ._rejection import ArgumentProblem
from ._tools import tool_record
from ._validation import check_arguments

__all__ = [
    "PROFILES",
    "STRICT_ENV_NAME_PATTERN",
    "VENDOR_PATTERNS",
    "VENDOR_UNSUPPORTED",
    "Profile",
    "canonical_arguments",
    "stated_schema",
    "tool_schema",
]

Profile = Literal["full", "openai-strict", "anthropic-strict"]
PROFILES: Final[tuple[Profile, ...]] = get_args(Profile)

_NON_EMPTY: Final = r"^[\s\S]+$"

VENDOR_UNSUPPORTED: Final[Mapping[Profile, frozenset[str]]] = {
    "full": frozenset(),
    # OpenAI's strict mode keeps pattern, minimum/maximum and minItems/maxItems.
    "openai-strict": frozenset({"minLength", "maxLength"}),
    # Anthropic's strict tool use refuses numeric bounds, lengths and
    # maxItems, keeps minItems 0 or 1 only, and takes patterns only in a
    # subset of regular expressions, compiled with every strict tool of a
    # request into one grammar of limited size: its own SDK
    # (`anthropic.transform_schema`) and pydantic-ai's Anthropic strict
    # conversion move every pattern into the description. This profile keeps
    # the ones written in the documented subset (VENDOR_PATTERNS) and moves
    # the rest (the port checks them when the call comes back).
    "anthropic-strict": frozenset(
        {"pattern", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"}
    ),
}
"""Keywords of a stated schema each vendor's strict mode refuses; the schema a
framework is handed states them in the description instead (a pattern in
:data:`VENDOR_PATTERNS` stays)."""

VENDOR_PATTERNS: Final[Mapping[Profile, frozenset[str]]] = {
    "full": frozenset(),
    "openai-strict": frozenset(),
    # Anthropic documents the regular expressions its strict tool use takes:
    # anchors, character classes of literal characters and ranges, \s \S \d
    # \w, the quantifiers * + ? and simple counts; no lookaround, no
    # backreferences, no \b. The task id (64 hex) and "not empty" rules are
    # written in that subset and kept. The others are not: the command's and
    # values' rules name characters by \u escapes (outside the documented
    # subset), and the env-name rule is 4.6 KB compiled with every other
    # strict tool of a request into one grammar of limited size; they stay
    # in the descriptions, where Anthropic's own transform_schema would move
    # every pattern.
    "anthropic-strict": frozenset({TASK_ID_PATTERN, _NON_EMPTY}),
}
"""Patterns a vendor's strict mode takes although it refuses patterns in
general (``pattern`` is in :data:`VENDOR_UNSUPPORTED`): kept in the schema a
framework is handed."""

_UNREADABLE: Final = "must be a JSON object whose numbers are within the schema's bounds"


# --- deriving the strict schemas ------------------------------------------------------


def _sentence(text: str, extra: str) -> str:
    text = text.rstrip()
    return extra if not text else f"{text} {extra}"


def _nullable(schema: dict[str, Any]) -> bool:
    return any(branch.get("type") == "null" for branch in schema.get("anyOf", ()))


def _strict_node(schema: dict[str, Any]) -> dict[str, Any]:
    """One value's schema in strict form: open maps become ``{name, value}``
    lists, ``minLength: 1`` becomes a pattern, defaults leave."""
    schema = dict(schema)
    schema.pop("default", None)
    if "anyOf" in schema:
        schema["anyOf"] = [_strict_node(branch) for branch in schema["anyOf"]]
    if schema.get("type") == "object" and isinstance(schema.get("additionalProperties"), dict):
        names = dict(schema.get("propertyNames", {}))
        names["pattern"] = STRICT_ENV_NAME_PATTERN
        entry: dict[str, Any] = {
            "type": "object",
            "properties": {
                "name": {"type": "string", **names},
                "value": _strict_node(schema["additionalProperties"]),
            },
            "required": ["name", "value"],
            "additionalProperties": False,
        }
        listed: dict[str, Any] = {"type": "array", "items": entry}
        if "maxProperties" in schema:
            listed["maxItems"] = schema["maxProperties"]
        return listed
    if schema.get("type") == "string" and schema.get("minLength") == 1:
        del schema["minLength"]
        schema.setdefault("pattern", _NON_EMPTY)
    return schema


def _strict_schema(full: Mapping[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required = set(full["required"])
    merged_timeout = "background_timeout" in full["properties"]
    for name, field in full["properties"].items():
        if name == "background_timeout":
            continue
        schema = _strict_node(field)
        description = schema.pop("description", "")
        if name == "env":
            description = description.replace(
                "as name to value",
                "as a list of {name, value} objects (a name given twice keeps its last value)",
            )
        if name == "timeout" and merged_timeout:
            description = (
                "Seconds the command may run before it is stopped. In the foreground, "
                + description.split("; ", 1)[1]
                + " With background=true: null means the port's default for background "
                "commands."
            )
        if name not in required and not _nullable(schema):
            if "default" in field:
                description = _sentence(description, f"null means {json.dumps(field['default'])}.")
            schema = {"anyOf": [schema, {"type": "null"}]}
        if description:
            schema["description"] = description
        properties[name] = schema
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


@functools.lru_cache(maxsize=64)
def _stated_definition(definition: ToolDefinition, profile: Profile) -> ToolDefinition:
    if profile == "full":
        return definition
    return ToolDefinition(
        name=definition.name,
        description=definition.description,
        parameters=_strict_schema(definition.to_dict()["parameters"]),
        read_only=definition.read_only,
        concurrent_safe=definition.concurrent_safe,
        permissions=definition.permissions,
        timeout_ms=definition.timeout_ms,
        recovery_policy=definition.recovery_policy,
        background_command_policy=definition.background_command_policy,
    )


def _check_profile(profile: object) -> Profile:
    for known in PROFILES:
        if profile == known:
            return known
    raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {profile!r}")


def stated_schema(definition: ToolDefinition, profile: Profile = "full") -> dict[str, Any]:
    """The parameters schema of ``definition`` in ``profile`` with every rule
    the port checks as a JSON Schema keyword: a fresh, plain JSON object.

    Raises ``ValueError`` for an unknown profile.
    """
    parameters: dict[str, Any] = _stated_definition(definition, _check_profile(profile)).to_dict()[
        "parameters"
    ]
    return parameters


def tool_schema(definition: ToolDefinition, profile: Profile = "full") -> dict[str, Any]:
    """The parameters schema to hand a framework for ``definition`` in
    ``profile``: a fresh, plain JSON object (``json.dumps`` and ``pickle``
    take it; mutating it changes nothing here).

    It is :func:`stated_schema` with the keywords the vendor's strict mode
    refuses (:data:`VENDOR_UNSUPPORTED`) moved into the description of the
    value they constrain, in words the model reads. Raises ``ValueError`` for
    an unknown profile.
    """
    schema = stated_schema(definition, profile)
    dropped = VENDOR_UNSUPPORTED[_check_profile(profile)]
    if dropped:
        kept = VENDOR_PATTERNS[profile]
        for node in _nodes(schema):
            _state_in_description(node, dropped, kept)
    return schema


def _nodes(schema: Any) -> Iterator[dict[str, Any]]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield node
        stack.extend(node.get("properties", {}).values())
        stack.extend(node.get("anyOf", ()))
        if "items" in node:
            stack.append(node["items"])


_WORDS: Final = {
    "pattern": "matching the regular expression {}",
    "minimum": "at least {}",
    "maximum": "at most {}",
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "minItems": "at least {} entries",
    "maxItems": "at most {} entries",
}

_PATTERN_WORDS: Final = {
    STRICT_ENV_NAME_PATTERN: "a shell variable name (letters, digits and _, not starting with "
    "a digit) that is none of the names, nor starts with any of the prefixes, that the "
    "env description refuses",
    COMMAND_PATTERN: "not blank (at least one character that is not whitespace), with no NUL "
    "character",
    NO_NUL_PATTERN: "with no NUL character",
    TASK_ID_PATTERN: "64 lowercase hexadecimal digits",
    _NON_EMPTY: "not empty",
}
"""Patterns said in plain words where a vendor takes no ``pattern`` (the
env-name rule is 4.6 KB of regular expression; the words and the env
description it points to say the same)."""


def _state_in_description(
    node: dict[str, Any], dropped: frozenset[str], kept_patterns: frozenset[str]
) -> None:
    said: list[str] = []
    for key, words in _WORDS.items():
        if key == "pattern" and node.get(key) in kept_patterns:
            continue
        if key in dropped and key in node:
            value = node.pop(key)
            plain = _PATTERN_WORDS.get(value) if key == "pattern" else None
            said.append(plain if plain is not None else words.format(value))
    if said:
        node["description"] = _sentence(node.get("description", ""), f"({', '.join(said)})")


# --- arguments back -----------------------------------------------------------------


def canonical_arguments(
    definition: ToolDefinition, profile: Profile, arguments: object
) -> object | tuple[ArgumentProblem, ...]:
    """The canonical (``full``) arguments for ``arguments`` given in
    ``profile``, or the problems that stop the conversion.

    ``full`` arguments are returned as they are (the port checks them).
    Strict-profile arguments are first checked against the profile's
    :func:`stated_schema` (so rules the vendor could not enforce are caught
    here, with paths in the profile's shape), then converted: ``null`` (or a
    property left out) means "not given", the ``env`` list becomes a map (last value wins), and
    then the tool's own conversion (its record's ``strict_conversion``:
    ``run_command``'s ``timeout`` with ``background: true`` becomes
    ``background_timeout``). Never raises for any ``arguments``; raises
    ``ValueError`` for an unknown profile and
    :class:`~sandrail.core.UnknownToolError` for a tool without a record.
    """
    profile = _check_profile(profile)
    if profile == "full":
        return arguments
    stated = _stated_definition(definition, profile)
    if isinstance(arguments, Mapping):
        # A property left out means null, as a model not held to strict
        # decoding may send it: accepting more than the schema says is honest.
        needed = definition.parameters["required"]
        absent = [
            name
            for name in stated.parameters["properties"]
            if name not in arguments and name not in needed
        ]
        if absent:
            arguments = {**arguments, **dict.fromkeys(absent)}
    try:
        problems = check_arguments(stated, arguments)
    except ValueError:
        # The schema check writes a refused integer into its message, which
        # Python will not do past 4,300 digits; no schema admits one.
        return (ArgumentProblem("arguments", _UNREADABLE),)
    if problems:
        return problems
    assert isinstance(arguments, Mapping)  # check_arguments refuses anything else
    # A plain copy: the port works from its own snapshot anyway.
    plain = copy.deepcopy(dict(arguments))
    converted = {name: value for name, value in plain.items() if value is not None}
    if isinstance(converted.get("env"), list):
        converted["env"] = {entry["name"]: entry["value"] for entry in converted["env"]}
    convert = tool_record(definition.name).strict_conversion
    return converted if convert is None else convert(converted)
