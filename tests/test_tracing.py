"""Traces: one OpenTelemetry span per tool call named and
attributed by the GenAI semantic conventions, each effect step an event (so
an ``uncertain`` shows which step and which fault), the
``gen_ai.execute_tool.duration`` histogram, the same steps through the
``sandrail`` logger at debug level, and no env value in any of them (C17)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sandrail
from sandrail import ErrorCode
from sandrail._telemetry import OFF, Telemetry
from sandrail.core import Delivery, EffectFailure
from sandrail.interpreters.simulator import FaultKind, Script, Simulator
from tests.rig import Rig
from tests.test_adversarial import one_fault

SECRET = "hunter2-swordfish"


class Telemetered:
    """A tracer and meter provider that keep what they get in memory."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])

    def options(self) -> dict[str, Any]:
        return {"tracer_provider": self.tracer_provider, "meter_provider": self.meter_provider}

    def finished(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.spans.get_finished_spans())

    def durations(self) -> list[Any]:
        data = self.metrics.get_metrics_data()
        points = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "gen_ai.execute_tool.duration":
                        points.extend(metric.data.data_points)
        return points


@pytest.fixture
def otel() -> Iterator[Telemetered]:
    telemetered = Telemetered()
    yield telemetered
    telemetered.tracer_provider.shutdown()
    telemetered.meter_provider.shutdown()


def test_one_span_per_call_named_and_attributed_by_the_genai_conventions(
    otel: Telemetered,
) -> None:
    rig = Rig(**otel.options())
    result = rig.run("run_command", {"command": "echo hi"}, call_id="call-7")
    assert result.status == "ok"
    (span,) = otel.finished()
    assert span.name == "execute_tool run_command"
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "run_command"
    assert attributes["gen_ai.tool.call.id"] == "call-7"
    assert attributes["sandrail.operation_key"] == "op-1"
    assert attributes["sandrail.session_id"] == rig.session_id
    assert attributes["sandrail.task_id"] == rig.task_id()
    assert attributes["sandrail.status"] == "ok"
    assert attributes["sandrail.executed"] is True
    assert "error.type" not in attributes
    steps = [event.name for event in span.events]
    assert steps[:2] == ["Authorize", "CheckAuthority"]
    assert {"Ensure", "RememberOwned", "Start", "Wait", "Read"} <= set(steps)
    (point,) = otel.durations()
    assert point.count == 1
    assert dict(point.attributes)["gen_ai.tool.name"] == "run_command"


def test_an_uncertain_span_shows_which_step_and_which_fault(otel: Telemetered) -> None:
    rig = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), **otel.options())
    result = rig.run("run_command", {"command": "echo hi"})
    assert result.status == "uncertain"
    (span,) = otel.finished()
    attributes = dict(span.attributes or {})
    assert attributes["sandrail.status"] == "uncertain"
    assert attributes["error.type"] == result.content["error_type"]
    assert "sandrail.executed" not in attributes or attributes["sandrail.executed"] is True
    (failed,) = [
        e for e in span.events if dict(e.attributes or {}).get("sandrail.outcome") == "failure"
    ]
    assert failed.name == "Start"
    assert dict(failed.attributes or {})["sandrail.failure.delivery"] == "maybe_sent"
    assert span.status.status_code.name == "ERROR"


def test_a_refused_call_has_its_span_too(otel: Telemetered) -> None:
    """A refusal before anything runs: a span with ``error.type`` and
    ``executed: false``; a tool the port does not have is not named."""
    rig = Rig(**otel.options())
    refused = rig.run("run_command", {"command": "   "})
    assert refused.status == "error"
    request = rig.request("no_such_tool", {}, call_id="c2")
    assert rig.port.execute_sync(request).status == "error"
    first, second = otel.finished()
    assert dict(first.attributes or {})["error.type"] == ErrorCode.COMMAND_REQUIRED.value
    assert dict(first.attributes or {})["sandrail.executed"] is False
    assert second.name == "execute_tool"
    assert "gen_ai.tool.name" not in dict(second.attributes or {})


def test_the_same_steps_go_to_the_sandrail_logger_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST))
    with caplog.at_level(logging.DEBUG, logger="sandrail"):
        rig.run("run_command", {"command": "echo hi"})
    lines = [record.getMessage() for record in caplog.records if record.name == "sandrail"]
    assert any("Ensure -> SandboxReady" in line for line in lines), lines
    assert any("Start failed (maybe_sent)" in line for line in lines), lines
    assert any(line.startswith("run_command: uncertain") for line in lines), lines


def test_c17_no_env_value_reaches_a_span_an_event_a_metric_or_a_log(
    otel: Telemetered, caplog: pytest.LogCaptureFixture
) -> None:
    """An env value printed by the command, echoed by a failing backend's
    detail, or put in the call id (refused): never in a span name,
    attribute, event, metric or log line."""

    def leaky(effect: Any) -> Any:
        if type(effect).__name__ == "Wait":
            raise EffectFailure(Delivery.MAYBE_SENT, f"timed out waiting; env was {SECRET}")
        return sim(effect)

    rig = Rig(scripts={"printenv": Script.prints(f"{SECRET}\n")}, **otel.options())
    sim = rig.sim
    leaking = sandrail.command_tools(
        backend=leaky,
        session_id=rig.session_id,
        owner=rig.owner,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        **otel.options(),
    )
    with caplog.at_level(logging.DEBUG, logger="sandrail"):
        env = {"API_TOKEN": SECRET}
        rig.run("run_command", {"command": "printenv", "env": env})
        rig.run("run_command", {"command": "printenv", "env": env}, call_id=SECRET)
        request = rig.request(
            "run_command",
            {"command": "printenv", "env": env},
            key="op-2",
            definition=leaking.definition("run_command"),
        )
        assert leaking.execute_sync(request).status == "uncertain"
    seen = [record.getMessage() for record in caplog.records]
    for span in otel.finished():
        seen += [span.name, repr(dict(span.attributes or {}))]
        seen += [f"{e.name} {dict(e.attributes or {})}" for e in span.events]
    seen += [repr(dict(point.attributes)) for point in otel.durations()]
    assert len(otel.finished()) == 3
    assert not [text for text in seen if SECRET in text]


def test_no_provider_and_no_debug_log_costs_nothing_per_effect() -> None:
    """With no provider configured (this test process sets none) and debug
    logging off, a call's trace is the shared no-op, and the interpreter is
    handed back untouched."""
    telemetry = Telemetry()
    rig = Rig()
    request = rig.request("run_command", {"command": "echo hi"})
    trace = telemetry.begin(request, frozenset({"run_command"}), lambda: None)  # type: ignore[arg-type, return-value]
    assert trace is OFF

    def interpret(effect: Any) -> None:
        return None

    assert trace.step(interpret) is interpret


def test_spans_go_to_the_global_provider_unless_one_is_given() -> None:
    """In a process of its own (the global provider can be set once): the
    global provider gets one span per call of the campaign's workloads (the
    ports are given none), and the campaign's env secret is in none of them."""
    script = textwrap.dedent(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from sandrail._campaign import run_workload, workloads
        from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan
        from sandrail.testing._commands import SECRET

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        plans = [FaultPlan(), FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),))]
        calls = 0
        for workload in workloads("agent") + workloads("native"):
            for plan in plans:
                calls += len(run_workload(workload, plan).world.calls)
        spans = exporter.get_finished_spans()
        text = " ".join(
            f"{s.name} {dict(s.attributes)} {[(e.name, dict(e.attributes)) for e in s.events]}"
            for s in spans
        )
        assert len(spans) == calls, (len(spans), calls)
        assert SECRET not in text
        print("spans", len(spans))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) > 50


# ---------------------------------------------------------------------------
# Every span carries the call's identity; the backend's spans nest under it


def test_c9_a_call_refused_before_any_side_effect_still_carries_its_identity(
    otel: Telemetered,
) -> None:
    """``assert_authority`` said no before anything ran: the result is a
    bare refusal, yet an operator can tie its span to the tool call."""
    rig = Rig(assert_authority=lambda request: False, **otel.options())
    result = rig.run("run_command", {"command": "echo hi"}, call_id="call-9", operation_key="op-9")
    assert (result.status, result.content["executed"]) == ("error", False)
    (span,) = otel.finished()
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.tool.call.id"] == "call-9"
    assert attributes["sandrail.operation_key"] == "op-9"
    assert attributes["sandrail.session_id"] == rig.session_id


def test_c17_a_refused_identity_that_holds_an_env_value_stays_out_of_the_span(
    otel: Telemetered,
) -> None:
    """The core refuses a call whose operation key holds one of its env
    values; the span must not show that key either (the call id it shows)."""
    rig = Rig(**otel.options())
    result = rig.run(
        "run_command",
        {"command": "true", "env": {"TOKEN": SECRET}},
        call_id="call-3",
        operation_key=f"op-{SECRET}",
    )
    assert result.status == "error"
    (span,) = otel.finished()
    attributes = dict(span.attributes or {})
    assert "sandrail.operation_key" not in attributes
    assert attributes["gen_ai.tool.call.id"] == "call-3"
    assert SECRET not in repr(attributes)


def test_debug_line_names_the_operation_key_of_a_refused_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig(assert_authority=lambda request: False)
    with caplog.at_level(logging.DEBUG, logger="sandrail"):
        rig.run("run_command", {"command": "echo hi"}, operation_key="op-5")
    assert "(operation key op-5, task None)" in caplog.text
    assert "operation key None" not in caplog.text


class _Instrumented:
    """A backend whose every effect makes a span of its own, as an
    instrumented HTTP client does for each request it sends."""

    def __init__(self, provider: TracerProvider, *, asynchronous: bool) -> None:
        self.sim = Simulator()
        self.tracer = provider.get_tracer("http-client")
        self.asynchronous = asynchronous

    def _send(self, effect: Any) -> Any:
        with self.tracer.start_as_current_span(f"POST {type(effect).__name__}"):
            return self.sim(effect)

    def __call__(self, effect: Any) -> Any:
        if not self.asynchronous:
            return self._send(effect)

        async def sent() -> Any:
            return self._send(effect)

        return sent()


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_backends_requests_nest_under_the_tool_calls_span(
    otel: Telemetered, asynchronous: bool
) -> None:
    """One trace per call: every span the backend makes while the call runs
    is a child of the call's ``execute_tool`` span."""
    backend = _Instrumented(otel.tracer_provider, asynchronous=asynchronous)
    port = sandrail.command_tools(
        backend=backend,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        **otel.options(),
    )
    request = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c1", arguments={"command": "echo hi"}),
        operation_key="k1",
        session_id="session-1",
        definition=port.definition("run_command"),
        identity=sandrail.AgentIdentity(agent_id="agent-1"),
    )
    assert port.execute_sync(request).status == "ok"
    spans = otel.finished()
    (call,) = [span for span in spans if span.name == "execute_tool run_command"]
    sent = [span for span in spans if span.name.startswith("POST ")]
    assert {span.name for span in sent} >= {"POST Ensure", "POST Start", "POST Wait"}
    for span in sent:
        assert span.context.trace_id == call.context.trace_id
        assert span.parent is not None
        assert span.parent.span_id == call.context.span_id
