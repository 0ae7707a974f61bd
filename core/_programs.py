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

import contextlib
import functools
import hashlib
import json
import re
from collections.abc import Generator, Mapping
from typing import Any, Final

import attrs

from ._budget import SHRINKABLE_FIELDS, BudgetError, fit_to_budget, fixed_size
from ._canonical import CanonicalJSONError, canonical_json
from ._definitions import (
    LANGUAGES,
    MAX_TIMEOUT_SECONDS,
    READ_MAX_BYTES,
    RETAINED_OUTPUT_LIMIT,
    ToolDefinition,
    definitions_equal,
    resolve_language,
)
from ._effects import (
    TERMINAL_STATUSES,
    Allow,
    ApprovalRequired,
    AuthorityReport,
    Authorize,
    Cancel,
    CancelRequested,
    CheckAuthority,
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
    WriteArtifact,
)
from ._guard import Continue, Phase, Refuse, decide, observe
from ._identity import AgentIdentity, AgentOwner, NativeIdentity, Owner, task_id
from ._requests import RUNTIME_ARTIFACTS, ToolCall, ToolRequest
from ._results import (
    AgentCommandRef,
    ArtifactRef,
    BackgroundCommandRef,
    ErrorCode,
    NativeCommandRef,
    ToolResult,
    error_result,
)
from ._validation import ArgumentProblem, arguments_rejection, check_arguments

__all__ = [
    "MIN_REDACTED_LENGTH",
    "REDACTED",
    "WAIT_GRACE_SECONDS",
    "PortSettings",
    "Program",
    "admission_size",
    "bound_result",
    "crash_result",
    "launch_digest",
    "owner_key",
    "redaction_secrets",
    "request_digest",
    "snapshot_request",
    "tool_program",
]

Program = Generator[Effect, Any, ToolResult]

WAIT_GRACE_SECONDS: Final = 15
"""A foreground wait outlasts the in-sandbox deadline by this much, so the
sandbox's own timeout verdict (with its exit code) is normally observed."""

_MAX_SAFE_INTEGER: Final = 2**53 - 1
_LONGEST_SANDBOX_ID: Final = "s" * 128
_LONGEST_TASK_ID: Final = "f" * 64
_ARTIFACT_URI_MAX: Final = 256
_UNCERTAIN_REASONS: Final = (
    ErrorCode.EVIDENCE_INCOMPLETE,
    ErrorCode.SANDBOX_OUTCOME_UNKNOWN,
    ErrorCode.AUTHORITY_LOST,
    ErrorCode.REQUEST_DRIFTED,
    ErrorCode.ABORTED,
)
_RECONCILE = (
    "Do not run this again as a new call. Retry with the same operation_key, or read "
    "the task with read_command_output, to learn what happened."
)


@attrs.frozen(kw_only=True)
class PortSettings:
    """What a port is bound to; fixed at construction, plain data."""

    session_id: str
    owner: Owner
    definitions: tuple[ToolDefinition, ...]
    contract: str
    max_output_bytes: int = 24_000
    foreground_timeout_seconds: int = 300
    background_timeout_seconds: int = 300
    allow_internet_access: bool = False
    artifacts_enabled: bool = False
    owner_key: str = attrs.field(init=False, eq=False, repr=False)
    """:func:`owner_key` of ``owner``, computed once."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "owner_key", owner_key(self.owner))

    def definition(self, name: str) -> ToolDefinition | None:
        for definition in self.definitions:
            if definition.name == name:
                return definition
        return None


def owner_key(owner: Owner) -> str:
    """A short, stable key for the sandbox owner (session-scoped metadata)."""
    return hashlib.sha256(canonical_json(owner.key())).hexdigest()[:32]


def request_digest(request: ToolRequest) -> str:
    """Digest of everything in a request but its abort signal (drift check, C9).

    Only ever compared with a digest of the same request in the same process,
    so it uses Python's C JSON encoder (sorted keys) rather than the slower
    canonical form. The port's own definition objects are immutable and
    stand for themselves. Raises ``TypeError`` or ``ValueError`` (or
    ``AttributeError``) for a request with no JSON form; a port treats that
    as drift.
    """
    definition = request.definition
    if isinstance(definition, ToolDefinition):
        definition = "sha256:" + definition.digest
    identity = request.identity
    body = (
        request.call.name,
        request.call.call_id,
        request.call.arguments,
        request.operation_key,
        request.session_id,
        definition,
        None if identity is None else identity.locator(),
        request.result_governance,
    )
    text = _DIGEST_ENCODER.encode(body)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_DIGEST_ENCODER = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":")
)


REDACTED: Final = "<redacted>"
"""What an environment value a command printed is replaced by in results (C17)."""

MIN_REDACTED_LENGTH: Final = 8
"""Environment values shorter than this are not searched for in output: a
short value (``1``, ``true``) would mask ordinary text."""


def redaction_secrets(env: object) -> frozenset[str]:
    """The values of an ``env`` argument that output is searched for (C17)."""
    if not isinstance(env, Mapping):
        return frozenset()
    return frozenset(
        value
        for value in env.values()
        if isinstance(value, str) and len(value) >= MIN_REDACTED_LENGTH and value != REDACTED
    )


def _mask(text: str, secrets: frozenset[str]) -> str:
    for secret in sorted(secrets, key=lambda value: (-len(value), value)):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


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


# ---------------------------------------------------------------------------
# Request checks


@attrs.frozen(kw_only=True)
class _Snapshot:
    tool: str
    call_id: str
    operation_key: str
    session_id: str
    identity: NativeIdentity | AgentIdentity
    arguments: Mapping[str, Any]
    digest: str
    governed: bool

    def locator(self, sandbox_id: str | None = None, task: str | None = None) -> dict[str, Any]:
        content = self.identity.locator()
        content["session_id"] = self.session_id
        content["operation_key"] = self.operation_key
        content["call_id"] = self.call_id
        if sandbox_id is not None:
            content["sandbox_id"] = sandbox_id
        if task is not None:
            content["task_id"] = task
        return content


def _refuse(code: ErrorCode, instruction: str, **extra: Any) -> ToolResult:
    return error_result(code, instruction=instruction, **extra)


def _fits(content: Mapping[str, Any], max_output_bytes: int) -> bool:
    try:
        return len(canonical_json(content)) <= max_output_bytes
    except CanonicalJSONError:
        return False


def _nonblank(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _text(value: object) -> bool:
    """A non-blank string that JSON can carry (no lone surrogates)."""
    if not _nonblank(value):
        return False
    assert isinstance(value, str)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _reads_as_bool(token: object) -> bool:
    """Whether an abort token's ``cancelled`` reads as a bool (reading it may
    run harness code, which may fail: then it does not)."""
    try:
        return isinstance(token.cancelled, bool)  # type: ignore[attr-defined]
    except Exception:
        return False


def _check_identity(identity: object, owner: Owner) -> ToolResult | None:
    if isinstance(owner, AgentOwner):
        if not isinstance(identity, AgentIdentity) or identity.agent_id != owner.agent_id:
            return _refuse(
                ErrorCode.IDENTITY_REQUIRED,
                "This port is bound to an agent owner: pass AgentIdentity with the bound "
                "agent_id and no native identity fields.",
            )
        return None
    if not isinstance(identity, NativeIdentity):
        return _refuse(
            ErrorCode.IDENTITY_REQUIRED,
            "This port is bound to a native owner: pass NativeIdentity.",
        )
    try:
        same_scope = canonical_json(identity.scope) == canonical_json(owner.scope)
    except CanonicalJSONError:
        same_scope = False
    if not same_scope:
        return _refuse(ErrorCode.SCOPE_UNBOUND, "The request's scope differs from the port's.")
    fields = (identity.run_id, identity.turn_id, identity.build_id, identity.task_chain_id)
    if not all(_nonblank(value) for value in fields):
        return _refuse(
            ErrorCode.IDENTITY_REQUIRED,
            "run_id, turn_id, build_id and task_chain_id must be non-blank strings.",
        )
    if identity.parent_run_id is not None and not _nonblank(identity.parent_run_id):
        return _refuse(
            ErrorCode.PARENT_RUN_ID_INVALID,
            "parent_run_id must be a non-blank string or null.",
        )
    fence = identity.execution_fence
    if isinstance(fence, bool) or not isinstance(fence, int) or not 0 < fence <= _MAX_SAFE_INTEGER:
        return _refuse(ErrorCode.FENCE_REQUIRED, "execution_fence must be a positive safe integer.")
    return None


def _check_request(request: object, settings: PortSettings) -> _Snapshot | ToolResult:
    """Refuse a malformed request with a specific error, or snapshot it."""
    call = getattr(request, "call", None)
    name = getattr(call, "name", None)
    call_id = getattr(call, "call_id", None)
    if (
        not isinstance(request, ToolRequest)
        or not isinstance(call, ToolCall)
        or not isinstance(name, str)
        or not _text(call_id)
    ):
        return _refuse(
            ErrorCode.REQUEST_UNBOUND,
            "Pass a ToolRequest whose call has a string name and a non-blank call_id "
            "of valid Unicode text.",
        )
    if not _text(request.operation_key):
        return _refuse(
            ErrorCode.OPERATION_KEY_REQUIRED,
            "operation_key must be a non-blank string of valid Unicode text.",
        )
    definition = settings.definition(name)
    if definition is None:
        return _refuse(
            ErrorCode.TOOL_UNBOUND,
            "This port has no tool of that name.",
            available_tools=[d.name for d in settings.definitions],
        )
    if not definitions_equal(request.definition, definition):
        return _refuse(
            ErrorCode.DEFINITION_UNBOUND,
            "The request's tool definition differs from this port's; use port.definitions.",
        )
    if request.cancel is not None and not _reads_as_bool(request.cancel):
        return _refuse(
            ErrorCode.SIGNAL_UNBOUND, "cancel must be None or a token with a bool `cancelled`."
        )
    if request.session_id != settings.session_id:
        return _refuse(ErrorCode.SESSION_UNBOUND, "The request belongs to another session.")
    rejected = _check_identity(request.identity, settings.owner)
    if rejected is not None:
        return rejected
    if request.result_governance not in (None, RUNTIME_ARTIFACTS):
        return _refuse(
            ErrorCode.REQUEST_INVALID,
            f"result_governance must be None or {RUNTIME_ARTIFACTS!r}.",
        )
    identity = request.identity
    assert isinstance(identity, (NativeIdentity, AgentIdentity))
    if isinstance(identity, NativeIdentity):
        # The snapshot's own copy: a harness that mutates its scope mid-call
        # is reported as drift, while every locator keeps the scope it began
        # with (C13).
        identity = attrs.evolve(identity, scope=json.loads(canonical_json(identity.scope)))
    arguments = call.arguments
    try:
        digest = request_digest(request)
    except (ValueError, AttributeError, TypeError, RecursionError):
        digest = ""  # arguments without a JSON form: validation refuses them next
    assert isinstance(call_id, str)
    return _Snapshot(
        tool=name,
        call_id=call_id,
        operation_key=request.operation_key,
        session_id=request.session_id,
        identity=identity,
        arguments=arguments if isinstance(arguments, Mapping) else {},
        digest=digest,
        governed=request.result_governance == RUNTIME_ARTIFACTS,
    )


# ---------------------------------------------------------------------------
# Result contents. The same builders serve real results and the worst cases
# that admission (C14) measures, so the two cannot disagree.


def _state_fields(state: CommandState) -> dict[str, Any]:
    return {
        "status": state.status,
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
) -> dict[str, Any]:
    content: dict[str, Any] = {
        "ok": False,
        "error_type": reason.value,
        "evidence_incomplete": True,
        "observed_result": observed,
    }
    content.update(snap.locator(sandbox_id, task))
    content["instruction"] = _RECONCILE
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
    locator_sizes: dict[bool, int] = {}
    for with_sandbox, overhead in _fixed_overheads(
        snap.tool, settings.contract, settings.allow_internet_access
    ):
        if with_sandbox is None:
            sizes.append(overhead)
            continue
        if with_sandbox not in locator_sizes:
            sandbox_id = _LONGEST_SANDBOX_ID if with_sandbox else None
            locator = snap.locator(sandbox_id, _LONGEST_TASK_ID)
            locator_sizes[with_sandbox] = len(canonical_json(locator))
        sizes.append(locator_sizes[with_sandbox] - 1 + overhead)
    return max(sizes)


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
    if tool in ("run_command", "run_code", "sandbox_run_code"):
        language = max(LANGUAGES, key=len) if tool != "run_command" else None
        launch = _launch_content(snap, settings, sandbox_id, task, worst, "", language, True)
        launch.update(
            stdout="",
            stderr="",
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
        status = _status_content(settings, SandboxState(sandbox_id=sandbox_id, phase="closing"))
        shapes.append((None, status))
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
) -> dict[str, Any]:
    content: dict[str, Any] = {"ok": True, "backend": "e2b", "deduplicated": deduplicated}
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
    content: dict[str, Any] = {"ok": True}
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
    return content


def _stop_content(
    snap: _Snapshot, sandbox_id: str, task: str, state: CommandState
) -> dict[str, Any]:
    content: dict[str, Any] = {"ok": True, "cancel_requested": True}
    content.update(_state_fields(state))
    content.update(snap.locator(sandbox_id, task))
    content["instruction"] = (
        "A cancel request is not proof the command ended; read its output to confirm."
    )
    return content


def _status_content(settings: PortSettings, state: SandboxState) -> dict[str, Any]:
    return {
        "ok": True,
        "backend": "e2b",
        "enabled": True,
        "isolated": True,
        "sandbox_id": state.sandbox_id,
        "sandbox_phase": state.phase,
        "allow_internet_access": settings.allow_internet_access,
        "boundary": "Remote E2B sandbox; the host's files are not shared with it.",
        "contracts": [settings.contract],
    }


# ---------------------------------------------------------------------------
# One call in flight


class _Call:
    """The state one tool call carries between steps: what is known of its
    locator and whether a side effect may have been dispatched."""

    def __init__(
        self, snap: _Snapshot, settings: PortSettings, secrets: frozenset[str] = frozenset()
    ) -> None:
        self.snap = snap
        self.settings = settings
        self.secrets = secrets | redaction_secrets(snap.arguments.get("env"))
        self.phase = Phase.BEFORE_DISPATCH
        self.sandbox_id: str | None = None
        self.task_id: str | None = None
        self.observed: str | None = None
        self.background_ref: BackgroundCommandRef | None = None

    # -- verdicts ----------------------------------------------------------

    def uncertain(self, reason: ErrorCode) -> ToolResult:
        """C6: the full locator, never ``executed: false``, never a retry."""
        content = _uncertain_content(
            self.snap, reason, self.observed, self.sandbox_id, self.task_id
        )
        return ToolResult(
            status="uncertain",
            content=self.fit(content),
            background_command_ref=self.background_ref,
        )

    def fit(self, content: dict[str, Any]) -> dict[str, Any]:
        if self.snap.governed:
            return content
        # Admission reserved room for every fixed part, so this cannot raise
        # for contents built by this module; BudgetError here is a bug.
        return fit_to_budget(content, self.settings.max_output_bytes)

    def failed(self, failure: EffectFailure, *, side_effect: bool) -> ToolResult:
        """What an effect failure means, given what was dispatched (C5, C6, C11)."""
        if self.phase is Phase.AFTER_DISPATCH:
            reason = ErrorCode.ABORTED if failure.aborted else ErrorCode.EVIDENCE_INCOMPLETE
            return self.uncertain(reason)
        if side_effect and failure.delivery is Delivery.MAYBE_SENT:
            self.phase = Phase.AFTER_DISPATCH
            reason = ErrorCode.ABORTED if failure.aborted else ErrorCode.SANDBOX_OUTCOME_UNKNOWN
            return self.uncertain(reason)
        if failure.aborted:
            return _refuse(ErrorCode.CANCELED, "The call was aborted before anything ran.")
        return _refuse(
            ErrorCode.SANDBOX_UNAVAILABLE if side_effect else ErrorCode.READ_FAILED,
            "The sandbox could not be reached; nothing ran. The call may be retried.",
        )

    def guard(self) -> Generator[Effect, Any, ToolResult | None]:
        """Check abort, drift and authority now (C9, C11)."""
        report = yield CheckAuthority(request_digest=self.snap.digest)
        if not isinstance(report, AuthorityReport):
            report = AuthorityReport(aborted=False, drifted=False, authority_held=False)
        verdict = decide(
            self.phase,
            observe(
                aborted=report.aborted,
                drifted=report.drifted,
                authority_held=report.authority_held,
            ),
        )
        if isinstance(verdict, Continue):
            return None
        if isinstance(verdict, Refuse):
            return _refuse(verdict.code, "Nothing ran. Check the harness's authority and retry.")
        return self.uncertain(verdict.reason)

    def finish(self, result: ToolResult) -> Generator[Effect, Any, ToolResult]:
        """Guard, then fit the content to the budget; when text must be cut
        and an artifact store exists, keep the full content there (C12, C15).
        """
        stop = yield from self.guard()
        if stop is not None:
            return stop
        content = dict(result.content)
        if self.secrets:
            # A command may print an env value it was given; the model must
            # not see it (C17). Masked before the budget measures anything.
            for key in ("stdout", "stderr"):
                if isinstance(content.get(key), str):
                    content[key] = _mask(content[key], self.secrets)
            result = attrs.evolve(result, content=content)
            content = dict(content)
        if self.snap.governed:
            return result
        budget = self.settings.max_output_bytes
        try:
            fitted = fit_to_budget(content, budget)
        except (BudgetError, CanonicalJSONError):
            return self.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
        if all(fitted.get(key) is content.get(key) for key in SHRINKABLE_FIELDS):
            return result  # nothing was cut
        artifact: ArtifactRef | None = None
        if self.settings.artifacts_enabled:
            try:
                stored = yield WriteArtifact(
                    key=f"{self.snap.operation_key}:{self.snap.call_id}:output",
                    content=canonical_json(content).decode("utf-8"),
                )
            except EffectFailure:
                stored = None
            if isinstance(stored, ArtifactRef) and len(stored.uri) <= _ARTIFACT_URI_MAX:
                artifact = stored
            stop = yield from self.guard()
            if stop is not None:
                return stop
        content["output_budget"] = _output_budget_note(artifact)
        try:
            fitted = fit_to_budget(content, budget)
        except BudgetError:
            return self.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
        return attrs.evolve(
            result,
            content=fitted,
            artifact_refs=result.artifact_refs + ((artifact,) if artifact else ()),
        )


# ---------------------------------------------------------------------------
# Programs


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
    added by the program.
    """
    result = yield from _tool_program(request, settings, snapshot, secrets)
    if result.status in ("ok", "uncertain"):
        return result  # already fitted by _Call.finish / _Call.uncertain
    if getattr(request, "result_governance", None) == RUNTIME_ARTIFACTS:
        return result
    return bound_result(result, settings.max_output_bytes)


def bound_result(result: ToolResult, max_output_bytes: int) -> ToolResult:
    """The last line of C12: fit any result's content, whatever built it.

    Results built here already fit; this catches text the harness supplied
    (a deny reason, say). If even the fixed part cannot fit, the result keeps
    its status and code and drops everything else but ``executed``.
    """
    try:
        if len(canonical_json(result.content)) <= max_output_bytes:
            return result
        return attrs.evolve(result, content=fit_to_budget(result.content, max_output_bytes))
    except (BudgetError, CanonicalJSONError):
        keep = ("ok", "error_type", "executed", "evidence_incomplete")
        bare = {key: result.content[key] for key in keep if key in result.content}
        return attrs.evolve(result, content=bare)


def snapshot_request(request: object, settings: PortSettings) -> _Snapshot | None:
    """The request as a program will see it (identity copied), or ``None``
    when the request is malformed. Never raises: a port takes this before
    running a call, so that :func:`crash_result` has a locator to report."""
    try:
        checked = _check_request(request, settings)
    except Exception:
        return None
    return None if isinstance(checked, ToolResult) else checked


def crash_result(
    snap: _Snapshot | None,
    settings: PortSettings,
    *,
    dispatched: bool,
    sandbox_id: str | None,
    task: str | None,
) -> ToolResult:
    """The result of a call whose program or interpreter broke unexpectedly.

    Nothing dispatched: ``error``, executed false. Otherwise ``uncertain``
    with the locator of ``snap`` (from :func:`snapshot_request`, taken before
    the call ran) and whatever sandbox and task ids were seen (C6).
    """
    if not dispatched:
        return error_result(
            ErrorCode.INTERNAL, instruction="sandrail failed before anything ran; nothing ran."
        )
    if snap is not None:
        call = _Call(snap, settings)
        call.sandbox_id, call.task_id = sandbox_id, task
        call.phase = Phase.AFTER_DISPATCH
        try:
            return call.uncertain(ErrorCode.INTERNAL)
        except (BudgetError, CanonicalJSONError):
            pass
    content: dict[str, Any] = {
        "ok": False,
        "error_type": ErrorCode.INTERNAL.value,
        "evidence_incomplete": True,
    }
    return bound_result(ToolResult(status="uncertain", content=content), settings.max_output_bytes)


def _tool_program(
    request: object, settings: PortSettings, snapshot: _Snapshot | None, secrets: frozenset[str]
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
            status="error", content=arguments_rejection(problems, settings.max_output_bytes)
        )
    # Work from a private copy: the harness may still mutate its request,
    # which the guard reports as drift instead of this program seeing it.
    arguments = json.loads(_DIGEST_ENCODER.encode(snap.arguments))
    for name in _INTEGER_ARGUMENTS & arguments.keys():
        if isinstance(arguments[name], float):
            # JSON Schema's "integer" admits 5.0; from here on it is 5.
            arguments[name] = int(arguments[name])
    snap = attrs.evolve(snap, arguments=arguments)
    refused = _tool_refusal(snap, settings)
    if refused is not None:
        return refused
    call = _Call(snap, settings, secrets)

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
        if snap.governed or _fits(content, settings.max_output_bytes):
            return ToolResult(status="approval_required", content=content)
        return _refuse(
            ErrorCode.HARNESS_CALLBACK_FAILED,
            "The policy asked for approval with an interaction id too long for the budget.",
        )
    if not isinstance(decision, Allow):
        reason = decision.reason if isinstance(decision, Deny) else ""
        return _refuse(ErrorCode.POLICY_DENIED, reason or "The harness policy denied this call.")

    if snap.tool == "sandbox_status":
        return (yield from _sandbox_status(call))
    if snap.tool in ("read_command_output", "stop_command"):
        return (yield from _owned_command(call))
    return (yield from _launch(call))


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHELL_RESERVED: Final = frozenset({"BASHOPTS", "SHELLOPTS"})
_MAX_ENV_ENTRY_BYTES: Final = 131_072
"""Linux refuses to exec with an environment string (NAME=VALUE) this long."""


def _tool_refusal(snap: _Snapshot, settings: PortSettings) -> ToolResult | None:
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
        if not _ENV_NAME.fullmatch(name):
            reason = (
                "must be a shell variable name: letters, digits and _, not starting with a digit"
            )
            problems.append(ArgumentProblem(path=path, reason=reason))
        elif name.startswith("BASH_") or name in _SHELL_RESERVED:
            # bash acts on these as it starts, and some echo their value in
            # an error message, which would put it in the output (C17).
            reason = "is reserved by the shell (BASH_*, BASHOPTS, SHELLOPTS) and cannot be set"
            problems.append(ArgumentProblem(path=path, reason=reason))
        if "\x00" in value:
            problems.append(ArgumentProblem(path=path, reason="must not contain a NUL character"))
        elif len(name.encode("utf-8")) + 1 + len(value.encode("utf-8")) >= _MAX_ENV_ENTRY_BYTES:
            problems.append(
                ArgumentProblem(path=path, reason="must be under 128 KiB together with its name")
            )
    return problems


def _sandbox_status(call: _Call) -> Generator[Effect, Any, ToolResult]:
    snap, settings = call.snap, call.settings
    try:
        state = yield Inspect(session_id=snap.session_id, owner_key=settings.owner_key)
    except EffectFailure as failure:
        return call.failed(failure, side_effect=False)
    if not isinstance(state, SandboxState):
        return _refuse(ErrorCode.READ_FAILED, "The sandbox answered with something unexpected.")
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
        owned = None
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
            return _refuse(ErrorCode.TASK_NOT_FOUND, "This session has no sandbox to read from.")
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
            return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
        call.observed = cancelled.state.status
        if cancelled.state.status == "unknown":
            return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
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
        return _refuse(ErrorCode.READ_FAILED, "The sandbox answered with something unexpected.")
    call.observed = chunk.state.status if chunk.state.status in TERMINAL_STATUSES else None
    if chunk.state.status == "unknown":
        return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
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
        return call.failed(failure, side_effect=True)
    call.phase = Phase.AFTER_DISPATCH
    if not isinstance(ready, SandboxReady):
        return call.uncertain(ErrorCode.SANDBOX_OUTCOME_UNKNOWN)
    call.sandbox_id = ready.sandbox_id
    if background:
        call.background_ref = _background_ref(snap, wanted)
    stop = yield from call.guard()
    if stop is not None:
        return stop

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
            return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
        stop = yield from call.guard()
        if stop is not None:
            return stop

    # Has this session seen the task launched before? Then its claim must
    # still be in the sandbox: one that is gone (a command wiped the ledger)
    # must not turn a retry into a second launch (C2).
    try:
        known = yield ResolveOwned(task_id=wanted)
    except EffectFailure:
        known = None
    expect_claim = isinstance(known, OwnedCommand) and known.task_id == wanted and known.launched
    try:
        yield RememberOwned(
            task_id=wanted, operation_key=snap.operation_key, sandbox_id=ready.sandbox_id
        )
    except EffectFailure:
        return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
    fence = snap.identity.execution_fence if isinstance(snap.identity, NativeIdentity) else None
    try:
        started = yield Start(
            sandbox_id=ready.sandbox_id,
            task_id=wanted,
            request_digest=launch_digest(snap.tool, args),
            command=command,
            cwd=args.get("cwd"),
            env=args.get("env"),
            timeout_seconds=timeout_seconds,
            fence=fence,
            expect_claim=expect_claim,
        )
    except EffectFailure as failure:
        return call.failed(failure, side_effect=True)
    if isinstance(started, StartRefused):
        return (yield from _refused(call, started))
    if not isinstance(started, Started) or started.task_id != wanted:
        return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
    with contextlib.suppress(EffectFailure):  # bookkeeping: the launch stands
        yield RememberOwned(
            task_id=wanted,
            operation_key=snap.operation_key,
            sandbox_id=ready.sandbox_id,
            launched=True,
        )
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

    collected = yield from _read_all(call, ready.sandbox_id, wanted, state)
    if isinstance(collected, ToolResult):
        return collected
    stdout, stderr, final, limited = collected
    content = _launch_content(
        snap, settings, ready.sandbox_id, wanted, final, command, language, deduplicated
    )
    content["stdout"] = stdout
    content["stderr"] = stderr
    if limited:
        content["retention_limited"] = True
    return (yield from call.finish(ToolResult(status="ok", content=content)))


_Collected = tuple[str, str, CommandState, bool]
_MIN_READ_BYTES: Final = 4
"""A read must be able to return one whole UTF-8 character."""


def _read_all(
    call: _Call, sandbox_id: str, wanted: str, ended: CommandState
) -> Generator[Effect, Any, _Collected | ToolResult]:
    """Read all retained output of an ended command through byte cursors, at
    most :data:`RETAINED_OUTPUT_LIMIT` bytes for both streams together.

    Returns stdout, stderr, the last state, and whether the limit cut the
    reading short. ``Read.max_bytes`` bounds each stream, so each read asks
    for the most per stream that keeps the total within the room left, given
    the sizes the ended command reported (one read usually does). Between
    reads the guard runs, as around any external step (C9).
    """
    stdout: list[str] = []
    stderr: list[str] = []
    cursors = (0, 0)
    final = ended
    while True:
        room = RETAINED_OUTPUT_LIMIT - cursors[0] - cursors[1]
        left = (final.stdout_bytes - cursors[0], final.stderr_bytes - cursors[1])
        if room < 2 * _MIN_READ_BYTES:
            return "".join(stdout), "".join(stderr), final, True
        per_stream = max(_per_stream(room, left), _MIN_READ_BYTES)
        try:
            chunk = yield Read(
                sandbox_id=sandbox_id,
                task_id=wanted,
                stdout_cursor=cursors[0],
                stderr_cursor=cursors[1],
                max_bytes=per_stream,
            )
        except EffectFailure as failure:
            return call.failed(failure, side_effect=False)
        if not isinstance(chunk, OutputChunk):
            return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
        final = chunk.state
        stdout.append(chunk.stdout)
        stderr.append(chunk.stderr)
        advanced = (chunk.next_stdout_cursor, chunk.next_stderr_cursor) != cursors
        cursors = (chunk.next_stdout_cursor, chunk.next_stderr_cursor)
        if not chunk.more:
            return "".join(stdout), "".join(stderr), final, False
        if not advanced:
            return call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
        stop = yield from call.guard()
        if stop is not None:
            return stop


def _per_stream(room: int, left: tuple[int, int]) -> int:
    """The largest per-stream read whose two streams fit in ``room`` bytes,
    given how many bytes each stream has ``left`` (unknown sizes: half each)."""
    low, high = sorted(max(size, 0) for size in left)
    if high == 0:
        return room // 2
    if low + high <= room:
        return high
    if 2 * low >= room:
        return room // 2
    return room - low


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
