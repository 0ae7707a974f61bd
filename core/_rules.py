"""What a launch means, and the argument rules the port answers with codes
of their own.

:func:`launch_digest` defines when two launches with one operation key are
the same launch (C3), and :func:`launch_timeout` the in-sandbox deadline a
launch runs under (the program sends it; a toolset fills it in to match
repeats as the port reads them). :func:`tool_refusal` refuses, before any side effect
(C5), the schema rules the reference reports with specific error codes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ._canonical import canonical_json
from ._definitions import (
    LANGUAGES,
    MAX_TIMEOUT_SECONDS,
    resolve_language,
)
from ._masking import REDACTED, Redactions, mask_text, redaction_secrets
from ._results import (
    ErrorCode,
    ToolResult,
)
from ._snapshot import PortSettings, _refuse, _Snapshot
from ._validation import ArgumentProblem, arguments_rejection

__all__ = ["LAUNCH_TOOLS", "launch_digest", "launch_timeout", "recorded_digest", "tool_refusal"]

LAUNCH_TOOLS: Final = frozenset({"run_command", "run_code", "sandbox_run_code"})
"""The tools that launch a command (the others read, stop or inspect)."""

_INTEGER_ARGUMENTS: Final = frozenset(
    {"timeout", "background_timeout", "stdout_cursor", "stderr_cursor", "max_bytes", "wait_seconds"}
)

_LAUNCH_DEFAULTS: Final[Mapping[str, Any]] = {
    "run_command": {
        "cwd": None,
        "env": None,
        "timeout": None,
        "background": False,
        "background_timeout": None,
    },
    "run_code": {"language": "python", "env": None, "timeout": None},
    "sandbox_run_code": {"language": "python", "env": None, "timeout": None},
}


def launch_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """Digest of what a launch means (C3): the tool and its arguments with
    defaults filled in, so ``{"command": "x"}`` and ``{"command": "x",
    "background": false}`` are the same launch (and so are ``env: {}``, a
    strict profile's ``env: []`` and no env)."""
    filled = dict(_LAUNCH_DEFAULTS.get(tool, {}))
    filled.update(arguments)
    if filled.get("env") == {}:
        filled["env"] = None  # no variables, however they were written
    if "language" in filled:
        filled["language"] = resolve_language(filled["language"]) or filled["language"]
    return hashlib.sha256(canonical_json({"tool": tool, "arguments": filled})).hexdigest()


def launch_timeout(
    tool: str, arguments: Mapping[str, Any], settings: PortSettings
) -> tuple[str, int]:
    """The in-sandbox deadline of a launch of ``tool`` in seconds, and the
    argument that sets it: ``background_timeout`` for a background
    ``run_command`` (by default the port's background timeout), else
    ``timeout`` (by default, and at most, the port's foreground timeout).
    A timeout of ``null`` or 0 is the default. Raises ``TypeError`` for a
    timeout that is not a number (the port refuses such arguments before
    it asks)."""
    if tool == "run_command" and arguments.get("background"):
        requested = arguments.get("background_timeout") or settings.background_timeout_seconds
        return "background_timeout", min(requested, MAX_TIMEOUT_SECONDS)
    requested = arguments.get("timeout") or settings.foreground_timeout_seconds
    return "timeout", min(requested, settings.foreground_timeout_seconds)


def recorded_digest(tool: str, arguments: Mapping[str, Any], secrets: Iterable[str] = ()) -> str:
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
    return launch_digest(tool, shown_arguments(arguments, secrets))


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


def tool_refusal(snap: _Snapshot, settings: PortSettings) -> ToolResult | None:
    """The schema rules the port answers with error codes of their own (the
    reference's), checked right after schema validation, before anything runs.

    They are the rules :data:`~sandrail.core._definitions.REFUSED_WITH_OWN_CODE`
    lists, so every rule here is also stated in the tool's schema: a command
    with a NUL character (``e2b_command_arguments_invalid``) or nothing but
    whitespace (``command_required``), ``background_timeout`` without
    ``background=true`` (``background_timeout_requires_background``),
    ``timeout`` with it (``timeout_requires_foreground``), a
    language outside :data:`LANGUAGES` and their aliases
    (``unsupported_language``).
    """
    args = snap.arguments
    if snap.tool == "run_command":
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
    elif (
        snap.tool in ("run_code", "sandbox_run_code")
        and resolve_language(args.get("language")) is None
    ):
        return _refuse(
            ErrorCode.UNSUPPORTED_LANGUAGE,
            "language must be one of: " + ", ".join(sorted(LANGUAGES)) + ".",
        )
    return None
