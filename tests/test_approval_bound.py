"""An approval covers the call a person was asked about (C8, C2, C5): the
same tool, the same arguments as the port reads them, the same operation key;
and the first decision about a call stands.

Each framework's saved state can come back changed (a history edited, a
block with the same id but other input) or be answered twice (rejected on
one copy, approved on another). The toolset keeps each question and its first
decision in its ownership record (``sandrail._decisions``): in the process
that asked, and wherever the same durable record is shared (two toolsets on
one SQLite or PostgreSQL record stand for two processes; one test uses a real
second process). A toolset that knows no question for a key asks about the
call again. Nothing runs in any refused case.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import sandrail
from sandrail.interpreters.simulator import Simulator
from sandrail.records import SQLiteRecord
from tests.approval_rig import (
    FIRST,
    NULLS,
    RESUME,
    RUN_ID,
    SESSION,
    First,
    _agents_agent,
    _pydantic_agent,
    _pydantic_returned,
    make_toolset,
)
from tests.postgres_server import postgres  # noqa: F401 (the fixture make_record takes)
from tests.test_records import make_record  # noqa: F401 (a fixture: SQLite and PostgreSQL)

ROOT = Path(__file__).resolve().parent.parent
STAGING, PRODUCTION = "echo deploy-staging", "echo deploy-PRODUCTION"


def _launches(sim: Simulator) -> int:
    return sum(sim.launches.values())


def _refused(sent: str | dict[str, Any], code: str) -> None:
    content = json.loads(sent) if isinstance(sent, str) else sent
    assert (content["status"], content["error_type"], content["executed"]) == (
        "error",
        code,
        False,
    ), content


def _pydantic_resume(tools: Any, saved: str, answer: Any) -> Any:
    from pydantic_ai import DeferredToolResults
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    history = ModelMessagesTypeAdapter.validate_json(saved)
    return _pydantic_agent(tools, "").run_sync(
        message_history=history, deferred_tool_results=DeferredToolResults(approvals={"t1": answer})
    )


# -- a changed call is refused ------------------------------------------------------


def test_c8_pydantic_ai_history_with_changed_arguments_runs_nothing() -> None:
    """A person approves ``deploy-staging``; the saved history comes back
    with ``deploy-PRODUCTION``: refused, nothing runs. The unchanged
    history still runs the approved call, once."""
    sim = Simulator()
    tools = make_toolset(sim)
    first = FIRST["pydantic_ai"](tools, STAGING)
    assert first.waits is True
    changed = first.saved.replace("deploy-staging", "deploy-PRODUCTION")
    assert changed != first.saved
    _refused(_pydantic_returned(_pydantic_resume(tools, changed, True)), "approval_mismatch")
    assert _launches(sim) == 0
    ran = json.loads(RESUME["pydantic_ai"](tools, first.saved, True, STAGING))
    assert (ran["status"], ran["stdout"]) == ("ok", "deploy-staging\n")
    assert _launches(sim) == 1


def test_c8_anthropic_approve_of_a_block_with_other_input_runs_nothing() -> None:
    """``approve_sync()`` of a block with the asked block's id and other
    input: refused, nothing runs; the block the person saw still runs."""
    from anthropic.types import ToolUseBlock

    from sandrail.adapters.anthropic import AnthropicTools

    sim = Simulator()
    tools = make_toolset(sim)
    first = FIRST["anthropic"](tools, STAGING)
    assert first.waits is True
    claude = AnthropicTools(tools, run_id=RUN_ID)
    block = ToolUseBlock.model_validate_json(first.saved)
    other = block.model_copy(update={"input": {**NULLS, "command": PRODUCTION}})
    for answer in (claude.approve_sync(other), asyncio.run(claude.approve(other))):
        assert answer["is_error"] is True
        _refused(answer["content"], "approval_mismatch")
    assert _launches(sim) == 0
    ran = json.loads(claude.approve_sync(block)["content"])
    assert (ran["status"], ran["stdout"]) == ("ok", "deploy-staging\n")
    assert _launches(sim) == 1


def test_c8_agents_sdk_state_with_changed_arguments_runs_nothing() -> None:
    """The Agents SDK refuses a saved ``RunState`` whose call was changed on
    its own; whoever refuses, ``deploy-PRODUCTION`` never runs."""
    from agents import Runner, RunState
    from agents.testing import assistant_message

    sim = Simulator()
    tools = make_toolset(sim)
    first = FIRST["openai_agents"](tools, STAGING)
    changed = first.saved.replace("deploy-staging", "deploy-PRODUCTION")
    agent = _agents_agent(tools, [[assistant_message("done")]])

    async def resume() -> Any:
        state = await RunState.from_string(agent, changed)
        (item,) = state.get_interruptions()
        state.approve(item)
        return await Runner.run(agent, state)

    from agents.exceptions import ModelBehaviorError

    try:
        result = asyncio.run(resume())
    except ModelBehaviorError as refused:  # the SDK's own refusal
        outcome = str(refused)
    else:
        (sent,) = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
        outcome = json.loads(sent)["error_type"]
    assert outcome == "approval_mismatch" or "reused a tool call ID" in outcome
    assert _launches(sim) == 0


def test_c8_toolset_approval_of_another_call_under_the_key_runs_nothing() -> None:
    """The toolset's own rule, which every adapter (and any adapter to come)
    gets: other arguments or another tool under an asked key are refused,
    with an ``instruction`` the model can follow; the asked call runs."""
    sim = Simulator()
    tools = make_toolset(sim)
    key = "run-1:c1"

    def call(name: str, arguments: dict[str, Any], approved: bool) -> sandrail.ToolResult:
        return tools.call_sync(name, arguments, call_id="c1", operation_key=key, approved=approved)

    assert call("run_command", {"command": STAGING}, False).status == "approval_required"
    for name, arguments in (
        ("run_command", {"command": PRODUCTION}),
        ("run_command", {"command": STAGING, "cwd": "/srv/production"}),
        ("run_command", {"command": STAGING, "background": True}),
        ("sandbox_run_code", {"code": "print('deploy')"}),
    ):
        refused = call(name, arguments, True)
        _refused(refused.content, "approval_mismatch")
        assert "not the one a person approved" in str(refused.instruction)
    assert _launches(sim) == 0
    # The same call as the port reads it (key order, a default spelled out) is covered.
    same = call("run_command", {"timeout": None, "command": STAGING, "background": False}, True)
    assert (same.status, same.stdout) == ("ok", "deploy-staging\n")
    assert _launches(sim) == 1


def test_c8_a_changed_call_under_an_asked_key_is_never_a_new_question() -> None:
    """A framework that re-runs a paused step hands the answer it saved to
    whatever question the step asks next (LangGraph's ``interrupt()`` goes by
    its place in the node). So a call under a key already asked about
    another call is not asked about at all: it is refused
    (``approval_mismatch``) whether it comes unapproved, through
    ``ask_policy`` or approved, and nothing runs; the asked call still runs
    once approved."""
    sim = Simulator()
    tools = make_toolset(sim)
    options: dict[str, Any] = {"call_id": "c1", "operation_key": "r:c1"}
    asked = tools.call_sync("run_command", {"command": STAGING}, **options)
    assert asked.status == "approval_required"
    for approved in (False, True, False):
        changed = tools.call_sync(
            "run_command", {"command": PRODUCTION}, **options, approved=approved
        )
        _refused(changed.content, "approval_mismatch")
        assert "changed after a person was asked" in str(changed.instruction) or approved
    policy = asyncio.run(tools.ask_policy("run_command", {"command": PRODUCTION}, **options))
    assert policy is None  # nobody is to be asked
    assert _launches(sim) == 0
    ran = tools.call_sync("run_command", {"command": STAGING}, **options, approved=True)
    assert (ran.status, ran.stdout) == ("ok", "deploy-staging\n")
    assert _launches(sim) == 1


def test_c8_a_rejected_key_answers_its_rejection_and_asks_nobody_again() -> None:
    """After a rejection, the same key's call (as asked, or changed) is
    answered with that rejection, never asked about again."""
    sim = Simulator()
    tools = make_toolset(sim)
    options: dict[str, Any] = {"call_id": "c1", "operation_key": "r:c1"}
    assert tools.call_sync("run_command", {"command": STAGING}, **options).needs_approval
    tools.rejection("no", name="run_command", call_id="c1", operation_key="r:c1")
    for command in (STAGING, PRODUCTION):
        again = tools.call_sync("run_command", {"command": command}, **options)
        _refused(again.content, "approval_rejected")
    assert _launches(sim) == 0


def test_c8_an_edited_approval_is_the_first_decision_with_its_own_arguments() -> None:
    """A person edits the call and approves the edit: that approval, of the
    edited call, is the one that stands. The original call approved later
    (another copy of the saved run) is refused, and the edit replayed
    reconciles its one launch."""
    sim = Simulator()
    tools = make_toolset(sim)
    options: dict[str, Any] = {"call_id": "c1", "operation_key": "r:c1"}
    assert tools.call_sync("run_command", {"command": STAGING}, **options).needs_approval
    edit = {"command": "echo deploy-edited"}
    ran = tools.call_sync("run_command", edit, **options, approved=True, edited=True)
    assert (ran.status, ran.stdout) == ("ok", "deploy-edited\n")
    original = tools.call_sync("run_command", {"command": STAGING}, **options, approved=True)
    _refused(original.content, "approval_mismatch")
    other_edit = tools.call_sync(
        "run_command", {"command": PRODUCTION}, **options, approved=True, edited=True
    )
    _refused(other_edit.content, "approval_mismatch")
    again = tools.call_sync("run_command", edit, **options, approved=True, edited=True)
    assert again.deduplicated is True
    assert _launches(sim) == 1


def test_c8_a_changed_env_value_is_a_changed_call_where_it_was_asked() -> None:
    """The process that asked binds env values too (they are masked in the
    question, so a person never saw them change)."""
    sim = Simulator()
    tools = make_toolset(sim)
    asked = {"command": "echo deploy", "env": {"TARGET": "staging"}}
    options: dict[str, Any] = {"call_id": "c1", "operation_key": "r:c1"}
    assert tools.call_sync("run_command", asked, **options).status == "approval_required"
    changed = {**asked, "env": {"TARGET": "production"}}
    _refused(
        tools.call_sync("run_command", changed, **options, approved=True).content,
        "approval_mismatch",
    )
    assert _launches(sim) == 0


# -- the first decision stands ------------------------------------------------------


@pytest.mark.parametrize("framework", ["pydantic_ai", "openai_agents", "anthropic", "mcp"])
def test_c8_c5_a_rejection_stands_when_the_same_saved_state_is_approved(framework: str) -> None:
    """Rejected, then approved on the same saved state (or, over MCP, the
    same key): the first decision stands, ``approval_rejected``, nothing
    runs."""
    sim = Simulator()
    tools = make_toolset(sim)
    if framework == "pydantic_ai":  # the harness keeps the run's requests too
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        asked = _pydantic_agent(tools, STAGING).run_sync("go")
        saved = ModelMessagesTypeAdapter.dump_json(asked.all_messages()).decode()
        first = First(True, None, saved)
        _rejected_through(framework, tools, saved, asked.output)
    else:
        first = FIRST[framework](tools, STAGING)
        assert first.waits is True
        _rejected_through(framework, tools, first.saved)
    again = json.loads(RESUME[framework](tools, first.saved, True, STAGING))
    _refused(again, "approval_rejected")
    assert _launches(sim) == 0


def _rejected_through(framework: str, tools: Any, saved: str, requests: Any = None) -> None:
    """Reject the saved call as each framework's how-to says to: with the
    call named, so that the toolset knows which call was rejected."""
    if framework == "pydantic_ai":
        from sandrail.adapters.pydantic_ai import rejected

        answer = rejected(tools, requests=requests, tool_call_id="t1")
        _refused(_pydantic_returned(_pydantic_resume(tools, saved, answer)), "approval_rejected")
        return
    if framework == "openai_agents":
        from agents import Runner, RunState
        from agents.testing import assistant_message

        from sandrail.adapters.openai_agents import rejection

        agent = _agents_agent(tools, [[assistant_message("done")]])

        async def reject() -> Any:
            state = await RunState.from_string(agent, saved)
            (item,) = state.get_interruptions()
            state.reject(item, rejection_message=rejection(tools, item=item))
            return await Runner.run(agent, state)

        result = asyncio.run(reject())
        (sent,) = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
        _refused(sent, "approval_rejected")
        return
    _refused(RESUME[framework](tools, saved, False, STAGING), "approval_rejected")


def test_c8_an_approval_given_first_stands_against_a_later_rejection() -> None:
    """Approved, ran; a rejection afterwards runs nothing more and answers
    for the launch (``uncertain``, never "nothing ran"); a third, approving
    answer is the approval that stands (the one launch, deduplicated)."""
    from anthropic.types import ToolUseBlock

    from sandrail.adapters.anthropic import AnthropicTools

    sim = Simulator()
    tools = make_toolset(sim)
    first = FIRST["anthropic"](tools, STAGING)
    claude = AnthropicTools(tools, run_id=RUN_ID)
    block = ToolUseBlock.model_validate_json(first.saved)
    assert json.loads(claude.approve_sync(block)["content"])["status"] == "ok"
    late = json.loads(claude.reject(block)["content"])
    assert (late["status"], late["error_type"]) == ("uncertain", "approval_rejected")
    again = json.loads(claude.approve_sync(block)["content"])
    assert (again["status"], again["deduplicated"]) == ("ok", True)
    assert _launches(sim) == 1


# -- across processes: the shared durable record ------------------------------------


def test_c8_c2_the_decision_travels_in_the_shared_record(make_record: Any) -> None:  # noqa: F811
    """Two harnesses on one durable record (SQLite, PostgreSQL): a changed
    call resumed in the other is refused; a rejection there stands against
    an approval here; the asked call, approved in either, runs once."""
    sim = Simulator()
    asking, resuming = make_toolset(sim, record=make_record()), None
    first = FIRST["pydantic_ai"](asking, STAGING)
    resuming = make_toolset(sim, record=make_record())
    changed = first.saved.replace("deploy-staging", "deploy-PRODUCTION")
    _refused(_pydantic_returned(_pydantic_resume(resuming, changed, True)), "approval_mismatch")
    ran = json.loads(RESUME["pydantic_ai"](resuming, first.saved, True, STAGING))
    assert (ran["status"], ran["deduplicated"]) == ("ok", False)
    assert _launches(sim) == 1

    later = FIRST["anthropic"](asking, "echo deploy-later")
    _refused(RESUME["anthropic"](asking, later.saved, False, ""), "approval_rejected")
    fresh = make_toolset(sim, record=make_record())
    _refused(RESUME["anthropic"](fresh, later.saved, True, ""), "approval_rejected")
    assert _launches(sim) == 1


def test_c8_a_rejection_stands_in_another_process(tmp_path: Path) -> None:
    """A real second process, with its own simulator and toolset on the
    SQLite record the first one rejected in: its approval runs nothing."""
    from anthropic.types import ToolUseBlock

    from sandrail.adapters.anthropic import AnthropicTools

    path = tmp_path / "record.sqlite"
    with SQLiteRecord(path) as record:
        tools = make_toolset(Simulator(), record=record)
        first = FIRST["anthropic"](tools, STAGING)
        AnthropicTools(tools, run_id=RUN_ID).reject(ToolUseBlock.model_validate_json(first.saved))
    script = textwrap.dedent(
        f"""
        import json, sys
        from sandrail.interpreters.simulator import Simulator
        from sandrail.records import SQLiteRecord
        from tests.approval_rig import RESUME, make_toolset
        sim = Simulator()
        with SQLiteRecord({str(path)!r}) as record:
            sent = RESUME["anthropic"](make_toolset(sim, record=record), sys.stdin.read(), True, "")
        print(json.dumps([json.loads(sent), sum(sim.launches.values())]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=first.saved,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    sent, launches = json.loads(done.stdout.strip().splitlines()[-1])
    _refused(sent, "approval_rejected")
    assert launches == 0


@pytest.mark.parametrize("framework", ["pydantic_ai", "anthropic"])
def test_c8_an_approval_nobody_here_asked_about_is_asked_again(framework: str) -> None:
    """A fresh harness without the asking one's record cannot tell a
    changed call from the one the person saw: it asks about the call again
    (as it now reads, through the framework's own human-in-the-loop), and
    nothing runs until that is answered."""
    sim = Simulator()
    first = FIRST[framework](make_toolset(sim), STAGING)
    changed = first.saved.replace("deploy-staging", "deploy-PRODUCTION")
    fresh = make_toolset(sim)
    if framework == "pydantic_ai":
        from pydantic_ai import DeferredToolRequests

        again = _pydantic_resume(fresh, changed, True)
        assert isinstance(again.output, DeferredToolRequests)
        (asked,) = again.output.approvals
        assert "deploy-PRODUCTION" in json.dumps(asked.args)  # what the person now sees
    else:
        sent = json.loads(RESUME[framework](fresh, changed, True, ""))
        assert (sent["status"], sent["executed"]) == ("approval_required", False)
    assert _launches(sim) == 0


def test_c8_an_edited_approval_runs_the_persons_arguments_and_a_rejection_stands() -> None:
    """``edited=True``: the person wrote the arguments when approving, so the
    approval covers them (pydantic-ai's ``override_args``, a LangGraph edit),
    even where the question was asked elsewhere; a rejection made first
    still stands."""
    sim = Simulator()
    tools = make_toolset(sim)
    options: dict[str, Any] = {"call_id": "c1", "approved": True, "edited": True}
    ran = tools.call_sync("run_command", {"command": STAGING}, operation_key="r:c1", **options)
    assert (ran.status, ran.stdout) == ("ok", "deploy-staging\n")
    tools.rejection(name="run_command", call_id="c2", operation_key="r:c2")
    refused = tools.call_sync("run_command", {"command": STAGING}, operation_key="r:c2", **options)
    _refused(refused.content, "approval_rejected")
    assert _launches(sim) == 1


def test_c5_an_approval_or_rejection_under_a_key_that_is_not_text_never_raises() -> None:
    """A key holding a lone surrogate (JSON decodes ``"\\ud800"`` into one: a
    client's choice over MCP) has no task id: approving or rejecting it
    answers a result and runs nothing, never a raise."""
    sim = Simulator()
    tools = make_toolset(sim)
    key = "k\ud800"
    for approved in (False, True):
        answer = tools.call_sync(
            "run_command", {"command": STAGING}, call_id="c1", operation_key=key, approved=approved
        )
        assert answer.error_type == "e2b_command_operation_key_required"
    assert tools.rejection(name="run_command", call_id="c1", operation_key=key).executed is False
    assert _launches(sim) == 0


def test_c5_a_rejection_after_an_approval_elsewhere_is_never_nothing_ran(tmp_path: Path) -> None:
    """Two harnesses on one record decide about one call at once: the
    approval is kept first, and its launch has not shown in the record yet
    when the rejection comes. The rejection cannot stop it (the first
    decision stands), so it never answers "nothing ran": ``uncertain``,
    ``approval_rejected``, with the task the key runs as; after the launch,
    the same, now with its sandbox."""
    sim = Simulator()
    key, arguments = "run-1:c1", {"command": STAGING}
    with SQLiteRecord(tmp_path / "r.sqlite") as one, SQLiteRecord(tmp_path / "r.sqlite") as two:
        approving, rejecting = make_toolset(sim, record=one), make_toolset(sim, record=two)
        assert approving.approve("run_command", arguments, call_id="c1", operation_key=key) is None
        told = rejecting.rejection(
            "no", name="run_command", call_id="c1", operation_key=key, arguments=arguments
        )
        expected = sandrail.core.task_id(
            SESSION, sandrail.AgentOwner(agent_id="approval-agent"), key
        )
        assert (told.status, told.content["error_type"]) == ("uncertain", "approval_rejected")
        assert told.content["task_id"] == expected
        assert told.content.get("executed") is not False
        ran = approving.call_sync(
            "run_command", arguments, call_id="c1", operation_key=key, approved=True
        )
        assert (ran.status, ran.content["task_id"]) == ("ok", expected)
        again = rejecting.rejection(
            "no", name="run_command", call_id="c1", operation_key=key, arguments=arguments
        )
        assert (again.status, again.content["sandbox_id"]) == (
            "uncertain",
            ran.content["sandbox_id"],
        )
        other = rejecting.rejection(
            "no", name="run_command", call_id="c1", operation_key=key, arguments={"command": "ls"}
        )
        assert (other.status, other.content["executed"]) == ("error", False)  # never ran
    assert sum(sim.launches.values()) == 1


def test_c2_a_key_that_launched_stays_its_own_when_an_identical_call_waits_under_another() -> None:
    """A call approved and run under its key; the model makes the same call
    again (another key), which waits for a person; then the first call comes
    back approved once more (a saved answer resumed, a copy of the session).
    It repeats the waiting call exactly, but its own key launched already:
    it reconciles there, and never runs as the waiting call."""
    sim = Simulator()
    tools = make_toolset(sim)

    def call(key: str, **options: Any) -> sandrail.ToolResult:
        call_id = key.split(":")[1]
        return tools.call_sync(
            "run_command",
            {"command": STAGING},
            call_id=call_id,
            operation_key=key,
            reconcile_repeats=True,
            **options,
        )

    assert call("run:c1").status == "approval_required"
    assert call("run:c1", approved=True).status == "ok"
    assert call("run:c2").status == "approval_required"  # waits, under its own key
    again = call("run:c1", approved=True)
    assert (again.status, again.content["deduplicated"]) == ("ok", True)
    assert again.content["operation_key"] == "run:c1"
    assert _launches(sim) == 1
