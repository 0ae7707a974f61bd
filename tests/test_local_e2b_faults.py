"""Wire faults of sandrail local-e2b and the exception chain the unmodified
e2b SDK really raises for each (outermost first), against the server's
ground truth of what happened; plus the command line and the userns mode.

The chains here are the observed facts the E2B failure table is built on;
``../shared/reference/e2b-wire.md`` lists the same rows.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import e2b
import httpx
import pyqwest
import pytest
from connectrpc.errors import ConnectError

from sandrail.local_e2b import LocalE2B, Route, WireFault, WireFaultKind, serve
from tests.local_e2b_helpers import chain, gone, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="these tests assume real root (as CI)")


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve() as running:
        yield running


@pytest.fixture
def box(server: LocalE2B) -> Iterator[e2b.AsyncSandbox]:
    made = asyncio.run(e2b.AsyncSandbox.create(**server.sdk_options))
    yield made
    server.clear_faults()
    e2b.Sandbox.kill(made.sandbox_id, **server.sdk_options)


def _raised(coroutine: object) -> BaseException:
    async def run() -> BaseException:
        try:
            await coroutine  # type: ignore[misc]
        except BaseException as exc:  # the chain is what the test inspects
            return exc
        raise AssertionError("no exception was raised")

    return asyncio.run(run())


def test_control_plane_refused_is_a_plain_httpx_connect_error(server: LocalE2B) -> None:
    server.refuse("api")
    try:
        exc = _raised(e2b.AsyncSandbox.create(**server.sdk_options))
    finally:
        server.clear_faults()
    assert chain(exc) == [httpx.ConnectError, ConnectionError]


def test_envd_refused_is_unreachable_from_a_connection_error(
    server: LocalE2B, box: e2b.AsyncSandbox
) -> None:
    server.refuse("envd")
    exc = _raised(box.commands.run("echo refused-test"))
    server.clear_faults()
    assert chain(exc) == [e2b.SandboxUnreachableException, ConnectError, ConnectionError]
    assert server.truth().launches("refused-test") == ()


def test_502_not_found_on_envd_is_sandbox_not_running(
    server: LocalE2B, box: e2b.AsyncSandbox
) -> None:
    server.inject(WireFault(kind=WireFaultKind.STATUS_502_NOT_FOUND, route=Route.START))
    exc = _raised(box.commands.run("echo x"))
    assert chain(exc) == [e2b.SandboxNotRunningException, ConnectError]
    server.inject(WireFault(kind=WireFaultKind.STATUS_502_NOT_FOUND, route=Route.READ_FILE))
    assert chain(_raised(box.files.read("/etc/hostname"))) == [e2b.SandboxNotRunningException]


def test_429_is_a_rate_limit_exception(server: LocalE2B, box: e2b.AsyncSandbox) -> None:
    server.inject(WireFault(kind=WireFaultKind.STATUS_429, route=Route.START))
    assert chain(_raised(box.commands.run("echo x"))) == [e2b.RateLimitException, ConnectError]
    # The control plane retries 429 three times: the fourth answer is final.
    server.inject(WireFault(kind=WireFaultKind.STATUS_429, route=Route.CREATE, times=4))
    exc = _raised(e2b.AsyncSandbox.create(**server.sdk_options))
    assert chain(exc) == [e2b.RateLimitException]
    struck = [
        r for r in server.truth().requests if r.fault == "status_429" and r.route == Route.CREATE
    ]
    assert len(struck) == 4


def test_a_create_answered_late_still_made_the_sandbox(server: LocalE2B) -> None:
    key = f"late-{uuid.uuid4().hex}"
    server.inject(WireFault(kind=WireFaultKind.DELAY, route=Route.CREATE, seconds=1.5))
    exc = _raised(
        e2b.AsyncSandbox.create(idempotency_key=key, request_timeout=0.5, **server.sdk_options)
    )
    assert chain(exc)[:2] == [httpx.ReadTimeout, TimeoutError]
    assert wait_until(lambda: any(s.idempotency_key == key for s in server.truth().sandboxes))
    again = e2b.Sandbox.create(idempotency_key=key, **server.sdk_options)
    made = [s for s in server.truth().sandboxes if s.idempotency_key == key]
    assert [s.sandbox_id for s in made] == [again.sandbox_id]
    again.kill()


def test_a_stream_cut_after_the_start_event_is_unreachable_with_no_cause(
    server: LocalE2B, box: e2b.AsyncSandbox
) -> None:
    server.inject(WireFault(kind=WireFaultKind.CUT_STREAM, route=Route.START, match="cut-fg"))
    exc = _raised(box.commands.run("sleep 0.3; echo cut-fg"))
    assert chain(exc) == [e2b.SandboxUnreachableException]
    (record,) = server.truth().launches("cut-fg")
    assert wait_until(lambda: server.truth().launches("cut-fg")[0].exit_code == 0)
    assert record.pid > 0

    async def background() -> BaseException:
        server.inject(WireFault(kind=WireFaultKind.CUT_STREAM, route=Route.START, match="cut-bg"))
        handle = await box.commands.run("sleep 0.3; echo cut-bg", background=True)
        try:
            await handle.wait()
        except BaseException as exc:  # started (the handle exists), then lost
            return exc
        raise AssertionError("wait() should fail")

    assert chain(asyncio.run(background())) == [e2b.SandboxUnreachableException]


def test_a_request_dropped_before_it_is_read_did_nothing(
    server: LocalE2B, box: e2b.AsyncSandbox
) -> None:
    server.inject(
        WireFault(kind=WireFaultKind.DROP_BEFORE_READ, route=Route.START, match="drop-before")
    )
    exc = _raised(box.commands.run("echo drop-before"))
    assert chain(exc) == [ConnectError, pyqwest.WriteError]
    assert server.truth().launches("drop-before") == ()


def test_a_request_dropped_after_its_effect_looks_the_same_but_ran(
    server: LocalE2B, box: e2b.AsyncSandbox
) -> None:
    server.inject(
        WireFault(kind=WireFaultKind.DROP_AFTER_EFFECT, route=Route.START, match="drop-after")
    )
    exc = _raised(box.commands.run("echo drop-after"))
    assert chain(exc) == [ConnectError, pyqwest.WriteError]
    assert len(server.truth().launches("drop-after")) == 1
    server.inject(WireFault(kind=WireFaultKind.DROP_AFTER_EFFECT, route=Route.CREATE))
    before = len(server.truth().sandboxes)
    exc = _raised(e2b.AsyncSandbox.create(**server.sdk_options))
    assert chain(exc) == [httpx.WriteError, pyqwest.WriteError]
    made = server.truth().sandboxes[before:]
    assert len(made) == 1
    e2b.Sandbox.kill(made[0].sandbox_id, **server.sdk_options)


def test_a_sandbox_killed_mid_stream_is_not_running(
    server: LocalE2B, box: e2b.AsyncSandbox
) -> None:
    async def run() -> BaseException:
        task = asyncio.ensure_future(box.commands.run("sleep 30"))
        await asyncio.sleep(0.3)
        await e2b.AsyncSandbox.kill(box.sandbox_id, **server.sdk_options)
        try:
            await task
        except BaseException as exc:
            return exc
        raise AssertionError("the run should fail")

    assert chain(asyncio.run(run())) == [e2b.SandboxNotRunningException, ConnectError]
    assert chain(_raised(box.commands.run("echo x")))[0] is e2b.SandboxNotRunningException
    assert chain(_raised(e2b.AsyncSandbox.connect(box.sandbox_id, **server.sdk_options))) == [
        e2b.SandboxNotFoundException
    ]


def test_a_server_killed_mid_stream_leaves_nothing_running() -> None:
    with serve() as doomed:
        made = e2b.Sandbox.create(**doomed.sdk_options)
        sleeper = made.commands.run("sleep 60", background=True)
        doomed.inject(WireFault(kind=WireFaultKind.KILL_SERVER, route=Route.START, match="killme"))

        async def run() -> BaseException:
            box = await e2b.AsyncSandbox.connect(made.sandbox_id, **doomed.sdk_options)
            try:
                await box.commands.run("sleep 1; echo killme")
            except BaseException as exc:
                return exc
            raise AssertionError("the run should fail")

        exc = asyncio.run(run())
        assert chain(exc) == [
            e2b.SandboxUnreachableException,
            ConnectError,
            pyqwest.RemoteProtocolError,
        ]
        assert wait_until(lambda: not doomed.alive)
        # The server died; its sandbox's anchor killed what was left in it
        # (before serve() sweeps, which is the second line of defence).
        assert wait_until(lambda: gone(sleeper.pid))


def test_faults_can_be_listed_and_clear_themselves(server: LocalE2B) -> None:
    server.inject(WireFault(kind=WireFaultKind.STATUS_429, route=Route.LIST, times=2))
    assert [(fault.kind, left) for fault, left in server.pending_faults()] == [
        (WireFaultKind.STATUS_429, 2)
    ]
    server.clear_faults()
    assert server.pending_faults() == []


def test_userns_mode_says_there_is_no_user_separation() -> None:
    with serve(isolation="userns") as weak:
        assert weak.mode == "userns"
        assert "NO USER SEPARATION" in weak.isolation
        made = e2b.Sandbox.create(**weak.sdk_options)
        assert made.commands.run("whoami; pwd").stdout == "root\n/home/user\n"
        made.files.write("/tmp/x", "y")
        assert made.commands.run("cat /tmp/x").stdout == "y"


def test_the_command_line_prints_exports_and_stops_everything_on_ctrl_c() -> None:
    cli = subprocess.Popen(
        [sys.executable, "-m", "sandrail", "local-e2b"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert cli.stdout is not None
        exports: dict[str, str] = {}
        lines = []
        while len(exports) < 3:
            line = cli.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
            if line.startswith("export "):
                name, _, value = line.removeprefix("export ").strip().partition("=")
                exports[name] = value
        text = "".join(lines)
        assert "NOT a security boundary" in text
        assert "Isolation: root" in text
        made = e2b.Sandbox.create(
            api_url=exports["E2B_API_URL"],
            sandbox_url=exports["E2B_SANDBOX_URL"],
            api_key=exports["E2B_API_KEY"],
        )
        sleeper = made.commands.run("sleep 60", background=True)
        tried = subprocess.run(
            [sys.executable, "-m", "sandrail", "run", "--backend", "e2b", "--", "uname", "-a"],
            env={**os.environ, **exports},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert tried.returncode == 0, tried.stdout + tried.stderr  # the README's line to try
        assert '"stdout": "Linux ' in tried.stdout
        cli.send_signal(signal.SIGINT)
        assert cli.wait(15) == 0
        assert gone(sleeper.pid)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def test_a_server_dies_with_the_process_that_served_it() -> None:
    script = (
        "import e2b, sys, time\n"
        "from sandrail.local_e2b import serve\n"
        "with serve() as server:\n"
        "    box = e2b.Sandbox.create(**server.sdk_options)\n"
        "    sleeper = box.commands.run('sleep 120', background=True)\n"
        "    print(server.pid, sleeper.pid, flush=True)\n"
        "    time.sleep(120)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    server_pid, sleeper_pid = map(int, owner.stdout.readline().split())
    owner.kill()  # no cleanup runs in the owner
    owner.wait()
    assert wait_until(lambda: gone(server_pid), timeout=15)
    assert wait_until(lambda: gone(sleeper_pid), timeout=15)


def test_signal_scope_process_kills_only_the_command_as_envd_does() -> None:
    with serve(signal_scope="process") as exact:
        made = e2b.Sandbox.create(**exact.sdk_options)
        handle = made.commands.run("sleep 60 & echo $! > /tmp/child; wait", background=True)
        assert wait_until(lambda: made.files.exists("/tmp/child"))
        assert wait_until(lambda: made.files.read("/tmp/child").strip() != "")
        child = int(made.files.read("/tmp/child"))
        assert made.commands.kill(handle.pid) is True
        assert wait_until(lambda: gone(handle.pid))
        assert not gone(child)  # E2B's envd leaves the command's children running
        made.kill()
        assert wait_until(lambda: gone(child))  # until the sandbox goes


def test_stopping_a_server_never_kills_a_sandbox_of_another_that_took_an_ended_mark(
    server: LocalE2B,
) -> None:
    """Two servers on one machine (two CI jobs, two test workers). The kernel
    gives a new namespace the inode number of the last one freed, and a new
    ``/tmp`` can take a deleted one's inode number, so a sandbox of one
    server can carry the very mark (namespace and ``/tmp`` inodes) of a
    sandbox another server made and ended (seen in 3 of 15 sandboxes made
    one after another). The other server's final sweep must skip the marks
    of sandboxes it ended itself; it used to kill the live sandbox (its
    anchor gone: ``nsenter: cannot open /proc/<anchor>/ns/mnt``).

    The reuse is made certain here: the other server's record is given the
    live sandbox's mark as one it made and then ended."""
    live = e2b.Sandbox.create(**server.sdk_options)
    try:
        mark = (server._state / "sandboxes" / "namespaces").read_text().splitlines()[-1]
        with serve() as other:
            gone_box = e2b.Sandbox.create(**other.sdk_options)
            gone_box.kill()
            record = other._state / "sandboxes" / "namespaces"
            with record.open("a") as lines:
                lines.write(f"{mark}\nended {mark}\n")
        assert live.commands.run("echo alive").stdout == "alive\n"
    finally:
        live.kill()
