"""sandrail local-e2b driven by the unmodified e2b SDK over real HTTP:
control plane, processes, files, users and isolation, ground truth.

One server serves the module (it starts in about a second); each test makes
its own sandboxes. Negative auth tests speak raw HTTP with httpx (the SDK's
own HTTP library) since the SDK always sends the right credentials.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import e2b
import httpx
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from e2b.envd.client_sync import create_rpc_client
from e2b.envd.process import process_connect, process_pb
from protobuf import Oneof

from sandrail.local_e2b import LocalE2B, serve
from sandrail.local_e2b._process_rpc import _follow
from sandrail.local_e2b._reaper import Exit
from tests.local_e2b_helpers import gone, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="these tests assume real root (as CI)")


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve(keepalive_seconds=0.2) as running:
        yield running


@pytest.fixture
def sandbox(server: LocalE2B) -> Iterator[e2b.Sandbox]:
    made = e2b.Sandbox.create(**server.sdk_options, request_timeout=10)
    yield made
    made.kill()


# -- control plane ------------------------------------------------------------


def test_create_answers_what_the_sdk_needs_and_records_it(server: LocalE2B) -> None:
    made = e2b.Sandbox.create(
        template="base",
        metadata={"team": "a b&c=d/é"},
        envs={"GREETING": "hello"},
        timeout=120,
        **server.sdk_options,
    )
    info = made.get_info()
    assert info.sandbox_id == made.sandbox_id
    assert info.metadata == {"team": "a b&c=d/é"}
    assert 115 < (info.end_at - info.started_at).total_seconds() <= 120
    assert made.commands.run("echo $GREETING").stdout == "hello\n"
    record = server.truth().sandbox(made.sandbox_id)
    assert record.metadata == {"team": "a b&c=d/é"}
    assert record.env_vars == {"GREETING": "hello"}
    assert made.kill() is True
    assert made.kill() is False
    assert server.truth().sandbox(made.sandbox_id).end_reason == "killed"


def test_wrong_api_key_is_refused(server: LocalE2B) -> None:
    with pytest.raises(e2b.AuthenticationException):
        e2b.Sandbox.create(**{**server.sdk_options, "api_key": "e2b_wrong"})


def test_list_filters_by_metadata_and_pages_with_next_token(server: LocalE2B) -> None:
    tag = {"run": uuid.uuid4().hex, "odd": "x y=z&w%"}
    made = [e2b.Sandbox.create(metadata=tag, **server.sdk_options) for _ in range(3)]
    other = e2b.Sandbox.create(metadata={"run": "other"}, **server.sdk_options)
    try:
        paginator = e2b.Sandbox.list(
            query=e2b.SandboxQuery(metadata=tag), limit=2, **server.sdk_options
        )
        pages = []
        while paginator.has_next:
            pages.append([info.sandbox_id for info in paginator.next_items()])
        assert [len(page) for page in pages] == [2, 1]
        listed = [sandbox_id for page in pages for sandbox_id in page]
        assert sorted(listed) == sorted(s.sandbox_id for s in made)
        paused = e2b.Sandbox.list(
            query=e2b.SandboxQuery(metadata=tag, state=[e2b.SandboxState.PAUSED]),
            **server.sdk_options,
        )
        assert paused.next_items() == []
    finally:
        for box in [*made, other]:
            box.kill()


def test_connect_info_and_set_timeout(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    again = e2b.Sandbox.connect(sandbox.sandbox_id, **server.sdk_options)
    assert again.commands.run("echo again").stdout == "again\n"
    sandbox.set_timeout(30)
    end = sandbox.get_info().end_at
    assert 25 < (end.timestamp() - time.time()) <= 30
    e2b.Sandbox.connect(sandbox.sandbox_id, timeout=10, **server.sdk_options)
    assert sandbox.get_info().end_at == end  # connect only ever extends the lifetime
    with pytest.raises(e2b.SandboxNotFoundException):
        e2b.Sandbox.connect("inothere", **server.sdk_options)


def test_a_sandbox_whose_lifetime_ends_is_killed_with_its_processes(server: LocalE2B) -> None:
    made = e2b.Sandbox.create(timeout=1, **server.sdk_options)
    handle = made.commands.run("sleep 60", background=True)
    assert wait_until(lambda: server.truth().sandbox(made.sandbox_id).end_reason == "expired")
    assert wait_until(lambda: gone(handle.pid))
    with pytest.raises(e2b.SandboxNotFoundException):
        made.get_info()
    with pytest.raises(e2b.SandboxNotRunningException):
        made.commands.run("echo late")


def test_the_same_idempotency_key_returns_the_same_sandbox(server: LocalE2B) -> None:
    key = f"key-{uuid.uuid4().hex}"
    first = e2b.Sandbox.create(idempotency_key=key, **server.sdk_options)
    second = e2b.Sandbox.create(idempotency_key=key, **server.sdk_options)
    assert first.sandbox_id == second.sandbox_id
    first.kill()
    third = e2b.Sandbox.create(idempotency_key=key, **server.sdk_options)
    assert third.sandbox_id != first.sandbox_id  # a gone sandbox frees its key
    third.kill()


def test_concurrent_creates_with_one_key_make_one_sandbox(server: LocalE2B) -> None:
    key = f"key-{uuid.uuid4().hex}"

    async def create_many() -> set[str]:
        made = await asyncio.gather(
            *[e2b.AsyncSandbox.create(idempotency_key=key, **server.sdk_options) for _ in range(6)]
        )
        return {box.sandbox_id for box in made}

    ids = asyncio.run(create_many())
    assert len(ids) == 1
    created = [s for s in server.truth().sandboxes if s.idempotency_key == key]
    assert len(created) == 1
    e2b.Sandbox.kill(ids.pop(), **server.sdk_options)


# -- processes -----------------------------------------------------------------


def test_foreground_run_reports_output_and_exit(sandbox: e2b.Sandbox) -> None:
    result = sandbox.commands.run("echo out; echo err >&2; exit 0")
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 0)
    with pytest.raises(e2b.CommandExitException) as failed:
        sandbox.commands.run("echo partial; exit 7")
    assert failed.value.exit_code == 7
    assert failed.value.stdout == "partial\n"


def test_background_run_wait_list_and_connect(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    handle = sandbox.commands.run("sleep 0.5; echo done", background=True, stdin=False)
    listed = {p.pid: p for p in sandbox.commands.list()}
    assert listed[handle.pid].cmd == "/bin/bash"
    assert listed[handle.pid].args == ["-l", "-c", "sleep 0.5; echo done"]
    attached = sandbox.commands.connect(handle.pid)
    assert attached.wait().stdout == "done\n"
    assert handle.wait().exit_code == 0
    (record,) = server.truth().launches("sleep 0.5; echo done")
    assert (record.pid, record.exit_code, record.status) == (handle.pid, 0, "exit status 0")
    assert handle.pid not in {p.pid for p in sandbox.commands.list()}


def test_kill_ends_the_whole_process_group(sandbox: e2b.Sandbox) -> None:
    handle = sandbox.commands.run("sleep 60 & echo $! > /tmp/child; wait", background=True)
    assert wait_until(lambda: sandbox.files.exists("/tmp/child"))
    assert wait_until(lambda: sandbox.files.read("/tmp/child").strip() != "")
    child = int(sandbox.files.read("/tmp/child"))
    assert sandbox.commands.kill(handle.pid) is True
    with pytest.raises(e2b.CommandExitException) as killed:
        handle.wait()
    assert killed.value.exit_code == -1
    assert killed.value.error == "signal: killed"
    assert wait_until(lambda: gone(child))
    assert sandbox.commands.kill(handle.pid) is False


def test_stdin_can_be_sent_and_closed(sandbox: e2b.Sandbox) -> None:
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(handle.pid, "hello ")
    handle.send_stdin(b"world")
    handle.close_stdin()
    assert handle.wait().stdout == "hello world"


def test_the_server_enforces_the_command_deadline(server: LocalE2B) -> None:
    """The async SDK does not enforce ``timeout`` itself: the server kills
    the command at its Connect-Timeout-Ms and ends the stream with
    deadline_exceeded, which the SDK raises as TimeoutException (whether
    the stream's clock or the killed command's end reaches it first).

    The sandbox is killed only once the command's end is recorded: killing
    it earlier (a loaded machine reaps late) would send a second, honest
    ``sandbox_ended`` signal to the dying command."""

    def ended() -> bool:
        found = server.truth().launches("deadline-test")
        return bool(found) and found[0].status is not None

    async def run() -> None:
        box = await e2b.AsyncSandbox.create(**server.sdk_options)
        try:
            with pytest.raises(e2b.TimeoutException) as raised:
                await box.commands.run("sleep 30; echo deadline-test", timeout=1)
            assert "deadline passed" in str(raised.value)  # the server's words, not the client's
            assert await asyncio.to_thread(wait_until, ended, 60)
        finally:
            await box.kill()

    asyncio.run(run())
    (record,) = server.truth().launches("deadline-test")
    assert [s.reason for s in record.signals] == ["deadline"]
    assert record.status == "signal: killed"


def test_the_deadline_kills_even_when_the_client_gave_up_first(
    server: LocalE2B, sandbox: e2b.Sandbox
) -> None:
    """The sync SDK times the stream out itself and hangs up; the command
    must still die at its deadline, as under envd's process context."""
    with pytest.raises(e2b.TimeoutException):
        sandbox.commands.run("sleep 30; echo sync-deadline-test", timeout=1)
    (record,) = server.truth().launches("sync-deadline-test")
    assert wait_until(lambda: server.truth().launches("sync-deadline-test")[0].ended_at is not None)
    assert wait_until(lambda: gone(record.pid))


def test_streams_carry_keepalives(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    client = create_rpc_client(
        process_connect.ProcessClientSync, server.sandbox_url, sandbox.connection_config
    )
    request = process_pb.StartRequest(
        process=process_pb.ProcessConfig(cmd="/bin/bash", args=["-c", "sleep 0.7; echo x"]),
        stdin=False,
    )
    kinds = []
    for response in client.start(request, timeout_ms=5000):
        assert response.event is not None
        assert isinstance(response.event.event, Oneof)
        kinds.append(response.event.event.field)
    assert kinds[0] == "start"
    assert kinds[-1] == "end"
    assert kinds.count("keepalive") >= 2


def test_orphans_are_reaped(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    out = sandbox.commands.run("(sleep 0.3 & echo $!)").stdout
    orphan = int(out)
    assert wait_until(lambda: not os.path.exists(f"/proc/{orphan}"))


def test_a_bad_cwd_is_refused_and_nothing_runs(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    with pytest.raises(e2b.InvalidArgumentException):
        sandbox.commands.run("echo bad-cwd-test", cwd="/nowhere")
    assert server.truth().launches("bad-cwd-test") == ()


def test_a_daemon_that_left_the_process_group_dies_with_its_sandbox(server: LocalE2B) -> None:
    made = e2b.Sandbox.create(**server.sdk_options)
    made.commands.run("setsid sleep 300 > /dev/null 2>&1 & echo $! > /tmp/daemon")
    daemon = int(made.files.read("/tmp/daemon"))
    assert not gone(daemon)
    made.kill()
    assert wait_until(lambda: gone(daemon))


def test_bad_input_is_refused_not_crashed_on(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    with pytest.raises(e2b.InvalidArgumentException):
        sandbox.commands.run("echo x", envs={"BAD": "nul\x00byte"})
    sandbox.commands.run("mkfifo /tmp/fifo")
    with pytest.raises(e2b.InvalidArgumentException):
        sandbox.files.read("/tmp/fifo")  # would block a naive server forever
    with pytest.raises(e2b.SandboxException):
        sandbox.files.write("/tmp/fifo", "x")
    assert sandbox.commands.run("echo still-serving").stdout == "still-serving\n"


# -- users and isolation --------------------------------------------------------


def test_users_homes_and_default_cwd(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    as_user = sandbox.commands.run("whoami; echo $HOME; pwd; id -u").stdout.split()
    as_root = sandbox.commands.run("whoami; echo $HOME; pwd; id -u", user="root").stdout.split()
    assert as_user[:3] == ["user", "/home/user", "/home/user"]
    assert int(as_user[3]) != 0
    assert as_root == ["root", "/root", "/root", "0"]
    assert server.truth().sandbox(sandbox.sandbox_id).uid == int(as_user[3])


def test_user_cannot_read_or_delete_a_root_only_directory(sandbox: e2b.Sandbox) -> None:
    sandbox.commands.run("mkdir -m 700 /tmp/.ledger && echo claim > /tmp/.ledger/task", user="root")
    for attack in ("cat /tmp/.ledger/task", "rm -rf /tmp/.ledger", "ls /tmp/.ledger"):
        with pytest.raises(e2b.CommandExitException):
            sandbox.commands.run(attack)
    sandbox.commands.run("rm -rf /tmp/* /tmp/.[!.]* 2>/dev/null; true")
    assert sandbox.commands.run("cat /tmp/.ledger/task", user="root").stdout == "claim\n"


def test_sandboxes_do_not_see_each_others_tmp_or_the_hosts(server: LocalE2B) -> None:
    first = e2b.Sandbox.create(**server.sdk_options)
    second = e2b.Sandbox.create(**server.sdk_options)
    marker = f"/tmp/marker-{uuid.uuid4().hex}"
    try:
        first.commands.run(f"echo mine > {marker}")
        assert first.files.exists(marker)
        assert not second.files.exists(marker)
        assert second.commands.run(f"test -e {marker} && echo seen || echo unseen").stdout == (
            "unseen\n"
        )
        assert not os.path.exists(marker)
        uid_first = first.commands.run("id -u").stdout
        uid_second = second.commands.run("id -u").stdout
        assert uid_first != uid_second
    finally:
        first.kill()
        second.kill()


def test_the_rest_of_the_machine_is_read_only(sandbox: e2b.Sandbox) -> None:
    probes = "touch /etc/local-e2b-probe /dev/local-e2b-probe; echo 1 > /proc/sys/vm/drop_caches"
    result = sandbox.commands.run(f"{probes}; echo ok > /dev/null; touch /dev/shm/own", user="root")
    assert result.stderr.count("Read-only file system") == 3
    assert not os.path.exists("/etc/local-e2b-probe")
    assert not os.path.exists("/dev/shm/own")  # the sandbox's /dev/shm is its own


# -- files ------------------------------------------------------------------------


def test_write_read_list_exists_remove_rename(sandbox: e2b.Sandbox) -> None:
    info = sandbox.files.write("notes/a.txt", "alpha")
    assert info.path == "/home/user/notes/a.txt"
    assert sandbox.files.read("/home/user/notes/a.txt") == "alpha"
    sandbox.files.write_files(
        [{"path": "/tmp/b.bin", "data": b"\x00\x01"}, {"path": "/tmp/c.txt", "data": "gamma"}]
    )
    assert bytes(sandbox.files.read("/tmp/b.bin", format="bytes")) == b"\x00\x01"
    sandbox.files.write("/tmp/raw.txt", "raw" * 1000, use_octet_stream=True, gzip=True)
    assert sandbox.files.read("/tmp/raw.txt", gzip=True) == "raw" * 1000
    names = {entry.name for entry in sandbox.files.list("/tmp")}
    assert {"b.bin", "c.txt", "raw.txt"} <= names
    entry = sandbox.files.get_info("notes/a.txt")
    assert (entry.owner, entry.size, entry.type) == ("user", 5, e2b.FileType.FILE)
    assert sandbox.commands.run("stat -c %U notes/a.txt").stdout == "user\n"
    assert sandbox.files.make_dir("/tmp/d/e") is True
    assert sandbox.files.make_dir("/tmp/d/e") is False
    moved = sandbox.files.rename("/tmp/c.txt", "/tmp/d/e/c.txt")
    assert moved.path == "/tmp/d/e/c.txt"
    sandbox.files.remove("/tmp/d")
    assert not sandbox.files.exists("/tmp/d/e/c.txt")
    with pytest.raises(e2b.FileNotFoundException):
        sandbox.files.read("/tmp/nothing-here")


def test_paths_resolve_inside_the_sandbox(sandbox: e2b.Sandbox) -> None:
    sandbox.commands.run("echo inside > /tmp/target; ln -s /tmp/target /tmp/link")
    assert sandbox.files.read("/tmp/link") == "inside\n"
    assert sandbox.files.read("../../tmp/target") == "inside\n"  # from /home/user
    with pytest.raises(e2b.SandboxException):
        sandbox.files.write("/etc/passwd", "x", user="root")
    with open("/etc/passwd", encoding="utf-8") as host:
        assert host.read() != "x"


# -- envd auth and routing (raw HTTP) ----------------------------------------------


def test_envd_needs_the_sandbox_token_and_a_live_sandbox(
    server: LocalE2B, sandbox: e2b.Sandbox
) -> None:
    other = e2b.Sandbox.create(**server.sdk_options)
    try:
        url = f"{server.sandbox_url}/files"
        token = sandbox.connection_config.sandbox_headers["X-Access-Token"]
        own = {"E2b-Sandbox-Id": sandbox.sandbox_id, "X-Access-Token": token}
        assert httpx.get(url, params={"path": "/etc/hostname"}, headers=own).status_code == 200
        wrong = {**own, "X-Access-Token": "nope"}
        assert httpx.get(url, params={"path": "/etc/hostname"}, headers=wrong).status_code == 401
        crossed = {**own, "E2b-Sandbox-Id": other.sandbox_id}
        assert httpx.get(url, params={"path": "/etc/hostname"}, headers=crossed).status_code == 401
        answer = httpx.get(url, headers={**own, "E2b-Sandbox-Id": "inothere"})
        assert answer.status_code == 502
        assert "was not found" in answer.json()["message"]
        ranged = httpx.get(
            url, params={"path": "/etc/hostname"}, headers={**own, "Range": "bytes=0-1"}
        )
        assert ranged.status_code == 206
        assert len(ranged.content) == 2
    finally:
        other.kill()


def test_early_answers_reach_a_client_still_sending(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    """An answer sent before a large body was
    read was lost to a TCP reset; now the body is read first."""
    token = sandbox.connection_config.sandbox_headers["X-Access-Token"]
    own = {"E2b-Sandbox-Id": sandbox.sandbox_id, "X-Access-Token": token}
    big_json = b"{" + b" " * (3 * 1024 * 1024) + b"}"
    answer = httpx.post(
        f"{server.api_url}/v2/sandboxes", headers={"X-API-KEY": server.api_key}, content=big_json
    )
    assert answer.status_code == 413
    answer = httpx.post(
        f"{server.sandbox_url}/process.Process/List",
        headers={**own, "Content-Type": "application/json"},
        content=big_json * 3,
    )
    assert answer.json()["code"] == "resource_exhausted"
    answer = httpx.post(
        f"{server.api_url}/v2/sandboxes", headers={"X-API-KEY": "no"}, content=big_json
    )
    assert answer.status_code == 401


def test_ground_truth_records_requests_by_route(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    sandbox.commands.run("echo truth-requests")
    routes = [r.route for r in server.truth().requests if r.sandbox_id == sandbox.sandbox_id]
    assert "POST /process.Process/Start" in routes
    create = [r for r in server.truth().requests if r.route == "POST /v2/sandboxes"]
    assert create
    assert {r.status for r in create if r.fault is None} <= {201, 400, 401, 409, 413}


def test_ground_truth_counts_the_bytes_sent_for_each_request_and_keeps_each_stdouts_head(
    server: LocalE2B, sandbox: e2b.Sandbox
) -> None:
    """What left the sandbox is measured where it leaves: every byte the
    server wrote for a request (a stream's whole body included); and a
    process's first stdout bytes are known even to a test whose client
    never read them."""
    before = server.truth().bytes_sent(sandbox.sandbox_id)
    sandbox.commands.run("head -c 100000 /dev/zero | tr '\\0' x; echo; echo head-test >&2")
    assert wait_until(
        lambda: all(
            r.sent_bytes for r in server.truth().requests if (r.route or "").endswith("Start")
        )
    )
    sent = server.truth().bytes_sent(sandbox.sandbox_id) - before
    # The JSON codec sends stdout as base64: about 4/3 of it, plus framing.
    assert 100_000 * 4 // 3 < sent < 100_000 * 3 // 2
    assert wait_until(lambda: server.truth().launches("head-test")[0].ended_at is not None)
    (record,) = server.truth().launches("head-test")
    assert record.stdout_head == "x" * 256


class _Killed:
    """A process whose end (killed by its deadline) is already waiting in
    the stream's queue when the stream looks: the race a loaded machine can
    give between the deadline's kill and the stream's own clock."""

    pid = 4242

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Exit] = asyncio.Queue()
        self.queue.put_nowait(Exit(exit_code=-1, exited=False, signal=9))

    def watch(self) -> asyncio.Queue[Exit]:
        return self.queue

    def unwatch(self, queue: asyncio.Queue[Exit]) -> None:
        pass

    def drained(self, queue: asyncio.Queue[Exit]) -> None:
        pass


def test_a_start_killed_by_its_deadline_ends_deadline_exceeded_whatever_the_stream_sees_first() -> (
    None
):
    async def stream(expired: bool) -> list[Any]:
        flag = asyncio.Event()
        if expired:
            flag.set()
        sandbox: Any = type("Box", (), {"alive": True, "sandbox_id": "s"})()
        events = _follow(sandbox, _Killed(), process_pb.StartResponse, 50.0, 60_000, flag)  # type: ignore[arg-type]
        return [event async for event in events]

    with pytest.raises(ConnectError) as raised:
        asyncio.run(stream(expired=True))
    assert raised.value.code is Code.DEADLINE_EXCEEDED
    _, end = asyncio.run(stream(expired=False))  # an ordinary end is reported as one
    assert end.event.event.field == "end"
