"""Google ADK tools for a :class:`~sandrail.Toolset`.

    agent = LlmAgent(name="ops", model=model, tools=sandrail.adapters.google_adk.tools(toolset))

Each tool is an ADK ``BaseTool`` whose declaration carries the toolset's
schema in ``profile`` (``openai-strict`` by default: closed objects, every
property required and nullable, ``env`` as a ``{name, value}`` list) as
``parameters_json_schema``; the model's arguments reach sandrail as the model
wrote them. The tool's response is the result's content (a plain JSON
object: ADK sends a function response as an object), whose canonical JSON is
exactly ``result.to_json()``, within the budget (C12).

Operation keys: ``f"adk:{session_id}:{invocation_id}:{function_call_id}"``,
where the invocation is the one whose model event made the function call
(found in the session's events by the call's id), so a call ADK runs again
in a later invocation (after a confirmation, the answer arrives as a new
message) keeps its key, and a new model turn is a new call even when a
scripted model reuses call ids. An exact repeat of a call left unsettled
(``uncertain``, or never answered) runs under that call's key and
reconciles it (see :class:`~sandrail.Toolset`).

Approval through ADK's tool confirmation: when the harness's policy answers
``ApprovalRequired``, the tool calls ``tool_context.request_confirmation()``
(the hint names the call; the payload is the question, env values hidden)
and answers ``approval_required`` (nothing ran). ADK asks the client; the
client answers with a ``FunctionResponse`` named ``adk_request_confirmation``
holding ``{"confirmed": true}`` or ``false``, and ADK calls the tool again:
confirmed, it runs that very call once under its key (answering again, or
from another process on the same session store, reconciles, never launches
anew: C2); not confirmed, it runs nothing and the model reads
``approval_rejected`` (or, when the key already launched, ``uncertain``
with the task's locator). The tools leave ``check_require_confirmation`` at
ADK's default: ADK's own gate would ask with its own hint and answer a
rejection with its own text. ``Deny`` never asks.

Timeouts: ``timeout_seconds`` is each call's deadline, enforced here.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sandrail import ApprovalRequired, Profile, ToolResult, Toolset
from sandrail.adapters import require
from sandrail.adapters._glue import approval_request, check_timeout, no_key

__all__ = ["tools"]


def tools(
    toolset: Toolset, *, profile: Profile = "openai-strict", timeout_seconds: float | None = None
) -> list[Any]:
    """One ADK ``BaseTool`` per tool of ``toolset`` (see the module doc).

    Raises ``ImportError`` naming the ``google-adk`` extra when ADK is
    missing, ``ValueError`` for an unknown ``profile`` or a
    ``timeout_seconds`` that is not a positive number."""
    require("google.adk", "google-adk")
    check_timeout(timeout_seconds)
    schemas = {name: toolset.schema(name, profile) for name in toolset.names}
    cls = _tool_class()
    return [cls(toolset, name, schemas[name], profile, timeout_seconds) for name in toolset.names]


def _origin(tool_context: Any, call_id: str) -> str | None:
    """The invocation id of the session event holding the function call
    ``call_id`` (the model turn that made it), else the running one."""
    session = getattr(tool_context, "session", None)
    for event in reversed(getattr(session, "events", None) or ()):
        calls = event.get_function_calls() if hasattr(event, "get_function_calls") else ()
        if any(getattr(call, "id", None) == call_id for call in calls):
            origin = getattr(event, "invocation_id", None)
            if isinstance(origin, str) and origin.strip():
                return origin
    running = getattr(tool_context, "invocation_id", None)
    return running if isinstance(running, str) and running.strip() else None


@functools.cache
def _tool_class() -> type[Any]:
    base = require("google.adk.tools.base_tool", "google-adk")
    genai_types = require("google.genai.types", "google-adk")

    class SandrailTool(base.BaseTool):  # type: ignore[misc, name-defined]
        """One sandrail tool as an ADK tool (see the module doc)."""

        def __init__(
            self,
            toolset: Toolset,
            name: str,
            schema: dict[str, Any],
            profile: Profile,
            timeout_seconds: float | None,
        ) -> None:
            super().__init__(name=name, description=toolset.definition(name).description)
            self._toolset = toolset
            self._schema = schema
            self._profile: Profile = profile
            self._timeout_seconds = timeout_seconds

        def _get_declaration(self) -> Any:
            return genai_types.FunctionDeclaration(
                name=self.name,
                description=self.description,
                parameters_json_schema=self._schema,
            )

        def _identity(self, tool_context: Any) -> tuple[str, str, str] | ToolResult:
            call_id = getattr(tool_context, "function_call_id", None)
            if not isinstance(call_id, str) or not call_id.strip():
                return no_key(self._toolset, "ADK gave this tool call no function call id")
            origin = _origin(tool_context, call_id)
            session = getattr(getattr(tool_context, "session", None), "id", None)
            if origin is None or not isinstance(session, str):
                return no_key(self._toolset, "ADK gave this tool call no invocation or session")
            run = f"adk:{session}:{origin}"
            return call_id, run, self._toolset.operation_key(call_id, run_id=run)

        async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
            identity = self._identity(tool_context)
            if isinstance(identity, ToolResult):
                return dict(identity.content)
            call_id, run, key = identity
            settings: dict[str, Any] = {
                "call_id": call_id,
                "operation_key": key,
                "profile": self._profile,
                "timeout_seconds": self._timeout_seconds,
                "reconcile_repeats": True,
                "run_id": run,
            }
            result = await self._toolset.call(self.name, args, **settings)
            if result.needs_approval:
                confirmation = getattr(tool_context, "tool_confirmation", None)
                if confirmation is None:
                    self._ask(tool_context, result, args, call_id, key)
                    # The pause is no result for the model to answer (as ADK's
                    # own confirmation gate does).
                    tool_context.actions.skip_summarization = True
                elif confirmation.confirmed is True:
                    result = await self._toolset.call(self.name, args, approved=True, **settings)
                else:
                    result = self._toolset.rejection(
                        None,
                        name=self.name,
                        call_id=call_id,
                        operation_key=key,
                        arguments=args,
                        profile=self._profile,
                    )
            return dict(result.content)

        def _ask(
            self, tool_context: Any, result: ToolResult, args: Any, call_id: str, key: str
        ) -> None:
            interaction = result.content.get("interaction_id")
            question = approval_request(
                self._toolset,
                self.name,
                args if isinstance(args, Mapping) else {},
                call_id=call_id,
                operation_key=key,
                decision=ApprovalRequired(
                    interaction_id=interaction if isinstance(interaction, str) else ""
                ),
            )
            tool_context.request_confirmation(
                hint=f"sandrail asks a person to approve {self.name} (call {call_id}): "
                'answer {"confirmed": true} to run it once, or false to run nothing.',
                payload=question,
            )

    return SandrailTool
