"""The tools as effect programs.

Each tool is a generator that yields :mod:`effects <sandrail.core._effects>`,
receives their outcomes (or has an :class:`EffectFailure` thrown in), and
returns a :class:`ToolResult`. The programs never perform I/O, read a clock or
draw randomness; the drivers in :mod:`sandrail.interpreters` run them.

Strategy: every call walks the same spine, as in the reference port::

    check request -> admit (C14) -> validate arguments -> authorize (C8)
      -> guard -> [ensure sandbox] -> guard -> [publish] -> guard
      -> start -> guard -> wait / read -> guard -> fit to budget (C12, C15)

One fact decides what a failure means: whether a side-effect request (ensure,
publish, start, cancel) may already have left. :class:`_Call` tracks it as
its :class:`Phase`; before dispatch a failure is an ``error`` with
``executed: false`` (C5), after it an ``uncertain`` carrying the full locator
(C6). Guard verdicts come from :data:`~sandrail.core._guard.GUARD_TABLE`.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from typing import Any, Final

import attrs

from ._call import _Call, bound_result
from ._collect import collect_output
from ._contents import (
    _launch_content,
    _read_content,
    _status_content,
    _stop_content,
    admission_size,
)
from ._definitions import (
    LANGUAGES,
    MAX_TIMEOUT_SECONDS,
    READ_MAX_BYTES,
    resolve_language,
)
from ._effects import (
    TERMINAL_STATUSES,
    Allow,
    ApprovalRequired,
    Authorize,
    Cancel,
    CancelRequested,
    CommandState,
    Delivery,
    Deny,
    Effect,
    EffectFailure,
    Ensure,
    Inspect,
    OutputChunk,
    OwnedCommand,
    Publish,
    Published,
    Read,
    RememberOwned,
    ResolveOwned,
    SandboxReady,
    SandboxState,
    Start,
    Started,
    StartRefused,
    Wait,
)
from ._guard import Phase
from ._identity import NativeIdentity, task_id
from ._masking import MAX_MASKED_BYTES, Redactions, mask_text, redaction_secrets
from ._requests import RUNTIME_ARTIFACTS
from ._results import (
    AgentCommandRef,
    BackgroundCommandRef,
    ErrorCode,
    NativeCommandRef,
    ToolResult,
    error_result,
)
from ._rules import _INTEGER_ARGUMENTS, launch_digest, recorded_digest, tool_refusal
from ._shown import NOTHING_SHOWN, ShownIdentities, exposed_env, exposed_in_sandbox_id
from ._snapshot import PortSettings, _check_request, _fits, _refuse, _Snapshot
from ._validation import ArgumentProblem, arguments_rejection, check_arguments

__all__ = ["WAIT_GRACE_SECONDS", "Program", "tool_program"]

Program = Generator[Effect, Any, ToolResult]

WAIT_GRACE_SECONDS: Final = 15
"""A foreground wait outlasts the in-sandbox deadline by this much, so the
sandbox's own timeout verdict (with its exit code) is normally observed."""


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
        return result  # already fitted by _Call.finish / _Call.uncertain
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
    snap = checked
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
        return ToolResult(
            status="error",
            content=arguments_rejection(
                _masked_problems(problems, secrets | redaction_secrets(snap.arguments.get("env"))),
                settings.max_output_bytes,
            ),
        )
    # The snapshot's arguments are already the program's private plain copy.
    arguments = snap.arguments
    floats = [
        name for name in _INTEGER_ARGUMENTS & arguments.keys() if isinstance(arguments[name], float)
    ]
    if floats:
        # JSON Schema's "integer" admits 5.0; from here on it is 5.
        arguments = dict(arguments)
        for name in floats:
            arguments[name] = int(arguments[name])
        snap = attrs.evolve(snap, arguments=arguments)
    refused = tool_refusal(snap, settings)
    if refused is not None:
        return refused
    exposed = _masked_in_identity(snap, secrets)
    env = snap.arguments.get("env")
    if env:
        own_task = task_id(snap.session_id, settings.owner, snap.operation_key)
        exposed = exposed_env(env, snap.locator(), own_task, shown) + exposed
    if exposed:
        return ToolResult(
            status="error", content=arguments_rejection(exposed, settings.max_output_bytes)
        )
    call = _Call(snap, settings, secrets)
    if call.secrets is not secrets and not call.secrets <= secrets:
        kept = sum(len(value.encode("utf-8", "surrogatepass")) for value in call.secrets)
        if kept > MAX_MASKED_BYTES:
            problem = ArgumentProblem(
                path="arguments.env",
                reason=f"would make this session mask more than {MAX_MASKED_BYTES} bytes of env "
                "values (it masks every value it ever passed): reuse values, or start a new "
                "session",
            )
            return ToolResult(
                status="error",
                content=arguments_rejection([problem], settings.max_output_bytes),
            )
    redactions = Redactions(call.secrets)

    try:
        decision = yield Authorize(tool=snap.tool, call_id=snap.call_id)
    except EffectFailure as failure:
        if failure.aborted:
            return _refuse(ErrorCode.CANCELED, "The call was aborted before anything ran.")
        return _refuse(
            ErrorCode.HARNESS_CALLBACK_FAILED,
            "The harness's authorize callback failed; nothing ran.",
        )
    stop = yield from call.guard()
    if stop is not None:
        return stop
    if isinstance(decision, ApprovalRequired) and isinstance(decision.interaction_id, str):
        # C8: passed through unchanged, or not at all: an interaction id is
        # an identity the harness needs whole, so one too long for the budget
        # (C12) is a harness error rather than a cut.
        content = {
            "ok": False,
            "approval_required": True,
            "executed": False,
            "interaction_id": decision.interaction_id,
        }
        if mask_text(decision.interaction_id, redactions) != decision.interaction_id:
            # C17 over C8: a secret cannot be shown, and an id cannot be cut.
            return _refuse(
                ErrorCode.HARNESS_CALLBACK_FAILED,
                "The policy asked for approval with an interaction id that holds a secret value.",
            )
        if snap.governed or _fits(content, settings.max_output_bytes):
            return ToolResult(status="approval_required", content=content)
        return _refuse(
            ErrorCode.HARNESS_CALLBACK_FAILED,
            "The policy asked for approval with an interaction id too long for the budget.",
        )
    if not isinstance(decision, Allow):
        reason: object = decision.reason if isinstance(decision, Deny) else ""
        masked = mask_text(reason, redactions) if isinstance(reason, str) else ""
        return _refuse(ErrorCode.POLICY_DENIED, masked or "The harness policy denied this call.")

    if snap.tool == "sandbox_status":
        return (yield from _sandbox_status(call))
    if snap.tool in ("read_command_output", "stop_command"):
        return (yield from _owned_command(call))
    return (yield from _launch(call))


def _masked_in_identity(snap: _Snapshot, secrets: frozenset[str]) -> list[ArgumentProblem]:
    """The fields of the call's identity that hold a value this session
    already masks (an earlier call's env value, or a port's ``redact=``
    value): every result shows the identity whole (C13), so the call is
    refused before anything runs rather than show it (C17). The problem
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
        for field, value in sorted(snap.locator().items())
        if any(mask_text(text, redactions) != text for text in _strings(value))
    ]


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def _sandbox_status(call: _Call) -> Generator[Effect, Any, ToolResult]:
    snap, settings = call.snap, call.settings
    try:
        state = yield Inspect(session_id=snap.session_id, owner_key=settings.owner_key)
    except EffectFailure as failure:
        return call.failed(failure, side_effect=False)
    if not isinstance(state, SandboxState):
        unexpected = _refuse(
            ErrorCode.READ_FAILED, "The sandbox answered with something unexpected."
        )
        return (yield from call.settle(unexpected))
    result = ToolResult(status="ok", content=_status_content(settings, state))
    return (yield from call.finish(result))


def _owned_command(call: _Call) -> Generator[Effect, Any, ToolResult]:
    """read_command_output and stop_command: ownership first (C4)."""
    snap, settings = call.snap, call.settings
    args = snap.arguments
    wanted: str = args["task_id"]
    # The guard after Authorize also stands before this first step.
    try:
        owned = yield ResolveOwned(task_id=wanted)
    except EffectFailure:
        return _record_unavailable()  # ownership unproven: nothing is sent (C4)
    if not isinstance(owned, OwnedCommand) or owned.task_id != wanted:
        return _refuse(ErrorCode.NOT_OWNED, "This session launched no command with that task_id.")
    if task_id(snap.session_id, settings.owner, owned.operation_key) != wanted:
        return _refuse(
            ErrorCode.OWNED_OPERATION_MISMATCH,
            "The owned record's operation key does not derive this task_id.",
        )
    call.task_id = wanted
    sandbox_id = owned.sandbox_id
    if sandbox_id is None:
        try:
            state = yield Inspect(session_id=snap.session_id, owner_key=settings.owner_key)
        except EffectFailure as failure:
            return call.failed(failure, side_effect=False)
        sandbox_id = state.sandbox_id if isinstance(state, SandboxState) else None
        if sandbox_id is None:
            absent = _refuse(ErrorCode.TASK_NOT_FOUND, "This session has no sandbox to read from.")
            return (yield from call.settle(absent))
    call.sandbox_id = sandbox_id
    stop = yield from call.guard()
    if stop is not None:
        return stop

    if snap.tool == "stop_command":
        call.phase = Phase.AFTER_DISPATCH
        try:
            cancelled = yield Cancel(sandbox_id=sandbox_id, task_id=wanted)
        except EffectFailure as failure:
            if failure.delivery is Delivery.NOT_SENT and not failure.aborted:
                call.phase = Phase.BEFORE_DISPATCH
            return call.failed(failure, side_effect=True)
        if not isinstance(cancelled, CancelRequested):
            return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
        call.observed = cancelled.state.status
        if cancelled.state.status == "unknown":
            return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
        content = _stop_content(snap, sandbox_id, wanted, cancelled.state)
        return (yield from call.finish(ToolResult(status="ok", content=content)))

    wait_seconds = args.get("wait_seconds", 0)
    if wait_seconds:
        try:
            yield Wait(sandbox_id=sandbox_id, task_id=wanted, timeout_seconds=wait_seconds)
        except EffectFailure as failure:
            return call.failed(failure, side_effect=False)
        stop = yield from call.guard()
        if stop is not None:
            return stop
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
        unexpected = _refuse(
            ErrorCode.READ_FAILED, "The sandbox answered with something unexpected."
        )
        return (yield from call.settle(unexpected))
    call.observed = chunk.state.status if chunk.state.status in TERMINAL_STATUSES else None
    if chunk.state.status == "unknown":
        return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
    content = _read_content(
        snap,
        wanted,
        chunk.state,
        chunk.stdout,
        chunk.stderr,
        chunk.next_stdout_cursor,
        chunk.next_stderr_cursor,
        chunk.more,
    )
    return (yield from call.finish(ToolResult(status="ok", content=content)))


def _launch(call: _Call) -> Generator[Effect, Any, ToolResult]:
    """run_command (foreground and background), run_code, sandbox_run_code."""
    snap, settings = call.snap, call.settings
    args = snap.arguments
    code_tool = snap.tool != "run_command"
    background = bool(args.get("background")) and not code_tool
    if background:
        requested = args.get("background_timeout") or settings.background_timeout_seconds
        timeout_seconds = min(requested, MAX_TIMEOUT_SECONDS)
    else:
        requested = args.get("timeout") or settings.foreground_timeout_seconds
        timeout_seconds = min(requested, settings.foreground_timeout_seconds)
    wanted = task_id(snap.session_id, settings.owner, snap.operation_key)
    language: str | None = None
    if code_tool:
        language = resolve_language(args.get("language"))
        assert language is not None
        suffix, runner = LANGUAGES[language]
        # The only variable in this shell text is the validated task id (C16).
        path = f"/tmp/sandrail/code/{wanted}{suffix}"
        command = f"{runner} {path}"
    else:
        path = ""
        command = args["command"]

    # The task id is known before anything is sent: an uncertain Ensure
    # already names it. The guard after Authorize also stands before Ensure:
    # nothing external happened in between.
    call.task_id = wanted
    try:
        ready = yield Ensure(session_id=snap.session_id, owner_key=settings.owner_key)
    except EffectFailure as failure:
        return (yield from _failed_before_start(call, failure, wanted))
    call.phase = Phase.AFTER_DISPATCH
    if not isinstance(ready, SandboxReady):
        return (yield from call.settle(call.uncertain(ErrorCode.SANDBOX_OUTCOME_UNKNOWN)))
    call.sandbox_id = ready.sandbox_id
    if background:
        call.background_ref = _background_ref(snap, wanted)
    stop = yield from call.guard()
    if stop is not None:
        return stop
    exposed = exposed_in_sandbox_id(args.get("env"), ready.sandbox_id)
    if exposed:
        # Before this call's start (C5): the launch never runs (C17).
        rejection = arguments_rejection(exposed, settings.max_output_bytes)
        return ToolResult(status="error", content=rejection)

    if code_tool:
        try:
            published = yield Publish(
                sandbox_id=ready.sandbox_id, task_id=wanted, path=path, source=args["code"]
            )
        except EffectFailure as failure:
            return call.failed(failure, side_effect=True)
        if isinstance(published, StartRefused):
            return (yield from _refused(call, published))
        if not isinstance(published, Published):
            return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
        stop = yield from call.guard()
        if stop is not None:
            return stop

    # Strategy (C2): once a Start of this task may have left, every later
    # Start expects the claim it would have made. The port records that
    # before sending, with the sandbox's ledger epoch at the time, so a lost
    # answer, a crash or a command that wipes the sandbox's ledger can never
    # turn a retry (or a late copy of the first start) into a second launch:
    # a sandbox that cannot show the claim launches only if its ledger is
    # still of that epoch (then it never held one), else nothing
    # (``claim_lost``). The epoch travels in the durable record, so the proof
    # survives a harness restart.
    #
    # A record that cannot be read could hide such a start: the answer is
    # then uncertain, never a launch. One that cannot be written means the
    # start never leaves. And the record settles a race: it answers the
    # write with its row as it stands, and a start an earlier writer
    # recorded first (another worker of the key) is expected like one read.
    try:
        known = yield ResolveOwned(task_id=wanted, for_launch=True)
    except EffectFailure:
        return call.uncertain(ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE)
    digest = launch_digest(snap.tool, args)
    recorded = recorded_digest(snap.tool, args)  # what the record may keep (no env value)
    expect_claim, epoch = _expected(known, wanted, ready)
    if _conflicts(known, expect_claim, recorded):
        # C3 before anything is sent: the key's first start, which may still
        # arrive, asked for something else; this call's command never runs.
        return _conflict(StartRefused(reason="conflict"))
    try:
        kept = yield RememberOwned(
            task_id=wanted,
            operation_key=snap.operation_key,
            sandbox_id=ready.sandbox_id,
            launched=True,
            ledger_epoch=epoch,
            launch_digest=recorded,
        )
    except EffectFailure:
        if expect_claim:
            return call.uncertain(ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE)
        return _record_unavailable()
    if (
        isinstance(kept, OwnedCommand)
        and kept.task_id == wanted
        and kept.launched
        and (kept.sandbox_id, kept.ledger_epoch) != (ready.sandbox_id, epoch)
    ):
        expect_claim, epoch = _expected(kept, wanted, ready)
        if _conflicts(kept, expect_claim, recorded):
            return _conflict(StartRefused(reason="conflict"))
    fence = snap.identity.execution_fence if isinstance(snap.identity, NativeIdentity) else None
    try:
        started = yield Start(
            sandbox_id=ready.sandbox_id,
            task_id=wanted,
            request_digest=digest,
            command=command,
            cwd=args.get("cwd"),
            env=args.get("env"),
            timeout_seconds=timeout_seconds,
            fence=fence,
            expect_claim=expect_claim,
            claim_epoch=epoch,
        )
    except EffectFailure as failure:
        return call.failed(failure, side_effect=True)
    if isinstance(started, StartRefused):
        return (yield from _refused(call, started))
    if not isinstance(started, Started) or started.task_id != wanted:
        return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
    deduplicated = not started.first_launch
    stop = yield from call.guard()
    if stop is not None:
        return stop

    if background:
        call.observed = started.state.status
        content = _launch_content(
            snap, settings, ready.sandbox_id, wanted, started.state, command, None, deduplicated
        )
        content["timeout_seconds"] = timeout_seconds
        result = ToolResult(
            status="ok", content=content, background_command_ref=call.background_ref
        )
        return (yield from call.finish(result))

    try:
        state = yield Wait(
            sandbox_id=ready.sandbox_id,
            task_id=wanted,
            timeout_seconds=timeout_seconds + WAIT_GRACE_SECONDS,
        )
    except EffectFailure as failure:
        return call.failed(failure, side_effect=False)
    stop = yield from call.guard()
    if stop is not None:
        return stop
    if not isinstance(state, CommandState) or state.status not in TERMINAL_STATUSES:
        call.observed = None
        return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
    call.observed = state.status
    if state.status != "exited" and state.exit_code is None:
        # Timed out or canceled, and nobody saw how it ended.
        return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)

    content = _launch_content(
        snap, settings, ready.sandbox_id, wanted, state, command, language, deduplicated
    )
    collected = yield from collect_output(call, ready.sandbox_id, wanted, state, content)
    if isinstance(collected, ToolResult):
        return collected
    return (yield from call.finish(ToolResult(status="ok", content=collected)))


def _failed_before_start(
    call: _Call, failure: EffectFailure, wanted: str
) -> Generator[Effect, Any, ToolResult]:
    """A side effect before this call's Start failed. Nothing of this call
    ran; but when an earlier call of the same key may have started the task
    (the ownership record says so), "nothing ran, retry" would be false: the
    task may be running or done, so the answer is ``uncertain`` with the
    record's locator (C6), never ``executed: false``."""
    if call.phase is Phase.BEFORE_DISPATCH:
        try:
            known = yield ResolveOwned(task_id=wanted, for_launch=True)
        except EffectFailure:
            # The record cannot say whether an earlier call launched: "nothing
            # ran" could be false for the task.
            call.phase = Phase.AFTER_DISPATCH
            return call.uncertain(ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE)
        if isinstance(known, OwnedCommand) and known.task_id == wanted and known.launched:
            call.phase = Phase.AFTER_DISPATCH
            call.sandbox_id = call.sandbox_id or known.sandbox_id
            return call.uncertain(
                ErrorCode.ABORTED if failure.aborted else ErrorCode.SANDBOX_OUTCOME_UNKNOWN
            )
    return call.failed(failure, side_effect=True)


def _expected(known: object, wanted: str, ready: SandboxReady) -> tuple[bool, str | None]:
    """Whether a start must expect the task's claim (one may have left, the
    record says), and under which ledger epoch it may still prove there is
    none: the first start's, in the same sandbox; none in another."""
    if not (isinstance(known, OwnedCommand) and known.task_id == wanted and known.launched):
        return False, ready.ledger_epoch
    if known.sandbox_id == ready.sandbox_id:
        return True, known.ledger_epoch
    return True, None  # the first start went to another sandbox: no proof here


def _conflicts(known: object, expect_claim: bool, recorded: str) -> bool:
    """Whether the key's first start, which may still arrive, asked for
    something else than ``recorded`` (C3)."""
    first = known.launch_digest if isinstance(known, OwnedCommand) and expect_claim else None
    return first is not None and first != recorded


def _record_unavailable() -> ToolResult:
    return _refuse(
        ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE,
        "The ownership record could not be read or written; nothing was sent. "
        "Try again with the same operation_key once it is back.",
    )


def _refused(call: _Call, refused: StartRefused) -> Generator[Effect, Any, ToolResult]:
    """The sandbox refused the launch: nothing ran. Still a step like any
    other: the guard after it comes first (C9), so authority lost or drift
    during the refused request is reported as uncertain, not as an error."""
    stop = yield from call.guard()
    if stop is not None:
        return stop
    if refused.reason == "claim_lost":
        # It launched before and its record is gone: what it did is unknown.
        return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
    return _conflict(refused)


def _conflict(refused: StartRefused) -> ToolResult:
    if refused.reason == "not_started":
        return _refuse(
            ErrorCode.COMMAND_NOT_STARTED,
            "The command could not start: its cwd is missing, not a directory or not "
            "enterable by the sandbox user, or its command and env are too big to "
            "execute. Nothing ran; this operation_key will not run it.",
        )
    if refused.reason == "stale_fence":
        return _refuse(
            ErrorCode.FENCE_STALE,
            "A newer execution fence holds this sandbox; this launch never ran.",
        )
    return _refuse(
        ErrorCode.OPERATION_CONFLICT,
        "This operation_key already launched with different arguments; nothing new ran.",
    )


def _background_ref(snap: _Snapshot, wanted: str) -> BackgroundCommandRef:
    identity = snap.identity
    if isinstance(identity, NativeIdentity):
        return NativeCommandRef(
            task_id=wanted, source_run_id=identity.run_id, operation_key=snap.operation_key
        )
    return AgentCommandRef(
        task_id=wanted,
        agent_id=identity.agent_id,
        session_id=snap.session_id,
        source_call_id=snap.call_id,
        operation_key=snap.operation_key,
    )
