"""Replay throughput: a long recorded session re-run from its cassette, next to
the simulator running the same session live.

The session mixes foreground runs, background launches with reads, stops and
status checks. The live run goes through a port on the simulator; the replay
loads the cassette (parsing included), rebuilds the port from its header and
re-runs every request, matching each effect and each result. Throughput is
effects per second; the ratio is each row over live. The ceiling row runs the
same port and core with every effect answered from the recording in order,
nothing loaded, matched or checked: what replay would be if its own work cost
nothing.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sandrail
from benchmarks._common import row
from sandrail._replay_file import replay_file, replay_port
from sandrail.interpreters._cassette import Cassette, decode_request
from sandrail.interpreters.replay import Recorder, load_cassette
from sandrail.interpreters.simulator import Script, Simulator

GOAL = (
    "P7: replay ≥ 2× the live simulator. Replay runs the whole port and core and checks every "
    "effect, so it can be no faster than the ceiling row (the port and core answered with "
    "no loading or matching): past that, only a cheaper port and core (P2) moves it"
)

_SCRIPTS = {
    "build": Script.prints("compiled\n" * 200, stderr="warning: x\n", duration=2),
    "serve": Script.hangs("listening\n", children=2),
}


def _session(backend: Any, calls: int, recorder: Recorder | None = None) -> int:
    """Run the session; returns how many tool calls it made."""
    port = sandrail.command_tools(
        backend=backend,
        session_id="bench",
        owner=sandrail.AgentOwner(agent_id="agent"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        max_output_bytes=2_000,
    )
    if recorder is not None:
        recorder.attach(port)
    identity = sandrail.AgentIdentity(agent_id="agent")
    made = 0

    def call(name: str, arguments: dict[str, Any], key: str) -> None:
        nonlocal made
        made += 1
        port.execute_sync(
            sandrail.ToolRequest(
                call=sandrail.ToolCall(name=name, call_id=f"c{made}", arguments=arguments),
                operation_key=key,
                session_id="bench",
                definition=port.definition(name),
                identity=identity,
                cancel=sandrail.CancelToken(),
            )
        )

    for i in range(calls // 5):
        call("run_command", {"command": "build"}, f"fg-{i}")
        call("run_command", {"command": "serve", "background": True}, f"bg-{i}")
        task = sandrail.task_id("bench", sandrail.AgentOwner(agent_id="agent"), f"bg-{i}")
        call("read_command_output", {"task_id": task}, f"read-{i}")
        call("stop_command", {"task_id": task}, f"stop-{i}")
        call("sandbox_status", {}, f"status-{i}")
    return made


class _Answers:
    """A layered backend that answers each call's effects with the recorded
    outcomes, in order, matching nothing: the port and core alone, what a
    replay would cost if loading and matching were free."""

    def __init__(self, cassette: Cassette) -> None:
        self._calls = iter(cassette.calls)

    def __call__(self, effect: Any) -> Any:
        raise TypeError("answers through open_call")

    def open_call(self, request: Any, answer: Any) -> Callable[[Any], Any]:
        steps = iter(next(self._calls).steps)
        return lambda effect: next(steps).answer()


def _ceiling(cassette: Cassette) -> float:
    answers = _Answers(cassette)
    port = replay_port(cassette, answers)  # type: ignore[arg-type]
    requests = [decode_request(call.request, port.definitions) for call in cassette.calls]
    began = time.perf_counter()
    for request in requests:
        port.execute_sync(request)
    return time.perf_counter() - began


def _timed(work: Callable[[], Any]) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def run(quick: bool) -> list[dict[str, Any]]:
    calls = 200 if quick else 1_000
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "session.jsonl"
        with Recorder(Simulator(scripts=_SCRIPTS), path) as recorder:
            _session(recorder, calls, recorder)
        cassette = load_cassette(path)
        effects = cassette.step_count

        # The best of a few runs of each, interleaved, so a busy machine
        # slows every variant alike.
        best = dict.fromkeys(("live", "replay", "load", "loaded", "ceiling"), float("inf"))
        for _ in range(1 if quick else 5):
            times = {
                "live": _timed(lambda: _session(Simulator(scripts=_SCRIPTS), calls)),
                "replay": _timed(lambda: replay_file(path)),
                "load": _timed(lambda: load_cassette(path)),
                "loaded": _timed(lambda: replay_file(cassette)),
                "ceiling": _ceiling(cassette),
            }
            best = {name: min(best[name], times[name]) for name in best}
        size = path.stat().st_size

    def rate(name: str) -> float:
        return effects / best[name]

    live = rate("live")
    bench = f"session of {calls} calls"
    return [
        row(bench, "simulator, live", "effects/s", live, "effects/s"),
        row(
            bench,
            "replay from cassette (P7)",
            "effects/s",
            rate("replay"),
            "effects/s",
            rate("replay") / live,
        ),
        row(
            bench,
            "replay, cassette already loaded",
            "effects/s",
            rate("loaded"),
            "effects/s",
            rate("loaded") / live,
        ),
        row(
            bench,
            "ceiling: port + core, answers unmatched",
            "effects/s",
            rate("ceiling"),
            "effects/s",
            rate("ceiling") / live,
        ),
        row(bench, "loading the cassette", "s", best["load"], "s"),
        row(bench, "cassette", "size", size / 1024, "KiB"),
        row(bench, "cassette", "effects", effects, "effects"),
    ]
