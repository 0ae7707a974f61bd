"""The tools: one record each (:class:`~sandrail.core._tool_record.ToolRecord`).

Strategy: :data:`TOOLS` is the one place that says what each tool is. The
dispatcher runs a record's program, admission measures its result shapes
(C14), schema validation leaves its own rules to its refusal, a launch's
digest fills in its defaults (C3), a strict profile's arguments are converted
by it, and the testing kit's judge and workloads ask it what a tool does.
The names, the tool sets and the families below are derived from the
records, never listed beside them; a name without a record raises
:class:`UnknownToolError` wherever it is asked about.

Adding a tool is a module of its own holding its definition (built with
:mod:`._definitions`' building blocks), its program (for a launch, a plan on
:func:`~sandrail.core._launch.launch_program`) and its record, and that
record's row here; and, if it needs one, its effect (:mod:`._effects`,
answered by every backend). The development page says it whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from ._contents import (
    REPEAT_LAUNCH,
    REPEAT_READ,
    REPEAT_STOP,
    launch_shapes,
    read_shapes,
    status_shapes,
    stop_shapes,
)
from ._definitions import (
    DEFAULT_FOREGROUND_TIMEOUT_SECONDS,
    DEFAULT_SANDBOX_DESCRIPTION,
    LANGUAGES,
    ToolDefinition,
    check_foreground,
    check_sandbox_description,
    read_command_output_definition,
    run_code_definition,
    run_command_definition,
    sandbox_status_definition,
    stop_command_definition,
)
from ._launch import run_code_program, run_command_program
from ._owned import read_program, sandbox_status_program, stop_program
from ._recorded import RecordMatch, record_digest, record_match
from ._rules import (
    RUN_CODE_DEFAULTS,
    RUN_COMMAND_DEFAULTS,
    call_digest,
    code_refusal,
    command_deadline,
    command_from_strict,
    command_refusal,
    snippet_deadline,
)
from ._snapshot import PortSettings, _Snapshot
from ._tool_record import (
    DefineTool,
    Program,
    Shape,
    ToolKind,
    ToolRecord,
    ToolSet,
    UnknownToolError,
)

__all__ = [
    "CODE_TOOL_NAMES",
    "COMMAND_TOOL_NAMES",
    "LAUNCH_TOOLS",
    "TOOLS",
    "TOOL_NAMES",
    "code_tool_definitions",
    "command_tool_definitions",
    "launch_digest",
    "launch_timeout",
    "recorded_digest",
    "recorded_match",
    "tool_record",
    "tool_records",
]

_NOTHING: Final[Mapping[str, Any]] = MappingProxyType({})
_SOME_TASK: Final[Mapping[str, Any]] = MappingProxyType({"task_id": "0" * 64})

# The schema paths the code tools' refusal answers: the language's enum (in
# the strict profiles, where the language is nullable, it sits in an anyOf).
_LANGUAGE_RULES: Final = (("properties", "language", "enum"), ("properties", "language", "anyOf"))


def _launching_nothing(
    name: str,
    kind: ToolKind,
    define: DefineTool,
    program: Callable[[Any], Program],
    result_shapes: Callable[[_Snapshot, PortSettings], Sequence[Shape]],
    uncertain_instruction: str,
    *,
    uncertain_points_to_read: bool,
    example_arguments: Mapping[str, Any],
) -> ToolRecord:
    """A command tool that launches nothing: no deadline, no digest defaults,
    no refusal of its own, nothing to convert from a strict profile."""
    return ToolRecord(
        name=name,
        kind=kind,
        tool_set=ToolSet.COMMAND,
        define=define,
        program=program,
        result_shapes=result_shapes,
        uncertain_instruction=uncertain_instruction,
        uncertain_points_to_read=uncertain_points_to_read,
        refusal=None,
        own_code_rules=(),
        digest_defaults=_NOTHING,
        deadline=None,
        deadline_arguments=frozenset(),
        strict_conversion=None,
        example_arguments=example_arguments,
    )


def _run_code(name: str, tool_set: ToolSet) -> ToolRecord:
    def define(limit: int, sandbox: str = DEFAULT_SANDBOX_DESCRIPTION, /) -> ToolDefinition:
        return run_code_definition(limit, name, sandbox=sandbox)

    return ToolRecord(
        name=name,
        kind=ToolKind.LAUNCHES,
        tool_set=tool_set,
        define=define,
        program=run_code_program,
        result_shapes=launch_shapes(language=max(LANGUAGES, key=len)),
        uncertain_instruction=REPEAT_LAUNCH,
        uncertain_points_to_read=True,
        refusal=code_refusal,
        own_code_rules=_LANGUAGE_RULES,
        digest_defaults=RUN_CODE_DEFAULTS,
        deadline=snippet_deadline,
        deadline_arguments=frozenset({"timeout"}),
        strict_conversion=None,
        example_arguments=MappingProxyType({"code": "print(1)"}),
    )


_RECORDS: Final[dict[str, ToolRecord]] = {
    record.name: record
    for record in (
        _launching_nothing(
            "sandbox_status",
            ToolKind.INSPECTS,
            sandbox_status_definition,
            sandbox_status_program,
            status_shapes,
            REPEAT_LAUNCH,
            uncertain_points_to_read=True,
            example_arguments=_NOTHING,
        ),
        ToolRecord(
            name="run_command",
            kind=ToolKind.LAUNCHES,
            tool_set=ToolSet.COMMAND,
            define=run_command_definition,
            program=run_command_program,
            result_shapes=launch_shapes(language=None),
            uncertain_instruction=REPEAT_LAUNCH,
            uncertain_points_to_read=True,
            refusal=command_refusal,
            # The command's pattern (a NUL, a blank command) and the rule of
            # which timeout goes with background (the schema's if/then/else).
            own_code_rules=(("properties", "command", "pattern"), ("then",), ("else",)),
            digest_defaults=RUN_COMMAND_DEFAULTS,
            deadline=command_deadline,
            deadline_arguments=frozenset({"timeout", "background_timeout"}),
            strict_conversion=command_from_strict,
            example_arguments=MappingProxyType({"command": "echo hi"}),
        ),
        _launching_nothing(
            "read_command_output",
            ToolKind.OWNED_TASK,
            read_command_output_definition,
            read_program,
            read_shapes,
            REPEAT_READ,
            uncertain_points_to_read=False,
            example_arguments=_SOME_TASK,
        ),
        _launching_nothing(
            "stop_command",
            ToolKind.OWNED_TASK,
            stop_command_definition,
            stop_program,
            stop_shapes,
            REPEAT_STOP,
            uncertain_points_to_read=False,
            example_arguments=_SOME_TASK,
        ),
        _run_code("run_code", ToolSet.NATIVE_CODE),
        _run_code("sandbox_run_code", ToolSet.AGENT_CODE),
    )
}
# Mutable only so that the testing kit's mutants can swap a record for the
# length of one campaign run (``unittest.mock.patch.dict``); read through
# :data:`TOOLS`.

TOOLS: Final[Mapping[str, ToolRecord]] = MappingProxyType(_RECORDS)
"""Every tool the core knows, by name, in the order the tool sets list them."""

TOOL_NAMES: Final = tuple(_RECORDS)
COMMAND_TOOL_NAMES: Final = tuple(
    name for name, record in _RECORDS.items() if record.tool_set is ToolSet.COMMAND
)
"""The command tools, in the order :func:`command_tool_definitions` makes them."""
CODE_TOOL_NAMES: Final = tuple(
    name for name, record in _RECORDS.items() if record.tool_set is not ToolSet.COMMAND
)
LAUNCH_TOOLS: Final = frozenset(
    name for name, record in _RECORDS.items() if record.kind is ToolKind.LAUNCHES
)
"""The tools that launch a command (the others read, stop or inspect)."""


def tool_record(name: str) -> ToolRecord:
    """The record of the tool ``name``; :class:`UnknownToolError` for a name
    the core has no record of (never a default)."""
    try:
        return TOOLS[name]
    except (KeyError, TypeError):
        raise UnknownToolError(name, tuple(TOOLS)) from None


def tool_records(definitions: Iterable[ToolDefinition]) -> Mapping[str, ToolRecord]:
    """The records of the tools ``definitions`` define, by name: what a port
    asks once, when it is made, so that a port offering a tool the core
    does not know fails at once (:class:`UnknownToolError`), not at the
    tool's first call."""
    return {definition.name: tool_record(definition.name) for definition in definitions}


def _tool_set(
    tool_set: ToolSet, foreground_timeout_seconds: int, sandbox: str
) -> tuple[ToolDefinition, ...]:
    limit = check_foreground(foreground_timeout_seconds)
    sandbox = check_sandbox_description(sandbox)
    return tuple(
        record.define(limit, sandbox) for record in TOOLS.values() if record.tool_set is tool_set
    )


def command_tool_definitions(
    foreground_timeout_seconds: int = DEFAULT_FOREGROUND_TIMEOUT_SECONDS,
    *,
    sandbox: str = DEFAULT_SANDBOX_DESCRIPTION,
) -> tuple[ToolDefinition, ...]:
    """The command tools: the definitions of the records of the command
    tool set, in the table's order (:data:`COMMAND_TOOL_NAMES`).

    ``foreground_timeout_seconds`` is the longest a foreground ``run_command``
    may run (and its default). ``sandbox`` is the backend's description of
    where the commands run, which every tool description ends with (a port
    takes its backend's ``sandbox_description``). Raises ``ValueError``
    unless the timeout is an integer from 1 to
    :data:`~sandrail.core.MAX_TIMEOUT_SECONDS`, and ``TypeError`` or
    ``ValueError`` for a description
    :func:`~sandrail.core.check_sandbox_description` refuses.
    """
    return _tool_set(ToolSet.COMMAND, foreground_timeout_seconds, sandbox)


def code_tool_definitions(
    foreground_timeout_seconds: int = DEFAULT_FOREGROUND_TIMEOUT_SECONDS,
    *,
    agent_owner: bool = False,
    sandbox: str = DEFAULT_SANDBOX_DESCRIPTION,
) -> tuple[ToolDefinition, ...]:
    """The code tool: ``(run_code,)`` for a native owner, ``(sandbox_run_code,)``
    for an agent owner, in the ``sandbox`` the backend describes (as
    :func:`command_tool_definitions`). Raises ``ValueError`` for a
    foreground timeout outside 1..:data:`~sandrail.core.MAX_TIMEOUT_SECONDS`."""
    tool_set = ToolSet.AGENT_CODE if agent_owner else ToolSet.NATIVE_CODE
    return _tool_set(tool_set, foreground_timeout_seconds, sandbox)


def launch_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """Digest of what a call of ``tool`` means (C3): the tool and its
    arguments with its record's defaults filled in, so ``{"command": "x"}``
    and ``{"command": "x", "background": false}`` are the same launch (and
    so are ``env: {}``, a strict profile's ``env: []`` and no env). Raises
    :class:`UnknownToolError` for a tool without a record."""
    return call_digest(tool, tool_record(tool).digest_defaults, arguments)


def recorded_digest(tool: str, arguments: Mapping[str, Any], secrets: Iterable[str] = ()) -> str:
    """The launch digest an ownership record keeps: that of the request as a
    result shows it, every env value and every occurrence of ``secrets``
    masked (see :func:`~sandrail.core._rules.redacted_digest`), marked when
    its text shows a masked value (:func:`~sandrail.core._recorded.record_digest`).
    Raises :class:`UnknownToolError` for a tool without a record."""
    return record_digest(tool, tool_record(tool).digest_defaults, arguments, secrets)


def recorded_match(
    recorded: str | None, tool: str, arguments: Mapping[str, Any], secrets: Iterable[str] = ()
) -> RecordMatch:
    """What ``arguments`` of a call of ``tool``, whose session masks
    ``secrets`` now, are against the ``recorded`` digest of its key's first
    start: ``same``, ``changed`` (a visible change) or ``unknown`` (the
    masks changed and the record cannot tell; the sandbox's ledger decides),
    see :mod:`sandrail.core._recorded`. Raises :class:`UnknownToolError`
    for a tool without a record."""
    return record_match(recorded, tool, tool_record(tool).digest_defaults, arguments, secrets)


def launch_timeout(
    tool: str, arguments: Mapping[str, Any], settings: PortSettings
) -> tuple[str, int]:
    """The in-sandbox deadline of a launch of ``tool`` in seconds, and the
    argument that sets it: ``background_timeout`` for a background
    ``run_command`` (by default the port's background timeout), else
    ``timeout`` (by default, and at most, the port's foreground timeout).
    A timeout of ``null`` or 0 is the default. Raises ``TypeError`` for a
    timeout that is not a number (the port refuses such arguments before
    it asks), ``ValueError`` for a tool that launches nothing and
    :class:`UnknownToolError` for a tool without a record."""
    deadline = tool_record(tool).deadline
    if deadline is None:
        raise ValueError(f"{tool} launches nothing: it has no deadline")
    return deadline(arguments, settings)
