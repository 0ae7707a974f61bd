"""The E2B interpreter on the local stand-in (real bash, no cloud): SDK round
trips per call, and the latency from a command's exit to its result.

Round trips are counted by the stand-in (one per SDK call). Latency: the
command prints the wall-clock time it ends at; the harness notes when the
result reaches it. The baseline is what the reference port does: start the
command, then read its status every 50 ms until it has ended (a fixed
polling loop across the network); sandrail waits inside the sandbox instead.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import sandrail
from benchmarks._common import row
from sandrail.interpreters.e2b import E2BBackend
from tests.e2b_standin import StandInSDK

GOAL = "≤ 3 SDK round trips per warm foreground run_command, 1 per read_command_output"

_EXIT_STAMP = "sleep 0.3; python3 -c 'import time; print(time.time())'"


class _Session:
    def __init__(self, sdk: StandInSDK) -> None:
        self.port = sandrail.command_tools(
            backend=E2BBackend(sdk=sdk),
            session_id="bench",
            owner=sandrail.AgentOwner(agent_id="agent"),
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
        )
        self.calls = 0

    async def call(self, name: str, arguments: dict[str, Any], key: str | None = None) -> Any:
        self.calls += 1
        request = sandrail.ToolRequest(
            call=sandrail.ToolCall(name=name, call_id=f"c{self.calls}", arguments=arguments),
            operation_key=key or f"op-{self.calls}",
            session_id="bench",
            definition=self.port.definition(name),
            identity=sandrail.AgentIdentity(agent_id="agent"),
        )
        result = await self.port.execute(request)
        if result.status != "ok":
            raise AssertionError(f"{name} failed: {dict(result.content)}")
        return result


async def _measure(rounds: int) -> dict[str, float]:
    sdk = StandInSDK()
    try:
        session = _Session(sdk)
        await session.call("run_command", {"command": "true"})  # warm: sandbox + launcher
        before = len(sdk.calls)
        await session.call("run_command", {"command": "echo warm"})
        foreground_trips = len(sdk.calls) - before
        launched = await session.call("run_command", {"command": "sleep 30", "background": True})
        task = launched.content["task_id"]
        before = len(sdk.calls)
        await session.call("read_command_output", {"task_id": task})
        read_trips = len(sdk.calls) - before
        await session.call("stop_command", {"task_id": task})

        ours, polled, polled_trips = [], [], []
        for _ in range(rounds):
            result = await session.call("run_command", {"command": _EXIT_STAMP})
            ours.append(time.time() - float(result.content["stdout"]))

            started = await session.call(
                "run_command", {"command": _EXIT_STAMP, "background": True}
            )
            task = started.content["task_id"]
            before = len(sdk.calls)
            while True:
                page = await session.call("read_command_output", {"task_id": task})
                if page.content["status"] != "running":
                    break
                await asyncio.sleep(0.05)
            polled.append(time.time() - float(page.content["stdout"]))
            polled_trips.append(len(sdk.calls) - before)
        return {
            "foreground_trips": foreground_trips,
            "read_trips": read_trips,
            "ours_ms": statistics.median(ours) * 1e3,
            "polled_ms": statistics.median(polled) * 1e3,
            "polled_trips": statistics.median(polled_trips),
        }
    finally:
        sdk.close()


def run(quick: bool) -> list[dict[str, Any]]:
    figures = asyncio.run(_measure(3 if quick else 10))
    trips, latency = "SDK round trips", "exit → result latency"
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
        row(latency, "50 ms polling loop (baseline)", "median", figures["polled_ms"], "ms"),
        row(
            latency,
            "in-sandbox wait (sandrail)",
            "median",
            figures["ours_ms"],
            "ms",
            figures["polled_ms"] / figures["ours_ms"],
        ),
    ]
