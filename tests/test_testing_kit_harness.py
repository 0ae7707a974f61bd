"""sandrail.testing on the harnesses people build (what a newcomer
tries first): a Toolset or an adapter judged by the world, a snippet retried
under a new key counted as one snippet, the simulator naming how to script
a snippet, and an unscripted command caught instead of passing as ``ok``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import sandrail
from sandrail.core import TOOLS, ToolSet
from sandrail.interpreters.simulator import NOT_EMULATED, NOT_EMULATED_EXIT_CODE
from sandrail.testing import (
    HARNESS_LINE,
    ContractViolationError,
    Fault,
    FaultKind,
    Script,
    Simulator,
    World,
)

SNIPPET = "print(sum(range(10)))"
LOST_START = [Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]


def _snippet(code: str = SNIPPET) -> dict[str, Any]:
    return {"code": code, "language": "python"}


def _retrying(
    toolset: sandrail.Toolset, name: str, arguments: dict[str, Any], *, new_key: bool
) -> sandrail.ToolResult:
    """A harness's retry loop over a Toolset: retries ``uncertain``, under a
    new operation key when ``new_key`` (the bug) or the same one (right)."""
    for attempt in range(3):
        call_id = f"c1-{attempt}" if new_key else "c1"
        result = toolset.call_sync(
            name, arguments, call_id=call_id, operation_key=toolset.operation_key(call_id)
        )
        if result.status != "uncertain":
            return result
    return result


# -- a Toolset, and the adapters built on one ----------------------------------------


def test_a_worlds_toolset_is_judged_call_by_call() -> None:
    with World.simulated(LOST_START) as world:
        tools = world.toolset()
        result = _retrying(tools, "run_command", {"command": "echo hi"}, new_key=False)
        assert (result.status, result.content["stdout"]) == ("ok", "hi\n")
        assert [record.tool for record in world.calls] == ["run_command", "run_command"]
        assert world.calls[0].faults == [LOST_START[0]]
        assert world.launched_commands() == {"echo hi": 1}
        world.assert_contract()


def test_a_toolset_harness_that_retries_with_a_new_key_is_caught() -> None:
    with World.simulated(LOST_START) as world:
        tools = world.toolset(tools=("command",))
        _retrying(tools, "run_command", {"command": "echo hi"}, new_key=True)
        assert world.launched_commands()["echo hi"] == 2
        # Each task id launched once (C2 holds), and the judge names the harness's mistake.
        with pytest.raises(ContractViolationError, match="harness"):
            world.assert_contract()


def test_an_awaited_toolset_call_is_recorded_too() -> None:
    with World.simulated() as world:
        tools = world.toolset()

        async def run() -> sandrail.ToolResult:
            return await tools.call(
                "run_command", {"command": "echo hi"}, call_id="c1", operation_key="run-1:c1"
            )

        assert asyncio.run(run()).status == "ok"
        assert [record.key for record in world.calls] == ["run-1:c1"]
        world.assert_contract()


def test_a_native_owners_toolset_gets_the_kits_identity() -> None:
    with World.simulated(scripts={SNIPPET: Script.prints("45\n")}) as world:
        tools = world.toolset(owner="native")
        assert tools.names == tuple(
            name for name, record in TOOLS.items() if record.tool_set is not ToolSet.AGENT_CODE
        )
        result = tools.call_sync("run_code", _snippet(), call_id="c1", operation_key="run-1:c1")
        assert result.status == "ok", result.content
        world.assert_contract()


def test_the_harness_policy_and_the_fault_plan_both_count_for_a_toolset() -> None:
    denied = sandrail.Deny(reason="no network tools")
    with World.simulated([Fault(effect="Start", kind=FaultKind.AUTHORITY_LOST)]) as world:
        tools = world.toolset(
            authorize=lambda request: (
                denied if "curl" in str(request.call.arguments) else sandrail.ALLOW
            )
        )
        refused = tools.call_sync(
            "run_command", {"command": "curl x"}, call_id="c1", operation_key="run-1:c1"
        )
        assert refused.content["error_type"] == "policy_denied"
        lost = tools.call_sync(
            "run_command", {"command": "echo hi"}, call_id="c2", operation_key="run-1:c2"
        )
        assert lost.status in ("error", "uncertain")  # authority lost at the start
        assert world.calls[1].authority_lost
        world.assert_contract()


def test_a_pydantic_ai_agent_on_a_worlds_toolset_is_judged() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    from sandrail.adapters.pydantic_ai import toolset as pydantic_toolset

    def model(messages: list[Any], info: Any) -> ModelResponse:
        if any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts):
            return ModelResponse(parts=[TextPart("done")])
        arguments = {"code": SNIPPET, "language": "python", "timeout": None, "env": None}
        return ModelResponse(parts=[ToolCallPart("sandbox_run_code", arguments, "t1")])

    with World.simulated(scripts={SNIPPET: Script.prints("45\n")}) as world:
        agent = Agent(FunctionModel(model), toolsets=[pydantic_toolset(world.toolset())])
        result = agent.run_sync("Add up 0..9 in the sandbox.")
        (returned,) = [
            p.content
            for m in result.all_messages()
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        assert json.loads(str(returned))["stdout"] == "45\n"
        assert [record.tool for record in world.calls] == ["sandbox_run_code"]
        assert world.launched_commands() == {SNIPPET: 1}
        world.assert_contract()


def test_an_anthropic_harness_repeating_an_uncertain_call_is_judged() -> None:
    from sandrail.adapters.anthropic import AnthropicTools

    arguments = {
        "command": "echo hi",
        "cwd": None,
        "timeout": None,
        "env": None,
        "background": None,
    }
    with World.simulated(LOST_START) as world:
        tools = AnthropicTools(world.toolset(), run_id="conversation-1")
        answers = [
            tools.handle_sync(
                {"type": "tool_use", "id": f"toolu_{n}", "name": "run_command", "input": arguments}
            )
            for n in (1, 2)  # the model repeats the call it read as uncertain
        ]
        assert [json.loads(str(a["content"]))["status"] for a in answers] == ["uncertain", "ok"]
        assert [record.key for record in world.calls] == ["conversation-1:toolu_1"] * 2
        assert world.launched_commands() == {"echo hi": 1}
        world.assert_contract()


def test_an_agents_sdk_agent_on_a_worlds_toolset_is_judged() -> None:
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sandrail.adapters.openai_agents import function_tools

    arguments = {
        "command": "echo hi",
        "cwd": None,
        "timeout": None,
        "env": None,
        "background": None,
    }
    model = ScriptedModel(
        [[function_call("run_command", arguments, call_id="call_1")], [assistant_message("ok")]]
    )
    with World.simulated() as world:
        agent = Agent(name="ops", model=model, tools=function_tools(world.toolset()))
        asyncio.run(Runner.run(agent, "Say hi.", run_config=RunConfig(tracing_disabled=True)))
        assert [(record.tool, record.status) for record in world.calls] == [("run_command", "ok")]
        assert world.launched_commands() == {"echo hi": 1}
        world.assert_contract()


def test_a_toolset_made_around_the_world_is_still_refused_not_judged() -> None:
    with World.simulated() as world:
        assert world.sim is not None
        tools = sandrail.Toolset(
            backend=world.sim,
            session_id="session-1",
            owner=sandrail.AgentOwner(agent_id="agent-1"),
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
        )
        tools.call_sync("run_command", {"command": "echo hi"}, call_id="c", operation_key="r:c")
        with pytest.raises(RuntimeError, match=r"world\.toolset\(\)"):
            world.assert_contract()


def test_a_toolset_the_world_cannot_make_is_refused_clearly(tmp_path: Path) -> None:
    with World.simulated() as world:
        with pytest.raises(TypeError, match="leave out backend="):
            world.toolset(backend=Simulator())
        with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
            world.toolset(colour="red")
        with pytest.raises(TypeError, match="owner must be"):
            world.toolset(owner="root")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="tools must name"):
            world.toolset(tools=("shell",))  # type: ignore[arg-type]
    with World.simulated(record_dir=tmp_path) as world:
        with pytest.raises(ValueError, match=r'tools=\("command",\)'):
            world.toolset()
        tools = world.toolset(tools=("command",))
        tools.call_sync("run_command", {"command": "echo hi"}, call_id="c", operation_key="r:c")
        world.assert_contract()
    (cassette,) = world.recordings
    assert cassette.stat().st_size > 0


# -- a snippet counts by its source --------------------------------------------------


def test_a_snippet_retried_under_a_new_key_counts_as_two_launches() -> None:
    scripts = {SNIPPET: Script.prints("45\n")}
    with World.simulated(LOST_START, scripts=scripts) as world:
        result = _retrying(world.toolset(), "sandbox_run_code", _snippet(), new_key=True)
        assert result.status == "ok"
        assert world.launched_commands() == {SNIPPET: 2}  # the documented check (<= 1) fails
    with World.simulated(LOST_START, scripts=scripts) as world:
        result = _retrying(world.toolset(), "sandbox_run_code", _snippet(), new_key=False)
        assert (result.status, result.content["stdout"]) == ("ok", "45\n")
        assert world.launched_commands() == {SNIPPET: 1}
        world.assert_contract()


def test_a_snippet_on_a_port_counts_by_its_source_too() -> None:
    with World.simulated(scripts={SNIPPET: Script.prints("45\n")}) as world:
        port = world.code_tools()
        world.call(port, world.code_tool, _snippet(), key="k1")
        world.call(port, world.code_tool, _snippet(), key="k2")
        world.call(port, world.code_tool, _snippet(), key="k1")  # a true retry: no launch
        assert world.launched_commands() == {SNIPPET: 2}


# -- the simulator says how to script a snippet --------------------------------------


def test_an_unscripted_snippet_is_told_to_key_its_script_by_source() -> None:
    with World.simulated(unscripted="allow") as world:
        port = world.code_tools()
        result = world.call(port, world.code_tool, _snippet(), key="k1")
        assert result.content["exit_code"] == NOT_EMULATED_EXIT_CODE
        assert result.content["stderr"] == NOT_EMULATED
        assert "a snippet is keyed by its source" in NOT_EMULATED
    # ...and keying it so works, as the message says.
    with World.simulated(scripts={SNIPPET: Script.prints("45\n")}) as world:
        port = world.code_tools()
        result = world.call(port, world.code_tool, _snippet(), key="k1")
        assert (result.content["exit_code"], result.content["stdout"]) == (0, "45\n")


# -- an unscripted command fails the test by default ---------------------------------


def test_an_unscripted_command_is_a_violation_by_default() -> None:
    with World.simulated() as world:
        port = world.command_tools()
        result = world.call(port, "run_command", {"command": "make test"}, key="k1")
        assert (result.status, result.content["exit_code"]) == ("ok", 127)  # what fooled them
        world.call(port, "run_command", {"command": "echo fine"}, key="k2")
        assert world.unscripted() == ["make test"]
        (violation,) = world.violations()
        assert (violation.line, violation.call) == ("unscripted", 1)
        assert "scripts={text: Script.prints(...)}" in violation.message
        with pytest.raises(ContractViolationError, match=r"unscripted \(call 1\)"):
            world.assert_contract()


def test_an_unscripted_snippet_is_named_by_its_source() -> None:
    with World.simulated() as world:
        world.call(world.code_tools(), world.code_tool, _snippet(), key="k1")
        assert world.unscripted() == [SNIPPET]
        assert [v.line for v in world.violations()] == ["unscripted"]


def test_scripted_emulated_or_allowed_commands_are_not_violations() -> None:
    scripts = {"make test": Script.prints("ok\n"), SNIPPET: Script.prints("45\n")}
    with World.simulated(scripts=scripts) as world:
        world.call(world.command_tools(), "run_command", {"command": "make test"}, key="k1")
        world.call(world.command_tools(), "run_command", {"command": "seq 3"}, key="k2")
        world.call(world.code_tools(), world.code_tool, _snippet(), key="k3")
        assert world.unscripted() == []
        world.assert_contract()
    with World.simulated(unscripted="allow") as world:
        world.call(world.command_tools(), "run_command", {"command": "make test"}, key="k1")
        assert world.unscripted() == ["make test"]
        world.assert_contract()
    with World.simulated(default=Script.prints("anything\n")) as world:  # the test's choice
        world.call(world.command_tools(), "run_command", {"command": "make test"}, key="k1")
        assert world.unscripted() == []
        world.assert_contract()


def test_an_unscripted_command_that_never_launched_is_no_violation() -> None:
    with World.simulated([Fault(effect="Start", kind=FaultKind.NOT_DELIVERED)]) as world:
        result = world.call(world.command_tools(), "run_command", {"command": "make"}, key="k1")
        assert result.status != "ok"
        assert world.launched_commands() == {}
        assert world.unscripted() == []
        world.assert_contract()


def test_a_bad_unscripted_choice_is_refused() -> None:
    with pytest.raises(ValueError, match='unscripted must be "fail" or "allow"'):
        World.simulated(unscripted="ignore")  # type: ignore[arg-type]


def _harness(port: Any, arguments: dict[str, Any], keys: list[str]) -> list[str]:
    """A harness that makes one call, then a call per retry key while the
    answer is uncertain; the statuses it got."""
    statuses = []
    for number, key in enumerate(keys):
        request = sandrail.ToolRequest(
            call=sandrail.ToolCall(name="run_command", call_id=f"c{number}", arguments=arguments),
            operation_key=key,
            session_id=port.settings.session_id,
            definition=port.definition("run_command"),
            identity=sandrail.AgentIdentity(agent_id=port.settings.owner.agent_id),
        )
        statuses.append(port.execute_sync(request).status)
        if statuses[-1] != "uncertain":
            break
    return statuses


def test_c2_the_judge_names_a_retry_of_an_uncertain_call_under_a_new_key() -> None:
    """The most common retry bug: C2 holds task by task, yet the command runs
    twice. ``assert_contract()`` alone catches it, as a harness violation."""
    lost = [Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]
    with World.simulated(lost) as world:
        port = world.command_tools()
        assert _harness(port, {"command": "echo hi"}, ["run-1:c1", "run-1:c1:retry"]) == [
            "uncertain",
            "ok",
        ]
        with pytest.raises(ContractViolationError) as raised:
            world.assert_contract()
    (violation,) = raised.value.violations
    assert (violation.line, violation.call) == (HARNESS_LINE, 2)
    assert "under a new key 'run-1:c1:retry'" in violation.message
    assert "harness (call 2)" in str(raised.value)


def _harness_violation(world: World) -> Any:
    with pytest.raises(ContractViolationError) as raised:
        world.assert_contract()
    (violation,) = [v for v in raised.value.violations if v.line == HARNESS_LINE]
    return violation


def test_c2_a_conflict_under_the_key_does_not_settle_an_uncertain_call() -> None:
    """Other arguments under the uncertain call's key answer a conflict: that
    tells nothing of the first call, so the same call under a new key is
    still the retry bug (the command launches twice)."""
    lost = [Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]
    with World.simulated(lost, scripts={"./deploy.sh": Script.prints("x\n")}) as world:
        tools = world.toolset()
        deploy = {"command": "./deploy.sh"}
        first = tools.call_sync("run_command", deploy, call_id="c1", operation_key="run:c1")
        assert first.status == "uncertain"
        other = tools.call_sync(
            "run_command", {"command": "true"}, call_id="c1", operation_key="run:c1"
        )
        assert other.content.get("error_type") == "e2b_command_operation_conflict"
        tools.call_sync("run_command", deploy, call_id="c2", operation_key="run:c2")
        assert world.launched_commands()["./deploy.sh"] == 2
        violation = _harness_violation(world)
    assert violation.call == 3
    assert "under a new key 'run:c2'" in violation.message


def test_c2_the_same_call_under_a_new_key_in_a_new_session_is_the_retry_bug() -> None:
    """A new session is no way out: its key is a new task, the command may
    run twice."""
    lost = [Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]
    with World.simulated(lost, scripts={"./deploy.sh": Script.prints("x\n")}) as world:
        deploy = {"command": "./deploy.sh"}
        first = world.toolset().call_sync(
            "run_command", deploy, call_id="c1", operation_key="run:c1"
        )
        assert first.status == "uncertain"
        world.toolset(session_id="session-2").call_sync(
            "run_command", deploy, call_id="c1", operation_key="run2:c1"
        )
        assert world.launched_commands()["./deploy.sh"] == 2
        violation = _harness_violation(world)
    assert "under a new key 'run2:c1' in another session" in violation.message


def test_c2_an_identical_retry_answered_as_a_conflict_does_not_settle() -> None:
    """Were the port to answer the identical same-key retry with a conflict
    (the false conflict a session's masks once caused), the harness that
    then makes a new call still runs the command twice: the judge names it.
    The conflict is put in the world's log by hand, as such a port would."""
    lost = [Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]
    with World.simulated(lost, scripts={"./deploy.sh": Script.prints("x\n")}) as world:
        tools = world.toolset()
        deploy = {"command": "./deploy.sh"}
        tools.call_sync("run_command", deploy, call_id="c1", operation_key="run:c1")
        retry = tools.call_sync("run_command", deploy, call_id="c1", operation_key="run:c1")
        assert (retry.status, retry.content.get("deduplicated")) == ("ok", True)
        conflict = sandrail.ToolResult(
            status="error",
            content={
                **retry.content,
                "status": "error",
                "ok": False,
                "error_type": "e2b_command_operation_conflict",
            },
        )
        world.calls[1].result = conflict
        tools.call_sync("run_command", deploy, call_id="c3", operation_key="run:c3")
        violation = _harness_violation(world)
    assert violation.call == 3


def test_c2_the_judge_passes_a_retry_under_the_same_key_and_a_new_call_once_settled() -> None:
    lost = [Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]
    with World.simulated(lost) as world:
        port = world.command_tools()
        assert _harness(port, {"command": "echo hi"}, ["k1", "k1"]) == ["uncertain", "ok"]
        # Settled: the same command again is a call of its own.
        assert _harness(port, {"command": "echo hi"}, ["k2"]) == ["ok"]
        # Other arguments under a new key are another call too.
        world.assert_contract()


@pytest.mark.parametrize(
    ("first", "retry"),
    [
        ({"command": "echo hi"}, {"command": "echo hi", "timeout": 300}),
        ({"command": "echo hi"}, {"command": "echo hi", "timeout": 600}),  # capped to 300
        (
            {"command": "echo hi", "background": True},
            {"command": "echo hi", "background": True, "background_timeout": 300},
        ),
    ],
)
def test_a_port_harness_that_retries_under_a_new_key_spelling_a_default_is_caught(
    first: dict[str, Any], retry: dict[str, Any]
) -> None:
    """The retry spells out the deadline the port sets anyway: the same call
    to the port, so a new key for it is the harness's mistake, named as such
    (the judge reads calls as the port does, its deadline included)."""
    with World.simulated(LOST_START) as world:
        port = world.command_tools()
        assert world.call(port, "run_command", first, key="run:c1").status == "uncertain"
        world.call(port, "run_command", retry, key="run:c1:retry-1")
        assert world.launched_commands()["echo hi"] == 2
        with pytest.raises(ContractViolationError, match="harness"):
            world.assert_contract()
