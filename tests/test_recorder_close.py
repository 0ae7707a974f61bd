"""Closing a Recorder while a call it records is still running, and calling
through one already closed: the call's result is the one an unrecorded call
gets, and the cassette loses nothing (an outside attack found the call ended
``uncertain`` and its result missing from the file)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import sandrail
from sandrail import replay_file
from sandrail.core import FatalInterpreterError, Start
from sandrail.interpreters.replay import Recorder, RecorderBusyError, RecorderClosedError
from sandrail.interpreters.simulator import Simulator
from tests.embed_rig import command_toolset


class _HeldAtStart:
    """A simulator that holds the first ``Start`` until ``release`` is set."""

    def __init__(self) -> None:
        self.sim = Simulator()
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, effect: Any) -> Any:
        if isinstance(effect, Start) and not self.started.is_set():
            self.started.set()
            assert self.release.wait(10)
        return self.sim(effect)


class _AsyncHeldAtStart:
    """The async form: the first ``Start`` awaits ``release``."""

    def __init__(self) -> None:
        self.sim = Simulator()
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, effect: Any) -> Any:
        if isinstance(effect, Start) and not self.started.is_set():
            self.started.set()
            await self.release.wait()
        return self.sim(effect)


def _toolset(recorder: Recorder) -> sandrail.Toolset:
    return command_toolset(recorder)


def _unrecorded_result() -> dict[str, Any]:
    toolset = _toolset(Recorder(Simulator(), _Discard()))
    return toolset.call_sync(
        "run_command", {"command": "echo hi"}, call_id="c1", operation_key="k1"
    ).to_dict()


class _Discard:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def test_c6_closing_a_recorder_from_another_thread_under_a_running_call_is_refused(
    tmp_path: Path,
) -> None:
    """Closed under a call past its launch, the recorder made the call end
    ``uncertain`` (its last writes failed) and left its result out of the
    file. Now close refuses, nothing closed, and the call ends as it would
    unrecorded; closed after it, the cassette replays whole."""
    path = tmp_path / "busy.jsonl"
    inner = _HeldAtStart()
    recorder = Recorder(inner, path)
    toolset = _toolset(recorder)
    results: list[sandrail.ToolResult] = []
    worker = threading.Thread(
        target=lambda: results.append(
            toolset.call_sync(
                "run_command", {"command": "echo hi"}, call_id="c1", operation_key="k1"
            )
        )
    )
    worker.start()
    assert inner.started.wait(10)
    with pytest.raises(RecorderBusyError, match="1 call is still being recorded"):
        recorder.close()
    inner.release.set()
    worker.join(10)
    assert results[0].to_dict() == _unrecorded_result()
    recorder.close()
    report = replay_file(path)
    assert (report.calls, report.complete) == (1, True)


def test_c11_closing_a_recorder_from_a_task_while_an_async_call_awaits_is_refused(
    tmp_path: Path,
) -> None:
    """The async form: another task closes the recorder while a call awaits
    its backend; close refuses instead of ending the call ``uncertain``."""
    path = tmp_path / "busy-async.jsonl"
    inner = _AsyncHeldAtStart()
    recorder = Recorder(inner, path)
    toolset = _toolset(recorder)

    async def session() -> sandrail.ToolResult:
        call = asyncio.create_task(
            toolset.call("run_command", {"command": "echo hi"}, call_id="c1", operation_key="k1")
        )
        await inner.started.wait()
        with pytest.raises(RecorderBusyError, match="still being recorded"):
            recorder.close()
        inner.release.set()
        return await call

    result = asyncio.run(session())
    assert result.to_dict() == _unrecorded_result()
    recorder.close()
    assert replay_file(path).calls == 1


def test_c5_a_call_through_a_closed_recorder_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    """A call begun after close cannot be recorded: it is stopped with a
    setup error before any effect, not run unrecorded (nor written after
    the end line of a stream the recorder does not own)."""
    path = tmp_path / "closed.jsonl"
    inner = _HeldAtStart()
    inner.release.set()
    recorder = Recorder(inner, path)
    toolset = _toolset(recorder)
    toolset.call_sync("run_command", {"command": "echo one"}, call_id="c1", operation_key="k1")
    recorder.close()
    inner.started.clear()
    with pytest.raises(RecorderClosedError, match="this Recorder is closed"):
        toolset.call_sync("run_command", {"command": "echo two"}, call_id="c2", operation_key="k2")
    assert not inner.started.is_set()
    assert replay_file(path).calls == 1


def test_c5_a_call_stopped_by_a_fatal_error_does_not_keep_the_recorder_busy(
    tmp_path: Path,
) -> None:
    """A call that ends without a result (a fatal setup error the port lets
    through) is over for the recorder too: close does not wait for it."""

    def fatal_at_start(effect: Any) -> Any:
        if isinstance(effect, Start):
            raise FatalInterpreterError("the backend is misconfigured")
        return sim(effect)

    sim = Simulator()
    recorder = Recorder(fatal_at_start, tmp_path / "fatal.jsonl")
    toolset = _toolset(recorder)
    with pytest.raises(FatalInterpreterError, match="misconfigured"):
        toolset.call_sync("run_command", {"command": "echo hi"}, call_id="c1", operation_key="k1")
    recorder.close()
    assert (tmp_path / "fatal.jsonl").read_text(encoding="utf-8").endswith('"calls": 1}\n')
