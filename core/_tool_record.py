"""What a tool is to the core: the shape of its record.

Strategy: everything the core knows of one tool lives in one row of
:data:`~sandrail.core._tools.TOOLS`, a :class:`ToolRecord`, as h11 keeps its
state machine in tables: its definition, what kind of tool it is, its
program, the shapes its results can take (what admission measures, C14),
the defaults its launch digest fills in (C3), its own refusals and the
schema rules they answer, and how a strict profile's arguments become its
own. Every part of the core that treats tools differently reads the record;
none branches on a tool's name, and none has a default for a tool it does
not know (:class:`UnknownToolError`). This module holds only the record's
shape, so the modules that run a tool can take its record without importing
the table (which imports them).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Protocol

import attrs

from ._definitions import (
    DEFAULT_FOREGROUND_TIMEOUT_SECONDS,
    DEFAULT_SANDBOX_DESCRIPTION,
    ToolDefinition,
)
from ._effects import Effect
from ._results import ToolResult
from ._snapshot import PortSettings, _Snapshot

__all__ = ["DefineTool", "ToolKind", "ToolRecord", "ToolSet", "UnknownToolError"]


class ToolKind(enum.Enum):
    """What a tool does to the sandbox."""

    LAUNCHES = "launches"
    """It starts a command, at most once per operation key (C2, C3)."""
    OWNED_TASK = "owned_task"
    """It acts on a command this session launched, named by its task id (C4)."""
    INSPECTS = "inspects"
    """It only looks at the session's sandbox."""


class ToolSet(enum.Enum):
    """Which of the reference port's tool sets offers a tool."""

    COMMAND = "command"
    """:func:`~sandrail.core.command_tool_definitions`."""
    NATIVE_CODE = "native code"
    """:func:`~sandrail.core.code_tool_definitions` for a native owner."""
    AGENT_CODE = "agent code"
    """:func:`~sandrail.core.code_tool_definitions` for an agent owner."""


class UnknownToolError(LookupError):
    """A tool name the core has no record of. Raised wherever the core would
    otherwise have to guess what such a tool does: it never does."""

    def __init__(self, name: object, known: Sequence[str]) -> None:
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        super().__init__(
            f"sandrail has no tool record for {shown}; its tools are {', '.join(known)}"
        )
        self.name = name


Shape = tuple[bool | None, dict[str, Any]]
"""One shape a result can take at its largest: whether its locator names the
sandbox (``None``: it has no locator), and the content with the largest
legal values (:mod:`._contents`)."""

Program = Generator[Effect, Any, ToolResult]


class DefineTool(Protocol):
    """What makes a tool's definition: for the longest a foreground launch
    may run (``limit`` seconds) and the backend's description of its
    sandbox, which every tool description ends with (default
    :data:`~sandrail.core._definitions.DEFAULT_SANDBOX_DESCRIPTION`)."""

    def __call__(self, limit: int, sandbox: str = ..., /) -> ToolDefinition: ...


def _integer_arguments(define: DefineTool) -> frozenset[str]:
    """The arguments the schema of ``define``'s definition types as integers
    (nullable or not): JSON Schema admits ``5.0`` for them, the program
    reads ``5``."""
    properties = define(DEFAULT_FOREGROUND_TIMEOUT_SECONDS, DEFAULT_SANDBOX_DESCRIPTION).parameters[
        "properties"
    ]
    return frozenset(
        name
        for name, schema in properties.items()
        if any(option.get("type") == "integer" for option in schema.get("anyOf", (schema,)))
    )


@attrs.frozen(kw_only=True, eq=False)
class ToolRecord:
    """One tool, whole (see the module doc). Every field is stated: a record
    has no defaults, so a tool added without one of its facts fails at
    import, never later by a silent default. Compared by identity (each
    record is made once, in the table)."""

    name: str
    kind: ToolKind
    tool_set: ToolSet
    define: DefineTool
    """Its definition, for the longest a foreground launch may run and the
    backend's description of its sandbox (what every tool description ends
    with, :func:`~sandrail.core._definitions.check_sandbox_description`)."""
    program: Callable[[Any], Program]
    """What it does once the call is admitted and authorized: given the
    call's :class:`~sandrail.core._call.CallState`, the rest of the call."""
    result_shapes: Callable[[_Snapshot, PortSettings], Sequence[Shape]]
    """Its ``ok`` results at their largest (empty identities), for admission
    (C14); the ``uncertain`` shape every tool shares is measured besides."""
    uncertain_instruction: str
    """What an ``uncertain`` result of it tells the model to do."""
    uncertain_points_to_read: bool
    """Whether that instruction goes on to name ``read_command_output`` (when
    the port offers it and the result names a task)."""
    refusal: Callable[[_Snapshot, PortSettings], ToolResult | None] | None
    """Its own argument rules, answered with error codes of their own right
    after schema validation, before anything runs (C5); ``None``: none."""
    own_code_rules: tuple[tuple[str, ...], ...]
    """The starts of the schema paths whose violations :attr:`refusal`
    answers: schema validation leaves them to it."""
    digest_defaults: Mapping[str, Any]
    """The arguments its digest fills in when left out, so that two ways of
    writing one call are one launch (C3)."""
    deadline: Callable[[Mapping[str, Any], PortSettings], tuple[str, int]] | None
    """A launch's in-sandbox deadline in seconds and the argument that sets
    it; ``None`` for a tool that launches nothing (and only then)."""
    deadline_arguments: frozenset[str]
    """The arguments that may set :attr:`deadline` (each left out by default
    in its digest): a repeat that spells, in the one a call's deadline reads,
    the deadline it has when left out is the call that leaves it out (C3).
    Empty for a tool that launches nothing (and only then)."""
    strict_conversion: Callable[[dict[str, Any]], dict[str, Any]] | None
    """How arguments a strict profile shaped become its own, after the
    shared rules (``null`` means not given, env lists become maps); ``None``:
    nothing more."""
    example_arguments: Mapping[str, Any]
    """A minimal valid call of it: arguments its schema and its refusal
    accept (a task id of the right form, which no session owns), for tests
    and tools that need one call of each tool."""
    integer_arguments: frozenset[str] = attrs.field(init=False)
    """Derived from its schema: the arguments typed as integers."""
    takes_env: bool = attrs.field(init=False)
    """Derived from its schema: whether it takes an ``env`` argument (the
    variables what it launches runs with, which an engine integration's
    worker-side secrets join)."""

    def __attrs_post_init__(self) -> None:
        if (self.kind is ToolKind.LAUNCHES) is not (self.deadline is not None):
            raise ValueError(f"tool {self.name}: a launch, and only a launch, has a deadline")
        self._check_deadline_arguments()
        if bool(self.own_code_rules) and self.refusal is None:
            raise ValueError(f"tool {self.name}: own_code_rules without the refusal that owns them")
        if self._default_definition().name != self.name:
            raise ValueError(f"tool {self.name}: its definition names another tool")
        object.__setattr__(self, "integer_arguments", _integer_arguments(self.define))
        properties = self._default_definition().parameters["properties"]
        object.__setattr__(self, "takes_env", "env" in properties)

    def _default_definition(self) -> ToolDefinition:
        return self.define(DEFAULT_FOREGROUND_TIMEOUT_SECONDS, DEFAULT_SANDBOX_DESCRIPTION)

    def _check_deadline_arguments(self) -> None:
        properties = self._default_definition().parameters["properties"]
        if self.deadline is None:
            if self.deadline_arguments:
                raise ValueError(f"tool {self.name}: deadline arguments without a deadline")
            return
        if not self.deadline_arguments or not self.deadline_arguments <= properties.keys():
            raise ValueError(f"tool {self.name}: its deadline arguments are not its arguments")
        if any(self.digest_defaults.get(name, ...) is not None for name in self.deadline_arguments):
            raise ValueError(f"tool {self.name}: a deadline argument's digest default is not null")

    def uncertain_words(self, readable: bool) -> str:
        """The instruction of an ``uncertain`` result; ``readable``: the port
        offers ``read_command_output`` and the result names a task."""
        if self.uncertain_points_to_read and readable:
            return self.uncertain_instruction + _READ_TASK
        return self.uncertain_instruction


_READ_TASK = " Or read the task with read_command_output and this task_id."
