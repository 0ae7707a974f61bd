"""The pydantic-ai adapter, run by pydantic-ai's own TestModel and
FunctionModel (DESIGN §10)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from sandrail.adapters.pydantic_ai import tools as pydantic_tools
from tests.embed_rig import RealTimeWaits, assert_aborted_then_reconciled, launches, toolset

NULLS = {"cwd": None, "timeout": None, "env": None, "background": None}


def _returns(messages: list[ModelMessage]) -> list[Any]:
    return [
        part.content
        for message in messages
        for part in getattr(message, "parts", ())
        if isinstance(part, ToolReturnPart)
    ]


def _scripted(*steps: Any) -> FunctionModel:
    """A FunctionModel that makes the given tool calls, one step per request,
    each step a function of the tool returns so far."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(m, ModelResponse) for m in messages)
        if done >= len(steps):
            return ModelResponse(parts=[TextPart("done")])
        calls = steps[done](_returns(messages))
        return ModelResponse(
            parts=[ToolCallPart(name, args, tool_call_id=cid) for name, args, cid in calls]
        )

    return FunctionModel(respond)


def test_pydantic_ai_offers_every_tool_with_its_strict_schema() -> None:
    tools = toolset()
    model = TestModel(call_tools=[])
    Agent(model, tools=pydantic_tools(tools)).run_sync("go")
    offered = {tool.name: tool for tool in model.last_model_request_parameters.function_tools}
    assert list(offered) == list(tools.names)
    for name, tool in offered.items():
        assert tool.parameters_json_schema == tools.schema(name, "openai-strict")


def test_c12_pydantic_ai_returns_exactly_to_json() -> None:
    tools = toolset(max_output_bytes=1500)
    agent = Agent(
        _scripted(
            lambda _: [("run_command", {**NULLS, "command": "echo héllo"}, "t1")],
            lambda _: [("run_command", {**NULLS, "command": "seq 9000"}, "t2")],
        ),
        tools=pydantic_tools(tools),
    )
    small, big = _returns(agent.run_sync("go").all_messages())
    assert isinstance(small, str)
    assert json.loads(small)["stdout"] == "héllo\n"
    assert len(big.encode("utf-8")) <= 1500


def test_c2_pydantic_ai_test_model_runs_never_share_keys() -> None:
    """TestModel reuses one call id across runs: each run still launches;
    a run resumed under the same run id reconciles instead."""
    tools = toolset()
    agent = Agent(TestModel(call_tools=["run_command"]), tools=pydantic_tools(tools))
    agent.run_sync("go")
    agent.run_sync("go")
    assert launches(tools) == 2
    agent.run_sync("go", run_id="run-7")
    again = agent.run_sync("go", run_id="run-7")
    (returned,) = _returns(again.all_messages())
    assert json.loads(returned)["deduplicated"] is True
    assert launches(tools) == 3


def test_pydantic_ai_background_run_and_its_read() -> None:
    tools = toolset()

    def read(returned: list[Any]) -> list[Any]:
        task_id = json.loads(returned[0])["task_id"]
        return [("read_command_output", {"task_id": task_id, "wait_seconds": 5}, "t2")]

    agent = Agent(
        _scripted(
            lambda _: [("run_command", {**NULLS, "command": "echo bg", "background": True}, "t1")],
            read,
        ),
        tools=pydantic_tools(tools),
    )
    started, output = (json.loads(text) for text in _returns(agent.run_sync("go").all_messages()))
    assert started["timeout_seconds"] == 300
    assert output["stdout"] == "bg\n"


def test_c5_pydantic_ai_refused_call_runs_nothing() -> None:
    tools = toolset()
    agent = Agent(
        _scripted(
            lambda _: [
                (
                    "run_command",
                    {**NULLS, "command": "x", "env": [{"name": "LD_PRELOAD", "value": "1"}]},
                    "t1",
                )
            ]
        ),
        tools=pydantic_tools(tools),
    )
    (refused,) = _returns(agent.run_sync("go").all_messages())
    assert json.loads(refused)["problems"][0]["field"] == "arguments.env[0].name"
    assert launches(tools) == 0


def test_c11_pydantic_ai_run_timed_out_aborts_and_the_resumed_run_reconciles() -> None:
    backend = RealTimeWaits()
    tools = toolset(backend)

    def agent() -> Agent[None, str]:
        return Agent(
            _scripted(lambda _: [("run_command", {**NULLS, "command": "sleep 2"}, "t1")]),
            tools=pydantic_tools(tools),
        )

    async def timed() -> None:
        await asyncio.wait_for(agent().run("go", run_id="run-c"), timeout=0.5)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(timed())

    def resume() -> dict[str, Any]:
        (returned,) = _returns(agent().run_sync("go", run_id="run-c").all_messages())
        parsed: dict[str, Any] = json.loads(returned)
        return parsed

    assert_aborted_then_reconciled(tools, "run-c:t1", resume)


def test_pydantic_ai_strict_conversions_keep_env_open_to_the_model() -> None:
    """OpenAI's strict mode is switched on for the schema as it is, and the
    Anthropic strict conversion keeps ``env`` a list of name/value objects
    (an open map would be closed to ``{}``)."""
    from pydantic_ai.profiles.openai import OpenAIJsonSchemaTransformer
    from pydantic_ai.providers.anthropic import AnthropicJsonSchemaTransformer

    tools = toolset()
    for name in tools.names:
        schema = tools.schema(name, "openai-strict")
        openai = OpenAIJsonSchemaTransformer(schema, strict=None)
        assert openai.walk() == schema
        assert openai.is_strict_compatible is True
    strict = AnthropicJsonSchemaTransformer(
        tools.schema("run_command", "anthropic-strict"), strict=True
    )
    env = strict.walk()["properties"]["env"]["anyOf"][0]
    assert env["type"] == "array"
    assert set(env["items"]["properties"]) == {"name", "value"}


def test_c2_pydantic_ai_calls_without_a_run_id_run_nothing() -> None:
    """Called outside an agent run there is no safe operation key."""
    from pydantic_ai import RunContext
    from pydantic_ai.usage import RunUsage

    tools = toolset()
    (_, run_command, *_) = pydantic_tools(tools)
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage(), tool_call_id="t1", run_id=None)
    returned = asyncio.run(run_command.function(ctx, command="echo x"))
    assert json.loads(returned)["error_type"] == "e2b_command_operation_key_required"
    assert launches(tools) == 0
