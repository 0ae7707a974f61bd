"""Test your harness: your agent loop under sandbox failures, with sandrail.testing.

Run it with ``pytest examples/test_my_harness.py`` (``pip install 'sandrail[testing]'``).
Only ``sandrail`` and ``sandrail.testing`` are imported: this is what a
harness author's own test file looks like.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

import sandrail
from sandrail.testing import TRANSIENT_KINDS, Fault, FaultKind, World
from sandrail.testing.strategies import fault_plans

# -- the harness under test (your code) ---------------------------------------------------


def run_tool(
    port: sandrail.ToolPort,
    name: str,
    arguments: dict[str, Any],
    *,
    operation_key: str,
    attempts: int = 3,
) -> sandrail.ToolResult:
    """The harness's retry policy: an ``uncertain`` result is retried with the
    same operation key (never a new one), at most ``attempts`` times."""
    result = None
    for attempt in range(attempts):
        request = sandrail.ToolRequest(
            call=sandrail.ToolCall(name=name, call_id=f"call-{attempt}", arguments=arguments),
            operation_key=operation_key,
            session_id=port.settings.session_id,
            definition=port.definition(name),
            identity=sandrail.AgentIdentity(agent_id="agent-1"),
        )
        result = port.execute_sync(request)
        if result.status != "uncertain":
            break
    assert result is not None
    return result


# -- its tests ---------------------------------------------------------------------------


def test_a_lost_start_answer_is_retried_with_the_same_key_and_launches_once() -> None:
    with World.simulated([Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]) as world:
        port = world.command_tools()
        result = run_tool(port, "run_command", {"command": "echo hi"}, operation_key="run-7:c1")
        assert result.status == "ok"
        assert result.content["stdout"] == "hi\n"
        assert world.launches_of(port, "run-7:c1") == 1  # this key launched once...
        assert world.launched_commands()["echo hi"] == 1  # ...and no other key did
        world.assert_contract()  # every call, against the simulator's ground truth


@settings(max_examples=50, deadline=None)
@given(plan=fault_plans(max_faults=1, kinds=TRANSIENT_KINDS))
def test_after_any_transient_fault_the_loop_gets_an_answer_and_never_launches_twice(
    plan: Any,
) -> None:
    with World.simulated(plan) as world:
        port = world.command_tools()
        result = run_tool(port, "run_command", {"command": "echo hi"}, operation_key="run-7:c2")
        assert result.status in ("ok", "error")
        assert world.launched_commands()["echo hi"] <= 1
        world.assert_contract()


def test_the_kit_catches_a_loop_that_retries_with_a_new_key() -> None:
    """The bug this harness avoids: a retry with a fresh key is a new
    operation, so a start that did arrive runs twice."""
    with World.simulated([Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]) as world:
        port = world.command_tools()
        for attempt in range(2):
            run_tool(port, "run_command", {"command": "echo hi"}, operation_key=f"new-{attempt}")
        assert world.launched_commands()["echo hi"] == 2  # what run_tool's same key prevents
