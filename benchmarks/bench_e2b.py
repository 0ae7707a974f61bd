"""E2B through the SDK on local-e2b: round trips per call, exit-to-result
latency, and the bytes a big output moves out of the sandbox.

SDK round trips per call are counted at the server; the latency is from a
command's exit to its result; bytes moved are every byte the server sent
for the call's envd requests (status lines, headers, bodies), counted by
the server.

Round trips are the HTTP requests the server saw for the sandbox. Latency:
the command prints the wall-clock time it ends at (``date +%s.%N``, its last
act); the caller notes when the result reaches it. Baselines, on the same
server in the same run: a bare ``commands.run`` of the same command (what the
SDK alone costs), and what the reference port does: start the command, then
read its status every 50 ms until it has ended (a polling loop across the
network). sandrail waits inside the sandbox instead.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

import sandrail
from benchmarks._common import row
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B, serve

GOAL = (
    "≤ 3 SDK round trips per warm foreground run_command, 1 per read_command_output; "
    "the foreground wait adds ≤ 5 ms to a bare commands.run; a foreground run printing "
    "16 MiB (max_output_bytes=24000, no artifact store) moves ≤ 2 × the budget"
)
BUDGET = 24_000
_BIG = 16 * 1024 * 1024
_BIG_OUTPUTS = {
    "16 MiB of text": f"yes 'compiled unit' | head -c {_BIG}",
    "16 MiB not text (bytes ≥ 0x80)": f"head -c {_BIG} /dev/zero | tr '\\0' '\\377'",
}

_EXIT_STAMP = "sleep 0.3; date +%s.%N"


class _Session:
    def __init__(self, backend: E2BBackend) -> None:
        self.session = f"bench-{uuid.uuid4().hex[:8]}"
        self.port = sandrail.command_tools(
            backend=backend,
            session_id=self.session,
            owner=sandrail.AgentOwner(agent_id="agent"),
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
            max_output_bytes=BUDGET,
        )
        self.calls = 0

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        self.calls += 1
        request = sandrail.ToolRequest(
            call=sandrail.ToolCall(name=name, call_id=f"c{self.calls}", arguments=arguments),
            operation_key=f"op-{self.calls}",
            session_id=self.session,
            definition=self.port.definition(name),
            identity=sandrail.AgentIdentity(agent_id="agent"),
        )
        result = await self.port.execute(request)
        if result.status != "ok":
            raise AssertionError(f"{name} failed: {dict(result.content)}")
        return result


def _trips(server: LocalE2B, sandbox_id: str) -> int:
    return sum(1 for request in server.truth().requests if request.sandbox_id == sandbox_id)


async def _moved(server: LocalE2B, sandbox_id: str, since: int) -> int:
    """Bytes the server sent for the sandbox's envd requests after the
    ``since``-th request, once every one of them is answered (bounded)."""
    for _ in range(500):
        mine = [
            request
            for request in server.truth().requests[since:]
            if request.sandbox_id == sandbox_id and request.listener == "envd"
        ]
        if all(request.sent_bytes for request in mine):
            break
        await asyncio.sleep(0.01)
    return sum(request.sent_bytes for request in mine)


async def _big_outputs(server: LocalE2B, session: _Session, sandbox_id: str) -> dict[str, float]:
    """Bytes moved (and round trips) for each big foreground output."""
    figures: dict[str, float] = {}
    for label, command in _BIG_OUTPUTS.items():
        since = len(server.truth().requests)
        result = await session.call("run_command", {"command": command})
        if result.content["stdout_bytes"] != _BIG:
            raise AssertionError(f"{label}: printed {result.content['stdout_bytes']} bytes")
        figures[f"{label} bytes"] = await _moved(server, sandbox_id, since)
        figures[f"{label} trips"] = sum(
            1 for request in server.truth().requests[since:] if request.sandbox_id == sandbox_id
        )
    return figures


async def _measure(server: LocalE2B, rounds: int) -> dict[str, float]:
    import e2b

    async with E2BBackend(**server.sdk_options) as backend:
        session = _Session(backend)
        warm = await session.call("run_command", {"command": "true"})  # sandbox + launcher
        sandbox_id = warm.content["sandbox_id"]
        before = _trips(server, sandbox_id)
        await session.call("run_command", {"command": "echo warm"})
        foreground_trips = _trips(server, sandbox_id) - before
        launched = await session.call("run_command", {"command": "sleep 30", "background": True})
        before = _trips(server, sandbox_id)
        await session.call("read_command_output", {"task_id": launched.content["task_id"]})
        read_trips = _trips(server, sandbox_id) - before
        await session.call("stop_command", {"task_id": launched.content["task_id"]})
        big = await _big_outputs(server, session, sandbox_id)

        bare_box = await e2b.AsyncSandbox.connect(sandbox_id, **server.sdk_options)
        await bare_box.commands.run("true")  # warm its connection too
        ours: list[float] = []
        bare: list[float] = []
        polled: list[float] = []
        polled_trips: list[int] = []
        for round_ in range(rounds):
            # Alternate which goes first, so drift in the machine's load
            # falls on both alike; each round gives one paired difference.
            for which in ("ours", "bare") if round_ % 2 else ("bare", "ours"):
                if which == "ours":
                    result = await session.call("run_command", {"command": _EXIT_STAMP})
                    ours.append(time.time() - float(result.content["stdout"]))
                else:
                    done = await bare_box.commands.run(_EXIT_STAMP, timeout=60)
                    bare.append(time.time() - float(done.stdout))

            started = await session.call(
                "run_command", {"command": _EXIT_STAMP, "background": True}
            )
            task = started.content["task_id"]
            before = _trips(server, sandbox_id)
            while True:
                page = await session.call("read_command_output", {"task_id": task})
                if page.content["command_status"] != "running":
                    break
                await asyncio.sleep(0.05)
            polled.append(time.time() - float(page.content["stdout"]))
            polled_trips.append(_trips(server, sandbox_id) - before)
    return {
        "foreground_trips": foreground_trips,
        "read_trips": read_trips,
        "ours_ms": statistics.median(ours) * 1e3,
        "bare_ms": statistics.median(bare) * 1e3,
        "added_ms": statistics.median(a - b for a, b in zip(ours, bare, strict=True)) * 1e3,
        "polled_ms": statistics.median(polled) * 1e3,
        "polled_trips": statistics.median(polled_trips),
        **big,
    }


def run(quick: bool) -> list[dict[str, Any]]:
    with serve(signal_scope="process") as server:
        figures = asyncio.run(_measure(server, 4 if quick else 25))
    trips, latency = "SDK round trips (at the server)", "exit → result latency"
    return [
        row(
            trips,
            "foreground run_command, warm sandbox",
            "count",
            figures["foreground_trips"],
            "trips",
        ),
        row(trips, "read_command_output", "count", figures["read_trips"], "trips"),
        row(
            trips,
            "50 ms polling loop, per 0.3 s command",
            "count",
            figures["polled_trips"],
            "trips",
        ),
        row(latency, "bare commands.run (SDK alone)", "median", figures["bare_ms"], "ms"),
        row(latency, "50 ms polling loop (reference port)", "median", figures["polled_ms"], "ms"),
        row(
            latency,
            "in-sandbox wait (sandrail)",
            "median",
            figures["ours_ms"],
            "ms",
            figures["polled_ms"] / figures["ours_ms"],
        ),
        row(
            latency,
            "added by sandrail to a bare commands.run (paired)",
            "median",
            figures["added_ms"],
            "ms",
        ),
        *(
            row(
                "bytes moved from the sandbox (at the server)",
                f"foreground run printing {label}, max_output_bytes {BUDGET}",
                metric,
                value,
                unit,
            )
            for label in _BIG_OUTPUTS
            for metric, value, unit in (
                ("bytes", figures[f"{label} bytes"], "bytes"),
                ("÷ budget (goal ≤ 2)", figures[f"{label} bytes"] / BUDGET, "× budget"),
            )
        ),
        *(
            row(
                trips,
                f"foreground run printing {label}",
                "count",
                figures[f"{label} trips"],
                "trips",
            )
            for label in _BIG_OUTPUTS
        ),
    ]
