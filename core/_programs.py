"""The tools as effect programs.

Each tool is a generator that yields :mod:`effects <sandrail.core._effects>`,
receives their outcomes (or has an :class:`EffectFailure` thrown in), and
returns a :class:`ToolResult`. The programs never perform I/O, read a clock or
draw randomness; the drivers in :mod:`sandrail.interpreters` run them.

Strategy: every call walks the same spine, as in the reference port::

    check request -> admit (C14) -> validate arguments -> authorize (C8) -> guard
      -> ensure sandbox -> guard -> [publish -> guard] -> claim (C2) -> start
      -> guard -> wait -> guard -> collect output -> fit to budget (C12, C15)

and :func:`_launch` reads as that line does: one step a line. Each step
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

from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import attrs

from ._call import CallState, StoppedError, bound_result
from ._claim import LaunchClaim, launch_claim
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
from ._rules import _INTEGER_ARGUMENTS, launch_digest, launch_timeout, tool_refusal
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
    the identity whole, C13).
    """
    result = yield from _tool_program(request, settings, snapshot, secrets)
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
    request: object, settings: PortSettings, snapshot: _Snapshot | None, secrets: frozenset[str]
) -> Program:
    checked = snapshot if snapshot is not None else _check_request(request, settings)
    if isinstance(checked, ToolResult):
        return checked
    call = _admit(checked, settings, secrets)
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
    snap: _Snapshot, settings: PortSettings, secrets: frozenset[str]
) -> CallState | ToolResult:
    """The call, or its refusal before anything runs (C5): an identity the
    budget cannot hold (C14), arguments the schema or the reference's own
    rules refuse, a secret the identity would show (C17)."""
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
    exposed = _exposed_by_identity(snap) + _masked_in_identity(snap, secrets)
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
                "The harness's authorize callback failed; nothing ran.",
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
        "ok": False,
        "approval_required": True,
        "executed": False,
        "interaction_id": interaction_id,
    }
    if mask_text(interaction_id, redactions) != interaction_id:
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


def _exposed_by_identity(snap: _Snapshot) -> list[ArgumentProblem]:
    """Env values that also appear in the call's identity, which every result
    shows whole (C13): they could not be kept out of results (C17), so the
    call is refused before anything runs."""
    env = snap.arguments.get("env")
    if not isinstance(env, Mapping):
        return []
    shown = list(_strings(snap.locator()))
    return [
        ArgumentProblem(
            path=f"arguments.env.{name}",
            reason="holds a value that also appears in the call's identity (which every "
            "result shows whole), so it could not be kept secret",
        )
        for name, value in sorted(env.items())
        if value in redaction_secrets({name: value}) and any(value in text for text in shown)
    ]


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
        owned = None
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


# -- run_command, run_code, sandbox_run_code ---------------------------------


@attrs.frozen
class _Launch:
    """What a launch runs: its task id, its command (for a snippet, the
    file it is published to and its source), its deadline."""

    task_id: str
    command: str
    background: bool
    timeout_seconds: int
    language: str | None = None
    path: str = ""
    source: str | None = None

    @classmethod
    def of(cls, call: CallState) -> _Launch:
        snap, settings = call.snap, call.settings
        args = snap.arguments
        wanted = task_id(snap.session_id, settings.owner, snap.operation_key)
        _, timeout_seconds = launch_timeout(snap.tool, args, settings)
        if snap.tool == "run_command":
            return cls(
                task_id=wanted,
                command=args["command"],
                background=bool(args.get("background")),
                timeout_seconds=timeout_seconds,
            )
        language = resolve_language(args.get("language"))
        assert language is not None
        suffix, runner = LANGUAGES[language]
        # The only variable in this shell text is the validated task id (C16).
        path = f"/tmp/sandrail/code/{wanted}{suffix}"
        return cls(
            task_id=wanted,
            command=f"{runner} {path}",
            background=False,
            timeout_seconds=timeout_seconds,
            language=language,
            path=path,
            source=args["code"],
        )


def _launch(call: CallState) -> Generator[Effect, Any, ToolResult]:
    """run_command (foreground and background), run_code, sandbox_run_code.

    The spine, one step a line, as the contract reads (see the module doc):
    each step runs the guard after it and ends the call by raising
    :class:`StoppedError` (a failure, a refusal, a guard that says stop).
    """
    launch = _Launch.of(call)
    ready = yield from _ensure(call, launch)
    if launch.source is not None:
        yield from _publish(call, ready, launch)
    claim = yield from _claim(call, ready, launch)
    started = yield from _start(call, ready, launch, claim)
    if launch.background:
        return (yield from call.finish(_background_result(call, ready, launch, started)))
    ended = yield from _wait(call, ready, launch)
    content = yield from _collect(call, ready, launch, started, ended)
    return (yield from call.finish(ToolResult(status="ok", content=content)))


def _ensure(call: CallState, launch: _Launch) -> Generator[Effect, Any, SandboxReady]:
    """Find or create the session's sandbox, a side effect (C5). The task id
    is known before anything is sent: an uncertain Ensure already names it.
    (The guard after Authorize also stands before Ensure: nothing external
    happened in between.)"""
    snap = call.snap
    call.task_id = launch.task_id
    try:
        ready = yield Ensure(session_id=snap.session_id, owner_key=call.settings.owner_key)
    except EffectFailure as failure:
        raise StoppedError(
            (yield from _failed_before_start(call, failure, launch.task_id))
        ) from None
    call.dispatched()
    if not isinstance(ready, SandboxReady):
        raise StoppedError(
            (yield from call.settle(call.uncertain(ErrorCode.SANDBOX_OUTCOME_UNKNOWN)))
        )
    call.sandbox_id = ready.sandbox_id
    if launch.background:
        call.background_ref = _background_ref(snap, launch.task_id)
    yield from call.go_on()
    return ready


def _publish(call: CallState, ready: SandboxReady, launch: _Launch) -> Generator[Effect, Any, None]:
    """Write the snippet to its file (C16), a side effect."""
    assert launch.source is not None
    publish = Publish(
        sandbox_id=ready.sandbox_id, task_id=launch.task_id, path=launch.path, source=launch.source
    )
    yield from _request_launch(call, publish, Published)
    yield from call.go_on()


def _claim(
    call: CallState, ready: SandboxReady, launch: _Launch
) -> Generator[Effect, Any, tuple[LaunchClaim, str]]:
    """The at-most-once claim this start makes (C2, C3; the rule is
    :func:`~sandrail.core._claim.launch_claim`), recorded before the start
    may leave, with the launch's digest."""
    snap = call.snap
    try:
        known = yield ResolveOwned(task_id=launch.task_id, for_launch=True)
    except EffectFailure:
        known = None
    digest = launch_digest(snap.tool, snap.arguments)
    claim = launch_claim(known, launch.task_id, ready, digest)
    if claim is None:
        # C3 before anything is sent: the key's first start, which may still
        # arrive, asked for something else; this call's command never runs.
        raise StoppedError(_conflict(StartRefused(reason="conflict")))
    try:
        yield RememberOwned(
            task_id=launch.task_id,
            operation_key=snap.operation_key,
            sandbox_id=ready.sandbox_id,
            launched=True,
            ledger_epoch=claim.claim_epoch,
            launch_digest=digest,
        )
    except EffectFailure:
        raise StoppedError(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)) from None
    return claim, digest


def _start(
    call: CallState, ready: SandboxReady, launch: _Launch, claimed: tuple[LaunchClaim, str]
) -> Generator[Effect, Any, Started]:
    """Start the command, at most once ever (C2), a side effect."""
    claim, digest = claimed
    args = call.snap.arguments
    identity = call.snap.identity
    fence = identity.execution_fence if isinstance(identity, NativeIdentity) else None
    start = Start(
        sandbox_id=ready.sandbox_id,
        task_id=launch.task_id,
        request_digest=digest,
        command=launch.command,
        cwd=args.get("cwd"),
        env=args.get("env"),
        timeout_seconds=launch.timeout_seconds,
        fence=fence,
        expect_claim=claim.expect_claim,
        claim_epoch=claim.claim_epoch,
    )
    started = yield from _request_launch(call, start, Started)
    if started.task_id != launch.task_id:
        raise StoppedError((yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE))))
    yield from call.go_on()
    return started


_Answer = TypeVar("_Answer")


def _request_launch(
    call: CallState, effect: Publish | Start, answered: type[_Answer]
) -> Generator[Effect, Any, _Answer]:
    """Send a side-effect request of a launch (a publish, a start): its
    answer, when it is an ``answered``; else the call ends: a failure as the
    phase says (C5, C6), a refusal after the guard, an answer of another
    kind as incomplete evidence."""
    try:
        answer = yield effect
    except EffectFailure as failure:
        raise StoppedError(call.failed(failure, side_effect=True)) from None
    if isinstance(answer, StartRefused):
        raise StoppedError((yield from _refused(call, answer)))
    if not isinstance(answer, answered):
        raise StoppedError((yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE))))
    return answer


def _background_result(
    call: CallState, ready: SandboxReady, launch: _Launch, started: Started
) -> ToolResult:
    call.observed = started.state.status
    content = _launch_content(
        call.snap,
        call.settings,
        ready.sandbox_id,
        launch.task_id,
        started.state,
        launch.command,
        None,
        not started.first_launch,
    )
    content["timeout_seconds"] = launch.timeout_seconds
    return ToolResult(status="ok", content=content, background_command_ref=call.background_ref)


def _wait(
    call: CallState, ready: SandboxReady, launch: _Launch
) -> Generator[Effect, Any, CommandState]:
    """Wait for the command to end: it outlasts the in-sandbox deadline by
    :data:`WAIT_GRACE_SECONDS`, so the sandbox's own verdict is seen."""
    try:
        state = yield Wait(
            sandbox_id=ready.sandbox_id,
            task_id=launch.task_id,
            timeout_seconds=launch.timeout_seconds + WAIT_GRACE_SECONDS,
        )
    except EffectFailure as failure:
        raise StoppedError(call.failed(failure, side_effect=False)) from None
    yield from call.go_on()
    if not isinstance(state, CommandState) or state.status not in TERMINAL_STATUSES:
        call.observed = None
        raise StoppedError(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE))
    call.observed = state.status
    if state.status != "exited" and state.exit_code is None:
        # Timed out or canceled, and nobody saw how it ended.
        raise StoppedError(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE))
    return state


def _collect(
    call: CallState, ready: SandboxReady, launch: _Launch, started: Started, ended: CommandState
) -> Generator[Effect, Any, dict[str, Any]]:
    """The ended command's result content with its output (C12, C15)."""
    content = _launch_content(
        call.snap,
        call.settings,
        ready.sandbox_id,
        launch.task_id,
        ended,
        launch.command,
        launch.language,
        not started.first_launch,
    )
    collected = yield from collect_output(call, ready.sandbox_id, launch.task_id, ended, content)
    if isinstance(collected, ToolResult):
        raise StoppedError(collected)
    return collected


def _failed_before_start(
    call: CallState, failure: EffectFailure, wanted: str
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
            known = None
        if isinstance(known, OwnedCommand) and known.task_id == wanted and known.launched:
            call.dispatched()
            call.sandbox_id = call.sandbox_id or known.sandbox_id
            return call.uncertain(
                ErrorCode.ABORTED if failure.aborted else ErrorCode.SANDBOX_OUTCOME_UNKNOWN
            )
    return call.failed(failure, side_effect=True)


def _refused(call: CallState, refused: StartRefused) -> Generator[Effect, Any, ToolResult]:
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
