"""MCP as real clients use it, driven by
the official MCP client in memory, over stdio and over streamable HTTP on
loopback: what the server runs on, typed properties, the protocol's answer
to an unknown tool, progress while a call waits, elicitation in both
protocol eras, keyed fallback keys, a bounded ``_meta`` echo, the real
minimum budget and a clean shutdown."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import mcp_types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from mcp import Client, MCPError

import sandrail
from sandrail.adapters.mcp import (
    ECHOED_KEY_BYTES,
    OPERATION_KEY_META,
    minimum_output_bytes,
    server,
    typed_schema,
)
from sandrail.core import PROFILES, canonical_json
from sandrail.interpreters.simulator import NOT_EMULATED
from sandrail.testing.strategies import tool_arguments
from tests.embed_rig import RealTimeWaits, launches, mcp_content, toolset

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _asking(policy_calls: list[str] | None = None) -> Any:
    """A policy that asks a person about every ``deploy`` command."""

    def policy(request: sandrail.ToolRequest) -> Any:
        if "deploy" in str(request.call.arguments.get("command", "")):
            if policy_calls is not None:
                policy_calls.append(request.operation_key)
            return sandrail.ApprovalRequired(interaction_id="ask-7")
        return sandrail.ALLOW

    return policy


def _elicit(answer: str, seen: list[str]) -> Any:
    async def callback(context: Any, params: Any) -> Any:
        seen.append(params.message)
        if answer == "approve":
            return mcp_types.ElicitResult(action="accept", content={"approve": True})
        if answer == "no":
            return mcp_types.ElicitResult(action="accept", content={"approve": False})
        return mcp_types.ElicitResult(action=answer)

    return callback


# -- what it runs on ----------------------------------------------------------------


async def test_mcp_on_the_simulator_never_claims_an_e2b_sandbox() -> None:
    app = server(toolset())
    async with Client(app) as client:
        listed = (await client.list_tools()).tools
        status = mcp_content(await client.call_tool("sandbox_status", {}))
        ran = mcp_content(await client.call_tool("run_command", {"command": "echo hi"}))
        unknown = mcp_content(await client.call_tool("run_command", {"command": "make test"}))
    assert all("E2B" not in tool.description for tool in listed)
    assert all("simulator" in tool.description for tool in listed)
    assert "simulator" in (app.instructions or "")
    assert (status["backend"], status["isolated"]) == ("simulator", False)
    assert "no command really runs" in status["boundary"]
    assert ran["backend"] == "simulator"
    assert (unknown["exit_code"], unknown["stderr"]) == (127, NOT_EMULATED)


def _mcp(*arguments: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandrail", "mcp", *arguments],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def _without_key() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != "E2B_API_KEY"}


def test_sandrail_mcp_without_a_key_refuses_to_start_until_told_where_to_run() -> None:
    done = _mcp(env=_without_key())
    assert done.returncode == 2
    (error,) = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert "E2B_API_KEY" in error
    assert "--backend simulator" in error


def test_sandrail_mcp_runs_on_e2b_when_a_key_is_configured_and_says_so() -> None:
    """With E2B_API_KEY in its env (a client config's env block) and no
    --backend, it serves E2B (no call reaches E2B here: stdin closes at
    once); the simulator serves only by name, and says so."""
    on_e2b = _mcp(env={**_without_key(), "E2B_API_KEY": "e2b_test_not_used"})
    assert on_e2b.returncode == 0, on_e2b.stderr
    assert "commands run in E2B sandboxes" in on_e2b.stderr
    simulated = _mcp("--backend", "simulator", env=_without_key())
    assert simulated.returncode == 0, simulated.stderr
    assert "SIMULATOR: no command really runs" in simulated.stderr


def test_the_max_output_bytes_error_names_the_real_minimum() -> None:
    """It used to name the toolset's minimum, and that one was then refused
    naming the MCP server's: the number it names now is accepted."""
    env = _without_key()
    refused = _mcp("--backend", "simulator", "--max-output-bytes", "256", env=env)
    assert refused.returncode == 2
    (needed,) = (int(n) for n in re.findall(r"use at least (\d+)\.", refused.stderr))
    just_below = _mcp("--backend", "simulator", "--max-output-bytes", str(needed - 1), env=env)
    assert just_below.returncode == 2
    assert f"use at least {needed}." in just_below.stderr
    accepted = _mcp("--backend", "simulator", "--max-output-bytes", str(needed), env=env)
    assert accepted.returncode == 0, accepted.stderr
    embedded = minimum_output_bytes(toolset())
    server(toolset(max_output_bytes=embedded))
    with pytest.raises(ValueError, match=f"Use at least {embedded}"):
        server(toolset(max_output_bytes=embedded - 1))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sandrail_mcp_http_stops_cleanly_on_a_signal_and_says_so(
    signum: signal.Signals,
) -> None:
    """Ctrl-C printed ``Aborted!`` and exited 1; SIGTERM ended it silently."""
    port = _free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "sandrail", "mcp", "--backend", "simulator"),
            *("--transport", "http", "--port", str(port)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
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
                time.sleep(0.1)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0, stderr
    assert f"stopped ({signum.name}); the server shut down cleanly" in stderr
    assert "Aborted!" not in stderr
    assert "Traceback" not in stderr


# -- the schemas clients read -------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
async def test_every_listed_property_has_a_top_level_type(profile: Any) -> None:
    async with Client(server(toolset(), profile=profile)) as client:
        listed = (await client.list_tools()).tools
    for tool in listed:
        for name, schema in tool.input_schema["properties"].items():
            assert "type" in schema, (profile, tool.name, name)
    run = next(tool for tool in listed if tool.name == "run_command")
    assert run.input_schema["properties"]["timeout"]["type"] == ["integer", "null"]


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_typed_schemas_admit_exactly_what_the_schemas_admit(data: st.DataObject) -> None:
    """The added types change nothing but what a client reads: every value
    the schema admits is admitted, and a number sent as text is refused by
    both."""
    tools = toolset()
    name = data.draw(st.sampled_from(tools.names))
    schema = tools.schema(name)
    typed = Draft202012Validator(typed_schema(tools.schema(name)))
    arguments = data.draw(tool_arguments(name))
    assert typed.is_valid(arguments)
    if name == "run_command":
        as_text = {"command": "x", "timeout": "5"}
        assert not Draft202012Validator(schema).is_valid(as_text)
        assert not typed.is_valid(as_text)


async def test_an_unknown_tool_is_a_json_rpc_error_not_a_result() -> None:
    tools = toolset()
    async with Client(server(tools)) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("rm_rf", {"path": "/"})
    assert caught.value.code == mcp_types.INVALID_PARAMS
    assert "Unknown tool: rm_rf" in caught.value.message
    assert launches(tools) == 0


# -- long calls ---------------------------------------------------------------------


async def test_a_waiting_call_sends_progress_when_the_client_asked() -> None:
    """A client's default request timeout is 60 s; a command that takes
    longer sends progress, so a client that resets its timeout on progress
    waits for the result."""
    tools = toolset(RealTimeWaits())
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(server(tools, progress_interval_seconds=0.1)) as client:
        result = await client.call_tool(
            "run_command", {"command": "sleep 1"}, progress_callback=on_progress
        )
        quiet = await client.call_tool("run_command", {"command": "echo quick"})
    assert result.meta["sandrail/status"] == "ok"
    assert len(progress) >= 3
    assert progress == sorted(progress)
    assert quiet.meta["sandrail/status"] == "ok"


# -- approval through elicitation ---------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize(
    ("answer", "status", "ran"),
    [
        ("approve", "ok", 1),
        ("no", "error", 0),
        ("decline", "error", 0),
        ("cancel", "approval_required", 0),
    ],
)
async def test_mcp_asks_the_person_at_the_client_in_both_protocol_eras(
    mode: str, answer: str, status: str, ran: int
) -> None:
    """Handshake era (``legacy``): an ``elicitation/create`` request on the
    call's stream; 2026-07-28 (``auto``, in memory): an InputRequiredResult
    the client answers and retries. Approve runs once; no or decline runs
    nothing (``approval_rejected``); cancel decides nothing."""
    seen: list[str] = []
    tools = toolset(authorize=_asking())
    async with Client(server(tools), mode=mode, elicitation_callback=_elicit(answer, seen)) as c:
        result = await c.call_tool(
            "run_command",
            {"command": "echo deploy", "env": {"TOKEN": "s3cret-value-1"}},
        )
    assert len(seen) == 1
    assert "echo deploy" in seen[0]
    assert "s3cret-value-1" not in seen[0]  # C17: the question masks env values
    assert result.meta["sandrail/status"] == status
    if status == "error":
        assert mcp_content(result)["error_type"] == "approval_rejected"
        assert mcp_content(result)["executed"] is False
    assert launches(tools) == ran


async def test_c8_mcp_never_asks_about_a_denied_call() -> None:
    seen: list[str] = []

    def deny(request: sandrail.ToolRequest) -> Any:
        return sandrail.Deny(reason="not here")

    tools = toolset(authorize=deny)
    async with Client(server(tools), elicitation_callback=_elicit("approve", seen)) as client:
        result = await client.call_tool("run_command", {"command": "echo deploy"})
    assert seen == []
    assert mcp_content(result)["error_type"] == "policy_denied"
    assert launches(tools) == 0


async def test_a_client_that_cannot_be_asked_reads_approval_required_and_what_next() -> None:
    """No elicitation: ``approval_required`` (nothing ran), and the call
    again, identical, once the person approved (the harness's policy then
    allows it) runs under the same fallback key, once."""
    approved = False
    asked: list[str] = []

    def policy(request: sandrail.ToolRequest) -> Any:
        return sandrail.ALLOW if approved else _asking(asked)(request)

    tools = toolset(authorize=policy)
    async with Client(server(tools), mode="legacy") as client:
        waiting = await client.call_tool("run_command", {"command": "echo deploy"})
        approved = True
        ran = await client.call_tool("run_command", {"command": "echo deploy"})
    assert waiting.meta["sandrail/status"] == "approval_required"
    assert "A person must approve" in waiting.meta["sandrail/next"]
    assert "repeat exactly this call" in mcp_content(waiting)["instruction"]
    assert ran.meta[OPERATION_KEY_META] == waiting.meta[OPERATION_KEY_META]
    assert launches(tools) == 1


async def test_an_approval_answer_cannot_approve_another_call() -> None:
    """2026-07-28: the question's requestState is sealed by the SDK and bound
    to the tool and its arguments: sent back with other arguments, it is
    refused and nothing runs."""
    tools = toolset(authorize=_asking())
    async with Client(server(tools), elicitation_callback=_elicit("approve", [])) as client:
        asked = await client.session.call_tool(
            "run_command", {"command": "echo deploy"}, allow_input_required=True
        )
        assert isinstance(asked, mcp_types.InputRequiredResult)
        answer = {
            "sandrail/approval": mcp_types.ElicitResult(action="accept", content={"approve": True})
        }
        with pytest.raises(MCPError):
            await client.session.call_tool(
                "run_command",
                {"command": "echo deploy; echo other"},
                input_responses=answer,
                request_state=asked.request_state,
                allow_input_required=True,
            )
    assert launches(tools) == 0


# -- fallback keys and their echo ----------------------------------------


async def test_c17_fallback_keys_are_keyed_never_a_plain_digest_of_the_arguments() -> None:
    """A key-less call's key is shown to the model; a plain sha256 of the
    tool and arguments would let a transcript reader test guesses of an env
    value offline. The digest is an HMAC under a per-session secret."""
    arguments = {"command": "echo x", "env": {"DB_PASSWORD": "correct-horse-battery"}}
    keys = []
    for _ in range(2):
        async with Client(server(toolset()), mode="legacy") as client:
            result = await client.call_tool("run_command", arguments)
        keys.append(result.meta[OPERATION_KEY_META])
    plain = hashlib.sha256(canonical_json(["run_command", arguments])).hexdigest()[:32]
    assert all(plain not in key for key in keys)
    assert keys[0].split(":")[2] != keys[1].split(":")[2]  # another session, another secret


async def test_c12_meta_never_echoes_a_client_key_whole_past_a_bound() -> None:
    """A 2 MB key gave a 2 MB response: ``_meta`` echoes a client's key only
    up to :data:`ECHOED_KEY_BYTES`; the result itself stays in the budget."""
    tools = toolset()
    long_key = "k" * 2_000_000
    short_key = "k" * ECHOED_KEY_BYTES
    async with Client(server(tools)) as client:
        long = await client.call_tool(
            "run_command", {"command": "echo x"}, meta={OPERATION_KEY_META: long_key}
        )
        short = await client.call_tool(
            "run_command", {"command": "echo x"}, meta={OPERATION_KEY_META: short_key}
        )
    assert OPERATION_KEY_META not in long.meta
    assert len(json.dumps(long.meta)) < 1000
    assert len(long.content[0].text.encode()) <= tools.max_output_bytes
    assert short.meta[OPERATION_KEY_META] == short_key


async def test_sandrail_mcp_over_stdio_serves_an_eliciting_client_without_asking() -> None:
    """``sandrail mcp`` allows every call (this process is the harness), so
    over stdio a call just runs; the approval path is the embedded server's
    (above). Here: the stdio server starts, says what it runs on, and runs a
    call for a client that declared elicitation (it is never asked)."""
    from mcp.client.stdio import StdioServerParameters

    seen: list[str] = []
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "sandrail", "mcp", "--backend", "simulator"]
    )
    async with Client(params, mode="legacy", elicitation_callback=_elicit("approve", seen)) as c:
        result = await asyncio.wait_for(c.call_tool("run_command", {"command": "echo hi"}), 30)
    assert mcp_content(result)["stdout"] == "hi\n"
    assert seen == []
