"""The tools as effect programs.

Each tool is a generator that yields :mod:`effects <sandrail.core._effects>`,
receives their outcomes (or has an :class:`EffectFailure` thrown in), and
returns a :class:`ToolResult`. The programs never perform I/O, read a clock or
draw randomness; the drivers in :mod:`sandrail.interpreters` run them.

Strategy: every call walks the same spine, as in the reference port::

    check request -> admit (C14) -> validate arguments -> authorize (C8) -> guard
      -> ensure sandbox -> guard -> [publish -> guard] -> claim (C2) -> start
      -> guard -> wait -> guard -> collect output -> fit to budget (C12, C15)

and the launch program (:func:`sandrail.core._launch.launch_program`) reads
as that line does: one step a line. Each step
yields its effect, runs the guard after it (C9, C11) and ends the call by
raising :class:`~sandrail.core._call.StoppedError` with the result when there
is nothing more to do (a failure, a refusal, a guard that says stop); the
program returns that result.

One fact decides what a failure means: whether a side-effect request (ensure,
publish, start, cancel) may already have left. :class:`CallState` tracks it as
its :class:`Phase`, changed only by :meth:`CallState.dispatched`; before
dispatch a failure is an ``error`` with ``executed: false`` (C5), after it an
``uncertain`` carrying the full locator (C6). Guard verdicts come from
:data:`~sandrail.core._guard.GUARD_TABLE`; the at-most-once claim from
:mod:`sandrail.core._claim`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from typing import Any

import attrs

from ._budget import BudgetError, fit_to_budget
from ._call import CallState, StoppedError, bound_result
from ._contents import (
    APPROVAL_INSTRUCTION,
    _read_content,
    _status_content,
    _stop_content,
    admission_size,
)
from ._definitions import (
    READ_MAX_BYTES,
)
from ._effects import (
    TERMINAL_STATUSES,
    Allow,
    ApprovalRequired,
    Authorize,
    Cancel,
    CancelRequested,
    Delivery,
    Deny,
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
from ._launch import launch_program as _launch
from ._launch import record_unavailable
from ._masking import MAX_MASKED_BYTES, Redactions, mask_text, redaction_secrets
from ._requests import RUNTIME_ARTIFACTS
from ._results import (
    ErrorCode,
    ToolResult,
    error_result,
)
from ._rules import _INTEGER_ARGUMENTS, tool_refusal
from ._shown import NOTHING_SHOWN, ShownIdentities, exposed_env, strings
from ._snapshot import PortSettings, _check_request, _fits, _refuse, _Snapshot
from ._validation import ArgumentProblem, arguments_rejection, check_arguments

__all__ = ["Program", "tool_program"]

Program = Generator[Effect, Any, ToolResult]


def tool_program(
    request: object,
    settings: PortSettings,
    snapshot: _Snapshot | None = None,
    secrets: frozenset[str] = frozenset(),
    shown: ShownIdentities = NOTHING_SHOWN,
) -> Program:
    """The program for one request: refuses malformed requests, then runs the
    named tool. Always returns a :class:`ToolResult` whose content fits the
    budget unless the runtime governs results (C12).

    ``snapshot`` is :func:`snapshot_request` of this request, when the caller
    already took it (the port does, before running the call). ``secrets`` are
    env values this session passed to earlier commands: output that prints
    one shows :data:`REDACTED` instead (C17); this call's own env values are
    added by the program. A call whose identity holds one of them, or one of
    its own env values, is refused before anything runs (every result shows
    the identity whole, C13). ``shown`` are the identity values earlier
    results of the session showed: an env value among them (or inside one),
    or inside this call's task id or its sandbox id, is refused too, the
    sandbox id's once ``Ensure`` names it, before any start
    (:mod:`._shown`).
    """
    result = yield from _tool_program(request, settings, snapshot, secrets, shown)
    if result.status in ("ok", "uncertain"):
        return result  # already fitted by CallState.finish / CallState.uncertain
    if getattr(request, "result_governance", None) == RUNTIME_ARTIFACTS:
        return result
    return bound_result(result, settings.max_output_bytes)


def _masked_problems(
    problems: tuple[ArgumentProblem, ...], secrets: frozenset[str]
) -> tuple[ArgumentProblem, ...]:
    """``problems`` with env values masked (C17): a model may write one into
    a name it gets back, an env name or an unknown argument's. Masked before
    the budget fits them (the mask can be longer than the value)."""
    if not secrets:
        return problems
    redactions = Redactions(secrets)
    return tuple(
        ArgumentProblem(mask_text(problem.path, redactions), mask_text(problem.reason, redactions))
        for problem in problems
    )


def _tool_program(
    request: object,
    settings: PortSettings,
    snapshot: _Snapshot | None,
    secrets: frozenset[str],
    shown: ShownIdentities,
) -> Program:
    checked = snapshot if snapshot is not None else _check_request(request, settings)
    if isinstance(checked, ToolResult):
        return checked
    call = _admit(checked, settings, secrets, shown)
    if isinstance(call, ToolResult):
        return call
    try:
        yield from _authorize(call)
        if call.snap.tool == "sandbox_status":
            return (yield from _sandbox_status(call))
        if call.snap.tool in ("read_command_output", "stop_command"):
            return (yield from _owned_command(call))
        return (yield from _launch(call))
    except StoppedError as stopped:
        return stopped.result


def _admit(
    snap: _Snapshot, settings: PortSettings, secrets: frozenset[str], shown: ShownIdentities
) -> CallState | ToolResult:
    """The call, or its refusal before anything runs (C5): an identity the
    budget cannot hold (C14), arguments the schema or the reference's own
    rules refuse, a secret the identity would show (C17): this call's own
    identity and task id, or an identity the session already showed."""
    needed = admission_size(snap, settings)
    if not snap.governed and needed > settings.max_output_bytes:
        return error_result(
            ErrorCode.BUDGET_BELOW_MINIMUM_IDENTITY,
            required_bytes=needed,
            max_output_bytes=settings.max_output_bytes,
        )
    definition = settings.definition(snap.tool)
    assert definition is not None
    problems = check_arguments(definition, snap.arguments)
    if problems:
        env_values = redaction_secrets(snap.arguments.get("env"))
        return _rejection(_masked_problems(problems, secrets | env_values), settings)
    snap = _with_integers(snap)
    refused = tool_refusal(snap, settings)
    if refused is not None:
        return refused
    own_task = task_id(snap.session_id, settings.owner, snap.operation_key)
    exposed = _masked_in_identity(snap, own_task, secrets)
    env = snap.arguments.get("env")
    if env:
        exposed = exposed_env(env, snap.locator(), own_task, shown) + exposed
    if exposed:
        return _rejection(exposed, settings)
    call = CallState(snap, settings, secrets)
    if call.secrets is not secrets and not call.secrets <= secrets:
        kept = sum(len(value.encode("utf-8", "surrogatepass")) for value in call.secrets)
        if kept > MAX_MASKED_BYTES:
            problem = ArgumentProblem(
                path="arguments.env",
                reason=f"would make this session mask more than {MAX_MASKED_BYTES} bytes of env "
                "values (it masks every value it ever passed): reuse values, or start a new "
                "session",
            )
            return _rejection([problem], settings)
    return call


def _rejection(problems: Sequence[ArgumentProblem], settings: PortSettings) -> ToolResult:
    return ToolResult(
        status="error", content=arguments_rejection(problems, settings.max_output_bytes)
    )


def _with_integers(snap: _Snapshot) -> _Snapshot:
    """JSON Schema's "integer" admits 5.0; from here on it is 5. (The
    snapshot's arguments are already the program's private plain copy.)"""
    arguments = snap.arguments
    floats = [
        name for name in _INTEGER_ARGUMENTS & arguments.keys() if isinstance(arguments[name], float)
    ]
    if not floats:
        return snap
    arguments = dict(arguments)
    for name in floats:
        arguments[name] = int(arguments[name])
    return attrs.evolve(snap, arguments=arguments)


def _authorize(call: CallState) -> Generator[Effect, Any, None]:
    """Ask the harness's policy, then the guard (C8, C9); the call goes on
    only when the policy allowed it (raises :class:`StoppedError` else)."""
    snap, settings = call.snap, call.settings
    try:
        decision = yield Authorize(tool=snap.tool, call_id=snap.call_id)
    except EffectFailure as failure:
        if failure.aborted:
            raise StoppedError(
                _refuse(ErrorCode.CANCELED, "The call was aborted before anything ran.")
            ) from None
        raise StoppedError(
            _refuse(
                ErrorCode.HARNESS_CALLBACK_FAILED,
                "The harness's authorize callback failed or returned no decision; nothing "
                "ran. This is the harness's fault, not a refusal of this call.",
            )
        ) from None
    yield from call.go_on()
    redactions = Redactions(call.secrets)
    if isinstance(decision, ApprovalRequired) and isinstance(decision.interaction_id, str):
        raise StoppedError(_approval(decision.interaction_id, redactions, snap, settings))
    if not isinstance(decision, Allow):
        reason: object = decision.reason if isinstance(decision, Deny) else ""
        shown = mask_text(reason, redactions) if isinstance(reason, str) else ""
        raise StoppedError(
            _refuse(ErrorCode.POLICY_DENIED, shown or "The harness policy denied this call.")
        )


def _approval(
    interaction_id: str, redactions: Redactions, snap: _Snapshot, settings: PortSettings
) -> ToolResult:
    """C8: approval required, passed through unchanged, or not at all: an
    interaction id is an identity the harness needs whole, so one too long
    for the budget (C12) is a harness error rather than a cut."""
    content = {
        "status": "approval_required",
        "ok": False,
        "approval_required": True,
        "executed": False,
        "interaction_id": interaction_id,
        "instruction": APPROVAL_INSTRUCTION,
    }
    if mask_text(interaction_id, redactions) != interaction_id:
        # C17 over C8: a secret cannot be shown, and an id cannot be cut.
        return _refuse(
            ErrorCode.HARNESS_CALLBACK_FAILED,
            "The policy asked for approval with an interaction id that holds a secret value.",
        )
    if snap.governed or _fits(content, settings.max_output_bytes):
        return ToolResult(status="approval_required", content=content)
    # The instruction is words: cut them (head and tail) before the id.
    with contextlib.suppress(BudgetError):
        fitted = fit_to_budget(content, settings.max_output_bytes)
        return ToolResult(status="approval_required", content=fitted)
    return _refuse(
        ErrorCode.HARNESS_CALLBACK_FAILED,
        "The policy asked for approval with an interaction id too long for the budget.",
    )


def _masked_in_identity(
    snap: _Snapshot, own_task: str, secrets: frozenset[str]
) -> list[ArgumentProblem]:
    """The fields of the call's identity, its own task id included, that
    hold a value this session already masks (an earlier call's env value,
    or a port's ``redact=`` value): every result shows the identity whole
    (C13), so the call is refused before anything runs rather than show it
    (C17). A task id is a public pure function (C1): an earlier env value
    can be a later call's task id before that call comes. The problem
    names the field, never the value."""
    if not secrets:
        return []
    redactions = Redactions(secrets)
    return [
        ArgumentProblem(
            path=field,
            reason="holds a value this session masks (an env value of an earlier call, or a "
            "value the harness asked to redact); every result shows the call's identity "
            "whole, so it could not be kept secret: use an identity without it",
        )
        for field, value in sorted(snap.locator(task=own_task).items())
        if any(mask_text(text, redactions) != text for text in strings(value))
    ]


def _sandbox_status(call: CallState) -> Generator[Effect, Any, ToolResult]:
    snap, settings = call.snap, call.settings
    try:
        state = yield Inspect(session_id=snap.session_id, owner_key=settings.owner_key)
    except EffectFailure as failure:
        return call.failed(failure, side_effect=False)
    if not isinstance(state, SandboxState):
        return (yield from call.settle(_unexpected_answer()))
    result = ToolResult(status="ok", content=_status_content(settings, state))
    return (yield from call.finish(result))


def _unexpected_answer() -> ToolResult:
    return _refuse(ErrorCode.READ_FAILED, "The sandbox answered with something unexpected.")


# -- read_command_output and stop_command -------------------------------------


def _owned_command(call: CallState) -> Generator[Effect, Any, ToolResult]:
    """read_command_output and stop_command: ownership first (C4). Each step
    ends the call by raising :class:`StoppedError`."""
    wanted, sandbox_id = yield from _owned_task(call)
    if call.snap.tool == "stop_command":
        return (yield from _stop(call, sandbox_id, wanted))
    return (yield from _read(call, sandbox_id, wanted))


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
            raise StoppedError(call.failed(failure, side_effect=False)) from None
        sandbox_id = state.sandbox_id if isinstance(state, SandboxState) else None
        if sandbox_id is None:
            absent = _refuse(ErrorCode.TASK_NOT_FOUND, "This session has no sandbox to read from.")
            raise StoppedError((yield from call.settle(absent)))
    call.sandbox_id = sandbox_id
    yield from call.go_on()
    return wanted, sandbox_id


def _stop(call: CallState, sandbox_id: str, wanted: str) -> Generator[Effect, Any, ToolResult]:
    """Request the end of the task's process group (C18), a side effect."""
    try:
        cancelled = yield Cancel(sandbox_id=sandbox_id, task_id=wanted)
    except EffectFailure as failure:
        if failure.delivery is Delivery.MAYBE_SENT or failure.aborted:
            call.dispatched()
        return call.failed(failure, side_effect=True)
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
            return call.failed(failure, side_effect=False)
        yield from call.go_on()
    try:
        chunk = yield Read(
            sandbox_id=sandbox_id,
            task_id=wanted,
            stdout_cursor=args.get("stdout_cursor", 0),
            stderr_cursor=args.get("stderr_cursor", 0),
            max_bytes=args.get("max_bytes", READ_MAX_BYTES),
        )
    except EffectFailure as failure:
        return call.failed(failure, side_effect=False)
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
