"""Google ADK tools for a :class:`~sandrail.Toolset`.

    agent = LlmAgent(name="ops", model=model, tools=sandrail.adapters.google_adk.tools(toolset))

Each tool is an ADK ``BaseTool`` whose declaration carries the toolset's
schema in ``profile`` (``openai-strict`` by default: closed objects, every
property required and nullable, ``env`` as a ``{name, value}`` list) as
``parameters_json_schema``; the model's arguments reach sandrail as the model
wrote them. The tool's response is the result's content (a plain JSON
object: ADK sends a function response as an object), whose canonical JSON is
exactly ``result.to_json()``, within the budget (C12).

Operation keys: ``f"adk:{session_id}:{invocation_id}:{event_id}:{function_call_id}"``,
where the invocation and the event are those of the model event that made
the function call (the session's latest event holding a call with that id;
for a call run on a confirmation, the latest before the request that was
answered, so a later turn that reuses the id does not take the answer),
so a call ADK runs again in a later invocation (after a confirmation, the
answer arrives as a new message) keeps its key, and a new model turn is a
new call even when a scripted model reuses call ids, within one invocation
too (each model turn is an event of its own, with its own id; real models'
calls have ids of their own anyway: ADK gives a call the model left
without one an ``adk-`` id of its own). A tool run outside a session with
that event (called by hand) is keyed by the running invocation alone. An
exact repeat of a call left unsettled
(``uncertain``, or never answered) runs under that call's key and
reconciles it (see :class:`~sandrail.Toolset`), unless both are calls of
one model response: that event (its invocation and event ids, which the
confirmation round trip and a resume keep) is the call's ``turn``, so two
identical calls of one response are two calls, each its own confirmation
and decision (the running invocation alone, spanning several model calls,
names no turn).

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
from typing import Any, Final

from sandrail import Profile, ToolResult, Toolset
from sandrail.adapters._glue import approval_request
from sandrail.adapters.kit import Adapter, ModelCall, require, run_id_of

__all__ = ["tools"]


def tools(
    toolset: Toolset, *, profile: Profile = "openai-strict", timeout_seconds: float | None = None
) -> list[Any]:
    """One ADK ``BaseTool`` per tool of ``toolset`` (see the module doc).

    Raises ``ImportError`` naming the ``google-adk`` extra when ADK is
    missing, ``ValueError`` for an unknown ``profile`` or a
    ``timeout_seconds`` that is not a positive number."""
    require("google.adk", "google-adk")
    adapter = Adapter(toolset, framework="ADK", profile=profile, timeout_seconds=timeout_seconds)
    cls = _tool_class()
    return [cls(adapter, name, schema) for name, schema in adapter.schemas().items()]


def _origin(tool_context: Any, call_id: str) -> tuple[object, ...]:
    """The identity parts of the model turn that made the function call
    ``call_id``: the invocation id and the event id of its event
    (:func:`_made_in`); else the running invocation's id alone."""
    event = _made_in(_events(tool_context), call_id, confirmed=_confirmed(tool_context))
    if event is not None:
        origin = getattr(event, "invocation_id", None)
        made = getattr(event, "id", None)
        if _named(origin) and _named(made):
            return origin, made
    return (getattr(tool_context, "invocation_id", None),)


def _made_in(events: list[Any], call_id: object, *, confirmed: bool) -> Any:
    """The model event that made the function call ``call_id``: the
    session's latest event holding a call with that id. A call run on a
    confirmation is the one that confirmation asked about: the latest such
    event before the request the client answered, so a later model turn that
    reuses the id (a scripted model does) does not take its answer."""
    if confirmed:
        asked = _answered_request(events, call_id)
        if asked is not None:
            events = events[: asked[0]]
    for event in reversed(events):
        if any(getattr(call, "id", None) == call_id for call in _calls(event)):
            return event
    return None


def _events(tool_context: Any) -> list[Any]:
    return list(getattr(getattr(tool_context, "session", None), "events", None) or ())


def _confirmed(tool_context: Any) -> bool:
    return getattr(tool_context, "tool_confirmation", None) is not None


def _calls(event: Any) -> list[Any]:
    return list(event.get_function_calls()) if hasattr(event, "get_function_calls") else []


_CONFIRMATION: Final = "adk_request_confirmation"


def _in_place(tool_context: Any, call: ModelCall) -> bool:
    """Whether the confirmation ADK hands this run was given to ``call``'s
    own question: the confirmation request the client answered names this
    call, holds the question this adapter asked about it (its operation
    key), and stands among the requests asked with it in the order of the
    model's calls. An edit of the stored session that moved the question or
    the call of a request (two requests' calls swapped) hands the answer to
    another call: not in place."""
    events = _events(tool_context)
    asked = _answered_request(events, call.call_id)
    if asked is None:
        return False
    place, request, requests = asked
    question = _field(_field(request.args, "toolConfirmation"), "payload")
    return (
        _field(question, "operation_key") == call.operation_key
        and _field(question, "tool_call_id") == call.call_id
        and _in_model_order(events[:place], [_original_id(r) for r in requests], call)
    )


def _answered_request(events: list[Any], call_id: object) -> tuple[int, Any, list[Any]] | None:
    """The confirmation request the client's latest confirmation answered
    for the call ``call_id``: the index of its event, the request, and the
    requests asked with it; ``None`` when there is none."""
    answered: set[object] = set()
    for event in reversed(events):
        answers = event.get_function_responses() if hasattr(event, "get_function_responses") else ()
        answered = {a.id for a in answers if getattr(a, "name", None) == _CONFIRMATION}
        if answered:
            break
    for place in range(len(events) - 1, -1, -1):
        requests = [r for r in _calls(events[place]) if getattr(r, "name", None) == _CONFIRMATION]
        for request in requests:
            if request.id in answered and _original_id(request) == call_id:
                return place, request, requests
    return None


def _in_model_order(events: list[Any], asked: list[object], call: ModelCall) -> bool:
    """Whether the calls ``asked`` about in one confirmation event stand in
    the order the model made them (the event that made ``call``, among
    ``events``: those before that confirmation event)."""
    event = _made_in(events, call.call_id, confirmed=False)
    if event is None:
        return False
    made = [c.id for c in _calls(event)]
    places = [made.index(one) for one in asked if one in made]
    return places == sorted(places)


def _original_id(request: Any) -> object:
    return _field(_field(getattr(request, "args", None), "originalFunctionCall"), "id")


def _field(value: object, name: str) -> object:
    return value.get(name) if isinstance(value, dict) else None


def _named(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


@functools.cache
def _tool_class() -> type[Any]:
    base = require("google.adk.tools.base_tool", "google-adk")
    genai_types = require("google.genai.types", "google-adk")

    class SandrailTool(base.BaseTool):  # type: ignore[misc, name-defined]
        """One sandrail tool as an ADK tool (see the module doc)."""

        def __init__(self, adapter: Adapter, name: str, schema: dict[str, Any]) -> None:
            super().__init__(name=name, description=adapter.toolset.definition(name).description)
            self._adapter = adapter
            self._schema = schema

        def _get_declaration(self) -> Any:
            return genai_types.FunctionDeclaration(
                name=self.name,
                description=self.description,
                parameters_json_schema=self._schema,
            )

        def _call(self, args: Any, tool_context: Any) -> ModelCall | ToolResult:
            call_id = getattr(tool_context, "function_call_id", None)
            session = getattr(getattr(tool_context, "session", None), "id", None)
            origin = _origin(tool_context, call_id) if isinstance(call_id, str) else (None,)
            run_id = run_id_of("adk", session, *origin)
            return self._adapter.call_of(
                self.name,
                args,
                call_id=call_id,
                run_id=run_id,
                # The model event that made the call (its invocation and
                # event ids, in the run id): the model response, the same
                # across the confirmation round trip and a resume. The
                # running invocation alone spans several model calls.
                turn=run_id if len(origin) == 2 else None,
            )

        async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
            adapter = self._adapter
            call = self._call(args, tool_context)
            if isinstance(call, ToolResult):
                return dict(call.content)
            shown = adapter.asked(call)
            result = await adapter.run(call)
            if result.needs_approval:
                confirmation = getattr(tool_context, "tool_confirmation", None)
                if confirmation is None:
                    tool_context.request_confirmation(
                        hint=f"sandrail asks a person to approve {self.name} (call "
                        f'{call.call_id}): answer {{"confirmed": true}} to run it once, or '
                        "false to run nothing.",
                        payload=approval_request(adapter.toolset, result, call),
                    )
                    # The pause is no result for the model to answer (as ADK's
                    # own confirmation gate does).
                    tool_context.actions.skip_summarization = True
                elif not shown or not _in_place(tool_context, call):
                    # A confirmation of a call nobody was asked about before
                    # this run, or one given to another call's question (the
                    # session was edited after the question). Nothing runs.
                    result = adapter.unasked()
                elif confirmation.confirmed is True:
                    result = await adapter.run(call, approved=True)
                else:
                    result = adapter.reject(call)
            return dict(result.content)

    return SandrailTool
