"""A pydantic-ai toolset for a :class:`~sandrail.Toolset`.

    agent = Agent(model, toolsets=[sandrail.adapters.pydantic_ai.toolset(toolset)])

Each tool carries the ``openai-strict`` profile by default (closed objects,
every property required and nullable, ``env`` as a ``{name, value}`` list):
pydantic-ai turns OpenAI's strict mode on for it, and its Anthropic strict
conversion no longer closes ``env`` to ``{}``. Arguments come back in that
shape and are converted for the port; the tool returns exactly
``result.to_json()`` (a string, so pydantic-ai sends it as it is).

It is a toolset (pydantic-ai's ``AbstractToolset``), not a list of
``Tool`` s, so that the model's arguments reach sandrail as the model wrote
them: pydantic-ai's own argument validation would answer text that is not
JSON with a retry prompt quoting that text whole (unbudgeted, env values
included), and crash the run on JSON that is not an object. Here every
argument text is taken as it is and answered by the port within the budget:
text that is not a JSON object is refused (``arguments: must be a JSON
object``) and nothing runs.

Operation keys: ``f"{run_id}:{ctx.tool_call_id}"``, where ``run_id`` is
the ``run_id`` of the model response that made the call (pydantic-ai keeps
it on every message, so it survives ``ModelMessagesTypeAdapter`` and a new
run over the same history), else the run's own ``ctx.run_id``. pydantic-ai
gives every run its own ``run_id``, so a test model that reuses call ids
across runs never makes a new run's call a retry of an old one; a resumed
run needs nothing passed to keep a deferred call's key (pydantic-ai refuses
``run_id=`` already on the history; ``conversation_id=`` correlates runs). A model's retry is a new
tool call with a new call id; an exact repeat of a call left unsettled
(``uncertain``, ``approval_required``, or never answered) runs under that
call's key and reconciles it (see :class:`~sandrail.Toolset`), unless both
are calls of one model response (its run and its tool call ids name the
call's ``turn``): two identical calls of one response are two calls, each
deferred and decided on its own.

Approval (``docs/howto/approval.md``). When the harness's policy answers
``ApprovalRequired``, the call runs nothing and raises pydantic-ai's own
``ApprovalRequired`` (metadata: ``{"interaction_id": ..., "operation_key":
...}``), so the run ends with ``DeferredToolRequests`` (give the agent
``output_type=[str, DeferredToolRequests]``). A new run with the message
history and ``DeferredToolResults(approvals={tool_call_id: True})`` runs that
very call once, under the key of the run that made it, so resuming the same
history twice (two processes sharing the toolset's record, a crash in
between) launches once (C2); a history that comes back with the call
changed is refused (``approval_mismatch``), and a call the toolset cannot
match to a question it asked is deferred to a person again
(``docs/howto/approval.md``). An
approval with ``ToolApproved(override_args=...)`` runs the arguments the
person gave (``env`` may be a mapping there; invalid ones are reported as
the person's, not the model's).
``DeferredToolResults(approvals={tool_call_id: False})`` runs nothing; pass
``rejected(toolset, requests=..., tool_call_id=...)`` (a ``ToolDenied``
whose message is sandrail's ``approval_rejected`` result, or, for a call
that already ran, its ``uncertain`` locator) to send the model a result it
can act on. A ``Deny`` from the policy never asks anyone: the model reads
``policy_denied``.

Timeouts: ``timeout_seconds`` is enforced here: when it passes, the call is
aborted as a :class:`~sandrail.CancelToken` would abort it, and the tool
returns the resulting ``canceled`` or ``uncertain`` result, with the locator
the model needs. pydantic-ai's own tool timeouts (``Agent(tool_timeout=)``,
``Tool(timeout=)``) apply to its function tools only, never to this toolset;
do not wrap it in one that adds a timeout: it would cancel the call and tell
the model only "timed out".
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, Final

from sandrail import ErrorCode, Profile, ToolResult, Toolset
from sandrail.adapters.kit import Adapter, ModelCall, parsed_arguments, require
from sandrail.core import bound_result

__all__ = ["rejected", "toolset"]

_AS_SENT: Final = "\x00sandrail/as-sent"
"""The key under which the arguments validator hands on what the model sent
when it is not a JSON object (no schema of ours admits the key, so a model
sending it is refused all the same): the tool answers it with a refusal."""


def toolset(
    toolset: Toolset,
    *,
    profile: Profile = "openai-strict",
    timeout_seconds: float | None = None,
    id: str | None = "sandrail",
) -> Any:
    """A ``pydantic_ai.toolsets.AbstractToolset`` with every tool of
    ``toolset``: ``Agent(model, toolsets=[...])``.

    ``timeout_seconds`` is each call's deadline (see the module doc); ``id``
    is the toolset's id for pydantic-ai (durable execution needs one).
    Raises ``ImportError`` naming the ``pydantic-ai`` extra when pydantic-ai
    is missing, ``ValueError`` for an unknown ``profile`` or a
    ``timeout_seconds`` that is not a positive number.
    """
    require("pydantic_ai", "pydantic-ai")  # checked on every call: the class is cached
    cls = _toolset_class()
    adapter = Adapter(
        toolset, framework="pydantic-ai", profile=profile, timeout_seconds=timeout_seconds
    )
    instance: Any = cls(adapter, id)
    return instance


class _RawArguments:
    """pydantic-ai's argument validator protocol (``SchemaValidatorProt``),
    taking arguments as the model wrote them: never fails, never quotes them.
    A JSON object passes as it is; anything else is handed on as sent, for
    the tool to refuse (:meth:`~sandrail.adapters.kit.Adapter.call_of`)."""

    def validate_json(self, input: str | bytes | bytearray, **_: Any) -> Any:
        parsed = parsed_arguments(input)
        return parsed if parsed is not None else {_AS_SENT: input}

    def validate_python(self, input: Any, **_: Any) -> Any:
        parsed = parsed_arguments(input) if isinstance(input, Mapping) else None
        return parsed if parsed is not None else {_AS_SENT: input}


_RAW: Final = _RawArguments()


@functools.cache
def _toolset_class() -> type[Any]:
    pydantic_ai = require("pydantic_ai", "pydantic-ai")
    toolsets = require("pydantic_ai.toolsets", "pydantic-ai")

    class SandrailToolset(toolsets.AbstractToolset):  # type: ignore[misc, name-defined]
        """Every tool of a :class:`~sandrail.Toolset` (see the module doc)."""

        def __init__(self, adapter: Adapter, id: str | None) -> None:
            self._adapter = adapter
            self._id = id

        @property
        def id(self) -> str | None:
            return self._id

        async def get_tools(self, ctx: Any) -> dict[str, Any]:
            toolset = self._adapter.toolset
            return {
                name: toolsets.ToolsetTool(
                    toolset=self,
                    tool_def=pydantic_ai.ToolDefinition(
                        name=name,
                        description=toolset.definition(name).description,
                        parameters_json_schema=schema,
                    ),
                    max_retries=ctx.max_retries,
                    args_validator=_RAW,
                )
                for name, schema in self._adapter.schemas().items()
            }

        async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> str:
            adapter = self._adapter
            call_id = ctx.tool_call_id
            messages = _messages(ctx, pydantic_ai.UserError)
            # The run that made the call: a deferred call resumed in a later
            # run (another process, perhaps) keeps its key.
            origin_run, turn = _origin(messages, call_id)
            run_id = origin_run or ctx.run_id
            approved = ctx.tool_call_approved is True
            arguments: object = tool_args
            overridden = False
            if set(tool_args) == {_AS_SENT}:
                arguments = tool_args[_AS_SENT]
            else:
                overridden = approved and _overridden(messages, call_id, tool_args)
                if overridden and adapter.profile != "full":
                    arguments = _env_as_list(tool_args)
            call = adapter.call_of(name, arguments, call_id=call_id, run_id=run_id, turn=turn)
            if not isinstance(call, ModelCall):
                return call.to_json()
            result = await adapter.run(call, approved=approved, edited=overridden)
            if result.needs_approval:
                # Nothing ran: hand the question to pydantic-ai's deferred
                # tools, so a person answers it (again, for an approval the
                # toolset cannot match to a question it asked: see
                # sandrail.adapters.kit.Adapter.run).
                raise pydantic_ai.ApprovalRequired(
                    metadata={
                        "interaction_id": result.content.get("interaction_id"),
                        "operation_key": result.content.get("operation_key", call.operation_key),
                    }
                )
            if overridden and result.error_type == ErrorCode.ARGUMENTS_INVALID.value:
                # The person wrote these arguments (override_args), not the model.
                content = {**result.content, "instruction": _OVERRIDE_INVALID}
                result = bound_result(
                    ToolResult(status="error", content=content), adapter.toolset.max_output_bytes
                )
            return result.to_json()

    return SandrailToolset


def rejected(
    toolset: Toolset,
    reason: str | None = None,
    *,
    requests: Any = None,
    tool_call_id: str | None = None,
) -> Any:
    """A ``pydantic_ai.ToolDenied`` for ``DeferredToolResults.approvals``
    whose message is :meth:`Toolset.rejection <sandrail.Toolset.rejection>`'s
    JSON: the model reads ``status: "error"``, ``approval_rejected``,
    ``executed: false`` and what to do instead (and ``reason``, when given).

    Given the run's ``DeferredToolRequests`` (``requests``) and the call's
    ``tool_call_id``, a call that already ran under its key (approved on one
    copy of the history, rejected on another) is answered ``uncertain`` with
    the task's locator instead, never "nothing ran" (C5). Raises
    ``ImportError`` naming the extra when pydantic-ai is missing."""
    pydantic_ai = require("pydantic_ai", "pydantic-ai")
    name, key = _deferred(requests, tool_call_id)
    if name is None or key is None:
        return pydantic_ai.ToolDenied(message=toolset.rejection(reason).to_json())
    result = toolset.rejection(reason, name=name, call_id=tool_call_id, operation_key=key)
    return pydantic_ai.ToolDenied(message=result.to_json())


def _deferred(requests: Any, tool_call_id: object) -> tuple[str | None, str | None]:
    """The tool name and operation key of ``tool_call_id`` in a run's
    ``DeferredToolRequests`` (the key this adapter put in its metadata)."""
    if not isinstance(tool_call_id, str):
        return None, None
    metadata = getattr(requests, "metadata", None)
    meta = metadata.get(tool_call_id) if isinstance(metadata, Mapping) else None
    key = meta.get("operation_key") if isinstance(meta, Mapping) else None
    for part in getattr(requests, "approvals", None) or ():
        if getattr(part, "tool_call_id", None) == tool_call_id:
            name = getattr(part, "tool_name", None)
            if isinstance(name, str) and isinstance(key, str):
                return name, key
    return None, None


_OVERRIDE_INVALID: Final = (
    "Nothing ran: the arguments the person gave when approving this call are invalid (the "
    "other fields say why). Do not repeat the call; tell the user what was wrong."
)


def _messages(ctx: Any, unavailable: type[Exception]) -> object:
    """The run's messages, or ``None`` where the run context does not carry
    them: pydantic-ai's durable run contexts (a Temporal activity's) raise
    ``unavailable`` (its ``UserError``) for them. The key's run is then the
    context's own ``run_id``, which pydantic-ai derives from the engine."""
    try:
        return ctx.messages
    except unavailable:
        return None


def _overridden(messages: object, call_id: object, tool_args: Mapping[str, Any]) -> bool:
    """Whether the arguments a call runs with are not those of its
    tool-call part: a person approved it with ``override_args``."""
    if not isinstance(messages, list):
        return False
    for message in reversed(messages):
        for part in getattr(message, "parts", ()):
            if getattr(part, "part_kind", None) == "tool-call" and part.tool_call_id == call_id:
                try:
                    return bool(part.args_as_dict() != dict(tool_args))
                except Exception:
                    return True
    return False


def _env_as_list(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` with an ``env`` given as a mapping (as a person writes
    ``override_args``) in the strict profiles' ``{name, value}`` list."""
    env = arguments.get("env")
    if not isinstance(env, Mapping):
        return dict(arguments)
    return {**arguments, "env": [{"name": k, "value": v} for k, v in env.items()]}


def _origin(messages: object, call_id: object) -> tuple[str | None, str | None]:
    """The ``run_id`` of the latest model response holding the tool call
    ``call_id`` (the run that made the call, which a deferred call resumed
    in a later run, another process perhaps, must keep as its key's run),
    and that response's turn: its run and the ids of its tool calls, in
    order, which the history keeps as they were (pydantic-ai gives a
    response no id of its own that every model fills in). ``None`` for
    either when no such response names a run."""
    if not isinstance(messages, list) or not isinstance(call_id, str):
        return None, None
    for message in reversed(messages):
        if getattr(message, "kind", None) != "response":
            continue
        calls = [
            part.tool_call_id
            for part in getattr(message, "parts", ())
            if getattr(part, "part_kind", None) == "tool-call"
        ]
        if call_id in calls:
            run = getattr(message, "run_id", None)
            if not isinstance(run, str) or not run.strip():
                return None, None
            ids = [one if isinstance(one, str) else None for one in calls]
            return run, json.dumps([run, ids])
    return None, None
