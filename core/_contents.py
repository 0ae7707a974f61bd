"""Result contents.

The same builders serve real results and the worst cases that admission
(C14) measures, so the two cannot disagree.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

from ._budget import fixed_size
from ._canonical import CanonicalJSONError, canonical_json
from ._definitions import (
    LANGUAGES,
    MAX_TIMEOUT_SECONDS,
)
from ._effects import (
    BACKEND_LABELS,
    MAX_BACKEND_LABEL_CHARS,
    MAX_BOUNDARY_CHARS,
    BackendLabel,
    CommandState,
    SandboxState,
)
from ._identity import AgentIdentity, AgentOwner, NativeIdentity
from ._results import (
    ArtifactRef,
    ErrorCode,
)
from ._snapshot import _MAX_SAFE_INTEGER, PortSettings, _Snapshot

__all__ = [
    "APPROVAL_INSTRUCTION",
    "FOLLOW_BACKGROUND",
    "admission_size",
    "cut_output_instruction",
    "minimum_output_bytes",
    "uncertain_instruction",
]

_LONGEST_SANDBOX_ID: Final = "s" * 128
_LONGEST_TASK_ID: Final = "f" * 64
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


_UNCERTAIN_REASONS: Final = (
    ErrorCode.EVIDENCE_INCOMPLETE,
    ErrorCode.SANDBOX_OUTCOME_UNKNOWN,
    ErrorCode.AUTHORITY_LOST,
    ErrorCode.REQUEST_DRIFTED,
    ErrorCode.ABORTED,
)
# What the model reads next to each result (DESIGN §12): what it can do with
# the tools it has. A model cannot choose an operation key; it can repeat a
# call exactly, which every adapter maps back to the earlier call's key while
# that call is unsettled (``Toolset(reconcile_repeats=True)``), and it can
# read a task by its id.
_REPEAT = (
    "This call may have run: do not send it as a new or changed call. To learn what "
    "happened, repeat exactly this call (same tool, same arguments): it is matched to this "
    "one and never runs twice."
)
_READ_TASK = " Or read the task with read_command_output and this task_id."
_REPEAT_READ = (
    "What this read found could not be confirmed; reading changes nothing. Repeat exactly "
    "this call to read again."
)
APPROVAL_INSTRUCTION: Final = (
    "A person must approve this call before it runs; nothing ran. Once they have approved "
    "it, repeat exactly this call (same tool, same arguments); do not work around it with "
    "another call."
)
_REPEAT_STOP = (
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


def uncertain_instruction(tool: str, readable: bool) -> str:
    """What an ``uncertain`` result of ``tool`` tells the model to do;
    ``readable``: the port also offers ``read_command_output``."""
    if tool == "read_command_output":
        return _REPEAT_READ
    if tool == "stop_command":
        return _REPEAT_STOP
    return _REPEAT + (_READ_TASK if readable else "")


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


def _uncertain_content(
    snap: _Snapshot,
    reason: ErrorCode,
    observed: str | None,
    sandbox_id: str | None,
    task: str | None,
    readable: bool = True,
) -> dict[str, Any]:
    content: dict[str, Any] = {
        "status": "uncertain",
        "ok": False,
        "error_type": reason.value,
        "evidence_incomplete": True,
        "observed_result": observed,
    }
    content.update(snap.locator(sandbox_id, task))
    content["instruction"] = uncertain_instruction(snap.tool, readable and task is not None)
    return content


def _output_budget_note(artifact: ArtifactRef | None) -> dict[str, Any]:
    note: dict[str, Any] = {"truncated": True}
    if artifact is not None:
        note["artifact_uri"] = artifact.uri
        note["size_bytes"] = artifact.size_bytes
    return note


def _worst_state() -> CommandState:
    return CommandState(
        status="timed_out",
        exit_code=-_MAX_SAFE_INTEGER,
        stdout_bytes=_MAX_SAFE_INTEGER,
        stderr_bytes=_MAX_SAFE_INTEGER,
    )


def admission_size(snap: _Snapshot, settings: PortSettings) -> int:
    """Bytes the largest fixed part of any result of this call needs (C14).

    Measures the minimal ``uncertain`` result with the full identity and the
    longest legal sandbox and task ids, and the fixed part of the tool's
    ``ok`` result with its largest legal numbers and a cut-output note. Only
    shrinkable text can give way later, so a call whose fixed part cannot fit
    is refused before any side effect.

    Strategy: a result's fixed part is its locator plus fields that do not
    depend on who asked. The size of a JSON object is the sum of its parts'
    sizes (keys are distinct), so the identity-free remainder of each result
    shape is measured once per tool and cached; a call then costs one
    measurement of its own locator.
    """
    sizes = []
    base: int | None = None
    for with_sandbox, overhead in _fixed_overheads(
        snap.tool, settings.contract, settings.allow_internet_access
    ):
        if with_sandbox is None:
            sizes.append(overhead)
            continue
        if base is None:
            # The locator without its ids, measured once; each id adds its
            # entry (a comma, the key, a colon, the value: keys are distinct).
            base = len(canonical_json(snap.locator()))
        size = base + _TASK_ENTRY + (_SANDBOX_ENTRY if with_sandbox else 0)
        sizes.append(size - 1 + overhead)
    return max(sizes)


def minimum_output_bytes(
    settings: PortSettings,
    tool: str,
    identity: AgentIdentity | NativeIdentity | None = None,
    *,
    call_id: str = "c",
    operation_key: str = "k",
) -> int:
    """The smallest ``max_output_bytes`` with which a call of ``tool`` with
    ``call_id`` and ``operation_key`` can be admitted (C14):
    :func:`admission_size` of such a call. By default one-character ids, so
    no call of ``tool`` at all can be admitted below it (longer ids need
    more, byte for byte).

    ``identity`` is the one calls will state; ``None`` measures the shortest
    one the owner allows (for a native owner whose identity is only known
    call by call: its scope, one-character ids, fence 0).
    """
    if identity is None:
        owner = settings.owner
        if isinstance(owner, AgentOwner):
            identity = AgentIdentity(agent_id=owner.agent_id)
        else:
            identity = NativeIdentity(
                scope=owner.scope,
                run_id="r",
                turn_id="t",
                build_id="b",
                task_chain_id="c",
                parent_run_id="p",
                execution_fence=0,
            )
    snap = _Snapshot(
        tool=tool,
        call_id=call_id,
        operation_key=operation_key,
        session_id=settings.session_id,
        identity=identity,
        arguments={},
        digest="",
        governed=False,
    )
    return admission_size(snap, settings)


def _entry_size(key: str, value: str) -> int:
    """Bytes an entry adds to a non-empty object's canonical JSON."""
    return 1 + len(canonical_json(key)) + 1 + len(canonical_json(value))


_TASK_ENTRY: Final = _entry_size("task_id", _LONGEST_TASK_ID)
_SANDBOX_ENTRY: Final = _entry_size("sandbox_id", _LONGEST_SANDBOX_ID)


@functools.lru_cache(maxsize=64)
def _fixed_overheads(
    tool: str, contract: str, allow_internet_access: bool
) -> tuple[tuple[bool | None, int], ...]:
    """For each result shape of ``tool``: whether its locator names the
    sandbox (``None``: it has no locator), and the size of its fixed part
    less its locator (plus one, for the brace the two share)."""
    snap = _Snapshot(
        tool=tool,
        call_id="",
        operation_key="",
        session_id="",
        identity=AgentIdentity(agent_id=""),
        arguments={},
        digest="",
        governed=False,
    )
    settings = PortSettings(
        session_id="",
        owner=AgentOwner(agent_id=""),
        definitions=(),
        contract=contract,
        allow_internet_access=allow_internet_access,
    )
    sandbox_id, task = _LONGEST_SANDBOX_ID, _LONGEST_TASK_ID
    worst = _worst_state()
    note = _output_budget_note(
        ArtifactRef(uri="u" * _ARTIFACT_URI_MAX, size_bytes=_MAX_SAFE_INTEGER)
    )
    reason = max(_UNCERTAIN_REASONS, key=lambda code: len(code.value))
    shapes: list[tuple[bool | None, dict[str, Any]]] = [
        (True, _uncertain_content(snap, reason, "timed_out", sandbox_id, task))
    ]
    backend = max(BACKEND_LABELS, key=len)
    if tool in ("run_command", "run_code", "sandbox_run_code"):
        language = max(LANGUAGES, key=len) if tool != "run_command" else None
        launch = _launch_content(
            snap, settings, sandbox_id, task, worst, "", language, True, backend
        )
        launch.update(
            stdout="",
            stderr="",
            instruction="",
            output_budget=note,
            retention_limited=True,
            timeout_seconds=MAX_TIMEOUT_SECONDS,
        )
        shapes.append((True, launch))
    elif tool == "read_command_output":
        read = _read_content(snap, task, worst, "", "", _MAX_SAFE_INTEGER, _MAX_SAFE_INTEGER, True)
        shapes.append((False, read | {"output_budget": note}))
    elif tool == "stop_command":
        shapes.append((True, _stop_content(snap, sandbox_id, task, worst)))
    else:
        for label in BACKEND_LABELS:
            state = SandboxState(sandbox_id=sandbox_id, phase="closing", backend=label)
            shapes.append((None, _status_content(settings, state)))
        stated = SandboxState(
            sandbox_id=sandbox_id,
            phase="closing",
            backend="x" * MAX_BACKEND_LABEL_CHARS,
            isolated=False,
            boundary="x" * MAX_BOUNDARY_CHARS,
        )
        shapes.append((None, _status_content(settings, stated)))
    overheads: list[tuple[bool | None, int]] = []
    for with_sandbox, content in shapes:
        size = fixed_size(content)
        if with_sandbox is not None:
            locator = snap.locator(sandbox_id if with_sandbox else None, task)
            size -= len(canonical_json(locator)) - 1
        overheads.append((with_sandbox, size))
    return tuple(overheads)


def _launch_content(
    snap: _Snapshot,
    settings: PortSettings,
    sandbox_id: str,
    task: str,
    state: CommandState,
    command: str,
    language: str | None,
    deduplicated: bool,
    backend: BackendLabel = "e2b",
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


_BOUNDARIES: Final[Mapping[str, tuple[bool, str]]] = {
    "e2b": (True, "Remote E2B sandbox; the host's files are not shared with it."),
    "simulator": (
        False,
        "sandrail's in-memory simulator: no command really runs and nothing is isolated. "
        "It answers a few commands (echo, true, false, exit, sleep, seq) and the ones its "
        "harness scripted; any other command exits 127 with a 'not emulated' line on stderr.",
    ),
}
"""Per built-in backend label: whether commands run isolated from the host,
and the boundary in words (``sandbox_status`` says both), where the answer
states none (every backend may state its own: :class:`SandboxState`)."""

_UNSTATED: Final = (False, "The backend states no boundary: assume nothing is isolated.")
"""What ``sandbox_status`` says for a label of no built-in backend whose
answer states no boundary."""


def _status_content(settings: PortSettings, state: SandboxState) -> dict[str, Any]:
    isolated, boundary = _BOUNDARIES.get(state.backend, _UNSTATED)
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
