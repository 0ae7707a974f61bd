"""An MCP server for a :class:`~sandrail.Toolset`, on the official ``mcp`` SDK.

    server = sandrail.adapters.mcp.server(toolset)          # an mcp Server
    # serve it: `sandrail mcp` (stdio or streamable HTTP), or any mcp transport

Tools are listed with the toolset's schemas (``profile``: ``full`` by
default), every property with a top-level ``type`` (a nullable one lists
both, ``["integer", "null"]``, so a client never has to guess that ``5`` is
a number), and MCP annotations from the definitions. The tool descriptions
and the server's instructions say what the tools run on in the backend's
own words (:attr:`sandrail.Toolset.sandbox_description`), so no description
claims a sandbox the backend does not have. A call's
result is one text content holding exactly ``result.to_json()`` (within the
budget as sent), ``isError`` is ``result.is_error``, and ``_meta`` tells the
client what happened and what to do:

- ``sandrail/status``: ``ok``, ``error``, ``uncertain`` or ``approval_required``;
- ``sandrail/operation_key``: the key the call ran under (retry with it),
  unless the client sent a key longer than 1024 bytes (it has it already; a
  result never echoes an unbounded value);
- ``sandrail/next``: for ``uncertain`` and ``approval_required``, what the
  client should do next.

A call of a tool the server does not have is a JSON-RPC error (``-32602``,
"Unknown tool"), as the protocol says, not a tool result.

While a call waits (a long command), the server sends
``notifications/progress`` every ``progress_interval_seconds`` (10 s by
default) when the client's request carried a progress token, so a client
that resets its request timeout on progress (the TypeScript SDK's
``resetTimeoutOnProgress``) does not give up on a command that is still
running.

Approval: when the harness's policy answers ``ApprovalRequired``, the
server asks the person at the client through MCP elicitation where the
client supports it; see :mod:`sandrail.adapters._mcp_approval` for both
protocol eras and what a client that cannot be asked gets.

Operation keys. MCP has no idempotency key, so a client sends one in the
request's ``_meta`` under :data:`OPERATION_KEY_META` (``sandrail/operation_key``):
the same key on a retry never launches twice (C2). A key that is there but
not a non-blank string (``123``, ``""``, an object) is refused
(``e2b_command_operation_key_required``, naming the field) and nothing runs:
it is never silently replaced by the fallback. A request without one gets a
fallback key of its MCP session (another client, or another session of the
same client, never shares it), derived from the tool, its arguments and a
generation that moves on only once an identical call's settled result
(``ok`` or ``error``) was returned (identical as the toolset matches a
model's exact repeat: :meth:`~sandrail.Toolset.one_call`). The key shows an
HMAC, under a secret the server draws for each MCP session, of the tool and
arguments as a result shows them (env values and every value the session
masks as the marker): no byte of a key is a function of a secret, keyed or
not (C17). Calls that differ only inside masked values get keys of their
own all the same, numbered in the order they came:

- a client's retry of a call whose result it never got (the call was
  cancelled, timed out, or is still running), or whose result was
  ``uncertain`` or ``approval_required``, gets the same key, so it joins or
  reconciles that call and never launches a second time;
- the same tool and arguments called again after a result was returned get
  a new key and run anew (polling a command works);
- different arguments never share a key.

Limits of the fallback: two identical calls of one session in flight at
once are one call (the second sees ``deduplicated: true``); a retry over a
new MCP session (a client that reconnected without resuming its session) is
a new call; the sessionless protocol (MCP 2026-07-28) has no session to
scope by, so its key-less requests share one fallback scope per server, as
different clients on it may (they cannot be told apart: send
``sandrail/operation_key``); a result lost after the server
returned it (the transport dropped it) is not seen, so a retry then runs
anew (over streamable HTTP, :func:`recent_events` lets a client resume its
stream and get that result instead); and the generations live in this
server process (a new process starts
a new epoch, so nothing is deduplicated across restarts). Clients that need
more send ``sandrail/operation_key``.

A client cancelling a call (``notifications/cancelled``, a timeout) aborts it
as a :class:`~sandrail.CancelToken` would: nothing sent yet means nothing
runs; otherwise the outcome is recorded and the next call with the same key
reconciles it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

from sandrail import ErrorCode, Profile, ToolResult, Toolset, __version__, canonical_json
from sandrail.adapters import _mcp_approval as approval
from sandrail.adapters.kit import Adapter, ModelCall, check_timeout, require
from sandrail.core import CanonicalJSONError, shown_arguments

__all__ = ["OPERATION_KEY_META", "minimum_output_bytes", "recent_events", "server"]

OPERATION_KEY_META: Final = "sandrail/operation_key"
"""Where a client puts a call's operation key: ``params._meta["sandrail/operation_key"]``."""

ECHOED_KEY_BYTES: Final = 1024
"""The longest client-sent operation key ``_meta`` echoes back (UTF-8 bytes)."""

_SESSIONS_KEPT: Final = 4096

_NEXT: Final = {
    "uncertain": "The call may have run. Do not send it as a new call: call again with the "
    "same sandrail/operation_key in _meta (a client without keys: the same tool and "
    "arguments), or read_command_output on the task_id, to learn what happened; that never "
    "runs it twice.",
    "approval_required": "A person must approve this call first; nothing ran. Once approved, "
    "call again with the same sandrail/operation_key in _meta (a client without keys: the "
    "same tool and arguments).",
}


class _FallbackKeys:
    """Operation keys for requests that bring none (see the module doc)."""

    def __init__(self) -> None:
        self._epoch = uuid.uuid4().hex[:16]
        self._secret = secrets.token_bytes(32)
        self._generations: dict[str, int] = {}
        self._variants: dict[bytes, list[bytes]] = {}

    def key(
        self, name: str, arguments: object, masked: frozenset[str] = frozenset()
    ) -> tuple[str, str, int]:
        """The key of a call of ``name`` with ``arguments``, its digest and
        generation. The digest is of the call as its result shows it (env
        values, and the ``masked`` values the session masks, as the marker):
        a key is no function of a secret (C17). Calls that differ only
        inside masked values still get keys of their own, numbered in the
        order they came (``variant``), from a keyed digest of the whole
        call kept in memory only."""
        shown = _text(
            name,
            shown_arguments(arguments, masked) if isinstance(arguments, Mapping) else arguments,
        )
        exact = hmac.new(self._secret, _text(name, arguments), hashlib.sha256).digest()
        variants = self._variants.setdefault(shown, [])
        if exact not in variants:
            variants.append(exact)
        variant = variants.index(exact)
        digest = hmac.new(self._secret, shown + b"#%d" % variant, hashlib.sha256).hexdigest()[:32]
        generation = self._generations.get(digest, 0)
        return f"mcp:{self._epoch}:{digest}:{generation}", digest, generation

    def returned(self, digest: str, generation: int) -> None:
        """A result of this generation went back: the next identical call is new."""
        if self._generations.get(digest, 0) == generation:
            self._generations[digest] = generation + 1


def _text(name: str, arguments: object) -> bytes:
    """The canonical JSON of a call: key order and 1 versus 1.0 make no new call."""
    try:
        return canonical_json([name, arguments])
    except (CanonicalJSONError, TypeError, ValueError, RecursionError):
        return json.dumps([name, arguments], sort_keys=True, default=repr).encode()


def minimum_output_bytes(toolset: Toolset) -> int:
    """The smallest ``max_output_bytes`` a toolset served over MCP can have:
    every call under a fallback key (a client that sends no key) must be
    able to carry its full identity (C14). The number :func:`server` and
    ``sandrail mcp --max-output-bytes`` name when they refuse a budget."""
    longest, _, _ = _FallbackKeys().key("", None)
    return toolset.minimum_output_bytes(call_id="mcp-999999", operation_key=longest + "9" * 5)


def server(
    toolset: Toolset,
    *,
    name: str = "sandrail",
    profile: Profile = "full",
    instructions: str | None = None,
    progress_interval_seconds: float = 10.0,
) -> Any:
    """An ``mcp.server.lowlevel.Server`` serving ``toolset``'s tools.

    Serve it over any MCP transport (``sandrail mcp`` does stdio and
    streamable HTTP). ``profile`` picks the schemas listed (clients that turn
    them into strict tools may want ``openai-strict``); arguments come back
    in the same shape. ``instructions`` defaults to a line saying what the
    tools run on. ``progress_interval_seconds`` spaces the progress
    notifications of a waiting call (see the module doc). Raises
    ``ImportError`` naming the ``mcp`` extra when the SDK is missing,
    ``ValueError`` when the toolset's budget cannot hold the identity of a
    call under a fallback key (every call without its own key would be
    refused; the message names :func:`minimum_output_bytes`) or the interval
    is not a positive number.
    """
    lowlevel = require("mcp.server.lowlevel", "mcp")
    types = require("mcp_types", "mcp")
    shared = require("mcp.shared.exceptions", "mcp")
    state = require("mcp.server.request_state", "mcp")
    interval = check_timeout(progress_interval_seconds)
    adapter = Adapter(toolset, framework="the MCP client", profile=profile)
    sessions: weakref.WeakKeyDictionary[Any, _FallbackKeys] = weakref.WeakKeyDictionary()
    by_id: OrderedDict[str, _FallbackKeys] = OrderedDict()
    sessionless = _FallbackKeys()
    modern = frozenset(require("mcp_types.version", "mcp").MODERN_PROTOCOL_VERSIONS)
    where = toolset.sandbox_description

    def fallback_of(ctx: Any) -> _FallbackKeys:
        """The fallback keys of the request's MCP session (see the module
        doc): by its session id, else by its connection while that lives;
        the requests of the sessionless protocol share one."""
        try:
            connection = ctx.session._connection
            session_id = connection.session_id
            if isinstance(session_id, str) and session_id:
                session_id = str.__str__(session_id)
                found = by_id.get(session_id) or _FallbackKeys()
                by_id[session_id] = found
                by_id.move_to_end(session_id)
                while len(by_id) > _SESSIONS_KEPT:
                    by_id.popitem(last=False)
                return found
            if connection.protocol_version in modern:
                return sessionless
            return sessions.setdefault(connection, _FallbackKeys())
        except Exception:
            return sessionless

    needed = minimum_output_bytes(toolset)
    if toolset.max_output_bytes < needed:
        raise ValueError(
            f"max_output_bytes={toolset.max_output_bytes} is too small to serve over MCP: a "
            f"call under a fallback operation key needs at least {needed} bytes for its full "
            f"identity. Use at least {needed}."
        )
    tools = [
        types.Tool(
            name=tool,
            description=toolset.definition(tool).description,
            input_schema=typed_schema(toolset.schema(tool, profile)),
            annotations=types.ToolAnnotations(
                read_only_hint=toolset.definition(tool).read_only,
                destructive_hint=not toolset.definition(tool).read_only,
                idempotent_hint=toolset.definition(tool).read_only,
                open_world_hint=False,
            ),
        )
        for tool in toolset.names
    ]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        if params.name not in toolset.names:
            # The protocol's answer for a tool that does not exist.
            raise shared.MCPError(
                code=types.INVALID_PARAMS, message=f"Unknown tool: {str(params.name)[:200]}"
            )
        meta: Mapping[str, Any] = params.meta or {}
        arguments = params.arguments if params.arguments is not None else {}
        derived: tuple[str, int] | None = None
        if OPERATION_KEY_META in meta:
            sent = meta[OPERATION_KEY_META]
            if not isinstance(sent, str) or not sent.strip():
                # A key the client meant to send but malformed: never the
                # fallback in its place (its retry would launch again).
                return _result(types, _bad_key(adapter, sent), None)
            key = str.__str__(sent)
        else:
            fallback = fallback_of(ctx)
            # One call as the toolset matches a model's exact repeat (key
            # order, 1.0 for 1, a default spelled out make no new call).
            same = toolset.one_call(params.name, arguments, profile)
            key, digest, generation = fallback.key(
                params.name, same or arguments, toolset.masked_values
            )
            derived = (digest, generation)
        call = adapter.call_of(
            params.name, arguments, call_id=f"mcp-{ctx.request_id}", operation_key=key
        )
        if not isinstance(call, ModelCall):  # arguments that cannot be read: nothing ran
            return _result(types, call, key if derived is not None else _echoed(key))
        asked = _answered(params, key)
        if asked == "reject":
            result = adapter.reject(call)
        else:
            ticking = _progress(ctx, interval)
            try:
                result = await adapter.run(call, approved=asked == "approve")
                if result.needs_approval and asked is None and approval.can_ask(ctx):
                    question = adapter.toolset.masked(
                        approval.question(
                            call.name, call.arguments, where, result.content.get("interaction_id")
                        )
                    )
                    if ctx.session.protocol_version in modern:
                        return _input_required(types, question, key)
                    answer = await _elicit(ctx, question)
                    if answer == "approve":
                        result = await adapter.run(call, approved=True)
                    elif answer == "reject":
                        result = adapter.reject(call)
            finally:
                if ticking is not None:
                    ticking.cancel()
        if derived is not None and result.status in ("ok", "error"):
            # Settled and returned: the next identical call is a new one. An
            # uncertain or approval-pending call keeps its key, so calling
            # again reconciles it instead of running it twice.
            fallback.returned(*derived)
        return _result(types, result, key if derived is not None else _echoed(key))

    app = lowlevel.Server(
        name,
        version=__version__,
        instructions=instructions if instructions is not None else _instructions(where),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    # Seals an approval question's requestState and binds it to the call it
    # asks about (2026-07-28 connections), as MCPServer does.
    app.middleware.append(
        state.RequestStateBoundary(state.RequestStateSecurity.ephemeral(), default_audience=name)
    )
    return app


def typed_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a top-level ``type`` on every property that has none:
    the union of its ``anyOf`` branches' types (``["integer", "null"]`` for a
    nullable integer). It admits exactly what ``schema`` admits (``anyOf``
    already limits values to those types); clients that read only ``type``
    then send ``5``, never ``"5"``. Changes ``schema`` in place and returns it."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        branches = node.get("anyOf")
        if "type" not in node and isinstance(branches, list):
            kinds = [branch.get("type") for branch in branches if isinstance(branch, dict)]
            if kinds and all(isinstance(kind, str) for kind in kinds):
                node["type"] = list(dict.fromkeys(kinds))
        stack.extend(node.get("properties", {}).values())
        stack.extend(branches if isinstance(branches, list) else ())
        stack.append(node.get("items"))
    return schema


def _instructions(where: str) -> str:
    return (
        f"sandrail: shell commands and code snippets run in {where}. A retried call never "
        "runs twice; an uncertain result says how to learn what happened."
    )


def _echoed(key: str) -> str | None:
    """A client's own key, echoed only when short enough (C12)."""
    return key if len(key.encode("utf-8", "surrogatepass")) <= ECHOED_KEY_BYTES else None


def _answered(params: Any, key: str) -> approval.Answer | None:
    """A 2026-07-28 retry's answer to this server's approval question about
    this very call (its requestState names the key; the SDK's boundary has
    checked it was sealed here, for this tool and these arguments), else
    ``None``: no answer, nobody was asked."""
    state = getattr(params, "request_state", None)
    if state != approval.APPROVAL_STATE + key:
        return None
    responses = getattr(params, "input_responses", None) or {}
    return approval.answer_of(responses.get(approval.APPROVAL_INPUT))


def _input_required(types: Any, question: str, key: str) -> Any:
    """The approval question as a 2026-07-28 ``InputRequiredResult``."""
    asked = types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=question, requested_schema=approval.schema())
    )
    return types.InputRequiredResult(
        input_requests={approval.APPROVAL_INPUT: asked},
        request_state=approval.APPROVAL_STATE + key,
    )


async def _elicit(ctx: Any, question: str) -> approval.Answer:
    """Ask over the connection's back channel (handshake era); a client
    that cannot take the request, or fails it, decides nothing."""
    try:
        if not ctx.session.can_send_request:
            return "undecided"
        answer = await ctx.session.elicit_form(
            question, approval.schema(), related_request_id=ctx.request_id
        )
    except Exception:
        return "undecided"
    return approval.answer_of(answer)


def _progress(ctx: Any, interval: float | None) -> Any:
    """A task sending progress every ``interval`` seconds while the call
    waits. The SDK sends it only when the request asked for progress (a
    progress token, or an in-memory client's callback) and drops it
    otherwise, so every call gets one: a sleeping task, cancelled when the
    call ends."""
    if interval is None:
        return None

    async def tick() -> None:
        ticks = 0
        while True:
            await asyncio.sleep(interval)
            ticks += 1
            with contextlib.suppress(Exception):
                await ctx.session.report_progress(
                    ticks, None, f"still running after {ticks * interval:g} s"
                )

    return asyncio.ensure_future(tick())


def recent_events(limit: int = 10_000) -> Any:
    """An in-memory ``EventStore`` for streamable HTTP keeping the last
    ``limit`` events, so a client whose connection dropped can resume its
    stream (``Last-Event-ID``) and still receive a result the server sent:
    a lost result is then not a reason to call again. ``sandrail mcp
    --transport http`` uses one."""
    streamable = require("mcp.server.streamable_http", "mcp")

    class RecentEvents(streamable.EventStore):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            self._events: OrderedDict[str, tuple[str, Any]] = OrderedDict()

        async def store_event(self, stream_id: str, message: Any) -> str:
            event_id = uuid.uuid4().hex
            self._events[event_id] = (stream_id, message)
            while len(self._events) > limit:
                self._events.popitem(last=False)
            return event_id

        async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
            if last_event_id not in self._events:
                return None
            stream_id = self._events[last_event_id][0]
            later = False
            for event_id, (stream, message) in list(self._events.items()):
                if later and stream == stream_id and message is not None:
                    await send_callback(streamable.EventMessage(message, event_id))
                later = later or event_id == last_event_id
            return stream_id

    return RecentEvents()


def _bad_key(adapter: Adapter, sent: object) -> ToolResult:
    kind = "a blank string" if isinstance(sent, str) else f"a {type(sent).__name__}"
    return adapter.refusal(
        ErrorCode.OPERATION_KEY_REQUIRED,
        f'_meta["{OPERATION_KEY_META}"] must be a non-blank string, got {kind}; nothing ran. '
        "Send the call's key as a string, or leave the field out to use the server's "
        "fallback key.",
    )


def _result(types: Any, result: ToolResult, key: str | None) -> Any:
    meta: dict[str, Any] = {"sandrail/status": result.status}
    if key is not None:
        meta[OPERATION_KEY_META] = key
    if result.status in _NEXT:
        meta["sandrail/next"] = _NEXT[result.status]
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=result.to_json())],
        is_error=result.is_error,
        _meta=meta,
    )
