"""LangChain tools for a :class:`~sandrail.Toolset`, for ``create_agent``, LangGraph's
``ToolNode`` and any graph.

    tools = sandrail.adapters.langchain.tools(toolset)
    agent = create_agent(model, tools=tools, checkpointer=checkpointer)

Each tool is a LangChain ``BaseTool`` (sync and async) whose parameters are
the toolset's schema in ``profile`` (``openai-strict`` by default: closed
objects, every property required and nullable, ``env`` as a ``{name,
value}`` list, which every chat model LangChain binds tools to accepts). The
model's arguments reach sandrail as the model wrote them (LangChain does not
validate a JSON-schema tool's input), and the tool's ``ToolMessage`` content
is exactly ``result.to_json()``: a string, which LangChain sends as it is, so
what the model reads is within the budget (C12). Its ``status`` is
``"error"`` for every result that is not ``ok``.

Operation keys: ``langgraph:{thread_id}:message:{message id}:{tool_call_id}``,
from the thread LangGraph runs the tool in, the model message in the saved
state that made the call (``ToolNode`` gives the tool its ``ToolRuntime``)
and the model's tool call id; a tool invoked without a ``ToolNode`` has
``task:{checkpoint_ns}`` in place of the message. A node that is resumed,
or re-run after it crashed, runs its tools again from their first line;
these are the same then, so the call reconciles
with its first launch and never launches again (C2); a new turn of the
thread has a new model message, so a scripted model's reused call ids are
new calls. Replaying a thread from an earlier checkpoint re-runs that
checkpoint's tasks under their old keys: they reconcile, they do not run
again. Outside a LangGraph run (``tool.invoke(tool_call)`` by hand) there is
no such identity: pass ``run_id=`` (a string, or a function of the
``RunnableConfig`` returning one), or the call is refused
(``e2b_command_operation_key_required``) and nothing runs; so is a call
without a tool call id (``tool.invoke({"command": ...})``). An exact repeat
of a call left unsettled (``uncertain``, or never answered) runs under that
call's key and reconciles it (see :class:`~sandrail.Toolset`).

Approval (see ``docs/howto/langgraph.md``). When the harness's policy answers
``ApprovalRequired``, the tool calls LangGraph's ``interrupt()`` with the
question (the tool, its arguments with env values masked, the call's key)
and the run pauses; it needs a checkpointer. ``Command(resume={"type":
"approve"})`` runs that very call once under its key, however often and from
however many processes the same checkpoint is resumed (each with the
toolset's durable ``record=``, which keeps the question and the first
decision: see ``docs/howto/approval.md``); ``{"type": "reject", "message":
...}`` runs nothing and the model reads ``approval_rejected`` (or, when the
key already launched, ``uncertain`` with the task's locator).
``Deny`` never asks anyone. LangChain's ``HumanInTheLoopMiddleware`` works
too: a call it gates runs when approved (an edit runs the reviewer's
arguments under the call's key) and the middleware's own message answers a
rejection; let the harness's policy ``ALLOW`` such calls, or the person is
asked twice. There LangChain decides, and a rejection does not stand against
an approval given later on a copy of the checkpoint:
:func:`human_in_the_loop` is the same middleware with the first decision
standing, kept in the toolset's record.

Timeouts: ``timeout_seconds`` is each call's deadline, enforced here; when
it passes, the call is aborted as a :class:`~sandrail.CancelToken` would abort
it and the model reads the ``canceled`` or ``uncertain`` result.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Generator, Mapping
from typing import Any, Final

from sandrail import ErrorCode, Profile, ToolResult, Toolset
from sandrail.adapters._glue import approval_request
from sandrail.adapters._hitl import middleware
from sandrail.adapters._langgraph import (
    decision_schema,
    place_of,
    read_decision,
    run_of_config,
    turn_of,
)
from sandrail.adapters.kit import Adapter, ModelCall, check_run_id, require

__all__ = ["human_in_the_loop", "tools"]

RunId = str | Callable[[Any], str] | None
_Steps = Generator[tuple[ModelCall, bool], ToolResult, Any]

_CALL: Final[contextvars.ContextVar[tuple[str | None, Any] | None]] = contextvars.ContextVar(
    "sandrail_langchain_call", default=None
)
"""The tool call being run (its id and the model's arguments as given),
from ``invoke`` to ``_run``: LangChain hands ``_run`` the arguments as
keywords (where ``config`` and ``run_manager`` would shadow a model's
argument of that name) and never the call id."""


def tools(
    toolset: Toolset,
    *,
    profile: Profile = "openai-strict",
    run_id: RunId = None,
    timeout_seconds: float | None = None,
) -> list[Any]:
    """One LangChain ``BaseTool`` per tool of ``toolset`` (see the module doc).

    Raises ``ImportError`` naming the ``langchain`` extra when
    ``langchain-core`` or ``langgraph`` is missing, ``ValueError`` for an
    unknown ``profile``, a blank ``run_id`` or a ``timeout_seconds`` that is
    not a positive number, ``TypeError`` for a ``run_id`` that is neither a
    string nor a function."""
    require("langchain_core", "langchain")
    require("langgraph", "langchain")
    if not callable(run_id):
        check_run_id(run_id)
    adapter = Adapter(
        toolset, framework="LangGraph", profile=profile, timeout_seconds=timeout_seconds
    )
    cls, functions = _classes()
    made = []
    for name in toolset.names:
        run, arun = functions(_Binding(adapter, name, run_id))
        made.append(
            cls(
                name=name,
                description=toolset.definition(name).description,
                args_schema=toolset.schema(name, profile),
                func=run,
                coroutine=arun,
            )
        )
    return made


def human_in_the_loop(
    toolset: Toolset,
    interrupt_on: Mapping[str, Any],
    *,
    profile: Profile = "openai-strict",
    run_id: RunId = None,
    **options: Any,
) -> Any:
    """LangChain's ``HumanInTheLoopMiddleware`` (``interrupt_on`` and the
    other ``options``, ``interrupt_mode`` included, as LangChain takes them)
    for the tools :func:`tools` made of ``toolset``, whose first decision
    about a call stands: approved (or edited) on a copy of the checkpoint
    after it was rejected on another, the call runs nothing and the model
    reads the rejection; rejected after an approval launched it, the model
    reads ``uncertain`` with the task's locator, never "not executed".
    Each decision is kept in the toolset's ownership record under the call's
    operation key, so across processes it needs the toolset's durable
    ``record=`` (``docs/howto/langgraph.md``). Give the same ``profile`` and
    ``run_id`` as to :func:`tools`. Calls of tools that are not the
    toolset's are gated as by LangChain's own middleware.

    Raises ``ImportError`` naming the ``langchain`` extra when LangChain is
    missing, ``ValueError`` and ``TypeError`` as :func:`tools` does, and
    whatever LangChain's middleware raises for its own settings."""
    require("langchain.agents.middleware", "langchain")
    if not callable(run_id):
        check_run_id(run_id)
    adapter = Adapter(toolset, framework="LangGraph", profile=profile)

    def governed(call: Mapping[str, Any], state: object, config: object) -> Any:
        name, call_id = call.get("name"), call.get("id")
        if name not in toolset.names or not isinstance(call_id, str) or not call_id.strip():
            return None
        run = _Binding(adapter, name, run_id).run_of(config, None, call_id, state=state)
        if isinstance(run, ToolResult):
            return None
        turn = turn_of(config, state, call_id)
        made = adapter.call_of(name, call.get("args"), call_id=call_id, run_id=run, turn=turn)
        return (adapter, made) if isinstance(made, ModelCall) else None

    return middleware(governed, interrupt_on, options)


class _Binding:
    """What one tool runs: the adapter (the toolset and its settings), the
    tool's name and the configured ``run_id``."""

    def __init__(self, adapter: Adapter, name: str, run_id: RunId) -> None:
        self.adapter = adapter
        self.name = name
        self.run_id = run_id

    def run_of(
        self, config: object, runtime: object, call_id: str, *, state: object = None
    ) -> str | ToolResult:
        """The run part of the call's key, or the refusal to send (``state``:
        the graph state, where there is no ``ToolRuntime``)."""
        if self.run_id is None:
            run = run_of_config(config, runtime, call_id, state=state)
            if run is None:
                return self.no_key(
                    "it runs outside a LangGraph task and the adapter was given no run_id"
                )
            return run
        if isinstance(self.run_id, str):
            return self.run_id
        try:
            value = self.run_id(config)
        except Exception as exc:
            return self.no_key(f"the run_id function raised {type(exc).__name__}")
        if not isinstance(value, str) or not value.strip():
            return self.no_key("the run_id function returned no non-blank string")
        return value

    def no_key(self, why: str) -> ToolResult:
        return self.adapter.refusal(
            ErrorCode.OPERATION_KEY_REQUIRED,
            f"No safe operation key for this call ({why}); nothing ran.",
        )

    def prepared(self, config: object, runtime: object) -> ModelCall | ToolResult:
        """The call to run, or the refusal to send (nothing ran)."""
        call = _CALL.get()
        call_id, arguments = call if call is not None else (None, None)
        if not isinstance(call_id, str) or not call_id.strip():
            return self.no_key(
                "the tool was not invoked with a tool call, so it has no tool call id"
            )
        run = self.run_of(config, runtime, call_id)
        if isinstance(run, ToolResult):
            return run
        turn = turn_of(config, getattr(runtime, "state", None), call_id)
        return self.adapter.call_of(self.name, arguments, call_id=call_id, run_id=run, turn=turn)

    def question(self, result: ToolResult, call: ModelCall) -> dict[str, Any] | None:
        """The interrupt value when ``result`` asks for a person, else ``None``."""
        if not result.needs_approval:
            return None
        return approval_request(self.adapter.toolset, result, call)


@functools.cache
def _classes() -> tuple[type[Any], Any]:
    tools_module = require("langchain_core.tools", "langchain")
    messages = require("langchain_core.messages", "langchain")
    types = require("langgraph.types", "langchain")
    errors = require("langgraph.errors", "langchain")
    config_module = require("langchain_core.runnables", "langchain")
    prebuilt = require("langgraph.prebuilt", "langchain")
    RunnableConfig = config_module.RunnableConfig

    def message(binding: _Binding, call_id: str | None, result: ToolResult) -> Any:
        return messages.ToolMessage(
            content=result.to_json(),
            tool_call_id=call_id or "",
            name=binding.name,
            status="error" if result.is_error else "success",
        )

    def entered(tool_input: Any) -> tuple[str | None, Any]:
        if isinstance(tool_input, Mapping) and tool_input.get("type") == "tool_call":
            call_id = tool_input.get("id")
            arguments = tool_input.get("args")
            if isinstance(arguments, Mapping) and isinstance(
                arguments.get("runtime"), prebuilt.ToolRuntime
            ):
                # LangGraph's ToolNode put it there (see _Binding.run_of).
                arguments = {k: v for k, v in arguments.items() if k != "runtime"}
            return (call_id if isinstance(call_id, str) else None), arguments
        return None, tool_input

    class SandrailTool(tools_module.StructuredTool):  # type: ignore[misc, name-defined]
        """One sandrail tool as a LangChain tool (see the module doc)."""

        def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            token = _CALL.set(entered(input))
            try:
                return super().invoke(input, config, **kwargs)
            finally:
                _CALL.reset(token)

        async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            token = _CALL.set(entered(input))
            try:
                return await super().ainvoke(input, config, **kwargs)
            finally:
                _CALL.reset(token)

    def steps(binding: _Binding, config: Any, runtime: Any) -> _Steps:
        """The call as a program: it yields each run of the call to make
        (the call, and whether a person approved it) and receives its
        result (one program, a sync and an async driver)."""
        call = binding.prepared(config, runtime)
        if isinstance(call, ToolResult):
            return message(binding, (_CALL.get() or (None,))[0], call)
        place = place_of(config, getattr(runtime, "state", None), call.call_id)
        shown = binding.adapter.asked(call, shown_as=place)
        result = yield call, False
        question = binding.question(result, call)
        if question is not None:
            try:
                answer = types.interrupt(question, response_schema=decision_schema())
            except errors.GraphInterrupt:
                binding.adapter.asking(call, shown_as=place)  # put to a person now
                raise
            # Reached with an answer only. Given to a question this very call
            # did not have before this run, it is another call's answer (the
            # checkpoint was edited after the person saw the question).
            approved, reason = read_decision(answer)
            if not shown:
                result = binding.adapter.unasked()
            elif approved:
                result = yield call, True
            else:
                result = binding.adapter.reject(call, reason)
        return message(binding, call.call_id, result)

    def functions(binding: _Binding) -> tuple[Callable[..., Any], Callable[..., Any]]:
        def run(*, config: Any, runtime: Any = None, **_: Any) -> Any:
            program = steps(binding, config, runtime)
            try:
                call, approved = next(program)
                while True:
                    result = binding.adapter.run_sync(call, approved=approved)
                    call, approved = program.send(result)
            except StopIteration as done:
                return done.value

        async def arun(*, config: Any, runtime: Any = None, **_: Any) -> Any:
            program = steps(binding, config, runtime)
            try:
                call, approved = next(program)
                while True:
                    result = await binding.adapter.run(call, approved=approved)
                    call, approved = program.send(result)
            except StopIteration as done:
                return done.value

        # LangChain passes the RunnableConfig, and LangGraph's ToolNode the
        # ToolRuntime, by these type hints, which postponed annotations here
        # would not resolve to.
        for function in (run, arun):
            function.__annotations__.update(
                config=RunnableConfig, runtime=prebuilt.ToolRuntime | None
            )
        return run, arun

    return SandrailTool, functions
