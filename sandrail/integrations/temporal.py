"""sandrail tools as Temporal activities, at most once (``pip install 'sandrail[temporal]'``).

On the worker, one object holds what the tools need and gives Temporal its
activity::

    sandbox = SandboxActivities(backend=E2BBackend(), scope={"app": "agents"}, record=record)
    worker = Worker(client, task_queue="agents", workflows=[...], activities=sandbox.activities)

In the workflow, one line runs a tool (``call_tool`` schedules the activity
with a heartbeat timeout and a bounded retry policy)::

    text = await call_tool("run_command", {"command": "make test"})

What Temporal re-runs, and what stays stable (see ``docs/explanation/engines.md``):

- **The operation key** is ``temporal:{workflow id}:{run id}:{activity id}``
  (:func:`operation_key`): every attempt of an activity, on any worker, has
  the same three, so a retry after a lost worker reconciles the first
  launch and never launches again (C2). When the workflow passes the
  model's tool call id (``call_tool(..., call_id=...)``, which replays
  deterministically), the key is ``temporal:{workflow id}:{run id}:call:{call
  id}``: a new activity for the same tool call (approved later, say) keeps
  it. A **reset** and a **continue-as-new** start a new run with a new run
  id: the calls after a reset point run again as new calls (what a reset is
  for), and a continued run's activity ids, which start from 1 again, never
  meet the previous run's keys. Calls replayed from history before a reset
  point are never re-run at all.
- **The session**, so the sandbox, is ``temporal:{namespace}:{workflow id}``
  (:func:`session_id`): the same across attempts, resets and continue-as-new,
  so a recovered worker finds the same sandbox.
- **A zombie attempt** (a worker that missed its heartbeat timeout and still
  runs) runs the same key as the attempt that replaced it, so the sandbox's
  claim of that key lets only one of them launch (C2), whichever comes
  first; the other reconciles. It also loses its authority (C9) before it
  sends anything: when Temporal tells it, at a heartbeat, that its attempt
  is gone, and, without waiting for that, when it finds that it heartbeated
  last a whole heartbeat timeout ago (its lease lapsed: Temporal has timed
  the attempt out by then), by this worker's own monotonic clock. A call
  stopped that way ran nothing and is retried (within the bound below).
- **The execution fence** (C10) is the same for every call (1): the
  sandbox keeps one highest fence for all the calls of a session, and
  nothing Temporal gives an activity grows across the whole workflow (an
  attempt number or a scheduled time is one activity's), so any of them
  would refuse a parallel activity's current attempt. See
  ``docs/explanation/engines.md``.
- **Heartbeats** carry the call's locator (session, operation key, call id,
  task id, never arguments or output) every third of the heartbeat timeout
  while the call runs, so Temporal notices a lost worker and can deliver a
  cancellation; a new attempt checks the last attempt's locator against its
  own, and runs nothing when they differ (a deployment changed how keys are
  made: ``uncertain``, pointing at the earlier task).
- **Answers.** ``ok`` is returned. ``uncertain`` is retried by Temporal
  (a retryable failure) while fewer than ``reconcile_attempts`` attempts were
  made: the next attempt, same key, reconciles it and never launches again;
  on the last attempt it is returned (or raised, see below): never retried
  without bound. A refusal (``error``: policy, arguments, conflict;
  ``approval_required``) is never retried. With ``refusals="raise"`` (the
  default of :func:`call_tool`, for workflow code) every answer but ``ok``
  ends as a non-retryable :class:`~temporalio.exceptions.ApplicationError`
  whose ``type`` is the ``error_type`` (or ``"uncertain"``,
  ``"approval_required"``) and whose one detail is the answer's JSON; with
  ``refusals="return"`` (an agent's tool) the answer's JSON is returned for
  the model to read.
- **Cancellation** reaches the call through heartbeats: the call is aborted
  (``canceled`` if nothing was sent, else ``uncertain``; never a lost launch)
  and the activity ends cancelled, the answer's JSON as the detail.

Worker-side secrets (``env=``) join each command's env on the worker: they
never enter a workflow input, an activity input or result, or a heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import timedelta
from typing import Any, Final

from sandrail import ErrorCode, NativeIdentity, ToolResult, Toolset, __version__
from sandrail.adapters import require
from sandrail.core import bound_result
from sandrail.integrations._sessions import (
    Refusals,
    SessionToolsets,
    check_refusals,
    engine_id,
    engine_options,
    locator,
    verdict,
    with_env,
)

require("temporalio", "temporal")

from temporalio import activity, workflow  # noqa: E402
from temporalio.common import RetryPolicy  # noqa: E402
from temporalio.exceptions import ApplicationError, CancelledError  # noqa: E402

__all__ = [
    "TOOL_ACTIVITY",
    "NotInActivityError",
    "SandboxActivities",
    "ToolCallInput",
    "call_tool",
    "operation_key",
    "session_id",
]

TOOL_ACTIVITY: Final = "sandrail.call_tool"
"""The name of the activity :class:`SandboxActivities` registers."""

_DEFAULT_RECONCILE_ATTEMPTS: Final = 3
_FENCE: Final = 1
_RECONCILE_DELAY: Final = timedelta(seconds=1)


class NotInActivityError(RuntimeError):
    """A function that reads the running activity was called outside one."""


def _info() -> activity.Info:
    try:
        return activity.info()
    except RuntimeError:
        raise NotInActivityError(
            "this must be called inside a Temporal activity (it reads the activity's "
            "workflow id, run id and activity id); outside one there is no identity a "
            "retry keeps"
        ) from None


def operation_key(call_id: str | None = None) -> str:
    """The operation key of the tool call of the running activity:
    ``temporal:{workflow id}:{run id}:{activity id}``, or with the model's
    ``call_id`` ``temporal:{workflow id}:{run id}:call:{call id}`` (see the
    module doc). Raises :class:`NotInActivityError` outside an activity
    (or in one not started by a workflow), ``ValueError`` for a blank or
    non-string ``call_id``."""
    info = _info()
    if info.workflow_id is None or info.workflow_run_id is None:
        raise NotInActivityError(
            "this activity was not started by a workflow: it has no workflow id or run id"
        )
    workflow_id, run_id = info.workflow_id, info.workflow_run_id
    if call_id is None:
        return engine_id("temporal", workflow_id, run_id, info.activity_id)
    if not isinstance(call_id, str) or not call_id.strip():
        raise ValueError("call_id must be a non-blank string")
    return engine_id("temporal", workflow_id, run_id, "call", call_id)


def session_id() -> str:
    """The session of the running activity's workflow,
    ``temporal:{namespace}:{workflow id}``: the same for every attempt, reset
    and continued run of the workflow, so they all find one sandbox.
    Raises :class:`NotInActivityError` outside an activity."""
    info = _info()
    if info.workflow_id is None:
        raise NotInActivityError("this activity was not started by a workflow")
    return engine_id("temporal", info.workflow_namespace or info.namespace, info.workflow_id)


class _Lease:
    """How long the running attempt can be sure Temporal still has it: a
    heartbeat timeout after its last heartbeat, by this worker's monotonic
    clock (no other machine's clock). Once lapsed it stays lapsed: Temporal
    may have given the call to another worker meanwhile."""

    def __init__(self, timeout: timedelta | None) -> None:
        self._seconds = timeout.total_seconds() if timeout else None
        self._last = time.monotonic()
        self.lapsed = False

    def beat(self) -> None:
        """A heartbeat is being sent now."""
        self._check()
        self._last = time.monotonic()

    def holds(self) -> bool:
        self._check()
        return not self.lapsed

    def _check(self) -> None:
        if self._seconds is not None and time.monotonic() - self._last >= self._seconds:
            self.lapsed = True


_lease: contextvars.ContextVar[_Lease | None] = contextvars.ContextVar(
    "sandrail_temporal_lease", default=None
)


def _attempt_holds() -> bool:
    """Whether this attempt may still act: Temporal has not told it (through
    a heartbeat) that it was cancelled, timed out, reset, paused or is
    unknown, and the lease of a call run by :class:`SandboxActivities` has
    not lapsed (a call of an activity of your own has no lease: only what
    Temporal says applies)."""
    lease = _lease.get()
    return activity.cancellation_details() is None and (lease is None or lease.holds())


@dataclasses.dataclass(frozen=True)
class ToolCallInput:
    """The input of the :data:`TOOL_ACTIVITY` activity: the tool ``name``,
    its ``arguments`` (a JSON object, ``full`` profile), the model's
    ``call_id`` when there is one (see :func:`operation_key`), what to do
    with an answer that is not ``ok`` (``refusals``), and ``approved`` when
    a person approved exactly this call (its ``ApprovalRequired`` then runs
    it once, under the same key)."""

    name: str
    arguments: dict[str, Any]
    call_id: str | None = None
    refusals: str = "raise"
    approved: bool = False


class SandboxActivities:
    """The sandrail tools as one Temporal activity (:data:`TOOL_ACTIVITY`).

    ``backend``, ``authorize``, ``record`` and every other option are those
    of :class:`~sandrail.Toolset`; ``scope`` is the
    :class:`~sandrail.NativeOwner`'s scope (part of every task id: keep it
    the same on every worker). Each workflow gets its own toolset (session
    :func:`session_id`), built on the first call a worker runs for it, with
    the identity of the running activity (run id, activity id, the
    workflow id as task chain, ``build_id``, and fence 1: see the module doc).
    Give a durable ``record`` (:mod:`sandrail.records`) shared by the
    workers, so a retry on another worker expects the claim the first start
    may have made. ``env`` are worker-side secrets joined to every
    command's env (a mapping, or a function returning one at each call).
    ``reconcile_attempts`` bounds the attempts an ``uncertain`` answer is
    retried for (see the module doc).

    Raises ``TypeError`` or ``ValueError`` at once for options no toolset
    could take.
    """

    def __init__(
        self,
        *,
        scope: Mapping[str, Any],
        env: Mapping[str, str] | Callable[[], Mapping[str, str]] | None = None,
        build_id: str | None = None,
        reconcile_attempts: int = _DEFAULT_RECONCILE_ATTEMPTS,
        **toolset_options: Any,
    ) -> None:
        self._reconcile_attempts, self._build_id = engine_options(
            reconcile_attempts, build_id, __version__
        )
        self._sessions = SessionToolsets(
            scope=scope,
            identity=self._identity,
            engine_authority=_attempt_holds,
            env=env,
            options=toolset_options,
        )
        run = self._run

        @activity.defn(name=TOOL_ACTIVITY)
        async def call_tool_activity(call: ToolCallInput) -> str:
            return await run(call)

        self._activity = call_tool_activity

    @property
    def activities(self) -> list[Callable[..., Any]]:
        """The activities to give the worker (``Worker(activities=...)``)."""
        return [self._activity]

    def toolset(self) -> Toolset:
        """The :class:`~sandrail.Toolset` of the running activity's workflow
        (for an activity of your own, or a framework's durable agent: see
        ``docs/howto/temporal.md``). Raises :class:`NotInActivityError`
        outside an activity."""
        return self._sessions.toolset(session_id())

    def _identity(self) -> NativeIdentity:
        info = _info()
        return NativeIdentity(
            scope=self._sessions.owner.scope,
            run_id=info.workflow_run_id or info.activity_id,
            turn_id=info.activity_id,
            build_id=self._build_id,
            task_chain_id=info.workflow_id or info.activity_id,
            parent_run_id=None,
            execution_fence=_FENCE,
        )

    async def _run(self, call: ToolCallInput) -> str:
        """One tool call in the running activity (see the module doc)."""
        refusals = check_refusals(call.refusals)
        info = _info()
        toolset = self.toolset()
        key = operation_key(call.call_id)
        call_id = call.call_id or f"temporal-activity-{info.activity_id}"
        here = locator(toolset, self._sessions.owner, call.name, call_id, key)
        earlier = _earlier_locator(info.heartbeat_details)
        if earlier is not None and _moved(earlier, here):
            result = _moved_result(earlier, toolset.max_output_bytes)
        else:
            arguments = with_env(call.name, call.arguments, self._sessions.secrets())
            lease = _Lease(info.heartbeat_timeout)
            token = _lease.set(lease)
            async with _heartbeating(here, lease, info.heartbeat_timeout):
                try:
                    result = await toolset.call(
                        call.name,
                        arguments,
                        call_id=call_id,
                        operation_key=key,
                        reconcile_repeats=call.call_id is not None,
                        approved=call.approved,
                    )
                except asyncio.CancelledError:
                    stopped = toolset.abandoned.get(key)
                    text = stopped.to_json() if stopped is not None else None
                    raise CancelledError("sandrail: the tool call was cancelled", text) from None
                finally:
                    _lease.reset(token)
            if lease.lapsed and result.content.get("executed") is False:
                return _answer(result, refusals, self._last_attempt(info), lost=True)
        return _answer(result, refusals, self._last_attempt(info))

    def _last_attempt(self, info: activity.Info) -> bool:
        if info.attempt >= self._reconcile_attempts:
            return True
        policy = info.retry_policy
        return policy is not None and 0 < policy.maximum_attempts <= info.attempt


def _answer(
    result: ToolResult, refusals: Refusals, last_attempt: bool, *, lost: bool = False
) -> str:
    """The activity's result for ``result``, or the failure it raises
    (``lost``: the attempt's lease lapsed before anything was sent)."""
    text = result.to_json()
    what = verdict(result, last_attempt=last_attempt, attempt_lost=lost)
    if what == "reconcile":
        raise ApplicationError(
            "sandrail: not settled yet; the next attempt reconciles it under the same key",
            text,
            type="sandrail_reconcile",
            next_retry_delay=_RECONCILE_DELAY,
        )
    if result.status == "ok" or refusals == "return":
        return text
    kind = str(result.content.get("error_type") or result.status)
    raise ApplicationError(f"sandrail: {kind}", text, type=kind, non_retryable=True)


@contextlib.asynccontextmanager
async def _heartbeating(
    details: Mapping[str, Any], lease: _Lease, timeout: timedelta | None
) -> AsyncIterator[None]:
    """Heartbeat ``details`` now and every third of ``timeout`` (5 s without
    one) until the body ends, each beat renewing ``lease``."""
    interval = max(0.1, timeout.total_seconds() / 3) if timeout else 5.0

    async def beat() -> None:
        while True:
            lease.beat()
            activity.heartbeat(dict(details))
            await asyncio.sleep(interval)

    task = asyncio.ensure_future(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _earlier_locator(details: object) -> Mapping[str, Any] | None:
    """The locator the last attempt heartbeated, if it did."""
    if not isinstance(details, (list, tuple)) or not details:
        return None
    last = details[-1]
    if isinstance(last, Mapping) and last.get("sandrail") == 1:
        return last
    return None


def _moved(earlier: Mapping[str, Any], here: Mapping[str, Any]) -> bool:
    return any(earlier.get(key) != here[key] for key in ("session_id", "operation_key", "tool"))


def _moved_result(earlier: Mapping[str, Any], max_output_bytes: int) -> ToolResult:
    """``uncertain``: the last attempt ran under another key or session (a
    deployment changed how they are made); nothing runs now."""
    content: dict[str, Any] = {
        "status": "uncertain",
        "ok": False,
        "error_type": ErrorCode.OWNED_OPERATION_MISMATCH.value,
        "instruction": (
            "An earlier attempt of this activity ran this call under another session or "
            "operation key (its heartbeat says which); nothing ran now. Read that task "
            "before running anything again."
        ),
        "earlier": {
            key: earlier.get(key) for key in ("session_id", "operation_key", "call_id", "task_id")
        },
    }
    return bound_result(ToolResult(status="uncertain", content=content), max_output_bytes)


async def call_tool(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    call_id: str | None = None,
    refusals: Refusals = "raise",
    approved: bool = False,
    start_to_close_timeout: timedelta = timedelta(minutes=10),
    heartbeat_timeout: timedelta = timedelta(seconds=10),
    retry_policy: RetryPolicy | None = None,
    task_queue: str | None = None,
) -> str:
    """Run tool ``name`` from workflow code, as the :data:`TOOL_ACTIVITY`
    activity, and return its answer's JSON (``result.to_json()``).

    Every answer but ``ok`` raises ``ActivityError`` (its cause an
    ``ApplicationError`` whose ``type`` is the ``error_type`` and whose one
    detail is the answer's JSON) unless ``refusals="return"`` (see the module
    doc). ``call_id`` is the model's tool call id, when there is one;
    ``approved`` says a person approved exactly this call. The default retry
    policy makes at most 10 attempts (a lost worker is noticed after
    ``heartbeat_timeout``). Raises ``ValueError`` for a bad ``refusals``.
    """
    refusals = check_refusals(refusals)
    policy = retry_policy or RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=10),
        maximum_attempts=10,
    )
    text: str = await workflow.execute_activity(
        TOOL_ACTIVITY,
        ToolCallInput(
            name=name,
            arguments=dict(arguments or {}),
            call_id=call_id,
            refusals=refusals,
            approved=approved,
        ),
        result_type=str,
        start_to_close_timeout=start_to_close_timeout,
        heartbeat_timeout=heartbeat_timeout,
        retry_policy=policy,
        task_queue=task_queue,
    )
    return text
