"""What the E2B tests share: the backend on a local-e2b server, effects run
through it, ports on it, and looking inside a sandbox as root through the
unmodified SDK (the same wire the backend uses; no private server paths).

Every E2B test runs SDK → HTTP → ``sandrail local-e2b``; the server is
module-scoped (``signal_scope="process"``, as E2B's envd: the launcher must
manage process groups itself).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

import e2b
import pytest

import sandrail
from sandrail.core._effects import (
    CommandState,
    EffectFailure,
    Ensure,
    OutputChunk,
    Read,
    SandboxReady,
    Start,
    Started,
    StartRefused,
    Wait,
)
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B, serve
from sandrail.testing import native_identity

__all__ = [
    "AGENT",
    "LEDGER",
    "OTHER",
    "TASK",
    "as_root",
    "as_user",
    "ensure",
    "failure",
    "finished",
    "new_session",
    "port_on",
    "read",
    "request",
    "run",
    "server_fixture",
    "start",
    "start_fields",
    "wait",
]

T = TypeVar("T")
TASK = "a" * 64
OTHER = "b" * 64
AGENT = "agent-1"
LEDGER = "/root/.sandrail"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="local-e2b user separation needs root")


def server_fixture() -> Any:
    """A module-scoped fixture: one local-e2b server (envd's signal scope)."""

    @pytest.fixture(scope="module")
    def server() -> Iterator[LocalE2B]:
        with serve(signal_scope="process") as running:
            yield running

    return server


def run(awaitable: Awaitable[T]) -> T:
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


def new_session() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


def ensure(backend: E2BBackend, session: str | None = None) -> str:
    ready = run(backend(Ensure(session_id=session or new_session(), owner_key="o1")))
    assert isinstance(ready, SandboxReady)
    return ready.sandbox_id


def start_fields(sandbox_id: str, command: str, **extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "sandbox_id": sandbox_id,
        "task_id": TASK,
        "request_digest": "d1",
        "command": command,
        "cwd": None,
        "env": None,
        "timeout_seconds": 30,
    }
    fields.update(extra)
    return fields


def start(backend: E2BBackend, sandbox_id: str, command: str, **extra: Any) -> Any:
    outcome = run(backend(Start(**start_fields(sandbox_id, command, **extra))))
    assert isinstance(outcome, Started | StartRefused)
    return outcome


def wait(
    backend: E2BBackend, sandbox_id: str, task: str = TASK, seconds: float = 20
) -> CommandState:
    state = run(backend(Wait(sandbox_id=sandbox_id, task_id=task, timeout_seconds=seconds)))
    assert isinstance(state, CommandState)
    return state


def read(
    backend: E2BBackend,
    sandbox_id: str,
    task: str = TASK,
    out: int = 0,
    err: int = 0,
    max_bytes: int = 65536,
) -> OutputChunk:
    chunk = run(
        backend(
            Read(
                sandbox_id=sandbox_id,
                task_id=task,
                stdout_cursor=out,
                stderr_cursor=err,
                max_bytes=max_bytes,
            )
        )
    )
    assert isinstance(chunk, OutputChunk)
    return chunk


def finished(backend: E2BBackend, sandbox_id: str, command: str, **extra: Any) -> OutputChunk:
    outcome = start(backend, sandbox_id, command, **extra)
    assert isinstance(outcome, Started), outcome
    task = extra.get("task_id", TASK)
    wait(backend, sandbox_id, task)
    return read(backend, sandbox_id, task, max_bytes=1_000_000)


def failure(awaitable: Awaitable[Any]) -> EffectFailure:
    with pytest.raises(EffectFailure) as caught:
        run(awaitable)
    return caught.value


def as_root(server: LocalE2B, sandbox_id: str, command: str) -> str:
    """Run ``command`` as root in the sandbox (straight through the SDK);
    its stdout, whatever its exit status."""
    return _sdk_run(server, sandbox_id, command, "root")


def as_user(server: LocalE2B, sandbox_id: str, command: str) -> str:
    """Run ``command`` as E2B's default ``user`` (what any later command of
    the model could do); its stdout and stderr, whatever its exit status."""
    return _sdk_run(server, sandbox_id, command + " 2>&1", "user")


def _sdk_run(server: LocalE2B, sandbox_id: str, command: str, user: str) -> str:
    box = e2b.Sandbox.connect(sandbox_id, **server.sdk_options)
    try:
        result = box.commands.run(command, user=user, timeout=60)  # type: ignore[arg-type]
        return str(result.stdout)
    except e2b.CommandExitException as exc:
        return str(exc.stdout)


def port_on(
    backend: Any,
    session: str,
    *,
    native: bool = False,
    code: bool = False,
    **options: Any,
) -> sandrail.ToolPort:
    owner: sandrail.NativeOwner | sandrail.AgentOwner = (
        sandrail.NativeOwner(scope={"tenant": "t1"})
        if native
        else sandrail.AgentOwner(agent_id=AGENT)
    )
    build = sandrail.code_tools if code else sandrail.command_tools
    options.setdefault("authorize", lambda request: sandrail.ALLOW)
    options.setdefault("assert_authority", lambda request: True)
    return build(backend=backend, session_id=session, owner=owner, **options)


def request(
    port: sandrail.ToolPort, tool: str, key: str, *, call_id: str | None = None, **arguments: Any
) -> sandrail.ToolRequest:
    settings = port.settings
    identity: sandrail.AgentIdentity | sandrail.NativeIdentity
    if isinstance(settings.owner, sandrail.NativeOwner):
        identity = native_identity(scope=settings.owner.scope)
    else:
        identity = sandrail.AgentIdentity(agent_id=AGENT)
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name=tool, call_id=call_id or f"call-{key}", arguments=arguments),
        operation_key=key,
        session_id=settings.session_id,
        definition=port.definition(tool),
        identity=identity,
    )
