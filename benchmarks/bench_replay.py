"""Replay throughput: a long recorded session re-run from its cassette, next to
the simulator running the same session live.

The session mixes foreground runs, background launches with reads, stops and
status checks. The live run goes through a port on the simulator; the replay
loads the cassette (parsing included), rebuilds the port from its header and
re-runs every request, matching each effect and each result. Throughput is
effects per second; the ratio is replay over live.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import sandrail
from benchmarks._common import row
from sandrail.interpreters.replay import Recorder, load_cassette, replay_file
from sandrail.interpreters.simulator import Script, Simulator

GOAL = (
    "replay ≥ 1× the live simulator (issue 12); replay runs the whole core and checks every "
    "effect, so its ceiling is the live run without the simulator's own cost"
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


def run(quick: bool) -> list[dict[str, Any]]:
    calls = 200 if quick else 1_000
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "session.jsonl"
        with Recorder(Simulator(scripts=_SCRIPTS), path) as recorder:
            _session(recorder, calls, recorder)
        effects = sum(len(call.steps) for call in load_cassette(path).calls)

        # The best of a few runs of each, alternating, so a busy machine
        # slows both sides alike.
        live = replayed = float("inf")
        for _ in range(1 if quick else 3):
            began = time.perf_counter()
            _session(Simulator(scripts=_SCRIPTS), calls)
            live = min(live, time.perf_counter() - began)

            began = time.perf_counter()
            replay_file(path)
            replayed = min(replayed, time.perf_counter() - began)
        size = path.stat().st_size

    live_rate, replay_rate = effects / live, effects / replayed
    bench = f"session of {calls} calls"
    return [
        row(bench, "simulator, live", "effects/s", live_rate, "effects/s"),
        row(
            bench,
            "replay from cassette",
            "effects/s",
            replay_rate,
            "effects/s",
            replay_rate / live_rate,
        ),
        row(bench, "cassette", "size", size / 1024, "KiB"),
        row(bench, "cassette", "effects", effects, "effects"),
    ]
