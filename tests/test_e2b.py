"""The E2B interpreter against the local stand-in (real bash, no cloud).

Every test runs real processes through :mod:`tests.e2b_standin`; none reach
E2B. Contract lines are named in the test names (C2, C3, C10, C16-C18).
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import os
import socket
import subprocess
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import e2b
import httpx
import pytest
from e2b.exceptions import (
    SandboxNotRunningException,
    SandboxUnreachableException,
    ServiceBusyException,
)
from e2b.sandbox_async.commands.command import Commands
from e2b.sandbox_async.filesystem.filesystem import Filesystem

import sandrail
from sandrail.core._effects import (
    Cancel,
    CancelRequested,
    CommandState,
    Delivery,
    EffectFailure,
    Ensure,
    Inspect,
    OutputChunk,
    Publish,
    Published,
    Read,
    SandboxReady,
    SandboxState,
    Start,
    Started,
    StartRefused,
    Wait,
)
from sandrail.interpreters.e2b import FAILURE_TABLE, E2BBackend, classify_failure
from tests.e2b_standin import Fault, StandInSDK, _Commands, _Files, _Paginator

T = TypeVar("T")
TASK = "a" * 64
OTHER = "b" * 64


def run(awaitable: Awaitable[T]) -> T:
    async def main() -> T:
        return await awaitable

    return asyncio.run(main())


@pytest.fixture
def sdk() -> Iterator[StandInSDK]:
    standin = StandInSDK()
    try:
        yield standin
    finally:
        standin.close()


@pytest.fixture
def backend(sdk: StandInSDK) -> E2BBackend:
    return E2BBackend(sdk=sdk)


def ensure(backend: E2BBackend, session: str = "s1") -> str:
    ready = run(backend(Ensure(session_id=session, owner_key="o1")))
    assert isinstance(ready, SandboxReady)
    return ready.sandbox_id


def start(
    backend: E2BBackend,
    sandbox_id: str,
    command: str,
    *,
    task: str = TASK,
    digest: str = "d1",
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    timeout: int = 30,
    fence: int | None = None,
) -> Started | StartRefused:
    outcome = run(
        backend(
            Start(
                sandbox_id=sandbox_id,
                task_id=task,
                request_digest=digest,
                command=command,
                cwd=cwd,
                env=env,
                timeout_seconds=timeout,
                fence=fence,
            )
        )
    )
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


def finished(backend: E2BBackend, sandbox_id: str, command: str, **kwargs: Any) -> OutputChunk:
    outcome = start(backend, sandbox_id, command, **kwargs)
    assert isinstance(outcome, Started)
    wait(backend, sandbox_id, kwargs.get("task", TASK))
    return read(backend, sandbox_id, kwargs.get("task", TASK), max_bytes=1_000_000)


def failure(awaitable: Awaitable[Any]) -> EffectFailure:
    with pytest.raises(EffectFailure) as caught:
        run(awaitable)
    return caught.value


# ---------------------------------------------------------------------------
# The stand-in matches the SDK


@pytest.mark.parametrize(
    ("name", "real"),
    [
        ("AsyncSandbox.create", e2b.AsyncSandbox.create),
        ("AsyncSandbox.connect", e2b.AsyncSandbox._cls_connect_sandbox),
        ("AsyncSandbox.list", e2b.AsyncSandbox.list),
        ("AsyncSandbox.set_timeout", e2b.AsyncSandbox.set_timeout),
        ("commands.run", Commands.run),
        ("files.write_files", Filesystem.write_files),
        ("paginator.next_items", e2b.AsyncSandboxPaginator.next_items),
    ],
)
def test_standin_signatures_match_the_installed_sdk(sdk: StandInSDK, name: str, real: Any) -> None:
    """Every parameter the stand-in accepts (the backend passes nothing else)
    exists in the SDK: positional ones at the same place, the rest by
    keyword or through ``**opts: ApiParams``. An SDK upgrade that renames or
    moves one fails here."""
    owner, _, attribute = name.partition(".")
    holder = {"commands": _Commands, "files": _Files, "paginator": _Paginator}.get(owner)
    mine = inspect.signature(getattr(holder or sdk.AsyncSandbox, attribute))
    theirs = inspect.signature(real)
    their_params = [p for p in theirs.parameters.values() if p.name not in ("self", "cls")]
    my_params = [p for p in mine.parameters.values() if p.name not in ("self", "cls")]
    api_params = set(e2b.ApiParams.__annotations__)
    takes_opts = any(p.kind is p.VAR_KEYWORD for p in their_params)
    by_name = {p.name: p for p in their_params}
    for index, param in enumerate(my_params):
        if param.kind is param.POSITIONAL_OR_KEYWORD:
            assert their_params[index].name == param.name, (name, param.name)
            continue
        assert param.kind is param.KEYWORD_ONLY, (name, param.name)
        if param.name in by_name:
            assert by_name[param.name].kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)
        else:
            assert takes_opts, (name, param.name)
            assert param.name in api_params, (name, param.name)


def test_standin_is_not_a_package_backend() -> None:
    assert importlib.util.find_spec("sandrail.interpreters.e2b_standin") is None
    assert not hasattr(sandrail, "StandInSDK")


# ---------------------------------------------------------------------------
# Failure table: one test per row


def _wrapped(outer: BaseException, cause: BaseException) -> BaseException:
    outer.__cause__ = cause
    return outer


_REQUEST = httpx.Request("GET", "http://sandbox")
_RATE_LIMITED = e2b.RateLimitException("slow down")  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("exc", "delivery", "row"),
    [
        (httpx.ConnectError("refused", request=_REQUEST), Delivery.NOT_SENT, "connect failed"),
        (httpx.ConnectTimeout("slow", request=_REQUEST), Delivery.NOT_SENT, "connect failed"),
        (ConnectionRefusedError(), Delivery.NOT_SENT, "connect failed"),
        (ConnectionError("pyqwest connect"), Delivery.NOT_SENT, "connect failed"),
        (socket.gaierror(), Delivery.NOT_SENT, "connect failed"),
        (
            _wrapped(SandboxUnreachableException("x"), ConnectionRefusedError()),
            Delivery.NOT_SENT,
            "connect failed",
        ),
        (e2b.AuthenticationException("key"), Delivery.NOT_SENT, "refused by E2B"),
        (_RATE_LIMITED, Delivery.NOT_SENT, "refused by E2B"),
        (ServiceBusyException("busy"), Delivery.NOT_SENT, "refused by E2B"),
        (e2b.InvalidArgumentException("bad"), Delivery.NOT_SENT, "refused by E2B"),
        (e2b.TemplateException("old"), Delivery.NOT_SENT, "refused by E2B"),
        (
            e2b.CommandExitException(
                stdout="sandrail-error no-request\n", stderr="", exit_code=3, error=None
            ),
            Delivery.NOT_SENT,
            "launcher refused its arguments",
        ),
        (
            e2b.CommandExitException(stdout="", stderr="", exit_code=127, error=None),
            Delivery.NOT_SENT,
            "launcher missing",
        ),
        (e2b.SandboxNotFoundException("gone"), Delivery.MAYBE_SENT, "sandbox not found"),
        (SandboxNotRunningException("was not found"), Delivery.MAYBE_SENT, "sandbox not found"),
        (e2b.TimeoutException("late"), Delivery.MAYBE_SENT, "timed out"),
        (httpx.ReadTimeout("late", request=_REQUEST), Delivery.MAYBE_SENT, "timed out"),
        (TimeoutError(), Delivery.MAYBE_SENT, "timed out"),
        (ConnectionResetError(), Delivery.MAYBE_SENT, "connection dropped"),
        (BrokenPipeError(), Delivery.MAYBE_SENT, "connection dropped"),
        (httpx.ReadError("reset", request=_REQUEST), Delivery.MAYBE_SENT, "connection dropped"),
        (httpx.RemoteProtocolError("h2 reset"), Delivery.MAYBE_SENT, "connection dropped"),
        (
            e2b.CommandExitException(stdout="", stderr="", exit_code=1, error=None),
            Delivery.MAYBE_SENT,
            "unknown",
        ),
        (RuntimeError("surprise"), Delivery.MAYBE_SENT, "unknown"),
    ],
)
def test_failure_table_row(exc: BaseException, delivery: Delivery, row: str) -> None:
    assert classify_failure(exc) == (delivery, row)


def test_failure_table_rows_are_all_tested() -> None:
    assert {rule.name for rule in FAILURE_TABLE} == {
        "connect failed",
        "refused by E2B",
        "launcher refused its arguments",
        "launcher missing",
        "sandbox not found",
        "timed out",
        "connection dropped",
    }


def test_a_dropped_start_is_not_sent_and_launches_nothing(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    sandbox_id = ensure(backend)
    sdk.faults.append(Fault(method="commands.run", kind="drop", word="start"))
    failed = failure(backend(Start(**_start_fields(sandbox_id, "touch ran"))))
    assert failed.delivery is Delivery.NOT_SENT
    assert not sdk.path(sandbox_id, "/tmp/sandrail/tasks").joinpath(TASK).exists()


def test_a_failed_staging_write_is_not_sent(sdk: StandInSDK, backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    start(backend, sandbox_id, "true", task=OTHER)  # installs the launcher
    sdk.faults.append(Fault(method="files.write_files", kind="timeout"))
    failed = failure(backend(Start(**_start_fields(sandbox_id, "true"))))
    assert failed.delivery is Delivery.NOT_SENT


def test_c2_lost_start_answer_is_maybe_sent_and_retry_finds_the_launch(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    sandbox_id = ensure(backend)
    sdk.faults.append(Fault(method="commands.run", kind="lose", word="start"))
    failed = failure(backend(Start(**_start_fields(sandbox_id, "echo x >> launches"))))
    assert failed.delivery is Delivery.MAYBE_SENT
    retry = start(backend, sandbox_id, "echo x >> launches")
    assert isinstance(retry, Started)
    assert not retry.first_launch
    wait(backend, sandbox_id)
    assert sdk.home(sandbox_id).joinpath("launches").read_text() == "x\n"


def test_sandbox_death_is_maybe_sent_then_ensure_refuses_a_new_sandbox(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    sandbox_id = ensure(backend)
    sdk.faults.append(Fault(method="commands.run", kind="kill", word="start"))
    failed = failure(backend(Start(**_start_fields(sandbox_id, "true"))))
    assert failed.delivery is Delivery.MAYBE_SENT
    again = failure(backend(Ensure(session_id="s1", owner_key="o1")))
    assert again.delivery is Delivery.NOT_SENT
    assert "gone" in again.detail
    state = run(backend(Inspect(session_id="s1", owner_key="o1")))
    assert state == SandboxState(sandbox_id=sandbox_id, phase="closed")


def _start_fields(sandbox_id: str, command: str, **extra: Any) -> dict[str, Any]:
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


# ---------------------------------------------------------------------------
# Sandboxes


def test_ensure_is_idempotent_and_a_lost_create_finds_the_same_sandbox(
    sdk: StandInSDK,
) -> None:
    first = E2BBackend(sdk=sdk)
    sdk.faults.append(Fault(method="create", kind="lose"))
    failed = failure(first(Ensure(session_id="s1", owner_key="o1")))
    assert failed.delivery is Delivery.MAYBE_SENT
    sandbox_id = ensure(first)
    assert ensure(first) == sandbox_id
    assert ensure(E2BBackend(sdk=sdk)) == sandbox_id  # a restarted harness
    assert len(sdk.boxes) == 1
    assert sdk.boxes[sandbox_id].metadata["sandrail_owner"] == "o1"
    assert ensure(first, session="s2") != sandbox_id


def test_inspect_creates_nothing(sdk: StandInSDK, backend: E2BBackend) -> None:
    state = run(backend(Inspect(session_id="s1", owner_key="o1")))
    assert state == SandboxState(sandbox_id=None, phase="absent")
    assert not sdk.boxes
    sandbox_id = ensure(backend)
    state = run(E2BBackend(sdk=sdk)(Inspect(session_id="s1", owner_key="o1")))
    assert state == SandboxState(sandbox_id=sandbox_id, phase="ready")


def test_lifetime_is_refreshed_and_deadlines_capped_below_it(sdk: StandInSDK) -> None:
    backend = E2BBackend(sdk=sdk, sandbox_timeout_seconds=600)
    sandbox_id = ensure(backend)
    assert sdk.boxes[sandbox_id].timeout == 600
    assert backend.max_command_seconds == 600 - 150 - 60
    start(backend, sandbox_id, "true", timeout=86_400)
    deadline = sdk.path(sandbox_id, f"/tmp/sandrail/tasks/{TASK}/timeout").read_text()
    assert deadline == str(backend.max_command_seconds)
    assert sdk.count("set_timeout") == 0
    backend._sandboxes[sandbox_id].refreshed_at -= 1_000  # as if 1000 s passed
    ensure(backend)
    assert sdk.count("set_timeout") == 1


def test_bad_settings_are_refused_at_once() -> None:
    with pytest.raises(ValueError, match="sandbox_timeout_seconds"):
        E2BBackend(sandbox_timeout_seconds=10)
    with pytest.raises(ValueError, match="request_timeout_seconds"):
        E2BBackend(request_timeout_seconds=0)


# ---------------------------------------------------------------------------
# Launches


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
    sdk: StandInSDK, backend: E2BBackend, value: str
) -> None:
    sandbox_id = ensure(backend)
    chunk = finished(backend, sandbox_id, 'printf %s "$V"', env={"V": value})
    assert chunk.stdout == value
    assert chunk.state.status == "exited"
    assert chunk.state.exit_code == 0
    home = sdk.home(sandbox_id)
    assert not (home / "pwned").exists()


@pytest.mark.parametrize("value", HOSTILE[:4], ids=range(4))
def test_c16_hostile_cwd_is_entered_exactly(
    sdk: StandInSDK, backend: E2BBackend, tmp_path: Path, value: str
) -> None:
    sandbox_id = ensure(backend)
    folder = tmp_path / value.replace("\n", "_nl_")
    folder.mkdir()
    chunk = finished(backend, sandbox_id, "pwd", cwd=str(folder))
    assert chunk.stdout == f"{folder}\n"


def test_a_missing_cwd_fails_the_command_not_the_launch(backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    chunk = finished(backend, sandbox_id, "pwd", cwd="/no/such/dir")
    assert chunk.state.status == "exited"
    assert chunk.state.exit_code == 1
    assert "No such file or directory" in chunk.stderr


@pytest.mark.parametrize(
    "command",
    [
        "echo \"it's\" '$(x)' `echo tick` $((6*7))",
        "printf 'a\\nb'\necho c",
        "echo ünïcødé ✓",
        "x=" + "y" * 150_000 + "; echo ${#x}",
    ],
)
def test_c16_hostile_commands_run_as_bash_would(
    sdk: StandInSDK, backend: E2BBackend, command: str
) -> None:
    sandbox_id = ensure(backend)
    chunk = finished(backend, sandbox_id, command)
    home = sdk.home(sandbox_id)
    expected = subprocess.run(
        ["bash"], input=command, capture_output=True, text=True, cwd=home, check=False
    )
    assert (chunk.stdout, chunk.stderr) == (expected.stdout, expected.stderr)


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
    sdk: StandInSDK, backend: E2BBackend, fields: dict[str, Any], detail: str
) -> None:
    sandbox_id = ensure(backend)
    calls = len(sdk.calls)
    failed = failure(backend(Start(**(_start_fields(sandbox_id, "true") | fields))))
    assert failed.delivery is Delivery.NOT_SENT
    assert detail in failed.detail
    assert "a\0b" not in failed.detail
    assert len(sdk.calls) == calls


def test_c17_env_values_never_travel_in_shell_text_and_the_file_is_removed(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    sandbox_id = ensure(backend)
    secret = "s3cr3t-value"
    commands: list[str] = []
    original = sdk._before

    def spy(method: str, box: Any, text: str = "") -> Any:
        commands.append(text)
        return original(method, box, text)

    sdk._before = spy  # type: ignore[method-assign]
    chunk = finished(backend, sandbox_id, 'printf %s "$TOKEN" | wc -c', env={"TOKEN": secret})
    assert chunk.stdout.strip() == str(len(secret))
    assert all(secret not in text for text in commands)
    task = sdk.path(sandbox_id, f"/tmp/sandrail/tasks/{TASK}")
    assert not (task / "env").exists()
    assert all(secret not in path.read_text(errors="replace") for path in task.iterdir())


def test_c2_two_concurrent_starts_launch_once(sdk: StandInSDK, backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    start(backend, sandbox_id, "true", task=OTHER)  # install first: the race is the claim

    async def both() -> tuple[Any, Any]:
        effect = Start(**_start_fields(sandbox_id, "echo x >> launches"))
        return await asyncio.gather(backend(effect), E2BBackend(sdk=sdk)(effect))

    outcomes = run(both())
    assert sorted(o.first_launch for o in outcomes) == [False, True]
    wait(backend, sandbox_id)
    home = sdk.home(sandbox_id)
    assert (home / "launches").read_text() == "x\n"


def test_c2_a_restarted_harness_finds_the_claim(sdk: StandInSDK) -> None:
    first = E2BBackend(sdk=sdk)
    sandbox_id = ensure(first)
    assert isinstance(start(first, sandbox_id, "echo once"), Started)
    restarted = E2BBackend(sdk=sdk)
    assert ensure(restarted) == sandbox_id
    again = start(restarted, sandbox_id, "echo once")
    assert isinstance(again, Started)
    assert not again.first_launch
    assert wait(restarted, sandbox_id).status == "exited"
    assert read(restarted, sandbox_id).stdout == "once\n"


def test_c3_same_task_other_digest_is_a_conflict(backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    start(backend, sandbox_id, "true")
    assert start(backend, sandbox_id, "true", digest="d2") == StartRefused(reason="conflict")


def test_c10_a_stale_fence_never_runs(sdk: StandInSDK, backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    assert isinstance(start(backend, sandbox_id, "true", fence=5), Started)
    refused = start(backend, sandbox_id, "touch stale", task=OTHER, fence=3)
    assert refused == StartRefused(reason="stale_fence")
    assert not sdk.path(sandbox_id, f"/tmp/sandrail/tasks/{OTHER}").exists()
    assert isinstance(start(backend, sandbox_id, "true", task="c" * 64, fence=5), Started)
    assert isinstance(start(backend, sandbox_id, "true", task="d" * 64), Started)


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


def test_c18_stop_kills_children_and_grandchildren(sdk: StandInSDK, backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    command = (
        "sleep 300 & echo $! >> pids; "
        "bash -c 'sleep 300 & echo $! >> pids; wait' & echo $! >> pids; "
        "trap '' TERM; sleep 300"
    )
    start(backend, sandbox_id, command)
    home = sdk.home(sandbox_id)
    assert _eventually(
        lambda: len((home / "pids").read_text().split()) == 3 if (home / "pids").exists() else False
    )
    pids = [int(p) for p in (home / "pids").read_text().split()]
    assert all(_alive(pid) for pid in pids)
    cancelled = run(backend(Cancel(sandbox_id=sandbox_id, task_id=TASK)))
    assert cancelled == CancelRequested(
        state=CommandState(status="canceled", exit_code=143, stdout_bytes=0, stderr_bytes=0)
    )
    assert _eventually(lambda: not any(_alive(pid) for pid in pids))


def test_cancel_of_an_unknown_or_ended_task_changes_nothing(backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    unknown = run(backend(Cancel(sandbox_id=sandbox_id, task_id=OTHER)))
    assert unknown == CancelRequested(state=CommandState(status="unknown"))
    finished(backend, sandbox_id, "echo done")
    ended = run(backend(Cancel(sandbox_id=sandbox_id, task_id=TASK)))
    assert isinstance(ended, CancelRequested)
    assert ended.state.status == "exited"


def test_the_deadline_ends_the_command_in_the_sandbox_without_the_harness(
    sdk: StandInSDK,
) -> None:
    backend = E2BBackend(sdk=sdk)
    sandbox_id = ensure(backend)
    start(backend, sandbox_id, "echo $$ > pid; exec sleep 300", timeout=1)
    del backend  # the harness is gone: nobody waits
    task = sdk.path(sandbox_id, f"/tmp/sandrail/tasks/{TASK}")
    assert _eventually(lambda: (task / "exit").exists(), seconds=8)
    assert (task / "exit").read_text() == "timed_out 124\n"
    pid = int((sdk.home(sandbox_id) / "pid").read_text())
    assert _eventually(lambda: not _alive(pid))
    later = E2BBackend(sdk=sdk)
    assert wait(later, sandbox_id, seconds=0) == CommandState(
        status="timed_out", exit_code=124, stdout_bytes=0, stderr_bytes=0
    )


def test_wait_returns_when_the_command_ends_not_at_its_timeout(backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    start(backend, sandbox_id, "sleep 0.3; exit 7")
    began = time.monotonic()
    state = wait(backend, sandbox_id, seconds=60)
    assert time.monotonic() - began < 30
    assert state.status == "exited"
    assert state.exit_code == 7


def test_wait_on_a_running_command_times_out_running(backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    start(backend, sandbox_id, "sleep 300")
    assert wait(backend, sandbox_id, seconds=0.2).status == "running"
    assert wait(backend, sandbox_id, task=OTHER, seconds=5) == CommandState(status="unknown")


# ---------------------------------------------------------------------------
# Reads


def test_big_output_is_read_by_cursor(sdk: StandInSDK, backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    line = "héllo wörld ✓ 🎉\n"
    count = 400_000  # about 9 MB
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


def test_reads_never_split_utf8_and_reread_the_same(backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
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


def test_a_read_of_a_running_command_sees_output_so_far(backend: E2BBackend) -> None:
    sandbox_id = ensure(backend)
    start(backend, sandbox_id, "echo early; sleep 300")
    assert _eventually(lambda: read(backend, sandbox_id).stdout == "early\n")
    chunk = read(backend, sandbox_id)
    assert chunk.state.status == "running"
    assert chunk.state.exit_code is None


# ---------------------------------------------------------------------------
# Snippets


def test_c16_publish_writes_0600_and_refuses_other_source(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    sandbox_id = ensure(backend)
    path = f"/tmp/sandrail/code/{TASK}.sh"
    source = "echo \"$(printf 'from a file')\"\n"
    published = run(backend(Publish(sandbox_id=sandbox_id, task_id=TASK, path=path, source=source)))
    assert published == Published(path=path)
    host = sdk.path(sandbox_id, path)
    assert host.stat().st_mode & 0o777 == 0o600
    again = run(backend(Publish(sandbox_id=sandbox_id, task_id=TASK, path=path, source=source)))
    assert again == Published(path=path)
    other = run(backend(Publish(sandbox_id=sandbox_id, task_id=TASK, path=path, source="x")))
    assert other == StartRefused(reason="publish_conflict")
    assert finished(backend, sandbox_id, f"bash {path}").stdout == "from a file\n"
    outside = failure(
        backend(Publish(sandbox_id=sandbox_id, task_id=TASK, path="/etc/passwd", source="x"))
    )
    assert outside.delivery is Delivery.NOT_SENT


# ---------------------------------------------------------------------------
# Round trips (numbers for the benchmark)


def _port(backend: E2BBackend) -> sandrail.ToolPort:
    return sandrail.command_tools(
        backend=backend,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )


def _request(
    port: sandrail.ToolPort, tool: str, key: str, **arguments: Any
) -> sandrail.ToolRequest:
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name=tool, call_id=f"call-{key}", arguments=arguments),
        operation_key=key,
        session_id="session-1",
        definition=port.definition(tool),
        identity=sandrail.AgentIdentity(agent_id="agent-1"),
    )


def test_round_trips_per_foreground_run_and_per_read(sdk: StandInSDK, backend: E2BBackend) -> None:
    port = _port(backend)
    cold = port.execute_sync(_request(port, "run_command", "op-1", command="echo warm-up"))
    assert cold.status == "ok", cold.content
    before = len(sdk.calls)
    result = port.execute_sync(_request(port, "run_command", "op-2", command="echo hi"))
    assert result.status == "ok"
    assert result.content["stdout"] == "hi\n"
    foreground = sdk.calls[before:]
    assert foreground == ["files.write_files", "commands.run", "commands.run"]

    started = port.execute_sync(
        _request(port, "run_command", "op-3", command="echo bg", background=True)
    )
    task = started.content["task_id"]
    before = len(sdk.calls)
    output = port.execute_sync(_request(port, "read_command_output", "op-4", task_id=task))
    assert output.status == "ok"
    assert sdk.calls[before:] == ["commands.run"]


def test_the_command_line_example_works_through_the_port(backend: E2BBackend) -> None:
    port = _port(backend)
    result = port.execute_sync(_request(port, "run_command", "op-1", command="echo hi >&2; exit 4"))
    assert result.status == "ok"
    assert (result.content["stderr"], result.content["exit_code"]) == ("hi\n", 4)


def test_c17_the_env_file_is_gone_even_when_cwd_or_path_break_the_start(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    sandbox_id = ensure(backend)
    secret = "s3cr3t-value-for-cleanup"
    missing = finished(backend, sandbox_id, "true", env={"TOKEN": secret}, cwd="/no/such/dir")
    assert missing.state.status == "exited"
    no_path = finished(
        backend, sandbox_id, "echo hi", env={"TOKEN": secret, "PATH": "/nowhere"}, task=OTHER
    )
    assert no_path.stdout == "hi\n"  # echo is a builtin; the launcher's own tools still ran
    for task in (TASK, OTHER):
        folder = sdk.path(sandbox_id, f"/tmp/sandrail/tasks/{task}")
        assert not (folder / "env").exists()
        assert all(secret not in p.read_text(errors="replace") for p in folder.iterdir())


def test_c17_a_staged_request_whose_start_never_came_is_deleted_later(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    sandbox_id = ensure(backend)
    secret = "s3cr3t-value-staged"
    sdk.faults.append(Fault(method="commands.run", kind="drop", word="start"))
    with pytest.raises(EffectFailure):
        start(backend, sandbox_id, "true", env={"TOKEN": secret})
    inbox = sdk.path(sandbox_id, "/tmp/sandrail/inbox")
    (staged,) = inbox.iterdir()  # the staged request, secret included, is still there
    start(backend, sandbox_id, "true", env={"TOKEN": secret}, task=OTHER)
    assert staged.exists()  # young: it may be a start still on its way
    old = time.time() - 11 * 60
    os.utime(staged, (old, old))
    start(backend, sandbox_id, "true", env={"TOKEN": secret}, task="c" * 64)
    assert not any(inbox.iterdir())


def test_c18_stop_ends_processes_that_left_the_group_but_not_the_session(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    sandbox_id = ensure(backend)
    command = (
        "python3 -c 'import subprocess, time; "
        'p = subprocess.Popen(["sleep", "300"], process_group=0); '
        'open("pids", "w").write(str(p.pid)); time.sleep(300)\''
    )
    start(backend, sandbox_id, command)
    home = sdk.home(sandbox_id)
    assert _eventually(lambda: (home / "pids").exists() and (home / "pids").read_text() != "")
    pid = int((home / "pids").read_text())
    assert _alive(pid)
    run(backend(Cancel(sandbox_id=sandbox_id, task_id=TASK)))
    assert _eventually(lambda: not _alive(pid))


def test_c18_a_stop_right_after_start_never_lets_the_command_finish(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    sandbox_id = ensure(backend)
    big = {f"V{i}": "x" * 60_000 for i in range(8)}  # a slow env load widens the race
    for round_ in range(3):
        task = f"{round_:064x}"
        start(backend, sandbox_id, "sleep 1; echo ran", task=task, env=big)
        run(backend(Cancel(sandbox_id=sandbox_id, task_id=task)))
        state = wait(backend, sandbox_id, task)
        assert (state.status, state.exit_code) == ("canceled", 143)
        assert read(backend, sandbox_id, task).stdout == ""


def test_c2_a_command_that_wipes_the_ledger_cannot_make_a_retry_launch_twice(
    sdk: StandInSDK, backend: E2BBackend
) -> None:
    """The review's scenario: op-1 launches, a later command deletes
    /tmp/sandrail, op-1 is retried. The port remembers op-1 launched, so the
    sandbox without its claim launches nothing and the retry is uncertain."""
    port = _port(backend)
    first = port.execute_sync(_request(port, "run_command", "op-1", command="echo x >> count"))
    assert (first.status, first.content["deduplicated"]) == ("ok", False)
    ledger = sdk.path(first.content["sandbox_id"], "/tmp/sandrail")
    port.execute_sync(_request(port, "run_command", "op-2", command="rm -rf /tmp/sandrail"))
    assert not (ledger / "tasks").exists()
    for _ in range(2):  # the first retry may find the launcher gone and reinstall it
        retry = port.execute_sync(_request(port, "run_command", "op-1", command="echo x >> count"))
    assert retry.status == "uncertain"
    assert retry.content["task_id"] == first.content["task_id"]
    assert (sdk.home(first.content["sandbox_id"]) / "count").read_text() == "x\n"
