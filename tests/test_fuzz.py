"""Fuzz: arbitrary requests always give a ToolResult, never an exception, and
nothing reaches the sandbox when a request or its arguments are refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

import sandrail
from sandrail.core import TOOL_NAMES, ErrorCode, canonical_json, tool_record
from sandrail.interpreters.simulator import SimulatedHarness, Simulator
from sandrail.testing.strategies import identifiers, json_text, json_values
from tests.rig import SCOPE, native_identity

REFUSED_BEFORE_ANY_EFFECT = {
    code.value
    for code in (
        ErrorCode.REQUEST_INVALID,
        ErrorCode.REQUEST_UNBOUND,
        ErrorCode.OPERATION_KEY_REQUIRED,
        ErrorCode.TOOL_UNBOUND,
        ErrorCode.DEFINITION_UNBOUND,
        ErrorCode.SIGNAL_UNBOUND,
        ErrorCode.SESSION_UNBOUND,
        ErrorCode.SCOPE_UNBOUND,
        ErrorCode.IDENTITY_REQUIRED,
        ErrorCode.PARENT_RUN_ID_INVALID,
        ErrorCode.FENCE_REQUIRED,
        ErrorCode.ARGUMENTS_INVALID,
        ErrorCode.BUDGET_BELOW_MINIMUM_IDENTITY,
        ErrorCode.UNSUPPORTED_LANGUAGE,
        ErrorCode.COMMAND_REQUIRED,
        ErrorCode.BACKGROUND_TIMEOUT_REQUIRES_BACKGROUND,
        ErrorCode.TIMEOUT_REQUIRES_FOREGROUND,
    )
}

TOOLS = list(TOOL_NAMES)

junk = st.one_of(
    st.none(),
    st.integers(),
    st.floats(),
    st.text(),
    st.binary(max_size=8),
    st.builds(object),
    st.lists(st.integers(), max_size=3),
)

# Arguments that look like a tool's but are often wrong in one place.
plausible_arguments = st.fixed_dictionaries(
    {},
    optional={
        "command": st.one_of(json_text, junk),
        "code": st.one_of(json_text, junk),
        "language": st.one_of(st.sampled_from(["py", "node", "sh", "ruby", " BASH "]), junk),
        "cwd": st.one_of(json_text, st.none(), junk),
        "env": st.one_of(st.dictionaries(json_text, json_text, max_size=3), junk),
        "timeout": st.one_of(st.integers(-2, 90_000), st.none(), junk),
        "background": st.one_of(st.booleans(), junk),
        "background_timeout": st.one_of(st.integers(-2, 90_000), st.none(), junk),
        "task_id": st.one_of(
            st.just("a" * 64), st.text("0123456789abcdef", min_size=64, max_size=64), junk
        ),
        "stdout_cursor": st.one_of(st.integers(-1, 2**60), junk),
        "max_bytes": st.one_of(st.integers(0, 70_000), junk),
        "wait_seconds": st.one_of(st.integers(-1, 700), junk),
        "surprise": json_values(5),
    },
)

arguments = st.one_of(plausible_arguments, json_values(10), junk)

_TASK = sandrail.task_id("session-1", sandrail.AgentOwner(agent_id="agent-1"), "op-1")
# More valid calls than each record's own minimal example, for the tools
# that have more to vary; a tool not named here is called with its example.
_MORE_VALID: dict[str, list[dict[str, Any]]] = {
    "run_command": [
        {"command": "seq 5", "background": True},
        {"command": "sleep 1", "timeout": 1, "env": {"A": "b"}, "cwd": "/tmp"},
    ],
    "read_command_output": [{"task_id": _TASK}, {"task_id": _TASK, "wait_seconds": 3}],
    "stop_command": [{"task_id": _TASK}],
    "run_code": [{"code": "echo 1", "language": "sh"}],
    "sandbox_run_code": [{"code": "1", "language": "nodejs"}],
}
VALID_ARGUMENTS: dict[str, list[dict[str, Any]]] = {
    name: [dict(tool_record(name).example_arguments), *_MORE_VALID.get(name, [])]
    for name in TOOL_NAMES
}


@st.composite
def requests(draw: st.DrawFn, port: sandrail.ToolPort, native: bool) -> Any:
    """A well-formed request with zero to three of its fields corrupted."""
    if draw(st.integers(0, 30)) == 17:  # rarely: not a request at all
        return draw(junk)
    name = draw(st.sampled_from([d.name for d in port.definitions]))
    good: dict[str, Any] = {
        "name": name,
        "call_id": "call-1",
        "arguments": draw(st.one_of(st.sampled_from(VALID_ARGUMENTS[name]), plausible_arguments)),
        "operation_key": draw(st.sampled_from(["op-1", "op-2"])),
        "session_id": "session-1",
        "definition": port.definition(name).to_dict(),
        "identity": (
            native_identity(fence=draw(st.integers(1, 5)))
            if native
            else sandrail.AgentIdentity(agent_id="agent-1")
        ),
        "cancel": draw(st.one_of(st.none(), st.builds(sandrail.CancelToken))),
        "result_governance": None,
    }
    bad: dict[str, st.SearchStrategy[Any]] = {
        "name": st.one_of(st.sampled_from(TOOLS), json_text),
        "call_id": st.one_of(json_text, junk),
        "arguments": arguments,
        "operation_key": st.one_of(json_text, junk),
        "session_id": st.one_of(json_text, junk),
        "definition": st.one_of(json_values(5), junk),
        "identity": st.one_of(
            st.builds(sandrail.AgentIdentity, agent_id=identifiers),
            st.builds(
                sandrail.NativeIdentity,
                scope=st.one_of(st.just(SCOPE), json_values(3)),
                run_id=st.one_of(identifiers, junk),
                turn_id=identifiers,
                build_id=identifiers,
                task_chain_id=identifiers,
                parent_run_id=st.one_of(st.none(), json_text),
                execution_fence=st.one_of(st.integers(-3, 2**60), junk),
            ),
            junk,
        ),
        "cancel": junk,
        "result_governance": st.one_of(st.just(sandrail.RUNTIME_ARTIFACTS), junk),
    }
    for field in draw(st.lists(st.sampled_from(sorted(bad)), max_size=3, unique=True)):
        good[field] = draw(bad[field])
    call: Any = sandrail.ToolCall(
        name=good.pop("name"), call_id=good.pop("call_id"), arguments=good.pop("arguments")
    )
    if draw(st.integers(0, 30)) == 17:  # rarely: not a request at all
        call = draw(junk)
    return sandrail.ToolRequest(call=call, **good)


def build(native: bool, code: bool, max_output_bytes: int) -> tuple[sandrail.ToolPort, Simulator]:
    sim = Simulator(harness=SimulatedHarness())
    factory = sandrail.code_tools if code else sandrail.command_tools
    owner: Any = (
        sandrail.NativeOwner(scope=SCOPE) if native else sandrail.AgentOwner(agent_id="agent-1")
    )
    port = factory(
        backend=sim,
        session_id="session-1",
        owner=owner,
        authorize=sim.harness.authorize,
        assert_authority=sim.harness.assert_authority,
        max_output_bytes=max_output_bytes,
    )
    return port, sim


@given(
    st.booleans(),
    st.booleans(),
    st.one_of(st.sampled_from([24_000, 2_000]), st.integers(256, 30_000)),
    st.data(),
)
def test_fuzz_every_request_gets_a_result_and_refusals_touch_nothing(
    native: bool, code: bool, max_output_bytes: int, data: st.DataObject
) -> None:
    port, sim = build(native, code, max_output_bytes)
    request = data.draw(requests(port, native))
    result = port.execute_sync(request)
    assert isinstance(result, sandrail.ToolResult)
    event(f"{result.status}: {result.error_type}")
    assert result.status in ("ok", "error", "uncertain", "approval_required")
    # What the model reads says its status, whatever path built it.
    assert result.content.get("status") == result.status
    body = canonical_json(result.content)
    if getattr(request, "result_governance", None) != sandrail.RUNTIME_ARTIFACTS:
        assert len(body) <= max_output_bytes
    if result.status == "error":
        assert result.content["executed"] is False
        if result.content["error_type"] in REFUSED_BEFORE_ANY_EFFECT:
            assert sim.effects_seen == []
    if sim.effects_seen == []:
        assert sim.launches == {}


@pytest.mark.untraced
@given(st.booleans(), st.data())
def test_fuzz_the_async_path_never_raises_either(native: bool, data: st.DataObject) -> None:
    port, _ = build(native, False, 2_000)
    request = data.draw(requests(port, native))
    result = asyncio.run(port.execute(request))
    assert isinstance(result, sandrail.ToolResult)
    assert len(canonical_json(result.content)) <= 2_000 or (
        getattr(request, "result_governance", None) == sandrail.RUNTIME_ARTIFACTS
    )
