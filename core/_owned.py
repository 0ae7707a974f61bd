"""The programs of the tools that launch nothing: ``sandbox_status``, which
looks, and ``read_command_output`` and ``stop_command``, which act on a task
this session launched (C4). Each is a tool record's ``program``
(:mod:`._tools`): given the admitted, authorized call, the rest of it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ._call import CallState, StoppedError
from ._contents import _read_content, _status_content, _stop_content
from ._definitions import READ_MAX_BYTES
from ._effects import (
    TERMINAL_STATUSES,
    Cancel,
    CancelRequested,
    Delivery,
    Effect,
    EffectFailure,
    Inspect,
    OutputChunk,
    OwnedCommand,
    Read,
    ResolveOwned,
    SandboxState,
    Wait,
)
from ._identity import task_id
from ._launch import record_unavailable
from ._results import ErrorCode, ToolResult
from ._snapshot import _refuse

__all__ = ["read_program", "sandbox_status_program", "stop_program"]


def sandbox_status_program(call: CallState) -> Generator[Effect, Any, ToolResult]:
    """``sandbox_status``: what the session's sandbox is, created or not."""
    snap, settings = call.snap, call.settings
    try:
        state = yield Inspect(session_id=snap.session_id, owner_key=settings.owner_key)
    except EffectFailure as failure:
        return call.failed(failure, side_effect=Inspect.side_effect)
    if not isinstance(state, SandboxState):
        return (yield from call.settle(_unexpected_answer()))
    result = ToolResult(status="ok", content=_status_content(settings, state))
    return (yield from call.finish(result))


def _unexpected_answer() -> ToolResult:
    return _refuse(ErrorCode.READ_FAILED, "The sandbox answered with something unexpected.")


# -- read_command_output and stop_command: a task this session owns ------------


def read_program(call: CallState) -> Generator[Effect, Any, ToolResult]:
    """``read_command_output``: ownership first (C4), then wait if asked and
    read a page of the task's output."""
    wanted, sandbox_id = yield from _owned_task(call)
    return (yield from _read(call, sandbox_id, wanted))


def stop_program(call: CallState) -> Generator[Effect, Any, ToolResult]:
    """``stop_command``: ownership first (C4), then the end of the task's
    process group (C18)."""
    wanted, sandbox_id = yield from _owned_task(call)
    return (yield from _stop(call, sandbox_id, wanted))


def _owned_task(call: CallState) -> Generator[Effect, Any, tuple[str, str]]:
    """The task asked for, if this session owns it (C4), and its sandbox;
    then the guard. (The guard after Authorize also stands before the
    first step.)"""
    snap, settings = call.snap, call.settings
    wanted: str = snap.arguments["task_id"]
    try:
        owned = yield ResolveOwned(task_id=wanted)
    except EffectFailure:
        # Ownership unproven: nothing is sent (C4).
        raise StoppedError(record_unavailable()) from None
    if not isinstance(owned, OwnedCommand) or owned.task_id != wanted:
        raise StoppedError(
            _refuse(ErrorCode.NOT_OWNED, "This session launched no command with that task_id.")
        )
    if task_id(snap.session_id, settings.owner, owned.operation_key) != wanted:
        raise StoppedError(
            _refuse(
                ErrorCode.OWNED_OPERATION_MISMATCH,
                "The owned record's operation key does not derive this task_id.",
            )
        )
    call.task_id = wanted
    sandbox_id = owned.sandbox_id
    if sandbox_id is None:
        try:
            state = yield Inspect(session_id=snap.session_id, owner_key=settings.owner_key)
        except EffectFailure as failure:
            raise StoppedError(call.failed(failure, side_effect=Inspect.side_effect)) from None
        sandbox_id = state.sandbox_id if isinstance(state, SandboxState) else None
        if sandbox_id is None:
            absent = _refuse(ErrorCode.TASK_NOT_FOUND, "This session has no sandbox to read from.")
            raise StoppedError((yield from call.settle(absent)))
    call.sandbox_id = sandbox_id
    call.went_on((yield call.check))
    return wanted, sandbox_id


def _stop(call: CallState, sandbox_id: str, wanted: str) -> Generator[Effect, Any, ToolResult]:
    """Request the end of the task's process group (C18), a side effect."""
    try:
        cancelled = yield Cancel(sandbox_id=sandbox_id, task_id=wanted)
    except EffectFailure as failure:
        if failure.delivery is Delivery.MAYBE_SENT or failure.aborted:
            call.dispatched()
        return call.failed(failure, side_effect=Cancel.side_effect)
    call.dispatched()
    if not isinstance(cancelled, CancelRequested):
        return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
    call.observed = cancelled.state.status
    if cancelled.state.status == "unknown":
        return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
    content = _stop_content(call.snap, sandbox_id, wanted, cancelled.state)
    return (yield from call.finish(ToolResult(status="ok", content=content)))


def _read(call: CallState, sandbox_id: str, wanted: str) -> Generator[Effect, Any, ToolResult]:
    """Wait if asked, then read a page of the task's output."""
    args = call.snap.arguments
    wait_seconds = args.get("wait_seconds", 0)
    if wait_seconds:
        try:
            yield Wait(sandbox_id=sandbox_id, task_id=wanted, timeout_seconds=wait_seconds)
        except EffectFailure as failure:
            return call.failed(failure, side_effect=Wait.side_effect)
        call.went_on((yield call.check))
    try:
        chunk = yield Read(
            sandbox_id=sandbox_id,
            task_id=wanted,
            stdout_cursor=args.get("stdout_cursor", 0),
            stderr_cursor=args.get("stderr_cursor", 0),
            max_bytes=args.get("max_bytes", READ_MAX_BYTES),
        )
    except EffectFailure as failure:
        return call.failed(failure, side_effect=Read.side_effect)
    if not isinstance(chunk, OutputChunk):
        return (yield from call.settle(_unexpected_answer()))
    call.observed = chunk.state.status if chunk.state.status in TERMINAL_STATUSES else None
    if chunk.state.status == "unknown":
        return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
    content = _read_content(
        call.snap,
        wanted,
        chunk.state,
        chunk.stdout,
        chunk.stderr,
        chunk.next_stdout_cursor,
        chunk.next_stderr_cursor,
        chunk.more,
    )
    return (yield from call.finish(ToolResult(status="ok", content=content)))
