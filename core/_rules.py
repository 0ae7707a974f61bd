"""What a launch means, and the argument rules the port answers with codes
of their own: the parts of the tool records (:mod:`._tools`) that are rules.

:func:`call_digest` defines when two launches with one operation key are the
same launch (C3), given a tool's digest defaults; the deadlines are the
in-sandbox deadline a launch runs under (the program sends it; a toolset
fills it in to match repeats as the port reads them); the refusals refuse,
before any side effect (C5), the schema rules the reference reports with
specific error codes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

from ._canonical import canonical_json
from ._definitions import (
    LANGUAGES,
    MAX_TIMEOUT_SECONDS,
    resolve_language,
)
from ._masking import REDACTED, Redactions, mask_text, redaction_secrets
from ._rejection import ArgumentProblem, arguments_rejection
from ._results import (
    ErrorCode,
    ToolResult,
)
from ._snapshot import PortSettings, _refuse, _Snapshot

__all__ = [
    "RUN_CODE_DEFAULTS",
    "RUN_COMMAND_DEFAULTS",
    "call_digest",
    "call_text",
    "code_refusal",
    "command_deadline",
    "command_from_strict",
    "command_refusal",
    "filled_arguments",
    "redacted_digest",
    "shown_arguments",
    "snippet_deadline",
]

RUN_COMMAND_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType(
    {"cwd": None, "env": None, "timeout": None, "background": False, "background_timeout": None}
)
"""``run_command``'s arguments when left out, as its digest fills them in."""
RUN_CODE_DEFAULTS: Final[Mapping[str, Any]] = MappingProxyType(
    {"language": "python", "env": None, "timeout": None}
)
"""A code tool's arguments when left out, as its digest fills them in."""


def filled_arguments(defaults: Mapping[str, Any], arguments: Mapping[str, Any]) -> dict[str, Any]:
    """What a call's ``arguments`` mean (C3): ``defaults`` (its record's)
    filled in, so ``{"command": "x"}`` and ``{"command": "x", "background":
    false}`` are the same launch (and so are ``env: {}``, a strict profile's
    ``env: []`` and no env, and a language and its alias)."""
    filled = dict(defaults)
    filled.update(arguments)
    if filled.get("env") == {}:
        filled["env"] = None  # no variables, however they were written
    if "language" in filled:
        filled["language"] = resolve_language(filled["language"]) or filled["language"]
    return filled


def call_text(tool: str, defaults: Mapping[str, Any], arguments: Mapping[str, Any]) -> bytes:
    """The canonical text of what a call of ``tool`` means (C3): the tool and
    its :func:`filled_arguments`. Raises ``CanonicalJSONError`` for
    arguments with no canonical form."""
    return canonical_json({"tool": tool, "arguments": filled_arguments(defaults, arguments)})


def call_digest(tool: str, defaults: Mapping[str, Any], arguments: Mapping[str, Any]) -> str:
    """SHA-256 of :func:`call_text`, in hex: the launch digest (C3)."""
    return hashlib.sha256(call_text(tool, defaults, arguments)).hexdigest()


def redacted_digest(
    tool: str,
    defaults: Mapping[str, Any],
    arguments: Mapping[str, Any],
    secrets: Iterable[str] = (),
) -> str:
    """The launch digest an ownership record keeps: that of the request as
    a result shows it, every env value replaced by the redaction marker and
    every occurrence of a value the call masks (``secrets``: the session's
    values, ``redact=`` among them, and the call's own env values) cut out
    of every other string (the command, a snippet's source, the cwd) as
    :data:`~sandrail.core._masking.REDACTED`.

    So the record holds nothing a wordlist could test: the digest is a
    function of what the call's result shows anyway, whatever the values
    are (their length included). Two launches that differ only inside a
    masked value have the same recorded digest, and the sandbox's claim
    (which keeps the full digest, keyed where it rests) is what tells them
    apart (C3); every other change of the arguments still differs here.
    The same digest a recording keeps for the redacted request, so a replay
    computes it again. (See ``docs/howto/secrets.md``.)"""
    return call_digest(tool, defaults, shown_arguments(arguments, secrets))


def shown_arguments(arguments: Mapping[str, Any], secrets: Iterable[str] = ()) -> dict[str, Any]:
    """``arguments`` as a result shows them: every env value (a mapping's,
    or a strict profile's ``{name, value}`` entries') replaced by
    :data:`~sandrail.core._masking.REDACTED`, and every occurrence of
    ``secrets`` or of an env value in any other string (keys included)
    masked. A function of what is shown only: the same, whatever the masked
    values are (C17)."""
    env = arguments.get("env")
    values = env
    if isinstance(env, list):
        values = {
            str(index): entry.get("value")
            for index, entry in enumerate(env)
            if isinstance(entry, Mapping)
        }
    redactions = Redactions(frozenset(secrets) | redaction_secrets(values))
    shown = _masked(arguments, redactions) if redactions else dict(arguments)
    env = shown.get("env")
    if isinstance(env, Mapping) and env:
        shown["env"] = dict.fromkeys(env, REDACTED)
    elif isinstance(env, list):
        shown["env"] = [
            {**entry, "value": REDACTED}
            if isinstance(entry, Mapping) and "value" in entry
            else entry
            for entry in env
        ]
    return shown


def _masked(value: Any, redactions: Redactions) -> Any:
    """``value`` (JSON data) with every string, keys included, masked."""
    if isinstance(value, str):
        return mask_text(value, redactions)
    if isinstance(value, Mapping):
        return {_masked(key, redactions): _masked(item, redactions) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(item, redactions) for item in value]
    return value


def command_deadline(arguments: Mapping[str, Any], settings: PortSettings) -> tuple[str, int]:
    """``run_command``'s in-sandbox deadline in seconds and the argument that
    sets it: ``background_timeout`` for a background command (by default the
    port's background timeout), else as :func:`snippet_deadline`. A timeout
    of ``null`` or 0 is the default. Raises ``TypeError`` for a timeout that
    is not a number (the port refuses such arguments before it asks)."""
    if arguments.get("background"):
        requested = arguments.get("background_timeout") or settings.background_timeout_seconds
        return "background_timeout", min(requested, MAX_TIMEOUT_SECONDS)
    return snippet_deadline(arguments, settings)


def snippet_deadline(arguments: Mapping[str, Any], settings: PortSettings) -> tuple[str, int]:
    """A foreground launch's deadline: ``timeout`` (by default, and at most,
    the port's foreground timeout)."""
    requested = arguments.get("timeout") or settings.foreground_timeout_seconds
    return "timeout", min(requested, settings.foreground_timeout_seconds)


def command_from_strict(converted: dict[str, Any]) -> dict[str, Any]:
    """``run_command``'s arguments from a strict profile's: one timeout
    there, which with ``background=true`` is the background one."""
    if converted.get("background") is True:
        converted["background_timeout"] = converted.pop("timeout", None)
    return converted


def command_refusal(snap: _Snapshot, settings: PortSettings) -> ToolResult | None:
    """``run_command``'s own rules, checked right after schema validation,
    before anything runs (the reference's error codes; each rule is also
    stated in the schema): a command with a NUL character
    (``e2b_command_arguments_invalid``) or nothing but whitespace
    (``command_required``), ``background_timeout`` without
    ``background=true`` (``background_timeout_requires_background``),
    ``timeout`` with it (``timeout_requires_foreground``)."""
    args = snap.arguments
    command = args["command"]
    if "\x00" in command:
        problem = ArgumentProblem(
            path="arguments.command", reason="must not contain a NUL character"
        )
        return ToolResult(
            status="error", content=arguments_rejection([problem], settings.max_output_bytes)
        )
    if not command.strip():
        return _refuse(ErrorCode.COMMAND_REQUIRED, "command must not be blank.")
    if not args.get("background") and args.get("background_timeout") is not None:
        return _refuse(
            ErrorCode.BACKGROUND_TIMEOUT_REQUIRES_BACKGROUND,
            "background_timeout applies only with background=true; use timeout.",
        )
    if args.get("background") is True and args.get("timeout") is not None:
        return _refuse(
            ErrorCode.TIMEOUT_REQUIRES_FOREGROUND,
            "timeout applies only to a foreground command; with background=true, "
            "use background_timeout.",
        )
    return None


def code_refusal(snap: _Snapshot, settings: PortSettings) -> ToolResult | None:
    """A code tool's own rule: a language outside :data:`LANGUAGES` and their
    aliases (``unsupported_language``)."""
    if resolve_language(snap.arguments.get("language")) is None:
        return _refuse(
            ErrorCode.UNSUPPORTED_LANGUAGE,
            "language must be one of: " + ", ".join(sorted(LANGUAGES)) + ".",
        )
    return None
