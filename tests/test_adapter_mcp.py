"""The MCP adapter and ``sandrail mcp``, driven by the official MCP client:
in memory, over stdio and over streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from typing import Any

import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters

from sandrail.adapters.mcp import OPERATION_KEY_META, server, typed_schema
from sandrail.core import TOOLS, ToolSet
from tests.embed_rig import RealTimeWaits, launches, mcp_content, toolset

# What the server offers its agent owner: the command tools and the agent's code tool.
_AGENTS_TOOLS = [
    name for name, record in TOOLS.items() if record.tool_set is not ToolSet.NATIVE_CODE
]

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _key(key: str) -> dict[str, str]:
    return {OPERATION_KEY_META: key}


async def _recorded(tools: Any, key: str | None = None) -> None:
    """Wait (at most 10 s) until the server has recorded the abandoned call."""
    for _ in range(1000):
        if (key in tools.abandoned) if key is not None else tools.abandoned:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server never recorded the cancelled call")


async def test_mcp_lists_every_tool_with_its_schema_and_hints() -> None:
    tools = toolset()
    async with Client(server(tools)) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(listed) == list(tools.names)
    for name, tool in listed.items():
        assert tool.input_schema == typed_schema(tools.schema(name))
        assert tool.annotations.read_only_hint is tools.definition(name).read_only
    async with Client(server(tools, profile="openai-strict")) as client:
        strict = (await client.list_tools()).tools
    assert strict[1].input_schema == typed_schema(tools.schema("run_command", "openai-strict"))


async def test_c12_mcp_sends_exactly_the_budgeted_text() -> None:
    tools = toolset(max_output_bytes=1200)
    async with Client(server(tools)) as client:
        small = await client.call_tool("run_command", {"command": "echo héllo ✓"})
        big = await client.call_tool("run_command", {"command": "seq 5000"})
    text = small.content[0].text
    assert "héllo ✓" in text
    assert "\\u" not in text
    assert small.is_error is False
    assert small.meta["sandrail/status"] == "ok"
    for result in (small, big):
        assert len(result.content[0].text.encode("utf-8")) <= 1200
    assert mcp_content(big)["output_budget"]["truncated"] is True


async def test_c2_mcp_retry_with_the_meta_key_never_launches_twice() -> None:
    tools = toolset()
    async with Client(server(tools)) as client:
        first = await client.call_tool("run_command", {"command": "echo once"}, meta=_key("op-1"))
        again = await client.call_tool("run_command", {"command": "echo once"}, meta=_key("op-1"))
    assert mcp_content(first)["deduplicated"] is False
    assert mcp_content(again)["deduplicated"] is True
    assert again.meta[OPERATION_KEY_META] == "op-1"
    assert launches(tools) == 1


async def test_c2_mcp_without_a_key_repeats_after_a_returned_result_but_retries_join() -> None:
    """The fallback: an identical call after a settled result runs anew; a
    call whose result never came back is joined by its retry."""
    backend = RealTimeWaits()
    tools = toolset(backend)
    async with Client(server(tools)) as client:
        one = await client.call_tool("run_command", {"command": "echo poll"})
        two = await client.call_tool("run_command", {"command": "echo poll"})
        assert one.meta[OPERATION_KEY_META] != two.meta[OPERATION_KEY_META]
        assert launches(tools) == 2
        call = asyncio.ensure_future(client.call_tool("run_command", {"command": "sleep 1"}))
        await backend.waiting.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await _recorded(tools)
        (abandoned,) = tools.abandoned.values()
        assert abandoned.status == "uncertain"
        retry = await client.call_tool("run_command", {"command": "sleep 1"})
    assert retry.meta["sandrail/status"] == "ok"
    assert mcp_content(retry)["deduplicated"] is True
    assert mcp_content(retry)["operation_key"] == abandoned.content["operation_key"]
    assert launches(tools) == 3


async def test_mcp_background_run_and_its_read() -> None:
    tools = toolset()
    async with Client(server(tools)) as client:
        started = await client.call_tool(
            "run_command", {"command": "echo bg", "background": True}, meta=_key("bg-1")
        )
        task_id = mcp_content(started)["task_id"]
        read = await client.call_tool(
            "read_command_output", {"task_id": task_id, "wait_seconds": 5}, meta=_key("read-1")
        )
    assert mcp_content(started)["command_status"] in ("running", "exited")
    assert mcp_content(read)["stdout"] == "bg\n"
    assert read.is_error is False


async def test_c5_mcp_refused_calls_are_errors_that_ran_nothing() -> None:
    tools = toolset()
    async with Client(server(tools)) as client:
        bad = await client.call_tool("run_command", {"command": "env", "env": {"LD_PRELOAD": "x"}})
        blank = await client.call_tool("run_command", {"command": "  "})
    assert bad.is_error is True
    assert bad.meta["sandrail/status"] == "error"
    assert mcp_content(bad)["problems"][0]["field"] == "arguments.env.LD_PRELOAD"
    assert mcp_content(blank)["error_type"] == "command_required"
    assert launches(tools) == 0


async def test_c11_mcp_client_cancel_aborts_and_the_retry_reconciles() -> None:
    backend = RealTimeWaits()
    tools = toolset(backend)
    async with Client(server(tools)) as client:
        call = asyncio.ensure_future(
            client.call_tool("run_command", {"command": "sleep 1"}, meta=_key("op-c"))
        )
        await backend.waiting.wait()  # launched: the command runs
        call.cancel()  # the client gives up: it sends notifications/cancelled
        with pytest.raises(asyncio.CancelledError):
            await call
        await _recorded(tools, "op-c")
        assert tools.abandoned["op-c"].status == "uncertain"
        assert tools.abandoned["op-c"].content["error_type"] == "e2b_command_aborted"
        retry = await client.call_tool("run_command", {"command": "sleep 1"}, meta=_key("op-c"))
    assert retry.meta["sandrail/status"] == "ok"
    assert mcp_content(retry)["deduplicated"] is True
    assert launches(tools) == 1


async def test_c11_mcp_cancel_before_anything_ran_runs_nothing() -> None:
    gate = asyncio.Event()

    async def slow_policy(request: object) -> Any:
        await gate.wait()
        import sandrail

        return sandrail.ALLOW

    tools = toolset(RealTimeWaits(), authorize=slow_policy)
    async with Client(server(tools)) as client:
        with pytest.raises(MCPError, match="Timed out"):
            await client.call_tool(
                "run_command", {"command": "echo x"}, read_timeout_seconds=0.2, meta=_key("op-p")
            )
    assert tools.abandoned["op-p"].content["error_type"] == "canceled"
    assert tools.abandoned["op-p"].content["executed"] is False
    assert launches(tools) == 0


async def test_mcp_over_stdio_with_the_official_client() -> None:
    """``sandrail mcp`` as a client starts it: list, run, dedup, refusal."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "sandrail", "mcp", "--backend", "simulator"]
    )
    with anyio_fail_after(60):
        async with Client(params) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            first = await client.call_tool("run_command", {"command": "echo hi"}, meta=_key("s-1"))
            again = await client.call_tool("run_command", {"command": "echo hi"}, meta=_key("s-1"))
            refused = await client.call_tool("read_command_output", {"task_id": "nope"})
    assert names == _AGENTS_TOOLS
    assert mcp_content(first)["stdout"] == "hi\n"
    assert mcp_content(again)["deduplicated"] is True
    assert refused.is_error is True
    assert mcp_content(refused)["error_type"] == "e2b_command_arguments_invalid"


def anyio_fail_after(seconds: float) -> Any:
    import anyio

    return anyio.fail_after(seconds)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_mcp_over_streamable_http_on_loopback() -> None:
    port = _free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "sandrail", "mcp", "--backend", "simulator"),
            *("--transport", "http", "--port", str(port)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
                assert time.monotonic() < deadline, "the server did not start"
                await asyncio.sleep(0.1)
        with anyio_fail_after(30):
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                listed = (await client.list_tools()).tools
                ran = await client.call_tool("run_command", {"command": "echo web"})
        assert [tool.name for tool in listed] == _AGENTS_TOOLS
        assert mcp_content(ran)["stdout"] == "web\n"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def test_mcp_http_refuses_a_remote_host_without_the_flag() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sandrail", "mcp", "--transport", "http", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--allow-remote" in done.stderr


async def test_recent_events_replay_a_stream_after_the_last_event_seen() -> None:
    """A client that lost its connection resumes from its last event id and
    gets what the server sent meanwhile (a result it would otherwise miss)."""
    from mcp.server.streamable_http import EventMessage

    from sandrail.adapters.mcp import recent_events

    store = recent_events(limit=3)
    first = await store.store_event("s1", {"n": 1})
    await store.store_event("s2", {"other": True})
    await store.store_event("s1", {"n": 2})
    got: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        got.append(event)

    assert await store.replay_events_after(first, send) == "s1"
    assert [event.message for event in got] == [{"n": 2}]
    await store.store_event("s1", {"n": 3})  # the oldest event leaves
    assert await store.replay_events_after(first, send) is None


async def test_c2_c6_mcp_without_a_key_an_uncertain_call_is_reconciled_not_rerun() -> None:
    """The Start's answer is lost: the first call is uncertain. The model calls
    the same tool with the same arguments again (no key: a generic client):
    the fallback keeps the key, so the sandbox's claim answers and nothing
    launches a second time."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator

    plan = FaultPlan(faults=(Fault(effect="Start", kind=FaultKind.RESPONSE_LOST, when="after"),))
    tools = toolset(Simulator(plan=plan))
    async with Client(server(tools)) as client:
        lost = await client.call_tool("run_command", {"command": "echo once"})
        again = await client.call_tool("run_command", {"command": "echo once"})
    assert lost.meta["sandrail/status"] == "uncertain"
    assert "same sandrail/operation_key" in lost.meta["sandrail/next"]
    assert again.meta[OPERATION_KEY_META] == lost.meta[OPERATION_KEY_META]
    assert again.meta["sandrail/status"] == "ok"
    assert launches(tools) == 1


async def test_c2_mcp_fallback_keys_of_one_call_spelled_two_ways_are_one_key() -> None:
    """A client's retry that spells out a default is the same call, as a
    model's exact repeat is to the toolset: the Start's answer is lost, the
    retry (no key) names ``background: false`` and a null timeout, and it
    reconciles the first call instead of running it again (C2)."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator

    plan = FaultPlan(faults=(Fault(effect="Start", kind=FaultKind.RESPONSE_LOST, when="after"),))
    tools = toolset(Simulator(plan=plan))
    spelled = {"command": "echo once", "background": False, "timeout": None}
    async with Client(server(tools)) as client:
        lost = await client.call_tool("run_command", {"command": "echo once"})
        again = await client.call_tool("run_command", spelled)
        other = await client.call_tool("run_command", {"command": "echo other"})
    assert lost.meta["sandrail/status"] == "uncertain"
    assert again.meta[OPERATION_KEY_META] == lost.meta[OPERATION_KEY_META]
    assert again.meta["sandrail/status"] == "ok"
    assert other.meta[OPERATION_KEY_META] != lost.meta[OPERATION_KEY_META]
    assert launches(tools) == 2


async def test_c2_mcp_fallback_keys_follow_the_canonical_arguments() -> None:
    """A retry that writes the same arguments differently (key order, 1.0 for
    1) is the same call."""
    backend = RealTimeWaits()
    tools = toolset(backend)
    async with Client(server(tools)) as client:
        call = asyncio.ensure_future(
            client.call_tool("run_command", {"command": "sleep 1", "timeout": 60})
        )
        await backend.waiting.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await _recorded(tools)
        retry = await client.call_tool("run_command", {"timeout": 60.0, "command": "sleep 1"})
    assert mcp_content(retry)["deduplicated"] is True
    assert launches(tools) == 1


@pytest.mark.parametrize(
    "arguments",
    [
        ["--session", " "],
        ["--session", ""],
        ["--session", "\udcff"],  # a byte that is not UTF-8, as Python passes it on
        ["--agent-id", ""],
        ["--agent-id", " "],
        ["--agent-id", "\udcff"],
        ["--max-output-bytes", "256"],
    ],
)
def test_mcp_cli_bad_input_is_a_one_line_error_with_status_2(arguments: list[str]) -> None:
    from click.testing import CliRunner

    from sandrail.cli import main

    done = CliRunner().invoke(main, ["mcp", "--backend", "simulator", *arguments])
    assert done.exit_code == 2, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    errors = [line for line in done.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.output
    assert "Traceback" not in done.output


def test_c14_mcp_server_refuses_a_budget_its_fallback_keys_cannot_fit() -> None:
    """A budget the toolset takes may still be too small for the identity of
    a call under an MCP fallback key (longer than one character): serving
    it would refuse every call that brings no key of its own."""
    smallest = toolset().minimum_output_bytes()
    with pytest.raises(ValueError, match="fallback operation key needs at least"):
        server(toolset(max_output_bytes=smallest))


async def test_c2_mcp_fallback_keys_are_per_mcp_session() -> None:
    """Client X's call is left uncertain; client Y (another MCP session of
    the same server, sessionful protocol) making the identical call without a
    key gets its own
    fallback key and runs anew, never X's result."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator

    plan = FaultPlan(faults=(Fault(effect="Start", kind=FaultKind.RESPONSE_LOST, when="after"),))
    tools = toolset(Simulator(plan=plan))
    app = server(tools)
    async with Client(app, mode="legacy") as x:
        lost = await x.call_tool("run_command", {"command": "echo once"})
        lost_again = await x.call_tool("run_command", {"command": "echo once"})
    assert lost_again.meta[OPERATION_KEY_META] == lost.meta[OPERATION_KEY_META]  # its own session
    async with Client(app, mode="legacy") as y:
        other = await y.call_tool("run_command", {"command": "echo once"})
    assert lost.meta["sandrail/status"] == "uncertain"
    assert other.meta[OPERATION_KEY_META] != lost.meta[OPERATION_KEY_META]
    assert mcp_content(other)["deduplicated"] is False
    assert launches(tools) == 2  # X's call once, Y's once


@pytest.mark.parametrize("sent", [123, "", "   ", {"id": "op-1"}])
async def test_c2_mcp_a_malformed_meta_operation_key_is_refused_naming_the_field(
    sent: Any,
) -> None:
    tools = toolset()
    async with Client(server(tools)) as client:
        for _ in range(2):
            result = await client.call_tool(
                "run_command", {"command": "echo once"}, meta={OPERATION_KEY_META: sent}
            )
            assert result.is_error is True
            assert mcp_content(result)["error_type"] == "e2b_command_operation_key_required"
            assert f'_meta["{OPERATION_KEY_META}"]' in mcp_content(result)["instruction"]
            assert OPERATION_KEY_META not in result.meta
    assert launches(tools) == 0
