"""Live E2B: the same backend against the real cloud. Skipped without
``E2B_API_KEY`` (marker ``live``); never part of the default run's network use.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

import sandrail
from sandrail.interpreters.e2b import E2BBackend

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not os.environ.get("E2B_API_KEY"), reason="E2B_API_KEY is not set"),
]


def _port(backend: E2BBackend, session: str) -> sandrail.ToolPort:
    return sandrail.command_tools(
        backend=backend,
        session_id=session,
        owner=sandrail.AgentOwner(agent_id="live-agent"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )


def _call(port: sandrail.ToolPort, session: str, tool: str, key: str, **arguments: Any) -> Any:
    return port.execute_sync(
        sandrail.ToolRequest(
            call=sandrail.ToolCall(name=tool, call_id=f"call-{key}", arguments=arguments),
            operation_key=key,
            session_id=session,
            definition=port.definition(tool),
            identity=sandrail.AgentIdentity(agent_id="live-agent"),
        )
    )


def _kill(sandbox_id: str) -> None:
    import e2b

    async def kill() -> None:
        await e2b.AsyncSandbox.kill(sandbox_id, request_timeout=30)

    asyncio.run(kill())


def test_live_run_retry_stop_and_read() -> None:
    session = f"live-{uuid.uuid4()}"
    backend = E2BBackend(sandbox_timeout_seconds=600)
    port = _port(backend, session)
    first = _call(port, session, "run_command", "k1", command="echo hi; echo err >&2")
    try:
        assert first.status == "ok", first.content
        assert (first.content["stdout"], first.content["stderr"]) == ("hi\n", "err\n")
        again = _call(port, session, "run_command", "k1", command="echo hi; echo err >&2")
        assert again.content["deduplicated"] is True
        started = _call(port, session, "run_command", "k2", command="sleep 300", background=True)
        task = started.content["task_id"]
        stopped = _call(port, session, "stop_command", "k3", task_id=task)
        assert (stopped.content["command_status"], stopped.content["exit_code"]) == (
            "canceled",
            143,
        )
        timed = _call(port, session, "run_command", "k4", command="sleep 30", timeout=2)
        assert (timed.content["command_status"], timed.content["exit_code"]) == ("timed_out", 124)
    finally:
        backend.close()
        _kill(first.content["sandbox_id"])
