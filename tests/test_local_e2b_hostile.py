"""``sandrail local-e2b`` against hostile clients and environments, each
case pinned so it stays fixed: hostile bodies
are refused, never crash the server; a refused or cut upload leaves the
target as it was; a client that goes away takes its handler and its
watches with it; SIGHUP stops the server as SIGTERM does; a remove is all
or nothing; commands see E2B's default variables; SysV IPC stays inside
the sandbox; a dangling link to a directory is named as such.

Driven by the unmodified e2b SDK where it can reach the case, by raw HTTP
where only a hostile client can. One server for the module (uploads
limited to 1 MiB, so an oversize body stays small).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import e2b
import httpx
import pytest

from sandrail.local_e2b import LocalE2B, serve
from tests.local_e2b_helpers import gone, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="these tests assume real root (as CI)")

_LIMIT = 1 << 20
_DEEP = 100_000


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve(keepalive_seconds=0.2, max_upload_bytes=_LIMIT) as running:
        yield running


def _envd(sandbox: e2b.Sandbox, content_type: str = "application/json") -> dict[str, str]:
    return {
        "E2b-Sandbox-Id": sandbox.sandbox_id,
        "X-Access-Token": str(sandbox._envd_access_token),
        "Content-Type": content_type,
    }


def _envelope(body: bytes) -> bytes:
    return b"\x00" + len(body).to_bytes(4, "big") + body


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _inotify_instances(pid: int) -> int:
    found = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            continue
    return found


# -- nested JSON ---------------------------------------------------------------


@pytest.mark.parametrize(
    "route", ["/process.Process/List", "/filesystem.Filesystem/Stat", "/process.Process/SendInput"]
)
@pytest.mark.parametrize("depth", [1_000, _DEEP])
def test_deeply_nested_json_to_an_envd_rpc_is_invalid_argument_and_the_server_lives(
    server: LocalE2B, sandbox: e2b.Sandbox, route: str, depth: int
) -> None:
    body = b"[" * depth + b"]" * depth
    answer = httpx.post(server.sandbox_url + route, headers=_envd(sandbox), content=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "invalid_argument"
    assert "nested" in answer.json()["message"]
    assert server.alive
    assert sandbox.commands.run("echo still-here").stdout == "still-here\n"


def test_deeply_nested_json_to_a_streaming_rpc_is_invalid_argument(
    server: LocalE2B, sandbox: e2b.Sandbox
) -> None:
    body = _envelope(b"{" + b'"a":[' * _DEEP + b"]" * _DEEP + b"}")
    answer = httpx.post(
        server.sandbox_url + "/process.Process/Start",
        headers=_envd(sandbox, "application/connect+json"),
        content=body,
    )
    assert b"invalid_argument" in answer.content, answer.content[:300]
    assert server.alive
    assert sandbox.commands.run("echo still-here").stdout == "still-here\n"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2/sandboxes"),
        ("POST", "/sandboxes/{id}/timeout"),
        ("POST", "/v2/sandboxes/{id}/connect"),
    ],
)
def test_deeply_nested_json_to_the_control_plane_is_400(
    server: LocalE2B, sandbox: e2b.Sandbox, method: str, path: str
) -> None:
    body = b"[" * _DEEP + b"]" * _DEEP
    answer = httpx.request(
        method,
        server.api_url + path.format(id=sandbox.sandbox_id),
        headers={"X-API-KEY": server.api_key, "Content-Type": "application/json"},
        content=body,
    )
    assert answer.status_code == 400, answer.text
    assert "nested" in answer.json()["message"]
    assert server.alive


def test_malformed_envd_bodies_are_invalid_argument_not_unknown(
    server: LocalE2B, sandbox: e2b.Sandbox
) -> None:
    for body in (b"{not json", b'{"path": 5}', b"[]", b'{"path": "/tmp", "depth": -1}'):
        answer = httpx.post(
            server.sandbox_url + "/filesystem.Filesystem/ListDir",
            headers=_envd(sandbox),
            content=body,
        )
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["code"] == "invalid_argument"


# -- a refused upload leaves the target as it was -------------------------------


@pytest.mark.parametrize("gzip", [False, True])
def test_an_oversize_upload_refused_413_leaves_an_existing_file_whole(
    sandbox: e2b.Sandbox, folder: str, gzip: bool
) -> None:
    target = f"{folder}/important.txt"
    sandbox.files.write(target, "original content")
    with pytest.raises(e2b.SandboxException):
        sandbox.files.write(target, b"x" * (_LIMIT + 1), gzip=gzip)
    assert sandbox.files.read(target) == "original content"


@pytest.mark.parametrize("gzip", [False, True])
def test_an_oversize_upload_refused_413_creates_nothing(
    sandbox: e2b.Sandbox, folder: str, gzip: bool
) -> None:
    with pytest.raises(e2b.SandboxException):
        sandbox.files.write(f"{folder}/new.txt", b"x" * (_LIMIT + 1), gzip=gzip)
    assert not sandbox.files.exists(f"{folder}/new.txt")
    assert sandbox.files.list(folder) == []


def test_a_refused_multi_file_upload_writes_none_of_its_files(
    sandbox: e2b.Sandbox, folder: str
) -> None:
    sandbox.files.write(f"{folder}/a.txt", "old a")
    with pytest.raises(e2b.SandboxException):
        sandbox.files.write_files(
            [
                {"path": f"{folder}/a.txt", "data": "new a"},
                {"path": f"{folder}/b.txt", "data": b"x" * (_LIMIT + 1)},
            ]
        )
    assert sandbox.files.read(f"{folder}/a.txt") == "old a"
    assert not sandbox.files.exists(f"{folder}/b.txt")


# -- an upload cut mid-body ------------------------------------------------------


def _cut_upload(server: LocalE2B, sandbox: e2b.Sandbox, path: str, sent: int) -> None:
    """Send the head and ``sent`` bytes of a 900 KiB upload, then hang up."""
    port = int(server.sandbox_url.rsplit(":", 1)[1])
    head = (
        f"POST /files?path={path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"E2b-Sandbox-Id: {sandbox.sandbox_id}\r\n"
        f"X-Access-Token: {sandbox._envd_access_token}\r\n"
        "Content-Type: application/octet-stream\r\nContent-Length: 921600\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(head + b"y" * sent)
        time.sleep(0.1)


def test_an_upload_cut_mid_body_ends_its_handler_and_leaves_the_target_as_it_was(
    server: LocalE2B, sandbox: e2b.Sandbox, folder: str
) -> None:
    sandbox.files.write(f"{folder}/kept.txt", "kept")
    _cut_upload(server, sandbox, f"{folder}/kept.txt", 65_536)  # warm every pool
    assert wait_until(lambda: sandbox.files.read(f"{folder}/kept.txt") == "kept")
    before = _fds(server.pid)
    for number in range(10):
        _cut_upload(server, sandbox, f"{folder}/cut-{number}", 300_000)
    _cut_upload(server, sandbox, f"{folder}/kept.txt", 300_000)
    assert wait_until(lambda: _fds(server.pid) <= before + 2, timeout=10), (
        before,
        _fds(server.pid),
    )
    assert sandbox.files.read(f"{folder}/kept.txt") == "kept"
    assert sorted(entry.name for entry in sandbox.files.list(folder)) == ["kept.txt"]


# -- abandoned watches -----------------------------------------------------------


def test_a_streamed_watch_whose_client_died_is_released() -> None:
    """Released when the client goes, not at the next keepalive (here a
    minute away) that finds it gone."""
    child = (
        "import asyncio, e2b, sys, json\n"
        "async def main():\n"
        "    box = await e2b.AsyncSandbox.connect(sys.argv[1], **json.loads(sys.argv[2]))\n"
        "    for _ in range(3):\n"
        "        await box.files.watch_dir('/tmp', on_event=print)\n"
        "    print('watching', flush=True)\n"
        "    await asyncio.sleep(120)\n"
        "asyncio.run(main())\n"
    )
    with serve(keepalive_seconds=60) as slow:
        made = e2b.Sandbox.create(**slow.sdk_options)
        before = _inotify_instances(slow.pid)
        watcher = subprocess.Popen(
            [sys.executable, "-c", child, made.sandbox_id, json.dumps(slow.sdk_options)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert watcher.stdout is not None
            assert watcher.stdout.readline() == "watching\n"
            assert _inotify_instances(slow.pid) == before + 3
        finally:
            watcher.kill()
            watcher.wait()
        assert wait_until(lambda: _inotify_instances(slow.pid) == before, timeout=10)


def test_watches_per_sandbox_are_bounded(server: LocalE2B) -> None:
    """The sync SDK's watches are polled: nothing tells the server their
    client is gone, so a bound keeps abandoned ones from taking this
    machine's inotify instances."""
    from sandrail.local_e2b._watch import MAX_WATCHES

    made = e2b.Sandbox.create(**server.sdk_options)
    try:
        held = [made.files.watch_dir("/tmp") for _ in range(MAX_WATCHES)]
        with pytest.raises(e2b.SandboxException, match="watches"):
            made.files.watch_dir("/tmp")
        held.pop().stop()
        held.append(made.files.watch_dir("/tmp"))  # room again once one ends
        for handle in held:
            handle.stop()
    finally:
        made.kill()


# -- SIGHUP ----------------------------------------------------------------------


def _state_dir(pid: int) -> str | None:
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        with_dir = re.search(r"(/\S*?sandrail-local-e2b-[^/]+)/", target)
        if with_dir:
            return with_dir.group(1)
    return None


def test_sighup_stops_the_command_line_server_and_everything_it_started() -> None:
    cli = subprocess.Popen(
        [sys.executable, "-m", "sandrail", "local-e2b"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert cli.stdout is not None
        exports: dict[str, str] = {}
        while len(exports) < 3:
            line = cli.stdout.readline()
            assert line
            if line.startswith("export "):
                name, _, value = line.removeprefix("export ").strip().partition("=")
                exports[name] = value
        made = e2b.Sandbox.create(
            api_url=exports["E2B_API_URL"],
            sandbox_url=exports["E2B_SANDBOX_URL"],
            api_key=exports["E2B_API_KEY"],
        )
        sleeper = made.commands.run("sleep 120", background=True)
        state = _state_dir(cli.pid)
        assert state is not None
        assert os.path.isdir(state)
        cli.send_signal(signal.SIGHUP)
        assert cli.wait(20) == 0
        assert gone(sleeper.pid)
        assert not os.path.exists(state)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def test_a_killed_server_leaves_no_sandbox_process_running(tmp_path: Path) -> None:
    """SIGKILL (or a crash) runs no cleanup in the server: each sandbox's
    anchor sees the server gone and kills what is left in its sandbox."""
    server = subprocess.Popen(
        [sys.executable, "-m", "sandrail.local_e2b", "--state-dir", str(tmp_path / "server")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        info = json.loads(server.stdout.readline())
        made = e2b.Sandbox.create(
            api_url=info["api_url"], sandbox_url=info["sandbox_url"], api_key=info["api_key"]
        )
        sleeper = made.commands.run("sleep 120", background=True)
        daemon = made.commands.run("setsid sleep 121 & echo $!").stdout.strip()
        server.kill()
        server.wait()
        assert wait_until(lambda: gone(sleeper.pid), timeout=10)
        assert wait_until(lambda: gone(int(daemon)), timeout=10)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


# -- remove is all or nothing ----------------------------------------------------


@pytest.mark.parametrize("target", ["/tmp", "/home", "/home/user"])
def test_removing_a_sandbox_mount_point_is_refused_before_anything_is_deleted(
    server: LocalE2B, target: str
) -> None:
    made = e2b.Sandbox.create(**server.sdk_options)
    try:
        made.files.write(f"{target}/keep-me.txt", "precious")
        with pytest.raises(e2b.SandboxException, match="mount point"):
            made.files.remove(target)
        assert made.files.read(f"{target}/keep-me.txt") == "precious"
        assert made.commands.run("python --version").exit_code == 0
    finally:
        made.kill()


def test_removing_a_plain_directory_still_removes_it_whole(
    sandbox: e2b.Sandbox, folder: str
) -> None:
    sandbox.commands.run(f"mkdir -p {folder}/a/b && touch {folder}/a/b/c")
    sandbox.files.remove(f"{folder}/a")
    assert not sandbox.files.exists(f"{folder}/a")


# -- listing -----------------------------------------------------------------------


def test_list_dir_names_every_entry_as_envd_does_broken_links_and_loops_included(
    server: LocalE2B, sandbox: e2b.Sandbox, folder: str
) -> None:
    sandbox.commands.run(
        "touch f && ln -s f good && ln -s /nonexistent dangling "
        "&& ln -s loop2 loop1 && ln -s loop1 loop2",
        cwd=folder,
    )
    answer = httpx.post(
        server.sandbox_url + "/filesystem.Filesystem/ListDir",
        headers=_envd(sandbox),
        json={"path": folder, "depth": 1},
    )
    assert answer.status_code == 200, answer.text
    names = sorted(entry["name"] for entry in answer.json()["entries"])
    assert names == ["dangling", "f", "good", "loop1", "loop2"]
    # The SDK itself drops entries of unknown type (a link to nothing), as
    # it does on E2B: envd reports those FILE_TYPE_UNSPECIFIED.
    kinds = {entry["name"]: entry.get("type") for entry in answer.json()["entries"]}
    assert kinds["dangling"] in (None, "FILE_TYPE_UNSPECIFIED")
    assert sorted(e.name for e in sandbox.files.list(folder)) == ["f", "good"]


# -- E2B's default environment -----------------------------------------------------


def test_commands_see_e2bs_default_environment_variables(server: LocalE2B) -> None:
    made = e2b.Sandbox.create(envs={"MINE": "1"}, **server.sdk_options)
    try:
        shown = made.commands.run(
            "echo $E2B_SANDBOX/$E2B_SANDBOX_ID/$E2B_TEMPLATE_ID/${E2B_TEAM_ID:+team}/$MINE"
        ).stdout.strip()
        template = made.get_info().template_id
        assert shown == f"true/{made.sandbox_id}/{template}/team/1"
        # A request's own variables still win, as the launcher relies on.
        assert made.commands.run("echo $E2B_SANDBOX", envs={"E2B_SANDBOX": "x"}).stdout == "x\n"
    finally:
        made.kill()


# -- SysV IPC ----------------------------------------------------------------------


def _host_has_ipc(kind: str, ipc_id: str) -> bool:
    shown = subprocess.run(["ipcs", kind], capture_output=True, text=True, check=True).stdout
    return any(line.split()[1:2] == [ipc_id] for line in shown.splitlines())


def test_sysv_ipc_objects_stay_in_their_sandbox(server: LocalE2B) -> None:
    made = e2b.Sandbox.create(**server.sdk_options)
    other = e2b.Sandbox.create(**server.sdk_options)
    try:
        shm = made.commands.run("ipcmk -M 4096 -p 0666").stdout.split(":")[1].strip()
        assert shm in made.commands.run("ipcs -m").stdout
        assert shm not in other.commands.run("ipcs -m").stdout.split()
        assert not _host_has_ipc("-m", shm)
    finally:
        made.kill()
        other.kill()


# -- a dangling link to a directory -----------------------------------------------


def test_under_a_dangling_link_to_a_directory_writes_and_make_dir_say_so(
    sandbox: e2b.Sandbox, folder: str
) -> None:
    sandbox.commands.run(f"ln -s /nonexistent-{uuid.uuid4().hex} {folder}/esc")
    with pytest.raises(e2b.InvalidArgumentException, match="link"):
        sandbox.files.make_dir(f"{folder}/esc/newdir")
    assert sandbox.files.exists(f"{folder}/esc/newdir") is False
    with pytest.raises(e2b.InvalidArgumentException, match="link"):
        sandbox.files.write(f"{folder}/esc/a", "x")


# -- the attack's doubts and nits ------------------------------------------------------


def _api(server: LocalE2B, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(
        method, server.api_url + path, headers={"X-API-KEY": server.api_key}, **kwargs
    )


def test_an_oversized_header_is_answered_431(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    headers = {**_envd(sandbox, "application/octet-stream"), "X-Metadata-Big": "v" * 70_000}
    answer = httpx.post(
        server.sandbox_url + "/files", params={"path": "/tmp/x"}, headers=headers, content=b"x"
    )
    assert answer.status_code == 431


def test_bad_create_env_vars_are_refused_by_name(server: LocalE2B) -> None:
    for envs in ({"A=B": "1"}, {"": "1"}, {"A": "a\0b"}, {"A\0": "1"}):
        answer = _api(server, "POST", "/v2/sandboxes", json={"templateID": "base", "envVars": envs})
        assert answer.status_code == 400, (envs, answer.text)
        assert "envVars" in answer.json()["message"]


def test_batch_metrics_and_bad_state_filter_are_not_false_not_found(
    server: LocalE2B,
) -> None:
    metrics = _api(server, "GET", "/sandboxes/metrics")
    assert metrics.status_code == 501, metrics.text
    assert "local-e2b does not support" in metrics.json()["message"]
    bogus = _api(server, "GET", "/v2/sandboxes", params={"state": "bogus"})
    assert bogus.status_code == 400
    assert "state" in bogus.json()["message"]


def test_a_missing_program_fails_the_start_cleanly(server: LocalE2B, sandbox: e2b.Sandbox) -> None:
    body = _envelope(json.dumps({"process": {"cmd": "no-such-program", "args": []}}).encode())
    answer = httpx.post(
        server.sandbox_url + "/process.Process/Start",
        headers=_envd(sandbox, "application/connect+json"),
        content=body,
    )
    assert b"no-such-program" in answer.content
    assert b'"start"' not in answer.content  # no process was reported started


def test_allow_internet_access_is_reported_as_in_force(
    server: LocalE2B,
) -> None:
    closed = e2b.Sandbox.create(
        allow_internet_access=True, network={"deny_out": ["0.0.0.0/0"]}, **server.sdk_options
    )
    try:
        assert closed.get_info().allow_internet_access is False
    finally:
        closed.kill()


def test_refusals_name_snapshots_and_mcp_servers(server: LocalE2B) -> None:
    with pytest.raises(e2b.SandboxException, match="does not support snapshots"):
        e2b.Sandbox.delete_snapshot("snap-1", **server.sdk_options)
    with pytest.raises(e2b.SandboxException, match="does not support MCP servers"):
        e2b.Sandbox.create(mcp={"exa": {"apiKey": "k"}}, **server.sdk_options)


def test_bad_paths_are_refused_as_bad_input_not_500(
    server: LocalE2B, sandbox: e2b.Sandbox, folder: str
) -> None:
    stat = httpx.post(
        server.sandbox_url + "/filesystem.Filesystem/Stat",
        headers=_envd(sandbox),
        json={"path": f"{folder}/a\0b"},
    )
    assert stat.status_code == 400
    assert stat.json()["code"] == "invalid_argument"
    read = httpx.get(
        server.sandbox_url + "/files", params={"path": "/tmp/a\0b"}, headers=_envd(sandbox)
    )
    assert read.status_code == 400
    with pytest.raises(e2b.InvalidArgumentException):
        sandbox.files.write(f"{folder}/{'n' * 300}", "x")
    with pytest.raises(e2b.InvalidArgumentException):
        sandbox.files.make_dir(f"{folder}/{'n' * 300}")
    with pytest.raises(e2b.InvalidArgumentException, match="directory"):
        sandbox.files.write(f"{folder}/newdir/", "x")
    assert sandbox.files.list(folder) == []


def test_a_recursive_watch_skips_a_directory_gone_during_its_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As under ``watch_dir("/", recursive=True)``, where /proc's directories
    of processes come and go while the tree is walked."""
    from sandrail.local_e2b._fsview import FsView
    from sandrail.local_e2b._watch import Watcher

    (tmp_path / "stays" / "below").mkdir(parents=True)
    (tmp_path / "goes").mkdir()
    root = os.open("/", os.O_PATH | os.O_DIRECTORY)
    files = FsView(root, {})
    real_open = files.open

    def vanishing(path: str, flags: int, mode: int = 0) -> int:
        if path == str(tmp_path / "goes") and not flags & os.O_PATH:
            raise FileNotFoundError(2, "No such file or directory", path)
        return real_open(path, flags, mode)

    monkeypatch.setattr(files, "open", vanishing)
    watcher = Watcher(
        files,
        str(tmp_path),
        recursive=True,
        include_entry=False,
        to_entry=lambda entry: None,
        emit=lambda event: None,
    )
    try:
        watcher._add_tree(str(tmp_path))
        watched = set(watcher._by_path)
    finally:
        watcher.close()
        os.close(root)
    assert str(tmp_path / "stays" / "below") in watched
