"""The OpenAI Agents SDK adapter, run by the SDK's own ScriptedModel."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.strict_schema import ensure_strict_json_schema
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import sandrail
from sandrail.adapters.openai_agents import function_tools
from tests.embed_rig import RealTimeWaits, launches, toolset

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
                function_call("run_command", {"command": "x", "timeout": 0}, call_id="call_3"),
            ],
            [assistant_message("ok")],
        ]
    )
    asyncio.run(Runner.run(_agent(model, function_tools(tools)), "go", run_config=OFFLINE))
    refusals = [json.loads(text) for text in _outputs(model)]
    assert [r["error_type"] for r in refusals] == ["e2b_command_arguments_invalid"] * 2
    assert refusals[0]["problems"][0]["field"] == "arguments.env[0].name"
    assert [p["field"] for p in refusals[1]["problems"]] == ["arguments.timeout"]
    assert launches(tools) == 0


def test_c5_agents_text_that_is_not_json_asks_a_person_then_runs_nothing() -> None:
    """The SDK's own rule: a callable ``needs_approval`` cannot read
    arguments that are not a JSON object, so the SDK asks a person before
    the adapter sees them. Approved, they are refused; nothing runs either
    way (OpenAI's strict mode never sends such text)."""
    tools = toolset()
    model = ScriptedModel(
        [[function_call("run_command", "{not json", call_id="call_2")], [assistant_message("ok")]]
    )
    agent = _agent(model, function_tools(tools))
    first = asyncio.run(Runner.run(agent, "go", run_config=OFFLINE))
    (item,) = first.interruptions
    state = first.to_state()
    state.approve(item)
    asyncio.run(Runner.run(agent, state, run_config=OFFLINE))
    (refusal,) = [json.loads(text) for text in _outputs(model)]
    assert refusal["error_type"] == "e2b_command_arguments_invalid"
    assert refusal["problems"][0]["field"] == "arguments"
    assert launches(tools) == 0


def test_c11_agents_timeout_gives_the_model_the_uncertain_result_and_its_retry_reconciles() -> None:
    """The adapter's deadline passes while the command runs: the model is
    sent the ``uncertain`` result itself (the locator and "do not run this
    again"), never just "timed out"; its natural retry, a new call id with
    the same arguments, reconciles instead of launching again (C2, C11)."""
    backend = RealTimeWaits()
    tools = toolset(backend)
    model = ScriptedModel(
        [
            [_run_command("sleep 2", "call_1")],
            [_run_command("sleep 2", "call_2")],  # the model retries, as models do
            [assistant_message("ok")],
        ]
    )
    adapted = function_tools(tools, timeout_seconds=0.3)
    asyncio.run(Runner.run(_agent(model, adapted), "go", run_config=OFFLINE))
    first, retry = (json.loads(text) for text in _outputs(model))
    assert first["error_type"] == "e2b_command_aborted"
    assert first["task_id"]
    assert "repeat exactly this call" in first["instruction"]
    assert retry["operation_key"] == first["operation_key"]
    assert retry["task_id"] == first["task_id"]
    assert launches(tools) == 1
    assert tools.abandoned == {}  # nothing was left behind the model's back


def test_c11_agents_sdk_tool_timeout_set_anyway_still_shows_the_result() -> None:
    """The SDK's own per-tool timeout cancels the call; the model is still
    sent what the call left (``uncertain`` with its locator), and the
    retry reconciles."""
    backend = RealTimeWaits()
    tools = toolset(backend)
    model = ScriptedModel(
        [
            [_run_command("sleep 2", "call_1")],
            [_run_command("sleep 2", "call_2")],
            [assistant_message("ok")],
        ]
    )
    adapted = function_tools(tools)
    for tool in adapted:
        tool.timeout_seconds = 0.3
    asyncio.run(Runner.run(_agent(model, adapted), "go", run_config=OFFLINE))
    first, retry = (json.loads(text) for text in _outputs(model))
    assert first["error_type"] == "e2b_command_aborted"
    assert first["task_id"]
    assert retry["task_id"] == first["task_id"]
    assert launches(tools) == 1


def test_c11_agents_timeout_before_dispatch_runs_nothing() -> None:
    gate = asyncio.Event()

    async def policy(request: object) -> sandrail.Allow:
        await gate.wait()
        return sandrail.ALLOW

    tools = toolset(RealTimeWaits(), authorize=policy)
    model = ScriptedModel([[_run_command("echo x", "call_1")], [assistant_message("ok")]])
    asyncio.run(
        Runner.run(
            _agent(model, function_tools(tools, timeout_seconds=0.2)), "go", run_config=OFFLINE
        )
    )
    (told,) = (json.loads(text) for text in _outputs(model))
    assert told["error_type"] == "canceled"
    assert told["executed"] is False
    assert launches(tools) == 0


def test_c11_agents_a_resumed_run_reconciles_a_timed_out_call() -> None:
    backend = RealTimeWaits()
    tools = toolset(backend)

    def script() -> ScriptedModel:
        return ScriptedModel([[_run_command("sleep 2", "call_1")], [assistant_message("ok")]])

    timed = script()
    asyncio.run(
        Runner.run(
            _agent(timed, function_tools(tools, run_id="r", timeout_seconds=0.3)),
            "go",
            run_config=OFFLINE,
        )
    )
    (told,) = (json.loads(text) for text in _outputs(timed))
    assert told["error_type"] == "e2b_command_aborted"
    resumed = script()
    asyncio.run(
        Runner.run(_agent(resumed, function_tools(tools, run_id="r")), "go", run_config=OFFLINE)
    )
    (reconciled,) = (json.loads(text) for text in _outputs(resumed))
    assert reconciled["deduplicated"] is True
    assert launches(tools) == 1


@pytest.mark.parametrize(
    ("run_id", "why"),
    [
        (lambda ctx: None, "returned None"),
        (lambda ctx: "", "returned ''"),
        (lambda ctx: " ", "returned ' '"),
        (lambda ctx: 7, "returned a value of type int"),
        (lambda ctx: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_c2_agents_a_run_id_function_without_a_run_id_runs_nothing(run_id: Any, why: str) -> None:
    """A run id of nothing would make every run's ``call_1`` one call (the
    second run deduplicated against the first, nothing run): refused."""
    tools = toolset()
    adapted = function_tools(tools, run_id=run_id)
    for _ in range(2):
        model = ScriptedModel([[_run_command("echo deploy", "call_1")], [assistant_message("ok")]])
        asyncio.run(Runner.run(_agent(model, adapted), "go", run_config=OFFLINE))
        (refused,) = (json.loads(text) for text in _outputs(model))
        assert refused["error_type"] == "e2b_command_operation_key_required"
        assert refused["executed"] is False
        assert why in refused["instruction"]
    assert launches(tools) == 0


def test_c2_agents_an_async_run_id_function_is_awaited() -> None:
    tools = toolset()

    async def run_id(ctx: Any) -> str:
        return "run-async"

    model = ScriptedModel([[_run_command("echo x", "call_1")], [assistant_message("ok")]])
    asyncio.run(
        Runner.run(_agent(model, function_tools(tools, run_id=run_id)), "go", run_config=OFFLINE)
    )
    (ran,) = (json.loads(text) for text in _outputs(model))
    assert ran["operation_key"] == "run-async:call_1"


def test_agents_adapter_refuses_settings_that_could_not_work() -> None:
    with pytest.raises(ValueError, match="run_id"):
        function_tools(toolset(), run_id=" ")
    with pytest.raises(TypeError, match="run_id"):
        function_tools(toolset(), run_id=7)  # type: ignore[arg-type]
    for bad in (0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="timeout_seconds"):
            function_tools(toolset(), timeout_seconds=bad)


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


def test_c2_agents_repeats_reconcile_across_runs() -> None:
    """Run 1's call is left uncertain; run 2's identical call (another call
    id, a fresh run id) is the model repeating it as told: it reconciles run
    1's call and launches nothing new."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator

    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    tools = toolset(sim)
    listed = function_tools(tools)
    outputs = []
    for call_id in ("call_1", "call_2"):
        model = ScriptedModel([[_run_command("date", call_id)], [assistant_message("ok")]])
        asyncio.run(Runner.run(_agent(model, listed), "go", run_config=OFFLINE))
        outputs += _outputs(model)
    first, second = (json.loads(text) for text in outputs)
    assert first["ok"] is False
    assert second["operation_key"] == first["operation_key"]
    assert second["operation_key"].endswith(":call_1")
    assert second["deduplicated"] is True
    assert launches(tools) == 1
