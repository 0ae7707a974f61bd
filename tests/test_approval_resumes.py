"""Approval across resumes, repeats and rejections: a resumed copy, an
``uncertain`` call repeated in a later run, a rejection of a key that
already launched, the question an MCP client is asked. Offline, on the
simulator (its world lives in this process, so fresh toolsets and
adapters sharing one simulator stand for fresh processes).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sandrail.interpreters.simulator import Simulator
from sandrail.records import SQLiteRecord
from tests.approval_rig import FIRST, NULLS, make_toolset


def _launches(sim: Simulator) -> int:
    return sum(sim.launches.values())


# -- a saved Agents SDK approval, resumed under any RunConfig, launches once


def _resume_agents(
    sim: Simulator, saved: str, run_config: Any, tools: Any = None, record: Any = None
) -> dict[str, Any]:
    from agents import Runner, RunState
    from agents.testing import assistant_message

    from tests.approval_rig import _agents_agent

    agent = _agents_agent(tools or make_toolset(sim, record=record), [[assistant_message("done")]])

    async def resume() -> Any:
        state = await RunState.from_string(agent, saved)
        state.approve(state.get_interruptions()[0])
        return await Runner.run(agent, state, run_config=run_config)

    result = asyncio.run(resume())
    (sent,) = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    parsed: dict[str, Any] = json.loads(sent)
    return parsed


@pytest.mark.parametrize("saved_tracing", [True, False], ids=["saved-traced", "saved-untraced"])
def test_c2_agents_sdk_copy_resumed_under_any_run_config_launches_once(
    saved_tracing: bool, tmp_path: Path
) -> None:
    """The key of an approved call comes from what the saved ``RunState``
    carries, never from the resuming run's trace id or tracing setting: one
    saved copy resumed with its own ``RunConfig(trace_id=...)``, with tracing
    off and with tracing on launches once, all under one key."""
    from agents import RunConfig, Runner
    from agents.testing import assistant_message, function_call

    from tests.approval_rig import _agents_agent

    sim = Simulator()
    record = SQLiteRecord(tmp_path / "record.sqlite")  # the resuming processes share it
    call = function_call("run_command", {**NULLS, "command": "echo deploy"}, call_id="call_1")
    first = asyncio.run(
        Runner.run(
            _agents_agent(make_toolset(sim, record=record), [[call], [assistant_message("done")]]),
            "go",
            run_config=RunConfig(tracing_disabled=not saved_tracing),
        )
    )
    saved = first.to_state().to_string()
    configs = [
        RunConfig(trace_id="trace_" + "a" * 32),
        RunConfig(tracing_disabled=True),
        RunConfig(trace_id="trace_" + "b" * 32),
        RunConfig(),
    ]
    sent = [_resume_agents(sim, saved, config, record=record) for config in configs]
    record.close()
    assert len({s["operation_key"] for s in sent}) == 1, [s["operation_key"] for s in sent]
    assert [(s["status"], s["deduplicated"]) for s in sent] == [("ok", False)] + [("ok", True)] * 3
    assert _launches(sim) == 1


# -- an uncertain call repeated as told, on a later run, is matched to it


def _lossy(session: str = "b1-session") -> tuple[Simulator, Any]:
    """A toolset whose first start's answer is lost: that call is
    ``uncertain`` although the command ran."""
    import sandrail
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan
    from sandrail.testing import FaultyBackend

    sim = Simulator()
    lost = Fault(effect="Start", occurrence=0, kind=FaultKind.RESPONSE_LOST, when="after")
    plan = FaultPlan([lost])
    tools = sandrail.Toolset(
        backend=FaultyBackend(sim, plan),
        session_id=session,
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    return sim, tools


DEPLOY = {**NULLS, "command": "echo deploying"}


def test_c2_an_uncertain_call_repeated_in_a_later_run_reconciles() -> None:
    """The toolset's own rule: a repeat with another run id (a new
    pydantic-ai run, a new ``Runner.run``) is still the model following the
    uncertain result's instruction: it runs under the first call's key."""
    sim, tools = _lossy()
    first = tools.call_sync(
        "run_command",
        DEPLOY,
        call_id="t1",
        operation_key="run-1:t1",
        profile="openai-strict",
        reconcile_repeats=True,
        run_id="run-1",
    )
    assert first.status == "uncertain"
    again = tools.call_sync(
        "run_command",
        DEPLOY,
        call_id="t2",
        operation_key="run-2:t2",
        profile="openai-strict",
        reconcile_repeats=True,
        run_id="run-2",
    )
    assert (again.status, again.content["operation_key"]) == ("ok", "run-1:t1")
    assert again.content["deduplicated"] is True
    assert _launches(sim) == 1


def test_c2_pydantic_ai_uncertain_call_repeated_next_turn_launches_once() -> None:
    """The model repeats the uncertain call on the next user turn (a new
    ``Agent.run`` over the history, so a new run id)."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import FunctionModel

    from sandrail.adapters.pydantic_ai import toolset as adapt

    sim, tools = _lossy()

    def respond(messages: list[Any], info: Any) -> Any:
        last = messages[-1].parts
        if any(isinstance(p, UserPromptPart) and "again" in str(p.content) for p in last):
            return ModelResponse(parts=[ToolCallPart("run_command", DEPLOY, tool_call_id="t2")])
        if any(isinstance(p, ToolReturnPart) for p in last):
            return ModelResponse(parts=[TextPart("It may have run.")])
        return ModelResponse(parts=[ToolCallPart("run_command", DEPLOY, tool_call_id="t1")])

    agent = Agent(FunctionModel(respond), toolsets=[adapt(tools)])
    first = agent.run_sync("Deploy.")
    second = agent.run_sync("Repeat it again, exactly.", message_history=first.all_messages())
    sent = [
        json.loads(str(part.content))
        for message in second.all_messages()
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]
    assert [s["status"] for s in sent] == ["uncertain", "ok"]
    assert sent[1]["operation_key"] == sent[0]["operation_key"]
    assert _launches(sim) == 1


def test_c2_agents_sdk_uncertain_call_repeated_in_a_new_run_launches_once() -> None:
    """The model repeats the uncertain call in a new ``Runner.run`` over
    the history (the adapter's default run id is one per run)."""
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sandrail.adapters.openai_agents import function_tools

    sim, tools = _lossy()
    model = ScriptedModel(
        [
            [function_call("run_command", DEPLOY, call_id="call_1")],
            [assistant_message("It may have run.")],
            [function_call("run_command", DEPLOY, call_id="call_2")],
            [assistant_message("done")],
        ]
    )
    agent = Agent(name="ops", model=model, tools=function_tools(tools))
    offline = RunConfig(tracing_disabled=True)

    async def two_runs() -> list[Any]:
        first = await Runner.run(agent, "Deploy.", run_config=offline)
        again: Any = [*first.to_input_list(), {"role": "user", "content": "Repeat it exactly."}]
        return [first, await Runner.run(agent, again, run_config=offline)]

    runs = asyncio.run(two_runs())
    sent = [
        json.loads(item.output)
        for run in runs
        for item in run.new_items
        if item.type == "tool_call_output_item"
    ]
    assert [s["status"] for s in sent] == ["uncertain", "ok"]
    assert sent[1]["operation_key"] == sent[0]["operation_key"]
    assert _launches(sim) == 1


# -- a key that already launched is never answered `executed: false`


class _Turning:
    """A policy that asks a person about ``deploy``, until ``deny`` is set:
    from then on it refuses it."""

    def __init__(self) -> None:
        self.deny = False

    def __call__(self, request: Any) -> Any:
        import sandrail

        if "deploy" not in str(request.call.arguments.get("command", "")):
            return sandrail.ALLOW
        if self.deny:
            return sandrail.Deny(reason="No more deploys today.")
        return sandrail.ApprovalRequired(interaction_id="ask-1")


def _approving(sim: Simulator, policy: Any = None) -> Any:
    import sandrail

    return sandrail.Toolset(
        backend=sim,
        session_id="b3-session",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=policy if policy is not None else _Turning(),
        assert_authority=lambda request: True,
    )


def _deploy(tools: Any, *, approved: bool = False, key: str = "run-1:c1") -> Any:
    return tools.call_sync(
        "run_command",
        {"command": "echo deploy"},
        call_id=key.split(":")[-1],
        operation_key=key,
        approved=approved,
    )


def test_c5_c2_a_launched_key_asked_about_again_answers_its_launch() -> None:
    """After an approved call ran, the identical call under the same key
    (a retry, ``handle`` after ``approve``) is not asked about again as if
    nothing ran: it answers the key's one launch (``deduplicated``)."""
    sim = Simulator()
    tools = _approving(sim)
    assert _deploy(tools).status == "approval_required"  # a person is asked
    assert _deploy(tools, approved=True).status == "ok"
    again = _deploy(tools)
    assert (again.status, again.content["deduplicated"]) == ("ok", True), again.to_json()
    assert _launches(sim) == 1


def test_c5_c8_a_launched_key_denied_now_is_never_executed_false() -> None:
    """A policy that now denies a key that already launched gets its
    way (nothing more is sent), but the model is never told nothing ran: the
    result is ``uncertain`` with the task's locator and says to read it."""
    sim, policy = Simulator(), _Turning()
    tools = _approving(sim, policy)
    assert _deploy(tools).status == "approval_required"  # a person is asked
    first = _deploy(tools, approved=True)
    assert first.status == "ok"
    policy.deny = True
    for approved in (False, True):
        denied = _deploy(tools, approved=approved)
        content = denied.content
        assert (denied.status, content["error_type"]) == ("uncertain", "policy_denied"), content
        assert content.get("executed") is not False
        assert content["task_id"] == first.content["task_id"]
        assert "read_command_output" in content["instruction"]
    assert _launches(sim) == 1


def _after_launch(sent: dict[str, Any], code: str = "approval_rejected") -> None:
    assert (sent["status"], sent["error_type"]) == ("uncertain", code), sent
    assert sent.get("executed") is not False
    assert isinstance(sent["task_id"], str)
    assert "read_command_output" in sent["instruction"]


def test_c5_anthropic_reject_or_handle_after_approve_never_says_nothing_ran() -> None:
    """``reject(block)`` after ``approve(block)`` ran it answers from the
    record (``uncertain``, the locator); ``handle(block)`` after ``approve``
    answers the one launch (``deduplicated``), never "nothing ran"."""
    from tests.approval_rig import RESUME

    sim = Simulator()
    tools = make_toolset(sim)
    first = FIRST["anthropic"](tools, "echo deploy")
    ran = json.loads(RESUME["anthropic"](tools, first.saved, True, ""))
    assert ran["status"] == "ok"
    _after_launch(json.loads(RESUME["anthropic"](tools, first.saved, False, "")))
    from anthropic.types import ToolUseBlock

    from sandrail.adapters.anthropic import AnthropicTools
    from tests.approval_rig import RUN_ID

    again = AnthropicTools(tools, run_id=RUN_ID).handle_sync(
        ToolUseBlock.model_validate_json(first.saved)
    )
    sent = json.loads(again["content"])
    assert (sent["status"], sent["deduplicated"]) == ("ok", True), sent
    assert _launches(sim) == 1


def test_c5_pydantic_ai_reject_after_approve_never_says_nothing_ran() -> None:
    """The saved history approved (it ran), then the same history
    answered with ``rejected(toolset, requests=..., tool_call_id=...)``."""
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    from sandrail.adapters.pydantic_ai import rejected
    from tests.approval_rig import _pydantic_agent, _pydantic_returned

    sim = Simulator()
    tools = make_toolset(sim)
    first = _pydantic_agent(tools, "echo deploy").run_sync("go")
    requests = first.output
    assert isinstance(requests, DeferredToolRequests)
    history = first.all_messages()
    outcomes = []
    for approve in (True, False):  # the rejection is made after the approved copy ran
        answer = True if approve else rejected(tools, requests=requests, tool_call_id="t1")
        resumed = _pydantic_agent(tools, "echo deploy").run_sync(
            message_history=history,
            deferred_tool_results=DeferredToolResults(approvals={"t1": answer}),
        )
        outcomes.append(json.loads(_pydantic_returned(resumed)))
    assert outcomes[0]["status"] == "ok"
    _after_launch(outcomes[1])
    assert _launches(sim) == 1


def test_c5_agents_sdk_reject_after_approve_never_says_nothing_ran() -> None:
    """One saved copy approved (it ran), another copy of it rejected
    with ``rejection(toolset, item=item)``."""
    from agents import Runner, RunState
    from agents.testing import assistant_message

    from sandrail.adapters.openai_agents import rejection
    from tests.approval_rig import _agents_agent

    sim = Simulator()
    tools = make_toolset(sim)
    first = FIRST["openai_agents"](tools, "echo deploy")
    assert _resume_agents(sim, first.saved, None, tools)["status"] == "ok"
    agent = _agents_agent(tools, [[assistant_message("done")]])

    async def reject() -> Any:
        state = await RunState.from_string(agent, first.saved)
        item = state.get_interruptions()[0]
        state.reject(item, rejection_message=rejection(tools, item=item))
        return await Runner.run(agent, state)

    result = asyncio.run(reject())
    (sent,) = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
    _after_launch(json.loads(sent))
    assert _launches(sim) == 1


def test_c5_mcp_keyed_retry_after_approve_is_not_asked_again() -> None:
    """A keyed retry of a call the person approved and that ran is not
    asked about again ("Nothing runs unless you approve"): it answers the
    one launch; a decline of it then is never "nothing ran"."""
    from tests.approval_rig import _mcp_call

    sim = Simulator()
    tools = make_toolset(sim)
    ran, _ = _mcp_call(tools, "echo deploy", "approve")
    assert ran.meta["sandrail/status"] == "ok"
    again, asked = _mcp_call(tools, "echo deploy", "decline")
    assert asked == []
    sent = json.loads(again.content[0].text)
    assert (sent["status"], sent["deduplicated"]) == ("ok", True), sent
    assert _launches(sim) == 1


# -- the MCP question masks env values wherever they appear


@pytest.mark.parametrize(
    "arguments",
    [
        {"command": "echo deploy hunter2-SECRET-9f8e7d", "env": {"TOKEN": "hunter2-SECRET-9f8e7d"}},
        {
            "command": "echo deploy",
            "cwd": "/srv/hunter2-SECRET-9f8e7d",
            "env": {"T": "hunter2-SECRET-9f8e7d"},
        },
        {
            "command": "echo deploy hunter2-SECRET-9f8e7d",
            "env": [{"name": "TOKEN", "value": "hunter2-SECRET-9f8e7d"}],
        },
    ],
    ids=["command", "cwd", "strict-env-list"],
)
def test_c17_mcp_question_masks_env_values_wherever_they_appear(
    arguments: dict[str, Any],
) -> None:
    """The person is shown the call with every env value masked, in the
    command and cwd too, as results mask them."""
    from sandrail.adapters._mcp_approval import question

    asked = question("run_command", arguments, "the simulator", "ask-1")
    assert "hunter2-SECRET-9f8e7d" not in asked
    assert "echo deploy" in asked


# -- always_approve approves no call the person did not see


def test_agents_sdk_always_approve_lets_no_unseen_call_run() -> None:
    """``state.approve(item, always_approve=True)`` names no call, so it
    approves none: the later ``--force`` call (never shown to a person) and
    the first one both meet the policy again (``approval_required``,
    nothing ran), while ``state.approve(item)`` runs exactly its call."""
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sandrail.adapters.openai_agents import function_tools

    offline = RunConfig(tracing_disabled=True)
    for always in (True, False):
        sim = Simulator()
        tools = make_toolset(sim)
        model = ScriptedModel(
            [
                [function_call("run_command", DEPLOY, call_id="call_1")],
                [
                    function_call(
                        "run_command",
                        {**DEPLOY, "command": "echo deploying --force"},
                        call_id="call_2",
                    )
                ],
                [assistant_message("done")],
            ]
        )
        agent = Agent(name="ops", model=model, tools=function_tools(tools))

        async def run(agent: Any = agent, always: bool = always) -> Any:
            first = await Runner.run(agent, "Deploy.", run_config=offline)
            state = first.to_state()
            state.approve(state.get_interruptions()[0], always_approve=always)
            return await Runner.run(agent, state, run_config=offline)

        result = asyncio.run(run())
        sent = [
            json.loads(i.output)["status"]
            for i in result.new_items
            if i.type == "tool_call_output_item"
        ]
        if always:
            assert sent == ["approval_required", "approval_required"], sent
            assert _launches(sim) == 0
        else:
            assert sent[0] == "ok", sent
            assert _launches(sim) == 1


# -- nits: override_args are the person's


def _override(override: dict[str, Any]) -> dict[str, Any]:
    from pydantic_ai import DeferredToolResults, ToolApproved

    from tests.approval_rig import _pydantic_agent, _pydantic_returned

    sim = Simulator()
    tools = make_toolset(sim)
    first = _pydantic_agent(tools, "echo deploy everything").run_sync("go")
    resumed = _pydantic_agent(tools, "").run_sync(
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(
            approvals={"t1": ToolApproved(override_args=override)}
        ),
    )
    sent: dict[str, Any] = json.loads(_pydantic_returned(resumed))
    return sent


def test_pydantic_ai_override_args_take_an_env_mapping() -> None:
    """Nit: a person writes ``env`` as a mapping in ``override_args``; the
    strict profile's ``{name, value}`` list is made of it, not refused."""
    sent = _override({**NULLS, "command": "echo deploy staging", "env": {"STAGE": "staging"}})
    assert (sent["status"], sent["stdout"]) == ("ok", "deploy staging\n"), sent


def test_pydantic_ai_invalid_override_args_blame_the_person_not_the_model() -> None:
    """Nit: invalid ``override_args`` are the person's: the model is not told
    to fix them and try again."""
    sent = _override({**NULLS, "command": "echo deploy", "timeout": -5})
    assert sent["error_type"] == "e2b_command_arguments_invalid"
    assert "person" in sent["instruction"]
    assert "Fix these arguments" not in sent["instruction"]


def test_c3_c5_a_rejected_call_that_reused_a_launched_key_ran_nothing() -> None:
    """A limit: a rejected call with other arguments under a key that
    already launched (a reused tool_use id) never ran: ``executed: false``."""
    from tests.approval_rig import RESUME

    sim = Simulator()
    tools = make_toolset(sim)
    first = FIRST["anthropic"](tools, "echo deploy one")
    assert json.loads(RESUME["anthropic"](tools, first.saved, True, ""))["status"] == "ok"
    other = FIRST["anthropic"](tools, "echo deploy two")  # the same tool_use id and run_id
    sent = json.loads(RESUME["anthropic"](tools, other.saved, False, ""))
    assert (sent["status"], sent["executed"]) == ("error", False), sent
    assert _launches(sim) == 1
