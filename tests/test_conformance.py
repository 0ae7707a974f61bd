"""One set of scenarios, run on the simulator and on E2B-over-the-stand-in
(real bash); both must give the same statuses and content, ids aside.

Live E2B joins the parametrisation when ``E2B_API_KEY`` is set (marker
``live``). Only the public port API is used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import sandrail
from sandrail.interpreters.e2b import E2BBackend
from sandrail.interpreters.simulator import Simulator
from tests.e2b_standin import StandInSDK

SESSION = "conformance-session"
SCOPE = {"tenant": "t1"}
_IDS_ASIDE = ("sandbox_id",)


class World:
    """A port on one backend, plus request builders."""

    def __init__(self, backend: Any, *, native: bool = False, code: bool = False) -> None:
        self.native = native
        owner: sandrail.NativeOwner | sandrail.AgentOwner = (
            sandrail.NativeOwner(scope=SCOPE) if native else sandrail.AgentOwner(agent_id="a1")
        )
        build = sandrail.code_tools if code else sandrail.command_tools
        self.port = build(
            backend=backend,
            session_id=SESSION,
            owner=owner,
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
        )

    def call(self, tool: str, key: str, fence: int = 1, **arguments: Any) -> sandrail.ToolResult:
        identity: sandrail.NativeIdentity | sandrail.AgentIdentity
        if self.native:
            identity = sandrail.NativeIdentity(
                scope=SCOPE,
                run_id="r1",
                turn_id="t1",
                build_id="b1",
                task_chain_id="c1",
                parent_run_id=None,
                execution_fence=fence,
            )
        else:
            identity = sandrail.AgentIdentity(agent_id="a1")
        request = sandrail.ToolRequest(
            call=sandrail.ToolCall(name=tool, call_id=f"call-{key}", arguments=arguments),
            operation_key=key,
            session_id=SESSION,
            definition=self.port.definition(tool),
            identity=identity,
        )
        return self.port.execute_sync(request)


BACKENDS = ["simulator", "standin"] + (["live"] if os.environ.get("E2B_API_KEY") else [])


@pytest.fixture(params=BACKENDS)
def make(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make(native=..., code=...)`` builds a :class:`World` on the backend."""
    if request.param == "simulator":
        backend: Any = Simulator()
        yield lambda **kw: World(backend, **kw)
        return
    if request.param == "live":
        request.applymarker(pytest.mark.live)
        yield lambda **kw: World(E2BBackend(), **kw)
        return
    sdk = StandInSDK()
    backend = E2BBackend(sdk=sdk)
    try:
        yield lambda **kw: World(backend, **kw)
    finally:
        sdk.close()


def view(result: sandrail.ToolResult) -> tuple[str, dict[str, Any]]:
    content = {k: v for k, v in result.content.items() if k not in _IDS_ASIDE}
    return result.status, content


# Each scenario runs on every backend; the expected view is written once and
# must hold on all of them (that is the agreement).


def test_echo(make: Any) -> None:
    status, content = view(make().call("run_command", "k1", command="echo hi"))
    assert status == "ok"
    assert (content["status"], content["exit_code"], content["stdout"], content["stderr"]) == (
        "exited",
        0,
        "hi\n",
        "",
    )
    assert content["stdout_bytes"] == 3
    assert content["deduplicated"] is False


@pytest.mark.parametrize(("command", "code"), [("exit 3", 3), ("false", 1), ("true", 0)])
def test_exit_codes(make: Any, command: str, code: int) -> None:
    status, content = view(make().call("run_command", "k1", command=command))
    assert (status, content["status"], content["exit_code"]) == ("ok", "exited", code)


def test_seq_and_unicode(make: Any) -> None:
    world = make()
    _, content = view(world.call("run_command", "k1", command="seq 5"))
    assert content["stdout"] == "1\n2\n3\n4\n5\n"
    _, content = view(world.call("run_command", "k2", command="echo 'ünï ✓'"))
    assert content["stdout"] == "ünï ✓\n"


def test_c2_retry_is_deduplicated_with_the_first_output(make: Any) -> None:
    world = make()
    first = view(world.call("run_command", "k1", command="echo once"))
    again = view(world.call("run_command", "k1", command="echo once"))
    assert again[1].pop("deduplicated") is True
    assert first[1].pop("deduplicated") is False
    assert first[1].pop("call_id") == again[1].pop("call_id")
    assert first == again


def test_c3_same_key_other_arguments_conflicts(make: Any) -> None:
    world = make()
    world.call("run_command", "k1", command="echo one")
    status, content = view(world.call("run_command", "k1", command="echo two"))
    assert (status, content["error_type"], content["executed"]) == (
        "error",
        "e2b_command_operation_conflict",
        False,
    )


def test_c10_stale_fence_is_refused(make: Any) -> None:
    world = make(native=True)
    assert world.call("run_command", "k1", fence=5, command="true").status == "ok"
    status, content = view(world.call("run_command", "k2", fence=3, command="echo stale"))
    assert (status, content["error_type"]) == ("error", "e2b_command_fence_stale")


def test_foreground_timeout_is_timed_out_124(make: Any) -> None:
    status, content = view(make().call("run_command", "k1", command="sleep 30", timeout=1))
    assert (status, content["status"], content["exit_code"]) == ("ok", "timed_out", 124)


def test_background_then_read_with_wait(make: Any) -> None:
    world = make()
    started = world.call("run_command", "k1", command="echo bg", background=True)
    assert started.status == "ok"
    assert started.background_command_ref is not None
    task = started.content["task_id"]
    status, content = view(world.call("read_command_output", "k2", task_id=task, wait_seconds=10))
    assert status == "ok"
    assert (content["status"], content["exit_code"], content["stdout"]) == ("exited", 0, "bg\n")


def test_c18_stop_then_read(make: Any) -> None:
    world = make()
    started = world.call("run_command", "k1", command="sleep 30", background=True)
    task = started.content["task_id"]
    status, content = view(world.call("stop_command", "k2", task_id=task))
    assert (status, content["status"], content["exit_code"]) == ("ok", "canceled", 143)
    status, content = view(world.call("read_command_output", "k3", task_id=task))
    assert (status, content["status"], content["exit_code"]) == ("ok", "canceled", 143)


def test_c4_read_of_a_task_not_owned_is_refused(make: Any) -> None:
    status, content = view(make().call("read_command_output", "k1", task_id="f" * 64))
    assert (status, content["error_type"]) == ("error", "e2b_command_not_owned")


def test_c16_snippet_runs_from_a_file(make: Any) -> None:
    world = make(code=True)
    code = "echo \"from $(printf 'a file')\"\n"
    status, content = view(world.call("sandbox_run_code", "k1", code=code, language="bash"))
    assert status == "ok"
    assert (content["status"], content["exit_code"]) == ("exited", 0)
    # The simulator runs unscripted snippets silently; real bash prints.
    assert content["stdout"] in ("", "from a file\n")
