"""Hostile inputs against the real launcher: real
bash, real users (``root`` and ``user``), the unmodified SDK and the command
line on local-e2b. The judge is the server's ground truth: a command counts
its own runs with a mark the sandbox cannot take back (``server.mark``).

Each name is the contract line the test proves. The same cases on the
simulator and the port are in ``test_adversarial_cli.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import sandrail
from sandrail.core import ErrorCode
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B
from tests.e2b_world import (
    as_root,
    as_user,
    needs_root,
    new_session,
    port_on,
    request,
    server_fixture,
)
from tests.local_e2b_helpers import signals_at_default, wait_until

pytestmark = needs_root
server = server_fixture()


@pytest.fixture
def backend(server: LocalE2B) -> Iterator[E2BBackend]:
    with E2BBackend(**server.sdk_options, request_timeout_seconds=10) as fresh:
        yield fresh
    server.clear_faults()


def _mark() -> str:
    return f"m-{uuid.uuid4().hex[:10]}"


def _snippet(port: sandrail.ToolPort, key: str, code: str) -> sandrail.ToolResult:
    return port.execute_sync(request(port, "sandbox_run_code", key, code=code, language="bash"))


def _run(port: sandrail.ToolPort, key: str, command: str, **more: Any) -> sandrail.ToolResult:
    return port.execute_sync(request(port, "run_command", key, command=command, **more))


def _snippet_path(port: sandrail.ToolPort, key: str) -> str:
    task = sandrail.task_id(port.settings.session_id, port.settings.owner, key)
    return f"/tmp/sandrail/code/{task}.sh"


# -- a claimed task's retry answers from the claim (C2, C7) -------------


def test_c7_a_snippet_that_rewrites_its_own_file_is_deduplicated_on_retry(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """A snippet that wrote to its own published file made every
    retry ``error``, ``executed: false``, "already launched with different
    arguments", though the arguments were the same and it ran."""
    port = port_on(backend, new_session(), code=True)
    mark = _mark()
    code = f"{server.mark(mark)}\nprintf 'echo tampered\\n' > \"$0\" || echo refused\necho ran\n"
    first = _snippet(port, "op", code)
    assert first.status == "ok", first.content
    assert first.content["stdout"].endswith("ran\n")
    retry = _snippet(port, "op", code)
    assert (retry.status, retry.content["deduplicated"]) == ("ok", True), retry.content
    assert retry.content["stdout"] == first.content["stdout"]
    assert server.truth().marked(mark) == 1


@pytest.mark.parametrize("who", ["user", "root"])
def test_c7_a_published_file_rewritten_later_never_decides_a_claimed_tasks_retry(
    server: LocalE2B, backend: E2BBackend, who: str
) -> None:
    """Any later command as ``user`` (or root, who can always write
    it) changed the published file; the retry still answers from the claim:
    the same launch, deduplicated, never a conflict."""
    port = port_on(backend, new_session(), code=True)
    mark = _mark()
    code = f"{server.mark(mark)}\necho ran\n"
    first = _snippet(port, "op", code)
    assert first.status == "ok", first.content
    path = _snippet_path(port, "op")
    sandbox_id = first.content["sandbox_id"]
    rewrite = f"printf 'echo tampered\\n' > {path}"
    (as_user if who == "user" else as_root)(server, sandbox_id, rewrite)
    retry = _snippet(port, "op", code)
    assert (retry.status, retry.content["deduplicated"]) == ("ok", True), retry.content
    assert server.truth().marked(mark) == 1


def test_c16_the_published_file_is_root_s_and_not_writable_by_user(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """The published file should not be writable by ``user``; the
    command still reads it (its group is ``user``'s)."""
    port = port_on(backend, new_session(), code=True)
    first = _snippet(port, "op", "echo ran\n")
    assert first.status == "ok", first.content
    path = _snippet_path(port, "op")
    sandbox_id = first.content["sandbox_id"]
    owner, group, mode = as_root(server, sandbox_id, f"stat -c '%U %G %a' {path}").split()
    assert (owner, group, mode) == ("root", "user", "440")
    tried = as_user(server, sandbox_id, f"echo x >> {path} && echo wrote; cat {path}")
    assert "wrote" not in tried
    assert "echo ran" in tried


# -- a command that never began is not `ok` (C5, C7) -------------------


@pytest.mark.parametrize("background", [False, True])
def test_c7_a_command_that_cannot_enter_home_is_not_started_not_ok(
    server: LocalE2B, backend: E2BBackend, background: bool
) -> None:
    """After ``chmod 000 ~``, every command with the default cwd was
    ``ok``, ``exit_code: 1``, empty output, and so were its retries; nothing
    ran. It is ``error``, ``executed: false``, ``e2b_command_not_started``,
    as a missing ``cwd`` already was, on every retry of its key."""
    port = port_on(backend, new_session())
    assert _run(port, "lock", "chmod 000 ~").status == "ok"
    mark = _mark()
    for attempt in range(2):
        result = _run(port, "op", f"{server.mark(mark)}; echo ran", background=background)
        assert result.status == "error", (attempt, result.content)
        assert result.content["error_type"] == ErrorCode.COMMAND_NOT_STARTED.value
        assert result.content["executed"] is False
    assert server.truth().marked(mark) == 0
    # An explicit cwd it can enter still runs.
    elsewhere = _run(port, "op-tmp", f"{server.mark(mark)}; echo ran", cwd="/tmp")
    assert (elsewhere.status, elsewhere.content["stdout"]) == ("ok", "ran\n")


def test_c7_home_made_enterable_again_runs_a_new_key(server: LocalE2B, backend: E2BBackend) -> None:
    """The refusal is the key's, not the sandbox's: once ``user``
    can enter its home again, a new key runs."""
    port = port_on(backend, new_session())
    assert _run(port, "lock", "chmod 000 ~").status == "ok"
    assert _run(port, "op-1", "echo ran").status == "error"
    assert _run(port, "unlock", "chmod 755 ~", cwd="/").status == "ok"
    again = _run(port, "op-2", "echo ran")
    assert (again.status, again.content["stdout"]) == ("ok", "ran\n")


# -- on E2B: the sandbox id (C17) ----------------------------------------


def test_c17_the_sandbox_id_is_refused_as_an_env_value_on_e2b(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """On E2B the session's sandbox id, passed as an env value, ran
    and showed whole in every later result. Refused, also by a port on a
    new backend object (a restarted harness that never showed it)."""
    session = new_session()
    port = port_on(backend, session)
    sandbox_id = _run(port, "op-1", "true").content["sandbox_id"]
    mark = _mark()
    for where in (port, None):
        if where is None:
            with E2BBackend(**server.sdk_options, request_timeout_seconds=10) as restarted:
                result = _run(
                    port_on(restarted, session), "op-2", server.mark(mark), env={"X": sandbox_id}
                )
        else:
            result = _run(where, "op-2", server.mark(mark), env={"X": sandbox_id})
        assert result.status == "error", result.content
        assert result.content["problems"][0]["field"] == "arguments.env.X"
        assert sandbox_id not in result.to_json()
    assert server.truth().marked(mark) == 0


# -- the command line on E2B (C6, C16) --------------------------


def _cli(server: LocalE2B, *args: str, **popen: Any) -> subprocess.Popen[str]:
    environment = {
        **os.environ,
        "E2B_API_KEY": server.api_key,
        "E2B_API_URL": server.api_url,
        "E2B_SANDBOX_URL": server.sandbox_url,
    }
    streams: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    return subprocess.Popen(
        [sys.executable, "-m", "sandrail", *args],
        text=True,
        env=environment,
        **{"preexec_fn": signals_at_default, **streams, **popen},
    )


@pytest.mark.long
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_c6_ctrl_c_on_sandrail_run_after_the_start_is_uncertain_and_reconciles(
    server: LocalE2B, signum: int
) -> None:
    """Ctrl-C on ``sandrail run`` after the start left exit 1 and
    ``Aborted!``, no task id, no operation key, while the command went on.
    It prints the ``uncertain`` result with its locator (exit 3), and a
    retry with that key reconciles it: one launch. SIGHUP (the terminal
    closed) killed it silently, status 129: the same."""
    session, key, mark = new_session(), f"op-{uuid.uuid4().hex[:8]}", _mark()
    words = ["bash", "-c", f"{server.mark(mark)}; sleep 6; echo done"]
    base = ["run", "--backend", "e2b", "--session", session, "--operation-key", key, "--"]
    running = _cli(server, *base, *words)
    try:
        assert wait_until(lambda: server.truth().marked(mark) == 1, timeout=60)
        running.send_signal(signum)
        out, err = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    assert running.returncode == 3, (out, err)
    assert "Aborted" not in err, err
    assert "Traceback" not in err, err
    result = json.loads(out)
    assert result["status"] == "uncertain"
    content = result["content"]
    owner = sandrail.AgentOwner(agent_id="cli-agent")
    assert (content["operation_key"], content["task_id"]) == (
        key,
        sandrail.task_id(session, owner, key),
    )
    retry = _cli(server, *base, *words)
    out, err = retry.communicate(timeout=120)
    assert retry.returncode == 0, (out, err)
    reconciled = json.loads(out)["content"]
    assert (reconciled["deduplicated"], reconciled["stdout"]) == (True, "done\n")
    assert server.truth().marked(mark) == 1


def test_c16_sandrail_run_quotes_its_words_on_a_real_shell(server: LocalE2B) -> None:
    """``sandrail run -- sh -c 'exit 3'`` ran ``sh -c exit 3`` and
    reported exit 0."""
    done = _cli(server, "run", "--backend", "e2b", "--", "sh", "-c", "exit 3")
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, (out, err)
    assert json.loads(out)["content"]["exit_code"] == 3


# -- no stray tracebacks during cancellations ---------------------------

_CANCELLATIONS = textwrap.dedent(
    """
    import asyncio, gc, random, sys
    import sandrail
    from sandrail.interpreters.e2b import E2BBackend
    from sandrail.local_e2b import serve

    random.seed(20)
    with serve(signal_scope="process") as server:
        async def main():
            async with E2BBackend(**server.sdk_options) as backend:
                port = sandrail.command_tools(
                    backend=backend, session_id="s-cancel",
                    owner=sandrail.AgentOwner(agent_id="a"),
                    authorize=lambda request: sandrail.ALLOW,
                    assert_authority=lambda request: True,
                )
                def call(key, **arguments):
                    return port.execute(sandrail.ToolRequest(
                        call=sandrail.ToolCall(name="run_command", call_id=key,
                                               arguments=arguments),
                        operation_key=key, session_id="s-cancel",
                        definition=port.definition("run_command"),
                        identity=sandrail.AgentIdentity(agent_id="a"),
                    ))
                await call("warm", command="true")
                for number in range(int(sys.argv[1])):
                    command = random.choice(
                        ["sleep 1", "true", "head -c 3000000 /dev/zero | tr '\\\\0' a"]
                    )
                    try:
                        await asyncio.wait_for(
                            call(f"k{number}", command=command,
                                 background=random.random() < 0.5),
                            random.uniform(0, 0.25),
                        )
                    except asyncio.TimeoutError:
                        pass
                    gc.collect()
                await asyncio.sleep(1)
        asyncio.run(main())
        gc.collect()
    print("finished")
    """
)


@pytest.mark.long
def test_cancellations_print_no_stray_tracebacks() -> None:
    """During cancellations the SDK printed ``Task exception was
    never retrieved`` and local-e2b printed ASGI cancellation tracebacks to
    standard error. 40 calls cancelled at random points, through the SDK on
    a local-e2b server, then the server stopped: nothing on stderr."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _CANCELLATIONS, "40"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("finished")
    for noise in (
        "Task exception was never retrieved",
        "Exception in ASGI application",
        "Exception in callback",
        "Traceback",
        "ERROR:",
    ):
        assert noise not in done.stderr, done.stderr
    assert time.monotonic() - started < 300


# -- MCP over HTTP prints no ASGI tracebacks when clients cancel ----

_MCP_CANCELS = textwrap.dedent(
    """
    import sys, anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    URL = sys.argv[1]

    async def one(delay, number):
        async with streamable_http_client(URL) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                with anyio.move_on_after(delay):
                    await session.call_tool(
                        "run_command", {"command": "sleep 2; echo done"},
                        meta={"sandrail/operation_key": f"cancel-{number}"},
                    )

    async def main():
        for number, delay in enumerate([0.05, 0.3, 0.8, 1.2, 0.5]):
            await one(delay, number)
        print("finished")

    anyio.run(main)
    """
)


@pytest.mark.long
def test_mcp_http_prints_no_tracebacks_when_clients_cancel(server: LocalE2B, tmp_path: Any) -> None:
    """7 MCP calls cancelled by their clients made ``sandrail
    mcp --transport http`` print 6 tracebacks (``anyio.ClosedResourceError``
    in ``Error handling POST request``, then ``Exception in ASGI
    application``: a second ``http.response.start``). Five cancels here;
    nothing but the start and stop lines on standard error."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    errors = tmp_path / "mcp.err"
    with errors.open("w") as sink:
        serving = _cli(
            server,
            *("mcp", "--transport", "http", "--port", str(port), "--backend", "e2b"),
            *("--session", new_session()),
            stderr=sink,
        )
    try:
        assert wait_until(lambda: "serving http" in errors.read_text(), timeout=60)
        clients = subprocess.run(
            [sys.executable, "-c", _MCP_CANCELS, f"http://127.0.0.1:{port}/mcp"],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert clients.stdout.strip() == "finished", clients.stderr
    finally:
        serving.send_signal(signal.SIGTERM)
        serving.communicate(timeout=60)
    text = errors.read_text()
    for noise in ("Traceback", "Exception in ASGI application", "Error handling POST request"):
        assert noise not in text, text
    assert serving.returncode == 0, text


def test_c6_a_stream_closed_by_the_backends_own_shutdown_prints_nothing() -> None:
    """The backend's loop drops an error that only stands for a stream it
    closed itself (a ``GeneratorExit`` in the chain, as the SDK's transport
    raises when the loop shuts its generators down after a signal), and
    still reports any other."""
    from sandrail.interpreters._e2b_loop import _quiet_cancellations

    reported: list[dict[str, Any]] = []

    class Loop:
        def default_exception_handler(self, context: dict[str, Any]) -> None:
            reported.append(context)

    def chained() -> BaseException:
        try:
            try:
                raise GeneratorExit
            except GeneratorExit:
                raise RuntimeError("generator didn't stop after athrow()") from None
        except RuntimeError as inner:
            inner.__context__ = GeneratorExit()
            outer = ConnectionError("generator didn't stop after athrow()")
            outer.__cause__ = inner
            return outer

    _quiet_cancellations(Loop(), {"message": "closing", "exception": chained()})  # type: ignore[arg-type]
    assert reported == []
    other = {"message": "boom", "exception": ValueError("a real bug")}
    _quiet_cancellations(Loop(), other)  # type: ignore[arg-type]
    assert reported == [other]
