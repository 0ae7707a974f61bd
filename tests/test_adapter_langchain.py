"""The LangChain adapter, in create_agent and LangGraph graphs driven by LangChain's
own scripted chat model, on the simulator (docs/howto/langgraph.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, ToolMessage, convert_to_openai_messages
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command
from pydantic import ValidationError

import sandrail
from sandrail.adapters import langchain as lc
from sandrail.core import ErrorCode, canonical_json
from sandrail.testing.strategies import schema_values
from tests.embed_rig import ARGUMENT_ERRORS, asks_for_rm, launches, toolset
from tests.langchain_rig import run_command, scripted, tool_messages

USER = {"messages": [{"role": "user", "content": "go"}]}


def _thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def _results(messages: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(message.content) for message in tool_messages(messages)]


def test_langchain_tools_are_base_tools_whose_schema_langchain_sends_unchanged() -> None:
    tools = toolset()
    made = lc.tools(tools)
    assert [tool.name for tool in made] == list(tools.names)
    for tool in made:
        assert isinstance(tool, BaseTool)
        sent = convert_to_openai_tool(tool)["function"]
        assert sent["name"] == tool.name
        assert sent["description"] == tools.definition(tool.name).description
        assert sent["parameters"] == tools.schema(tool.name, "openai-strict")


@pytest.mark.untraced
@pytest.mark.parametrize("name", ["run_command", "read_command_output", "stop_command"])
@pytest.mark.parametrize("profile", ["openai-strict", "full"])
def test_schema_honesty_what_langchain_sends_the_model_is_never_refused_as_invalid(
    name: str, profile: sandrail.Profile
) -> None:
    """Every argument valid against the parameters LangChain sends the model
    (``convert_to_openai_tool``) passes every argument check of the port when
    the model sends it back through the tool (the policy, asked last, denies)."""
    tools = toolset(authorize=lambda request: sandrail.Deny(reason="checked"))
    tool = next(t for t in lc.tools(tools, profile=profile, run_id="honesty") if t.name == name)
    sent = convert_to_openai_tool(tool)["function"]["parameters"]
    count = {"n": 0}

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(schema_values(sent))
    def check(arguments: dict[str, Any]) -> None:
        count["n"] += 1
        call = {"type": "tool_call", "name": name, "args": arguments, "id": f"c{count['n']}"}
        content = json.loads(tool.invoke(call).content)
        assert content.get("error_type") not in ARGUMENT_ERRORS, content
        assert content["error_type"] == ErrorCode.POLICY_DENIED.value, content

    check()


def test_c12_create_agent_sends_the_model_exactly_to_json_within_the_budget() -> None:
    tools = toolset(max_output_bytes=1500)
    model = scripted([[run_command("seq 9000", "call_1")], [run_command("echo héllo", "call_2")]])
    agent = create_agent(model, tools=lc.tools(tools))
    out = agent.invoke(USER)
    sent = tool_messages(model.sent[-1])
    assert len(sent) == 2
    for message in sent:
        text = message.content
        assert isinstance(text, str)
        assert len(text.encode("utf-8")) <= 1500
        assert canonical_json(json.loads(text)).decode("utf-8") == text  # to_json, as it is
        # What LangChain hands a provider: the same text.
        (converted,) = convert_to_openai_messages([message])
        assert converted["content"] == text
    first, second = (json.loads(m.content) for m in sent)
    assert first["status"] == "ok"
    assert first["output_budget"]["truncated"] is True
    assert second["stdout"] == "héllo\n"
    assert sent[0].status == "success"
    assert out["messages"][-1].content == "done"


def test_c2_a_background_run_is_read_by_cursor_through_the_model() -> None:
    tools = toolset()

    def read(cursor: int | None) -> Any:
        def turn(messages: list[Any]) -> list[dict[str, Any]]:
            results = [json.loads(m.content) for m in tool_messages(messages)]
            at = results[-1].get("stdout_cursor") if cursor is None and len(results) > 1 else 0
            args = {
                "task_id": results[0]["task_id"],
                "stdout_cursor": at,
                "stderr_cursor": None,
                "max_bytes": 4,
                "wait_seconds": 5,
            }
            return [{"name": "read_command_output", "args": args, "id": f"r{len(results)}"}]

        return turn

    model = scripted([[run_command("seq 3", "c1", background=True)], read(0), read(None)])
    agent = create_agent(model, tools=lc.tools(tools))
    out = agent.invoke(USER)
    started, first, second = _results(out["messages"])
    assert started["status"] == "ok"
    assert "stdout" not in started
    assert "read_command_output" in started["instruction"]
    assert first["stdout"] == "1\n2\n"
    assert first["stdout_cursor"] == 4
    assert second["stdout"] == "3\n"
    assert launches(tools) == 1


def test_c2_a_scripted_models_reused_call_ids_are_new_calls_on_a_new_turn() -> None:
    tools = toolset()
    model = scripted(
        [[run_command("echo one", "call_1")], "turn one", [run_command("echo two", "call_1")]]
    )
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    agent.invoke(USER, _thread("t"))
    out = agent.invoke({"messages": [{"role": "user", "content": "again"}]}, _thread("t"))
    one, two = _results(out["messages"])
    assert one["stdout"] == "one\n"
    assert two["stdout"] == "two\n"
    assert one["operation_key"] != two["operation_key"]
    assert two["operation_key"].startswith("langgraph:t:message:")
    assert two["operation_key"].endswith(":call_1")
    assert launches(tools) == 2


def test_c8_approval_approved_runs_that_call_once_under_its_key() -> None:
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/x", "c1")]])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    paused = agent.invoke(USER, _thread("a"))
    (question,) = paused["__interrupt__"]
    value = question.value
    assert value["type"] == "sandrail_approval"
    assert value["action_requests"][0]["args"]["command"] == "rm -rf /tmp/x"
    assert value["interaction_id"] == "ask-rm"
    assert value["tool_call_id"] == "c1"
    assert launches(tools) == 0
    out = agent.invoke(Command(resume={"type": "approve"}), _thread("a"))
    (result,) = _results(out["messages"])
    assert result["status"] == "ok"
    assert result["operation_key"] == value["operation_key"]
    assert launches(tools) == 1


def test_c5_approval_rejected_runs_nothing_and_the_model_reads_why() -> None:
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/x", "c1")]])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    agent.invoke(USER, _thread("r"))
    out = agent.invoke(Command(resume={"type": "reject", "message": "not today"}), _thread("r"))
    (message,) = tool_messages(out["messages"])
    result = json.loads(message.content)
    assert result["error_type"] == "approval_rejected"
    assert result["executed"] is False
    assert result["outcome_reason"] == "not today"
    assert message.status == "error"
    assert launches(tools) == 0


def test_c8_a_malformed_answer_is_refused_at_the_command_and_the_question_stays() -> None:
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/x", "c1")]])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    agent.invoke(USER, _thread("m"))
    with pytest.raises(ValidationError):
        agent.invoke(Command(resume={"type": "approved"}), _thread("m"))
    assert launches(tools) == 0
    out = agent.invoke(Command(resume={"type": "approve"}), _thread("m"))
    assert _results(out["messages"])[0]["status"] == "ok"
    assert launches(tools) == 1


def test_c8_deny_asks_nobody() -> None:
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("shutdown now", "c1")]])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    out = agent.invoke(USER, _thread("d"))
    assert "__interrupt__" not in out
    assert _results(out["messages"])[0]["error_type"] == "policy_denied"


def test_c2_one_interrupted_checkpoint_resumed_twice_launches_once() -> None:
    """Resuming the same saved checkpoint twice (approve, then approve again
    from the checkpoint the question was asked at) re-runs the tool node;
    the second run reconciles the first launch."""
    tools = toolset(authorize=asks_for_rm)
    saver = InMemorySaver()
    model = scripted([[run_command("rm -rf /tmp/x", "c1")], "ok", "ok"])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=saver)
    agent.invoke(USER, _thread("twice"))
    asked_at = agent.get_state(_thread("twice")).config
    first = agent.invoke(Command(resume={"type": "approve"}), _thread("twice"))
    second = agent.invoke(Command(resume={"type": "approve"}), asked_at)
    (one,) = _results(first["messages"])
    (two,) = _results(second["messages"])
    assert one["deduplicated"] is False
    assert two["deduplicated"] is True
    assert one["task_id"] == two["task_id"]
    assert launches(tools) == 1


def test_c5_a_rejection_on_a_copy_after_an_approval_ran_is_never_nothing_ran() -> None:
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/x", "c1")], "ok", "ok"])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    agent.invoke(USER, _thread("flip"))
    asked_at = agent.get_state(_thread("flip")).config
    agent.invoke(Command(resume={"type": "approve"}), _thread("flip"))
    rejected = agent.invoke(Command(resume={"type": "reject"}), asked_at)
    (result,) = _results(rejected["messages"])
    assert result.get("executed") is not False
    assert result["status"] in ("ok", "uncertain")
    assert launches(tools) == 1


def test_async_agent_runs_the_tools_and_approval_too() -> None:
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("echo a", "c1"), run_command("rm -rf /tmp/y", "c2")]])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())

    async def main() -> dict[str, Any]:
        paused = await agent.ainvoke(USER, _thread("async"))
        assert len(paused["__interrupt__"]) == 1
        return await agent.ainvoke(Command(resume={"type": "approve"}), _thread("async"))

    out = asyncio.run(main())
    echo, rm = _results(out["messages"])
    assert echo["stdout"] == "a\n"
    assert rm["status"] == "ok"
    assert launches(tools) == 2


def test_a_plain_graph_with_toolnode_keys_by_the_message_that_made_the_call() -> None:
    tools = toolset()
    builder = StateGraph(MessagesState)
    builder.add_node("act", ToolNode(lc.tools(tools)))
    builder.add_edge(START, "act")
    graph = builder.compile(checkpointer=InMemorySaver())
    call = run_command("echo graph", "g1")
    made = AIMessage(content="", tool_calls=[call], id="m-1")
    out = graph.invoke({"messages": [made]}, _thread("g"))
    (result,) = _results(out["messages"])
    assert result["stdout"] == "graph\n"
    assert result["operation_key"] == "langgraph:g:message:m-1:g1"


def test_a_node_that_invokes_a_tool_itself_keys_by_its_task() -> None:
    """Without a ToolNode (no ToolRuntime), the key's run is the thread and
    the node's checkpoint namespace, which a resume or re-run keeps."""
    tools = toolset()
    run = next(t for t in lc.tools(tools) if t.name == "run_command")

    def act(state: MessagesState, config: RunnableConfig) -> dict[str, Any]:
        return {
            "messages": [run.invoke({"type": "tool_call", **run_command("echo n", "n1")}, config)]
        }

    builder = StateGraph(MessagesState)
    builder.add_node("act", act)
    builder.add_edge(START, "act")
    graph = builder.compile(checkpointer=InMemorySaver())
    out = graph.invoke({"messages": []}, _thread("n"))
    (result,) = _results(out["messages"])
    assert result["stdout"] == "n\n"
    # The namespace act:<task id> is one part of the run (its ":" escaped).
    assert result["operation_key"].startswith("langgraph:n:task:act%3A")
    assert result["operation_key"].endswith(":n1")


def test_human_in_the_loop_middleware_gates_the_tools() -> None:
    """With the harness's policy allowing, LangChain's own middleware is the
    gate: approve runs the call once (a second resume of the same checkpoint
    reconciles it), edit runs the reviewer's arguments under the call's key,
    reject runs nothing."""
    tools = toolset()
    gate = HumanInTheLoopMiddleware(interrupt_on={"run_command": True})
    turns = [[run_command("echo a", "c1"), run_command("echo b", "c2"), run_command("rm x", "c3")]]
    model = scripted([*turns, "ok", "ok"])
    agent = create_agent(
        model, tools=lc.tools(tools), middleware=[gate], checkpointer=InMemorySaver()
    )
    paused = agent.invoke(USER, _thread("hitl"))
    assert len(paused["__interrupt__"][0].value["action_requests"]) == 3
    assert launches(tools) == 0
    asked_at = agent.get_state(_thread("hitl")).config
    edited = {**run_command("echo edited", "c2")["args"]}
    decisions = [
        {"type": "approve"},
        {"type": "edit", "edited_action": {"name": "run_command", "args": edited}},
        {"type": "reject", "message": "no"},
    ]
    out = agent.invoke(Command(resume={"decisions": decisions}), _thread("hitl"))
    by_id = {m.tool_call_id: m for m in tool_messages(out["messages"])}
    assert json.loads(by_id["c1"].content)["stdout"] == "a\n"
    assert '"stdout":"edited\\n"' in by_id["c2"].content
    assert by_id["c3"].status == "error"
    assert "sandrail" not in by_id["c3"].content
    assert launches(tools) == 2
    again = agent.invoke(Command(resume={"decisions": decisions}), asked_at)
    replayed = {m.tool_call_id: m.content for m in tool_messages(again["messages"])}
    assert json.loads(replayed["c1"])["deduplicated"] is True
    assert '"deduplicated":true' in replayed["c2"]
    assert launches(tools) == 2


def test_c1_a_call_without_a_safe_key_is_refused_and_runs_nothing() -> None:
    tools = toolset()
    run = next(t for t in lc.tools(tools) if t.name == "run_command")
    bare = json.loads(run.invoke({**run_command("echo x", "c")["args"]}).content)
    assert bare["error_type"] == ErrorCode.OPERATION_KEY_REQUIRED.value
    outside = json.loads(run.invoke({"type": "tool_call", **run_command("echo x", "c")}).content)
    assert outside["error_type"] == ErrorCode.OPERATION_KEY_REQUIRED.value
    assert "run_id" in outside["instruction"]
    failing = next(
        t for t in lc.tools(tools, run_id=lambda config: 1 / 0) if t.name == "run_command"
    )  # type: ignore[arg-type, misc]
    raised = json.loads(failing.invoke({"type": "tool_call", **run_command("echo x", "c")}).content)
    assert "ZeroDivisionError" in raised["instruction"]
    assert launches(tools) == 0
    given = next(t for t in lc.tools(tools, run_id="mine") if t.name == "run_command")
    ran = json.loads(given.invoke({"type": "tool_call", **run_command("echo x", "c")}).content)
    assert ran["operation_key"] == "mine:c"
    assert ran["stdout"] == "x\n"


def test_a_models_argument_named_like_langchains_own_keywords_is_refused_not_dropped() -> None:
    tools = toolset()
    run = next(t for t in lc.tools(tools, run_id="r") if t.name == "run_command")
    call = run_command("echo x", "c")
    call["args"]["config"] = "mine"
    content = json.loads(run.invoke({"type": "tool_call", **call}).content)
    assert content["error_type"] == ErrorCode.ARGUMENTS_INVALID.value
    assert launches(tools) == 0


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"run_id": ""}, ValueError),
        ({"run_id": 7}, TypeError),
        ({"timeout_seconds": 0}, ValueError),
        ({"timeout_seconds": float("nan")}, ValueError),
        ({"profile": "nope"}, ValueError),
    ],
)
def test_bad_adapter_settings_are_refused_at_once(options: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        lc.tools(toolset(), **options)


def test_c11_timeout_seconds_sends_the_model_the_canceled_or_uncertain_result() -> None:
    from tests.embed_rig import HANGS, RealTimeWaits

    tools = toolset(RealTimeWaits(limit=5))
    model = scripted([[run_command(HANGS, "c1")]])
    agent = create_agent(model, tools=lc.tools(tools, timeout_seconds=0.3))
    out = asyncio.run(agent.ainvoke(USER))
    (result,) = _results(out["messages"])
    assert result["status"] == "uncertain"
    assert result["operation_key"].endswith(":c1")


def test_tool_messages_flag_every_result_that_is_not_ok() -> None:
    tools = toolset()
    model = scripted([[run_command("exit 3", "c1"), run_command(" ", "c2")]])
    out = create_agent(model, tools=lc.tools(tools)).invoke(USER)
    exited, refused = tool_messages(out["messages"])
    assert isinstance(exited, ToolMessage)
    assert exited.status == "success"
    assert refused.status == "error"


def test_c15_big_output_stays_within_the_budget_and_whole_in_the_artifact_store() -> None:
    store = sandrail.MemoryArtifactStore()
    tools = toolset(max_output_bytes=1500, artifacts=store)
    model = scripted([[run_command("seq 9000", "c1")]])
    out = create_agent(model, tools=lc.tools(tools)).invoke(USER)
    (message,) = tool_messages(model.sent[-1])
    assert len(message.content.encode("utf-8")) <= 1500
    budget = json.loads(message.content)["output_budget"]
    assert budget["truncated"] is True
    kept = json.loads(store.read(budget["artifact_uri"]))  # the whole result, uncut
    assert kept["stdout"] == "".join(f"{n}\n" for n in range(1, 9001))
    assert out["messages"][-1].content == "done"


def test_c5_a_rejection_stands_against_a_later_approval_of_the_same_question() -> None:
    """The same saved question rejected first, then approved on a copy of the
    thread taken before: the first decision stands and nothing runs."""
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/x", "c1")], "ok", "ok"])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    agent.invoke(USER, _thread("first"))
    asked_at = agent.get_state(_thread("first")).config
    agent.invoke(Command(resume={"type": "reject", "message": "no"}), _thread("first"))
    late = agent.invoke(Command(resume={"type": "approve"}), asked_at)
    (result,) = _results(late["messages"])
    assert result["error_type"] == ErrorCode.APPROVAL_REJECTED.value
    assert result["executed"] is False
    assert "__interrupt__" not in late  # nobody is asked again about a rejected call
    assert launches(tools) == 0


@pytest.mark.parametrize("by_id", [False, True])
def test_c8_a_tool_call_edited_in_the_saved_state_before_the_answer_runs_nothing(
    by_id: bool,
) -> None:
    """The person is shown ``rm -rf /tmp/staging``; before they answer, the
    saved state's tool call is rewritten (``update_state``, same message id
    and tool call id) to ``rm -rf /tmp/PRODUCTION``. On resume the node runs
    again with the edited call, whose question LangGraph would answer with
    the approval given for the old one: the toolset never asks it, the model
    reads ``approval_mismatch`` and nothing runs (answered by the interrupt's
    id or not)."""
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/staging", "c1")], "ok"])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    paused = agent.invoke(USER, _thread("edit"))
    (question,) = paused["__interrupt__"]
    assert question.value["action_requests"][0]["args"]["command"] == "rm -rf /tmp/staging"
    state = agent.get_state(_thread("edit")).values["messages"]
    (made,) = [m for m in state if getattr(m, "tool_calls", None)]
    changed = AIMessage("", id=made.id, tool_calls=[run_command("rm -rf /tmp/PRODUCTION", "c1")])
    agent.update_state(_thread("edit"), {"messages": [changed]})
    answer = {"type": "approve"}
    out = agent.invoke(Command(resume={question.id: answer} if by_id else answer), _thread("edit"))
    assert launches(tools) == 0
    assert "__interrupt__" not in out  # nobody is asked about the changed call
    (result,) = _results(out["messages"])
    assert (result["status"], result["error_type"], result["executed"]) == (
        "error",
        ErrorCode.APPROVAL_MISMATCH.value,
        False,
    )


def _gated_agent(tools: sandrail.Toolset, saver: Any, mode: str) -> Any:
    gate = lc.human_in_the_loop(tools, {"run_command": True}, interrupt_mode=mode)
    model = scripted([[run_command("rm -rf /tmp/q", "c1")], "ok", "ok"])
    return create_agent(model, tools=lc.tools(tools), middleware=[gate], checkpointer=saver)


def _decision(mode: str, paused: dict[str, Any], kind: str) -> Any:
    decision: dict[str, Any] = {"type": kind}
    if kind == "reject":
        decision["message"] = "no"
    if kind == "edit":
        edited = run_command("rm -rf /tmp/edited", "c1")["args"]
        decision["edited_action"] = {"name": "run_command", "args": edited}
    if mode == "batched":
        return {"decisions": [decision]}
    (question,) = paused["__interrupt__"]
    return {question.id: decision}


@pytest.mark.parametrize("mode", ["batched", "per_call"])
@pytest.mark.parametrize(
    ("first", "second", "ran", "told"),
    [
        ("reject", "approve", 0, ("error", ErrorCode.APPROVAL_REJECTED.value)),
        ("reject", "edit", 0, ("error", ErrorCode.APPROVAL_REJECTED.value)),
        ("edit", "approve", 1, ("error", ErrorCode.APPROVAL_MISMATCH.value)),
        ("approve", "reject", 1, ("uncertain", ErrorCode.APPROVAL_REJECTED.value)),
    ],
)
def test_c8_c5_with_sandrails_middleware_the_first_decision_stands_on_a_checkpoint_copy(
    mode: str, first: str, second: str, ran: int, told: tuple[str, str], tmp_path: Any
) -> None:
    """``human_in_the_loop`` is LangChain's ``HumanInTheLoopMiddleware``
    with the first decision standing: one saved question answered twice, on
    a copy of the checkpoint taken before the first answer, by a second
    harness (its own toolset on the same SQLite record, its own agent). A
    rejection stands against a later approval or edit (nothing runs); an
    edit stands against the original approved later; a rejection after an
    approval launched is told as what ran (``uncertain``, never "not
    executed")."""
    import copy

    from sandrail.interpreters.simulator import Simulator
    from sandrail.records import SQLiteRecord

    sim = Simulator()
    with (
        SQLiteRecord(tmp_path / "owned.sqlite") as one,
        SQLiteRecord(tmp_path / "owned.sqlite") as other,
    ):
        here, there = toolset(sim, record=one), toolset(sim, record=other)
        saver = InMemorySaver()
        agent = _gated_agent(here, saver, mode)
        paused = agent.invoke(USER, _thread("h"))
        before = copy.deepcopy(saver)
        agent.invoke(Command(resume=_decision(mode, paused, first)), _thread("h"))
        late = _gated_agent(there, before, mode)
        out = late.invoke(Command(resume=_decision(mode, paused, second)), _thread("h"))
        (message,) = tool_messages(out["messages"])
        result = json.loads(message.content)
        assert (result["status"], result["error_type"]) == told
        assert message.status == "error"
        assert sum(sim.launches.values()) == ran


def test_c8_sandrails_middleware_runs_approvals_and_edits_as_langchains_does() -> None:
    """Legitimate decisions work as with LangChain's own middleware: an
    approval runs the call, an edit the reviewer's arguments, each once
    (the same decisions resumed again reconcile), a rejection nothing."""
    tools = toolset()
    gate = lc.human_in_the_loop(tools, {"run_command": True})
    turns = [[run_command("echo a", "c1"), run_command("echo b", "c2"), run_command("rm x", "c3")]]
    agent = create_agent(
        scripted([*turns, "ok", "ok"]),
        tools=lc.tools(tools),
        middleware=[gate],
        checkpointer=InMemorySaver(),
    )
    agent.invoke(USER, _thread("ok"))
    asked_at = agent.get_state(_thread("ok")).config
    edited = run_command("echo edited", "c2")["args"]
    decisions = [
        {"type": "approve"},
        {"type": "edit", "edited_action": {"name": "run_command", "args": edited}},
        {"type": "reject", "message": "no"},
    ]
    out = agent.invoke(Command(resume={"decisions": decisions}), _thread("ok"))
    by_id = {m.tool_call_id: m.content for m in tool_messages(out["messages"])}
    assert json.loads(by_id["c1"])["stdout"] == "a\n"
    assert '"stdout":"edited\\n"' in by_id["c2"]
    assert "User rejected" in by_id["c3"]
    again = agent.invoke(Command(resume={"decisions": decisions}), asked_at)
    replayed = {m.tool_call_id: m.content for m in tool_messages(again["messages"])}
    assert json.loads(replayed["c1"])["deduplicated"] is True
    assert '"deduplicated":true' in replayed["c2"]
    assert launches(tools) == 2


@pytest.mark.parametrize(
    "answer",
    [
        {"type": "approve", "args": {**run_command("rm -rf /", "c1")["args"]}},
        {"type": "approve", "edited_action": {"name": "run_command", "args": {}}},
        {"decisions": []},
        {"decisions": [{"type": "approve"}, {"type": "approve"}]},
        {"decisions": [{"type": "approve", "args": {}}]},
    ],
)
def test_c8_an_answer_that_is_not_one_plain_decision_is_refused_at_the_command(
    answer: dict[str, Any],
) -> None:
    """An approval edits nothing: one carrying arguments (which would be
    silently ignored) is refused at the ``Command``, as is a batch of other
    than one decision; the question stays open and nothing runs."""
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/x", "c1")]])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    agent.invoke(USER, _thread("args"))
    with pytest.raises(ValidationError):
        agent.invoke(Command(resume=answer), _thread("args"))
    assert launches(tools) == 0
    out = agent.invoke(Command(resume={"type": "approve"}), _thread("args"))  # still open
    assert _results(out["messages"])[0]["status"] == "ok"
    assert launches(tools) == 1


@pytest.mark.parametrize(
    ("answer", "ran"),
    [({"decisions": [{"type": "approve"}]}, 1), ({"decisions": [{"type": "reject"}]}, 0)],
)
def test_c8_the_question_takes_the_human_in_the_loop_answer_shape_too(
    answer: dict[str, Any], ran: int
) -> None:
    """The question has ``HumanInTheLoopMiddleware``'s shape (its
    ``action_requests``, one of them), so its batched answer, a list of one
    decision, is taken as that decision."""
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/x", "c1")]])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    agent.invoke(USER, _thread("shape"))
    out = agent.invoke(Command(resume=answer), _thread("shape"))
    (result,) = _results(out["messages"])
    assert result["status"] == ("ok" if ran else "error")
    assert launches(tools) == ran


def test_c17_a_value_the_session_masks_is_masked_in_the_question_too() -> None:
    """Once a value was passed in ``env``, results mask it in every later
    call; the question a person is shown about a later command whose text
    holds it (its arguments and its description) masks it as well."""
    secret = "tok_live_9f8e7d6c5b4a"
    tools = toolset(authorize=asks_for_rm)
    env = [{"name": "TOKEN", "value": secret}]
    turns = [[run_command("echo deploying", "c1", env=env)], [run_command(f"rm {secret}", "c2")]]
    agent = create_agent(scripted(turns), tools=lc.tools(tools), checkpointer=InMemorySaver())
    paused = agent.invoke(USER, _thread("mask"))
    (question,) = paused["__interrupt__"]
    shown = json.dumps(question.value)
    assert secret not in shown
    assert question.value["action_requests"][0]["args"]["command"] == "rm <redacted>"


def _edit_asked_call(agent: Any, config: dict[str, Any], edit: str, command: str) -> None:
    """Edit the checkpoint between the question and its answer: the paused
    call's arguments, and its tool call id or its model message."""
    from langchain_core.messages import RemoveMessage

    asked = agent.get_state(config).values["messages"][-1]
    call_id = "c9" if edit == "new_call_id" else asked.tool_calls[0]["id"]
    changed = AIMessage("", id=asked.id, tool_calls=[run_command(command, call_id)])
    if edit == "new_message":
        update = [
            RemoveMessage(id=asked.id),
            AIMessage("", id="other", tool_calls=changed.tool_calls),
        ]
    else:
        update = [changed]
    agent.update_state(config, {"messages": update}, as_node="model")


@pytest.mark.parametrize("edit", ["same_ids", "new_call_id", "new_message"])
def test_c8_an_answer_resumed_onto_an_edited_call_runs_nothing(edit: str) -> None:
    """A person answers the question they were shown; a checkpoint edited in
    between (other arguments, and a tool call id or a model message that
    change the key) gets no approval from that answer: nothing runs."""
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/cache", "c1")], "ok", "ok"])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    config = _thread("edited-" + edit)
    agent.invoke(USER, config)
    _edit_asked_call(agent, config, edit, "rm -rf /tmp/cache; echo EVIL")
    out = agent.invoke(Command(resume={"type": "approve"}), config)
    (result,) = _results(out["messages"])
    assert (result["error_type"], result["executed"]) == ("approval_mismatch", False), result
    assert launches(tools) == 0


@pytest.mark.parametrize("edit", ["same_ids", "new_call_id"])
def test_c8_sandrails_middleware_gives_an_edited_call_no_approval(edit: str) -> None:
    """The same through sandrail's ``human_in_the_loop``: the person's
    approval covers the call they were shown, not the one the checkpoint
    holds after an edit."""
    tools = toolset()
    gate = lc.human_in_the_loop(tools, {"run_command": True})
    model = scripted([[run_command("echo safe", "c1")], "ok", "ok"])
    agent = create_agent(
        model, tools=lc.tools(tools), middleware=[gate], checkpointer=InMemorySaver()
    )
    config = _thread("hitl-edited-" + edit)
    agent.invoke(USER, config)
    _edit_asked_call(agent, config, edit, "echo EVIL")
    out = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    (result,) = _results(out["messages"])
    assert (result["error_type"], result["executed"]) == ("approval_mismatch", False), result
    assert launches(tools) == 0


@pytest.mark.parametrize("mode", ["batched", "per_call"])
@pytest.mark.parametrize("edit", ["same_ids", "new_call_id"])
@pytest.mark.parametrize("awaited", [False, True])
def test_c8_sandrails_middleware_in_each_mode_gives_an_edited_call_no_approval(
    mode: str, edit: str, awaited: bool
) -> None:
    """Both of the middleware's interrupt modes, invoked and awaited: an
    answer resumed onto a call edited after the question runs nothing (it is
    refused, or, per call, where answers go by question id, the edited call
    is asked about afresh), and the same answer without the edit runs the
    call once."""

    def invoke(agent: Any, value: Any, config: dict[str, Any]) -> Any:
        return asyncio.run(agent.ainvoke(value, config)) if awaited else agent.invoke(value, config)

    for edited in (True, False):
        tools = toolset()
        agent = _gated_agent(tools, InMemorySaver(), mode)
        config = _thread(f"modes-{mode}-{edit}-{awaited}-{edited}")
        paused = invoke(agent, USER, config)
        if edited:
            _edit_asked_call(agent, config, edit, "echo EVIL")
        out = invoke(agent, Command(resume=_decision(mode, paused, "approve")), config)
        results = _results(out["messages"])
        if edited and not results:
            (asked,) = out["__interrupt__"]
            assert "echo EVIL" in json.dumps(asked.value)
            assert launches(tools) == 0
            continue
        (result,) = results
        if edited:
            assert (result["error_type"], result["executed"]) == ("approval_mismatch", False)
            assert launches(tools) == 0
        else:
            assert result["status"] == "ok", result
            assert launches(tools) == 1


def _reorder_asked_calls(agent: Any, config: dict[str, Any]) -> None:
    """Reverse the order of the paused model message's tool calls (same
    message id, same calls): nothing else changes."""
    asked = [
        m for m in agent.get_state(config).values["messages"] if getattr(m, "tool_calls", None)
    ]
    reordered = AIMessage("", id=asked[-1].id, tool_calls=list(reversed(asked[-1].tool_calls)))
    agent.update_state(config, {"messages": [reordered]}, as_node="model")


@pytest.mark.parametrize("gate", ["policy", "batched", "per_call"])
@pytest.mark.parametrize("reordered", [False, True])
@pytest.mark.parametrize("awaited", [False, True])
def test_c8_an_answer_given_by_position_lands_on_no_call_after_the_calls_were_reordered(
    gate: str, reordered: bool, awaited: bool
) -> None:
    """Two calls wait for a person: ``rm -rf /tmp/staging`` first, then
    ``rm -rf /tmp/PRODUCTION``. The person answers by position (a bare
    ``Command(resume=...)``, which LangGraph hands to the first pending
    question, or a batch of decisions in the order shown), approving the
    first (unedited, LangGraph wants several pending questions answered by
    id). Were the saved calls reordered in between, that approval would
    land on PRODUCTION, a call that was asked about too: every question is
    kept with its place (the task's path, the calls' order), so after the
    reorder no answer lands anywhere and nothing runs. Without it, staging
    runs, once."""
    calls = [run_command("rm -rf /tmp/staging", "c1"), run_command("rm -rf /tmp/PRODUCTION", "c2")]
    tools = toolset(authorize=asks_for_rm) if gate == "policy" else toolset()
    middleware = (
        []
        if gate == "policy"
        else [lc.human_in_the_loop(tools, {"run_command": True}, interrupt_mode=gate)]
    )
    agent = create_agent(
        scripted([calls, "ok", "ok"]),
        tools=lc.tools(tools),
        middleware=middleware,
        checkpointer=InMemorySaver(),
    )

    def invoke(value: Any, config: dict[str, Any]) -> Any:
        return asyncio.run(agent.ainvoke(value, config)) if awaited else agent.invoke(value, config)

    config = _thread(f"reorder-{gate}-{reordered}-{awaited}")
    paused = invoke(USER, config)
    approve, reject = {"type": "approve"}, {"type": "reject", "message": "no"}
    if gate == "batched":
        answer: Any = {"decisions": [approve, reject]}
    elif reordered:
        # The reorder made new tasks: LangGraph takes a bare answer for the
        # first of them (its questions' ids are gone).
        answer = approve
    else:  # several questions pending: LangGraph wants them answered by id
        answer = {
            q.id: approve if q.value["tool_call_id"] == "c1" else reject
            for q in paused["__interrupt__"]
        }
    if reordered:
        _reorder_asked_calls(agent, config)
    out = invoke(Command(resume=answer), config)
    ran = [
        json.loads(m.content)["command"]
        for m in tool_messages(out["messages"])
        if m.content.startswith("{") and json.loads(m.content)["status"] == "ok"
    ]
    assert ran == ([] if reordered else ["rm -rf /tmp/staging"])
    assert launches(tools) == (0 if reordered else 1)


def test_c2_c8_a_call_made_again_while_its_first_waits_for_a_person_runs_once() -> None:
    """The model makes ``rm -rf /tmp/x``, which waits for a person; the user
    says something new instead of answering, and the model makes the same
    call again (a new message, a new call id): it repeats the unsettled
    first call, so it runs under that call's key, and its own question,
    shown where it stands, is what the person answers. Approved, it runs
    once; resumed again, it reconciles."""
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/x", "c1")], [run_command("rm -rf /tmp/x", "c2")]])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    config = _thread("again")
    agent.invoke(USER, config)
    paused = agent.invoke({"messages": [{"role": "user", "content": "go on"}]}, config)
    (question,) = paused["__interrupt__"]
    assert question.value["tool_call_id"] == "c2"
    out = agent.invoke(Command(resume={question.id: {"type": "approve"}}), config)
    (result,) = [r for r in _results(out["messages"]) if r.get("call_id") == "c2"]
    assert result["status"] == "ok", result
    assert launches(tools) == 1


@pytest.mark.parametrize("rejected", ["c1", "c2"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_c2_c8_two_identical_calls_of_one_turn_are_two_decisions(
    rejected: str, asynchronous: bool
) -> None:
    """One model message makes the same call twice (``c1`` and ``c2``, the
    same command); the person rejects one and approves the other, in either
    order. Each tool call id is its own call: the approved one runs once
    under its own key, the rejected one reads ``approval_rejected`` naming
    that call, never the other's decision."""
    approved = "c2" if rejected == "c1" else "c1"
    tools = toolset(authorize=asks_for_rm)
    twice = [run_command("rm -rf /tmp/x", "c1"), run_command("rm -rf /tmp/x", "c2")]
    agent = create_agent(
        scripted([twice, "ok"]), tools=lc.tools(tools), checkpointer=InMemorySaver()
    )
    config = _thread("twice-in-one-turn")

    def invoke(value: Any) -> Any:
        if asynchronous:
            return asyncio.run(agent.ainvoke(value, config))
        return agent.invoke(value, config)

    paused = invoke(USER)
    asked = {question.value["tool_call_id"]: question for question in paused["__interrupt__"]}
    assert asked["c1"].value["operation_key"] != asked["c2"].value["operation_key"]
    answers = {
        asked[rejected].id: {"type": "reject", "message": "not this one"},
        asked[approved].id: {"type": "approve"},
    }
    out = invoke(Command(resume=answers))
    told = {m.tool_call_id: json.loads(m.content) for m in tool_messages(out["messages"])}
    assert told[approved]["status"] == "ok"
    assert told[approved]["operation_key"] == asked[approved].value["operation_key"]
    assert (told[rejected]["error_type"], told[rejected]["executed"]) == (
        ErrorCode.APPROVAL_REJECTED.value,
        False,
    )
    assert told[rejected]["call_id"] == rejected
    assert told[rejected]["operation_key"] == asked[rejected].value["operation_key"]
    assert launches(tools) == 1


def test_c2_a_fork_keeps_the_key_of_a_call_its_checkpoint_holds_and_not_of_an_earlier_turn() -> (
    None
):
    """Time travel on one thread with sandrail's ``HumanInTheLoopMiddleware``:
    the call approved in turn 2 ran once. Resumed again from the checkpoint
    where its question was pending (found in ``get_state_history``), it keeps
    its key and reconciles. Forked from the end of turn 1, before the model
    message that made it, the model answers again: a new message, so a new
    call with a new key, asked about afresh (nothing runs before the answer)
    and run once more only when the person approves it again."""
    tools = toolset()
    gate = lc.human_in_the_loop(tools, {"run_command": True})
    deploy = [run_command("echo deploy", "c1")]
    model = scripted(["hello", deploy, "ok", "ok", deploy, "ok"])
    agent = create_agent(
        model, tools=lc.tools(tools), middleware=[gate], checkpointer=InMemorySaver()
    )
    config = _thread("fork")
    agent.invoke({"messages": [{"role": "user", "content": "hi"}]}, config)
    end_of_turn_1 = agent.get_state(config).config
    agent.invoke({"messages": [{"role": "user", "content": "deploy"}]}, config)
    approve = Command(resume={"decisions": [{"type": "approve"}]})
    (first,) = _results(agent.invoke(approve, config)["messages"])
    assert (first["status"], first["deduplicated"]) == ("ok", False)
    pending = next(
        snapshot.config
        for snapshot in agent.get_state_history(config)
        if snapshot.interrupts and snapshot.values["messages"][-1].tool_calls
    )
    (again,) = _results(agent.invoke(approve, pending)["messages"])
    assert (again["operation_key"], again["deduplicated"]) == (first["operation_key"], True)
    assert launches(tools) == 1
    forked = agent.invoke({"messages": [{"role": "user", "content": "deploy"}]}, end_of_turn_1)
    assert "__interrupt__" in forked  # a new call: the person is asked again
    assert launches(tools) == 1
    (new,) = _results(agent.invoke(approve, config)["messages"])
    assert new["operation_key"] != first["operation_key"]
    assert new["operation_key"].startswith("langgraph:fork:message:")
    assert new["operation_key"].endswith(":c1")
    assert launches(tools) == 2


@pytest.mark.parametrize("flavor", ["langchain", "deepagents"])
@pytest.mark.parametrize(("first", "second"), [("approve", "reject"), ("reject", "approve")])
def test_c5_c2_one_question_resumed_twice_with_contradictory_answers_tells_what_happened(
    flavor: str, first: str, second: str, tmp_path: Any
) -> None:
    """Two harnesses (each its own toolset, checkpointer connection and
    agent, as two processes have) on one SQLite checkpointer file and one
    SQLite record resume the same pending question from its checkpoint with
    contradictory answers. The model reads what really happened each time:
    approved first, the command ran once and the late rejection reads that
    run (``ok``, reconciled) or ``uncertain``, never "not executed";
    rejected first, nothing ever runs and the late approval reads the
    rejection, asking nobody."""
    from deepagents import create_deep_agent
    from langgraph.checkpoint.sqlite import SqliteSaver

    from sandrail.adapters.deepagents import SandrailSandbox
    from sandrail.interpreters.simulator import Simulator
    from sandrail.records import SQLiteRecord

    sim = Simulator()
    command = "rm -rf /tmp/contradicted"

    def harness(record: Any, saver: Any) -> Any:
        tools = toolset(sim, record=record, authorize=asks_for_rm)
        if flavor == "deepagents":
            call = {"name": "execute", "args": {"command": command}, "id": "c1"}
            model = scripted([lambda sent: "done" if isinstance(sent[-1], ToolMessage) else [call]])
            return create_deep_agent(
                model=model, backend=SandrailSandbox(tools), checkpointer=saver
            )
        model = scripted(
            [
                lambda sent: (
                    "done" if isinstance(sent[-1], ToolMessage) else [run_command(command, "c1")]
                )
            ]
        )
        return create_agent(model, tools=lc.tools(tools), checkpointer=saver)

    answers = {"approve": {"type": "approve"}, "reject": {"type": "reject", "message": "no"}}
    checkpoints = str(tmp_path / "checkpoints.sqlite")
    with (
        SQLiteRecord(tmp_path / "owned.sqlite") as one,
        SQLiteRecord(tmp_path / "owned.sqlite") as other,
        SqliteSaver.from_conn_string(checkpoints) as here,
        SqliteSaver.from_conn_string(checkpoints) as there,
    ):
        asking = harness(one, here)
        asking.invoke(USER, _thread("contradicted"))
        pending = asking.get_state(_thread("contradicted")).config
        told = []
        for answer, (record, saver) in zip(
            (first, second), ((one, here), (other, there)), strict=True
        ):
            out = harness(record, saver).invoke(Command(resume=answers[answer]), pending)
            assert "__interrupt__" not in out  # nobody is asked again
            (message,) = tool_messages(out["messages"])
            if flavor == "deepagents" and message.artifact.get("exit_code") is not None:
                told.append({"status": "ok", "exit_code": message.artifact["exit_code"]})
            else:
                told.append(json.loads(message.content))
    ran = sum(sim.launches.values())
    if first == "approve":
        assert ran == 1
        assert told[0]["status"] == "ok"
        assert told[1]["status"] in ("ok", "uncertain")  # what ran, never "not executed"
        assert told[1].get("executed") is not False
    else:
        assert ran == 0
        for result in told:
            assert (result["status"], result["error_type"], result["executed"]) == (
                "error",
                ErrorCode.APPROVAL_REJECTED.value,
                False,
            )


def test_c8_a_rejected_call_made_again_in_a_later_turn_is_asked_about_again() -> None:
    """``c1`` is rejected; the model's next message makes the same call as
    ``c2``. Nothing ran under ``c1``, so ``c2`` is a new call and a new
    question: the run pauses for it, and ``c2`` runs once approved."""
    tools = toolset(authorize=asks_for_rm)
    model = scripted([[run_command("rm -rf /tmp/x", "c1")], [run_command("rm -rf /tmp/x", "c2")]])
    agent = create_agent(model, tools=lc.tools(tools), checkpointer=InMemorySaver())
    agent.invoke(USER, _thread("again-after-no"))
    paused = agent.invoke(
        Command(resume={"type": "reject", "message": "not now"}), _thread("again-after-no")
    )
    (question,) = paused["__interrupt__"]
    assert question.value["tool_call_id"] == "c2"
    assert question.value["operation_key"].endswith(":c2")
    assert launches(tools) == 0
    out = agent.invoke(Command(resume={"type": "approve"}), _thread("again-after-no"))
    first, second = _results(out["messages"])
    assert (first["call_id"], first["error_type"]) == ("c1", "approval_rejected")
    assert (second["status"], second["operation_key"]) == ("ok", question.value["operation_key"])
    assert launches(tools) == 1
