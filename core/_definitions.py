"""Tool definitions: JSON Schema parameters, metadata and limits.

Each tool has one function that builds its definition
(``run_command_definition``, ...), which the tool's record in :mod:`._tools`
names; the two tool sets of the reference port (the command tools and the
code tool) are made there from the records. Limits and defaults are module
constants so the programs that enforce them and the schemas that announce
them cannot drift apart.

A request carries the definition it was made from; :func:`definitions_equal`
decides whether that is still ours (a stale or edited definition is refused).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs

from ._canonical import canonical_json
from ._env import (
    ENV_NAME_PATTERN,
    RESERVED_ENV_NAMES,
    RESERVED_ENV_PREFIXES,
    SHELL_OWNED_ENV_NAMES,
)

__all__ = [
    "CALL_SLACK_MS",
    "COMMAND_PATTERN",
    "DEFAULT_BACKGROUND_TIMEOUT_SECONDS",
    "DEFAULT_FOREGROUND_TIMEOUT_SECONDS",
    "DEFAULT_LANGUAGE",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "DEFAULT_SANDBOX_DESCRIPTION",
    "LANGUAGES",
    "LANGUAGE_ALIASES",
    "MAX_CURSOR",
    "MAX_ENV_ENTRIES",
    "MAX_ENV_NAME_LENGTH",
    "MAX_ENV_VALUE_LENGTH",
    "MAX_SANDBOX_DESCRIPTION_CHARS",
    "MAX_TIMEOUT_SECONDS",
    "MAX_WAIT_SECONDS",
    "MIN_MAX_OUTPUT_BYTES",
    "MIN_READ_MAX_BYTES",
    "NO_NUL_PATTERN",
    "OWNED_COMMAND_LAUNCH",
    "PERMISSION_CANCEL",
    "PERMISSION_EXECUTE",
    "READ_MAX_BYTES",
    "RETAINED_OUTPUT_LIMIT",
    "SAFE_READ",
    "SANDBOX_ID_PATTERN",
    "SHELL_WHITESPACE",
    "TASK_ID_PATTERN",
    "UNICODE_RULE",
    "ToolDefinition",
    "check_foreground",
    "check_sandbox_description",
    "definitions_equal",
    "mutating_definition",
    "object_schema",
    "read_command_output_definition",
    "read_only_definition",
    "resolve_language",
    "run_code_definition",
    "run_command_definition",
    "sandbox_status_definition",
    "seconds_schema",
    "stop_command_definition",
    "where_it_runs",
]

# Limits (the reference port's values).
MAX_TIMEOUT_SECONDS: Final = 86_400
DEFAULT_FOREGROUND_TIMEOUT_SECONDS: Final = 300
DEFAULT_BACKGROUND_TIMEOUT_SECONDS: Final = 300
DEFAULT_MAX_OUTPUT_BYTES: Final = 24_000
MIN_MAX_OUTPUT_BYTES: Final = 256
READ_MAX_BYTES: Final = 65_536
MIN_READ_MAX_BYTES: Final = 4
MAX_WAIT_SECONDS: Final = 600
MAX_CURSOR: Final = 2**53 - 1
RETAINED_OUTPUT_LIMIT: Final = 16 * 1024 * 1024
TASK_ID_PATTERN: Final = r"^[a-f0-9]{64}$"
SANDBOX_ID_PATTERN: Final = r"^[A-Za-z0-9_-]{1,128}$"

# Environment limits. Linux refuses to start a program whose environment
# holds a NAME=VALUE string of 128 KiB or more; a name of at most 256 ASCII
# characters and a value of at most 32,000 characters (4 UTF-8 bytes each at
# worst) stay below that, and a schema can state both (JSON Schema counts
# characters, not bytes).
MAX_ENV_ENTRIES: Final = 256
MAX_ENV_NAME_LENGTH: Final = 256
MAX_ENV_VALUE_LENGTH: Final = 32_000

# Patterns are written so that ECMA-262 (what JSON Schema and most model
# vendors use) and Python's `re` read them the same way: only `\uXXXX`
# escapes and character classes, no lookaround.
_WHITESPACE_RANGES: Final = (
    (0x09, 0x0D),
    (0x1C, 0x20),
    (0x85, 0x85),
    (0xA0, 0xA0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x2028, 0x2029),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
)
SHELL_WHITESPACE: Final = "".join(
    chr(code) for low, high in _WHITESPACE_RANGES for code in range(low, high + 1)
)
"""Every character Python's ``str.isspace`` (and so ``str.strip``) treats as
whitespace; a command made of these alone is blank."""
_WHITESPACE_CLASS: Final = "".join(
    rf"\u{low:04x}" if low == high else rf"\u{low:04x}-\u{high:04x}"
    for low, high in _WHITESPACE_RANGES
)
NO_NUL_PATTERN: Final = r"^[^\u0000]*$"
"""Text without a NUL character (no process can take one in its command,
working directory or environment)."""
COMMAND_PATTERN: Final = rf"^[{_WHITESPACE_CLASS}]*[^\u0000{_WHITESPACE_CLASS}][^\u0000]*$"
"""A command line: no NUL character, and at least one character that is not
in :data:`SHELL_WHITESPACE` (listed character by character, so every regex
engine agrees on what blank means)."""

# Metadata values.
PERMISSION_EXECUTE: Final = "sandbox:execute"
PERMISSION_CANCEL: Final = "sandbox:cancel"
SAFE_READ: Final = "safe-read/v1"
OWNED_COMMAND_LAUNCH: Final = "owned-command-launch/v1"

DEFAULT_LANGUAGE: Final = "python"
LANGUAGES: Final[Mapping[str, tuple[str, str]]] = MappingProxyType(
    {
        # canonical name -> (snippet file suffix, runner program)
        "python": (".py", "python"),
        "javascript": (".js", "node"),
        "bash": (".sh", "bash"),
    }
)
LANGUAGE_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "py": "python",
        "python3": "python",
        "js": "javascript",
        "node": "javascript",
        "nodejs": "javascript",
        "sh": "bash",
        "shell": "bash",
    }
)

# Deadline slack the harness gives a call beyond the command's own timeout.
CALL_SLACK_MS: Final = 20_000
"""What a launch's call may take beyond its in-sandbox deadline (the
definition's ``timeout_ms`` is the deadline plus this)."""
_STATUS_TIMEOUT_MS: Final = 10_000
_STOP_TIMEOUT_MS: Final = 10_000
_READ_TIMEOUT_MS: Final = (MAX_WAIT_SECONDS + 10) * 1000


def resolve_language(value: object) -> str | None:
    """The canonical language a ``run_code`` ``language`` argument names.

    ``None`` and ``""`` mean the default (``python``). Otherwise the value is
    trimmed, lowercased and looked up in :data:`LANGUAGES` and
    :data:`LANGUAGE_ALIASES`. Returns ``None`` for an unsupported language
    (the program answers ``unsupported_language``) and for a non-string;
    never raises.
    """
    if value is None or value == "":
        return DEFAULT_LANGUAGE
    if not isinstance(value, str):
        return None
    selected = value.strip().lower()
    selected = LANGUAGE_ALIASES.get(selected, selected)
    return selected if selected in LANGUAGES else None


# --- frozen JSON ------------------------------------------------------------


def _freeze(value: object) -> Any:
    """A read-only deep copy of JSON data: mappings become read-only views of
    fresh dicts, arrays become tuples. Raises TypeError for non-JSON values."""
    if isinstance(value, Mapping):
        frozen: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"schema key {key!r} is not a string")
            frozen[key] = _freeze(item)
        return MappingProxyType(frozen)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(item) for item in value)
    if value is None or isinstance(value, (str, int, float)):
        return value
    raise TypeError(f"{type(value).__name__} is not JSON data")


def _thaw(value: Any) -> Any:
    """Plain, fresh JSON data (dicts and lists) from :func:`_freeze`'s output."""
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


def _check_parameters(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if (
        not isinstance(value, Mapping)
        or value.get("type") != "object"
        or value.get("additionalProperties") is not False
    ):
        raise ValueError('parameters must be an object schema with "additionalProperties": false')


def _check_positive_int(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


def _check_exact_bool(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not bool:
        raise TypeError(f"{attribute.name} must be a bool, got {type(value).__name__}")


def _to_str_tuple(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError("permissions must be a list of strings")
    if not all(isinstance(item, str) for item in value):
        raise TypeError("permissions must be a list of strings")
    return tuple(value)


_str = attrs.validators.instance_of(str)
_optional_str = attrs.validators.optional(_str)


@attrs.frozen(kw_only=True, cache_hash=True)
class ToolDefinition:
    """One tool as the model sees it, plus what the harness needs to schedule it.

    ``parameters`` is a JSON Schema (Draft 2020-12) for the call's arguments,
    always an object schema with ``additionalProperties: false``. It is stored
    as a read-only deep copy (mappings are ``MappingProxyType`` views, arrays
    are tuples); :meth:`to_dict` returns a fresh plain copy. Two definitions
    are equal when all fields are equal and their parameters are the same JSON
    (compared by canonical form, so ``true`` never equals ``1``).

    Construction raises ``TypeError``/``ValueError`` for malformed fields.
    """

    name: str = attrs.field(validator=_str)
    description: str = attrs.field(validator=_str)
    parameters: Mapping[str, Any] = attrs.field(
        converter=_freeze, validator=_check_parameters, eq=canonical_json
    )
    read_only: bool = attrs.field(validator=_check_exact_bool)
    concurrent_safe: bool = attrs.field(validator=_check_exact_bool)
    permissions: tuple[str, ...] = attrs.field(converter=_to_str_tuple)
    timeout_ms: int = attrs.field(validator=_check_positive_int)
    recovery_policy: str | None = attrs.field(default=None, validator=_optional_str)
    background_command_policy: str | None = attrs.field(default=None, validator=_optional_str)
    canonical: bytes = attrs.field(init=False, eq=False, repr=False)
    """The canonical JSON of :meth:`to_dict`, computed once."""
    digest: str = attrs.field(init=False, eq=False, repr=False)
    """SHA-256 of :attr:`canonical`, in hex."""

    def __attrs_post_init__(self) -> None:
        canonical = canonical_json(self.to_dict())
        object.__setattr__(self, "canonical", canonical)
        object.__setattr__(self, "digest", hashlib.sha256(canonical).hexdigest())

    def to_dict(self) -> dict[str, Any]:
        """A fresh plain JSON object (snake_case keys; unset policies omitted)."""
        result: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": _thaw(self.parameters),
            "read_only": self.read_only,
            "concurrent_safe": self.concurrent_safe,
            "permissions": list(self.permissions),
            "timeout_ms": self.timeout_ms,
        }
        if self.recovery_policy is not None:
            result["recovery_policy"] = self.recovery_policy
        if self.background_command_policy is not None:
            result["background_command_policy"] = self.background_command_policy
        return result

    @classmethod
    def from_dict(cls, data: object) -> ToolDefinition:
        """The definition :meth:`to_dict` wrote. Raises ``ValueError`` for
        anything else: a missing or unknown key, or a malformed value."""
        if not isinstance(data, Mapping):
            raise ValueError("a tool definition must be a JSON object")
        fields = {field.name for field in attrs.fields(cls)}
        unknown = sorted(str(key) for key in data if key not in fields)
        if unknown:
            raise ValueError(f"unknown tool definition keys: {', '.join(unknown)}")
        try:
            return cls(**{str(key): value for key, value in data.items()})
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"malformed tool definition: {exc}") from None


def definitions_equal(supplied: object, ours: ToolDefinition) -> bool:
    """Whether a request's definition (a :class:`ToolDefinition` or its dict
    form) is exactly ``ours``: their canonical JSON forms are equal.

    Never raises: anything that has no canonical JSON form, or that fails
    while being read, is simply not equal.
    """
    if supplied is ours:
        return True
    try:
        if isinstance(supplied, ToolDefinition):
            return supplied.canonical == ours.canonical
        if not isinstance(supplied, Mapping):
            return False
        return canonical_json(supplied) == ours.canonical
    # Junk from a harness may fail in any way while it is read (a custom
    # mapping, a cycle); every such failure just means "not our definition".
    except Exception:
        return False


# --- the schemas --------------------------------------------------------------


def _nullable(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}], "description": description}


def seconds_schema(description: str) -> dict[str, Any]:
    """A nullable timeout in whole seconds, 1 to :data:`MAX_TIMEOUT_SECONDS`
    (every launch has one: its deadline argument)."""
    return _nullable({"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECONDS}, description)


def _env(description: str) -> dict[str, Any]:
    return _nullable(
        {
            "type": "object",
            "propertyNames": {"pattern": ENV_NAME_PATTERN, "maxLength": MAX_ENV_NAME_LENGTH},
            "additionalProperties": {
                "type": "string",
                "pattern": NO_NUL_PATTERN,
                "maxLength": MAX_ENV_VALUE_LENGTH,
            },
            "maxProperties": MAX_ENV_ENTRIES,
        },
        description,
    )


UNICODE_RULE: Final = "no lone surrogates such as \\ud800"
"""What "valid Unicode text" rules out: JSON text can spell a lone surrogate,
which no UTF-8 command line, path or file can hold, so the port refuses it."""

_ECMA: Final = (
    "Patterns read as ECMA-262 (JSON Schema's dialect): $ is the end of the text, not a "
    "place before a final newline."
)

_ENV_RULES: Final = (
    "Names are shell variable names (letters, digits and _, not starting with a digit, and "
    f"nothing after them, not even a newline) of at most {MAX_ENV_NAME_LENGTH} characters, "
    "and not one the dynamic loader, the C library "
    "or the shell reads as the command starts (names starting with "
    + ", ".join(RESERVED_ENV_PREFIXES)
    + "; and "
    + ", ".join(sorted(RESERVED_ENV_NAMES))
    + "), nor one bash sets itself, so the command would never see it ("
    + ", ".join(sorted(SHELL_OWNED_ENV_NAMES))
    + f"); values are valid Unicode text ({UNICODE_RULE}) of at most {MAX_ENV_VALUE_LENGTH} "
    f"characters and no NUL; at most {MAX_ENV_ENTRIES} variables. {_ECMA}"
)


def _task_id(description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": TASK_ID_PATTERN,
        # The length says in any regex dialect what the pattern says in
        # ECMA-262's: a validator reading $ as Python does agrees too.
        "minLength": 64,
        "maxLength": 64,
        "description": f"{description} Exactly 64 lowercase hex characters, nothing after "
        f"them (not even a newline). {_ECMA}",
    }


def _cursor(stream: str) -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": 0,
        "maximum": MAX_CURSOR,
        "default": 0,
        "description": f"Byte offset into {stream} to read from; pass back the "
        f"{stream}_cursor of the previous read to get only new output.",
    }


def object_schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A tool's parameters: an object of ``properties``, ``required`` ones
    named, no others allowed."""
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def read_only_definition(
    name: str, description: str, parameters: dict[str, Any], timeout_ms: int
) -> ToolDefinition:
    """The definition of a tool that changes nothing (concurrent-safe, no
    permission asked)."""
    return ToolDefinition(
        name=name,
        description=description,
        parameters=parameters,
        read_only=True,
        concurrent_safe=True,
        permissions=(),
        timeout_ms=timeout_ms,
        recovery_policy=SAFE_READ,
    )


def mutating_definition(
    name: str,
    description: str,
    parameters: dict[str, Any],
    timeout_ms: int,
    *,
    permission: str,
    background_command_policy: str | None = None,
) -> ToolDefinition:
    """The definition of a tool that acts on the sandbox, whose calls carry
    ``permission`` to the harness's ``authorize``."""
    return ToolDefinition(
        name=name,
        description=description,
        parameters=parameters,
        read_only=False,
        concurrent_safe=False,
        permissions=(permission,),
        timeout_ms=timeout_ms,
        background_command_policy=background_command_policy,
    )


DEFAULT_SANDBOX_DESCRIPTION: Final = "the sandbox its harness provides"
"""Where a backend that does not describe its sandbox runs the session's
commands, as every tool description says it (see
:func:`check_sandbox_description`)."""
MAX_SANDBOX_DESCRIPTION_CHARS: Final = 160
"""The longest description of its sandbox a backend may give."""
_DESCRIPTION_CHARS: Final = re.compile(r"[A-Za-z0-9][ -~]*")


def check_sandbox_description(description: object) -> str:
    """``description``, a backend's words for where the session's commands
    run, as every tool description ends with them ("This session's
    sandbox: {description}."), e.g. ``"a remote E2B sandbox"``.
    ``TypeError`` unless it is a ``str``; ``ValueError`` unless it is 1 to
    :data:`MAX_SANDBOX_DESCRIPTION_CHARS` printable ASCII characters
    beginning with a letter or digit and not ending in a space or a full stop."""
    if not isinstance(description, str):
        raise TypeError(
            f"a backend's sandbox_description must be a str, got {type(description).__name__}"
        )
    text = str.__str__(description)
    if (
        not 1 <= len(text) <= MAX_SANDBOX_DESCRIPTION_CHARS
        or not _DESCRIPTION_CHARS.fullmatch(text)
        or text.endswith((" ", "."))
    ):
        raise ValueError(
            f"a backend's sandbox_description must be 1 to {MAX_SANDBOX_DESCRIPTION_CHARS} "
            "printable ASCII characters, beginning with a letter or digit and ending in "
            f"neither a space nor a full stop; got {text[: MAX_SANDBOX_DESCRIPTION_CHARS + 1]!r} "
            f"({len(text)} characters)"
        )
    return text


def where_it_runs(sandbox: str) -> str:
    """The sentence every tool description ends with: where the session's
    commands run, in the backend's words."""
    return f" This session's sandbox: {check_sandbox_description(sandbox)}."


def check_foreground(foreground_timeout_seconds: int) -> int:
    """``foreground_timeout_seconds``, the longest a foreground launch may run
    (and its default), or ``ValueError`` unless it is an integer from 1 to
    :data:`MAX_TIMEOUT_SECONDS`."""
    if (
        type(foreground_timeout_seconds) is not int
        or not 1 <= foreground_timeout_seconds <= MAX_TIMEOUT_SECONDS
    ):
        raise ValueError(
            "foreground_timeout_seconds must be an integer from 1 to "
            f"{MAX_TIMEOUT_SECONDS}, got {foreground_timeout_seconds!r}"
        )
    return foreground_timeout_seconds


# Each tool's definition, for the longest a foreground launch may run (its
# tool record in :mod:`._tools` names the function; the tool sets are made
# there from the records).


def sandbox_status_definition(
    limit: int, sandbox: str = DEFAULT_SANDBOX_DESCRIPTION
) -> ToolDefinition:
    """``sandbox_status`` (its definition does not depend on ``limit``);
    ``sandbox`` says where the session's commands run (see
    :func:`check_sandbox_description`)."""
    return read_only_definition(
        "sandbox_status",
        "Show which sandbox this session's commands run in and what that boundary "
        "means. Looks only; never creates a sandbox." + where_it_runs(sandbox),
        object_schema({}, []),
        _STATUS_TIMEOUT_MS,
    )


def run_command_definition(
    limit: int, sandbox: str = DEFAULT_SANDBOX_DESCRIPTION
) -> ToolDefinition:
    """``run_command``, whose foreground timeout is at most ``limit`` seconds,
    in the ``sandbox`` the backend describes."""
    return mutating_definition(
        "run_command",
        "Run one shell command in this session's sandbox, never on the host machine. "
        "By default it waits for the command and returns its output. "
        "With background=true it returns a task_id at once: follow the output with "
        "read_command_output and end the command with stop_command. If the outcome "
        "is reported as uncertain, the command is never started a second time; "
        "check it with read_command_output on the returned task_id." + where_it_runs(sandbox),
        object_schema(
            {
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "pattern": COMMAND_PATTERN,
                    "description": "The shell command line to run (bash syntax): valid "
                    f"Unicode text ({UNICODE_RULE}), not blank, and without NUL characters.",
                },
                "cwd": _nullable(
                    {"type": "string", "pattern": NO_NUL_PATTERN},
                    "Working directory inside the sandbox (a remote path, not one on "
                    f"the host), valid Unicode text ({UNICODE_RULE}) without NUL characters; "
                    "null means the sandbox's default directory.",
                ),
                "timeout": seconds_schema(
                    "Seconds a foreground command may run before it is stopped; null "
                    f"means {limit}, and longer values are lowered to {limit}. Only "
                    "without background=true (a background command takes "
                    "background_timeout)."
                ),
                "env": _env(
                    "Extra environment variables for this command only, as name to "
                    "value; values are never echoed back. " + _ENV_RULES
                ),
                "background": {
                    "type": "boolean",
                    "default": False,
                    "description": "Start the command and return its task_id without "
                    "waiting for it to finish.",
                },
                "background_timeout": seconds_schema(
                    "Seconds a background command may run before it is stopped; only "
                    "allowed with background=true; null means the port's default."
                ),
            },
            ["command"],
        )
        | {
            # timeout only without background=true, background_timeout only
            # with it (the port answers timeout_requires_foreground and
            # background_timeout_requires_background otherwise).
            "if": {"properties": {"background": {"const": True}}, "required": ["background"]},
            "then": {"properties": {"timeout": {"type": "null"}}},
            "else": {"properties": {"background_timeout": {"type": "null"}}},
        },
        limit * 1000 + CALL_SLACK_MS,
        permission=PERMISSION_EXECUTE,
        background_command_policy=OWNED_COMMAND_LAUNCH,
    )


def read_command_output_definition(
    limit: int, sandbox: str = DEFAULT_SANDBOX_DESCRIPTION
) -> ToolDefinition:
    """``read_command_output`` (its definition does not depend on ``limit``),
    in the ``sandbox`` the backend describes."""
    return read_only_definition(
        "read_command_output",
        "Read the status and new output of a command this session started, from "
        "byte cursors into its stdout and stderr. Reading changes nothing and can be "
        "repeated with the same cursors. Waiting does not extend the command's "
        "deadline, and this tool never starts a sandbox or a command." + where_it_runs(sandbox),
        object_schema(
            {
                "task_id": _task_id("The task_id run_command returned."),
                "stdout_cursor": _cursor("stdout"),
                "stderr_cursor": _cursor("stderr"),
                "max_bytes": {
                    "type": "integer",
                    "minimum": MIN_READ_MAX_BYTES,
                    "maximum": READ_MAX_BYTES,
                    "default": READ_MAX_BYTES,
                    "description": "Most bytes of each stream to return in this read.",
                },
                "wait_seconds": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_WAIT_SECONDS,
                    "default": 0,
                    "description": "Seconds to wait for the command to finish before "
                    "reading; 0 reads at once.",
                },
            },
            ["task_id"],
        ),
        _READ_TIMEOUT_MS,
    )


def stop_command_definition(
    limit: int, sandbox: str = DEFAULT_SANDBOX_DESCRIPTION
) -> ToolDefinition:
    """``stop_command`` (its definition does not depend on ``limit``), in
    the ``sandbox`` the backend describes."""
    return mutating_definition(
        "stop_command",
        "Ask a command this session started to stop, with all the processes it "
        "spawned. A stop request is not proof that it ended: confirm the final status "
        "with read_command_output." + where_it_runs(sandbox),
        object_schema({"task_id": _task_id("The task_id run_command returned.")}, ["task_id"]),
        _STOP_TIMEOUT_MS,
        permission=PERMISSION_CANCEL,
    )


def run_code_definition(
    limit: int, name: str = "run_code", *, sandbox: str = DEFAULT_SANDBOX_DESCRIPTION
) -> ToolDefinition:
    """The code tool named ``name`` (``run_code`` for a native owner,
    ``sandbox_run_code`` for an agent owner), whose timeout is at most
    ``limit`` seconds, in the ``sandbox`` the backend describes."""
    aliases = ", ".join(f"{alias} ({canonical})" for alias, canonical in LANGUAGE_ALIASES.items())
    return mutating_definition(
        name,
        "Run a Python, JavaScript or Bash snippet in this session's sandbox, never on "
        "the host machine, and return its output. The snippet is saved to a "
        "private file in the sandbox and run from there. If the outcome is reported as "
        "uncertain, the snippet is never run a second time; reconcile the original "
        "task first." + where_it_runs(sandbox),
        object_schema(
            {
                "code": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The source code of the snippet: valid Unicode text "
                    f"({UNICODE_RULE}).",
                },
                "language": {
                    "type": "string",
                    "enum": [*LANGUAGES, *LANGUAGE_ALIASES],
                    "default": DEFAULT_LANGUAGE,
                    "description": f"One of {', '.join(LANGUAGES)}; also accepted: {aliases}.",
                },
                "timeout": seconds_schema(
                    f"Seconds the snippet may run before it is stopped; null means "
                    f"{limit}, and longer values are lowered to {limit}."
                ),
                "env": _env(
                    "Extra environment variables for this snippet only, as name to "
                    "value; values are never echoed back. " + _ENV_RULES
                ),
            },
            ["code"],
        ),
        limit * 1000 + CALL_SLACK_MS,
        permission=PERMISSION_EXECUTE,
    )
