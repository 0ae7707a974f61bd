"""Contract decisions made once, in the core: which earlier call a repeat is
(the Toolset and the MCP adapter use the one rule), and the ``uncertain``
result of a refusal that meets a call whose key already launched."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandrail
from sandrail.core import (
    AgentOwner,
    ErrorCode,
    OwnedCommand,
    PortSettings,
    canonical_json,
    command_tool_definitions,
    launch_digest,
    one_call,
    refused_after_launch,
    repeat_key,
    repeat_scope,
    same_call,
    settled_arguments,
)
from tests.embed_rig import toolset

SETTINGS = PortSettings(
    session_id="s",
    owner=AgentOwner(agent_id="a"),
    definitions=command_tool_definitions(),
    contract="test",
)
KNOWN = OwnedCommand(
    task_id="f" * 64, operation_key="k", sandbox_id="sbx-1", launched=True, launch_digest=None
)


@pytest.mark.parametrize(
    ("first", "again"),
    [
        ({"command": "x"}, {"command": "x", "background": False}),
        ({"command": "x", "timeout": None}, {"command": "x", "timeout": 300}),
        ({"command": "x", "timeout": 900}, {"command": "x", "timeout": 300}),  # capped
        ({"command": "x", "timeout": 5}, {"timeout": 5.0, "command": "x"}),
        ({"command": "x", "env": {}}, {"command": "x"}),
    ],
)
def test_c2_c3_same_call_is_the_launch_as_the_port_reads_it(
    first: dict[str, Any], again: dict[str, Any]
) -> None:
    text = same_call("run_command", first, SETTINGS)
    assert text is not None
    assert text == same_call("run_command", again, SETTINGS)
    # Its hash is the launch digest of the arguments with the port's deadline.
    as_run = {**first, "timeout": min(first.get("timeout") or 300, 300)}
    assert hashlib.sha256(text).hexdigest() == launch_digest("run_command", as_run)


def test_c3_different_calls_are_never_the_same_call() -> None:
    one = same_call("run_command", {"command": "x"}, SETTINGS)
    assert one != same_call("run_command", {"command": "y"}, SETTINGS)
    assert one != same_call("run_command", {"command": "x", "background": True}, SETTINGS)
    read = same_call("read_command_output", {"task_id": "a" * 64}, SETTINGS)
    assert read != same_call("stop_command", {"task_id": "a" * 64}, SETTINGS)


def test_same_call_has_no_text_for_arguments_the_port_refuses() -> None:
    assert same_call("run_command", {"command": "x", "timeout": float("nan")}, SETTINGS) is None
    # A deadline that is not a number is left as it is (refused later).
    assert same_call("run_command", {"command": "x", "timeout": "5"}, SETTINGS) is not None


@given(
    st.one_of(st.none(), st.text(max_size=5)),
    st.one_of(st.none(), st.integers(), st.text(max_size=8)),
    st.one_of(st.none(), st.text(max_size=4)),
)
def test_c2_repeat_scope_is_total_and_keys_name_their_own(run: Any, key: Any, call: Any) -> None:
    scope = repeat_scope(run, key, call)
    if isinstance(run, str):
        assert scope == "runs"
    elif not isinstance(key, str):
        assert scope == "key"
    elif isinstance(call, str) and key.endswith(":" + call) and len(key) > len(call) + 1:
        assert scope == "runs"
    else:
        assert scope == "key:" + key


def test_c2_the_toolset_and_the_mcp_adapter_match_repeats_by_one_rule() -> None:
    """Both ask :meth:`Toolset.one_call`, which is the core's rule on the
    arguments in the port's form (strict profiles converted first); the
    toolset's repeat digest is the launch digest of those arguments."""
    tools = toolset()
    port_settings = tools._ports["run_command"].settings
    strict: dict[str, Any] = {"command": "x", "cwd": None, "timeout": None, "env": []}
    strict["background"] = None
    expected = one_call("run_command", {"command": "x", "env": {}}, port_settings)
    assert expected["timeout"] == 300  # the port's deadline, in place of none
    assert tools.one_call("run_command", {"command": "x"}) == expected
    assert tools.one_call("run_command", strict, "openai-strict") == expected
    assert same_call("run_command", {"command": "x"}, port_settings) == canonical_json(
        {"tool": "run_command", "arguments": expected}
    )
    assert hashlib.sha256(
        same_call("run_command", {"command": "x"}, port_settings) or b""
    ).hexdigest() == launch_digest("run_command", expected)
    # Arguments the toolset refuses before the port, or no such tool: none.
    assert tools.one_call("run_command", ["command"]) is None
    assert tools.one_call("no_such_tool", {}) is None


def _request(call_id: str, identity: sandrail.AgentIdentity | None) -> sandrail.ToolRequest:
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id=call_id, arguments={}),
        operation_key="k",
        session_id="s",
        definition=command_tool_definitions()[1],
        identity=identity,
    )


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (ErrorCode.POLICY_DENIED, "the harness's policy now denies this call"),
        (ErrorCode.APPROVAL_REJECTED, "a person has now rejected it"),
    ],
)
def test_c5_c6_a_refusal_after_a_launch_is_uncertain_with_the_tasks_locator(
    code: ErrorCode, said: str
) -> None:
    request = _request("c2", sandrail.AgentIdentity(agent_id="a"))
    result = refused_after_launch(
        code, KNOWN, request, reason="no", readable=True, max_output_bytes=24_000
    )
    content = result.content
    assert result.status == "uncertain"
    assert "executed" not in content
    assert content["error_type"] == code.value
    assert content["evidence_incomplete"] is True
    assert content["outcome_reason"] == "no"
    assert {key: content[key] for key in ("session_id", "operation_key", "call_id")} == {
        "session_id": "s",
        "operation_key": "k",
        "call_id": "c2",
    }
    assert (content["sandbox_id"], content["task_id"]) == ("sbx-1", "f" * 64)
    assert content["agent_id"] == "a"
    assert said in content["instruction"]
    assert "read_command_output" in content["instruction"]
    unreadable = refused_after_launch(
        code, KNOWN, request, reason="", readable=False, max_output_bytes=24_000
    )
    assert "read_command_output" not in unreadable.content["instruction"]
    assert "outcome_reason" not in unreadable.content


def test_c12_a_refusal_after_a_launch_fits_the_budget_and_only_follows_refusals() -> None:
    request = _request("c", None)
    result = refused_after_launch(
        ErrorCode.POLICY_DENIED,
        KNOWN,
        request,
        reason="x" * 100_000,
        readable=True,
        max_output_bytes=600,
    )
    assert len(canonical_json(result.content)) <= 600
    assert result.content["task_id"] == "f" * 64
    with pytest.raises(ValueError, match="not a refusal that can follow a launch"):
        refused_after_launch(
            ErrorCode.CANCELED, KNOWN, request, reason="", readable=True, max_output_bytes=600
        )


_TIMEOUTS = st.one_of(
    st.none(),
    st.integers(min_value=-5, max_value=90_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=3),
)


@given(
    timeout=_TIMEOUTS,
    background=st.booleans(),
    field=st.sampled_from(["timeout", "background_timeout"]),
)
def test_c3_settled_arguments_keep_the_call_and_leave_out_only_a_default(
    timeout: object, background: bool, field: str
) -> None:
    """Leaving a deadline out never changes what the call is (its one-call
    form, so its launch), and only an accepted value of the argument the
    launch reads is ever left out."""
    arguments: dict[str, Any] = {"command": "x", "background": background, field: timeout}
    settled = settled_arguments("run_command", arguments, SETTINGS)
    if settled is arguments:
        return
    assert set(arguments) - set(settled) == {field}
    assert field == ("background_timeout" if background else "timeout")
    assert timeout is None or (type(timeout) in (int, float) and 1 <= timeout <= 86_400)  # type: ignore[operator]
    assert one_call("run_command", settled, SETTINGS) == one_call(
        "run_command", arguments, SETTINGS
    )
    assert settled_arguments("sandbox_status", arguments, SETTINGS) is arguments


@pytest.mark.parametrize("timeout", [None, 300, 600])
def test_c3_settled_arguments_never_leave_out_an_argument_the_tool_does_not_take(
    timeout: int | None,
) -> None:
    """Only an argument the tool's record names as setting its deadline is
    ever left out: a code snippet's ``background_timeout`` (no argument of
    its own) stays, so its refusal names it."""
    arguments = {"code": "1", "background": True, "background_timeout": timeout}
    assert settled_arguments("run_code", arguments, SETTINGS) is arguments


_NONE: dict[str, str | None] = {}


@pytest.mark.parametrize(
    ("earlier", "turn", "launched", "rejected", "runs_under"),
    [
        ([], "t2", False, (), "k2"),  # nothing to repeat
        ([("k1", "t1", _NONE)], "t2", False, (), "k1"),  # a repeat of another turn
        ([("k1", None, _NONE)], None, False, (), "k1"),  # turns not known: a repeat
        ([("k2", "t1", _NONE)], "t2", False, (), "k2"),  # its own key
        ([("k1", "t2", _NONE)], "t2", False, (), "k2"),  # the same turn: two calls
        ([("k1", "t1", _NONE)], "t2", True, (), "k2"),  # its own key launched: it reconciles there
        ([("k1", "t1", _NONE)], "t2", False, ("k1",), "k2"),  # rejected, nothing ran: settled
        ([("ka", "t1", _NONE), ("kb", "t1", _NONE)], "t2", False, (), "kb"),  # the newest first
        ([("ka", "t1", _NONE), ("kb", "t1", {"k3": "t2"})], "t2", False, (), "ka"),  # kb taken
        ([("ka", "t1", _NONE), ("kb", "t1", {"k3": "t3"})], "t2", False, (), "kb"),  # by another
        ([("ka", "t1", {"k2": "t2"}), ("kb", "t1", _NONE)], "t2", False, (), "ka"),  # its own
        ([("ka", "t1", {"k2": "t2"})], "t2", False, ("ka",), "k2"),  # its own, since rejected
        ([("ka", "t1", _NONE), ("kb", "t1", _NONE)], "t2", False, ("kb",), "ka"),  # kb rejected
        ([("ka", "t1", {"k3": "t2"}), ("kb", "t2", _NONE)], "t2", False, (), "k2"),  # none left
    ],
)
def test_c2_c8_repeat_key_is_an_earlier_calls_unless_the_two_are_two_calls(
    earlier: list[tuple[str, str | None, dict[str, str | None]]],
    turn: str | None,
    launched: bool,
    rejected: tuple[str, ...],
    runs_under: str,
) -> None:
    """The one rule for which key a repeat runs under (``k2`` its own, an
    unsettled earlier call's otherwise): of two identical unsettled calls,
    each repeat of one message takes its own, and keeps it when asked about
    or run again."""
    assert (
        repeat_key("k2", turn, earlier, launched=launched, rejected=rejected.__contains__)
        == runs_under
    )


def test_c2_repeat_key_keeps_the_earlier_call_a_repeat_ran_under_once_it_was_settled() -> None:
    """A repeat run again after the earlier call it ran under was settled
    (no longer among the unsettled) stays under that call's key, unless a
    person rejected it with nothing run, or its own key launched."""
    never: tuple[str, ...] = ()
    assert (
        repeat_key("k2", "t2", [], launched=False, rejected=never.__contains__, ran_before="k1")
        == "k1"
    )
    assert (
        repeat_key("k2", "t2", [], launched=False, rejected=("k1",).__contains__, ran_before="k1")
        == "k2"
    )
    assert (
        repeat_key("k2", "t2", [], launched=True, rejected=never.__contains__, ran_before="k1")
        == "k2"
    )
