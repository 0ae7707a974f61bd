"""What the approval tests share (``docs/howto/approval.md``): a harness policy, each
framework's native approval path driven offline, and a process entry that
resumes a saved approval, so a test can resume one saved copy in two fresh
processes.

The policy asks a person about any command holding ``deploy`` and refuses any
holding ``rm -rf``; everything else runs. Each framework is driven as a
harness author would:

- pydantic-ai: ``FunctionModel``, ``output_type=[str, DeferredToolRequests]``,
  the history saved with ``ModelMessagesTypeAdapter``, resumed with
  ``DeferredToolResults``;
- Agents SDK: ``ScriptedModel``, ``result.interruptions``, the state saved
  with ``RunState.to_string()``, resumed with ``from_string``,
  ``approve``/``reject`` and ``Runner.run`` (adapter defaults: no
  ``run_id``);
- Anthropic: the ``tool_use`` block as the SDK's own object
  (``anthropic.types.ToolUseBlock``), saved as JSON with the run id;
- MCP: the official client with an elicitation callback; the client keeps
  the call's operation key and arguments.

Each ``first_*`` makes the call and returns a :class:`First`: whether the
framework's own machinery now waits for a person, the text the model was
sent (when the call was answered at once) and what the harness saves. Each
``resume_*`` answers the saved call (approve or reject) on a fresh toolset
and returns the text the model is sent.

``python -m tests.approval_rig FRAMEWORK SAVED SESSION RECORD`` resumes with
an approval on E2B (``E2B_API_KEY``/``E2B_API_URL``/``E2B_SANDBOX_URL`` from
the environment, as ``server.env`` gives them), with the SQLite record at
``RECORD`` that the process which asked shares, and prints that text.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, NamedTuple

import sandrail

ASK = "deploy"
REFUSE = "rm -rf"
SESSION = "approval-session"
NULLS = {"cwd": None, "timeout": None, "env": None, "background": None}
FRAMEWORKS = ("pydantic_ai", "openai_agents", "anthropic", "mcp")


class First(NamedTuple):
    waits: bool
    """The framework's human-in-the-loop now waits for a person."""
    sent: str | None
    """What the model was sent for the call, if it was answered at once."""
    saved: str
    """What the harness keeps to resume."""


class Policy:
    """The harness's policy; ``asked`` lists the operation keys it asked a
    person about (``ApprovalRequired``), ``denied`` those it refused."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.denied: list[str] = []

    def __call__(self, request: sandrail.ToolRequest) -> Any:
        command = str(request.call.arguments.get("command", ""))
        if REFUSE in command:
            self.denied.append(request.operation_key)
            return sandrail.Deny(reason="Deleting trees is not allowed here.")
        if ASK in command:
            self.asked.append(request.operation_key)
            return sandrail.ApprovalRequired(interaction_id="ask-1")
        return sandrail.ALLOW


def make_toolset(
    backend: Any, policy: Policy | None = None, session: str = SESSION, record: Any = None
) -> Any:
    """A harness's toolset; ``record``: the durable record that harnesses
    resuming each other's approvals share (a fresh toolset without it, as a
    fresh process, knows no question asked elsewhere)."""
    return sandrail.Toolset(
        backend=backend,
        session_id=session,
        owner=sandrail.AgentOwner(agent_id="approval-agent"),
        authorize=policy if policy is not None else Policy(),
        assert_authority=lambda request: True,
        record=record,
    )


# -- pydantic-ai --------------------------------------------------------------------


def _pydantic_agent(toolset: Any, command: str) -> Any:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    from sandrail.adapters.pydantic_ai import toolset as adapt

    def respond(messages: list[Any], info: Any) -> Any:
        returned = [part for m in messages for part in m.parts if isinstance(part, ToolReturnPart)]
        if returned:
            return ModelResponse(parts=[TextPart("done")])
        call = ToolCallPart("run_command", {**NULLS, "command": command}, tool_call_id="t1")
        return ModelResponse(parts=[call])

    return Agent(
        FunctionModel(respond),
        toolsets=[adapt(toolset)],
        output_type=[str, DeferredToolRequests],
    )


def _pydantic_returned(result: Any) -> str:
    from pydantic_ai.messages import ToolReturnPart

    (sent,) = [
        part.model_response_str()
        for message in result.new_messages()
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    return str(sent)


def first_pydantic_ai(toolset: Any, command: str) -> First:
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    result = _pydantic_agent(toolset, command).run_sync("go")
    saved = ModelMessagesTypeAdapter.dump_json(result.all_messages()).decode()
    if isinstance(result.output, DeferredToolRequests):
        (pending,) = result.output.approvals
        assert pending.tool_call_id == "t1"
        assert result.output.metadata["t1"]["interaction_id"] == "ask-1"
        return First(True, None, saved)
    return First(False, _pydantic_returned(result), saved)


def resume_pydantic_ai(toolset: Any, saved: str, approve: bool, command: str) -> str:
    from pydantic_ai import DeferredToolResults
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from sandrail.adapters.pydantic_ai import rejected

    history = ModelMessagesTypeAdapter.validate_json(saved)
    answer = True if approve else rejected(toolset)
    result = _pydantic_agent(toolset, command).run_sync(
        message_history=history, deferred_tool_results=DeferredToolResults(approvals={"t1": answer})
    )
    return _pydantic_returned(result)


# -- OpenAI Agents SDK --------------------------------------------------------------


def _agents_agent(toolset: Any, steps: list[Any]) -> Any:
    from agents import Agent
    from agents.testing import ScriptedModel

    from sandrail.adapters.openai_agents import function_tools

    return Agent(name="ops", model=ScriptedModel(steps), tools=function_tools(toolset))


def first_openai_agents(toolset: Any, command: str) -> First:
    from agents import Runner
    from agents.testing import assistant_message, function_call

    steps = [
        [function_call("run_command", {**NULLS, "command": command}, call_id="call_1")],
        [assistant_message("done")],
    ]
    result = asyncio.run(Runner.run(_agents_agent(toolset, steps), "go"))
    if result.interruptions:
        (item,) = result.interruptions
        assert item.tool_name == "run_command"
        return First(True, None, result.to_state().to_string())
    (sent,) = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
    return First(False, str(sent), "")


def resume_openai_agents(toolset: Any, saved: str, approve: bool, command: str) -> str:
    from agents import Runner, RunState
    from agents.testing import assistant_message

    from sandrail.adapters.openai_agents import rejection

    agent = _agents_agent(toolset, [[assistant_message("done")]])

    async def resume() -> Any:
        state = await RunState.from_string(agent, saved)
        (item,) = state.get_interruptions()
        if approve:
            state.approve(item)
        else:
            state.reject(item, rejection_message=rejection(toolset))
        return await Runner.run(agent, state)

    result = asyncio.run(resume())
    (sent,) = [item.output for item in result.new_items if item.type == "tool_call_output_item"]
    return str(sent)


# -- Anthropic ----------------------------------------------------------------------

RUN_ID = "run-anthropic-1"


def first_anthropic(toolset: Any, command: str) -> First:
    from anthropic.types import ToolUseBlock

    from sandrail.adapters.anthropic import AnthropicTools

    block = ToolUseBlock(
        type="tool_use", id="toolu_01", name="run_command", input={**NULLS, "command": command}
    )
    answer = AnthropicTools(toolset, run_id=RUN_ID).handle_sync(block)
    waits = AnthropicTools.needs_approval(answer)
    return First(waits, None if waits else str(answer["content"]), block.model_dump_json())


def resume_anthropic(toolset: Any, saved: str, approve: bool, command: str) -> str:
    from anthropic.types import ToolUseBlock

    from sandrail.adapters.anthropic import AnthropicTools

    tools = AnthropicTools(toolset, run_id=RUN_ID)
    block = ToolUseBlock.model_validate_json(saved)
    answer = tools.approve_sync(block) if approve else tools.reject(block)
    return str(answer["content"])


# -- MCP ----------------------------------------------------------------------------

MCP_KEY = "client-run-1:call-1"


def _mcp_call(toolset: Any, command: str, answer: str | None) -> tuple[Any, list[str]]:
    """One call through the official client (in memory, handshake era),
    its operation key in ``_meta``; ``answer`` is what the person at the
    client answers when asked (``None``: the client cannot be asked; else
    ``"approve"``, ``"decline"`` or ``"cancel"``). Returns the result and the
    questions the person was asked."""
    import mcp_types
    from mcp import Client

    from sandrail.adapters.mcp import OPERATION_KEY_META, server

    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> Any:
        asked.append(params.message)
        if answer == "approve":
            return mcp_types.ElicitResult(action="accept", content={"approve": True})
        return mcp_types.ElicitResult(action=str(answer))

    async def call() -> Any:
        options = {} if answer is None else {"elicitation_callback": elicit}
        async with Client(server(toolset), mode="legacy", **options) as client:
            return await client.call_tool(
                "run_command",
                {"command": command},
                meta={OPERATION_KEY_META: MCP_KEY},
            )

    return asyncio.run(call()), asked


def first_mcp(toolset: Any, command: str) -> First:
    """The person at the client is asked (elicitation) and closes the form
    without deciding: the result says ``approval_required`` and nothing ran;
    the client keeps the call (its key and arguments) to ask again."""
    result, asked = _mcp_call(toolset, command, "cancel")
    waits = result.meta["sandrail/status"] == "approval_required"
    assert waits == bool(asked), (result.meta, asked)
    return First(waits, None if waits else str(result.content[0].text), json.dumps([command]))


def resume_mcp(toolset: Any, saved: str, approve: bool, command: str) -> str:
    (command,) = json.loads(saved)
    result, _ = _mcp_call(toolset, command, "approve" if approve else "decline")
    return str(result.content[0].text)


FIRST = {
    "pydantic_ai": first_pydantic_ai,
    "openai_agents": first_openai_agents,
    "anthropic": first_anthropic,
    "mcp": first_mcp,
}
RESUME = {
    "pydantic_ai": resume_pydantic_ai,
    "openai_agents": resume_openai_agents,
    "anthropic": resume_anthropic,
    "mcp": resume_mcp,
}


def main(argv: list[str]) -> int:
    """Resume a saved approval in this fresh process, on E2B; print what the
    model is sent."""
    from sandrail.interpreters.e2b import E2BBackend
    from sandrail.records import SQLiteRecord

    framework, saved_path, session, record_path = argv
    with open(saved_path, encoding="utf-8") as saved_file:
        saved = saved_file.read()
    with E2BBackend() as backend, SQLiteRecord(record_path) as record:
        toolset = make_toolset(backend, session=session, record=record)
        print(RESUME[framework](toolset, saved, True, ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
