"""The launch program: ``run_command`` (foreground and background),
``run_code`` and ``sandbox_run_code`` (their records' programs, :mod:`._tools`).

Strategy: :func:`launch_program` is the spine, one step a line, as the contract
reads (ensure, publish, claim, start, wait, collect); each step is a
function of its own that yields its effect, runs the guard after it (C9,
C11) and ends the call by raising :class:`~sandrail.core._call.StoppedError`
when there is nothing more to do. The at-most-once rule the claim step
follows is :mod:`sandrail.core._claim`'s (C2).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Final, NamedTuple, TypeVar

from ._call import CallState, StoppedError
from ._claim import LaunchClaim, launch_claim, settled_claim
from ._collect import collect_output
from ._contents import FOLLOW_BACKGROUND, _launch_content
from ._definitions import LANGUAGES, resolve_language
from ._effects import (
    STAGING_DIRECTORY,
    TERMINAL_STATUSES,
    CommandState,
    Effect,
    EffectFailure,
    Ensure,
    OwnedCommand,
    Publish,
    Published,
    RememberOwned,
    ResolveOwned,
    SandboxReady,
    Start,
    Started,
    StartRefused,
    Wait,
)
from ._guard import Phase
from ._identity import NativeIdentity
from ._recorded import RecordMatch, record_digest, record_match
from ._rejection import arguments_rejection
from ._results import AgentCommandRef, BackgroundCommandRef, ErrorCode, NativeCommandRef, ToolResult
from ._rules import call_digest
from ._shown import exposed_in_sandbox_id
from ._snapshot import _refuse, _Snapshot

__all__ = [
    "WAIT_GRACE_SECONDS",
    "Launch",
    "LaunchPlan",
    "launch_program",
    "record_unavailable",
    "run_code_program",
    "run_command_program",
]

WAIT_GRACE_SECONDS: Final = 15
"""A foreground wait outlasts the in-sandbox deadline by this much, so the
sandbox's own timeout verdict (with its exit code) is normally observed."""


class Launch(NamedTuple):
    """What a launch runs, as a tool's plan makes it: its task id (the one
    the plan was given), its shell command, whether it runs in the
    background, its deadline, and for a launch that stages a file first, the
    file's ``path`` (its task's staging path) and ``source`` (published before
    the claim). ``language`` names a snippet's language in its result."""

    task_id: str
    command: str
    background: bool
    timeout_seconds: int
    language: str | None = None
    path: str = ""
    source: str | None = None


def _command(call: CallState, wanted: str, timeout_seconds: int) -> Launch:
    """A shell command: run as given, in the foreground or the background."""
    args = call.snap.arguments
    return Launch(
        task_id=wanted,
        command=args["command"],
        background=bool(args.get("background")),
        timeout_seconds=timeout_seconds,
    )


def _snippet(call: CallState, wanted: str, timeout_seconds: int) -> Launch:
    """A snippet: published to a file of its own, then run by its language's
    runner in the foreground."""
    args = call.snap.arguments
    language = resolve_language(args.get("language"))
    assert language is not None
    suffix, runner = LANGUAGES[language]
    # The only variable in this shell text is the validated task id (C16).
    path = f"{STAGING_DIRECTORY}{wanted}{suffix}"
    return Launch(
        task_id=wanted,
        command=f"{runner} {path}",
        background=False,
        timeout_seconds=timeout_seconds,
        language=language,
        path=path,
        source=args["code"],
    )


def run_command_program(call: CallState) -> Generator[Effect, Any, ToolResult]:
    """``run_command``, in the foreground or the background."""
    return launch_program(call, _command)


def run_code_program(call: CallState) -> Generator[Effect, Any, ToolResult]:
    """``run_code`` and ``sandbox_run_code``: a snippet, in the foreground."""
    return launch_program(call, _snippet)


LaunchPlan = Callable[[CallState, str, int], Launch]
"""What a launching tool adds to the spine: given the call, its task id and
its in-sandbox deadline in seconds, what to launch."""


def launch_program(call: CallState, plan: LaunchPlan) -> Generator[Effect, Any, ToolResult]:
    """A launch, of what ``plan`` makes of the call (given its task id and
    in-sandbox deadline).

    The spine, one step a line, as the contract reads (see the module doc):
    each step runs the guard after it and ends the call by raising
    :class:`StoppedError` (a failure, a refusal, a guard that says stop).
    """
    snap, record = call.snap, call.record
    assert record.deadline is not None  # a launch has one (ToolRecord)
    _, timeout_seconds = record.deadline(snap.arguments, call.settings)
    launch = plan(call, call.own_task, timeout_seconds)
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


def _ensure(call: CallState, launch: Launch) -> Generator[Effect, Any, SandboxReady]:
    """Find or create the session's sandbox, a side effect (C5). The task id
    is known before anything is sent: an uncertain Ensure already names it.
    (The guard after Authorize also stands before Ensure: nothing external
    happened in between.) An env value inside the sandbox id it names is
    refused here, before any start (C17, :mod:`._shown`)."""
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
    call.went_on((yield call.check))
    exposed = exposed_in_sandbox_id(snap.arguments.get("env"), ready.sandbox_id)
    if exposed:
        # Before this call's start (C5): the launch never runs (C17).
        rejection = arguments_rejection(exposed, call.settings.max_output_bytes)
        raise StoppedError(ToolResult(status="error", content=rejection))
    return ready


def _publish(call: CallState, ready: SandboxReady, launch: Launch) -> Generator[Effect, Any, None]:
    """Write the snippet to its file (C16), a side effect."""
    assert launch.source is not None
    publish = Publish(
        sandbox_id=ready.sandbox_id, task_id=launch.task_id, path=launch.path, source=launch.source
    )
    yield from _request_launch(call, publish, Published)
    call.went_on((yield call.check))


def _claim(
    call: CallState, ready: SandboxReady, launch: Launch
) -> Generator[Effect, Any, tuple[LaunchClaim, str]]:
    """The at-most-once claim this start makes (C2, C3; the rule is
    :func:`~sandrail.core._claim.launch_claim`), recorded before the start
    may leave, with the launch's digest."""
    snap = call.snap
    try:
        known = yield ResolveOwned(task_id=launch.task_id, for_launch=True)
    except EffectFailure as failure:
        # A record that cannot be read could hide a start: never a launch
        # (and an abort that struck the read is said as such).
        unread = ErrorCode.ABORTED if failure.aborted else ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE
        raise StoppedError(call.uncertain(unread)) from None
    defaults = call.record.digest_defaults
    digest = call_digest(snap.tool, defaults, snap.arguments)
    # What the record may keep: the arguments as the result shows them
    # (with nothing to mask, the digest itself), and what this call is
    # against what it kept of the key's first start (:mod:`._recorded`).
    masks = snap.arguments.get("env") or call.secrets
    recorded = record_digest(snap.tool, defaults, snap.arguments, call.secrets) if masks else digest

    def match(kept: str | None) -> RecordMatch:
        return record_match(kept, snap.tool, defaults, snap.arguments, call.secrets)

    claim = launch_claim(known, launch.task_id, ready, match)
    if claim is None:
        # C3 before anything is sent: the key's first start, which may still
        # arrive, asked for something else; this call's command never runs.
        raise StoppedError(_conflict(StartRefused(reason="conflict")))
    try:
        kept = yield RememberOwned(
            task_id=launch.task_id,
            operation_key=snap.operation_key,
            sandbox_id=ready.sandbox_id,
            launched=True,
            ledger_epoch=claim.claim_epoch,
            launch_digest=recorded,
        )
    except EffectFailure as failure:
        # Not recorded: the start never leaves (still uncertain when an
        # earlier one may have). An abort that struck the write is said as
        # such: the harness cancelled, the record did not fail.
        if failure.aborted:
            unrecorded = (
                call.uncertain(ErrorCode.ABORTED)
                if claim.expect_claim
                else _refuse(ErrorCode.CANCELED, "The call was aborted before anything ran.")
            )
        elif claim.expect_claim:
            unrecorded = call.uncertain(ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE)
        else:
            unrecorded = record_unavailable()
        raise StoppedError(unrecorded) from None
    claim = settled_claim(claim, kept, launch.task_id, ready, match)
    if claim is None:
        raise StoppedError(_conflict(StartRefused(reason="conflict")))
    first = kept if isinstance(kept, OwnedCommand) else known
    if (
        isinstance(first, OwnedCommand)
        and first.task_id == launch.task_id
        and first.launched
        and first.sandbox_id not in (None, ready.sandbox_id)
    ):
        # A start of the task may have run in another sandbox (since lost):
        # that is where any answer of this call must send the operator.
        call.sandbox_id = first.sandbox_id
    return claim, digest


def _start(
    call: CallState, ready: SandboxReady, launch: Launch, claimed: tuple[LaunchClaim, str]
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
    call.went_on((yield call.check))
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
        raise StoppedError(call.failed(failure, side_effect=effect.side_effect)) from None
    if isinstance(answer, StartRefused):
        raise StoppedError((yield from _refused(call, answer)))
    if not isinstance(answer, answered):
        raise StoppedError((yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE))))
    return answer


def _background_result(
    call: CallState, ready: SandboxReady, launch: Launch, started: Started
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
        ready.backend,
    )
    content["timeout_seconds"] = launch.timeout_seconds
    if call.readable:
        content["instruction"] = FOLLOW_BACKGROUND
    return ToolResult(status="ok", content=content, background_command_ref=call.background_ref)


def _wait(
    call: CallState, ready: SandboxReady, launch: Launch
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
        raise StoppedError(call.failed(failure, side_effect=Wait.side_effect)) from None
    call.went_on((yield call.check))
    if not isinstance(state, CommandState) or state.status not in TERMINAL_STATUSES:
        call.observed = None
        raise StoppedError(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE))
    call.observed = state.status
    if state.status != "exited" and state.exit_code is None:
        # Timed out or canceled, and nobody saw how it ended.
        raise StoppedError(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE))
    return state


def _collect(
    call: CallState, ready: SandboxReady, launch: Launch, started: Started, ended: CommandState
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
        ready.backend,
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
            # The record cannot say whether an earlier call launched:
            # "nothing ran" could be false for the task.
            call.dispatched()
            return call.uncertain(ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE)
        if isinstance(known, OwnedCommand) and known.task_id == wanted and known.launched:
            call.dispatched()
            call.sandbox_id = call.sandbox_id or known.sandbox_id
            return call.uncertain(
                ErrorCode.ABORTED if failure.aborted else ErrorCode.SANDBOX_OUTCOME_UNKNOWN
            )
    return call.failed(failure, side_effect=Ensure.side_effect)


def record_unavailable() -> ToolResult:
    """The refusal of a call whose ownership record could not be read or
    written before anything was sent (``error``, executed false)."""
    return _refuse(
        ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE,
        "The ownership record could not be read or written; nothing was sent. "
        "Try again with the same operation_key once it is back.",
    )


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
            "execute. Nothing ran, and repeating this call will not run it: change the cwd "
            "or shrink the command and env, then make a new call.",
        )
    if refused.reason == "stale_fence":
        return _refuse(
            ErrorCode.FENCE_STALE,
            "A newer execution fence holds this sandbox; this launch never ran.",
        )
    return _refuse(
        ErrorCode.OPERATION_CONFLICT,
        "This call's operation key already launched a command with different arguments; "
        "nothing new ran. Make a new call for the new command.",
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
