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
as that line does: one step a line. Which program runs after authorize is
the tool's record's (:data:`~sandrail.core._tools.TOOLS`), and admission
measures the result shapes the record names: nothing here branches on a
tool's name. Each step
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
from collections.abc import Generator, Mapping, Sequence
from typing import Any, Final

import attrs

from ._budget import BudgetError, fit_to_budget
from ._call import CallState, StoppedError, bound_result
from ._canonical import CanonicalJSONError
from ._contents import APPROVAL_INSTRUCTION, uncertain_content
from ._effects import (
    Allow,
    ApprovalRequired,
    Authorize,
    Deny,
    Effect,
    EffectFailure,
    OwnedCommand,
)
from ._identity import task_id
from ._masking import MAX_MASKED_BYTES, Redactions, mask_text, redaction_secrets
from ._plan import session_plan
from ._rejection import ArgumentProblem, arguments_rejection
from ._requests import RUNTIME_ARTIFACTS, ToolRequest
from ._results import (
    ErrorCode,
    ToolResult,
    error_result,
)
from ._shown import NOTHING_SHOWN, ShownIdentities, exposed_env, strings
from ._snapshot import PortSettings, _check_request, _fits, _refuse, _Snapshot
from ._tool_record import Program, ToolRecord
from ._tools import tool_record
from ._validation import check_arguments

__all__ = ["Program", "crash_result", "refused_after_launch", "tool_program"]


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
    result = _admitted(request, settings, snapshot, secrets, shown)
    if isinstance(result, CallState):
        call = result
        try:
            yield from _authorize(call)
            result = yield from call.record.program(call)
        except StoppedError as stopped:
            result = stopped.result
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


def _admitted(
    request: object,
    settings: PortSettings,
    snapshot: _Snapshot | None,
    secrets: frozenset[str],
    shown: ShownIdentities,
) -> CallState | ToolResult:
    """The call to run, or the refusal of a malformed request or of one
    admission refuses (C5, C14)."""
    checked = snapshot if snapshot is not None else _check_request(request, settings)
    if isinstance(checked, ToolResult):
        return checked
    return _admit(tool_record(checked.tool), checked, settings, secrets, shown)


def _admit(
    record: ToolRecord,
    snap: _Snapshot,
    settings: PortSettings,
    secrets: frozenset[str],
    shown: ShownIdentities,
) -> CallState | ToolResult:
    """The call, or its refusal before anything runs (C5): an identity the
    budget cannot hold (C14), arguments the schema or the tool's own rules
    (its record's refusal) refuse, a secret the identity would show (C17):
    this call's own identity and task id, or an identity the session already
    showed."""
    plan = session_plan(settings)
    needed = plan.admission_size(record, snap)
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
    snap = _with_integers(snap, record.integer_arguments)
    refused = None if record.refusal is None else record.refusal(snap, settings)
    if refused is not None:
        return refused
    own_task = plan.task_id(snap.operation_key)
    exposed = _masked_in_identity(snap, own_task, secrets)
    env = snap.arguments.get("env")
    if env:
        exposed = exposed_env(env, snap.locator(), own_task, shown) + exposed
    if exposed:
        return _rejection(exposed, settings)
    call = CallState(record, snap, settings, secrets, own_task)
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


def _with_integers(snap: _Snapshot, integers: frozenset[str]) -> _Snapshot:
    """JSON Schema's "integer" admits 5.0; from here on it is 5 (``integers``:
    the tool's integer arguments). (The snapshot's arguments are already the
    program's private plain copy.)"""
    arguments = snap.arguments
    floats = [name for name in integers & arguments.keys() if isinstance(arguments[name], float)]
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
    call.went_on((yield call.check))
    if type(decision) is Allow:
        return
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
        own_task = task_id(snap.session_id, settings.owner, snap.operation_key)
        call = CallState(tool_record(snap.tool), snap, settings, frozenset(), own_task)
        call.sandbox_id, call.task_id = sandbox_id, task
        call.dispatched()
        try:
            return call.uncertain(ErrorCode.INTERNAL)
        except (BudgetError, CanonicalJSONError):
            pass
    content: dict[str, Any] = {
        "status": "uncertain",
        "ok": False,
        "error_type": ErrorCode.INTERNAL.value,
        "evidence_incomplete": True,
    }
    return bound_result(ToolResult(status="uncertain", content=content), settings.max_output_bytes)


_NOW_REFUSED: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.POLICY_DENIED: "the harness's policy now denies this call",
    ErrorCode.APPROVAL_REJECTED: "a person has now rejected it",
}
"""The refusals that can meet a call whose key already launched, and how
the result says which it was."""


def refused_after_launch(
    code: ErrorCode,
    known: OwnedCommand,
    request: ToolRequest,
    *,
    reason: object,
    readable: bool,
    max_output_bytes: int,
    approved_first: bool = False,
) -> ToolResult:
    """A refusal (``code``: ``policy_denied``, ``approval_rejected``) of a
    call whose key already launched (``known``, the ownership record's row):
    nothing more was sent, but the start that may have left is not unsaid
    (never ``executed: false``, C5): ``uncertain`` with the task's locator
    (C6; ``request``'s identity, when it has one, its session, key and call
    id), ``reason`` as ``outcome_reason``, pointing at the task to read when
    ``readable`` (the port offers ``read_command_output``); within
    ``max_output_bytes`` (C12). ``approved_first``: no launch is known yet,
    but a person's approval of the call came first (elsewhere) and stands,
    so its start may be leaving now (``known`` then names the task it runs
    as, in no sandbox yet). Raises ``ValueError`` for any other code."""
    why = _NOW_REFUSED.get(code)
    if why is None:
        raise ValueError(f"{code.value} is not a refusal that can follow a launch")
    identity = request.identity
    locator: dict[str, Any] = {} if identity is None else identity.locator()
    locator |= {
        "session_id": request.session_id,
        "operation_key": request.operation_key,
        "call_id": request.call.call_id,
        "sandbox_id": known.sandbox_id,
        "task_id": known.task_id,
    }
    happened = (
        "A person approved this call first, elsewhere, so it may be starting or have started "
        "under this operation key"
        if approved_first
        else "A command under this call's operation key had already started"
    )
    instruction = f"{happened}; {why}, so nothing more was done. Do not repeat it" + (
        ": read the task with read_command_output and this task_id." if readable else "."
    )
    content = uncertain_content(locator, code, None, instruction)
    if isinstance(reason, str) and reason:
        content["outcome_reason"] = reason
    return bound_result(ToolResult(status="uncertain", content=content), max_output_bytes)
