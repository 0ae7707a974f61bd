"""Approval through each framework's own human-in-the-loop
(``docs/howto/approval.md``), end to end, offline: pydantic-ai deferred tools, the Agents SDK's
interruptions and ``RunState``, Anthropic's ``approve``/``reject``, MCP
elicitation. For each framework, on the simulator and on local-e2b (the
unmodified e2b SDK over HTTP):

- a call the policy asks about waits for a person and runs nothing;
- approved, it runs once; rejected, nothing runs and the model reads
  ``approval_rejected``;
- the saved approval resumed twice (a crash after the first resume) runs
  once: on local-e2b, in two fresh processes from one saved copy; on the
  simulator (whose world lives in this process), with fresh toolsets and
  adapters sharing the simulator;
- a call the policy denies never asks anyone.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandrail.interpreters.e2b import E2BBackend
from sandrail.interpreters.simulator import Simulator
from sandrail.local_e2b import LocalE2B
from sandrail.records import SQLiteRecord
from tests.approval_rig import FIRST, FRAMEWORKS, RESUME, Policy, make_toolset
from tests.e2b_world import needs_root, new_session, server_fixture

server = server_fixture()
ROOT = Path(__file__).resolve().parent.parent


def _launches(sim: Simulator) -> int:
    return sum(sim.launches.values())


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_call_needing_approval_waits_and_approved_runs_once(framework: str) -> None:
    sim, policy = Simulator(), Policy()
    tools = make_toolset(sim, policy)
    first = FIRST[framework](tools, "echo deploy")
    assert first.waits is True
    assert policy.asked
    assert _launches(sim) == 0
    sent = json.loads(RESUME[framework](tools, first.saved, True, "echo deploy"))
    assert (sent["status"], sent["stdout"], sent["deduplicated"]) == ("ok", "deploy\n", False)
    assert _launches(sim) == 1


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_c5_a_rejected_call_runs_nothing(framework: str) -> None:
    sim = Simulator()
    tools = make_toolset(sim)
    first = FIRST[framework](tools, "echo deploy")
    sent = json.loads(RESUME[framework](tools, first.saved, False, "echo deploy"))
    assert (sent["status"], sent["error_type"], sent["executed"]) == (
        "error",
        "approval_rejected",
        False,
    )
    assert "rejected" in sent["instruction"]
    assert _launches(sim) == 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_c2_an_approval_resumed_twice_runs_once(framework: str, tmp_path: Path) -> None:
    """Two harnesses (fresh toolsets and adapters, as two processes would
    build them, with the adapters' defaults) resume the same saved copy;
    they share the durable record, as processes that resume each other's
    approvals must (``docs/howto/approval.md``)."""
    sim = Simulator()
    with SQLiteRecord(tmp_path / "record.sqlite") as record:
        first = FIRST[framework](make_toolset(sim, record=record), "echo deploy")
        sent = [
            json.loads(
                RESUME[framework](
                    make_toolset(sim, record=record), first.saved, True, "echo deploy"
                )
            )
            for _ in range(2)
        ]
    assert [(s["status"], s["deduplicated"]) for s in sent] == [("ok", False), ("ok", True)]
    assert sent[0]["operation_key"] == sent[1]["operation_key"]
    assert _launches(sim) == 1


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_c8_a_denied_call_never_asks(framework: str) -> None:
    sim, policy = Simulator(), Policy()
    first = FIRST[framework](make_toolset(sim, policy), "rm -rf /tmp/build")
    assert first.waits is False
    assert policy.asked == []
    assert policy.denied
    assert first.sent is not None
    sent = json.loads(first.sent)
    assert (sent["status"], sent["error_type"], sent["executed"]) == (
        "error",
        "policy_denied",
        False,
    )
    assert _launches(sim) == 0


# -- on local-e2b -------------------------------------------------------------------


@needs_root
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_local_e2b_approve_runs_once_reject_runs_nothing(server: LocalE2B, framework: str) -> None:
    approve, reject = f"approve-{framework}", f"reject-{framework}"
    with E2BBackend(**server.sdk_options) as backend:
        for mark, yes in ((approve, True), (reject, False)):
            # A session each: the rig's scripted models number their calls
            # from 1, and a key stays bound to the first call asked about.
            tools = make_toolset(backend, session=new_session())
            command = f"{server.mark(mark)}; echo deploy"
            first = FIRST[framework](tools, command)
            assert first.waits is True
            assert server.truth().marked(mark) == 0
            sent = json.loads(RESUME[framework](tools, first.saved, yes, command))
            assert sent["status"] == ("ok" if yes else "error"), sent
    assert server.truth().marked(approve) == 1
    assert server.truth().marked(reject) == 0


@needs_root
@pytest.mark.long
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_c2_local_e2b_an_approval_resumed_in_two_fresh_processes_runs_once(
    server: LocalE2B, framework: str, tmp_path: Path
) -> None:
    """The saved copy (serialized state, history, block or call) is resumed
    by ``python -m tests.approval_rig`` twice: two processes, each with a
    fresh backend, toolset and adapter at their defaults, and the SQLite
    record the process that asked used."""
    session, mark = new_session(), f"twice-{framework}"
    command = f"{server.mark(mark)}; echo deploy"
    record_path = tmp_path / "record.sqlite"
    with E2BBackend(**server.sdk_options) as backend, SQLiteRecord(record_path) as record:
        first = FIRST[framework](make_toolset(backend, session=session, record=record), command)
    assert first.waits is True
    saved = tmp_path / "saved"
    saved.write_text(first.saved, encoding="utf-8")
    env = {**os.environ, **server.env, "PYTHONPATH": str(ROOT)}
    sent = []
    for _ in range(2):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.approval_rig",
                framework,
                str(saved),
                session,
                str(record_path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        sent.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert [(s["status"], s["deduplicated"]) for s in sent] == [("ok", False), ("ok", True)]
    assert server.truth().marked(mark) == 1


@needs_root
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_c8_local_e2b_a_denied_call_never_asks(server: LocalE2B, framework: str) -> None:
    policy, mark = Policy(), f"deny-{framework}"
    with E2BBackend(**server.sdk_options) as backend:
        tools = make_toolset(backend, policy, session=new_session())
        first = FIRST[framework](tools, f"{server.mark(mark)}; rm -rf /tmp/none")
    assert (first.waits, policy.asked) == (False, [])
    assert first.sent is not None
    assert json.loads(first.sent)["error_type"] == "policy_denied"
    assert server.truth().marked(mark) == 0


def test_c2_agents_sdk_resumed_twice_with_tracing_off_runs_once(tmp_path: Path) -> None:
    """With tracing off the saved state carries no trace id: an approved
    call's key is then its call id's alone (``approved:{call_id}``), still
    the same in every process that resumes the state."""
    from agents import RunConfig, Runner, RunState
    from agents.testing import assistant_message, function_call

    from tests.approval_rig import NULLS, _agents_agent

    sim = Simulator()
    record = SQLiteRecord(tmp_path / "record.sqlite")  # the processes' shared record
    offline = RunConfig(tracing_disabled=True)
    call = function_call("run_command", {**NULLS, "command": "echo deploy"}, call_id="call_9")
    first = asyncio.run(
        Runner.run(
            _agents_agent(make_toolset(sim, record=record), [[call], [assistant_message("done")]]),
            "go",
            run_config=offline,
        )
    )
    saved = first.to_state().to_string()
    keys = []
    for _ in range(2):
        agent = _agents_agent(make_toolset(sim, record=record), [[assistant_message("done")]])

        async def resume(agent: Any = agent) -> Any:
            state = await RunState.from_string(agent, saved)
            state.approve(state.get_interruptions()[0])
            return await Runner.run(agent, state, run_config=offline)

        result = asyncio.run(resume())
        (sent,) = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
        keys.append(json.loads(sent)["operation_key"])
    assert keys == ["approved:call_9", "approved:call_9"]
    assert _launches(sim) == 1
    record.close()


def test_pydantic_ai_an_approval_with_other_arguments_runs_what_the_person_gave() -> None:
    """``ToolApproved(override_args=...)``: the person approved the call as
    they wrote it; that runs, once, and the model's own version never."""
    from pydantic_ai import DeferredToolResults, ToolApproved
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    from tests.approval_rig import NULLS, _pydantic_agent, _pydantic_returned

    sim = Simulator()
    tools = make_toolset(sim)
    first = FIRST["pydantic_ai"](tools, "echo deploy everything")
    override = ToolApproved(override_args={**NULLS, "command": "echo deploy staging"})
    result = _pydantic_agent(tools, "").run_sync(
        message_history=ModelMessagesTypeAdapter.validate_json(first.saved),
        deferred_tool_results=DeferredToolResults(approvals={"t1": override}),
    )
    sent = json.loads(_pydantic_returned(result))
    assert (sent["status"], sent["stdout"]) == ("ok", "deploy staging\n")
    assert _launches(sim) == 1
