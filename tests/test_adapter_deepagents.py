"""The Deep Agents backend, in create_deep_agent runs driven by LangChain's own
scripted chat model, on the simulator (docs/howto/deepagents.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from deepagents import create_deep_agent
from deepagents.backends.protocol import ExecuteResponse, SandboxBackendProtocol
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from typing_extensions import TypedDict

import sandrail
from sandrail.adapters.deepagents import RAN_BEFORE, SandrailSandbox
from sandrail.core import ErrorCode
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator
from tests.embed_rig import launches, toolset
from tests.langchain_rig import scripted, tool_messages

USER = {"messages": [{"role": "user", "content": "go"}]}


def _execute(command: str, call_id: str) -> list[dict[str, Any]]:
    return [{"name": "execute", "args": {"command": command}, "id": call_id}]


def _asks_for_rm(request: sandrail.ToolRequest) -> Any:
    if request.call.arguments["command"].startswith("rm"):
        return sandrail.ApprovalRequired(interaction_id="ask")
    return sandrail.ALLOW


class _Answers(TypedDict):
    answers: list[Any]


def _thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def test_the_backend_is_deep_agents_sandbox_protocol() -> None:
    backend = SandrailSandbox(toolset())
    assert isinstance(backend, SandboxBackendProtocol)
    assert backend.id == "embed-session"


def test_c2_execute_runs_once_per_tool_call_and_truncated_is_honest() -> None:
    tools = toolset(max_output_bytes=2000)
    model = scripted([_execute("seq 5000", "e1"), _execute("echo small", "e2")])
    agent = create_deep_agent(model=model, backend=SandrailSandbox(tools))
    out = agent.invoke(USER)
    big, small = tool_messages(out["messages"])
    assert big.artifact == {"truncated": True, "exit_code": 0}
    assert "bytes left out" in big.content or "omitted" in big.content
    assert small.artifact == {"truncated": False, "exit_code": 0}
    assert small.content.startswith("small\n")
    assert launches(tools) == 2


def test_c6_an_uncertain_result_is_told_as_it_is_never_exit_code_1() -> None:
    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    tools = toolset(sim)
    model = scripted([_execute("date", "e1")])
    out = create_deep_agent(model=model, backend=SandrailSandbox(tools)).invoke(USER)
    (message,) = tool_messages(out["messages"])
    told = json.loads(message.content)
    assert told["status"] == "uncertain"
    assert told["operation_key"] == "langgraph:-:call:e1:deepagents-1"  # no thread: "-"
    assert "exit_code" not in (message.artifact or {})


def test_c8_approval_through_interrupt_approved_once_and_rejected() -> None:
    tools = toolset(authorize=_asks_for_rm)
    model = scripted([_execute("rm -rf /tmp/a", "e1"), _execute("rm -rf /tmp/b", "e2"), "ok"])
    agent = create_deep_agent(
        model=model, backend=SandrailSandbox(tools), checkpointer=InMemorySaver()
    )
    paused = agent.invoke(USER, _thread("t"))
    (question,) = paused["__interrupt__"]
    assert question.value["action_requests"][0]["args"]["command"] == "rm -rf /tmp/a"
    assert launches(tools) == 0
    asked_at = agent.get_state(_thread("t")).config
    second = agent.invoke(Command(resume={"type": "approve"}), _thread("t"))
    assert launches(tools) == 1
    assert "__interrupt__" in second  # the next call asks again
    rejected = agent.invoke(Command(resume={"type": "reject", "message": "no"}), _thread("t"))
    told = json.loads(tool_messages(rejected["messages"])[-1].content)
    assert told["error_type"] == ErrorCode.APPROVAL_REJECTED.value
    assert launches(tools) == 1
    again = agent.invoke(Command(resume={"type": "approve"}), asked_at)
    assert launches(tools) == 1  # the same saved question resumed twice: one launch
    assert tool_messages(again["messages"])[0].artifact == {"truncated": False, "exit_code": 127}


def test_c2_interrupt_on_resumed_twice_launches_once() -> None:
    """Deep Agents' own ``interrupt_on`` asks in the model node's hook, so the
    tool runs in a checkpoint made after each resume; the key comes from the
    tool call id, which both resumes share."""
    tools = toolset()
    model = scripted([_execute("echo gated", "e1"), "ok", "ok"])
    agent = create_deep_agent(
        model=model,
        backend=SandrailSandbox(tools),
        checkpointer=InMemorySaver(),
        interrupt_on={"execute": True},
    )
    agent.invoke(USER, _thread("g"))
    asked_at = agent.get_state(_thread("g")).config
    decisions = {"decisions": [{"type": "approve"}]}
    first = agent.invoke(Command(resume=decisions), _thread("g"))
    second = agent.invoke(Command(resume=decisions), asked_at)
    ran = tool_messages(first["messages"])[-1].content
    again = tool_messages(second["messages"])[-1].content
    assert ran.startswith("gated\n")
    assert RAN_BEFORE not in ran
    # The model is told the second one ran nothing anew.
    assert again.startswith("gated\n" + RAN_BEFORE)
    assert launches(tools) == 1
    rejected = create_deep_agent(
        model=scripted([_execute("echo never", "e9")]),
        backend=SandrailSandbox(tools),
        checkpointer=InMemorySaver(),
        interrupt_on={"execute": True},
    )
    rejected.invoke(USER, _thread("r"))
    rejected.invoke(Command(resume={"decisions": [{"type": "reject"}]}), _thread("r"))
    assert launches(tools) == 1


def test_c1_outside_a_langgraph_run_nothing_runs_and_the_output_says_why() -> None:
    tools = toolset()
    answer = SandrailSandbox(tools).execute("echo x")
    assert isinstance(answer, ExecuteResponse)
    assert answer.exit_code is None
    assert json.loads(answer.output)["error_type"] == ErrorCode.OPERATION_KEY_REQUIRED.value
    assert launches(tools) == 0


@pytest.mark.parametrize(
    "options", [{"timeout": 0}, {"timeout": True}, {"timeout": 1.5}, {"workdir": " "}]
)
def test_bad_backend_settings_are_refused_at_once(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"timeout|workdir"):
        SandrailSandbox(toolset(), **options)


def test_schema_honesty_what_deep_agents_execute_admits_is_never_refused_as_invalid() -> None:
    """Every ``execute`` argument valid against the schema Deep Agents hands the
    model (drawn by hypothesis-jsonschema; Deep Agents itself refuses a
    timeout outside 0..3600 before the backend is called) reaches the policy (which denies it, last)
    without an argument refusal, but for the two the module doc names: a
    blank command (run as a shell runs it: nothing, exit 0) and a NUL or a
    lone surrogate, which no shell can be given."""
    from deepagents.middleware.filesystem import FilesystemMiddleware
    from hypothesis import HealthCheck, given, settings
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.graph import START, StateGraph

    from tests.embed_rig import ARGUMENT_ERRORS
    from tests.jsonschema_draws import jsonschema_values

    tools = toolset(authorize=lambda request: sandrail.Deny(reason="checked"))
    backend = SandrailSandbox(tools)
    (execute,) = [t for t in FilesystemMiddleware(backend=backend).tools if t.name == "execute"]
    sent = convert_to_openai_tool(execute)["function"]["parameters"]
    drawn: list[dict[str, Any]] = []

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        jsonschema_values(json.dumps(sent)).filter(lambda a: 0 <= (a.get("timeout") or 0) <= 3600)
    )
    def draw(arguments: dict[str, Any]) -> None:
        drawn.append(arguments)

    draw()

    def shell_can_take(command: str) -> bool:
        return "\x00" not in command and not any(0xD800 <= ord(c) <= 0xDFFF for c in command)

    def run(state: _Answers) -> dict[str, Any]:
        answers = []
        for arguments in drawn:
            response = backend.execute(arguments["command"], timeout=arguments.get("timeout"))
            answers.append((arguments["command"], response))
        return {"answers": answers}

    builder = StateGraph(_Answers)
    builder.add_node("run", run)
    builder.add_edge(START, "run")
    answers = builder.compile().invoke({"answers": []})["answers"]
    assert len(answers) == len(drawn) > 0
    for command, response in answers:
        if not command.strip():
            assert (response.output, response.exit_code) == ("", 0)
            continue
        told = json.loads(response.output)
        if shell_can_take(command):
            assert told["error_type"] not in ARGUMENT_ERRORS, told
            assert told["error_type"] == ErrorCode.POLICY_DENIED.value, told
        else:
            assert told["executed"] is False
    assert launches(tools) == 0


def test_c8_a_command_edited_in_the_saved_state_before_the_answer_runs_nothing() -> None:
    """The backend's own question (the policy asked for a person) is about
    ``rm -rf /tmp/staging``; the saved state's tool call is rewritten before
    the answer (same message and tool call ids): the approval runs nothing,
    the model reads ``approval_mismatch``."""
    tools = toolset(authorize=_asks_for_rm)
    model = scripted([_execute("rm -rf /tmp/staging", "e1"), "ok"])
    agent = create_deep_agent(
        model=model, backend=SandrailSandbox(tools), checkpointer=InMemorySaver()
    )
    agent.invoke(USER, _thread("edit"))
    state = agent.get_state(_thread("edit")).values["messages"]
    (made,) = [m for m in state if getattr(m, "tool_calls", None)]
    changed = AIMessage("", id=made.id, tool_calls=_execute("rm -rf /tmp/PRODUCTION", "e1"))
    agent.update_state(_thread("edit"), {"messages": [changed]})
    out = agent.invoke(Command(resume={"type": "approve"}), _thread("edit"))
    assert launches(tools) == 0
    told = json.loads(tool_messages(out["messages"])[-1].content)
    assert (told["error_type"], told["executed"]) == (ErrorCode.APPROVAL_MISMATCH.value, False)


@pytest.mark.parametrize(
    ("first", "second", "ran", "status"),
    [("reject", "approve", 0, "error"), ("approve", "reject", 1, "uncertain")],
)
def test_c8_c5_with_sandrails_middleware_the_first_decision_stands_on_a_checkpoint_copy(
    first: str, second: str, ran: int, status: str
) -> None:
    """``human_in_the_loop(backend, {"execute": True})`` in place of Deep
    Agents' ``interrupt_on``: one saved question answered twice, on a copy
    of the checkpoint taken before the first answer. A rejection stands
    against a later approval; a rejection after an approval launched the
    command is told as what ran."""
    import copy

    from sandrail.adapters.deepagents import human_in_the_loop

    tools = toolset()

    def agent(saver: Any) -> Any:
        backend = SandrailSandbox(tools)
        return create_deep_agent(
            model=scripted([_execute("echo deploy", "e1"), "ok", "ok"]),
            backend=backend,
            middleware=[human_in_the_loop(backend, {"execute": True})],
            checkpointer=saver,
        )

    def decided(kind: str) -> Any:
        return {"decisions": [{"type": kind, **({"message": "no"} if kind == "reject" else {})}]}

    saver = InMemorySaver()
    agent(saver).invoke(USER, _thread("h"))
    before = copy.deepcopy(saver)
    agent(saver).invoke(Command(resume=decided(first)), _thread("h"))
    out = agent(before).invoke(Command(resume=decided(second)), _thread("h"))
    (message,) = tool_messages(out["messages"])
    told = json.loads(message.content)
    assert (told["status"], told["error_type"]) == (status, ErrorCode.APPROVAL_REJECTED.value)
    assert launches(tools) == ran


def test_sandrails_middleware_takes_the_agents_sandbox_only() -> None:
    from sandrail.adapters.deepagents import human_in_the_loop

    with pytest.raises(TypeError, match="SandrailSandbox"):
        human_in_the_loop(toolset(), {"execute": True})


def test_c8_the_backends_question_takes_the_human_in_the_loop_answer_shape() -> None:
    """The backend's question (the policy asked for a person) has the shape
    of Deep Agents' ``interrupt_on`` question, so the answer that one takes,
    ``{"decisions": [...]}`` with one decision, is taken too."""
    tools = toolset(authorize=_asks_for_rm)
    model = scripted([_execute("rm -rf /tmp/a", "e1"), "ok"])
    agent = create_deep_agent(
        model=model, backend=SandrailSandbox(tools), checkpointer=InMemorySaver()
    )
    agent.invoke(USER, _thread("shape"))
    agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), _thread("shape"))
    assert launches(tools) == 1


@pytest.mark.parametrize(
    ("gate", "call_id"), [("backend", "e9"), ("middleware", "e1"), ("middleware", "e9")]
)
def test_c8_an_answer_resumed_onto_an_edited_execute_runs_nothing(gate: str, call_id: str) -> None:
    """The person was shown ``echo deploy`` (through the backend's own
    question, or sandrail's middleware); the saved tool call is rewritten
    before the answer, with a new tool call id (a new key) or the same one:
    the answer approves nothing, and the model reads ``approval_mismatch``."""
    from sandrail.adapters.deepagents import human_in_the_loop

    tools = toolset(authorize=_asks_for_rm) if gate == "backend" else toolset()
    backend = SandrailSandbox(tools)
    first = "rm -rf /tmp/staging" if gate == "backend" else "echo deploy"
    agent = create_deep_agent(
        model=scripted([_execute(first, "e1"), "ok", "ok"]),
        backend=backend,
        middleware=[human_in_the_loop(backend, {"execute": True})] if gate == "middleware" else [],
        checkpointer=InMemorySaver(),
    )
    agent.invoke(USER, _thread("edited"))
    state = agent.get_state(_thread("edited")).values["messages"]
    (made,) = [m for m in state if getattr(m, "tool_calls", None)]
    changed = AIMessage("", id=made.id, tool_calls=_execute("rm -rf /tmp/EVIL", call_id))
    agent.update_state(_thread("edited"), {"messages": [changed]}, as_node="model")
    answer = {"type": "approve"} if gate == "backend" else {"decisions": [{"type": "approve"}]}
    out = agent.invoke(Command(resume=answer), _thread("edited"))
    assert launches(tools) == 0
    told = json.loads(tool_messages(out["messages"])[-1].content)
    assert (told["error_type"], told["executed"]) == (ErrorCode.APPROVAL_MISMATCH.value, False)


@pytest.mark.parametrize("gate", ["backend", "middleware"])
@pytest.mark.parametrize("reordered", [False, True])
def test_c8_an_answer_given_by_position_lands_on_no_execute_after_the_calls_were_reordered(
    gate: str, reordered: bool
) -> None:
    """Two ``execute`` calls wait for a person, staging first; the person
    approves by position (a bare resume, or the first of a batch). Were the
    saved calls reordered in between, the approval would land on the
    PRODUCTION call: after the reorder nothing runs; without it, staging
    runs once."""
    from sandrail.adapters.deepagents import human_in_the_loop

    def ask_all(request: sandrail.ToolRequest) -> Any:
        return sandrail.ApprovalRequired(interaction_id="ask")

    tools = toolset(authorize=ask_all) if gate == "backend" else toolset()
    backend = SandrailSandbox(tools)
    calls = [*_execute("echo staging", "e1"), *_execute("echo PRODUCTION", "e2")]
    agent = create_deep_agent(
        model=scripted([calls, "ok", "ok"]),
        backend=backend,
        middleware=[human_in_the_loop(backend, {"execute": True})] if gate == "middleware" else [],
        checkpointer=InMemorySaver(),
    )
    config = _thread(f"reorder-{gate}-{reordered}")
    paused = agent.invoke(USER, config)
    if reordered:
        state = agent.get_state(config).values["messages"]
        made = [m for m in state if getattr(m, "tool_calls", None)][-1]
        swapped = AIMessage("", id=made.id, tool_calls=list(reversed(made.tool_calls)))
        agent.update_state(config, {"messages": [swapped]}, as_node="model")
    if gate == "backend" and reordered:  # new tasks: a bare answer goes to the first
        answer: Any = {"type": "approve"}
    elif gate == "backend":  # several pending: answered by id
        answer = {
            q.id: {"type": "approve"} if "staging" in json.dumps(q.value) else {"type": "reject"}
            for q in paused["__interrupt__"]
        }
    else:
        answer = {"decisions": [{"type": "approve"}, {"type": "reject", "message": "no"}]}
    out = agent.invoke(Command(resume=answer), config)
    printed = [m.content for m in tool_messages(out["messages"]) if "\n" in m.content]
    ran = [
        text.split("\n")[0] for text in printed if text.split("\n")[0] in ("staging", "PRODUCTION")
    ]
    assert ran == ([] if reordered else ["staging"])
    assert launches(tools) == (0 if reordered else 1)


# Deep Agents' file tools are shell commands whose output BaseSandbox parses:
# the simulator is scripted with what each command really prints (the command
# run here, on a temporary tree, by a real shell), so the backend sees the
# bytes a sandbox would send.


class _Out(TypedDict):
    out: Any


def _in_a_run(operation: Any) -> Any:
    """``operation()`` run inside a LangGraph task, as a file tool runs."""
    from langgraph.graph import START, StateGraph

    builder = StateGraph(_Out)
    builder.add_node("run", lambda state: {"out": operation()})
    builder.add_edge(START, "run")
    return builder.compile().invoke({"out": None})["out"]


def _printed(command: str) -> str:
    """What ``command`` prints here, stdout and stderr together."""
    import subprocess

    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True)
    return done.stdout + done.stderr


def _scripted(commands: dict[str, str], plan: FaultPlan | None = None) -> Simulator:
    from sandrail.interpreters.simulator import Script

    scripts = {command: Script.prints(printed) for command, printed in commands.items()}
    return Simulator(scripts=scripts, plan=plan)


def _listing(count: int) -> str:
    return "".join(
        json.dumps({"path": f"/big/file-{n:05d}.txt", "is_dir": False}) + "\n" for n in range(count)
    )


def test_c12_ls_of_20000_files_under_a_small_budget_lists_every_file_launched_once() -> None:
    from deepagents.backends.sandbox import _build_ls_cmd

    sim = _scripted({_build_ls_cmd("/big"): _listing(20_000)})
    tools = toolset(sim, max_output_bytes=4000)
    listed = _in_a_run(lambda: SandrailSandbox(tools).ls("/big"))
    assert listed.error is None
    assert [entry["path"] for entry in listed.entries] == [
        f"/big/file-{n:05d}.txt" for n in range(20_000)
    ]
    assert launches(tools) == 1  # the rest read by cursor, never launched again (C2)


def test_c12_read_file_of_a_6_mb_file_is_the_whole_page(tmp_path: Any) -> None:
    from deepagents.backends.sandbox import _build_read_cmd, _parse_read_output

    path = tmp_path / "big.txt"
    path.write_text("".join(f"line {n} " + "x" * 3000 + "\n" for n in range(2000)))
    assert path.stat().st_size > 6_000_000
    command = _build_read_cmd(str(path), 0, 2000)
    printed = _printed(command)
    tools = toolset(_scripted({command: printed}), max_output_bytes=6000)
    read = _in_a_run(lambda: SandrailSandbox(tools).read(str(path)))
    assert read.error is None, read.error
    assert read == _parse_read_output(printed, str(path))
    assert launches(tools) == 1


def test_c12_glob_over_a_big_tree_finds_every_file_and_says_it_is_whole(tmp_path: Any) -> None:
    from deepagents.backends.sandbox import _build_glob_cmd

    for folder in range(40):
        (tmp_path / f"d{folder}").mkdir()
        for n in range(100):
            (tmp_path / f"d{folder}" / f"f{n}.py").write_text("")
    command = _build_glob_cmd("**/*.py", str(tmp_path))
    tools = toolset(_scripted({command: _printed(command)}), max_output_bytes=4000)
    found = _in_a_run(lambda: SandrailSandbox(tools).glob("**/*.py", str(tmp_path)))
    assert found.error is None, found.error
    assert (found.truncated, found.truncation_reason) == (False, None)
    assert len(found.matches) == 4000
    assert launches(tools) == 1


def test_c12_grep_with_many_matches_under_a_small_budget_returns_them_all() -> None:
    from deepagents.backends.sandbox import _build_grep_cmd

    printed = "".join(f"/src/f{n}.py\x00{n + 1}:needle {n}\n" for n in range(5000))
    command = _build_grep_cmd("needle", "/src", None, None, exclude_dirs=(".git",))
    tools = toolset(_scripted({command: printed}), max_output_bytes=4000)
    found = _in_a_run(lambda: SandrailSandbox(tools).grep("needle", "/src"))
    assert found.error is None, found.error
    assert len(found.matches) == 5000
    assert found.matches[-1] == {"path": "/src/f4999.py", "line": 5000, "text": "needle 4999"}


def test_c12_a_file_op_output_too_big_to_read_back_is_an_error_never_a_partial_list() -> None:
    from deepagents.backends.sandbox import _build_ls_cmd

    from sandrail.adapters.deepagents import FILE_OUTPUT_MAX_BYTES

    too_many = FILE_OUTPUT_MAX_BYTES // 40 + 1000
    tools = toolset(_scripted({_build_ls_cmd("/huge"): _listing(too_many)}), max_output_bytes=4000)
    listed = _in_a_run(lambda: SandrailSandbox(tools).ls("/huge"))
    assert listed.entries is None
    assert "too big" in listed.error
    assert launches(tools) == 1


def test_c6_an_uncertain_file_op_is_an_error_with_its_locator_never_an_empty_listing() -> None:
    from deepagents.backends.sandbox import _build_ls_cmd

    lost = FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),))
    tools = toolset(_scripted({_build_ls_cmd("/big"): _listing(10)}, plan=lost))
    listed = _in_a_run(lambda: SandrailSandbox(tools).ls("/big"))
    assert listed.entries is None
    told = json.loads(listed.error[listed.error.index("{") :])
    assert told["status"] == "uncertain"
    assert told["operation_key"].endswith("deepagents-1")


def test_c6_a_read_of_the_rest_that_fails_is_an_error_never_a_partial_listing() -> None:
    from deepagents.backends.sandbox import _build_ls_cmd

    failing = FaultPlan((Fault(effect="Read", occurrence=5, kind=FaultKind.NOT_DELIVERED),))
    sim = _scripted({_build_ls_cmd("/big"): _listing(2000)}, plan=failing)
    tools = toolset(sim, max_output_bytes=4000)
    listed = _in_a_run(lambda: SandrailSandbox(tools).ls("/big"))
    assert listed.entries is None, len(listed.entries)
    assert "/big" in listed.error
    assert launches(tools) == 1


def test_c2_an_ls_tool_call_run_again_reads_its_output_again_and_never_relaunches() -> None:
    """The model sends ``ls`` twice under one tool call id (a repeat): the
    second is reconciled with the first launch, and its output read whole
    again by cursor."""
    from deepagents.backends.sandbox import _build_ls_cmd

    tools = toolset(_scripted({_build_ls_cmd("/big"): _listing(2000)}), max_output_bytes=4000)
    ls = [{"name": "ls", "args": {"path": "/big"}, "id": "l1"}]
    agent = create_deep_agent(model=scripted([ls, ls]), backend=SandrailSandbox(tools))
    first, second = tool_messages(agent.invoke(USER)["messages"])
    assert first.content.count("/big/file-") == 2000
    assert second.content == first.content
    assert launches(tools) == 1


def test_c12_an_async_glob_under_a_small_budget_is_whole(tmp_path: Any) -> None:
    import asyncio

    from deepagents.backends.sandbox import _build_glob_cmd
    from langgraph.graph import START, StateGraph

    for n in range(1500):
        (tmp_path / f"f{n}.md").write_text("")
    command = _build_glob_cmd("*.md", str(tmp_path))
    tools = toolset(_scripted({command: _printed(command)}), max_output_bytes=4000)
    backend = SandrailSandbox(tools)

    async def run(state: _Out) -> dict[str, Any]:
        return {"out": await backend.aglob("*.md", str(tmp_path))}

    builder = StateGraph(_Out)
    builder.add_node("run", run)
    builder.add_edge(START, "run")
    found = asyncio.run(builder.compile().ainvoke({"out": None}))["out"]
    assert (found.error, found.truncated) == (None, False)
    assert len(found.matches) == 1500
    assert launches(tools) == 1


@pytest.mark.parametrize(("budget", "whole"), [(4000, True), (1600, False)])
def test_c12_a_page_too_big_for_the_budget_is_read_again_smaller_or_is_an_error(
    budget: int, whole: bool
) -> None:
    """Control characters grow six-fold in the result's JSON: a page of them
    that does not fit is asked for again, smaller; where even the smallest
    page cannot fit, grep answers an error, never the matches it read."""
    from deepagents.backends.sandbox import _build_grep_cmd

    printed = "".join(f"/src/f{n}.py\x00{n + 1}:" + "\x01" * 60 + "\n" for n in range(300))
    command = _build_grep_cmd("\x01", "/src", None, None, exclude_dirs=(".git",))
    tools = toolset(_scripted({command: printed}), max_output_bytes=budget)
    found = _in_a_run(lambda: SandrailSandbox(tools).grep("\x01", "/src"))
    if whole:
        assert found.error is None, found.error
        assert len(found.matches) == 300
    else:
        assert found.matches is None
        assert "did not answer it" in found.error
    assert launches(tools) == 1


@pytest.mark.parametrize("rejected", ["e1", "e2"])
def test_c2_c8_two_identical_executes_of_one_turn_are_two_decisions(rejected: str) -> None:
    """One model message runs the same command twice (``e1`` and ``e2``),
    each asked about through ``interrupt()``; the person rejects one and
    approves the other. Each tool call is its own decision: the approved one
    runs once, the rejected one reads ``approval_rejected`` under its own
    key, whichever the person answered first."""
    approved = "e2" if rejected == "e1" else "e1"
    tools = toolset(authorize=_asks_for_rm)
    twice = [*_execute("rm -rf /tmp/x", "e1"), *_execute("rm -rf /tmp/x", "e2")]
    agent = create_deep_agent(
        model=scripted([twice, "ok"]), backend=SandrailSandbox(tools), checkpointer=InMemorySaver()
    )
    paused = agent.invoke(USER, _thread("twice"))
    asked = {
        question.value["operation_key"].split(":call:")[1].split(":")[0]: question
        for question in paused["__interrupt__"]
    }
    answers = {
        asked[rejected].id: {"type": "reject", "message": "not this one"},
        asked[approved].id: {"type": "approve"},
    }
    out = agent.invoke(Command(resume=answers), _thread("twice"))
    told = {m.tool_call_id: m for m in tool_messages(out["messages"])}
    refused = json.loads(told[rejected].content)
    assert (refused["error_type"], refused["executed"]) == (
        ErrorCode.APPROVAL_REJECTED.value,
        False,
    )
    assert refused["operation_key"] == asked[rejected].value["operation_key"]
    assert told[approved].artifact == {"truncated": False, "exit_code": 127}
    assert launches(tools) == 1


def test_c2_a_forked_turn_reusing_a_tool_call_id_reconciles_with_its_launch() -> None:
    """Deep Agents' ``interrupt_on``: ``echo deploy`` (tool call ``e1``)
    approved in turn 2 ran once. Forked from the end of turn 1, the model
    makes the same call with the same tool call id on the same thread: the
    same key, so even approved again it reads the first launch's result and
    never launches twice."""
    tools = toolset()
    deploy = _execute("echo deploy", "e1")
    agent = create_deep_agent(
        model=scripted(["hello", deploy, "ok", deploy, "ok"]),
        backend=SandrailSandbox(tools),
        checkpointer=InMemorySaver(),
        interrupt_on={"execute": True},
    )
    config = _thread("fork")
    agent.invoke({"messages": [{"role": "user", "content": "hi"}]}, config)
    end_of_turn_1 = agent.get_state(config).config
    agent.invoke({"messages": [{"role": "user", "content": "deploy"}]}, config)
    approve = Command(resume={"decisions": [{"type": "approve"}]})
    agent.invoke(approve, config)
    assert launches(tools) == 1
    forked = agent.invoke({"messages": [{"role": "user", "content": "deploy"}]}, end_of_turn_1)
    assert "__interrupt__" in forked
    out = agent.invoke(approve, config)
    assert tool_messages(out["messages"])[-1].content.startswith("deploy\n" + RAN_BEFORE)
    assert launches(tools) == 1


def test_c8_a_rejected_execute_made_again_in_a_later_turn_is_asked_about_again() -> None:
    """``e1`` is rejected through the backend's ``interrupt()``; the model's
    next message runs the same command as ``e2``. Nothing ran under ``e1``,
    so ``e2`` is a new call and a new question: the run pauses for it, and
    it runs once approved."""
    tools = toolset(authorize=_asks_for_rm)
    model = scripted([_execute("rm -rf /tmp/x", "e1"), _execute("rm -rf /tmp/x", "e2"), "ok"])
    agent = create_deep_agent(
        model=model, backend=SandrailSandbox(tools), checkpointer=InMemorySaver()
    )
    first = agent.invoke(USER, _thread("again-after-no"))
    (asked,) = first["__interrupt__"]
    paused = agent.invoke(
        Command(resume={"type": "reject", "message": "not now"}), _thread("again-after-no")
    )
    (question,) = paused["__interrupt__"]
    assert question.value["operation_key"] != asked.value["operation_key"]
    assert launches(tools) == 0
    out = agent.invoke(Command(resume={"type": "approve"}), _thread("again-after-no"))
    told = {m.tool_call_id: m for m in tool_messages(out["messages"])}
    refused = json.loads(told["e1"].content)
    assert refused["error_type"] == ErrorCode.APPROVAL_REJECTED.value
    assert told["e2"].artifact == {"truncated": False, "exit_code": 127}
    assert launches(tools) == 1
