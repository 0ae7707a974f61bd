"""The pydantic-ai adapter, run by pydantic-ai's own TestModel and
FunctionModel."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from sandrail.adapters.pydantic_ai import toolset as pydantic_toolset
from tests.embed_rig import (
    RealTimeWaits,
    assert_aborted_then_reconciled,
    assert_each_call_its_own,
    launches,
    toolset,
)

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
    Agent(model, toolsets=[pydantic_toolset(tools)]).run_sync("go")
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
        toolsets=[pydantic_toolset(tools)],
    )
    small, big = _returns(agent.run_sync("go").all_messages())
    assert isinstance(small, str)
    assert json.loads(small)["stdout"] == "héllo\n"
    assert len(big.encode("utf-8")) <= 1500


def test_c2_pydantic_ai_test_model_runs_never_share_keys() -> None:
    """TestModel reuses one call id across runs: each run still launches;
    a run resumed under the same run id reconciles instead."""
    tools = toolset()
    agent = Agent(TestModel(call_tools=["run_command"]), toolsets=[pydantic_toolset(tools)])
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
        toolsets=[pydantic_toolset(tools)],
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
        toolsets=[pydantic_toolset(tools)],
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
            toolsets=[pydantic_toolset(tools)],
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
    adapted = pydantic_toolset(tools)
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage(), tool_call_id="t1", run_id=None)
    listed = asyncio.run(adapted.get_tools(ctx))
    returned = asyncio.run(
        adapted.call_tool("run_command", {"command": "echo x"}, ctx, listed["run_command"])
    )
    assert json.loads(returned)["error_type"] == "e2b_command_operation_key_required"
    assert launches(tools) == 0


def _answers_to(arguments: Any, tools: Any) -> list[Any]:
    """What the model is sent after calling run_command with ``arguments``
    (text as a model writes it, or an object)."""
    seen: list[Any] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = [
            part
            for message in messages
            for part in getattr(message, "parts", ())
            if isinstance(part, (ToolReturnPart, RetryPromptPart))
        ]
        if parts:
            seen.extend(parts)
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("run_command", arguments, tool_call_id="c1")])

    Agent(FunctionModel(respond), toolsets=[pydantic_toolset(tools)]).run_sync("go")
    return seen


SECRET = "hunter2hunter2"
NOT_AN_OBJECT = ["[1,2]", '"s"', "123", "true", "null", "[]"]
NOT_JSON = [
    '{"command":"echo hi","env":[{"name":"K","value":"'
    + SECRET
    + '"}],"pad":"'
    + "x" * 50_000
    + '"',
    '{"command":"echo hi","cwd":null,"timeout":null,"env":[{"name":"K","value":"' + SECRET + '"}]',
    '{"command":"x","timeout":NaN}',
    '{"a":' * 3000 + "1" + "}" * 3000,
]


@pytest.mark.parametrize("arguments", NOT_AN_OBJECT + NOT_JSON)
def test_c5_c12_c17_pydantic_ai_arguments_that_are_not_an_object_are_refused_within_the_budget(
    arguments: str,
) -> None:
    """Valid JSON that is not an object used to crash the run (TypeError);
    text that is not JSON was answered by pydantic-ai's validation error,
    quoting the text whole (50 KB past a 1,000-byte budget, an env value in
    clear). Now each is the port's refusal: nothing ran, within the budget,
    no value quoted."""
    tools = toolset(max_output_bytes=1000, redact=[SECRET])
    (answer,) = _answers_to(arguments, tools)
    assert isinstance(answer, ToolReturnPart)
    sent = answer.model_response_str()
    assert len(sent.encode("utf-8")) <= 1000
    assert SECRET not in sent
    refused = json.loads(sent)
    assert refused["error_type"] == "e2b_command_arguments_invalid"
    assert refused["problems"][0]["field"] == "arguments"
    assert launches(tools) == 0


def test_c11_pydantic_ai_timeout_returns_the_uncertain_result_and_the_retry_reconciles() -> None:
    """The adapter's deadline passes while the command runs: the model gets
    the ``uncertain`` result, and its retry (a new call id, the same
    arguments) reconciles instead of launching again (C2, C11)."""
    tools = toolset(RealTimeWaits())
    call = {**NULLS, "command": "sleep 2"}
    agent = Agent(
        _scripted(lambda _: [("run_command", call, "t1")], lambda _: [("run_command", call, "t2")]),
        toolsets=[pydantic_toolset(tools, timeout_seconds=0.3)],
    )
    first, retry = (json.loads(text) for text in _returns(agent.run_sync("go").all_messages()))
    assert first["error_type"] == "e2b_command_aborted"
    assert first["task_id"]
    assert retry["task_id"] == first["task_id"]
    assert retry["operation_key"] == first["operation_key"]
    assert launches(tools) == 1


def test_c11_pydantic_ai_agent_tool_timeout_never_hides_the_result() -> None:
    """``Agent(tool_timeout=...)`` cancels function tools and tells the model
    only "Timed out"; it does not reach this toolset, whose result the model
    gets whole."""
    tools = toolset(RealTimeWaits())
    agent = Agent(
        _scripted(lambda _: [("run_command", {**NULLS, "command": "sleep 0.6"}, "t1")]),
        toolsets=[pydantic_toolset(tools)],
        tool_timeout=0.2,
    )
    (returned,) = _returns(agent.run_sync("go").all_messages())
    assert json.loads(returned)["command_status"] == "exited"
    assert tools.abandoned == {}


def test_pydantic_ai_adapter_refuses_settings_that_could_not_work() -> None:
    with pytest.raises(ValueError, match="timeout_seconds"):
        pydantic_toolset(toolset(), timeout_seconds=0)
    with pytest.raises(ValueError, match="profile"):
        pydantic_toolset(toolset(), profile="gemini")  # type: ignore[arg-type]


def test_c2_pydantic_ai_repeats_reconcile_across_runs() -> None:
    """Run 1's call is left uncertain; run 2's identical call (another
    call id, another run id) is the model repeating it as told: it
    reconciles run 1's call."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator

    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    tools = toolset(sim)
    returned = []
    for call_id in ("t1", "t2"):
        agent = Agent(
            _scripted(lambda _, cid=call_id: [("run_command", {**NULLS, "command": "date"}, cid)]),
            toolsets=[pydantic_toolset(tools)],
        )
        returned += _returns(agent.run_sync("go").all_messages())
    first, second = (json.loads(text) for text in returned)
    assert first["error_type"] == "e2b_sandbox_outcome_unknown" or first["ok"] is False
    assert second["operation_key"] == first["operation_key"]
    assert second["deduplicated"] is True
    assert launches(tools) == 1


def _twice_gated(tools: Any) -> Agent[None, Any]:
    """An agent whose model makes ``rm -rf /tmp/x`` twice in one response
    (``ca`` and ``cb``), then answers."""
    from pydantic_ai import DeferredToolRequests

    args = {**NULLS, "command": "rm -rf /tmp/x"}
    model = _scripted(lambda _: [("run_command", args, "ca"), ("run_command", args, "cb")])
    return Agent(model, toolsets=[pydantic_toolset(tools)], output_type=[str, DeferredToolRequests])


@pytest.mark.parametrize("rejected", ["ca", "cb", None])
def test_c2_c8_two_identical_calls_of_one_turn_are_two_decisions(rejected: str | None) -> None:
    """One model response makes the same call twice; the person approves
    one and rejects the other (or approves both). Each call is its own: an
    approved one runs under its own key, a rejected one runs nothing, and
    two approvals are two launches."""
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    from sandrail.adapters.pydantic_ai import rejected as rejection
    from tests.embed_rig import asks_for_rm

    tools = toolset(authorize=asks_for_rm)
    first = _twice_gated(tools).run_sync("go")
    requests = first.output
    assert isinstance(requests, DeferredToolRequests)
    assert sorted(call.tool_call_id for call in requests.approvals) == ["ca", "cb"]
    keys = {m: requests.metadata[m]["operation_key"] for m in ("ca", "cb")}
    assert keys["ca"] != keys["cb"]
    approvals: dict[str, Any] = {
        call: True if call != rejected else rejection(tools, requests=requests, tool_call_id=call)
        for call in ("ca", "cb")
    }
    resumed = _twice_gated(tools).run_sync(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals=approvals),
    )
    told = {
        part.tool_call_id: json.loads(part.model_response_str())
        for message in resumed.new_messages()
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }
    assert_each_call_its_own(told, rejected, keys)
    assert launches(tools) == (1 if rejected else 2)
