"""Tracing's price: trivial foreground run_command calls per second on the
simulator, with no OpenTelemetry provider configured and debug logging off
(what every port does by default), against the same port with the tracing
hook taken out (the baseline, same run), and with an SDK tracer and meter
provider exporting to memory (what tracing costs when it is on).

The rows alternate, best of several rounds each, so a machine busy with
other work weighs on both sides alike.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import sandrail
from benchmarks._common import row
from sandrail._telemetry import OFF, Telemetry
from sandrail.core import Redactions
from sandrail.interpreters.simulator import Simulator

GOAL = "tracing without a provider: no measurable slowdown (ratio ≈ 1.00 to the port without it)"


class _Untraced:
    """The port without the tracing hook: every call's trace is the no-op,
    with no provider lookup at all."""

    def begin(self, *args: Any) -> Any:
        return OFF


def _no_redactions() -> Redactions:
    return Redactions(frozenset())


def _port(**options: Any) -> sandrail.ToolPort:
    return sandrail.command_tools(
        backend=Simulator(),
        session_id="bench",
        owner=sandrail.AgentOwner(agent_id="agent"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        **options,
    )


def _rate(port: sandrail.ToolPort, count: int, tag: str) -> float:
    definition = port.definition("run_command")
    identity = sandrail.AgentIdentity(agent_id="agent")
    requests = [
        sandrail.ToolRequest(
            call=sandrail.ToolCall(
                name="run_command", call_id=f"c{i}", arguments={"command": "true"}
            ),
            operation_key=f"{tag}-{i}",
            session_id="bench",
            definition=definition,
            identity=identity,
        )
        for i in range(count)
    ]
    gc.collect()
    began = time.perf_counter()
    for request in requests:
        result = port.execute_sync(request)
    elapsed = time.perf_counter() - began
    if result.status != "ok":
        raise AssertionError(f"benchmark call failed: {result.content}")
    return count / elapsed


def _hook_seconds(port: sandrail.ToolPort, count: int) -> float:
    """Seconds per call that the tracing hook takes with no provider: its
    ``begin`` (the provider lookups), ``step`` and ``end``."""
    definition = port.definition("run_command")
    request = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c", arguments={"command": "true"}),
        operation_key="hook",
        session_id="bench",
        definition=definition,
        identity=sandrail.AgentIdentity(agent_id="agent"),
    )
    result = sandrail.ToolResult(status="ok", content={})
    # What a port without a provider holds: a default Telemetry.
    telemetry, names = Telemetry(), frozenset(d.name for d in port.definitions)
    began = time.perf_counter()
    for _ in range(count):
        trace = telemetry.begin(request, names, _no_redactions)
        trace.step(_port)
        trace.end(result)
    return (time.perf_counter() - began) / count


def _sdk_options() -> dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return {"tracer_provider": tracer_provider, "meter_provider": meter_provider}


def run(quick: bool) -> list[dict[str, Any]]:
    count = 1_000 if quick else 4_000
    rounds = 2 if quick else 5
    default = _port()
    untraced = sandrail.ToolPort(
        settings=default.settings,
        backend=Simulator(),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        resolve_owned_command=None,
        artifacts=None,
        telemetry=_Untraced(),  # type: ignore[arg-type]
    )
    try:
        traced: sandrail.ToolPort | None = _port(**_sdk_options())
    except ImportError:  # the SDK is a test dependency only
        traced = None
    _rate(default, 200, "warm")
    best = {"untraced": 0.0, "default": 0.0, "traced": 0.0}
    for n in range(rounds):
        best["untraced"] = max(best["untraced"], _rate(untraced, count, f"u{n}"))
        best["default"] = max(best["default"], _rate(default, count, f"d{n}"))
        if traced is not None:
            best["traced"] = max(best["traced"], _rate(traced, count, f"t{n}"))
    bench = "run_command throughput, tracing"
    rows = [
        row(
            bench,
            "port without the tracing hook (baseline)",
            "calls/s",
            best["untraced"],
            "calls/s",
        ),
        row(
            bench,
            "port, no provider configured, debug log off",
            "calls/s",
            best["default"],
            "calls/s",
            best["default"] / best["untraced"],
        ),
    ]
    # The hook alone, timed without the call around it: steadier than the
    # difference of two throughputs on a busy machine.
    hook = _hook_seconds(default, count * 10)
    rows.append(
        row(
            bench,
            "the hook alone, no provider (share of one baseline call)",
            "time per call",
            hook * 1e6,
            "µs",
            1.0 - hook * best["untraced"],
        )
    )
    if traced is not None:
        rows.append(
            row(
                bench,
                "port, SDK tracer + meter to memory",
                "calls/s",
                best["traced"],
                "calls/s",
                best["traced"] / best["untraced"],
            )
        )
    return rows
