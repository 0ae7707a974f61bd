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
- **The execution fence** (C10) is the second at which Temporal scheduled the
  running attempt. A plain attempt number cannot be it: the sandbox keeps one
  highest fence for all the workflow's calls, and a call at its third attempt
  would then refuse every later call's first. A newer attempt of the same
  activity is scheduled after the old one's timeout, so with a heartbeat (or
  start-to-close) timeout of a second or more it carries a higher fence: a
  zombie attempt (a worker that missed its timeout and still runs) is refused
  inside the sandbox once the new attempt launched, and loses its authority
  (C9) as soon as Temporal tells it, at a heartbeat, that it was superseded.
  A call refused that way is retried (a new attempt carries a newer fence).
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
import dataclasses
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
    "execution_fence",
    "operation_key",
    "session_id",
]

TOOL_ACTIVITY: Final = "sandrail.call_tool"
"""The name of the activity :class:`SandboxActivities` registers."""

_DEFAULT_RECONCILE_ATTEMPTS: Final = 3
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
    prefix = f"temporal:{info.workflow_id}:{info.workflow_run_id}"
    if call_id is None:
        return f"{prefix}:{info.activity_id}"
    if not isinstance(call_id, str) or not call_id.strip():
        raise ValueError("call_id must be a non-blank string")
    return f"{prefix}:call:{call_id}"


def session_id() -> str:
    """The session of the running activity's workflow,
    ``temporal:{namespace}:{workflow id}``: the same for every attempt, reset
    and continued run of the workflow, so they all find one sandbox.
    Raises :class:`NotInActivityError` outside an activity."""
    info = _info()
    if info.workflow_id is None:
        raise NotInActivityError("this activity was not started by a workflow")
    return f"temporal:{info.workflow_namespace or info.namespace}:{info.workflow_id}"


def execution_fence() -> int:
    """The running attempt's execution fence: the whole second (since the
    epoch, by the Temporal server's clock) at which the attempt was
    scheduled (see the module doc). Raises :class:`NotInActivityError`
    outside an activity."""
    scheduled = _info().current_attempt_scheduled_time
    return max(1, int(scheduled.timestamp()))


def _attempt_holds() -> bool:
    """Whether Temporal still has this attempt running: it has not told it
    (through a heartbeat) that it was cancelled, timed out, reset, paused or
    is unknown (superseded)."""
    return activity.cancellation_details() is None


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
    workflow id as task chain, ``build_id`` and :func:`execution_fence`).
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
        if isinstance(reconcile_attempts, bool) or not isinstance(reconcile_attempts, int):
            raise TypeError("reconcile_attempts must be an int")
        if not 1 <= reconcile_attempts <= 100:
            raise ValueError("reconcile_attempts must be between 1 and 100")
        if build_id is not None and (not isinstance(build_id, str) or not build_id.strip()):
            raise ValueError("build_id must be a non-blank string")
        self._build_id = build_id or f"sandrail-{__version__}"
        self._reconcile_attempts = reconcile_attempts
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
            execution_fence=execution_fence(),
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
            async with _heartbeating(here, info.heartbeat_timeout):
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
        return _answer(result, refusals, self._last_attempt(info))

    def _last_attempt(self, info: activity.Info) -> bool:
        if info.attempt >= self._reconcile_attempts:
            return True
        policy = info.retry_policy
        return policy is not None and 0 < policy.maximum_attempts <= info.attempt


def _answer(result: ToolResult, refusals: Refusals, last_attempt: bool) -> str:
    """The activity's result for ``result``, or the failure it raises."""
    text = result.to_json()
    what = verdict(result, last_attempt=last_attempt, stale_fence_retries=True)
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
    details: Mapping[str, Any], timeout: timedelta | None
) -> AsyncIterator[None]:
    """Heartbeat ``details`` now and every third of ``timeout`` (5 s without
    one) until the body ends."""
    interval = max(0.1, timeout.total_seconds() / 3) if timeout else 5.0

    async def beat() -> None:
        while True:
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
