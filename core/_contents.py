"""Result contents.

The same builders serve real results and the worst cases that admission
(C14) measures, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from ._canonical import CanonicalJSONError, canonical_json
from ._definitions import MAX_TIMEOUT_SECONDS
from ._effects import (
    MAX_BACKEND_LABEL_CHARS,
    MAX_BOUNDARY_CHARS,
    BackendLabel,
    CommandState,
    SandboxState,
)
from ._results import (
    ArtifactRef,
    ErrorCode,
)
from ._snapshot import _MAX_SAFE_INTEGER, PortSettings, _Snapshot
from ._tool_record import Shape

__all__ = [
    "APPROVAL_INSTRUCTION",
    "FOLLOW_BACKGROUND",
    "LONGEST_SANDBOX_ID",
    "LONGEST_TASK_ID",
    "REPEAT_LAUNCH",
    "REPEAT_READ",
    "REPEAT_STOP",
    "UNCERTAIN_REASONS",
    "cut_output_instruction",
    "launch_shapes",
    "read_shapes",
    "status_shapes",
    "stop_shapes",
    "uncertain_content",
    "usable_artifact",
]

LONGEST_SANDBOX_ID: Final = "s" * 128
LONGEST_TASK_ID: Final = "f" * 64
_ARTIFACT_URI_MAX: Final = 256


def usable_artifact(ref: object) -> bool:
    """Whether an artifact store's answer fits the room admission reserved
    for it (C14): a URI whose JSON form is no longer than that of 256 ASCII
    characters, and a size that is a safe integer. Anything else is treated
    as no artifact: the result still fits, just without the reference."""
    if not isinstance(ref, ArtifactRef) or not isinstance(ref.uri, str):
        return False
    size = ref.size_bytes
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= _MAX_SAFE_INTEGER:
        return False
    try:
        return len(canonical_json(ref.uri)) <= _ARTIFACT_URI_MAX + 2
    except CanonicalJSONError:
        return False


# What the model reads next to each result: what it can do with
# the tools it has. A model cannot choose an operation key; it can repeat a
# call exactly, which every adapter maps back to the earlier call's key while
# that call is unsettled (``Toolset(reconcile_repeats=True)``), and it can
# read a task by its id.
REPEAT_LAUNCH: Final = (
    "This call may have run: do not send it as a new or changed call. To learn what "
    "happened, repeat exactly this call (same tool, same arguments): it is matched to this "
    "one and never runs twice."
)
REPEAT_READ: Final = (
    "What this read found could not be confirmed; reading changes nothing. Repeat exactly "
    "this call to read again."
)
APPROVAL_INSTRUCTION: Final = (
    "A person must approve this call before it runs; nothing ran. Once they have approved "
    "it, repeat exactly this call (same tool, same arguments); do not work around it with "
    "another call."
)
REPEAT_STOP: Final = (
    "The stop request may not have reached the command. Repeat exactly this call, then "
    "confirm with read_command_output."
)
FOLLOW_BACKGROUND: Final = (
    "The command runs in the background. Follow it with read_command_output and this "
    "task_id (wait_seconds waits for it to end); end it with stop_command."
)
_FOLLOW_RUNNING = (
    "The command is still running: read again later with the returned cursors "
    "(wait_seconds waits for it to end), or end it with stop_command."
)
_READ_MORE = "More output may follow: read again with the returned stdout_cursor and stderr_cursor."
_READ_CUT = (
    " The output was cut to fit (see output_budget): read any part with read_command_output "
    "and this task_id, choosing stdout_cursor and stderr_cursor as byte offsets."
)


def cut_output_instruction(readable: bool) -> str:
    """Said of a launch whose output was cut to fit the budget."""
    return _READ_CUT.strip() if readable else ""


def _state_fields(state: CommandState) -> dict[str, Any]:
    return {
        "command_status": state.status,
        "exit_code": state.exit_code,
        "stdout_bytes": state.stdout_bytes,
        "stderr_bytes": state.stderr_bytes,
    }


def uncertain_content(
    locator: Mapping[str, Any], reason: ErrorCode, observed: str | None, instruction: str
) -> dict[str, Any]:
    """The one shape of an ``uncertain`` result (C6): the full ``locator``,
    never ``executed: false``, what was observed, and what to do."""
    content: dict[str, Any] = {
        "status": "uncertain",
        "ok": False,
        "error_type": reason.value,
        "evidence_incomplete": True,
        "observed_result": observed,
    }
    content.update(locator)
    content["instruction"] = instruction
    return content


def _uncertain_content(
    snap: _Snapshot,
    reason: ErrorCode,
    observed: str | None,
    sandbox_id: str | None,
    task: str | None,
    instruction: str,
) -> dict[str, Any]:
    return uncertain_content(snap.locator(sandbox_id, task), reason, observed, instruction)


def _output_budget_note(artifact: ArtifactRef | None) -> dict[str, Any]:
    note: dict[str, Any] = {"truncated": True}
    if artifact is not None:
        note["artifact_uri"] = artifact.uri
        note["size_bytes"] = artifact.size_bytes
    return note


_WORST: Final = CommandState(
    status="timed_out",
    exit_code=-_MAX_SAFE_INTEGER,
    stdout_bytes=_MAX_SAFE_INTEGER,
    stderr_bytes=_MAX_SAFE_INTEGER,
)
"""A command state with the largest legal numbers."""
_WORST_NOTE: Final = _output_budget_note(
    ArtifactRef(uri="u" * _ARTIFACT_URI_MAX, size_bytes=_MAX_SAFE_INTEGER)
)
"""A cut-output note naming the longest artifact reference admission allows."""
_BACKEND: Final = "x" * MAX_BACKEND_LABEL_CHARS
"""The longest label a backend may state (a port refuses a longer one when
it is made: :func:`~sandrail.core._effects.check_backend_label`)."""
UNCERTAIN_REASONS: Final = (
    ErrorCode.EVIDENCE_INCOMPLETE,
    ErrorCode.SANDBOX_OUTCOME_UNKNOWN,
    ErrorCode.AUTHORITY_LOST,
    ErrorCode.REQUEST_DRIFTED,
    ErrorCode.ABORTED,
)
"""Every ``error_type`` a program's ``uncertain`` result can carry."""


# The shapes of each tool's ``ok`` results at their largest (a record's
# ``result_shapes``; admission measures them, C14). Each takes a snapshot
# with empty identities and the settings that change a shape.


def launch_shapes(language: str | None) -> Callable[[_Snapshot, PortSettings], list[Shape]]:
    """The shapes of a launch's ``ok`` result (a snippet's in ``language``,
    a command's for ``None``): a foreground one with a cut-output note and
    its timeout, which covers a background one too."""

    def shapes(snap: _Snapshot, settings: PortSettings) -> list[Shape]:
        sandbox_id, task = LONGEST_SANDBOX_ID, LONGEST_TASK_ID
        launch = _launch_content(
            snap, settings, sandbox_id, task, _WORST, "", language, True, _BACKEND
        )
        launch.update(
            stdout="",
            stderr="",
            instruction="",
            output_budget=_WORST_NOTE,
            retention_limited=True,
            timeout_seconds=MAX_TIMEOUT_SECONDS,
        )
        return [(True, launch)]

    return shapes


def read_shapes(snap: _Snapshot, settings: PortSettings) -> list[Shape]:
    """A page of output with a cut-output note (its locator has no sandbox)."""
    read = _read_content(
        snap, LONGEST_TASK_ID, _WORST, "", "", _MAX_SAFE_INTEGER, _MAX_SAFE_INTEGER, True
    )
    return [(False, read | {"output_budget": _WORST_NOTE})]


def stop_shapes(snap: _Snapshot, settings: PortSettings) -> list[Shape]:
    """A stop request's answer."""
    return [(True, _stop_content(snap, LONGEST_SANDBOX_ID, LONGEST_TASK_ID, _WORST))]


def status_shapes(snap: _Snapshot, settings: PortSettings) -> list[Shape]:
    """The sandbox's status, as any backend tells it (no locator): its label
    and boundary as long as a backend may state them, or no boundary."""
    states = [
        SandboxState(sandbox_id=LONGEST_SANDBOX_ID, phase="closing", backend=_BACKEND),
        SandboxState(
            sandbox_id=LONGEST_SANDBOX_ID,
            phase="closing",
            backend=_BACKEND,
            isolated=False,
            boundary="x" * MAX_BOUNDARY_CHARS,
        ),
    ]
    return [(None, _status_content(settings, state)) for state in states]


def _launch_content(
    snap: _Snapshot,
    settings: PortSettings,
    sandbox_id: str,
    task: str,
    state: CommandState,
    command: str,
    language: str | None,
    deduplicated: bool,
    backend: BackendLabel,
) -> dict[str, Any]:
    content: dict[str, Any] = {
        "status": "ok",
        "ok": True,
        "backend": backend,
        "deduplicated": deduplicated,
    }
    content.update(_state_fields(state))
    content.update(snap.locator(sandbox_id, task))
    content["command"] = command
    if language is not None:
        content["execution_model"] = "snippet_file"
        content["language"] = language
    return content


def _read_content(
    snap: _Snapshot,
    task: str,
    state: CommandState,
    stdout: str,
    stderr: str,
    next_stdout: int,
    next_stderr: int,
    more: bool,
) -> dict[str, Any]:
    content: dict[str, Any] = {"status": "ok", "ok": True}
    content.update(_state_fields(state))
    content.update(snap.locator(None, task))
    content.update(
        {
            "stdout": stdout,
            "stderr": stderr,
            "stdout_cursor": next_stdout,
            "stderr_cursor": next_stderr,
            "output_may_be_truncated": more,
        }
    )
    if more:
        content["instruction"] = _READ_MORE
    elif state.status == "running":
        content["instruction"] = _FOLLOW_RUNNING
    return content


def _stop_content(
    snap: _Snapshot, sandbox_id: str, task: str, state: CommandState
) -> dict[str, Any]:
    content: dict[str, Any] = {"status": "ok", "ok": True, "cancel_requested": True}
    content.update(_state_fields(state))
    content.update(snap.locator(sandbox_id, task))
    content["instruction"] = (
        "A cancel request is not proof the command ended; read its output to confirm."
    )
    return content


_UNSTATED: Final = (False, "The backend states no boundary: assume nothing is isolated.")
"""What ``sandbox_status`` says when the backend's answer states no
boundary (every backend states its own: :class:`SandboxState`)."""


def _status_content(settings: PortSettings, state: SandboxState) -> dict[str, Any]:
    isolated, boundary = _UNSTATED
    if state.boundary is not None:
        isolated, boundary = bool(state.isolated), state.boundary
    return {
        "status": "ok",
        "ok": True,
        "backend": state.backend,
        "enabled": True,
        "isolated": isolated,
        "sandbox_id": state.sandbox_id,
        "sandbox_phase": state.phase,
        "allow_internet_access": settings.allow_internet_access,
        "boundary": boundary,
        "contracts": [settings.contract],
    }
