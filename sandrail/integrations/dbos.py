"""sandrail tools as DBOS steps, at most once (``pip install 'sandrail[dbos]'``).

One object registers the step (create it before ``DBOS.launch()``), and
one line in a workflow runs a tool::

    steps = SandboxSteps(backend=E2BBackend(), scope={"app": "agents"},
                         record=PostgresRecord(system_database_url))

    @DBOS.workflow()
    def agent() -> str:
        return steps.call("run_command", {"command": "make test"})

What DBOS re-runs, and what stays stable (see ``docs/explanation/engines.md``):

- **The operation key** is ``dbos:{workflow id}:{step id}``
  (:func:`operation_key`): recovery (a restarted process, or another
  executor) replays a workflow from its last completed step and runs the
  step that was in flight again from its first line, under the same
  workflow id and step id, so that re-run reconciles the first launch and
  never launches again (C2); so does a retry of the step. With the model's
  ``call_id`` the key is ``dbos:{workflow id}:call:{call id}``. A **fork**
  (``DBOS.fork_workflow``) is a new workflow with a new id: its steps from
  the fork's start step on run again as new calls (what a fork is for); the
  steps before it are copied, never re-run.
- **The session**, so the sandbox, is ``dbos:{workflow id}`` of the
  workflow a chain of forks began with (:func:`session_id`): a recovered
  workflow and its forks find the sandbox its earlier steps used.
- **The execution fence** (C10) is the same for every call (1). The
  sandbox keeps one highest fence for all the calls of its session, and a
  workflow shares its sandbox with its forks, which run beside it (a fork
  made while its origin runs, sibling forks, a recovered relative): a fence
  that grew for one of them would refuse the others' current executions.
  A **zombie** (an executor still running a workflow another one
  recovered) runs the same keys as the newer execution, so the sandbox's
  claim of each lets only one of them launch (C2); and it loses its
  authority (C9) before it sends anything once DBOS counts the newer
  dispatch: each check reads the workflow's status afresh, and a watch
  aborts a running call. See ``docs/explanation/engines.md``.
- **Cancellation.** DBOS cancels at step boundaries and does not interrupt
  a running step, so while a call runs its workflow's status is read every
  ``poll_seconds``: a cancelled workflow (or a newer execution) aborts the
  call, which ends ``canceled`` (nothing was sent) or ``uncertain`` (never a
  lost launch).
- **Answers.** ``ok`` is returned. ``uncertain`` is retried by DBOS (the
  step's own retries) while fewer than ``reconcile_attempts`` attempts were
  made: the next attempt, same key, reconciles it; on the last one it is
  returned (or raised, below): never retried without bound. A refusal
  (``error``: policy, arguments, conflict;
  ``approval_required``) is never retried. ``refusals="return"`` (the
  default: an agent's tool) returns every answer's JSON;
  ``refusals="raise"`` raises :class:`SandrailRefusal` (not retried:
  the step's ``should_retry`` says so) for every answer but ``ok``.

DBOS records each step's output (the answer's JSON, within its budget, env
values masked) in its system database; worker-side secrets (``env=``) join
each command's env in the step and are never a workflow input or a step
output. DBOS on SQLite needs SQLite 3.42 or newer (Debian 12 has 3.40.1,
where ``DBOS.launch()`` fails); PostgreSQL has no such limit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from sandrail import CancelToken, NativeIdentity, ToolResult, Toolset, __version__
from sandrail.adapters import require
from sandrail.integrations._sessions import (
    Refusals,
    SessionToolsets,
    call_arguments,
    call_identity,
    check_refusals,
    engine_id,
    engine_options,
    verdict,
    with_env,
)

require("dbos", "dbos")

from dbos import DBOS  # noqa: E402

__all__ = [
    "NotInStepError",
    "SandboxSteps",
    "SandrailReconcile",
    "SandrailRefusal",
    "operation_key",
    "session_id",
]

_DEFAULT_RECONCILE_ATTEMPTS: Final = 3
_MAX_FORK_DEPTH: Final = 64
_FENCE: Final = 1
"""Every call's execution fence: one for all (see the module doc)."""
_FRESH_SECONDS: Final = 0.05
"""How old the last read of a workflow's status may be for an authority
check to go by it."""


class NotInStepError(RuntimeError):
    """A function that reads the running DBOS step was called outside one."""


class SandrailRefusal(Exception):
    """An answer that is not ``ok``, raised (``refusals="raise"``): ``kind``
    is its ``error_type`` (or its status), ``text`` its JSON. DBOS does not
    retry it."""

    def __init__(self, kind: str, text: str) -> None:
        super().__init__(kind, text)
        self.kind = kind
        self.text = text

    def __str__(self) -> str:
        return f"sandrail: {self.kind}"


class SandrailReconcile(Exception):
    """An ``uncertain`` answer the next attempt of the step reconciles
    (raised for DBOS to retry the step while attempts are left)."""


def _step() -> tuple[str, int]:
    status = DBOS.step_status
    workflow_id = DBOS.workflow_id if status is not None else None
    if status is None or workflow_id is None:
        raise NotInStepError(
            "this must be called inside a DBOS step (it reads the step's workflow id and "
            "step id); outside one there is no identity a re-run keeps"
        )
    return workflow_id, status.step_id


def operation_key(call_id: str | None = None) -> str:
    """The operation key of the tool call of the running step:
    ``dbos:{workflow id}:{step id}``, or with the model's ``call_id``
    ``dbos:{workflow id}:call:{call id}`` (see the module doc). Raises
    :class:`NotInStepError` outside a step, ``ValueError`` for a blank or
    non-string ``call_id``."""
    workflow_id, step_id = _step()
    if call_id is None:
        return engine_id("dbos", workflow_id, str(step_id))
    if not isinstance(call_id, str) or not call_id.strip():
        raise ValueError("call_id must be a non-blank string")
    return engine_id("dbos", workflow_id, "call", call_id)


def session_id() -> str:
    """The session of the running step's workflow: ``dbos:{workflow id}`` of
    the workflow its chain of forks began with. Raises :class:`NotInStepError`
    outside a step."""
    return engine_id("dbos", _Execution.read(_step()[0]).root)


class _Execution:
    """What one call learns of its workflow's execution when it starts, and
    a watch of the workflow's status while the call runs."""

    def __init__(self, workflow_id: str, root: str, parent: str | None, dispatched: int) -> None:
        self.workflow_id = workflow_id
        self.root = root
        self.parent = parent
        self.dispatched = dispatched
        self._read_at = time.monotonic()  # the read that made it
        self.cancel = CancelToken()
        self.superseded = False
        self._stop = threading.Event()

    @classmethod
    def read(cls, workflow_id: str) -> _Execution:
        """The execution as DBOS has it now: its dispatch count, and the
        workflow its chain of forks began with (whose sandbox it shares)."""
        status = _status(workflow_id)
        if status is None:
            raise NotInStepError(f"DBOS has no status for workflow {workflow_id!r}")
        root, origin = workflow_id, status.forked_from
        for _ in range(_MAX_FORK_DEPTH):
            if not origin:
                break
            root = origin
            earlier = _status(origin)
            origin = earlier.forked_from if earlier is not None else None
        dispatched = max(1, status.recovery_attempts or 1)
        return cls(workflow_id, root, status.parent_workflow_id, dispatched)

    def holds(self) -> bool:
        """Whether this is still the workflow's newest execution, as DBOS has
        it now: read afresh when the last read is older than
        :data:`_FRESH_SECONDS` (a zombie woken from a freeze reads before it
        sends anything, without waiting for the watch; the checks of one
        step, a moment apart, share a read). A database that cannot be read
        leaves the answer to the watch."""
        now = time.monotonic()
        if not self.superseded and now - self._read_at > _FRESH_SECONDS:
            try:
                status = _status(self.workflow_id)
            except Exception:
                return True
            self._read_at = now
            if status is not None and (status.recovery_attempts or 1) > self.dispatched:
                self.superseded = True
        return not self.superseded

    def watch(self, poll_seconds: float) -> None:
        """Read the workflow's status every ``poll_seconds`` until
        :meth:`stop`: cancelled, or dispatched again (a newer execution),
        aborts the call."""

        def poll() -> None:
            while not self._stop.wait(poll_seconds):
                try:
                    status = DBOS.get_workflow_status(self.workflow_id)
                except Exception:
                    continue  # the database is away: the call's own checks decide
                if status is None:
                    continue
                if (status.recovery_attempts or 1) > self.dispatched:
                    self.superseded = True
                if self.superseded or status.status == "CANCELLED":
                    self.cancel.cancel()
                    return

        threading.Thread(target=poll, name="sandrail-dbos-watch", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


def _status(workflow_id: str) -> Any:
    """DBOS's status of ``workflow_id``. DBOS refuses its blocking read on a
    thread whose event loop runs (an async step, a framework's sync callback
    inside one), so there it is made on a thread of its own, waited for."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return DBOS.get_workflow_status(workflow_id)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sandrail-dbos") as pool:
        return pool.submit(DBOS.get_workflow_status, workflow_id).result()


_current: contextvars.ContextVar[_Execution | None] = contextvars.ContextVar(
    "sandrail_dbos_execution", default=None
)


def _holds() -> bool:
    """False once the running call saw a newer execution of its workflow
    (a call of a step of your own, made through :meth:`SandboxSteps.toolset`,
    has no watch: only its toolset's own checks apply)."""
    execution = _current.get()
    return execution is None or execution.holds()


class SandboxSteps:
    """The sandrail tools as DBOS steps: :meth:`call` (a sync step) and
    :meth:`call_async` (an async one), registered as ``{name}.call_tool``
    and ``{name}.call_tool_async`` when this object is made (make it before
    ``DBOS.launch()``, once per name).

    ``backend``, ``authorize``, ``record`` and every other option are those
    of :class:`~sandrail.Toolset`; ``scope`` is the
    :class:`~sandrail.NativeOwner`'s scope (keep it the same on every
    executor). Give ``record=PostgresRecord(...)`` on DBOS's own system
    database (the URL DBOS was configured with), so a recovery on another
    executor expects the claim the first start may have made. ``env`` are
    worker-side secrets joined to every command's env; ``reconcile_attempts``
    bounds the attempts an ``uncertain`` answer is retried for;
    ``poll_seconds`` is how often a running call reads its workflow's status
    (cancellation, a newer execution).

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
        poll_seconds: float = 0.5,
        name: str = "sandrail",
        **toolset_options: Any,
    ) -> None:
        if isinstance(poll_seconds, bool) or not isinstance(poll_seconds, (int, float)):
            raise TypeError("poll_seconds must be a number")
        if not 0.01 <= poll_seconds <= 60:
            raise ValueError("poll_seconds must be between 0.01 and 60")
        if not isinstance(name, str) or not name.strip():
            raise ValueError("name must be a non-blank string")
        self._attempts, self._build_id = engine_options(reconcile_attempts, build_id, __version__)
        self._poll = float(poll_seconds)
        self._sessions = SessionToolsets(
            scope=scope,
            identity=self._identity,
            engine_authority=_holds,
            env=env,
            options=toolset_options,
        )
        options: dict[str, Any] = {
            "retries_allowed": self._attempts > 1,
            "max_attempts": self._attempts,
            "interval_seconds": 1.0,
            "backoff_rate": 1.5,
            "should_retry": lambda error: isinstance(error, SandrailReconcile),
        }

        def call_tool(
            tool: str,
            arguments: Mapping[str, Any] | None = None,
            call_id: str | None = None,
            refusals: str = "return",
            approved: bool = False,
        ) -> str:
            return self._run_sync(tool, arguments, call_id, refusals, approved)

        async def call_tool_async(
            tool: str,
            arguments: Mapping[str, Any] | None = None,
            call_id: str | None = None,
            refusals: str = "return",
            approved: bool = False,
        ) -> str:
            return await self._run_async(tool, arguments, call_id, refusals, approved)

        self._step = DBOS.step(name=f"{name}.call_tool", **options)(call_tool)
        self._step_async = DBOS.step(name=f"{name}.call_tool_async", **options)(call_tool_async)

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        refusals: Refusals = "return",
        approved: bool = False,
    ) -> str:
        """Run tool ``name`` as a DBOS step of the running workflow and
        return its answer's JSON (``result.to_json()``); see the module doc
        for ``refusals``. ``call_id`` is the model's tool call id, when there
        is one; ``approved`` says a person approved exactly this call.
        Raises ``ValueError`` for a bad ``refusals``."""
        check_refusals(refusals)
        return self._step(name, arguments, call_id, refusals, approved)

    async def call_async(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_id: str | None = None,
        refusals: Refusals = "return",
        approved: bool = False,
    ) -> str:
        """:meth:`call` as an async step, for async workflows."""
        check_refusals(refusals)
        return await self._step_async(name, arguments, call_id, refusals, approved)

    def toolset(self) -> Toolset:
        """The :class:`~sandrail.Toolset` of the running step's workflow (for
        a step of your own, or a framework's durable agent). Raises
        :class:`NotInStepError` outside a step."""
        return self._sessions.toolset(session_id())

    def _identity(self) -> NativeIdentity:
        workflow_id, step_id = _step()
        execution = _current.get() or _Execution.read(workflow_id)
        return NativeIdentity(
            scope=self._sessions.owner.scope,
            run_id=workflow_id,
            turn_id=str(step_id),
            build_id=self._build_id,
            task_chain_id=execution.root,
            parent_run_id=execution.parent,
            execution_fence=_FENCE,
        )

    def _begin(
        self, name: str, arguments: Mapping[str, Any] | None, call_id: str | None
    ) -> tuple[Toolset, _Execution, dict[str, Any]]:
        workflow_id, step_id = _step()
        execution = _Execution.read(workflow_id)
        toolset = self._sessions.toolset(engine_id("dbos", execution.root))
        given, key = call_identity(call_id, operation_key, f"dbos-step-{step_id}")
        call = {
            "call_id": given,
            "operation_key": key,
            "reconcile_repeats": call_id is not None,
            "cancel": execution.cancel,
        }
        return toolset, execution, call

    def _run_sync(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        call_id: str | None,
        refusals: str,
        approved: bool,
    ) -> str:
        mode = check_refusals(refusals)
        toolset, execution, call = self._begin(name, arguments, call_id)
        token = _current.set(execution)
        execution.watch(self._poll)
        try:
            given = with_env(name, call_arguments(arguments), self._sessions.secrets())
            result = toolset.call_sync(name, given, approved=approved, **call)
        finally:
            execution.stop()
            _current.reset(token)
        return self._answer(result, mode)

    async def _run_async(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        call_id: str | None,
        refusals: str,
        approved: bool,
    ) -> str:
        mode = check_refusals(refusals)
        # DBOS's status reads block: off the event loop (DBOS refuses them on it).
        toolset, execution, call = await asyncio.to_thread(self._begin, name, arguments, call_id)
        token = _current.set(execution)
        execution.watch(self._poll)
        try:
            given = with_env(name, call_arguments(arguments), self._sessions.secrets())
            result = await toolset.call(name, given, approved=approved, **call)
        finally:
            execution.stop()
            _current.reset(token)
        return self._answer(result, mode)

    def _answer(self, result: ToolResult, refusals: Refusals) -> str:
        status = DBOS.step_status
        attempt = (status.current_attempt or 0) + 1 if status is not None else self._attempts
        what = verdict(result, last_attempt=attempt >= self._attempts)
        text = result.to_json()
        if what == "reconcile":
            raise SandrailReconcile(text)
        if result.status == "ok" or refusals == "return":
            return text
        raise SandrailRefusal(str(result.content.get("error_type") or result.status), text)
