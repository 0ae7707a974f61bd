"""Argument rules beyond JSON Schema, and what a launch means.

:func:`launch_digest` defines when two launches with one operation key are
the same launch (C3). :func:`tool_refusal` refuses arguments no process can
be started with, before any side effect (C5).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

from ._canonical import canonical_json
from ._definitions import (
    LANGUAGES,
    resolve_language,
)
from ._env import env_name_problem
from ._results import (
    ErrorCode,
    ToolResult,
)
from ._snapshot import PortSettings, _refuse, _Snapshot
from ._validation import ArgumentProblem, arguments_rejection

__all__ = ["launch_digest", "tool_refusal"]

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
    "background": false}`` are the same launch."""
    filled = dict(_LAUNCH_DEFAULTS.get(tool, {}))
    filled.update(arguments)
    if "language" in filled:
        filled["language"] = resolve_language(filled["language"]) or filled["language"]
    return hashlib.sha256(canonical_json({"tool": tool, "arguments": filled})).hexdigest()


_MAX_ENV_ENTRY_BYTES: Final = 131_072
"""Linux refuses to exec with an environment string (NAME=VALUE) this long."""


def tool_refusal(snap: _Snapshot, settings: PortSettings) -> ToolResult | None:
    """Argument rules JSON Schema cannot say, checked before anything runs."""
    args = snap.arguments
    problems = _process_problems(args)
    if problems:
        return ToolResult(
            status="error", content=arguments_rejection(problems, settings.max_output_bytes)
        )
    if snap.tool == "run_command":
        if not args["command"].strip():
            return _refuse(ErrorCode.COMMAND_REQUIRED, "command must not be blank.")
        if not args.get("background") and args.get("background_timeout") is not None:
            return _refuse(
                ErrorCode.BACKGROUND_TIMEOUT_REQUIRES_BACKGROUND,
                "background_timeout applies only with background=true; use timeout.",
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


def _process_problems(args: Mapping[str, Any]) -> list[ArgumentProblem]:
    """What no process can be started with: a NUL byte in its command, working
    directory or environment, an environment name a shell cannot hold or
    reserves, or an environment entry longer than the kernel accepts. Refused here, before any
    side effect, instead of failing in the sandbox after it."""
    problems = [
        ArgumentProblem(path=f"arguments.{field}", reason="must not contain a NUL character")
        for field in ("command", "cwd")
        if isinstance(args.get(field), str) and "\x00" in args[field]
    ]
    for name, value in sorted((args.get("env") or {}).items()):
        path = f"arguments.env.{name}"
        reason = env_name_problem(name)
        if reason is not None:
            problems.append(ArgumentProblem(path=path, reason=reason))
        if "\x00" in value:
            problems.append(ArgumentProblem(path=path, reason="must not contain a NUL character"))
        elif len(name.encode("utf-8")) + 1 + len(value.encode("utf-8")) >= _MAX_ENV_ENTRY_BYTES:
            problems.append(
                ArgumentProblem(path=path, reason="must be under 128 KiB together with its name")
            )
    return problems
