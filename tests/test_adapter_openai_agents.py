"""The OpenAI Agents SDK adapter, run by the SDK's own ScriptedModel (DESIGN §10)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.strict_schema import ensure_strict_json_schema
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from sandrail.adapters.openai_agents import function_tools
from tests.embed_rig import RealTimeWaits, assert_aborted_then_reconciled, launches, toolset

OFFLINE = RunConfig(tracing_disabled=True)
NULLS = {"cwd": None, "timeout": None, "env": None, "background": None}


def _run_command(command: str, call_id: str, **fields: Any) -> Any:
    return function_call("run_command", {**NULLS, "command": command, **fields}, call_id=call_id)


def _outputs(model: ScriptedModel) -> list[str]:
    """Every tool output the model was sent, as sent."""
    sent = []
    for call in model.calls:
        for item in call.input if isinstance(call.input, list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                sent.append(item["output"])
    return list(dict.fromkeys(sent))


def _agent(model: ScriptedModel, tools: list[Any]) -> Agent[Any]:
    return Agent(name="ops", model=model, tools=tools)


def test_agents_tools_are_strict_and_the_sdk_takes_their_schemas_unchanged() -> None:
    tools = toolset()
    listed = function_tools(tools)
    assert [tool.name for tool in listed] == list(tools.names)
    for tool in listed:
        assert tool.strict_json_schema is True
        assert tool.params_json_schema == tools.schema(tool.name, "openai-strict")
        schema = copy.deepcopy(tool.params_json_schema)
        assert ensure_strict_json_schema(schema) == tool.params_json_schema
        json.dumps(tool.params_json_schema)


def test_c12_agents_model_is_sent_exactly_to_json() -> None:
    tools = toolset(max_output_bytes=1500)
    model = ScriptedModel(
        [
            [_run_command("echo héllo", "call_1")],
            [_run_command("seq 9000", "call_2")],
            [assistant_message("ok")],
        ]
    )
    asyncio.run(Runner.run(_agent(model, function_tools(tools)), "go", run_config=OFFLINE))
    small, big = _outputs(model)
    assert json.loads(small)["stdout"] == "héllo\n"
    assert "\\u" not in small
    assert len(big.encode("utf-8")) <= 1500
    assert json.loads(big)["output_budget"]["truncated"] is True


def test_c2_agents_runs_never_share_keys_but_a_resumed_run_deduplicates() -> None:
    """ScriptedModel reuses call ids across runs: each run still gets its own
    key; a run given the same run id (a resumed run) reconciles instead."""
    tools = toolset()

    def script() -> ScriptedModel:
        return ScriptedModel([[_run_command("echo x", "call_1")], [assistant_message("ok")]])

    for _ in range(2):
        asyncio.run(Runner.run(_agent(script(), function_tools(tools)), "go", run_config=OFFLINE))
    assert launches(tools) == 2
    resumed = function_tools(tools, run_id="run-7")
    outputs = []
    for _ in range(2):
        model = script()
        asyncio.run(Runner.run(_agent(model, resumed), "go", run_config=OFFLINE))
        outputs += _outputs(model)
    assert [json.loads(text)["deduplicated"] for text in outputs] == [False, True]
    assert launches(tools) == 3


def test_agents_background_run_and_its_read() -> None:
    tools = toolset()

    def read(call: ModelCall) -> Any:
        (started,) = [
            json.loads(item["output"])
            for item in call.input
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]
        arguments = {
            "task_id": started["task_id"],
            "stdout_cursor": None,
            "stderr_cursor": None,
            "max_bytes": None,
            "wait_seconds": 5,
        }
        return [function_call("read_command_output", arguments, call_id="call_2")]

    model = ScriptedModel(
        [
            [_run_command("echo bg", "call_1", background=True, timeout=60)],
            ModelStep.respond(read),
            [assistant_message("ok")],
        ]
    )
    asyncio.run(Runner.run(_agent(model, function_tools(tools)), "go", run_config=OFFLINE))
    started, output = (json.loads(text) for text in _outputs(model))
    assert started["timeout_seconds"] == 60
    assert output["stdout"] == "bg\n"


def test_c5_agents_refused_calls_run_nothing() -> None:
    tools = toolset()
    model = ScriptedModel(
        [
            [
                _run_command("env", "call_1", env=[{"name": "LD_PRELOAD", "value": "x"}]),
                function_call("run_command", "{not json", call_id="call_2"),
                function_call("run_command", {"command": "x", "timeout": 0}, call_id="call_3"),
            ],
            [assistant_message("ok")],
        ]
    )
    asyncio.run(Runner.run(_agent(model, function_tools(tools)), "go", run_config=OFFLINE))
    refusals = [json.loads(text) for text in _outputs(model)]
    assert [r["error_type"] for r in refusals] == ["e2b_command_arguments_invalid"] * 3
    assert refusals[0]["problems"][0]["field"] == "arguments.env[0].name"
    assert [p["field"] for p in refusals[2]["problems"]] == ["arguments.timeout"]
    assert launches(tools) == 0


def test_c11_agents_tool_timeout_aborts_and_the_resumed_call_reconciles() -> None:
    backend = RealTimeWaits()
    tools = toolset(backend)

    def script() -> ScriptedModel:
        return ScriptedModel([[_run_command("sleep 2", "call_1")], [assistant_message("ok")]])

    timed = script()
    asyncio.run(
        Runner.run(
            _agent(timed, function_tools(tools, run_id="r", timeout_seconds=0.5)),
            "go",
            run_config=OFFLINE,
        )
    )
    (told,) = _outputs(timed)
    assert "timed out" in told.lower()

    def resume() -> dict[str, Any]:
        resumed = script()
        tools_again = function_tools(tools, run_id="r")
        asyncio.run(Runner.run(_agent(resumed, tools_again), "go", run_config=OFFLINE))
        (reconciled,) = _outputs(resumed)
        parsed: dict[str, Any] = json.loads(reconciled)
        return parsed

    assert_aborted_then_reconciled(tools, "r:call_1", resume)


def test_c2_agents_concurrent_runs_sharing_tools_never_share_keys() -> None:
    tools = toolset()
    shared = function_tools(tools)

    async def both() -> None:
        models = [
            ScriptedModel([[_run_command("echo x", "call_1")], [assistant_message("ok")]])
            for _ in "ab"
        ]
        await asyncio.gather(
            *(Runner.run(_agent(m, shared), "go", run_config=OFFLINE) for m in models)
        )

    asyncio.run(both())
    assert launches(tools) == 2
