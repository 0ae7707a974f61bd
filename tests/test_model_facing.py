"""What the model reads, pinned in each adapter's wire form: every
result says its ``status`` and an instruction the model can follow with the
tools it has (repeat the identical call; read the task by its id; wait for
a person), never an operation key it cannot send. A command's own state is
``command_status``.

Each adapter is driven with its framework's own objects: a pydantic-ai
``ToolReturnPart``, the Agents SDK's ``function_call_output`` item, an
Anthropic ``tool_result`` block, an MCP text content (and its ``_meta``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

import sandrail
from sandrail.core import APPROVAL_REJECTED_INSTRUCTION, canonical_json
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator
from tests.approval_rig import NULLS

UNCERTAIN = (
    "This call may have run: do not send it as a new or changed call. To learn what "
    "happened, repeat exactly this call (same tool, same arguments): it is matched to this "
    "one and never runs twice. Or read the task with read_command_output and this task_id."
)
APPROVAL = (
    "A person must approve this call before it runs; nothing ran. Once they have approved "
    "it, repeat exactly this call (same tool, same arguments); do not work around it with "
    "another call."
)
REJECTED = (
    "A person rejected this call; nothing ran. Do not repeat it or work around it with "
    "another call; ask the user what to do instead."
)
BACKGROUND = (
    "The command runs in the background. Follow it with read_command_output and this "
    "task_id (wait_seconds waits for it to end); end it with stop_command."
)
CUT = (
    "The output was cut to fit (see output_budget): read any part with read_command_output "
    "and this task_id, choosing stdout_cursor and stderr_cursor as byte offsets."
)

CASES = {
    # command -> (status, error_type, instruction)
    "echo fine": ("ok", None, None),
    "echo lost": ("uncertain", "e2b_command_evidence_incomplete", UNCERTAIN),
    "echo friday": ("error", "policy_denied", "The policy says: not on Fridays."),
    "echo deploy": ("approval_required", None, APPROVAL),
    "seq 20000": ("ok", None, CUT),
    "   ": ("error", "command_required", "command must not be blank."),
}


def _policy(request: sandrail.ToolRequest) -> Any:
    command = str(request.call.arguments.get("command", ""))
    if "friday" in command:
        return sandrail.Deny(reason="The policy says: not on Fridays.")
    if "deploy" in command:
        return sandrail.ApprovalRequired(interaction_id="ask-1")
    return sandrail.ALLOW


def _toolset() -> sandrail.Toolset:
    lost = Fault(effect="Start", occurrence=0, kind=FaultKind.RESPONSE_LOST)
    return sandrail.Toolset(
        backend=Simulator(plan=FaultPlan((lost,))),
        session_id="facing",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=_policy,
        assert_authority=lambda request: True,
        max_output_bytes=4_000,
    )


def _commands() -> list[str]:
    # "echo lost" first: the fault strikes the first Start of the session.
    return ["echo lost", "echo fine", "echo friday", "seq 20000", "   "]


# -- each adapter's wire form -------------------------------------------------------


def _pydantic_ai(commands: list[str]) -> list[str]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    from sandrail.adapters.pydantic_ai import toolset

    def respond(messages: list[Any], info: Any) -> Any:
        if any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
            return ModelResponse(parts=[TextPart("done")])
        calls = [
            ToolCallPart("run_command", {**NULLS, "command": c}, tool_call_id=f"t{i}")
            for i, c in enumerate(commands)
        ]
        return ModelResponse(parts=calls)

    result = Agent(FunctionModel(respond), toolsets=[toolset(_toolset())]).run_sync("go")
    returned = {
        part.tool_call_id: part.model_response_str()
        for m in result.all_messages()
        for part in m.parts
        if isinstance(part, ToolReturnPart)
    }
    return [returned[f"t{i}"] for i in range(len(commands))]


def _openai_agents(commands: list[str]) -> list[str]:
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sandrail.adapters.openai_agents import function_tools

    calls = [
        function_call("run_command", {**NULLS, "command": c}, call_id=f"call_{i}")
        for i, c in enumerate(commands)
    ]
    model = ScriptedModel([calls, [assistant_message("done")]])
    agent = Agent(name="ops", model=model, tools=function_tools(_toolset()))
    result = asyncio.run(Runner.run(agent, "go", run_config=RunConfig(tracing_disabled=True)))
    sent = {
        item.raw_item["call_id"]: item.output
        for item in result.new_items
        if item.type == "tool_call_output_item"
    }
    return [str(sent[f"call_{i}"]) for i in range(len(commands))]


def _anthropic(commands: list[str]) -> list[str]:
    from anthropic.types import ToolUseBlock

    from sandrail.adapters.anthropic import AnthropicTools

    tools = AnthropicTools(_toolset(), run_id="run-1")
    answers = []
    for i, command in enumerate(commands):
        block = ToolUseBlock(
            type="tool_use",
            id=f"toolu_{i}",
            name="run_command",
            input={**NULLS, "command": command},
        )
        answers.append(str(tools.handle_sync(block)["content"]))
    return answers


def _mcp(commands: list[str]) -> list[str]:
    from mcp import Client

    from sandrail.adapters.mcp import server

    async def call() -> list[str]:
        async with Client(server(_toolset()), mode="legacy") as client:
            results = [await client.call_tool("run_command", {"command": c}) for c in commands]
        return [str(result.content[0].text) for result in results]

    return asyncio.run(call())


ADAPTERS: dict[str, Callable[[list[str]], list[str]]] = {
    "pydantic_ai": _pydantic_ai,
    "openai_agents": _openai_agents,
    "anthropic": _anthropic,
    "mcp": _mcp,
}


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_status_the_model_reads_says_itself_and_what_to_do(adapter: str) -> None:
    commands = _commands()
    for command, sent in zip(commands, ADAPTERS[adapter](commands), strict=True):
        read = json.loads(sent)
        status, error_type, instruction = CASES[command]
        assert read["status"] == status, (command, read)
        assert read.get("error_type") == error_type, (command, read)
        assert read.get("instruction") == instruction, (command, read)
        assert "operation_key in" not in sent  # no instruction names a key to send
        if status == "ok":
            assert read["command_status"] == "exited"
            assert read["backend"] == "simulator"


@pytest.mark.parametrize("adapter", ["anthropic", "mcp"])
def test_approval_required_as_the_model_reads_it_where_it_can(adapter: str) -> None:
    """pydantic-ai and the Agents SDK hand approval to a person before the
    model reads anything; an Anthropic harness that sends the block anyway,
    and an MCP client that cannot be asked, show the model this."""
    (sent,) = ADAPTERS[adapter](["echo deploy"])
    read = json.loads(sent)
    assert (read["status"], read["executed"], read["interaction_id"]) == (
        "approval_required",
        False,
        "ask-1",
    )
    assert read["instruction"] == APPROVAL


def test_a_person_s_rejection_as_each_adapter_sends_it() -> None:
    from sandrail.adapters.openai_agents import rejection
    from sandrail.adapters.pydantic_ai import rejected

    tools = _toolset()
    assert APPROVAL_REJECTED_INSTRUCTION == REJECTED
    texts = [
        rejected(tools).message,
        rejection(tools),
        tools.rejection().to_json(),
    ]
    for text in texts:
        assert json.loads(text) == {
            "status": "error",
            "ok": False,
            "error_type": "approval_rejected",
            "executed": False,
            "instruction": REJECTED,
        }
    with_reason = json.loads(tools.rejection("Not during the freeze.").to_json())
    assert with_reason["outcome_reason"] == "Not during the freeze."


def test_a_background_launch_and_reads_say_how_to_follow_them() -> None:
    tools = _toolset()
    tools.call_sync("run_command", {"command": "echo lost"}, call_id="c0", operation_key="k0")
    started = tools.call_sync(
        "run_command",
        {"command": "sleep 30", "background": True},
        call_id="c1",
        operation_key="k1",
    )
    assert (started.status, started.command_status, started.instruction) == (
        "ok",
        "running",
        BACKGROUND,
    )
    read = tools.call_sync(
        "read_command_output", {"task_id": started.task_id}, call_id="c2", operation_key="k2"
    )
    assert read.command_status == "running"
    assert "still running" in (read.instruction or "")


def test_tool_result_accessors_read_the_content_typed() -> None:
    tools = _toolset()
    tools.call_sync("run_command", {"command": "echo lost"}, call_id="c0", operation_key="k0")
    ok = tools.call_sync("run_command", {"command": "echo hi"}, call_id="c1", operation_key="k1")
    assert (ok.stdout, ok.stderr, ok.exit_code, ok.command_status) == ("hi\n", "", 0, "exited")
    assert (ok.is_uncertain, ok.needs_approval, ok.deduplicated, ok.truncated) == (
        False,
        False,
        False,
        False,
    )
    assert ok.task_id == sandrail.task_id("facing", sandrail.AgentOwner(agent_id="agent-1"), "k1")
    assert (ok.operation_key, ok.sandbox_id, ok.executed, ok.instruction) == (
        "k1",
        "sbx-1",
        None,
        None,
    )
    lost = _toolset().call_sync(
        "run_command", {"command": "echo x"}, call_id="c2", operation_key="k2"
    )
    assert (lost.is_uncertain, lost.instruction, lost.stdout) == (True, UNCERTAIN, None)
    refused = tools.call_sync("run_command", {"command": ""}, call_id="c3", operation_key="k3")
    assert (refused.executed, refused.exit_code, refused.task_id) == (False, None, None)
    waiting = tools.call_sync(
        "run_command", {"command": "echo deploy"}, call_id="c4", operation_key="k4"
    )
    assert (waiting.needs_approval, waiting.executed) == (True, False)
    cut = tools.call_sync("run_command", {"command": "seq 20000"}, call_id="c5", operation_key="k5")
    assert (cut.truncated, cut.instruction) == (True, CUT)
    odd = sandrail.ToolResult(status="ok", content={"exit_code": True, "stdout": 5})
    assert (odd.exit_code, odd.stdout) == (None, None)  # typed: a bool is no exit code


def _port(tools: str = "command", **settings: Any) -> sandrail.ToolPort:
    factory = sandrail.command_tools if tools == "command" else sandrail.code_tools
    options: dict[str, Any] = {
        "backend": Simulator(),
        "session_id": "facing",
        "owner": sandrail.AgentOwner(agent_id="agent-1"),
        "authorize": lambda request: sandrail.ALLOW,
        "assert_authority": lambda request: True,
        **settings,
    }
    return factory(**options)


def _request(port: sandrail.ToolPort, name: str, arguments: dict[str, Any], key: str) -> Any:
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name=name, call_id=f"call-{key}", arguments=arguments),
        operation_key=key,
        session_id="facing",
        definition=port.definition(name),
        identity=sandrail.AgentIdentity(agent_id="agent-1"),
    )


def test_an_uncertain_result_names_only_tools_the_port_has() -> None:
    """A code port has no read_command_output: its uncertain result tells
    the model to repeat the call, and nothing about a tool it cannot call."""
    lost = Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)
    port = _port("code", backend=Simulator(plan=FaultPlan((lost,))))
    result = port.execute_sync(_request(port, "sandbox_run_code", {"code": "print(1)"}, "k1"))
    assert result.status == "uncertain"
    assert result.instruction is not None
    assert result.instruction.startswith("This call may have run")
    assert "read_command_output" not in result.instruction


def test_uncertain_reads_and_stops_say_to_repeat_them() -> None:
    """A read whose task's state is unknown (its start never arrived, so the
    sandbox never launched it), and a stop whose answer is unconfirmed
    (authority lost right after it), say to repeat that very call."""
    never = Fault(effect="Start", kind=FaultKind.NOT_DELIVERED)
    port = _port(backend=Simulator(plan=FaultPlan((never,))))
    started = port.execute_sync(
        _request(port, "run_command", {"command": "sleep 30", "background": True}, "k1")
    )
    read = port.execute_sync(
        _request(port, "read_command_output", {"task_id": started.task_id}, "k2")
    )
    assert read.status == "uncertain"
    assert read.instruction == (
        "What this read found could not be confirmed; reading changes nothing. Repeat "
        "exactly this call to read again."
    )
    lost = Fault(effect="Cancel", kind=FaultKind.AUTHORITY_LOST, when="after")
    sim = Simulator(plan=FaultPlan((lost,)))
    port = _port(
        backend=sim, authorize=sim.harness.authorize, assert_authority=sim.harness.assert_authority
    )
    started = port.execute_sync(
        _request(port, "run_command", {"command": "sleep 30", "background": True}, "k1")
    )
    stop = port.execute_sync(_request(port, "stop_command", {"task_id": started.task_id}, "k2"))
    assert stop.status == "uncertain"
    assert stop.instruction == (
        "The stop request may not have reached the command. Repeat exactly this call, then "
        "confirm with read_command_output."
    )


def test_c12_an_approval_s_instruction_gives_way_to_its_interaction_id() -> None:
    """The interaction id is an identity the harness needs whole (C8, C13);
    the instruction is words, cut to fit a small budget."""
    interaction = "i" * 150

    def asks(request: sandrail.ToolRequest) -> Any:
        return sandrail.ApprovalRequired(interaction_id=interaction)

    port = _port(authorize=asks, max_output_bytes=1_100)
    result = port.execute_sync(_request(port, "run_command", {"command": "echo x"}, "k1"))
    assert result.status == "approval_required"
    assert result.content["interaction_id"] == interaction
    assert len(canonical_json(result.content)) <= 1_100
