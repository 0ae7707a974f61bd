"""The E2B interpreter through the unmodified SDK against local-e2b (real
HTTP, real bash, real users): launches, the ledger, reads, snippets, stop,
deadlines, round trips, threads and closing.

Contract lines are named in the test names (C2, C3, C10, C16-C18). Failure
table rows: ``test_e2b_failures.py``; attacks on the launcher:
``test_adversarial_e2b.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import e2b
import pytest

import sandrail
from sandrail.core._effects import (
    Cancel,
    CancelRequested,
    CommandState,
    Delivery,
    Ensure,
    Inspect,
    Publish,
    Published,
    SandboxReady,
    Start,
    Started,
    StartRefused,
)
from sandrail.interpreters._launcher_answers import NOT_STARTED_REFUSAL
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B, Route
from tests.e2b_world import (
    LEDGER,
    OTHER,
    TASK,
    as_root,
    as_user,
    ensure,
    failure,
    finished,
    needs_root,
    new_session,
    port_on,
    read,
    request,
    run,
    server_fixture,
    start,
    start_fields,
    wait,
)
from tests.rig import inspect_answer

pytestmark = needs_root
server = server_fixture()


@pytest.fixture(scope="module")
def backend(server: LocalE2B) -> Any:
    with E2BBackend(**server.sdk_options) as shared:
        yield shared


@pytest.fixture
def sandbox_id(backend: E2BBackend) -> str:
    """A fresh sandbox for the test (its own session)."""
    return ensure(backend)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _eventually(check: Any, seconds: float = 5) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


# ---------------------------------------------------------------------------
# Sandboxes


def test_ensure_is_idempotent_per_session_and_a_restarted_harness_finds_it(
    server: LocalE2B, backend: E2BBackend
) -> None:
    session = new_session()
    sandbox_id = ensure(backend, session)
    assert ensure(backend, session) == sandbox_id
    with E2BBackend(**server.sdk_options) as restarted:
        assert ensure(restarted, session) == sandbox_id
    assert ensure(backend) != sandbox_id
    record = server.truth().sandbox(sandbox_id)
    assert record.metadata["sandrail_owner"] == "o1"
    assert record.idempotency_key is not None


def test_inspect_creates_nothing(server: LocalE2B, backend: E2BBackend) -> None:
    session = new_session()
    before = len(server.truth().sandboxes)
    state = run(backend(Inspect(session_id=session, owner_key="o1")))
    assert state == inspect_answer(E2BBackend, None, "absent", isolated=True)
    assert len(server.truth().sandboxes) == before
    sandbox_id = ensure(backend, session)
    with E2BBackend(**server.sdk_options) as other:
        state = run(other(Inspect(session_id=session, owner_key="o1")))
    assert state == inspect_answer(E2BBackend, sandbox_id, "ready", isolated=True)


def test_lifetime_is_refreshed_and_deadlines_capped_below_it(server: LocalE2B) -> None:
    with E2BBackend(**server.sdk_options, sandbox_timeout_seconds=600) as backend:
        session = new_session()
        sandbox_id = ensure(backend, session)
        assert server.truth().sandbox(sandbox_id).timeout_seconds == 600
        assert backend.max_command_seconds == 600 - 150 - 60
        start(backend, sandbox_id, "true", timeout_seconds=86_400)
        deadline = as_root(server, sandbox_id, f"cat {LEDGER}/tasks/{TASK}/timeout")
        assert deadline == str(backend.max_command_seconds)

        def refreshes() -> int:
            return sum(
                1
                for r in server.truth().requests
                if r.route == Route.SET_TIMEOUT and r.sandbox_id == sandbox_id
            )

        assert refreshes() == 0
        backend._sandboxes[sandbox_id].refreshed_at -= 1_000  # as if 1000 s passed
        ensure(backend, session)
        assert refreshes() == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sandbox_timeout_seconds": 10}, "sandbox_timeout_seconds"),
        ({"request_timeout_seconds": 0}, "request_timeout_seconds"),
        ({"ledger_key": "short"}, "ledger_key"),
        ({"api_url": " "}, "api_url"),
        ({"template": ""}, "template"),
    ],
)
def test_bad_settings_are_refused_at_once(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        E2BBackend(**options)


def test_c5_without_any_key_the_backend_is_refused_at_construction(
    server: LocalE2B, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No API key anywhere: a configuration error, said at once, never a
    call answered "the sandbox could not be reached; the call may be
    retried" (a retry loop would retry it forever)."""
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    with pytest.raises(ValueError, match="E2BBackend needs an E2B API key"):
        E2BBackend(api_url=server.api_url, sandbox_url=server.sandbox_url)
    monkeypatch.setenv("E2B_API_KEY", "  ")
    with pytest.raises(ValueError, match=r"pass api_key=\.\.\. or set E2B_API_KEY"):
        E2BBackend()


def test_a_key_unset_after_construction_still_refuses_a_start_before_sending(
    server: LocalE2B, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2B_API_KEY", server.api_key)
    keyless = E2BBackend(api_url=server.api_url, sandbox_url=server.sandbox_url)
    monkeypatch.delenv("E2B_API_KEY")
    with keyless:
        failed = failure(keyless(Start(**start_fields("sbx-none", "true"))))
    assert failed.delivery is Delivery.NOT_SENT
    assert "ledger key" in failed.detail


# ---------------------------------------------------------------------------
# Who runs what, and where


def test_the_command_runs_as_user_in_home_as_e2b_commands_do(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    probe = 'id -un; id -u; pwd; echo "$HOME $USER $LOGNAME"; shopt -q login_shell && echo login'
    chunk = finished(backend, sandbox_id, probe)
    bare = e2b.Sandbox.connect(sandbox_id, **server.sdk_options).commands.run(probe)
    assert chunk.stdout == bare.stdout
    assert chunk.stdout.splitlines()[0] == "user"
    assert chunk.stdout.splitlines()[1] != "0"
    assert chunk.stdout.splitlines()[2:] == ["/home/user", "/home/user user user", "login"]


def test_c17_the_ledger_is_root_only_and_out_of_reach_of_user_commands(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    finished(backend, sandbox_id, "true", env={"TOKEN": "s3cr3t-for-ledger"})
    assert backend.separated(sandbox_id) is True
    listing = as_root(server, sandbox_id, f"stat -c '%U %a %n' /root {LEDGER} {LEDGER}/*")
    for line in listing.splitlines():
        owner, mode, _ = line.split(" ", 2)
        assert owner == "root"
        assert mode in ("700", "600"), line
    seen = as_user(server, sandbox_id, f"ls {LEDGER}; cat {LEDGER}/tasks/{TASK}/digest")
    assert "Permission denied" in seen
    assert "s3cr3t" not in seen


# ---------------------------------------------------------------------------
# Launches (C16)


HOSTILE = [
    'it\'s "quoted"',
    "$(touch pwned) `touch pwned` ${HOME}",
    "line one\nline two\n\n",
    "ünïcødé ✓ 🎉",
    "x" * 100_000,
    "-n",
    "; rm -rf / #",
]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_c16_hostile_env_values_arrive_exactly(
    server: LocalE2B, backend: E2BBackend, value: str
) -> None:
    sandbox_id = ensure(backend)
    chunk = finished(backend, sandbox_id, 'printf %s "$V"', env={"V": value})
    assert chunk.stdout == value
    assert (chunk.state.status, chunk.state.exit_code) == ("exited", 0)
    assert "pwned" not in as_root(server, sandbox_id, "ls -A /home/user /root /tmp")


@pytest.mark.parametrize("value", HOSTILE[:4], ids=range(4))
def test_c16_hostile_cwd_is_entered_exactly(
    server: LocalE2B, backend: E2BBackend, value: str
) -> None:
    sandbox_id = ensure(backend)
    folder = "/home/user/" + value.replace("\n", "_nl_")
    e2b.Sandbox.connect(sandbox_id, **server.sdk_options).files.make_dir(folder)
    chunk = finished(backend, sandbox_id, "pwd", cwd=folder)
    assert chunk.stdout == f"{folder}\n"


def test_a_relative_cwd_is_taken_from_home_as_e2b_does(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    e2b.Sandbox.connect(sandbox_id, **server.sdk_options).files.make_dir("/home/user/work")
    assert finished(backend, sandbox_id, "pwd", cwd="work").stdout == "/home/user/work\n"


def test_c7_a_missing_or_forbidden_cwd_is_refused_at_the_start_not_run(
    backend: E2BBackend, sandbox_id: str
) -> None:
    """The command never began, so the start says so (an error, not ``ok``
    with the launcher's failed ``cd``); more in test_e2b_launcher_integrity."""
    refused = start(backend, sandbox_id, "pwd", cwd="/no/such/dir")
    assert refused == NOT_STARTED_REFUSAL
    # The cwd is entered as user: root's home is closed to it.
    assert start(backend, sandbox_id, "pwd", cwd="/root", task_id=OTHER) == NOT_STARTED_REFUSAL


@pytest.mark.parametrize(
    "command",
    [
        "echo \"it's\" '$(x)' `echo tick` $((6*7))",
        "printf 'a\\nb'\necho c",
        "echo ünïcødé ✓",
        "echo $0; echo err >&2; exit 3",
        "if; then",
    ],
    ids=range(5),
)
def test_c16_hostile_commands_run_as_e2b_commands_run_would(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str, command: str
) -> None:
    chunk = finished(backend, sandbox_id, command)
    bare = e2b.Sandbox.connect(sandbox_id, **server.sdk_options)
    try:
        result: Any = bare.commands.run(command)
    except e2b.CommandExitException as exc:
        result = exc
    assert (chunk.stdout, chunk.stderr) == (result.stdout, result.stderr)
    assert chunk.state.exit_code == result.exit_code


def test_c16_a_command_too_long_for_one_argument_still_runs(
    backend: E2BBackend, sandbox_id: str
) -> None:
    command = "x=" + "y" * 150_000 + "; echo ${#x}"
    chunk = finished(backend, sandbox_id, command)
    assert (chunk.stdout, chunk.stderr) == ("150000\n", "")


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"env": {"BAD-NAME": "v"}}, "not a shell identifier"),
        ({"env": {"": "v"}}, "not a shell identifier"),
        ({"env": {"V": "a\0b"}}, "NUL"),
        ({"command": "echo a\0b"}, "NUL"),
        ({"env": {"V": "x" * 140_000}}, "too long"),
        ({"cwd": "/tmp\0x"}, "NUL"),
        ({"task_id": "../../etc"}, "malformed"),
    ],
)
def test_values_bash_cannot_carry_are_refused_before_sending(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str, fields: dict[str, Any], detail: str
) -> None:
    start(backend, sandbox_id, "true", task_id=OTHER)  # the launcher is installed
    calls = len(server.truth().requests)
    failed = failure(backend(Start(**(start_fields(sandbox_id, "true") | fields))))
    assert failed.delivery is Delivery.NOT_SENT
    assert detail in failed.detail
    assert "a\0b" not in failed.detail
    assert len(server.truth().requests) == calls


def test_c17_env_values_never_travel_in_shell_text_and_leave_no_file(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    secret = "s3cr3t-value"
    chunk = finished(backend, sandbox_id, 'printf %s "$TOKEN" | wc -c', env={"TOKEN": secret})
    assert chunk.stdout.strip() == str(len(secret))
    for record in server.truth().processes_in(sandbox_id):
        assert secret not in " ".join(record.argv)
    left = as_root(server, sandbox_id, f"grep -rl {secret} {LEDGER} /tmp /home/user; true")
    assert left == ""


def test_c17_the_env_file_is_gone_even_when_cwd_or_path_break_the_start(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    secret = "s3cr3t-value-for-cleanup"
    missing = start(backend, sandbox_id, "true", env={"TOKEN": secret}, cwd="/no/such/dir")
    assert missing == NOT_STARTED_REFUSAL
    no_path = finished(
        backend, sandbox_id, "echo hi", env={"TOKEN": secret, "PATH": "/nowhere"}, task_id=OTHER
    )
    assert no_path.stdout == "hi\n"
    assert as_root(server, sandbox_id, f"grep -rl {secret} {LEDGER}; true") == ""


def test_c2_two_backends_starting_one_task_at_once_launch_once(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    start(backend, sandbox_id, "true", task_id=OTHER)  # installed: the race is the claim
    mark = f"two-backends-{sandbox_id}"
    with E2BBackend(**server.sdk_options) as second:

        async def both() -> list[Any]:
            effect = Start(**start_fields(sandbox_id, server.mark(mark)))
            return list(await asyncio.gather(backend(effect), second(effect)))

        outcomes = run(both())
    assert sorted(o.first_launch for o in outcomes) == [False, True]
    wait(backend, sandbox_id)
    assert server.truth().marked(mark) == 1


def test_c2_a_restarted_harness_finds_the_claim(server: LocalE2B, backend: E2BBackend) -> None:
    session = new_session()
    sandbox_id = ensure(backend, session)
    assert isinstance(start(backend, sandbox_id, "echo once"), Started)
    with E2BBackend(**server.sdk_options) as restarted:
        assert ensure(restarted, session) == sandbox_id
        again = start(restarted, sandbox_id, "echo once")
        assert isinstance(again, Started)
        assert not again.first_launch
        assert wait(restarted, sandbox_id).status == "exited"
        assert read(restarted, sandbox_id).stdout == "once\n"


def test_c3_same_task_other_digest_is_a_conflict(backend: E2BBackend, sandbox_id: str) -> None:
    start(backend, sandbox_id, "true")
    assert start(backend, sandbox_id, "true", request_digest="d2") == StartRefused(
        reason="conflict"
    )


def test_c3_another_ledger_key_sees_a_conflict_not_a_retry(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    start(backend, sandbox_id, "true")
    with E2BBackend(**server.sdk_options, ledger_key="another key, 16+ chars") as other:
        assert start(other, sandbox_id, "true") == StartRefused(reason="conflict")


def test_c10_a_stale_fence_never_runs(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    assert isinstance(start(backend, sandbox_id, "true", fence=5), Started)
    mark = f"stale-{sandbox_id}"
    refused = start(backend, sandbox_id, server.mark(mark), task_id=OTHER, fence=3)
    assert refused == StartRefused(reason="stale_fence")
    assert isinstance(start(backend, sandbox_id, "true", task_id="c" * 64, fence=5), Started)
    assert isinstance(start(backend, sandbox_id, "true", task_id="d" * 64), Started)
    assert server.truth().marked(mark) == 0
    assert as_root(server, sandbox_id, f"ls {LEDGER}/tasks").split() == sorted(
        [TASK, "c" * 64, "d" * 64]
    )


# ---------------------------------------------------------------------------
# Stop and deadlines (C18), under envd's own signal scope


def test_c18_stop_kills_children_and_grandchildren(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    command = (
        "sleep 300 & echo $! >> pids; "
        "bash -c 'sleep 300 & echo $! >> pids; wait' & echo $! >> pids; "
        "trap '' TERM; sleep 300"
    )
    start(backend, sandbox_id, command)

    def pids() -> list[int]:
        return [int(p) for p in as_root(server, sandbox_id, "cat /home/user/pids").split()]

    assert _eventually(lambda: len(pids()) == 3)
    assert all(_alive(pid) for pid in pids())
    cancelled = run(backend(Cancel(sandbox_id=sandbox_id, task_id=TASK)))
    assert cancelled == CancelRequested(
        state=CommandState(status="canceled", exit_code=143, stdout_bytes=0, stderr_bytes=0)
    )
    assert _eventually(lambda: not any(_alive(pid) for pid in pids()))


def test_c18_stop_ends_processes_that_left_the_group_but_not_the_session(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    command = (
        "python3 -c 'import subprocess, time; "
        'p = subprocess.Popen(["sleep", "300"], process_group=0); '
        'open("pids", "w").write(str(p.pid)); time.sleep(300)\''
    )
    start(backend, sandbox_id, command)
    assert _eventually(lambda: as_root(server, sandbox_id, "cat /home/user/pids") != "")
    pid = int(as_root(server, sandbox_id, "cat /home/user/pids"))
    assert _alive(pid)
    run(backend(Cancel(sandbox_id=sandbox_id, task_id=TASK)))
    assert _eventually(lambda: not _alive(pid))


def test_c18_a_stop_right_after_start_never_lets_the_command_finish(
    backend: E2BBackend, sandbox_id: str
) -> None:
    big = {f"V{i}": "x" * 60_000 for i in range(8)}  # a slow env load widens the race
    for round_ in range(3):
        task = f"{round_:064x}"
        start(backend, sandbox_id, "sleep 1; echo ran", task_id=task, env=big)
        run(backend(Cancel(sandbox_id=sandbox_id, task_id=task)))
        state = wait(backend, sandbox_id, task)
        assert (state.status, state.exit_code) == ("canceled", 143)
        assert read(backend, sandbox_id, task).stdout == ""


def test_cancel_of_an_unknown_or_ended_task_changes_nothing(
    backend: E2BBackend, sandbox_id: str
) -> None:
    unknown = run(backend(Cancel(sandbox_id=sandbox_id, task_id=OTHER)))
    assert unknown == CancelRequested(state=CommandState(status="unknown"))
    finished(backend, sandbox_id, "echo done")
    ended = run(backend(Cancel(sandbox_id=sandbox_id, task_id=TASK)))
    assert isinstance(ended, CancelRequested)
    assert ended.state.status == "exited"


def test_the_deadline_ends_the_command_in_the_sandbox_without_the_harness(
    server: LocalE2B,
) -> None:
    with E2BBackend(**server.sdk_options) as gone:
        sandbox_id = ensure(gone)
        start(gone, sandbox_id, "echo $$ > pid; exec sleep 300", timeout_seconds=1)
    # The harness is gone: nobody waits.
    exit_file = f"{LEDGER}/tasks/{TASK}/exit"

    def record() -> str:
        return as_root(server, sandbox_id, f"cat {exit_file}")

    # The record: status and code, then (a moment later) the streams' sizes.
    assert _eventually(lambda: len(record().split()) == 4, seconds=8)
    assert record() == "timed_out 124 0 0\n"
    pid = int(as_root(server, sandbox_id, "cat /home/user/pid"))
    assert _eventually(lambda: not _alive(pid))
    with E2BBackend(**server.sdk_options) as later:
        assert wait(later, sandbox_id, seconds=0) == CommandState(
            status="timed_out", exit_code=124, stdout_bytes=0, stderr_bytes=0
        )


def test_wait_returns_when_the_command_ends_not_at_its_timeout(
    backend: E2BBackend, sandbox_id: str
) -> None:
    start(backend, sandbox_id, "sleep 0.3; exit 7")
    began = time.monotonic()
    state = wait(backend, sandbox_id, seconds=60)
    assert time.monotonic() - began < 30
    assert (state.status, state.exit_code) == ("exited", 7)


def test_wait_on_a_running_command_times_out_running(backend: E2BBackend, sandbox_id: str) -> None:
    start(backend, sandbox_id, "sleep 300")
    assert wait(backend, sandbox_id, seconds=0.2).status == "running"
    assert wait(backend, sandbox_id, task=OTHER, seconds=5) == CommandState(status="unknown")


# ---------------------------------------------------------------------------
# Reads


def test_big_output_is_read_by_cursor(backend: E2BBackend, sandbox_id: str) -> None:
    line = "héllo wörld ✓ 🎉\n"
    count = 150_000  # about 3.4 MB
    start(backend, sandbox_id, f"yes '{line.strip()}' | head -n {count}")
    assert wait(backend, sandbox_id).status == "exited"
    expected = (line * count).encode()
    cursor, parts, reads = 0, [], 0
    while True:
        chunk = read(backend, sandbox_id, out=cursor, max_bytes=1_000_003)
        reads += 1
        encoded = chunk.stdout.encode()
        assert len(encoded) <= 1_000_003
        assert expected[cursor : chunk.next_stdout_cursor] == encoded
        parts.append(chunk.stdout)
        cursor = chunk.next_stdout_cursor
        if not chunk.more:
            break
    assert "".join(parts).encode() == expected
    assert chunk.state.stdout_bytes == len(expected)
    assert reads == -(-len(expected) // 1_000_003)


def test_reads_never_split_utf8_and_reread_the_same(backend: E2BBackend, sandbox_id: str) -> None:
    start(backend, sandbox_id, "printf 'aé🎉b'; printf 'ü' >&2")
    wait(backend, sandbox_id)
    first = read(backend, sandbox_id, max_bytes=4)
    assert (first.stdout, first.next_stdout_cursor) == ("aé", 3)
    assert (first.stderr, first.next_stderr_cursor) == ("ü", 2)
    second = read(backend, sandbox_id, out=3, err=2, max_bytes=4)
    assert (second.stdout, second.next_stdout_cursor, second.more) == ("🎉", 7, True)
    inside = read(backend, sandbox_id, out=2, err=2, max_bytes=4)
    assert inside.stdout == "🎉"  # a cursor inside a character moves to the next one
    past = read(backend, sandbox_id, out=99, err=99, max_bytes=4)
    assert (past.stdout, past.next_stdout_cursor, past.more) == ("", 99, False)
    assert read(backend, sandbox_id, out=3, err=2, max_bytes=4) == second


def test_c17_bytes_that_are_not_utf8_read_back_exactly(
    backend: E2BBackend, sandbox_id: str
) -> None:
    chunk = finished(backend, sandbox_id, r"printf 'a\377b\300'")
    assert chunk.stdout.encode("utf-8", "surrogateescape") == b"a\xffb\xc0"


@pytest.mark.parametrize(
    "printed",
    [b"", b"plain\r\n\ttext\x7f\n", b"a" * 16_384, b"a" * 16_385, b"a\0b", "é ✓".encode()],
    ids=["empty", "ascii", "16k-ascii", "over-16k", "nul", "utf8"],
)
def test_whole_streams_come_back_exactly_as_text_or_base64(
    backend: E2BBackend, sandbox_id: str, printed: bytes
) -> None:
    """Short plain ASCII streams are answered as text with no process; the
    rest as base64. Both give the exact bytes, on both streams."""
    octal = "".join(f"\\{byte:03o}" for byte in printed)
    chunk = finished(backend, sandbox_id, f"printf '{octal}'; printf '{octal}' >&2")
    for text in (chunk.stdout, chunk.stderr):
        assert text.encode("utf-8", "surrogateescape") == printed
    assert (chunk.state.stdout_bytes, chunk.state.stderr_bytes) == (len(printed), len(printed))


def test_a_read_of_a_running_command_sees_output_so_far(
    backend: E2BBackend, sandbox_id: str
) -> None:
    start(backend, sandbox_id, "echo early; sleep 300")
    assert _eventually(lambda: read(backend, sandbox_id).stdout == "early\n")
    chunk = read(backend, sandbox_id)
    assert (chunk.state.status, chunk.state.exit_code) == ("running", None)


# ---------------------------------------------------------------------------
# Snippets


def test_c16_publish_writes_0440_for_user_to_read_and_refuses_other_source(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    """Private to ``user`` as 0600 was, and not writable by it (C16):
    root's, read through ``user``'s group."""
    path = f"/tmp/sandrail/code/{TASK}.sh"
    source = "echo \"$(printf 'from a file')\"\n"
    published = run(backend(Publish(sandbox_id=sandbox_id, task_id=TASK, path=path, source=source)))
    assert published == Published(path=path)
    assert as_root(server, sandbox_id, f"stat -c '%U %G %a' {path} /tmp/sandrail/code").split(
        "\n"
    ) == ["root user 440", "root root 711", ""]
    again = run(backend(Publish(sandbox_id=sandbox_id, task_id=TASK, path=path, source=source)))
    assert again == Published(path=path)
    other = run(backend(Publish(sandbox_id=sandbox_id, task_id=TASK, path=path, source="x")))
    assert other == StartRefused(reason="publish_conflict")
    assert finished(backend, sandbox_id, f"bash {path}").stdout == "from a file\n"
    outside = failure(
        backend(Publish(sandbox_id=sandbox_id, task_id=TASK, path="/etc/passwd", source="x"))
    )
    assert outside.delivery is Delivery.NOT_SENT


def test_c16_a_squatted_snippet_directory_is_moved_aside(
    server: LocalE2B, backend: E2BBackend, sandbox_id: str
) -> None:
    as_user(server, sandbox_id, "mkdir -p /tmp/sandrail/code && ln -s /etc /tmp/sandrail/code/x")
    path = f"/tmp/sandrail/code/{TASK}.sh"
    published = run(backend(Publish(sandbox_id=sandbox_id, task_id=TASK, path=path, source="true")))
    assert published == Published(path=path)
    assert as_root(server, sandbox_id, "stat -c %U /tmp/sandrail /tmp/sandrail/code").split() == [
        "root",
        "root",
    ]


# ---------------------------------------------------------------------------
# Round trips, counted at the server


def _trips(server: LocalE2B, sandbox_id: str) -> int:
    return sum(1 for r in server.truth().requests if r.sandbox_id == sandbox_id)


def test_round_trips_per_foreground_run_and_per_read(server: LocalE2B, backend: E2BBackend) -> None:
    session = new_session()
    port = port_on(backend, session)
    cold = port.execute_sync(request(port, "run_command", "op-1", command="echo warm-up"))
    assert cold.status == "ok", cold.content
    sandbox_id = cold.content["sandbox_id"]
    before = _trips(server, sandbox_id)
    result = port.execute_sync(request(port, "run_command", "op-2", command="echo hi"))
    assert (result.status, result.content["stdout"]) == ("ok", "hi\n")
    routes = [r.route for r in server.truth().requests if r.sandbox_id == sandbox_id][before:]
    assert routes == [Route.WRITE_FILE, Route.START, Route.START]

    started = port.execute_sync(
        request(port, "run_command", "op-3", command="echo bg", background=True)
    )
    task = started.content["task_id"]
    before = _trips(server, sandbox_id)
    output = port.execute_sync(request(port, "read_command_output", "op-4", task_id=task))
    assert output.status == "ok"
    assert _trips(server, sandbox_id) - before == 1


def test_c12_a_big_foreground_output_moves_only_its_two_ends_out_of_the_sandbox(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """No artifact store: 4 MiB printed, the budget's head and tail read by
    byte ranges (the omitted count from the sizes the wait reported), so at
    most twice the budget leaves the sandbox (every byte the server sent for
    the call's envd requests: status lines, headers, bodies). The figure
    itself (about 1.4-1.7x the budget) is the benchmark's to report: how
    envd frames a read's stream into events varies with the machine's load
    (a read of the same range measured 16.5 KB and 22 KB), so the test
    bounds it at 2.5x, far below the 175x a whole read would move."""
    budget, size = 24_000, 4 * 1024 * 1024
    port = port_on(backend, new_session(), max_output_bytes=budget)
    warm = port.execute_sync(request(port, "run_command", "op-1", command="true"))
    sandbox_id = warm.content["sandbox_id"]
    since = len(server.truth().requests)
    result = port.execute_sync(
        request(port, "run_command", "op-2", command=f"yes 'compiled unit' | head -c {size}")
    )
    assert result.status == "ok", result.content
    assert result.content["stdout_bytes"] == size
    printed = ("compiled unit\n" * (size // 14 + 1))[:size]
    assert result.content["stdout"].startswith(printed[:1000])
    assert result.content["stdout"].endswith(printed[-1000:])
    assert len(sandrail.canonical_json(result.content)) <= budget

    def mine() -> list[Any]:
        return [
            r
            for r in server.truth().requests[since:]
            if r.sandbox_id == sandbox_id and r.listener == "envd"
        ]

    assert _eventually(lambda: all(r.sent_bytes for r in mine()))
    assert sum(r.sent_bytes for r in mine()) <= 2.5 * budget


def test_c15_a_big_output_streams_to_the_artifact_store_through_the_sdk(
    server: LocalE2B, backend: E2BBackend, tmp_path: Path
) -> None:
    """With an artifact store, 3 MiB printed reach the store
    whole, byte for byte, in reads of at most a page (1 MiB), never read
    whole by the core; the result shows the same two ends as without a
    store, and names the artifact."""
    size = 3 * 1024 * 1024 + 17
    store = sandrail.DirectoryArtifactStore(tmp_path)
    port = port_on(backend, new_session(), max_output_bytes=24_000, artifacts=store)
    warm = port.execute_sync(request(port, "run_command", "op-0", command="true"))
    sandbox_id = warm.content["sandbox_id"]
    since = len(server.truth().requests)
    result = port.execute_sync(
        request(
            port,
            "run_command",
            "op-1",
            command=f"yes 'stream unit é' | head -c {size}; echo warn >&2",
        )
    )
    assert result.status == "ok", result.content
    (ref,) = result.artifact_refs
    artifact = json.loads(store.read(ref.uri))
    printed = ("stream unit é\n".encode() * (size // 15 + 1))[:size]
    assert artifact["stdout"] == printed.decode("utf-8", "replace")
    assert (artifact["stderr"], artifact["stdout_bytes"]) == ("warn\n", size)
    assert "retention_limited" not in artifact
    assert len(sandrail.canonical_json(result.content)) <= 24_000
    assert result.content["output_budget"]["artifact_uri"] == ref.uri
    assert [path.name for path in tmp_path.iterdir()] == [
        f"{ref.uri[len('artifact://') :]}.artifact"
    ]
    sent = [
        r
        for r in server.truth().requests[since:]
        if r.sandbox_id == sandbox_id and r.listener == "envd"
    ]
    assert _eventually(lambda: all(r.sent_bytes for r in sent))
    moved = sum(r.sent_bytes for r in sent)
    assert size <= moved <= 2.5 * size  # all of it came out, once (base64 on the wire)
    assert max(r.sent_bytes for r in sent) <= 2.5 * 1024 * 1024  # a page a request


def test_the_command_line_example_works_through_the_port(backend: E2BBackend) -> None:
    port = port_on(backend, new_session())
    result = port.execute_sync(request(port, "run_command", "op-1", command="echo hi >&2; exit 4"))
    assert result.status == "ok"
    assert (result.content["stderr"], result.content["exit_code"]) == ("hi\n", 4)


# ---------------------------------------------------------------------------
# Threads, event loops and closing


def test_c2_one_port_from_eight_threads_makes_one_sandbox_and_launches_once(
    server: LocalE2B,
) -> None:
    """And decisively: the duplicates that find no claim yet carry the
    first one's claim epoch (its record), so every call says ``ok`` (8
    threads x 15 trials: 120 ok, 15 launches)."""
    session = new_session()
    mark = f"threads-{session}"
    sandboxes_before = len(server.truth().sandboxes)
    with E2BBackend(**server.sdk_options) as shared:
        port = port_on(shared, session)
        barrier = threading.Barrier(8)
        results: list[sandrail.ToolResult] = []

        def call(n: int) -> None:
            made = request(port, "run_command", "op-1", call_id=f"t{n}", command=server.mark(mark))
            barrier.wait()
            results.append(port.execute_sync(made))

        workers = [threading.Thread(target=call, args=(n,)) for n in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
    assert len(results) == 8
    assert len(server.truth().sandboxes) - sandboxes_before == 1
    assert server.truth().marked(mark) == 1
    assert all(r.status == "ok" for r in results), [r.content for r in results]
    assert sum(not r.content["deduplicated"] for r in results) == 1


def test_c2_concurrent_tasks_and_other_loops_share_one_backend(server: LocalE2B) -> None:
    session = new_session()
    mark = f"tasks-{session}"
    with E2BBackend(**server.sdk_options) as shared:
        port = port_on(shared, session)

        async def many() -> list[sandrail.ToolResult]:
            made = [
                request(port, "run_command", "op-1", call_id=f"a{n}", command=server.mark(mark))
                for n in range(6)
            ]
            return list(await asyncio.gather(*(port.execute(r) for r in made)))

        first = asyncio.run(many())
        second = asyncio.run(many())  # another event loop, the same backend
    assert server.truth().marked(mark) == 1
    assert all(r.status in ("ok", "uncertain") for r in first + second)
    assert all(r.status == "ok" and r.content["deduplicated"] for r in second)


def test_close_ends_the_backend_and_later_calls_are_not_sent(server: LocalE2B) -> None:
    threads = set(threading.enumerate())
    backend = E2BBackend(**server.sdk_options)
    sandbox_id = ensure(backend)
    assert set(threading.enumerate()) - threads  # its loop's thread
    backend.close()
    assert not {t for t in set(threading.enumerate()) - threads if t.name == "sandrail-e2b"}
    backend.close()  # idempotent
    failed = failure(backend(Ensure(session_id=new_session(), owner_key="o1")))
    assert failed.delivery is Delivery.NOT_SENT
    assert "closed" in failed.detail
    assert sandbox_id


def test_closing_during_a_wait_makes_it_maybe_sent(server: LocalE2B) -> None:
    backend = E2BBackend(**server.sdk_options)
    sandbox_id = ensure(backend)
    start(backend, sandbox_id, "sleep 300")

    async def waiting() -> BaseException:
        from sandrail.core._effects import Wait

        task = asyncio.ensure_future(
            backend(Wait(sandbox_id=sandbox_id, task_id=TASK, timeout_seconds=60))
        )
        await asyncio.sleep(0.3)
        await backend.aclose()
        try:
            await task
        except BaseException as exc:  # the failure is what the test inspects
            return exc
        raise AssertionError("the wait should fail")

    failed = asyncio.run(waiting())
    assert type(failed).__name__ == "EffectFailure"
    assert "closed" in str(failed)


async def _open_and_close(server: LocalE2B) -> SandboxReady:
    async with E2BBackend(**server.sdk_options) as backend:
        ready = await backend(Ensure(session_id=new_session(), owner_key="o1"))
    assert isinstance(ready, SandboxReady)
    return ready


def test_the_backend_is_an_async_context_manager(server: LocalE2B) -> None:
    assert asyncio.run(_open_and_close(server)).sandbox_id


@pytest.mark.long
def test_the_cli_closes_the_backend_and_exits_1_never_aborting() -> None:
    """With no server to reach, `sandrail run --backend e2b` printed
    the error result and then died with SIGABRT (exit 134) in most runs: a
    transport thread called back into an interpreter shutting down. Six runs
    (each failed before the fix with probability about 0.8)."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    env = {
        **os.environ,
        "E2B_API_KEY": "e2b_" + "0" * 40,
        "E2B_API_URL": f"http://127.0.0.1:{port}",
        "E2B_SANDBOX_URL": f"http://127.0.0.1:{port}",
        "E2B_CONNECTION_RETRIES": "0",
    }
    for _ in range(6):
        done = subprocess.run(
            [sys.executable, "-m", "sandrail", "run", "--backend", "e2b", "--", "true"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1, (done.returncode, done.stderr[-500:])
        assert json.loads(done.stdout)["status"] == "error"


def _cli(server: LocalE2B, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "sandrail", "run", "--backend", "e2b", "--indent", "0", *args],
        env={**os.environ, **server.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, json.loads(done.stdout)


def test_c2_the_command_line_with_a_record_never_relaunches_after_its_sandbox_was_lost(
    server: LocalE2B, tmp_path: Path
) -> None:
    """Every ``sandrail run`` is a harness
    restart; the first invocation ran the command, its sandbox was then
    lost, and a retry with the same key made a new sandbox and launched it
    again. With ``--record FILE`` the retry expects its claim: ``uncertain``
    (exit 3), one launch in all. A record that is not one is a usage error."""
    session, record = new_session(), tmp_path / "owned.sqlite"
    mark = f"cli-{session}"
    common = ["--session", session, "--operation-key", "op-1", "--record", str(record)]
    status, first = _cli(server, *common, "--", server.mark(mark))
    assert (status, first["status"]) == (0, "ok"), first
    e2b.Sandbox.kill(first["content"]["sandbox_id"], **server.sdk_options)
    status, retry = _cli(server, *common, "--", server.mark(mark))
    assert (status, retry["status"]) == (3, "uncertain"), retry
    assert server.truth().marked(mark) == 1
    record.write_text("not json\n")
    done = subprocess.run(
        [sys.executable, "-m", "sandrail", "run", "--record", str(record), "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "not a SQLite database" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("language", "code"),
    [("python", "print(1 + 1)"), ("javascript", "console.log(1 + 1)"), ("bash", "echo $((1 + 1))")],
)
def test_c7_each_snippet_language_runs_in_a_local_e2b_sandbox(
    backend: E2BBackend, language: str, code: str
) -> None:
    """The snippet tool runs ``python``, which E2B's base
    template has and this machine has only as ``python3``; local-e2b's
    sandbox now offers it (a login shell's PATH included), so the tool runs
    on local-e2b as on E2B."""
    port = port_on(backend, new_session(), code=True)
    result = port.execute_sync(
        request(port, "sandbox_run_code", f"op-{language}", code=code, language=language)
    )
    assert result.status == "ok", result.content
    assert (result.content["stdout"], result.content["exit_code"]) == ("2\n", 0), result.content


# ---------------------------------------------------------------------------
# Traces: the SDK's HTTP requests nest under the tool call's span


def test_the_sdks_http_requests_nest_under_the_tool_calls_span(
    server: LocalE2B, backend: E2BBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an HTTP instrumentation on (here: a span around every request
    the e2b SDK's httpx client sends, as opentelemetry-instrumentation-httpx
    makes), each request of a ``run_command`` is a child of the call's span:
    one trace per call, not unrelated root spans."""
    import httpx
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = provider.get_tracer("httpx")
    send = httpx.AsyncClient.send

    async def traced_send(self: httpx.AsyncClient, request: httpx.Request, **kw: Any) -> Any:
        with tracer.start_as_current_span(f"{request.method} {request.url.path}"):
            return await send(self, request, **kw)

    monkeypatch.setattr(httpx.AsyncClient, "send", traced_send)
    port = port_on(backend, new_session(), tracer_provider=provider)
    result = port.execute_sync(request(port, "run_command", "op-traced", command="echo hi"))
    assert result.status == "ok", result.content
    finished = spans.get_finished_spans()
    (call,) = [span for span in finished if span.name == "execute_tool run_command"]
    sent = [span for span in finished if span is not call]
    assert sent, "the SDK sent no request through httpx"
    for span in sent:
        assert span.context.trace_id == call.context.trace_id, span.name
        assert span.parent is not None
        assert span.parent.span_id == call.context.span_id
    provider.shutdown()


# ---------------------------------------------------------------------------
# A sandbox really gone stays gone for its session, across a restart


def _life(server: LocalE2B, session: str, record: Any) -> tuple[E2BBackend, sandrail.ToolPort]:
    backend = E2BBackend(**server.sdk_options)
    return backend, port_on(backend, session, record=record)


@pytest.fixture
def owned(tmp_path: Path) -> Any:
    """A durable ownership record of the test's own (SQLite)."""
    from sandrail.records import SQLiteRecord

    record = SQLiteRecord(tmp_path / "owned.sqlite")
    yield record
    record.close()


def _ran_once(server: LocalE2B, session: str, record: Any) -> sandrail.ToolResult:
    """A first life that launched ``op-1`` (``true``) and ended."""
    backend, port = _life(server, session, record)
    with backend:
        ran = port.execute_sync(request(port, "run_command", "op-1", command="true"))
    assert ran.status == "ok", ran.content
    return ran


def test_c2_after_a_restart_a_session_whose_sandbox_is_gone_gets_no_second_sandbox(
    server: LocalE2B, owned: Any
) -> None:
    """Within one process a gone sandbox stays gone for its session (new
    calls ``error``, retries ``uncertain``); a restarted harness with a
    durable record keeps that promise too: no second sandbox, in which a
    retry could relaunch what ran in the first."""
    session = new_session()
    sandbox_id = _ran_once(server, session, owned).content["sandbox_id"]
    e2b.Sandbox.kill(sandbox_id, **server.sdk_options)
    made = {box.sandbox_id for box in server.truth().sandboxes}
    backend, port = _life(server, session, owned)  # the restart
    with backend:
        new = port.execute_sync(request(port, "run_command", "op-2", command="true"))
        retry = port.execute_sync(request(port, "run_command", "op-1", command="true"))
        status = port.execute_sync(request(port, "sandbox_status", "status"))
    assert (new.status, new.content["executed"]) == ("error", False), new.content
    assert retry.status == "uncertain", retry.content
    assert retry.content["sandbox_id"] == sandbox_id
    assert status.content.get("sandbox_id") == sandbox_id, status.content
    assert {box.sandbox_id for box in server.truth().sandboxes} == made  # none was made


def test_c2_a_restarted_harness_finds_its_live_sandbox_through_the_record_too(
    server: LocalE2B, owned: Any
) -> None:
    session = new_session()
    ran = _ran_once(server, session, owned)
    backend, port = _life(server, session, owned)
    with backend:
        again = port.execute_sync(request(port, "run_command", "op-2", command="true"))
    assert again.status == "ok", again.content
    assert again.content["sandbox_id"] == ran.content["sandbox_id"]


def test_c6_reconciling_a_task_whose_sandbox_is_gone_says_so(server: LocalE2B, owned: Any) -> None:
    """``sandrail uncertain --reconcile`` after a lost sandbox: the task stays
    uncertain with the reason the docs promise, "the sandbox is gone", not
    the read's ``e2b_command_read_failed``."""
    from sandrail.records import reconcile

    session = new_session()
    ran = _ran_once(server, session, owned)
    e2b.Sandbox.kill(ran.content["sandbox_id"], **server.sdk_options)
    backend, port = _life(server, session, owned)
    with backend:
        retry = port.execute_sync(request(port, "run_command", "op-1", command="true"))
    assert retry.status == "uncertain", retry.content
    with E2BBackend(**server.sdk_options) as operator:
        (found,) = reconcile(owned, operator)
    assert (found.verdict, found.reason) == ("still_uncertain", "the sandbox is gone")


def test_c5_a_command_that_never_began_is_never_launched_after_a_restart(
    server: LocalE2B, owned: Any
) -> None:
    """A start whose cwd does not exist is ``e2b_command_not_started``; after
    a harness restart with the durable record, its retry is answered the same
    from the sandbox's ledger, never a launch."""
    session = new_session()
    backend, port = _life(server, session, owned)
    missing = "/home/user/no-such-dir"
    with backend:
        first = port.execute_sync(request(port, "run_command", "op-1", command="true", cwd=missing))
    assert first.content["error_type"] == "e2b_command_not_started", first.content
    backend, port = _life(server, session, owned)  # the restart
    with backend:
        retry = port.execute_sync(request(port, "run_command", "op-1", command="true", cwd=missing))
    # The sandbox's ledger keeps the verdict: the restarted harness hears it again.
    assert retry.content["error_type"] == "e2b_command_not_started", retry.content
    assert retry.content["executed"] is False


def test_c5_a_rejected_api_key_is_a_refusal_no_retry_gets_past(server: LocalE2B) -> None:
    """E2B answers 401 to a key it does not know: nothing ran, and the call
    says the provider refused the request (``e2b_backend_refused``), never
    "could not be reached, a retry is safe", which a retry loop would take
    for a network blip forever."""
    made = len(server.truth().sandboxes)
    with E2BBackend(**{**server.sdk_options, "api_key": "e2b_" + "0" * 40}) as rejected:
        port = port_on(rejected, new_session())
        for key in ("op-1", "op-1", "op-2"):  # its retry, and a new call
            answer = port.execute_sync(request(port, "run_command", key, command="echo hi"))
            assert answer.content["error_type"] == "e2b_backend_refused", answer.content
            assert answer.content["executed"] is False
    assert len(server.truth().sandboxes) == made  # none was made
