"""LangChain's ``HumanInTheLoopMiddleware`` with sandrail's rule that the first
decision about a call stands: what :func:`sandrail.adapters.langchain.human_in_the_loop`
and :func:`sandrail.adapters.deepagents.human_in_the_loop` build.

The middleware is LangChain's own gate: it asks a person about a tool call
and, once answered, runs the call or answers it itself. LangGraph saves the
question in the checkpoint, so one saved question can be answered twice (on
a copy of the checkpoint taken before the first answer, in another process):
rejected on one copy and approved on the other, the plain middleware runs the
call. This subclass keeps each decision about a sandrail call in the
toolset's decision store (its ownership record: across processes when the
toolset has a durable ``record=``), under the key the call runs under, and
lets only the first stand:

- an approval (or an edit) after a rejection runs nothing: the call is
  answered as the parent answers a rejection (a ``ToolMessage`` for it, so
  the agent does not run it) and the model reads ``approval_rejected``;
- an approval of another call (an edit, or the original after an edit)
  after an approval runs nothing either: ``approval_mismatch``;
- a rejection (or a ``respond``) after an approval keeps the middleware's
  answer, unless the approval already launched the call: then the model
  reads ``uncertain`` with the task's locator, never "not executed" (C5).

Strategy: the decisions are read back from what the parent class decided,
through its public hooks only. In ``batched`` mode its ``after_model``
returns the model message with the calls to run (approved, edited, or not
gated) and a ``ToolMessage`` for each call it answered itself; in
``per_call`` mode its ``wrap_tool_call`` calls the handler for a call to run
and returns its own ``ToolMessage`` otherwise. Which calls were gated is its
``interrupt_on`` (a ``when`` predicate asked as the parent asks it).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from sandrail import ToolResult
from sandrail.adapters._langgraph import place_of
from sandrail.adapters.kit import Adapter, ModelCall, require

__all__ = ["Governed", "middleware"]

Governed = Callable[[Mapping[str, Any], object, object], tuple[Adapter, ModelCall] | None]
"""What a sandrail call is, for the middleware: given a tool call (its
``name``, ``args`` and ``id``), the graph state and the ``RunnableConfig``,
the adapter it runs on and the :class:`~sandrail.adapters.kit.ModelCall`
it runs as, or ``None`` for a call sandrail does not run."""

_EDITED: Final = "hitl_edited_tool_calls"
"""The parent's state key for the reviewer's edits (its own name)."""


def middleware(
    governed: Governed, interrupt_on: Mapping[str, Any], options: Mapping[str, Any]
) -> Any:
    """A ``HumanInTheLoopMiddleware`` (``interrupt_on`` and ``options`` as
    LangChain takes them) whose first decision about each call ``governed``
    names stands (see the module doc)."""
    return _middleware_class()(governed, dict(interrupt_on), **options)


@functools.cache
def _middleware_class() -> type[Any]:
    hitl = require("langchain.agents.middleware", "langchain")
    messages = require("langchain_core.messages", "langchain")
    config_module = require("langgraph.config", "langchain")
    errors = require("langgraph.errors", "langchain")

    def config_now() -> object:
        try:
            return config_module.get_config()
        except RuntimeError:
            return None

    def told(call: Mapping[str, Any], result: ToolResult) -> Any:
        return messages.ToolMessage(
            content=result.to_json(),
            name=call.get("name"),
            tool_call_id=call.get("id") or "",
            status="error" if result.is_error else "success",
        )

    class SandrailHumanInTheLoopMiddleware(hitl.HumanInTheLoopMiddleware):  # type: ignore[misc, name-defined]
        """LangChain's human-in-the-loop middleware whose first decision about
        a sandrail call stands (see the module doc)."""

        def __init__(self, governed: Governed, interrupt_on: Any, **options: Any) -> None:
            super().__init__(interrupt_on, **options)
            self._governed = governed

        # -- batched: the decisions come back from after_model ----------------

        def after_model(self, state: Any, runtime: Any) -> Any:
            if self.interrupt_mode == "per_call":
                return super().after_model(state, runtime)
            last = _last_model_message(messages, state)
            asked = [dict(call) for call in last.tool_calls] if last is not None else []
            gated = {call.get("id") for call in asked if self._gated(call, state, runtime)}
            shown = self._shown([call for call in asked if call.get("id") in gated], state)
            try:
                update = super().after_model(state, runtime)
            except errors.GraphInterrupt:
                self._asking([call for call in asked if call.get("id") in gated], state)
                raise
            if not isinstance(update, dict) or not update.get("messages"):
                return update
            return self._standing(update, {c.get("id"): c for c in asked}, gated, state, shown)

        def _shown(self, calls: list[dict[str, Any]], state: Any) -> set[Any]:
            """The ids of ``calls`` a person was already asked about as they
            are now, in the place they stand in now (the question kept
            before this run). An answer the parent hands back for a call not
            among them was given to another question (the saved run was
            edited, or its calls reordered, after it was shown)."""
            config = config_now()
            shown = set()
            for call in calls:
                target = self._governed(call, state, config)
                if target is None:
                    continue
                adapter, model_call = target
                if adapter.asked(model_call, shown_as=place_of(config, state, call.get("id"))):
                    shown.add(call.get("id"))
            return shown

        def _asking(self, calls: list[dict[str, Any]], state: Any) -> None:
            """The parent paused to ask a person about ``calls``: keep each
            question, and the place it stands in."""
            config = config_now()
            for call in calls:
                target = self._governed(call, state, config)
                if target is not None:
                    adapter, model_call = target
                    adapter.asking(model_call, shown_as=place_of(config, state, call.get("id")))

        def _standing(
            self,
            update: dict[str, Any],
            asked: dict[Any, dict[str, Any]],
            gated: set[Any],
            state: Any,
            shown: set[Any],
        ) -> dict[str, Any]:
            config = config_now()
            model_message, *answers = update["messages"]
            answered = {getattr(answer, "tool_call_id", None) for answer in answers}
            edited = update.get(_EDITED) or {}
            refused = []
            for call in model_message.tool_calls:
                if call.get("id") not in gated or call.get("id") in answered:
                    continue
                executed = edited.get(call.get("id"))
                ran = {**call, **executed} if isinstance(executed, Mapping) else call
                verdict = self._approved(ran, state, config, call.get("id") in shown)
                if verdict is not None:
                    # Answered as the parent answers a rejection: the call
                    # stays in the model's message, and its answer is there.
                    refused.append(told(call, verdict))
            for index, answer in enumerate(answers):
                original = asked.get(getattr(answer, "tool_call_id", None))
                if original is not None and original.get("id") in gated:
                    answers[index] = self._rejected(original, answer, state, config)
            return {**update, "messages": [model_message, *answers, *refused]}

        # -- per call: the decision is taken around the handler -------------

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            if self.interrupt_mode != "per_call" or not self._gated_request(request):
                return super().wrap_tool_call(request, handler)
            seen: list[Any] = []
            refused: list[Any] = []
            shown = bool(self._shown([dict(request.tool_call)], request.state))

            def gate(to_run: Any) -> Any:
                seen.append(to_run)
                verdict = self._approved(to_run.tool_call, to_run.state, config_now(), shown)
                if verdict is None:
                    return handler(to_run)
                refused.append(told(to_run.tool_call, verdict))
                return refused[0]

            try:
                result = super().wrap_tool_call(request, gate)
            except errors.GraphInterrupt:
                if not seen:  # the parent paused to ask about this call
                    self._asking([dict(request.tool_call)], request.state)
                raise
            if refused:  # as refused, without the parent's note that an edit ran
                return refused[0]
            if seen:
                return result
            return self._rejected(request.tool_call, result, request.state, config_now())

        async def awrap_tool_call(
            self, request: Any, handler: Callable[[Any], Awaitable[Any]]
        ) -> Any:
            if self.interrupt_mode != "per_call" or not self._gated_request(request):
                return await super().awrap_tool_call(request, handler)
            seen: list[Any] = []
            refused: list[Any] = []
            shown = bool(self._shown([dict(request.tool_call)], request.state))

            async def gate(to_run: Any) -> Any:
                seen.append(to_run)
                verdict = self._approved(to_run.tool_call, to_run.state, config_now(), shown)
                if verdict is None:
                    return await handler(to_run)
                refused.append(told(to_run.tool_call, verdict))
                return refused[0]

            try:
                result = await super().awrap_tool_call(request, gate)
            except errors.GraphInterrupt:
                if not seen:  # the parent paused to ask about this call
                    self._asking([dict(request.tool_call)], request.state)
                raise
            if refused:  # as refused, without the parent's note that an edit ran
                return refused[0]
            if seen:
                return result
            return self._rejected(request.tool_call, result, request.state, config_now())

        # -- the decision store ------------------------------------------------

        def _approved(
            self, call: Mapping[str, Any], state: Any, config: object, shown: bool
        ) -> ToolResult | None:
            """``None`` when a person's approval of ``call`` (as it will run)
            stands, else what the model reads instead (nothing runs): also
            when the call the person answered about was not ``shown`` as it
            stood before this run (the answer is another question's)."""
            target = self._governed(call, state, config)
            if target is None:
                return None
            adapter, model_call = target
            if not shown:
                return adapter.unasked()
            return adapter.approve(model_call)

        def _rejected(
            self, call: Mapping[str, Any], answer: Any, state: Any, config: object
        ) -> Any:
            """The parent's answer to a call a person rejected (or answered
            for), kept as the key's rejection; replaced by what an approval
            given first already launched, when it did (C5)."""
            target = self._governed(call, state, config)
            if target is None or not isinstance(answer, messages.ToolMessage):
                return answer
            adapter, model_call = target
            result = adapter.reject(model_call)
            if result.status == "error":  # nothing ran under the key: the parent's answer stands
                return answer
            return told(call, result)

        def _gated(self, call: Mapping[str, Any], state: Any, runtime: Any) -> bool:
            """Whether the parent asked a person about ``call`` (batched)."""
            config = self.interrupt_on.get(call.get("name"))
            if config is None:
                return False
            if config.get("when") is None:
                return True
            should = getattr(self, "_should_interrupt", None)
            return bool(should(call, config, state, runtime)) if callable(should) else True

        def _gated_request(self, request: Any) -> bool:
            """Whether the parent asks a person about ``request`` (per call)."""
            config = self.interrupt_on.get(request.tool_call.get("name"))
            if config is None:
                return False
            when = config.get("when")
            return when is None or bool(when(request))

    return SandrailHumanInTheLoopMiddleware


def _last_model_message(messages: Any, state: Any) -> Any:
    """The state's last model message with tool calls, as the parent finds it."""
    found = state.get("messages") if isinstance(state, Mapping) else None
    for message in reversed(found or ()):
        if isinstance(message, messages.AIMessage):
            return message if message.tool_calls else None
    return None
