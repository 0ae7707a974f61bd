"""Scenario tests of the port on the simulator, one or more per contract line.

Each test runs the real port, core and simulator; ground truth (how many times
a task launched, which processes live, which effects reached the sandbox)
comes from the simulator.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest

import sandrail
from sandrail import ToolResult
from sandrail.core import (
    COMMAND_TOOL_NAMES,
    CheckAuthority,
    CommandState,
    Effect,
    ErrorCode,
    OwnedCommand,
    Start,
    Wait,
    fit_to_budget,
)
from sandrail.core._budget import parse_omissions
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Script, Simulator
from tests.rig import NATIVE_FIELDS, SCOPE, Mode, Rig, locator_keys, native_identity, size

MODES: list[Mode] = ["agent", "native"]


def fault(effect: str, kind: FaultKind, when: str = "before", occurrence: int = 0) -> FaultPlan:
    return FaultPlan(faults=(Fault(effect=effect, kind=kind, when=when, occurrence=occurrence),))  # type: ignore[arg-type]


def assert_error_nothing_ran(result: ToolResult, code: ErrorCode) -> None:
    assert result.status == "error", result.content
    assert result.content["error_type"] == code.value
    assert result.content["executed"] is False


def assert_uncertain_with_locator(result: ToolResult, rig: Rig, *, task: bool = True) -> None:
    """C6: uncertain, full locator, byte-identical identity, never executed:false."""
    assert result.status == "uncertain", result.content
    assert "executed" not in result.content
    content = result.content
    assert locator_keys(rig.mode) <= set(content)
    assert content["session_id"] == rig.session_id
    if rig.mode == "native":
        assert content["scope"] == dict(SCOPE)
    if task:
        assert content["task_id"] == rig.task_id(content["operation_key"])
        assert "sandbox_id" in content


# ---------------------------------------------------------------------------
# The tools, per owner mode


@pytest.mark.parametrize("mode", MODES)
def test_c7_foreground_run_reports_exit_and_output_of_exactly_one_launch(mode: Mode) -> None:
    rig = Rig(mode=mode, scripts={"make": Script.prints("built\n", stderr="warn\n", exit_code=2)})
    result = rig.run("run_command", {"command": "make"})
    assert result.status == "ok"
    content = result.content
    assert (content["command_status"], content["exit_code"]) == ("exited", 2)
    assert (content["stdout"], content["stderr"]) == ("built\n", "warn\n")
    assert content["deduplicated"] is False
    assert content["task_id"] == rig.task_id()
    assert locator_keys(mode) <= set(content)
    assert rig.sim.launches == {rig.task_id(): 1}
    assert result.background_command_ref is None


@pytest.mark.parametrize("mode", MODES)
def test_background_run_returns_task_id_state_and_owner_ref(mode: Mode) -> None:
    rig = Rig(mode=mode, scripts={"serve": Script.hangs("listening\n")})
    result = rig.run("run_command", {"command": "serve", "background": True}, key="op-bg")
    assert result.status == "ok"
    task = rig.task_id("op-bg")
    assert result.content["task_id"] == task
    assert result.content["command_status"] == "running"
    ref = result.background_command_ref
    if mode == "native":
        assert ref == sandrail.NativeCommandRef(
            task_id=task, source_run_id="run-1", operation_key="op-bg"
        )
    else:
        assert ref == sandrail.AgentCommandRef(
            task_id=task,
            agent_id="agent-1",
            session_id=rig.session_id,
            source_call_id="call-1",
            operation_key="op-bg",
        )
    assert rig.port.owned_commands[task].operation_key == "op-bg"


@pytest.mark.parametrize("mode", MODES)
def test_read_command_output_pages_through_cursors_and_rereads_identically(mode: Mode) -> None:
    text = "ünïcødé-" * 50 + "😀" * 20
    rig = Rig(mode=mode, scripts={"gen": Script.prints(text, duration=1)})
    rig.run("run_command", {"command": "gen", "background": True})
    task = rig.task_id()
    pieces: list[str] = []
    cursor = 0
    seen_cursors = []
    for _ in range(400):
        page = rig.run(
            "read_command_output",
            {"task_id": task, "stdout_cursor": cursor, "max_bytes": 7, "wait_seconds": 5},
            key="op-read",
        )
        assert page.status == "ok", page.content
        pieces.append(page.content["stdout"])
        page.content["stdout"].encode("utf-8")  # whole characters only
        seen_cursors.append((cursor, page.content["stdout"]))
        if cursor == page.content["stdout_cursor"] and not page.content["output_may_be_truncated"]:
            break
        cursor = page.content["stdout_cursor"]
    assert "".join(pieces) == text
    old_cursor, old_text = seen_cursors[3]
    again = rig.run(
        "read_command_output",
        {"task_id": task, "stdout_cursor": old_cursor, "max_bytes": 7},
        key="op-read",
    )
    assert again.content["stdout"] == old_text
    assert rig.sim.launches == {task: 1}


def test_read_wait_is_event_driven_and_never_changes_the_deadline() -> None:
    rig = Rig(scripts={"job": Script.prints("done\n", duration=2.5)})
    rig.run("run_command", {"command": "job", "background": True, "background_timeout": 60})
    start_clock = rig.sim.clock
    page = rig.run("read_command_output", {"task_id": rig.task_id(), "wait_seconds": 600})
    assert page.content["command_status"] == "exited"
    # Woke when the command ended (2.5 s after launch), not after 600 s.
    assert rig.sim.clock - start_clock < 3
    slow = Rig(scripts={"forever": Script.hangs()})
    slow.run("run_command", {"command": "forever", "background": True, "background_timeout": 100})
    page = slow.run("read_command_output", {"task_id": slow.task_id(), "wait_seconds": 10})
    assert page.content["command_status"] == "running"  # the wait ended; the command did not
    page = slow.run("read_command_output", {"task_id": slow.task_id(), "wait_seconds": 600})
    assert page.content["command_status"] == "timed_out"
    assert 100 <= slow.sim.clock < 120  # killed at its own deadline


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_status_reports_the_bound_sandbox(mode: Mode) -> None:
    rig = Rig(mode=mode)
    before = rig.run("sandbox_status")
    assert before.status == "ok"
    assert (before.content["sandbox_id"], before.content["sandbox_phase"]) == (None, "absent")
    rig.run("run_command", {"command": "true"})
    after = rig.run("sandbox_status")
    assert after.content["sandbox_phase"] == "ready"
    assert after.content["sandbox_id"] == "sbx-1"
    assert after.content["allow_internet_access"] is False


@pytest.mark.parametrize("mode", MODES)
def test_c16_run_code_publishes_a_0440_file_named_from_the_task_id(mode: Mode) -> None:
    source = "print('hi')\nimport os; os.system('rm -rf / $(whoami) `id`')\n" * 3
    rig = Rig(mode=mode, tools="code", scripts={source: Script.prints("hi\n")})
    result = rig.run(rig.code_tool, {"code": source, "language": "py3" if False else "python3"})
    assert result.status == "ok", result.content
    task = rig.task_id()
    files = rig.sim.files("sbx-1")
    (path,) = files
    assert task in path
    assert path.endswith(".py")
    assert files[path].source == source
    assert files[path].mode == 0o440
    (start,) = [e for e in rig.sim.applied if isinstance(e, Start)]
    assert source not in start.command
    assert start.command == f"python {path}"
    assert result.content["stdout"] == "hi\n"
    assert result.content["language"] == "python"


@pytest.mark.parametrize("mode", MODES)
def test_c16_unsupported_language_is_an_error_and_touches_nothing(mode: Mode) -> None:
    rig = Rig(mode=mode, tools="code")
    result = rig.run(rig.code_tool, {"code": "puts 1", "language": "ruby"})
    assert_error_nothing_ran(result, ErrorCode.UNSUPPORTED_LANGUAGE)
    assert rig.sim.effects_seen == []


# ---------------------------------------------------------------------------
# Identity and idempotence


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("background", [False, True])
def test_c2_retry_with_same_key_returns_first_launch_and_never_relaunches(
    mode: Mode, background: bool
) -> None:
    rig = Rig(mode=mode, scripts={"deploy": Script.prints("deployed\n", duration=1)})
    args: dict[str, Any] = {"command": "deploy", "background": background}
    first = rig.run("run_command", args)
    second = rig.run("run_command", args, call_id="call-2")
    assert first.status == second.status == "ok"
    assert (first.content["deduplicated"], second.content["deduplicated"]) == (False, True)
    assert second.content["task_id"] == first.content["task_id"]
    assert rig.sim.launches == {rig.task_id(): 1}


def test_c2_defaults_spelled_out_are_the_same_launch() -> None:
    rig = Rig()
    rig.run("run_command", {"command": "echo a"})
    again = rig.run("run_command", {"command": "echo a", "background": False, "cwd": None})
    assert again.status == "ok"
    assert again.content["deduplicated"] is True


def test_c2_a_restarted_harness_finds_the_first_launch() -> None:
    first = Rig(scripts={"migrate": Script.prints("migrated\n")})
    first.run("run_command", {"command": "migrate"})
    restarted = Rig(sim=first.sim)  # a new port, an empty ledger, the same sandbox
    again = restarted.run("run_command", {"command": "migrate"})
    assert again.status == "ok"
    assert again.content["deduplicated"] is True
    assert again.content["stdout"] == "migrated\n"
    assert first.sim.launches == {first.task_id(): 1}


def test_c2_concurrent_duplicates_launch_once() -> None:
    rig = Rig(scripts={"once": Script.prints("x", duration=1)})
    order: list[str] = []

    class Interleaving:
        """Yields to the event loop before every effect, so the two calls interleave."""

        asynchronous = True

        async def __call__(self, effect: Effect) -> Any:
            await asyncio.sleep(0)
            order.append(type(effect).__name__)
            return rig.sim(effect)

    rig.port = sandrail.command_tools(
        backend=Interleaving(),
        session_id=rig.session_id,
        owner=rig.owner,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )

    async def both() -> list[ToolResult]:
        requests = [rig.request("run_command", {"command": "once"}, call_id=c) for c in "ab"]
        return list(await asyncio.gather(*(rig.port.execute(r) for r in requests)))

    results = asyncio.run(both())
    assert order[:4] == ["Ensure", "Ensure", "Start", "Start"]  # really interleaved
    assert [r.status for r in results] == ["ok", "ok"]
    assert sorted(r.content["deduplicated"] for r in results) == [False, True]
    assert rig.sim.launches == {rig.task_id(): 1}


def test_c2_late_delivery_of_a_held_start_never_adds_a_launch() -> None:
    rig = Rig(plan=fault("Start", FaultKind.DELIVERED_LATE))
    rig.sim.late_delivery = "manual"
    lost = rig.run("run_command", {"command": "echo once"})
    assert_uncertain_with_locator(lost, rig)
    retry = rig.run("run_command", {"command": "echo once"}, call_id="call-2")
    assert retry.status == "ok"
    rig.sim.deliver_held()  # the first request arrives after all
    assert rig.sim.launches == {rig.task_id(): 1}
    assert rig.sim.late_deliveries[0][1] == sandrail.core.Started(
        task_id=rig.task_id(),
        first_launch=False,
        state=rig.sim.late_deliveries[0][1].state,  # type: ignore[union-attr]
    )


@pytest.mark.parametrize("mode", MODES)
def test_c3_same_key_different_arguments_is_a_conflict_and_launches_nothing(mode: Mode) -> None:
    rig = Rig(mode=mode)
    rig.run("run_command", {"command": "echo one"})
    other = rig.run("run_command", {"command": "echo two"})
    assert_error_nothing_ran(other, ErrorCode.OPERATION_CONFLICT)
    assert rig.sim.launches == {rig.task_id(): 1}


def test_c3_same_key_different_snippet_is_a_conflict_and_the_file_is_kept() -> None:
    rig = Rig(tools="code")
    rig.run(rig.code_tool, {"code": "print(1)"})
    other = rig.run(rig.code_tool, {"code": "print(2)"})
    assert_error_nothing_ran(other, ErrorCode.OPERATION_CONFLICT)
    assert [f.source for f in rig.sim.files("sbx-1").values()] == ["print(1)"]
    assert rig.sim.launches == {rig.task_id(): 1}


def test_c4_read_and_stop_refuse_another_sessions_task_before_any_sandbox_call() -> None:
    owner = Rig(scripts={"serve": Script.hangs()})
    owner.run("run_command", {"command": "serve", "background": True})
    other = Rig(sim=owner.sim, session_id="session-2")
    seen = len(owner.sim.effects_seen)
    for tool in ("read_command_output", "stop_command"):
        result = other.run(tool, {"task_id": owner.task_id()})
        assert_error_nothing_ran(result, ErrorCode.NOT_OWNED)
        guessed = other.run(tool, {"task_id": "0" * 64})
        assert_error_nothing_ran(guessed, ErrorCode.NOT_OWNED)
    assert len(owner.sim.effects_seen) == seen
    assert owner.sim.live_processes(owner.task_id()) == 1


def test_c4_an_owned_record_whose_key_does_not_derive_the_task_id_is_refused() -> None:
    rig = Rig(
        resolve_owned_command=lambda request, task: OwnedCommand(
            task_id=task, operation_key="some-other-key", sandbox_id="sbx-1"
        )
    )
    rig.run("run_command", {"command": "echo x", "background": True})
    seen = len(rig.sim.effects_seen)
    result = rig.run("read_command_output", {"task_id": rig.task_id()})
    assert_error_nothing_ran(result, ErrorCode.OWNED_OPERATION_MISMATCH)
    assert len(rig.sim.effects_seen) == seen


def test_c4_a_durable_resolver_lets_a_new_port_read_its_sessions_task() -> None:
    first = Rig(scripts={"serve": Script.hangs("up\n")})
    first.run("run_command", {"command": "serve", "background": True})
    durable = dict(first.port.owned_commands)
    second = Rig(sim=first.sim, resolve_owned_command=lambda request, task: durable.get(task))
    page = second.run("read_command_output", {"task_id": first.task_id()})
    assert page.status == "ok"
    assert page.content["stdout"] == "up\n"


# ---------------------------------------------------------------------------
# Outcomes


@pytest.mark.parametrize("effect", ["Ensure", "Publish"])
@pytest.mark.parametrize("kind", [FaultKind.NOT_DELIVERED])
def test_c5_failure_before_the_first_side_effect_is_an_error_and_nothing_arrives_later(
    effect: str, kind: FaultKind
) -> None:
    rig = Rig(tools="code", plan=fault(effect, kind))
    result = rig.run(rig.code_tool, {"code": "print(1)"})
    if effect == "Ensure":
        assert_error_nothing_ran(result, ErrorCode.SANDBOX_UNAVAILABLE)
    else:
        # Publish comes after Ensure, which may have created the sandbox.
        assert_uncertain_with_locator(result, rig)
    rig.sim.deliver_held()
    assert rig.sim.launches == {}


def test_c5_authority_missing_from_the_start_means_no_sandbox_call() -> None:
    rig = Rig(assert_authority=lambda request: False)
    result = rig.run("run_command", {"command": "echo x"})
    assert_error_nothing_ran(result, ErrorCode.AUTHORITY_UNPROVEN)
    assert rig.sim.effects_seen == []


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "kind",
    [
        FaultKind.RESPONSE_LOST,
        FaultKind.DELIVERED_LATE,
        FaultKind.HANG,
        FaultKind.MALFORMED_RESPONSE,
        FaultKind.SANDBOX_DIES,
    ],
)
def test_c6_a_start_whose_outcome_is_unknown_is_uncertain_with_the_full_locator(
    mode: Mode, kind: FaultKind
) -> None:
    rig = Rig(mode=mode, plan=fault("Start", kind, when="after"))
    result = rig.run("run_command", {"command": "echo x"})
    assert_uncertain_with_locator(result, rig)
    assert rig.sim.launches.get(rig.task_id(), 0) <= 1


def test_c6_reconciling_an_uncertain_launch_reports_what_happened() -> None:
    rig = Rig(plan=fault("Start", FaultKind.RESPONSE_LOST), scripts={"x": Script.prints("1")})
    lost = rig.run("run_command", {"command": "x", "background": True})
    assert lost.status == "uncertain"
    page = rig.run("read_command_output", {"task_id": lost.content["task_id"]})
    assert page.status == "ok"
    assert (page.content["command_status"], page.content["stdout"]) == ("exited", "1")
    assert rig.sim.launches == {rig.task_id(): 1}


def test_c6_a_foreground_command_that_outlives_the_wait_is_uncertain() -> None:
    rig = Rig(plan=fault("Wait", FaultKind.HANG), scripts={"slow": Script.hangs()})
    result = rig.run("run_command", {"command": "slow", "timeout": 5})
    assert_uncertain_with_locator(result, rig)


def test_timed_out_with_an_observed_exit_code_is_reported_not_guessed() -> None:
    rig = Rig(scripts={"slow": Script.hangs("partial\n")})
    result = rig.run("run_command", {"command": "slow", "timeout": 5})
    assert result.status == "ok"
    assert (result.content["command_status"], result.content["exit_code"]) == ("timed_out", 124)
    assert result.content["stdout"] == "partial\n"


# ---------------------------------------------------------------------------
# Authority, drift, abort


@pytest.mark.parametrize("mode", MODES)
def test_c8_deny_stops_before_any_side_effect(mode: Mode) -> None:
    rig = Rig(mode=mode, authorize=lambda request: sandrail.Deny(reason="no shell today"))
    result = rig.run("run_command", {"command": "echo x"})
    assert_error_nothing_ran(result, ErrorCode.POLICY_DENIED)
    assert result.content["instruction"] == "no shell today"
    assert rig.sim.effects_seen == []


def test_c8_approval_required_is_passed_through_unchanged() -> None:
    rig = Rig(authorize=lambda request: sandrail.ApprovalRequired(interaction_id="ask-42"))
    result = rig.run("run_command", {"command": "echo x"})
    assert result.status == "approval_required"
    assert result.content["interaction_id"] == "ask-42"
    assert rig.sim.effects_seen == []


def test_c8_policy_is_asked_before_the_first_sandbox_call() -> None:
    order: list[str] = []
    rig = Rig()
    sim_call = rig.sim.__call__

    def spy(effect: Effect) -> Any:
        order.append(type(effect).__name__)
        return sim_call(effect)

    def authorize(request: sandrail.ToolRequest) -> sandrail.Allow:
        order.append("authorize")
        return sandrail.ALLOW

    port = sandrail.command_tools(
        backend=spy,
        session_id=rig.session_id,
        owner=rig.owner,
        authorize=authorize,
        assert_authority=lambda request: True,
    )
    rig.port = port
    rig.run("run_command", {"command": "echo x"})
    assert order[0] == "authorize"
    assert order[1:] == ["Ensure", "Start", "Wait", "Read"]


def test_c9_drift_before_dispatch_is_an_error() -> None:
    def authorize(request: sandrail.ToolRequest) -> sandrail.Allow:
        request.call.arguments["command"] = "rm -rf /"  # type: ignore[index]
        return sandrail.ALLOW

    rig = Rig(authorize=authorize)
    result = rig.run("run_command", {"command": "echo safe"})
    assert_error_nothing_ran(result, ErrorCode.REQUEST_DRIFTED)
    assert rig.sim.effects_seen == []


@pytest.mark.parametrize(
    ("kind", "code"),
    [
        (FaultKind.AUTHORITY_LOST, ErrorCode.AUTHORITY_LOST),
        (FaultKind.REQUEST_MUTATED, ErrorCode.REQUEST_DRIFTED),
    ],
)
@pytest.mark.parametrize("effect", ["Ensure", "Start", "Wait", "Read"])
def test_c9_authority_lost_or_drift_after_dispatch_is_uncertain(
    kind: FaultKind, code: ErrorCode, effect: str
) -> None:
    rig = Rig(plan=fault(effect, kind, when="after"))
    result = rig.run("run_command", {"command": "echo x"})
    assert_uncertain_with_locator(result, rig)
    assert result.content["error_type"] == code.value
    assert rig.sim.launches.get(rig.task_id(), 0) == (0 if effect == "Ensure" else 1)


def test_c9_authority_is_checked_between_every_external_step() -> None:
    checks: list[str] = []
    rig = Rig()
    sim_call = rig.sim.__call__

    def spy(effect: Effect) -> Any:
        checks.append(type(effect).__name__)
        return sim_call(effect)

    def held(request: sandrail.ToolRequest) -> bool:
        checks.append("check")
        return True

    rig.port = sandrail.command_tools(
        backend=spy,
        session_id=rig.session_id,
        owner=rig.owner,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=held,
    )
    rig.run("run_command", {"command": "echo x"})
    steps = [c for c in checks if c != "check"]
    assert steps == ["Ensure", "Start", "Wait", "Read"]
    for step in steps:
        at = checks.index(step)
        assert checks[at - 1] == "check", checks
        assert checks[at + 1] == "check", checks


@pytest.mark.parametrize("mode", MODES)
def test_c11_abort_before_dispatch_is_canceled_and_touches_nothing(mode: Mode) -> None:
    rig = Rig(mode=mode)
    rig.harness.reset()
    rig.harness.cancel_token.cancel()
    result = rig.port.execute_sync(rig.request("run_command", {"command": "echo x"}))
    assert_error_nothing_ran(result, ErrorCode.CANCELED)
    assert rig.sim.effects_seen == []


@pytest.mark.parametrize("effect", ["Start", "Wait"])
def test_c11_abort_after_dispatch_is_uncertain(effect: str) -> None:
    rig = Rig(plan=fault(effect, FaultKind.ABORT, when="after"), scripts={"s": Script.hangs()})
    result = rig.run("run_command", {"command": "s", "timeout": 100})
    assert_uncertain_with_locator(result, rig)
    assert result.content["error_type"] == ErrorCode.ABORTED.value


def test_c11_an_async_wait_wakes_on_abort_at_once() -> None:
    sim = Simulator(scripts={"s": Script.hangs()})

    class SlowWait:
        asynchronous = True

        async def __call__(self, effect: Effect) -> Any:
            if isinstance(effect, Wait):
                await asyncio.sleep(30)
            return sim(effect)

    token = sandrail.CancelToken()
    port = sandrail.command_tools(
        backend=SlowWait(),
        session_id="s1",
        owner=sandrail.AgentOwner(agent_id="a"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    request = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c", arguments={"command": "s"}),
        operation_key="k",
        session_id="s1",
        definition=port.definition("run_command"),
        identity=sandrail.AgentIdentity(agent_id="a"),
        cancel=token,
    )

    async def scenario() -> tuple[ToolResult, float]:
        asyncio.get_running_loop().call_later(0.05, token.cancel)
        began = time.monotonic()
        result = await port.execute(request)
        return result, time.monotonic() - began

    result, elapsed = asyncio.run(scenario())
    assert result.status == "uncertain"
    assert result.content["error_type"] == ErrorCode.ABORTED.value
    assert elapsed < 5  # woke on abort, not after the 30 s wait


# ---------------------------------------------------------------------------
# Budget


@pytest.mark.parametrize("mode", MODES)
def test_c12_c13_huge_output_fits_the_budget_and_identity_is_byte_identical(mode: Mode) -> None:
    log = "".join(f"line {n}: compiling module_{n}.c\n" for n in range(40_000))
    tail = "error: undefined reference to `main`\n"
    rig = Rig(
        mode=mode,
        scripts={"build": Script.prints(log + tail, stderr="é" * 5000, exit_code=1)},
        max_output_bytes=4_000,
    )
    key = "op-" + "κ" * 300
    result = rig.run("run_command", {"command": "build"}, key=key)
    assert result.status == "ok"
    assert size(result) <= 4_000
    assert result.content["operation_key"] == key
    assert result.content["task_id"] == rig.task_id(key)
    if mode == "native":
        for name in NATIVE_FIELDS:
            assert result.content[name] == native_identity().locator()[name]
    stdout = result.content["stdout"]
    assert stdout.startswith("line 0: ")
    assert stdout.endswith(tail)
    (omission,) = parse_omissions(stdout)  # one cut, whatever the marker's words
    assert omission.omitted_bytes > 0
    assert result.content["output_budget"] == {"truncated": True}
    assert size(result) >= 0.99 * 4_000


@pytest.mark.parametrize("max_output_bytes", [256, 300, 600, 1000])
def test_c12_every_result_fits_even_tiny_budgets(max_output_bytes: int) -> None:
    rig = Rig(scripts={"x": Script.prints("y" * 10_000)}, max_output_bytes=max_output_bytes)
    results = [
        rig.run("run_command", {"command": "x"}, key="k"),
        rig.run("run_command", {"command": 3}),
        rig.run("run_command", {"command": "x", "bogus": [1] * 1000}),
        rig.run("read_command_output", {"task_id": "f" * 64}),
        rig.run("no_such_tool", {}),
        rig.run("sandbox_status"),
    ]
    for result in results:
        assert size(result) <= max_output_bytes, result.content


def test_c14_an_identity_too_big_for_the_budget_is_rejected_before_any_side_effect() -> None:
    rig = Rig(max_output_bytes=600)
    result = rig.run("run_command", {"command": "echo x"}, key="k" * 400)
    assert_error_nothing_ran(result, ErrorCode.BUDGET_BELOW_MINIMUM_IDENTITY)
    assert result.content["required_bytes"] > 600
    assert rig.sim.effects_seen == []


def test_c14_admission_is_exact_a_budget_one_byte_larger_admits_the_call() -> None:
    rig = Rig(max_output_bytes=600)
    refused = rig.run("run_command", {"command": "echo x"}, key="k" * 400)
    needed = refused.content["required_bytes"]
    roomy = Rig(max_output_bytes=needed)
    assert roomy.run("run_command", {"command": "echo x"}, key="k" * 400).status == "ok"


def test_c15_a_cut_result_is_kept_whole_in_the_artifact_store() -> None:
    store = sandrail.MemoryArtifactStore()
    rig = Rig(scripts={"big": Script.prints("z" * 100_000)}, artifacts=store)
    result = rig.run("run_command", {"command": "big"})
    assert result.status == "ok"
    (ref,) = result.artifact_refs
    note = result.content["output_budget"]
    assert note == {"truncated": True, "artifact_uri": ref.uri, "size_bytes": ref.size_bytes}
    assert len(ref.uri) < 40
    full = json.loads(store.read(ref.uri))
    assert full["stdout"] == "z" * 100_000
    assert size(result) <= 24_000


def test_c15_an_artifact_store_that_fails_still_yields_a_cut_result() -> None:
    class Broken:
        def write(self, key: str, content: str, media_type: str) -> sandrail.ArtifactRef:
            raise OSError("disk full")

    rig = Rig(scripts={"big": Script.prints("z" * 100_000)}, artifacts=Broken())
    result = rig.run("run_command", {"command": "big"})
    assert result.status == "ok"
    assert result.artifact_refs == ()
    assert result.content["output_budget"] == {"truncated": True}


def test_c12_runtime_governed_results_are_not_cut() -> None:
    rig = Rig(scripts={"big": Script.prints("z" * 100_000)})
    rig.harness.reset()
    request = rig.request(
        "run_command", {"command": "big"}, result_governance=sandrail.RUNTIME_ARTIFACTS
    )
    result = rig.port.execute_sync(request)
    assert result.content["stdout"] == "z" * 100_000


# ---------------------------------------------------------------------------
# Stop


@pytest.mark.parametrize("mode", MODES)
def test_c18_stop_ends_the_whole_process_group(mode: Mode) -> None:
    rig = Rig(mode=mode, scripts={"server": Script.hangs("up\n", children=3)})
    rig.run("run_command", {"command": "server", "background": True})
    task = rig.task_id()
    assert rig.sim.live_processes(task) == 4
    stopped = rig.run("stop_command", {"task_id": task}, key="op-stop")
    assert stopped.status == "ok"
    assert stopped.content["cancel_requested"] is True
    assert stopped.content["command_status"] == "canceled"
    assert "not proof" in stopped.content["instruction"]
    assert rig.sim.live_processes(task) == 0
    page = rig.run("read_command_output", {"task_id": task})
    assert (page.content["command_status"], page.content["exit_code"]) == ("canceled", 143)


def test_c6_a_stop_whose_answer_is_lost_is_uncertain() -> None:
    rig = Rig(plan=fault("Cancel", FaultKind.RESPONSE_LOST), scripts={"s": Script.hangs()})
    rig.run("run_command", {"command": "s", "background": True})
    result = rig.run("stop_command", {"task_id": rig.task_id()})
    assert_uncertain_with_locator(result, rig)


def test_c5_a_stop_that_never_left_is_an_error() -> None:
    rig = Rig(plan=fault("Cancel", FaultKind.NOT_DELIVERED), scripts={"s": Script.hangs()})
    rig.run("run_command", {"command": "s", "background": True})
    result = rig.run("stop_command", {"task_id": rig.task_id()})
    assert_error_nothing_ran(result, ErrorCode.SANDBOX_UNAVAILABLE)
    assert rig.sim.live_processes(rig.task_id()) == 1


# ---------------------------------------------------------------------------
# Requests the port refuses


def refused(rig: Rig, code: ErrorCode, **overrides: Any) -> None:
    rig.harness.reset()
    request = rig.request("run_command", {"command": "echo x"}, **overrides)
    result = rig.port.execute_sync(request)
    assert_error_nothing_ran(result, code)
    assert rig.sim.effects_seen == []


@pytest.mark.parametrize("mode", MODES)
def test_malformed_requests_get_specific_errors(mode: Mode) -> None:
    rig = Rig(mode=mode)
    definition = rig.port.definition("run_command")
    refused(rig, ErrorCode.OPERATION_KEY_REQUIRED, operation_key="  ")
    refused(rig, ErrorCode.REQUEST_UNBOUND, call=sandrail.ToolCall(name="run_command", call_id=""))
    refused(rig, ErrorCode.SESSION_UNBOUND, session_id="session-2")
    refused(rig, ErrorCode.DEFINITION_UNBOUND, definition=definition.to_dict() | {"name": "x"})
    refused(rig, ErrorCode.DEFINITION_UNBOUND, definition=None)
    refused(rig, ErrorCode.IDENTITY_REQUIRED, identity=None)
    refused(rig, ErrorCode.SIGNAL_UNBOUND, cancel=object())
    refused(rig, ErrorCode.REQUEST_INVALID, result_governance="mine")
    wrong = native_identity() if mode == "agent" else sandrail.AgentIdentity(agent_id="agent-1")
    refused(rig, ErrorCode.IDENTITY_REQUIRED, identity=wrong)
    rig.harness.reset()
    unknown = rig.port.execute_sync(rig.request("rm_rf", {}))
    assert_error_nothing_ran(unknown, ErrorCode.TOOL_UNBOUND)
    assert rig.port.execute_sync("not a request").content["error_type"] == (  # type: ignore[arg-type]
        ErrorCode.REQUEST_UNBOUND.value
    )


def test_native_identity_fields_are_each_checked() -> None:
    rig = Rig(mode="native")
    base = native_identity()
    cases = [
        (ErrorCode.SCOPE_UNBOUND, {"scope": {"tenant": "evil"}}),
        (ErrorCode.IDENTITY_REQUIRED, {"run_id": " "}),
        (ErrorCode.IDENTITY_REQUIRED, {"task_chain_id": 7}),
        (ErrorCode.PARENT_RUN_ID_INVALID, {"parent_run_id": ""}),
        (ErrorCode.FENCE_REQUIRED, {"execution_fence": 0}),
        (ErrorCode.FENCE_REQUIRED, {"execution_fence": True}),
        (ErrorCode.FENCE_REQUIRED, {"execution_fence": 2**53}),
    ]
    for code, change in cases:
        identity = sandrail.NativeIdentity(**(base.locator() | change))
        refused(rig, code, identity=identity)


def test_c10_a_stale_execution_fence_never_runs() -> None:
    rig = Rig(mode="native")
    assert rig.run("run_command", {"command": "echo new"}, key="a", fence=5).status == "ok"
    stale = rig.run("run_command", {"command": "echo old"}, key="b", fence=4)
    assert_error_nothing_ran(stale, ErrorCode.FENCE_STALE)
    assert rig.sim.launches == {rig.task_id("a"): 1}


def test_c2_a_stale_retry_of_a_launched_call_is_answered_not_told_it_never_ran() -> None:
    """A call whose start's answer was lost (``uncertain``), retried under its
    old fence after a newer one launched in the sandbox: its command did run,
    so the retry reconciles it from the claim (``ok``, deduplicated) instead of
    a stale-fence refusal that says nothing ran."""
    plan = FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST, when="after"),))
    rig = Rig(mode="native", plan=plan)
    first = rig.run("run_command", {"command": "echo a"}, key="a", fence=5)
    assert first.status == "uncertain"
    assert rig.run("run_command", {"command": "echo b"}, key="b", fence=6).status == "ok"
    retry = rig.run("run_command", {"command": "echo a"}, key="a", fence=5)
    assert retry.status == "ok", retry.content
    assert retry.content["deduplicated"] is True
    assert rig.sim.launches == {rig.task_id("a"): 1, rig.task_id("b"): 1}
    # A new call under the old fence is still refused: the fence refuses launches.
    assert_error_nothing_ran(
        rig.run("run_command", {"command": "echo c"}, key="c", fence=5), ErrorCode.FENCE_STALE
    )


def test_background_timeout_without_background_is_refused() -> None:
    rig = Rig()
    result = rig.run("run_command", {"command": "x", "background_timeout": 5})
    assert_error_nothing_ran(result, ErrorCode.BACKGROUND_TIMEOUT_REQUIRES_BACKGROUND)
    blank = rig.run("run_command", {"command": "   "})
    assert_error_nothing_ran(blank, ErrorCode.COMMAND_REQUIRED)
    assert rig.sim.effects_seen == []


def test_a_foreground_timeout_with_background_is_refused_not_ignored() -> None:
    """``timeout`` is the foreground command's; with ``background: true`` it
    used to be accepted and ignored. Now the schema says so (its ``then``
    rule) and the port refuses it before anything runs, naming the field to
    use; ``background_timeout`` alone still runs."""
    rig = Rig()
    both = rig.run("run_command", {"command": "x", "background": True, "timeout": 5})
    assert_error_nothing_ran(both, ErrorCode.TIMEOUT_REQUIRES_FOREGROUND)
    assert "background_timeout" in both.content["instruction"]
    assert rig.sim.effects_seen == []
    schema = rig.port.definition("run_command").to_dict()["parameters"]
    assert schema["then"] == {"properties": {"timeout": {"type": "null"}}}
    fine = rig.run("run_command", {"command": "x", "background": True, "background_timeout": 5})
    assert fine.status == "ok"


# ---------------------------------------------------------------------------
# execute never raises


def test_a_callback_that_raises_becomes_a_result() -> None:
    def boom(request: sandrail.ToolRequest) -> sandrail.Allow:
        raise RuntimeError("policy service down")

    rig = Rig(authorize=boom)
    result = rig.run("run_command", {"command": "echo x"})
    assert_error_nothing_ran(result, ErrorCode.HARNESS_CALLBACK_FAILED)

    def flaky(request: sandrail.ToolRequest) -> bool:
        raise RuntimeError("lease store down")

    rig = Rig(assert_authority=flaky)
    assert_error_nothing_ran(rig.run("run_command", {"command": "x"}), ErrorCode.AUTHORITY_UNPROVEN)


def test_c8_a_policy_that_raises_is_said_in_a_warning_without_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The harness's policy raising is its failure (nothing runs), and the
    log says so, naming the exception's type but not its message, which may
    quote the call."""

    def boom(request: sandrail.ToolRequest) -> sandrail.Allow:
        raise RuntimeError(f"policy service down for {request.call.arguments}")

    rig = Rig(authorize=boom)
    with caplog.at_level(logging.WARNING, logger="sandrail"):
        result = rig.run("run_command", {"command": "echo tok_1234567890"})
    assert_error_nothing_ran(result, ErrorCode.HARNESS_CALLBACK_FAILED)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "authorize raised RuntimeError; nothing ran" in warning
    assert "tok_1234567890" not in warning


def test_an_interpreter_bug_after_dispatch_is_uncertain_not_an_exception() -> None:
    sim = Simulator()

    def buggy(effect: Effect) -> Any:
        if isinstance(effect, Wait):
            raise ZeroDivisionError("bug")
        return sim(effect)

    rig = Rig(sim=sim)
    rig.port = sandrail.command_tools(
        backend=buggy,
        session_id=rig.session_id,
        owner=rig.owner,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    result = rig.run("run_command", {"command": "echo x"})
    assert_uncertain_with_locator(result, rig)


def test_an_async_authorize_in_a_sync_call_is_refused_cleanly() -> None:
    async def later(request: sandrail.ToolRequest) -> sandrail.Allow:
        return sandrail.ALLOW

    rig = Rig(authorize=later)
    result = rig.run("run_command", {"command": "echo x"})
    assert_error_nothing_ran(result, ErrorCode.HARNESS_CALLBACK_FAILED)
    assert rig.sim.effects_seen == []
    rig.harness.reset()
    ok = asyncio.run(rig.port.execute(rig.request("run_command", {"command": "echo x"})))
    assert ok.status == "ok"


def test_a_guard_report_the_core_does_not_recognise_fails_closed() -> None:
    sim = Simulator()

    class Lying:
        def open_call(self, request: Any, answer: Any) -> Any:
            def interpret(effect: Effect) -> Any:
                if isinstance(effect, CheckAuthority):
                    return "yes, all fine"
                if isinstance(effect, (Start, Wait)) or type(effect).__name__ in (
                    "Ensure",
                    "Read",
                    "Inspect",
                ):
                    return sim(effect)
                return answer(effect)

            return interpret

        def __call__(self, effect: Effect) -> Any:
            return sim(effect)

    rig = Rig(sim=sim)
    rig.port = sandrail.command_tools(
        backend=Lying(),
        session_id=rig.session_id,
        owner=rig.owner,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    result = rig.run("run_command", {"command": "echo x"})
    assert_error_nothing_ran(result, ErrorCode.AUTHORITY_UNPROVEN)


# ---------------------------------------------------------------------------
# Construction errors are immediate and clear


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backend": None}, "backend must be an interpreter"),
        ({"session_id": " "}, "session_id must be a non-blank string"),
        ({"owner": "agent-1"}, "owner must be"),
        ({"owner": sandrail.AgentOwner(agent_id="")}, "agent_id must be a non-blank"),
        ({"owner": sandrail.NativeOwner(scope={"x": {1, 2}})}, "scope must be JSON data"),
        ({"authorize": None}, "authorize must be a callable"),
        ({"assert_authority": None}, "assert_authority must be a callable"),
        ({"max_output_bytes": 255}, "max_output_bytes must be an integer of at least 256"),
        ({"foreground_timeout_seconds": 0}, "foreground_timeout_seconds must be an integer"),
        ({"background_timeout_seconds": 86_401}, "background_timeout_seconds must be"),
        ({"artifacts": object()}, "artifacts must be None or have write"),
        ({"resolve_owned_command": 3}, "resolve_owned_command must be None or a callable"),
        ({"allow_internet_access": "yes"}, "allow_internet_access must be a bool"),
    ],
)
def test_port_construction_errors_are_clear(options: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {
        "backend": Simulator(),
        "session_id": "s",
        "owner": sandrail.AgentOwner(agent_id="a"),
        "authorize": lambda request: sandrail.ALLOW,
        "assert_authority": lambda request: True,
    }
    arguments.update(options)
    with pytest.raises((TypeError, ValueError), match=message):
        sandrail.command_tools(**arguments)


def test_definitions_offer_the_right_tools_per_owner_mode() -> None:
    assert Rig().tool_names == COMMAND_TOOL_NAMES
    assert Rig(tools="code").tool_names == ("sandbox_run_code",)
    assert Rig(mode="native", tools="code").tool_names == ("run_code",)
    with pytest.raises(KeyError, match="no tool named"):
        Rig().port.definition("run_code")


def test_fit_to_budget_is_exported_for_harnesses() -> None:
    content = {"ok": True, "stdout": "x" * 1000}
    assert len(sandrail.canonical_json(fit_to_budget(content, 300))) <= 300
    assert CommandState(status="running").exit_code is None


@pytest.mark.parametrize(
    ("arguments", "field", "reason"),
    [
        ({"command": "echo a\x00b"}, "arguments.command", "NUL"),
        ({"command": "pwd", "cwd": "/tmp\x00"}, "arguments.cwd", "NUL"),
        ({"command": "env", "env": {"1BAD": "x"}}, "arguments.env.1BAD", "shell variable name"),
        ({"command": "env", "env": {"A-B": "x"}}, "arguments.env.A-B", "shell variable name"),
        ({"command": "env", "env": {"OK": "a\x00"}}, "arguments.env.OK", "NUL"),
        (
            {"command": "env", "env": {"BASH_XTRACEFD": "1"}},
            "arguments.env.BASH_XTRACEFD",
            "dynamic loader, the C library or the shell",
        ),
        (
            {"command": "env", "env": {"SHELLOPTS": "x"}},
            "arguments.env.SHELLOPTS",
            "dynamic loader, the C library or the shell",
        ),
        (
            {"command": "env", "env": {"BIG": "é" * 32_001}},
            "arguments.env.BIG",
            "at most 32000 characters",
        ),
    ],
)
def test_c5_c16_values_no_process_can_start_with_are_refused_before_any_side_effect(
    arguments: dict[str, Any], field: str, reason: str
) -> None:
    rig = Rig()
    result = rig.run("run_command", arguments)
    assert_error_nothing_ran(result, ErrorCode.ARGUMENTS_INVALID)
    (problem,) = result.content["problems"]
    assert problem["field"] == field
    assert reason in problem["reason"]
    assert rig.sim.effects_seen == []


@pytest.mark.parametrize("mode", MODES)
def test_c17_env_values_never_appear_in_any_result(mode: Mode) -> None:
    """sandrail itself never writes an env value into a result: not on
    success, not in a refusal, not in an uncertain locator. (What a command
    chooses to print is its own output.)"""
    secret = "s3cr3t-" + "value-" * 3
    rig = Rig(mode=mode, scripts={"deploy": Script.hangs("deploying\n")})
    env = {"TOKEN": secret, "OTHER": secret[::-1]}
    results = [
        rig.run("run_command", {"command": "deploy", "env": env, "background": True}),
        rig.run("run_command", {"command": "deploy", "env": env}, key="fg", call_id="c2"),
        rig.run("read_command_output", {"task_id": rig.task_id()}, key="read"),
        rig.run("stop_command", {"task_id": rig.task_id()}, key="stop"),
        rig.run("run_command", {"command": "deploy", "env": env | {"1BAD": secret}}, key="bad"),
        rig.run("run_command", {"command": "deploy", "env": {"TOKEN": 7}}, key="bad2"),
    ]
    faulty = Rig(mode=mode, plan=fault("Start", FaultKind.RESPONSE_LOST))
    results.append(faulty.run("run_command", {"command": "deploy", "env": env}))
    statuses = {result.status for result in results}
    assert statuses == {"ok", "error", "uncertain"}
    for result in results:
        text = json.dumps(result.to_dict(), ensure_ascii=False)
        assert secret not in text
        assert secret[::-1] not in text


@pytest.mark.parametrize("mode", MODES)
def test_c17_env_values_a_command_prints_are_masked_in_results(mode: Mode) -> None:
    """A command that prints an env value it was given: its result, and later
    reads of its output through the same port, show ``<redacted>`` instead."""
    secret = "tok-" + "9" * 20
    rig = Rig(
        mode=mode,
        scripts={
            "deploy": Script.prints(f"using {secret}\n", stderr=f"{secret}!\n"),
            "daemon": Script.hangs(f"daemon {secret}\n"),
            "short": Script.prints("value 1234567\n"),
        },
    )
    env = {"TOKEN": secret, "PIN": "1234567"}  # a 7-character value is not searched for
    result = rig.run("run_command", {"command": "deploy", "env": env})
    assert (result.content["stdout"], result.content["stderr"]) == (
        "using <redacted>\n",
        "<redacted>!\n",
    )
    rig.run("run_command", {"command": "daemon", "env": env, "background": True}, key="bg")
    page = rig.run("read_command_output", {"task_id": rig.task_id("bg")}, key="read")
    assert page.content["stdout"] == "daemon <redacted>\n"
    short = rig.run("run_command", {"command": "short", "env": env}, key="short")
    assert short.content["stdout"] == "value 1234567\n"


@pytest.mark.parametrize(
    ("returned", "named"),
    [
        (True, "authorize returned True"),
        ("allow", "authorize returned the string 'allow'"),
        (None, "authorize returned None"),
        (sandrail.Deny, "authorize returned the class Deny (not an instance of it)"),
        ({"allow": True}, "authorize returned a dict"),
    ],
)
def test_c8_a_policy_that_returns_no_decision_is_a_harness_failure_named_in_the_log(
    returned: object, named: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``authorize=lambda r: True`` (the shape ``assert_authority`` takes),
    ``"allow"``, ``None`` or the ``Deny`` class: nothing runs, as before, but
    the call is no silent ``policy_denied``: it is the harness's callback
    failing, and a warning names what was returned and what is accepted."""
    sim = Simulator()
    port = sandrail.command_tools(
        backend=sim,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: returned,
        assert_authority=lambda request: True,
    )
    request = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c1", arguments={"command": "x"}),
        operation_key="k1",
        session_id="session-1",
        definition=port.definition("run_command"),
        identity=sandrail.AgentIdentity(agent_id="agent-1"),
    )
    with caplog.at_level(logging.WARNING, logger="sandrail"):
        result = port.execute_sync(request)
    assert (result.status, result.content["executed"]) == ("error", False)
    assert result.content["error_type"] == "e2b_command_harness_callback_failed"
    assert sim.effects_seen == []
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert named in warning.getMessage()
    assert "sandrail.ALLOW, sandrail.ApprovalRequired(" in warning.getMessage()


@pytest.mark.parametrize(
    ("returned", "named"),
    [(None, "returned None"), ("yes", "returned the string 'yes'"), (1, "returned a int")],
)
def test_c9_an_authority_check_that_returns_no_answer_stops_the_call_and_says_so(
    returned: object, named: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``assert_authority`` returning ``None``, ``"yes"`` or ``1`` is counted
    as ``False`` (fail closed: nothing runs), and a warning names what it
    returned and what it must return, so the harness's bug is not read as
    a lost lease."""
    rig = Rig(assert_authority=lambda request: returned)
    with caplog.at_level(logging.WARNING, logger="sandrail"):
        result = rig.run("run_command", {"command": "echo hi"})
    assert result.content["executed"] is False
    assert result.content["error_type"] == "e2b_command_authority_unproven"
    assert rig.sim.launches == {}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings
    assert all(f"assert_authority {named}" in w for w in warnings)
    assert "it must return True" in warnings[0]


def test_c8_an_async_policy_under_call_sync_is_named_with_what_to_do_instead(
    caplog: pytest.LogCaptureFixture, recwarn: pytest.WarningsRecorder
) -> None:
    """An ``async def`` authorize under ``call_sync``: nothing runs (the
    coroutine cannot be awaited there) and the log says why and what works
    (``await toolset.call(...)``, or a synchronous authorize), with no
    "coroutine was never awaited" warning left behind."""

    async def allow(request: sandrail.ToolRequest) -> sandrail.Allow:
        return sandrail.ALLOW

    sim = Simulator()
    tools = sandrail.Toolset(
        backend=sim,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=allow,
        assert_authority=lambda request: True,
    )
    with caplog.at_level(logging.WARNING, logger="sandrail"):
        result = tools.call_sync("run_command", {"command": "x"}, call_id="c1", operation_key="k1")
    assert (result.status, result.content["executed"]) == ("error", False)
    assert result.content["error_type"] == "e2b_command_harness_callback_failed"
    assert sim.effects_seen == []
    (warning,) = [record for record in caplog.records if record.levelno == logging.WARNING]
    message = warning.getMessage()
    assert "authorize is asynchronous" in message
    assert "await toolset.call(" in message
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_c5_a_gone_sandbox_is_not_answered_as_a_blip_to_retry() -> None:
    """The session's sandbox is gone and no second one is made: the error
    says nothing ran, but not that a retry helps; it names how to tell
    (``sandbox_status``) and that no second sandbox comes."""
    sim = Simulator()
    tools = sandrail.Toolset(
        backend=sim,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    assert (
        tools.call_sync("run_command", {"command": "true"}, call_id="c1", operation_key="k1").status
        == "ok"
    )
    sim.kill_sandbox("sbx-1")
    result = tools.call_sync("run_command", {"command": "true"}, call_id="c2", operation_key="k2")
    assert (result.status, result.content["executed"]) == ("error", False)
    assert result.content["error_type"] == ErrorCode.SANDBOX_UNAVAILABLE.value
    instruction = result.content["instruction"]
    assert "may be retried" not in instruction
    assert "sandbox_status" in instruction
    assert "no second sandbox" in instruction
