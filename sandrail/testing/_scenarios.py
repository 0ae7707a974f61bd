"""The conformance scenarios: short call sequences whose results every
backend must agree on, ids aside (``docs/explanation/contract.md``).

Each scenario takes a fresh :class:`World` (its ports of the world's
default owner, so each runs for an agent and a native owner alike) and
raises ``AssertionError`` saying what differed; the caller then asks the judge about the whole world
(:meth:`World.assert_contract`). The commands are real shell text (the
simulator plays them from :data:`~sandrail.testing.SCRIPTS`), so a backend
that runs a real shell and the simulator must give the same answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from sandrail import ToolResult
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan

from ._commands import GROUP, LATER, PRINT_ENV, SECRET, SNIPPET
from ._world import World

__all__ = ["SCENARIOS", "DoesNotApply", "Scenario"]


class DoesNotApply(Exception):
    """A scenario that cannot run on this target (it lacks a world control
    the scenario needs), and why. Not an ``AssertionError``: the kit reports
    it as not applying (pytest: skipped), never as passed."""


@attrs.frozen
class Scenario:
    """A named scenario: ``run(world)`` on a world made with ``plan``."""

    name: str
    run: Callable[[World], None]
    plan: FaultPlan = attrs.field(factory=FaultPlan)


def _ok(result: ToolResult, **expected: Any) -> dict[str, Any]:
    content = dict(result.content)
    seen = {key: content.get(key) for key in expected}
    assert result.status == "ok", f"expected ok, got {result.status}: {content}"
    assert seen == expected, f"expected {expected}, got {seen}"
    return content


def _refused(result: ToolResult, error_type: str) -> None:
    content = dict(result.content)
    assert (result.status, content.get("error_type"), content.get("executed")) == (
        "error",
        error_type,
        False,
    ), f"expected error {error_type} with executed false, got {result.status}: {content}"


def echo(world: World) -> None:
    result = world.call(world.command_tools(), "run_command", {"command": "echo hi"}, key="k1")
    _ok(result, command_status="exited", exit_code=0, stdout="hi\n", stderr="", stdout_bytes=3)
    assert result.content["deduplicated"] is False


def exit_codes(world: World) -> None:
    port = world.command_tools()
    for number, (command, code) in enumerate((("exit 3", 3), ("false", 1), ("true", 0))):
        result = world.call(port, "run_command", {"command": command}, key=f"k{number}")
        _ok(result, command_status="exited", exit_code=code)


def seq_and_unicode(world: World) -> None:
    port = world.command_tools()
    _ok(world.call(port, "run_command", {"command": "seq 5"}, key="k1"), stdout="1\n2\n3\n4\n5\n")
    result = world.call(port, "run_command", {"command": "echo 'ünï ✓'"}, key="k2")
    _ok(result, stdout="ünï ✓\n")


def c2_retry_returns_the_first_launch(world: World) -> None:
    port = world.command_tools()
    first = world.call(port, "run_command", {"command": "echo once"}, key="k1")
    again = world.call(port, "run_command", {"command": "echo once"}, key="k1")
    _ok(first, deduplicated=False, stdout="once\n")
    _ok(again, deduplicated=True, stdout="once\n", task_id=first.content["task_id"])
    assert world.launches_of(port, "k1") == 1, "the retry launched again"


def c2_lost_start_answer_then_retry_launches_once(world: World) -> None:
    port = world.command_tools()
    lost = world.call(port, "run_command", {"command": "echo once"}, key="k1")
    assert lost.status == "uncertain", f"a lost Start answer gave {lost.status}"
    again = world.call(port, "run_command", {"command": "echo once"}, key="k1")
    _ok(again, deduplicated=True, stdout="once\n")
    assert world.launches_of(port, "k1") == 1, "the retry launched again"


def c3_same_key_other_arguments_conflicts(world: World) -> None:
    port = world.command_tools()
    world.call(port, "run_command", {"command": "echo one"}, key="k1")
    result = world.call(port, "run_command", {"command": "echo two"}, key="k1")
    _refused(result, "e2b_command_operation_conflict")


def c4_read_of_a_task_not_owned_is_refused(world: World) -> None:
    port = world.command_tools()
    result = world.call(port, "read_command_output", {"task_id": "f" * 64}, key="k1")
    _refused(result, "e2b_command_not_owned")


def c10_stale_fence_is_refused(world: World) -> None:
    port = world.command_tools(owner="native")
    _ok(world.call(port, "run_command", {"command": "true"}, key="k1", fence=5))
    result = world.call(port, "run_command", {"command": "echo stale"}, key="k2", fence=3)
    _refused(result, "e2b_command_fence_stale")


def foreground_timeout_is_timed_out_124(world: World) -> None:
    port = world.command_tools()
    result = world.call(port, "run_command", {"command": "sleep 30", "timeout": 1}, key="k1")
    _ok(result, command_status="timed_out", exit_code=124)


def background_then_read_with_wait(world: World) -> None:
    port = world.command_tools()
    started = world.call(port, "run_command", {"command": LATER, "background": True}, key="k1")
    _ok(started, command_status="running")
    assert started.background_command_ref is not None, "a background launch names its command"
    task = started.content["task_id"]
    read = world.call(port, "read_command_output", {"task_id": task, "wait_seconds": 10}, key="k2")
    _ok(read, command_status="exited", exit_code=0, stdout="bg\n")


def c18_stop_ends_the_process_group(world: World) -> None:
    port = world.command_tools()
    started = world.call(port, "run_command", {"command": GROUP, "background": True}, key="k1")
    task = started.content["task_id"]
    _ok(world.call(port, "stop_command", {"task_id": task}, key="k2"), command_status="canceled")
    read = world.call(port, "read_command_output", {"task_id": task}, key="k3")
    _ok(read, command_status="canceled", exit_code=143)
    alive = world.truth.live_processes(task)
    assert alive == 0, f"{alive} process(es) of the stopped command still live"


def c16_snippet_runs_from_a_file(world: World) -> None:
    port = world.code_tools()
    arguments = {"code": SNIPPET, "language": "bash"}
    _ok(
        world.call(port, world.code_tool, arguments, key="k1"),
        command_status="exited",
        exit_code=0,
        stdout="from a file\n",
    )


def c17_env_values_never_shown(world: World) -> None:
    port = world.command_tools()
    arguments = {"command": PRINT_ENV, "env": {"API_TOKEN": SECRET}}
    result = world.call(port, "run_command", arguments, key="k1")
    _ok(result, command_status="exited", stdout="token=<redacted>\n")


def c2_no_fresh_sandbox_after_the_old_one_died(world: World) -> None:
    if not world.can_kill_sandbox:
        raise DoesNotApply("the target has no kill_sandbox control")
    port = world.command_tools()
    _ok(world.call(port, "run_command", {"command": "echo once"}, key="k1"), stdout="once\n")
    session = port.settings.session_id
    sandbox = world.sandbox_of(session)
    world.kill_sandbox(session)
    # A fresh sandbox holds none of the session's claims: the repeat would
    # launch again there. It ran once in the dead one: nobody can say more.
    repeat = world.call(port, "run_command", {"command": "echo once"}, key="k1")
    assert world.launches_of(port, "k1") == 1, "the repeat launched again after the sandbox died"
    assert repeat.status == "uncertain", (
        f"a repeat after the sandbox died gave {repeat.status}: {dict(repeat.content)}"
    )
    later = world.call(port, "run_command", {"command": "echo later"}, key="k2")
    _refused(later, "e2b_sandbox_unavailable")
    assert world.launches_of(port, "k2") == 0, "a launch after the sandbox died ran somewhere"
    assert world.sandbox_of(session) == sandbox, (
        f"the session was moved from its dead sandbox {sandbox} to {world.sandbox_of(session)}"
    )


_LOST_START = FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),))

SCENARIOS: tuple[Scenario, ...] = (
    Scenario("echo", echo),
    Scenario("exit_codes", exit_codes),
    Scenario("seq_and_unicode", seq_and_unicode),
    Scenario("c2_retry_returns_the_first_launch", c2_retry_returns_the_first_launch),
    Scenario(
        "c2_lost_start_answer_then_retry_launches_once",
        c2_lost_start_answer_then_retry_launches_once,
        _LOST_START,
    ),
    Scenario(
        "c2_no_fresh_sandbox_after_the_old_one_died", c2_no_fresh_sandbox_after_the_old_one_died
    ),
    Scenario("c3_same_key_other_arguments_conflicts", c3_same_key_other_arguments_conflicts),
    Scenario("c4_read_of_a_task_not_owned_is_refused", c4_read_of_a_task_not_owned_is_refused),
    Scenario("c10_stale_fence_is_refused", c10_stale_fence_is_refused),
    Scenario("foreground_timeout_is_timed_out_124", foreground_timeout_is_timed_out_124),
    Scenario("background_then_read_with_wait", background_then_read_with_wait),
    Scenario("c16_snippet_runs_from_a_file", c16_snippet_runs_from_a_file),
    Scenario("c17_env_values_never_shown", c17_env_values_never_shown),
    Scenario("c18_stop_ends_the_process_group", c18_stop_ends_the_process_group),
)
"""Every scenario, in the order the conformance kit runs them."""
