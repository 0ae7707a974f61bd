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
from collections.abc import Mapping
from typing import Any, Final

from ._canonical import canonical_json
from ._definitions import (
    LANGUAGES,
    MAX_TIMEOUT_SECONDS,
    resolve_language,
)
from ._masking import REDACTED
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


def recorded_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """The launch digest an ownership record keeps (issue 20, item 1): that
    of the request with every env value replaced by the redaction marker.

    A plain digest over env values would let anyone who reads the record
    test guesses of a weak value offline, so the record holds none: two
    launches that differ only in env values have the same recorded digest,
    and the sandbox's claim (which keeps the full digest, keyed where it
    rests) is what tells them apart (C3). The same digest a recording keeps
    for the redacted request, so a replay computes it again."""
    env = arguments.get("env")
    if isinstance(env, Mapping) and env:
        arguments = {**arguments, "env": dict.fromkeys(env, REDACTED)}
    return launch_digest(tool, arguments)


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
