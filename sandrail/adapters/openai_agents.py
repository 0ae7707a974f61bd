"""``FunctionTool`` s for the OpenAI Agents SDK, strict mode on.

    agent = Agent(name="ops", tools=sandrail.adapters.openai_agents.function_tools(toolset))

Each tool's schema is the ``openai-strict`` profile (every property required
and nullable, ``env`` as a ``{name, value}`` list), which the SDK's strict
mode takes as it is; the model's arguments come back in that shape and are
converted for the port. The tool's output is exactly ``result.to_json()``.

Operation keys: ``f"{run_id}:{tool_call_id}"``. ``run_id`` may be a string
or a function of the SDK's ``ToolContext`` (plain or ``async``) returning
one; by default it is a fresh id for each ``Runner.run`` (the SDK has no run
id of its own, so the adapter keeps one per run context), which is right
for retries inside one process. To make a call retried after a process
restart reconcile instead of running again, pass your own durable run id
(for example ``run_id=lambda ctx: ctx.context.run_id``). A function that
fails, or returns anything but a non-blank string (``None``, ``""``), gives
no safe key: the call is refused (``e2b_command_operation_key_required``)
and nothing runs.

A model's retry is a new tool call with a new call id; an exact repeat of a
call that was left unsettled (``uncertain``, ``approval_required``, or never
answered) runs under that call's key and reconciles it (see
:class:`~sandrail.Toolset`).

Approval (``docs/howto/approval.md``). Each tool's ``needs_approval`` asks the harness's
policy (without running anything): ``ApprovalRequired`` interrupts the run
(``result.interruptions``); ``ALLOW`` and ``Deny`` do not (a ``Deny`` never
asks anyone: the model reads ``policy_denied``). ``state.approve(item)`` and
``Runner.run(agent, state)`` run that very call once; ``state.reject(item,
rejection_message=rejection(toolset))`` runs nothing and sends the model
sandrail's ``approval_rejected`` result (or give the run
``RunConfig(tool_error_formatter=tool_error_formatter(toolset))`` to send it
for every rejection of these tools). An approved call's operation key must be
the same in every process that resumes the saved ``RunState``, whatever
``RunConfig`` it resumes with, so by default it is built from what the state
itself carries: the call id. The key is ``approved:{call_id}``, never the
resuming run's trace id (a ``RunConfig(trace_id=...)`` per request, or
tracing on in one worker and off in another, would give one approval two
keys). Real models' call ids are unique; a scripted model (or a provider)
that reuses call ids across runs of one session needs ``run_id=`` (a
function of the context that the saved state carries too, such as
``lambda ctx: ctx.context.run_id``), or a new run's approved call would be
taken for the old one's retry. A
state resumed twice, from one saved copy, in two processes sharing the
toolset's record, then launches once (C2); a rejection given with
``rejection(toolset, item=item)`` stands against a later approval.
Arguments that are not a JSON object are the SDK's to judge: it asks for
approval of them before this adapter sees them; approved, they are refused
and nothing runs.

Timeouts: ``timeout_seconds`` is enforced here, not by the SDK: when it
passes, the call is aborted as a :class:`~sandrail.CancelToken` would abort
it and the tool's output is the resulting ``canceled`` or ``uncertain``
result, with the locator the model needs. Do not set the SDK's own
``FunctionTool.timeout_seconds`` on these tools: it cancels the call and
tells the model only "timed out". If it is set anyway, its timeout message
is replaced by the abandoned call's result when there is one.
"""

from __future__ import annotations

import inspect
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from sandrail import ErrorCode, ToolResult, Toolset
from sandrail.adapters.kit import Adapter, ModelCall, check_run_id, require
from sandrail.core import bound_result

__all__ = ["function_tools", "rejection", "tool_error_formatter"]

RunId = str | Callable[[Any], Any] | None


def function_tools(
    toolset: Toolset, *, run_id: RunId = None, timeout_seconds: float | None = None
) -> list[Any]:
    """One ``agents.FunctionTool`` per tool of ``toolset``, strict schemas on.

    ``timeout_seconds`` is each call's deadline, enforced by the adapter (see
    the module doc). Raises ``ImportError`` naming the ``openai-agents``
    extra when the SDK is missing, ``TypeError`` or ``ValueError`` for a
    ``run_id`` that is not a non-blank string, a function or ``None``, or a
    ``timeout_seconds`` that is not a positive number.
    """
    agents = require("agents", "openai-agents")
    if not callable(run_id):
        check_run_id(run_id)
    adapter = Adapter(
        toolset, framework="the SDK", profile="openai-strict", timeout_seconds=timeout_seconds
    )
    run_ids = _RunIds(run_id)
    pending = _Pending()
    return [
        agents.FunctionTool(
            name=name,
            description=toolset.definition(name).description,
            params_json_schema=schema,
            on_invoke_tool=_invoker(adapter, name, run_ids, pending),
            strict_json_schema=True,
            needs_approval=_asks_a_person(adapter, name, run_ids),
            timeout_error_function=_timed_out(adapter, pending),
        )
        for name, schema in adapter.schemas().items()
    ]


def rejection(
    toolset: Toolset, reason: str | None = None, *, item: Any = None, run_id: str | None = None
) -> str:
    """The text to send the model when a person rejected its call:
    ``state.reject(item, rejection_message=rejection(toolset, item=item))``.
    It is :meth:`Toolset.rejection <sandrail.Toolset.rejection>`'s JSON
    (``status: "error"``, ``approval_rejected``, ``executed: false``, what
    to do instead, and ``reason`` when given). Given the approval ``item``,
    a call that already ran under its key (approved on one copy of the
    state, rejected on another) is answered ``uncertain`` with the task's
    locator instead, never "nothing ran" (C5). ``run_id``: the string given
    to :func:`function_tools`, if one was (a function cannot be followed
    here)."""
    raw = getattr(item, "raw_item", None)
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    name = getattr(item, "tool_name", None)
    return _rejected(toolset, reason, name, call_id, run_id)


def _rejected(
    toolset: Toolset, reason: str | None, name: object, call_id: object, run_id: str | None
) -> str:
    if not isinstance(name, str) or not isinstance(call_id, str) or not call_id.strip():
        return toolset.rejection(reason).to_json()
    key = toolset.operation_key(call_id, run_id=run_id if run_id is not None else "approved")
    return toolset.rejection(reason, name=name, call_id=call_id, operation_key=key).to_json()


def tool_error_formatter(
    toolset: Toolset, *, run_id: str | None = None
) -> Callable[[Any], str | None]:
    """A ``RunConfig(tool_error_formatter=...)`` that sends :func:`rejection`
    for every rejected call of ``toolset``'s tools (``state.reject(item)``
    without a message) and leaves every other error to the SDK. ``run_id``:
    as for :func:`rejection`."""
    names = frozenset(toolset.names)

    def formatter(args: Any) -> str | None:
        if getattr(args, "kind", None) == "approval_rejected" and args.tool_name in names:
            return _rejected(toolset, None, args.tool_name, getattr(args, "call_id", None), run_id)
        return None

    return formatter


def _asks_a_person(adapter: Adapter, name: str, run_ids: _RunIds) -> Callable[..., Any]:
    """The tool's ``needs_approval``: whether the harness's policy answers
    ``ApprovalRequired`` for this call (asked, nothing run; see
    :meth:`~sandrail.adapters.kit.Adapter.asks_a_person`). A call without a
    safe key asks nobody: it is refused when invoked, naming why."""

    async def needs_approval(context: Any, params: dict[str, Any], call_id: str) -> bool:
        call = adapter.call_of(
            name, params, call_id=call_id, run_id=await run_ids.of(context, approved=True)
        )
        return isinstance(call, ModelCall) and await adapter.asks_a_person(call)

    return needs_approval


def _invoker(
    adapter: Adapter, name: str, run_ids: _RunIds, pending: _Pending
) -> Callable[[Any, str], Any]:
    async def invoke(ctx: Any, arguments_json: str) -> str:
        call_id = getattr(ctx, "tool_call_id", None)
        approved = isinstance(call_id, str) and _approved(ctx, name, str.__str__(call_id))
        run = await run_ids.of(ctx, approved=approved)
        if isinstance(run, _NoRunId):
            return adapter.refusal(
                ErrorCode.OPERATION_KEY_REQUIRED,
                f"No safe operation key for this call ({run.reason}); nothing ran.",
            ).to_json()
        call = adapter.call_of(name, arguments_json, call_id=call_id, run_id=run)
        if not isinstance(call, ModelCall):
            return call.to_json()
        pending.started(ctx, call.operation_key)
        result = await adapter.run(call, approved=approved)
        return result.to_json()

    return invoke


def _approved(ctx: Any, name: str, call_id: str) -> bool:
    """Whether a person approved this very call through the SDK
    (``state.approve(item)``). An ``always_approve=True`` approval names no
    call (the SDK keeps it for the tool): it approves none here, so every
    call of the tool still meets the harness's policy. Read through the
    SDK's per-call record (0.24 keeps several records per tool name, 0.22
    one); an SDK that has neither approves nothing (the call then says
    ``approval_required``)."""
    try:
        if ctx.is_tool_approved(name, call_id) is not True:
            return False
        if not hasattr(ctx, "_approval_records_for_key"):
            return ctx._get_per_call_approval_status_for_key(name, call_id) is True
        records = ctx._approval_records_for_key(name, call_id=call_id)
        per_call = ctx._get_per_call_approval_status_for_record
        return any(per_call(record, call_id) is True for record in records)
    except Exception:
        return False


def _timed_out(adapter: Adapter, pending: _Pending) -> Callable[[Any, Exception], str]:
    """The SDK's timeout message, replaced by what the call really left: the
    abandoned result (``canceled`` or ``uncertain``, with its locator)."""
    toolset = adapter.toolset

    def message(ctx: Any, error: Exception) -> str:
        key = pending.key_of(ctx)
        if key is None:
            # No key yet: the call was stopped before it reached the port.
            return adapter.refusal(
                ErrorCode.CANCELED, "The tool timed out before it ran; nothing ran."
            ).to_json()
        abandoned = toolset.abandoned.get(key)
        if abandoned is not None:
            return abandoned.to_json()
        # Reached the port, and its result has since left the record.
        return bound_result(
            ToolResult(
                status="uncertain",
                content={
                    "status": "uncertain",
                    "ok": False,
                    "error_type": ErrorCode.ABORTED.value,
                    "evidence_incomplete": True,
                    "operation_key": key,
                    "session_id": toolset.session_id,
                    "instruction": "The tool timed out and may have run. Do not send it as "
                    "a new call: call it again with exactly the same arguments to learn what "
                    "happened (that never runs it twice).",
                },
            ),
            toolset.max_output_bytes,
        ).to_json()

    return message


class _NoRunId:
    def __init__(self, reason: str) -> None:
        self.reason = reason


class _RunIds:
    """The run part of operation keys: given, computed, or by default one per
    run context, and for a call a person approved, what the saved
    ``RunState`` carries (see the module doc)."""

    def __init__(self, run_id: RunId) -> None:
        self._run_id = run_id
        # The SDK gives every tool call of one run the same `usage` object;
        # runs are told apart by it (weakly, so finished runs are forgotten).
        self._per_run: dict[int, tuple[weakref.ref[Any], str]] = {}

    async def of(self, ctx: Any, *, approved: bool = False) -> str | _NoRunId:
        if isinstance(self._run_id, str):
            return self._run_id
        if callable(self._run_id):
            try:
                value = self._run_id(ctx)
                if inspect.isawaitable(value):
                    value = await value
            except Exception as exc:
                return _NoRunId(f"the run_id function raised {type(exc).__name__}")
            if not isinstance(value, str) or not value.strip():
                shown = (
                    repr(value)
                    if value is None or isinstance(value, str)
                    else f"a value of type {type(value).__name__}"
                )
                return _NoRunId(f"the run_id function returned {shown}, not a non-blank string")
            return value
        if approved:
            return _saved_run(ctx)
        anchor = getattr(ctx, "usage", None)
        if anchor is None:
            return uuid.uuid4().hex
        known = self._per_run.get(id(anchor))
        if known is not None and known[0]() is anchor:
            return known[1]
        self._per_run = {k: v for k, v in self._per_run.items() if v[0]() is not None}
        fresh = uuid.uuid4().hex
        self._per_run[id(anchor)] = (weakref.ref(anchor), fresh)
        return fresh


def _saved_run(ctx: Any) -> str:
    """The run part of an approved call's key: ``approved``, so the key is
    ``approved:{call_id}``, built from the call id the saved ``RunState``
    carries alone. Never the resuming run's trace id or tracing setting:
    a harness that gives each resume its own
    ``RunConfig(trace_id=...)``, or resumes one copy with tracing on and
    another with it off, would otherwise give one approval two keys."""
    del ctx  # the call id is the key's other part; nothing else here travels
    return "approved"


class _Pending:
    """The operation key each tool context's call runs under, so the SDK's
    timeout handler (called with the same context) finds its result."""

    def __init__(self) -> None:
        self._keys: dict[int, tuple[Callable[[], Any], str]] = {}

    def started(self, ctx: Any, key: str) -> None:
        try:
            ref: Callable[[], Any] = weakref.ref(ctx)
        except TypeError:
            return  # a context that cannot be referenced weakly is not remembered
        self._keys = {k: v for k, v in self._keys.items() if v[0]() is not None}
        self._keys[id(ctx)] = (ref, key)

    def key_of(self, ctx: Any) -> str | None:
        known = self._keys.get(id(ctx))
        if known is None or known[0]() is not ctx:
            return None
        return known[1]
