"""The in-memory E2B (sandrail.interpreters.simulator): sandbox semantics, the
ground truth it keeps, and every fault kind of its fault plans."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandrail.core import SandboxPhase
from sandrail.core._effects import (
    Allow,
    ApprovalRequired,
    Authorize,
    Cancel,
    CancelRequested,
    CheckAuthority,
    CommandState,
    Delivery,
    EffectFailure,
    Ensure,
    Inspect,
    OutputChunk,
    Publish,
    Published,
    Read,
    RememberOwned,
    ResolveOwned,
    SandboxEffect,
    SandboxReady,
    SandboxState,
    Start,
    Started,
    StartRefused,
    Wait,
    WriteArtifact,
)
from sandrail.core._requests import ToolCall, ToolRequest
from sandrail.interpreters.launcher import Box, Launcher, Transport
from sandrail.interpreters.simulator import (
    NOT_EMULATED,
    Chunk,
    Fault,
    FaultKind,
    FaultPlan,
    SandboxFile,
    Script,
    SimulatedHarness,
    Simulator,
    emulate,
)
from tests.rig import inspect_answer, launcher_for

TASK = "a" * 64
OTHER_TASK = "b" * 64
SESSION = "session-1"
OWNER = "agent:agent-1"
SECRET = "s3cr3t-env-value"

When = Literal["before", "after"]
WHENS: tuple[When, ...] = ("before", "after")


def ensure(sim: Simulator, session: str = SESSION) -> str:
    ready = sim(Ensure(session_id=session, owner_key=OWNER))
    assert isinstance(ready, SandboxReady)
    return ready.sandbox_id


def start_effect(
    sandbox_id: str,
    task_id: str = TASK,
    *,
    command: str = "echo hi",
    digest: str = "digest-1",
    fence: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: int = 60,
) -> Start:
    return Start(
        sandbox_id=sandbox_id,
        task_id=task_id,
        request_digest=digest,
        command=command,
        cwd=None,
        env=env,
        timeout_seconds=timeout,
        fence=fence,
    )


def started(sim: Simulator, effect: Start) -> Started:
    outcome = sim(effect)
    assert isinstance(outcome, Started), outcome
    return outcome


def wait(sim: Simulator, sandbox_id: str, timeout: float = 600, task: str = TASK) -> CommandState:
    state = sim(Wait(sandbox_id=sandbox_id, task_id=task, timeout_seconds=timeout))
    assert isinstance(state, CommandState)
    return state


def read(
    sim: Simulator, sandbox_id: str, out: int = 0, err: int = 0, max_bytes: int = 65536
) -> OutputChunk:
    chunk = sim(
        Read(
            sandbox_id=sandbox_id,
            task_id=TASK,
            stdout_cursor=out,
            stderr_cursor=err,
            max_bytes=max_bytes,
        )
    )
    assert isinstance(chunk, OutputChunk)
    return chunk


def failure(sim: Simulator, effect: SandboxEffect) -> EffectFailure:
    with pytest.raises(EffectFailure) as caught:
        sim(effect)
    return caught.value


def request(arguments: Mapping[str, Any] | None = None) -> ToolRequest:
    return ToolRequest(
        call=ToolCall(
            name="run_command",
            call_id="call-1",
            arguments={"command": "echo hi"} if arguments is None else arguments,
        ),
        operation_key="op-1",
        session_id=SESSION,
        definition=None,
    )


# ---------------------------------------------------------------------------
# Sandboxes


def _answer(sandbox_id: str | None, phase: SandboxPhase) -> SandboxState:
    return inspect_answer(Simulator, sandbox_id, phase, isolated=False)


def test_ensure_is_idempotent_per_session_and_owner() -> None:
    sim = Simulator()
    assert sim(Inspect(session_id=SESSION, owner_key=OWNER)) == inspect_answer(
        Simulator, None, "absent", isolated=False
    )
    first = ensure(sim)
    assert ensure(sim) == first
    other = ensure(sim, session="session-2")
    assert other != first
    assert [first, other] == ["sbx-1", "sbx-2"]
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,128}", sid) for sid in (first, other))
    assert sim(Inspect(session_id=SESSION, owner_key=OWNER)) == inspect_answer(
        Simulator, first, "ready", isolated=False
    )


def test_effects_take_latency_and_wait_none_when_done() -> None:
    sim = Simulator(latency=0.25)
    box = ensure(sim)
    started(sim, start_effect(box))
    assert sim.clock == 0.5
    wait(sim, box)
    assert sim.clock == 0.5  # the command had already exited


@pytest.mark.parametrize(
    "effect",
    [
        Authorize(tool="run_command", call_id="c1"),
        CheckAuthority(request_digest="d"),
        ResolveOwned(task_id=TASK),
        RememberOwned(task_id=TASK, operation_key="op", sandbox_id="sbx-1"),
        WriteArtifact(key="k", content="{}"),
        "not an effect",
    ],
)
def test_harness_effects_are_not_the_backends(effect: Any) -> None:
    sim = Simulator()
    with pytest.raises(TypeError):
        sim(effect)
    assert sim.effects_seen == []


def test_unknown_sandbox_fails_not_sent() -> None:
    sim = Simulator()
    got = failure(sim, start_effect("sbx-404"))
    assert got == EffectFailure(Delivery.NOT_SENT, "sandbox sbx-404 not found")
    assert sim.launches == {}
    assert sim.effects_seen == [start_effect("sbx-404")]
    assert sim.applied == []


def test_unknown_task_reads_as_unknown() -> None:
    sim = Simulator()
    box = ensure(sim)
    unknown = CommandState(status="unknown")
    assert wait(sim, box) == unknown
    chunk = read(sim, box, out=3, err=5)
    assert (chunk.stdout, chunk.next_stdout_cursor, chunk.next_stderr_cursor) == ("", 3, 5)
    assert chunk.state == unknown
    assert sim(Cancel(sandbox_id=box, task_id=TASK)) == CancelRequested(state=unknown)
    assert sim.task_state(box, TASK) is None
    assert sim.task_state("sbx-404", TASK) is None


# ---------------------------------------------------------------------------
# Publish (C16)


def test_c16_publish_writes_0440_as_the_launcher_does_and_is_idempotent() -> None:
    sim = Simulator()
    box = ensure(sim)
    path = f"/tmp/sandrail/code/{TASK}.py"
    publish = Publish(sandbox_id=box, task_id=TASK, path=path, source="print(1)")
    assert sim(publish) == Published(path=path)
    assert sim(publish) == Published(path=path)
    assert sim.files(box) == {path: SandboxFile(source="print(1)", mode=0o440)}
    other = Publish(sandbox_id=box, task_id=TASK, path=path, source="print(2)")
    assert sim(other) == StartRefused(reason="publish_conflict")
    assert sim.files(box)[path].source == "print(1)"
    assert sim.files("sbx-404") == {}


@pytest.mark.parametrize(
    "path",
    [
        "/tmp/t/snippet.py",
        f"/tmp/sandrail/code/{OTHER_TASK}.py",
        f"/tmp/sandrail/code/{TASK}.txt.py",
        f"/tmp/sandrail/code/{TASK}.PY",
        f"/tmp/sandrail/code/{TASK}.abcdefghi",
        f"/tmp/sandrail/code/{TASK}",
        f"/tmp/sandrail/code/../{TASK}.py",
    ],
)
def test_c16_publish_refuses_a_path_the_launcher_refuses(path: str) -> None:
    """Only the task's own staging path is written, as on the launcher: a
    tool staging elsewhere fails on the simulator too, not only on E2B."""
    sim = Simulator()
    box = ensure(sim)
    effect = Publish(sandbox_id=box, task_id=TASK, path=path, source="print(1)")
    expected = EffectFailure(Delivery.NOT_SENT, "Publish: the snippet path is not sandrail's")
    with pytest.raises(EffectFailure) as simulated:
        sim(effect)
    assert simulated.value == expected
    assert sim.files(box) == {}
    with pytest.raises(EffectFailure) as launched:
        asyncio.run(_unreachable_launcher().publish(effect))
    assert launched.value == expected


def _unreachable_launcher() -> Launcher:
    """A launcher whose transport and sandboxes must never be reached."""

    async def box(sandbox_id: str) -> Box:
        raise AssertionError(f"reached sandbox {sandbox_id}")

    return launcher_for(cast(Transport, object()), box)


def test_snippet_runs_the_script_of_its_published_source() -> None:
    sim = Simulator(scripts={"print('hé')": Script.prints("hé\n")})
    box = ensure(sim)
    path = f"/tmp/sandrail/code/{TASK}.py"
    sim(
        Publish(
            sandbox_id=box,
            task_id=OTHER_TASK,
            path=f"/tmp/sandrail/code/{OTHER_TASK}.py",
            source="unscripted",
        )
    )
    sim(Publish(sandbox_id=box, task_id=TASK, path=path, source="print('hé')"))
    started(sim, start_effect(box, command=f"python3 {path}"))
    assert read(sim, box).stdout == "hé\n"


def test_command_script_wins_and_default_answers_the_rest() -> None:
    sim = Simulator(scripts={"make": Script.prints("built\n")}, default=Script(exit_code=7))
    box = ensure(sim)
    started(sim, start_effect(box, command="make"))
    assert read(sim, box).stdout == "built\n"
    started(sim, start_effect(box, OTHER_TASK, command="echo ignored"))
    assert wait(sim, box, task=OTHER_TASK).exit_code == 7


# ---------------------------------------------------------------------------
# Start: claims, conflicts, fences (C2, C3, C10)


def test_c2_retry_launches_nothing_and_returns_first_launch_state() -> None:
    sim = Simulator(scripts={"build": Script.prints("ok\n", exit_code=3, duration=1.0)})
    box = ensure(sim)
    first = started(sim, start_effect(box, command="build"))
    assert first.first_launch
    assert first.state.status == "running"
    wait(sim, box)
    retry = started(sim, start_effect(box, command="build"))
    assert not retry.first_launch
    assert retry.state == CommandState(status="exited", exit_code=3, stdout_bytes=3)
    assert sim.launches == {TASK: 1}


def test_c2_response_lost_then_retry_launches_once() -> None:
    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    box = ensure(sim)
    assert failure(sim, start_effect(box)).delivery is Delivery.MAYBE_SENT
    assert sim.launches == {TASK: 1}
    assert not started(sim, start_effect(box)).first_launch
    assert sim.launches == {TASK: 1}


def test_c2_late_duplicate_delivered_before_retry_launches_once() -> None:
    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.DELIVERED_LATE),)))
    box = ensure(sim)
    late = failure(sim, start_effect(box))
    assert late == EffectFailure(Delivery.MAYBE_SENT, "request timed out")
    assert sim.launches == {}
    assert sim.held == [start_effect(box)]
    retry = started(sim, start_effect(box))  # the held request arrives first
    assert not retry.first_launch
    assert sim.launches == {TASK: 1}
    assert sim.held == []
    [(effect, result)] = sim.late_deliveries
    assert effect == start_effect(box)
    assert isinstance(result, Started)
    assert result.first_launch


def test_c2_late_duplicate_delivered_after_retry_launches_once() -> None:
    plan = FaultPlan((Fault(effect="Start", kind=FaultKind.DELIVERED_LATE),))
    sim = Simulator(plan=plan, late_delivery="manual")
    box = ensure(sim)
    failure(sim, start_effect(box))
    assert started(sim, start_effect(box)).first_launch
    [late] = sim.deliver_held()
    assert isinstance(late, Started)
    assert not late.first_launch
    assert sim.launches == {TASK: 1}
    assert sim.deliver_held() == []


def test_c3_same_task_other_digest_is_a_conflict() -> None:
    sim = Simulator(scripts={"first": Script.hangs("1\n")})
    box = ensure(sim)
    started(sim, start_effect(box, command="first", digest="d1"))
    refused = sim(start_effect(box, command="second", digest="d2"))
    assert refused == StartRefused(reason="conflict")
    assert sim.launches == {TASK: 1}
    assert read(sim, box).stdout == "1\n"


def test_c10_stale_fence_never_runs() -> None:
    sim = Simulator()
    box = ensure(sim)
    started(sim, start_effect(box, fence=5))
    stale = sim(start_effect(box, OTHER_TASK, fence=4))
    assert stale == StartRefused(reason="stale_fence")
    assert OTHER_TASK not in sim.launches
    assert sim.live_processes(OTHER_TASK) == 0
    # An equal fence, or none, still runs.
    assert started(sim, start_effect(box, OTHER_TASK, fence=5)).first_launch
    started(sim, start_effect(box, "c" * 64, fence=None))
    started(sim, start_effect(box, "d" * 64, fence=9))
    assert sim.launches == {TASK: 1, OTHER_TASK: 1, "c" * 64: 1, "d" * 64: 1}


def test_c2_a_stale_retry_of_a_claimed_task_is_answered_from_its_claim() -> None:
    """The fence refuses launches: a retry (same digest) of a claimed task
    launches nothing whatever its fence, so it gets the first launch's
    state; the highest fence stays where it was."""
    sim = Simulator()
    box = ensure(sim)
    started(sim, start_effect(box, fence=5))
    started(sim, start_effect(box, OTHER_TASK, fence=9))
    retry = started(sim, start_effect(box, fence=5))
    assert not retry.first_launch
    assert sim(start_effect(box, digest="d2", fence=5)) == StartRefused(reason="stale_fence")
    assert sim(start_effect(box, "c" * 64, fence=8)) == StartRefused(reason="stale_fence")
    assert sim.launches == {TASK: 1, OTHER_TASK: 1}


def test_c10_late_delivered_start_obeys_the_fence() -> None:
    plan = FaultPlan((Fault(effect="Start", kind=FaultKind.DELIVERED_LATE),))
    sim = Simulator(plan=plan, late_delivery="manual")
    box = ensure(sim)
    failure(sim, start_effect(box, fence=1))
    started(sim, start_effect(box, OTHER_TASK, fence=2))
    assert sim.deliver_held() == [StartRefused(reason="stale_fence")]
    assert TASK not in sim.launches


def test_c10_a_conflicting_start_still_raises_the_fence() -> None:
    sim = Simulator()
    box = ensure(sim)
    started(sim, start_effect(box, digest="d1", fence=1))
    assert sim(start_effect(box, digest="d2", fence=3)) == StartRefused(reason="conflict")
    assert sim(start_effect(box, OTHER_TASK, fence=2)) == StartRefused(reason="stale_fence")


# ---------------------------------------------------------------------------
# Processes in virtual time


def test_wait_is_event_driven_clock_stops_at_exit() -> None:
    sim = Simulator(scripts={"work": Script.prints("done\n", duration=2.5)})
    box = ensure(sim)
    started(sim, start_effect(box, command="work"))
    launched_at = sim.clock
    assert wait(sim, box, timeout=1.0) == CommandState(status="running", stdout_bytes=5)
    assert sim.clock == launched_at + 1.0
    assert wait(sim, box, timeout=600) == CommandState(status="exited", exit_code=0, stdout_bytes=5)
    assert sim.clock == launched_at + 2.5
    assert sim.task_state(box, TASK) == CommandState(status="exited", exit_code=0, stdout_bytes=5)


def test_output_appears_over_virtual_time() -> None:
    script = Script(
        chunks=(
            Chunk(offset=2.0, stream="stdout", text="late\n"),
            Chunk(offset=0.0, stream="stdout", text="early\n"),
            Chunk(offset=1.0, stream="stderr", text="warn\n"),
        ),
        duration=3.0,
    )
    sim = Simulator(scripts={"job": script})
    box = ensure(sim)
    started(sim, start_effect(box, command="job"))
    first = read(sim, box)
    assert (first.stdout, first.stderr, first.more) == ("early\n", "", False)
    sim.advance(1.5)
    second = read(sim, box, out=first.next_stdout_cursor)
    assert (second.stdout, second.stderr) == ("", "warn\n")
    wait(sim, box)
    third = read(sim, box, out=second.next_stdout_cursor, err=second.next_stderr_cursor)
    assert (third.stdout, third.stderr) == ("late\n", "")
    assert third.state == CommandState(
        status="exited", exit_code=0, stdout_bytes=11, stderr_bytes=5
    )


def test_deadline_kills_the_group_timed_out_124() -> None:
    sim = Simulator(scripts={"spin": Script.hangs("tick\n", children=2)})
    box = ensure(sim)
    started(sim, start_effect(box, command="spin", timeout=5))
    launched_at = sim.clock
    assert sim.live_processes(TASK) == 3
    state = wait(sim, box, timeout=100)
    assert state == CommandState(status="timed_out", exit_code=124, stdout_bytes=5)
    assert sim.clock == launched_at + 5
    assert sim.live_processes(TASK) == 0


def test_exit_at_the_deadline_counts_as_exited() -> None:
    sim = Simulator(scripts={"edge": Script(duration=5.0, exit_code=0)})
    box = ensure(sim)
    started(sim, start_effect(box, command="edge", timeout=5))
    assert wait(sim, box).status == "exited"


def test_c18_cancel_ends_the_whole_process_group() -> None:
    sim = Simulator(scripts={"server": Script.hangs("up\n", children=3)})
    box = ensure(sim)
    started(sim, start_effect(box, command="server"))
    sim.advance(10)
    assert sim.live_processes(TASK) == 4
    canceled = CommandState(status="canceled", exit_code=143, stdout_bytes=3)
    assert sim(Cancel(sandbox_id=box, task_id=TASK)) == CancelRequested(state=canceled)
    assert sim.live_processes(TASK) == 0
    before = sim.clock
    assert wait(sim, box) == canceled
    assert sim.clock == before
    assert sim(Cancel(sandbox_id=box, task_id=TASK)) == CancelRequested(state=canceled)


def test_cancel_after_exit_changes_nothing() -> None:
    sim = Simulator()
    box = ensure(sim)
    started(sim, start_effect(box, command="exit 3"))
    exited = CommandState(status="exited", exit_code=3)
    assert sim(Cancel(sandbox_id=box, task_id=TASK)) == CancelRequested(state=exited)


def test_wait_wakes_at_once_on_abort() -> None:
    harness = SimulatedHarness()
    sim = Simulator(scripts={"spin": Script.hangs()}, harness=harness)
    box = ensure(sim)
    started(sim, start_effect(box, command="spin"))
    harness.cancel_token.cancel()
    before = sim.clock
    got = failure(sim, Wait(sandbox_id=box, task_id=TASK, timeout_seconds=600))
    assert got == EffectFailure(Delivery.MAYBE_SENT, "aborted", aborted=True)
    assert sim.clock == before


# ---------------------------------------------------------------------------
# Reads


MULTIBYTE = "aé€𝄞b" * 5 + "\n"  # 1-, 2-, 3- and 4-byte characters


def test_reads_never_split_utf8_and_old_cursors_reread_the_same() -> None:
    sim = Simulator(scripts={"uni": Script.prints(MULTIBYTE, stderr="é" * 7)})
    box = ensure(sim)
    started(sim, start_effect(box, command="uni"))
    for max_bytes in range(4, 12):
        pieces: list[tuple[int, str]] = []
        cursor = 0
        while True:
            chunk = read(sim, box, out=cursor, max_bytes=max_bytes)
            assert len(chunk.stdout.encode()) <= max_bytes
            if not chunk.stdout:
                break
            pieces.append((cursor, chunk.stdout))
            cursor = chunk.next_stdout_cursor
        assert "".join(text for _, text in pieces) == MULTIBYTE
        for old_cursor, text in pieces:
            assert read(sim, box, out=old_cursor, max_bytes=max_bytes).stdout == text
    stderr = read(sim, box, max_bytes=5)
    assert (stderr.stderr, stderr.next_stderr_cursor, stderr.more) == ("éé", 4, True)


def test_read_reports_more_and_sizes() -> None:
    sim = Simulator(scripts={"big": Script.prints("x" * 10, stderr="y" * 3)})
    box = ensure(sim)
    started(sim, start_effect(box, command="big"))
    chunk = read(sim, box, max_bytes=4)
    assert (chunk.stdout, chunk.stderr, chunk.more) == ("xxxx", "yyy", True)
    assert (chunk.next_stdout_cursor, chunk.next_stderr_cursor) == (4, 3)
    assert chunk.state == CommandState(
        status="exited", exit_code=0, stdout_bytes=10, stderr_bytes=3
    )
    rest = read(sim, box, out=4, err=3, max_bytes=6)
    assert (rest.stdout, rest.stderr, rest.more) == ("xxxxxx", "", False)


def test_cursor_inside_a_character_moves_to_the_next_boundary() -> None:
    sim = Simulator(scripts={"uni": Script.prints("€x")})  # € is 3 bytes
    box = ensure(sim)
    started(sim, start_effect(box, command="uni"))
    chunk = read(sim, box, out=1)
    assert (chunk.stdout, chunk.next_stdout_cursor) == ("x", 4)
    past = read(sim, box, out=99)
    assert (past.stdout, past.next_stdout_cursor, past.more) == ("", 99, False)


@pytest.mark.parametrize(
    ("cursor", "max_bytes"),
    [(0, 3), (-1, 64)],
)
def test_read_rejects_bad_arguments(cursor: int, max_bytes: int) -> None:
    sim = Simulator()
    box = ensure(sim)
    with pytest.raises(ValueError, match=r"max_bytes|cursors"):
        read(sim, box, out=cursor, max_bytes=max_bytes)


texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
chunks = st.builds(
    Chunk,
    offset=st.integers(0, 20).map(float),
    stream=st.sampled_from(["stdout", "stderr"]),
    text=texts,
)
scripts = st.builds(
    Script,
    chunks=st.lists(chunks, max_size=8),
    duration=st.just(20.0),
    exit_code=st.integers(0, 255) | st.none(),
)


@given(
    script=scripts,
    steps=st.lists(st.tuples(st.integers(4, 24), st.integers(0, 4)), min_size=1, max_size=30),
)
def test_cursor_reads_reproduce_the_full_output(
    script: Script, steps: list[tuple[int, int]]
) -> None:
    """Reads of any sizes, interleaved with time passing, concatenate to the
    whole output of each stream."""
    sim = Simulator(scripts={"job": script})
    box = ensure(sim)
    started(sim, start_effect(box, command="job", timeout=30))
    got = {"stdout": "", "stderr": ""}
    out = err = 0

    def take(max_bytes: int) -> OutputChunk:
        nonlocal out, err
        chunk = read(sim, box, out=out, err=err, max_bytes=max_bytes)
        assert len(chunk.stdout.encode()) <= max_bytes >= len(chunk.stderr.encode())
        got["stdout"] += chunk.stdout
        got["stderr"] += chunk.stderr
        out, err = chunk.next_stdout_cursor, chunk.next_stderr_cursor
        return chunk

    for max_bytes, pause in steps:
        sim.advance(pause)
        take(max_bytes)
    wait(sim, box)
    while take(steps[-1][0]).more:
        pass
    for stream in ("stdout", "stderr"):
        expected = "".join(c.text for c in script.chunks if c.stream == stream)
        assert got[stream] == expected
    assert (out, err) == (len(got["stdout"].encode()), len(got["stderr"].encode()))


# ---------------------------------------------------------------------------
# Scripts and the default emulation


@pytest.mark.parametrize(
    ("command", "stdout", "stderr", "exit_code", "duration"),
    [
        ("echo hello   'big world'", "hello big world\n", "", 0, 0.0),
        ("echo $HOME", "$HOME\n", "", 0, 0.0),
        ("true", "", "", 0, 0.0),
        ("false", "", "", 1, 0.0),
        ("exit", "", "", 0, 0.0),
        ("exit 3", "", "", 3, 0.0),
        ("exit 300", "", "", 44, 0.0),
        ("exit x", "", "exit: invalid argument\n", 1, 0.0),
        ("sleep 2.5", "", "", 0, 2.5),
        ("sleep", "", "sleep: invalid argument\n", 1, 0.0),
        ("sleep -1", "", "sleep: invalid argument\n", 1, 0.0),
        ("sleep soon", "", "sleep: invalid argument\n", 1, 0.0),
        ("seq 3", "1\n2\n3\n", "", 0, 0.0),
        ("seq 0", "", "", 0, 0.0),
        ("seq many", "", "seq: invalid argument\n", 1, 0.0),
        ("seq 100001", "", "seq: invalid argument\n", 1, 0.0),
        ("python3 main.py", "", NOT_EMULATED, 127, 0.0),
        ("", "", NOT_EMULATED, 127, 0.0),
        ("echo 'unterminated", "", NOT_EMULATED, 127, 0.0),
    ],
)
def test_emulate_knows_a_few_commands(
    command: str, stdout: str, stderr: str, exit_code: int, duration: float
) -> None:
    script = emulate(command)
    by_stream = {
        stream: "".join(c.text for c in script.chunks if c.stream == stream)
        for stream in ("stdout", "stderr")
    }
    assert by_stream == {"stdout": stdout, "stderr": stderr}
    assert (script.exit_code, script.duration) == (exit_code, duration)


def _ran(sim: Simulator, box: str, command: str, task: str) -> dict[str, Any]:
    started(sim, start_effect(box, task, command=command, digest=f"d-{task}"))
    state = wait(sim, box, task=task)
    chunk = sim(
        Read(sandbox_id=box, task_id=task, stdout_cursor=0, stderr_cursor=0, max_bytes=65536)
    )
    assert isinstance(chunk, OutputChunk)
    return {"stdout": chunk.stdout, "stderr": chunk.stderr, "exit_code": state.exit_code}


def test_the_simulator_copies_and_prints_its_own_files() -> None:
    """``cp`` and ``cat`` act on the sandbox's files (what a tool that stages
    a file runs), as GNU coreutils do under the launcher's umask (077): a
    copy of a staged file (0440) is 0400 and cannot be written again, one
    made with ``--no-preserve=mode`` is 0600 and can; a file the sandbox
    lacks exits 1, a copy onto itself too, and their other forms (a path
    spelled another way, a directory, a comment) are not emulated."""
    sim = Simulator()
    box = ensure(sim)
    staged = f"/tmp/sandrail/code/{TASK}.txt"
    assert sim(Publish(sandbox_id=box, task_id=TASK, path=staged, source="one\n")) == Published(
        path=staged
    )
    other_task = f"{99:064x}"
    again = f"/tmp/sandrail/code/{other_task}.txt"
    sim(Publish(sandbox_id=box, task_id=other_task, path=again, source="two\n"))
    tasks = iter(f"{n:064x}" for n in range(1, 40))
    copied = _ran(sim, box, f"cp -- {staged} /home/user/out.txt", next(tasks))
    assert copied == {"stdout": "", "stderr": "", "exit_code": 0}
    assert sim.files(box)["/home/user/out.txt"] == SandboxFile(source="one\n", mode=0o400)
    refused = _ran(sim, box, f"cp -- {again} /home/user/out.txt", next(tasks))
    assert refused["exit_code"] == 1
    assert "Permission denied" in refused["stderr"]
    assert sim.files(box)["/home/user/out.txt"].source == "one\n"
    for source, text in ((staged, "one\n"), (again, "two\n")):
        fresh = _ran(sim, box, f"cp --no-preserve=mode -- {source} /home/user/w.txt", next(tasks))
        assert fresh["exit_code"] == 0
        assert sim.files(box)["/home/user/w.txt"] == SandboxFile(source=text, mode=0o600)
    shown = _ran(sim, box, f"cat /home/user/out.txt {staged}", next(tasks))
    assert shown == {"stdout": "one\none\n", "stderr": "", "exit_code": 0}
    lost = _ran(sim, box, "cp /nowhere /home/user/x", next(tasks))
    assert lost["exit_code"] == 1
    assert lost["stderr"] == "cp: cannot stat '/nowhere': No such file or directory\n"
    assert "/home/user/x" not in sim.files(box)
    assert _ran(sim, box, "cat -- /nowhere", next(tasks))["exit_code"] == 1
    partly = _ran(sim, box, f"cat {staged} /nowhere", next(tasks))
    assert partly == {
        "stdout": "one\n",
        "stderr": "cat: /nowhere: No such file or directory\n",
        "exit_code": 1,
    }
    onto_itself = _ran(sim, box, "cp /home/user/w.txt /home/user/w.txt", next(tasks))
    assert onto_itself["exit_code"] == 1
    assert "are the same file" in onto_itself["stderr"]
    assert sim.files(box)["/home/user/w.txt"].source == "two\n"
    for other in (
        "cp -r /a /b",
        f"cp {staged}",
        "cat",
        "cat -n /home/user/out.txt",
        f"cat -- {staged} >> /home/user/out.txt",
        f"cat {staged} | tee /home/user/x",
        f"cp {staged} /home/user/$HOME",
        "cat /home/user/*.txt",
        "cat /home/user/out.txt #a comment",
        "cat out.txt",
        "cat /home/user/./out.txt",
        "cat //home/user/out.txt",
        "cat /home/user",
        f"cp {staged} /tmp",
        f"cp {staged} /tmp/sandrail/code",
        f"cp {staged} /home/user/new/",
    ):
        assert _ran(sim, box, other, next(tasks))["stderr"] == NOT_EMULATED, other


def test_emulate_sleep_infinity_hangs() -> None:
    assert emulate("sleep infinity").exit_code is None


def test_script_rejects_output_after_exit_and_bad_values() -> None:
    with pytest.raises(ValueError, match="after the exit"):
        Script(chunks=(Chunk(offset=2.0, stream="stdout", text="x"),), duration=1.0)
    with pytest.raises(ValueError, match="offset"):
        Chunk(offset=-1.0, stream="stdout", text="x")
    with pytest.raises(ValueError, match="duration"):
        Script(duration=float("nan"))
    with pytest.raises(UnicodeEncodeError):
        Chunk(offset=0.0, stream="stdout", text="\ud800")
    assert Script.hangs("x", stderr="y", children=2).children == 2


# ---------------------------------------------------------------------------
# Fault plans


def test_fault_plan_random_is_reproducible() -> None:
    plans = [FaultPlan.random(seed) for seed in range(50)]
    assert plans == [FaultPlan.random(seed) for seed in range(50)]
    assert len(set(plans)) > 10
    assert all(len(plan.faults) <= 3 for plan in plans)
    assert all(len(FaultPlan.random(seed, max_faults=0).faults) == 0 for seed in range(5))


def test_fault_plan_validates() -> None:
    fault = Fault(effect="Start", kind=FaultKind.HANG)
    with pytest.raises(ValueError, match="two faults"):
        FaultPlan([fault, Fault(effect="Start", kind=FaultKind.ABORT)])
    with pytest.raises(ValueError, match="effect"):
        Fault(effect="Authorize", kind=FaultKind.HANG)
    with pytest.raises(ValueError, match="occurrence"):
        Fault(effect="Start", occurrence=-1, kind=FaultKind.HANG)
    assert FaultPlan([fault]).lookup("Start", 0) == fault
    assert FaultPlan([fault]).lookup("Start", 1) is None


def test_fault_strikes_only_its_occurrence() -> None:
    plan = FaultPlan((Fault(effect="Ensure", occurrence=1, kind=FaultKind.NOT_DELIVERED),))
    sim = Simulator(plan=plan)
    ensure(sim)
    failure(sim, Ensure(session_id=SESSION, owner_key=OWNER))
    ensure(sim)
    assert len(sim.effects_seen) == 3
    assert sim.faults_fired == list(plan.faults)


def faulted(kind: FaultKind, when: When, effect: str = "Start", **kwargs: Any) -> Simulator:
    return Simulator(plan=FaultPlan((Fault(effect=effect, kind=kind, when=when),)), **kwargs)


@pytest.mark.parametrize("when", WHENS)
def test_fault_not_delivered_never_applies(when: When) -> None:
    sim = faulted(FaultKind.NOT_DELIVERED, when)
    box = ensure(sim)
    got = failure(sim, start_effect(box))
    assert got == EffectFailure(Delivery.NOT_SENT, "connect failed")
    assert sim.launches == {}
    assert sim.effects_seen[-1] == start_effect(box)
    assert start_effect(box) not in sim.applied


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        (FaultKind.RESPONSE_LOST, "response lost"),
        (FaultKind.MALFORMED_RESPONSE, "malformed response"),
    ],
)
@pytest.mark.parametrize("when", WHENS)
def test_fault_lost_or_malformed_response_applies(kind: FaultKind, detail: str, when: When) -> None:
    sim = faulted(kind, when)
    box = ensure(sim)
    assert failure(sim, start_effect(box)) == EffectFailure(Delivery.MAYBE_SENT, detail)
    assert sim.launches == {TASK: 1}


@pytest.mark.parametrize("when", WHENS)
def test_fault_delivered_late_applies_at_the_next_effect(when: When) -> None:
    sim = faulted(FaultKind.DELIVERED_LATE, when, effect="Ensure")
    failure(sim, Ensure(session_id=SESSION, owner_key=OWNER))
    assert sim.applied == []
    # The next effect, even a read-only one, lets the held request arrive first.
    state = sim(Inspect(session_id=SESSION, owner_key=OWNER))
    assert state == _answer("sbx-1", "ready")
    assert sim.late_deliveries == [
        (
            Ensure(session_id=SESSION, owner_key=OWNER),
            SandboxReady(sandbox_id="sbx-1", ledger_epoch="sbx-1/ledger-0", backend="simulator"),
        )
    ]


def test_fault_delivered_late_failure_is_kept_not_raised() -> None:
    plan = FaultPlan((Fault(effect="Start", kind=FaultKind.DELIVERED_LATE),))
    sim = Simulator(plan=plan, late_delivery="manual")
    failure(sim, start_effect("sbx-404"))
    assert sim.deliver_held() == [EffectFailure(Delivery.NOT_SENT, "sandbox sbx-404 not found")]


@pytest.mark.parametrize("when", WHENS)
def test_fault_hang_waits_out_the_timeout(when: When) -> None:
    sim = faulted(FaultKind.HANG, when, hang_seconds=30.0)
    box = ensure(sim)
    arrival = sim.clock + sim.latency
    got = failure(sim, start_effect(box))
    assert got == EffectFailure(Delivery.MAYBE_SENT, "timed out waiting for the sandbox")
    assert sim.clock == arrival + 30.0
    assert sim.launches == ({TASK: 1} if when == "after" else {})


@pytest.mark.parametrize("when", WHENS)
def test_fault_hang_on_wait_uses_its_timeout(when: When) -> None:
    sim = faulted(FaultKind.HANG, when, effect="Wait", scripts={"quick": Script(duration=1.0)})
    box = ensure(sim)
    started(sim, start_effect(box, command="quick"))
    arrival = sim.clock
    failure(sim, Wait(sandbox_id=box, task_id=TASK, timeout_seconds=7.0))
    assert sim.clock == arrival + 7.0
    assert (Wait(sandbox_id=box, task_id=TASK, timeout_seconds=7.0) in sim.applied) == (
        when == "after"
    )


@pytest.mark.parametrize("when", WHENS)
def test_fault_hang_ends_at_once_when_aborted(when: When) -> None:
    harness = SimulatedHarness()
    sim = faulted(FaultKind.HANG, when, harness=harness)
    box = ensure(sim)
    harness.cancel_token.cancel()
    arrival = sim.clock + sim.latency
    got = failure(sim, start_effect(box))
    assert got == EffectFailure(Delivery.MAYBE_SENT, "aborted", aborted=True)
    assert sim.clock == arrival


@pytest.mark.parametrize("when", WHENS)
def test_c11_fault_abort_fires_the_harness_token(when: When) -> None:
    harness = SimulatedHarness()
    sim = faulted(FaultKind.ABORT, when, harness=harness)
    box = ensure(sim)
    got = failure(sim, start_effect(box))
    assert got == EffectFailure(Delivery.MAYBE_SENT, "aborted", aborted=True)
    assert got.aborted
    assert harness.cancel_token.cancelled
    assert sim.launches == ({TASK: 1} if when == "after" else {})


@pytest.mark.parametrize("when", WHENS)
def test_c9_fault_authority_lost_applies_and_answers(when: When) -> None:
    harness = SimulatedHarness()
    sim = faulted(FaultKind.AUTHORITY_LOST, when, harness=harness)
    box = ensure(sim)
    assert started(sim, start_effect(box)).first_launch
    assert not harness.assert_authority(request())
    assert sim.launches == {TASK: 1}


@pytest.mark.parametrize("when", WHENS)
def test_c9_fault_request_mutated_applies_and_drifts(when: When) -> None:
    harness = SimulatedHarness()
    live = request()
    harness.assert_authority(live)
    sim = faulted(FaultKind.REQUEST_MUTATED, when, harness=harness)
    box = ensure(sim)
    assert started(sim, start_effect(box)).first_launch
    assert harness.drifted
    assert live.call.arguments == {"command": "echo hi", "__drift__": True}
    assert sim.launches == {TASK: 1}


@pytest.mark.parametrize("when", WHENS)
def test_c2_fault_sandbox_dies_and_stays_gone(when: When) -> None:
    sim = faulted(FaultKind.SANDBOX_DIES, when, scripts={"spin": Script.hangs(children=1)})
    box = ensure(sim)
    got = failure(sim, start_effect(box, command="spin"))
    assert got == EffectFailure(Delivery.MAYBE_SENT, "sandbox not found")
    assert sim.launches == ({TASK: 1} if when == "after" else {})
    assert sim.live_processes(TASK) == 0
    assert sim.task_state(box, TASK) == (
        CommandState(status="unknown") if when == "after" else None
    )
    gone = EffectFailure(Delivery.NOT_SENT, f"sandbox {box} is gone")
    assert failure(sim, start_effect(box, command="spin")) == gone
    assert failure(sim, Ensure(session_id=SESSION, owner_key=OWNER)) == gone
    assert (
        failure(
            sim, Read(sandbox_id=box, task_id=TASK, stdout_cursor=0, stderr_cursor=0, max_bytes=64)
        )
        == gone
    )
    assert sim(Inspect(session_id=SESSION, owner_key=OWNER)) == inspect_answer(
        Simulator, box, "closed", isolated=False
    )
    assert sim.launches == ({TASK: 1} if when == "after" else {})


@pytest.mark.parametrize("when", WHENS)
def test_fault_sandbox_dies_on_ensure(when: When) -> None:
    sim = faulted(FaultKind.SANDBOX_DIES, when, effect="Ensure")
    failure(sim, Ensure(session_id=SESSION, owner_key=OWNER))
    phase = "closed" if when == "after" else "absent"
    state = sim(Inspect(session_id=SESSION, owner_key=OWNER))
    assert isinstance(state, SandboxState)
    assert state.phase == phase


# ---------------------------------------------------------------------------
# Secrets (C17)


def test_c17_env_values_never_appear_in_outcomes_or_failures() -> None:
    env = {"API_TOKEN": SECRET}
    texts: list[str] = []
    for kind in FaultKind:
        for when in WHENS:
            sim = faulted(kind, when, late_delivery="manual")
            box = ensure(sim)
            effects: list[SandboxEffect] = [
                start_effect(box, env=env),
                start_effect(box, env=env),
                start_effect(box, env={"API_TOKEN": SECRET + "x"}, digest="other"),
                Wait(sandbox_id=box, task_id=TASK, timeout_seconds=5),
                Read(sandbox_id=box, task_id=TASK, stdout_cursor=0, stderr_cursor=0, max_bytes=64),
                Cancel(sandbox_id=box, task_id=TASK),
            ]
            for effect in effects:
                try:
                    texts.append(repr(sim(effect)))
                except EffectFailure as error:
                    texts.extend((str(error), repr(error), error.detail))
            texts.extend(repr(result) for result in sim.deliver_held())
    assert texts
    assert not [text for text in texts if SECRET in text]


# ---------------------------------------------------------------------------
# The simulated harness


def test_simulated_harness_decides_and_resets() -> None:
    harness = SimulatedHarness()
    assert harness.authorize(request()) == Allow()
    assert harness.assert_authority(request())
    asking = SimulatedHarness(decision=ApprovalRequired(interaction_id="i-1"))
    assert asking.authorize(request()) == ApprovalRequired(interaction_id="i-1")
    old_token = harness.cancel_token
    harness.cancel_token.cancel()
    harness.authority_held = False
    harness.mutate_request()
    harness.reset()
    assert harness.cancel_token is not old_token
    assert not harness.cancel_token.cancelled
    assert harness.authority_held
    assert not harness.drifted
    assert harness.last_request is None


def test_simulated_harness_drift_without_a_dict_only_flags() -> None:
    harness = SimulatedHarness()
    frozen = request(MappingProxyType({"command": "ls"}))
    harness.authorize(frozen)
    harness.mutate_request()
    assert harness.drifted
    assert frozen.call.arguments == {"command": "ls"}
    fresh = SimulatedHarness()
    fresh.mutate_request()
    assert fresh.drifted


def test_advance_refuses_to_go_back() -> None:
    sim = Simulator()
    sim.advance(2)
    assert sim.clock == 2
    with pytest.raises(ValueError, match="backwards"):
        sim.advance(-1)
