"""LangGraph runs of the LangChain adapter across processes, on local-e2b: one
saved question resumed from two processes at once (SQLite and PostgreSQL
checkpointers), and a harness SIGKILLed mid-command then resumed from its
checkpointer (docs/howto/langgraph.md). Launches are counted from inside the
sandbox (the server's marks)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandrail.local_e2b import LocalE2B, serve
from tests.postgres_server import PostgresServer

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve(signal_scope="process") as running:
        yield running


def _worker(
    server: LocalE2B,
    mode: str,
    spec: str,
    record: Path,
    thread: str,
    command: str,
    out: Path,
    flavor: str = "langchain",
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.langgraph_worker",
            mode,
            spec,
            str(record),
            thread,
            command,
            str(out),
        ],
        cwd=REPO,
        env={**os.environ, **server.env, "FLAVOR": flavor},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _finished(worker: subprocess.Popen[bytes], out: Path) -> dict[str, Any]:
    _, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err.decode()[-3000:]
    answer: dict[str, Any] = json.loads(out.read_text())
    return answer


def _kill_once_marked(server: LocalE2B, worker: subprocess.Popen[bytes], mark: str) -> None:
    """SIGKILL ``worker`` as soon as its command has started in the sandbox."""
    deadline = time.monotonic() + 60
    while server.truth().marked(mark) == 0:
        assert worker.poll() is None, worker.communicate()[1].decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait(timeout=30)


def _checkpointers(tmp_path: Path, postgres: PostgresServer | None) -> str:
    if postgres is None:
        return f"sqlite:{tmp_path / 'checkpoints.sqlite'}"
    return f"postgres:{postgres.url(postgres.fresh_database())}"


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_c2_one_question_resumed_from_two_processes_at_once_launches_once(
    server: LocalE2B, tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    postgres = request.getfixturevalue("postgres") if store == "postgres" else None
    spec = _checkpointers(tmp_path, postgres)
    record = tmp_path / "owned.sqlite"
    mark = f"lg.{uuid.uuid4().hex[:10]}"
    command = f"{server.mark(mark)}; echo ask-me"
    thread = f"t-{uuid.uuid4().hex[:8]}"
    asked = _finished(
        _worker(server, "start", spec, record, thread, command, tmp_path / "0.json"),
        tmp_path / "0.json",
    )
    (question,) = asked["interrupts"]
    assert question["type"] == "sandrail_approval"
    assert server.truth().marked(mark) == 0
    outs = [tmp_path / f"{n}.json" for n in (1, 2)]
    workers = [_worker(server, "approve", spec, record, thread, command, out) for out in outs]
    answers = [_finished(worker, out) for worker, out in zip(workers, outs, strict=True)]
    results = [answer["results"][-1] for answer in answers]
    assert server.truth().marked(mark) == 1
    assert {result["status"] for result in results} == {"ok"}
    # Two runs of the tool: the one that launched, and the one that found it
    # launched. A process that resumed after the other had answered the
    # thread reads that one answer, the same tool message, from the thread.
    runs = {result["message_id"]: result for result in results}
    assert sorted(result["deduplicated"] for result in runs.values()) in ([False], [False, True])
    assert {result["operation_key"] for result in results} == {question["operation_key"]}


def test_c2_a_harness_killed_mid_command_resumes_from_its_checkpointer_without_relaunching(
    server: LocalE2B, tmp_path: Path
) -> None:
    spec = _checkpointers(tmp_path, None)
    record = tmp_path / "owned.sqlite"
    mark = f"lg.{uuid.uuid4().hex[:10]}"
    command = f"{server.mark(mark)}; sleep 3; echo finished"
    thread = f"t-{uuid.uuid4().hex[:8]}"
    first = _worker(server, "start", spec, record, thread, command, tmp_path / "0.json")
    _kill_once_marked(server, first, mark)
    again = _finished(
        _worker(server, "again", spec, record, thread, command, tmp_path / "1.json"),
        tmp_path / "1.json",
    )
    (result,) = again["results"]
    assert result["status"] == "ok"
    assert result["deduplicated"] is True
    assert result["stdout"] == "finished\n"
    assert server.truth().marked(mark) == 1


def test_c2_a_deep_agents_harness_killed_mid_command_resumes_without_relaunching(
    server: LocalE2B, tmp_path: Path
) -> None:
    """Deep Agents' ``execute`` gets no call id: the backend's key (the thread,
    the tool call id LangChain's callback reports, the command's place in the
    call) is the same in the process that resumes."""
    spec = _checkpointers(tmp_path, None)
    record = tmp_path / "owned.sqlite"
    mark = f"da.{uuid.uuid4().hex[:10]}"
    command = f"{server.mark(mark)}; sleep 3; echo finished"
    thread = f"t-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "0.json"
    first = _worker(server, "start", spec, record, thread, command, out, "deepagents")
    _kill_once_marked(server, first, mark)
    out = tmp_path / "1.json"
    again = _finished(
        _worker(server, "again", spec, record, thread, command, out, "deepagents"), out
    )
    (result,) = again["results"]
    assert result["text"].startswith("finished\n")
    assert result["artifact"] == {"truncated": False, "exit_code": 0}
    assert server.truth().marked(mark) == 1


@pytest.mark.parametrize("flavor", ["langchain-gated", "deepagents-gated"])
@pytest.mark.parametrize(("first", "second"), [("reject", "approve"), ("approve", "reject")])
def test_c8_c5_sandrails_middleware_first_decision_stands_across_processes_and_a_copy(
    server: LocalE2B, tmp_path: Path, flavor: str, first: str, second: str
) -> None:
    """sandrail's ``human_in_the_loop`` middleware (LangChain's, and Deep
    Agents' ``interrupt_on`` in its place), three processes on one SQLite
    record: one asks, one answers on the thread's checkpoint file, one
    answers the other way on a copy of that file taken before the first
    answer. The first decision stands: rejected first, nothing ever runs;
    approved first, the command runs once and the late rejection is told as
    what ran (``uncertain``), never "not executed"."""
    import shutil

    checkpoints = tmp_path / "checkpoints.sqlite"
    copied = tmp_path / "copy.sqlite"
    record = tmp_path / "owned.sqlite"
    mark = f"hitl.{uuid.uuid4().hex[:10]}"
    command = f"{server.mark(mark)}; echo gated"
    thread = f"t-{uuid.uuid4().hex[:8]}"

    def run(mode: str, spec: Path, name: str) -> dict[str, Any]:
        out = tmp_path / f"{name}.json"
        return _finished(
            _worker(server, mode, f"sqlite:{spec}", record, thread, command, out, flavor), out
        )

    asked = run("start", checkpoints, "asked")
    assert len(asked["interrupts"]) == 1
    shutil.copy(checkpoints, copied)
    run(first, checkpoints, "first")
    late = run(second, copied, "late")
    assert server.truth().marked(mark) == (1 if first == "approve" else 0)
    (shown,) = late["results"]
    told = json.loads(shown["text"]) if flavor.startswith("deepagents") else shown
    assert told["error_type"] == "approval_rejected"
    assert told["status"] == ("uncertain" if first == "approve" else "error")
