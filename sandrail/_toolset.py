"""The one object a harness embeds: every sandrail tool behind one call.

A :class:`Toolset` binds a session, an owner and its identity, the harness's
policy and authority callbacks and a backend, and builds the command and code
ports on them. ``await toolset.call(name, arguments, call_id=...,
operation_key=...)`` runs one tool call through the port and returns its
:class:`~sandrail.core.ToolResult`; ``result.to_json()`` is the text to send
the model. The framework adapters in :mod:`sandrail.adapters` are thin glue
around this one method.

Operation keys. The operation key is a call's retry identity: a call retried
with the same key never launches twice and returns the state of the first
launch (C2); a call with a new key is a new call. Derive it from the agent
run and the tool call: ``f"{run_id}:{call_id}"`` (what
:meth:`Toolset.operation_key` builds), where the run id is stable for as long
as the same logical run may be retried (across process restarts, if runs
resume) and the call id is the model's id for the tool call. Never use a
value a framework reuses across runs on its own: a test model that numbers
its calls from 1 in every run, for one, would make the second run's calls
retries of the first run's, so nothing new would run.

Cancellation. A framework that cancels the await of :meth:`Toolset.call`
(``asyncio.wait_for`` timing out, a task cancelled, an MCP client's cancel)
gets the effect of a :class:`~sandrail.CancelToken` abort: the call's token
fires, the port finishes at once (its waits wake on abort), the result is
kept in :attr:`Toolset.abandoned`, and then the cancellation goes on to the
caller. Aborted before anything was sent, the call ran nothing
(``canceled``); after, it is ``uncertain`` and the next call with the same
operation key reconciles it, never launching a second time.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal

from sandrail._port import (
    ArtifactStore,
    AuthorityCallback,
    AuthorizeCallback,
    RememberOwnedCallback,
    ResolveOwnedCallback,
    ToolPort,
    code_tools,
    command_tools,
)
from sandrail.core import (
    DEFAULT_MAX_OUTPUT_BYTES,
    AgentIdentity,
    AgentOwner,
    ArgumentProblem,
    ErrorCode,
    NativeIdentity,
    OwnedCommand,
    Owner,
    OwnerIdentity,
    ToolCall,
    ToolDefinition,
    ToolRequest,
    ToolResult,
    arguments_rejection,
    bound_result,
    error_result,
)
from sandrail.core._profiles import Profile, canonical_arguments, tool_schema
from sandrail.interpreters._cancel import CancelToken

__all__ = ["Toolset"]

ToolGroup = Literal["command", "code"]
IdentitySource = OwnerIdentity | Callable[[], OwnerIdentity]

_ABANDONED_KEPT: Final = 1024


class Toolset:
    """Every sandrail tool for one session and owner, behind one call.

    - ``backend``, ``session_id``, ``owner``, ``authorize``,
      ``assert_authority`` and the optional settings are those of
      :func:`sandrail.command_tools`; both ports share them.
    - ``identity``: what each request states about its caller. For an
      :class:`~sandrail.AgentOwner` it defaults to the matching
      :class:`~sandrail.AgentIdentity`; a native owner must pass a
      :class:`~sandrail.NativeIdentity`, or a function returning the current
      one (its ``turn_id`` and fence change as the run goes on).
    - ``tools``: ``("command", "code")`` by default; the code tool is
      ``run_code`` for a native owner and ``sandbox_run_code`` for an agent.
    - ``run_id``: the run part of :meth:`operation_key`; a fresh random one
      by default. Give the harness's own run id when runs resume after a
      restart.

    Keep one toolset for as long as its session lives: its ports share one
    ownership record of the commands they launched, which
    ``read_command_output`` and ``stop_command`` check (C4) and which makes a
    retry through either port expect the claim its first start may have made
    (C2). A second toolset for the same session, or one after a restart,
    reaches them only through a durable record: pass
    ``remember_owned_command`` and ``resolve_owned_command`` (see the README's
    "Retries, restarts and threads"). ``redact`` are values to mask from the
    start (a restarted harness's env values).

    Raises ``TypeError`` or ``ValueError`` at once for a toolset that could
    not work; after construction :meth:`call` never raises but for
    cancellation (see the module doc).
    """

    def __init__(
        self,
        *,
        backend: Callable[[Any], Any],
        session_id: str,
        owner: Owner,
        authorize: AuthorizeCallback,
        assert_authority: AuthorityCallback,
        identity: IdentitySource | None = None,
        tools: Iterable[ToolGroup] = ("command", "code"),
        run_id: str | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        artifacts: ArtifactStore | None = None,
        resolve_owned_command: ResolveOwnedCallback | None = None,
        remember_owned_command: RememberOwnedCallback | None = None,
        foreground_timeout_seconds: int = 300,
        background_timeout_seconds: int = 300,
        allow_internet_access: bool = False,
        redact: Iterable[str] = (),
    ) -> None:
        groups = tuple(tools)
        if not groups or any(group not in ("command", "code") for group in groups):
            raise ValueError('tools must name "command", "code" or both')
        if identity is None:
            if not isinstance(owner, AgentOwner):
                raise TypeError(
                    "a native owner needs identity=NativeIdentity(...) "
                    "(or a function returning the current one)"
                )
            identity = AgentIdentity(agent_id=owner.agent_id)
        elif not callable(identity) and not isinstance(identity, (AgentIdentity, NativeIdentity)):
            raise TypeError("identity must be an AgentIdentity, a NativeIdentity or a function")
        if run_id is not None and (not isinstance(run_id, str) or not run_id.strip()):
            raise ValueError("run_id must be a non-blank string")
        self._identity = identity
        self._run_id = run_id if run_id is not None else uuid.uuid4().hex
        self._max_output_bytes = max_output_bytes
        self._ports: dict[str, ToolPort] = {}
        self._abandoned: OrderedDict[str, ToolResult] = OrderedDict()
        remember, resolve = _shared_record(remember_owned_command, resolve_owned_command)
        secrets = tuple(redact) if not isinstance(redact, str) else redact
        for group in dict.fromkeys(groups):
            factory = command_tools if group == "command" else code_tools
            port = factory(
                backend=backend,
                session_id=session_id,
                owner=owner,
                authorize=authorize,
                assert_authority=assert_authority,
                max_output_bytes=max_output_bytes,
                artifacts=artifacts,
                resolve_owned_command=resolve,
                remember_owned_command=remember,
                foreground_timeout_seconds=foreground_timeout_seconds,
                background_timeout_seconds=background_timeout_seconds,
                allow_internet_access=allow_internet_access,
                redact=secrets,
            )
            for definition in port.definitions:
                self._ports[definition.name] = port
        self._session_id = session_id

    # -- what the model is offered -------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names, in a stable order."""
        return tuple(self._ports)

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def max_output_bytes(self) -> int:
        """The byte budget of every result's :meth:`~sandrail.ToolResult.to_json`."""
        return self._max_output_bytes

    @property
    def run_id(self) -> str:
        """The run part of :meth:`operation_key` when none is given."""
        return self._run_id

    def definition(self, name: str) -> ToolDefinition:
        """The definition of tool ``name``; ``KeyError`` if there is none."""
        port = self._ports.get(name)
        if port is None:
            raise KeyError(f"this toolset has no tool named {name!r}; it has {list(self._ports)}")
        return port.definition(name)

    def schema(self, name: str, profile: Profile = "full") -> dict[str, Any]:
        """The parameters schema of tool ``name`` in ``profile`` (``full``,
        ``openai-strict`` or ``anthropic-strict``): a fresh plain dict to hand
        a framework. Arguments the model builds from it go back through
        :meth:`call` with the same ``profile``."""
        return tool_schema(self.definition(name), profile)

    def operation_key(self, call_id: str, *, run_id: str | None = None) -> str:
        """``f"{run_id}:{call_id}"``, the documented operation-key rule (see
        the module doc), with this toolset's :attr:`run_id` by default."""
        if not isinstance(call_id, str) or not call_id.strip():
            raise ValueError("call_id must be a non-blank string")
        return f"{self._run_id if run_id is None else run_id}:{call_id}"

    @property
    def abandoned(self) -> Mapping[str, ToolResult]:
        """Results of calls whose caller cancelled the await, by operation key
        (the most recent 1024): what the port recorded when it stopped."""
        return dict(self._abandoned)

    # -- calls -------------------------------------------------------------------

    async def call(
        self,
        name: str,
        arguments: object,
        *,
        call_id: str,
        operation_key: str,
        profile: Profile = "full",
        cancel: object | None = None,
    ) -> ToolResult:
        """Run one tool call and return its result; never raises but for the
        caller's own cancellation (after which the result is in
        :attr:`abandoned`) and a ``ValueError`` for an unknown ``profile``
        (a harness bug, not a model's).

        ``arguments`` are the model's, in the shape of ``profile``'s schema;
        ``cancel`` is an optional abort signal of the harness (anything with a
        bool ``cancelled``, like :class:`~sandrail.CancelToken`).
        """
        prepared = self._prepare(name, arguments, call_id, operation_key, profile, cancel)
        if isinstance(prepared, ToolResult):
            return prepared
        port, request, token = prepared
        task = asyncio.ensure_future(port.execute(request))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            token.cancel()
            result = await _outlast_cancellation(task)
            self._abandoned[request.operation_key] = result
            self._abandoned.move_to_end(request.operation_key)
            while len(self._abandoned) > _ABANDONED_KEPT:
                self._abandoned.popitem(last=False)
            raise

    def call_sync(
        self,
        name: str,
        arguments: object,
        *,
        call_id: str,
        operation_key: str,
        profile: Profile = "full",
        cancel: object | None = None,
    ) -> ToolResult:
        """:meth:`call` for code without an event loop; never raises. With an
        asynchronous backend, call it outside any running event loop."""
        prepared = self._prepare(name, arguments, call_id, operation_key, profile, cancel)
        if isinstance(prepared, ToolResult):
            return prepared
        port, request, _ = prepared
        return port.execute_sync(request)

    def _prepare(
        self,
        name: str,
        arguments: object,
        call_id: str,
        operation_key: str,
        profile: Profile,
        cancel: object | None,
    ) -> ToolResult | tuple[ToolPort, ToolRequest, CancelToken]:
        port = self._ports.get(name) if isinstance(name, str) else None
        if port is None:
            return bound_result(
                error_result(
                    ErrorCode.TOOL_UNBOUND,
                    instruction="There is no tool of that name.",
                    available_tools=list(self._ports),
                ),
                self._max_output_bytes,
            )
        definition = port.definition(name)
        converted = canonical_arguments(definition, profile, arguments)
        if not isinstance(converted, (tuple, Mapping)):
            converted = (ArgumentProblem("arguments", "must be a JSON object"),)
        if isinstance(converted, tuple):
            content = arguments_rejection(converted, self._max_output_bytes)
            return ToolResult(status="error", content=content)
        token = CancelToken()
        try:
            identity = self._identity() if callable(self._identity) else self._identity
        except Exception:
            return error_result(
                ErrorCode.HARNESS_CALLBACK_FAILED,
                instruction="The harness's identity function failed; nothing ran.",
            )
        request = ToolRequest(
            call=ToolCall(name=name, call_id=call_id, arguments=converted),
            operation_key=operation_key,
            session_id=self._session_id,
            definition=definition,
            identity=identity,
            cancel=token if cancel is None else _Either(cancel, token),
        )
        return port, request, token


class _Either:
    """An abort signal that fires when the harness's own signal or the
    toolset's token does (the toolset's fires when the await is cancelled)."""

    def __init__(self, harness: object, own: CancelToken) -> None:
        self._harness = harness
        self._own = own

    @property
    def cancelled(self) -> bool:
        if self._own.cancelled:
            return True
        try:
            return getattr(self._harness, "cancelled", False) is True
        except Exception:
            return True  # a signal that cannot be read may have fired

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], None]:
        removers = [self._own.add_callback(callback)]
        add = getattr(self._harness, "add_callback", None)
        if callable(add):
            removers.append(add(callback))

        def remove() -> None:
            for remover in removers:
                if callable(remover):
                    remover()

        return remove


async def _outlast_cancellation(task: asyncio.Future[ToolResult]) -> ToolResult:
    """Wait for the port's result although the caller is being cancelled.

    The token has fired, so the port finishes at once; a framework that keeps
    re-delivering the cancellation (anyio's cancel scopes do) is outwaited.
    """
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                return task.result()


def _shared_record(
    remember: RememberOwnedCallback | None, resolve: ResolveOwnedCallback | None
) -> tuple[RememberOwnedCallback, ResolveOwnedCallback]:
    """One ownership record for the ports of a toolset (they share task ids),
    written through to the harness's durable one when it gives one."""
    record: dict[str, OwnedCommand] = {}
    lock = threading.Lock()

    def remember_here(request: ToolRequest, owned: OwnedCommand) -> None:
        with lock:
            record[owned.task_id] = owned
        if remember is not None:
            remember(request, owned)

    def resolve_here(request: ToolRequest, task: str) -> OwnedCommand | None:
        found = resolve(request, task) if resolve is not None else None
        if isinstance(found, OwnedCommand):
            return found
        with lock:
            return record.get(task)

    return remember_here, resolve_here
