"""Traces, metrics and debug logs of tool calls (``docs/howto/traces.md``).

One OpenTelemetry span per tool call, named as the GenAI semantic
conventions name a tool execution, ``execute_tool {tool name}``, with
``gen_ai.operation.name``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` and
sandrail's own attributes (``sandrail.operation_key``, ``sandrail.session_id``,
``sandrail.task_id``, ``sandrail.sandbox_id``, ``sandrail.status``,
``sandrail.executed``; ``error.type`` when not ``ok``). Each effect step is
an event of the span (the effect, what answered it or how it failed), so an
``uncertain`` shows which step and which fault. The
``gen_ai.execute_tool.duration`` histogram (seconds) counts every call. The
same steps go to the ``sandrail`` logger at debug level. While a call runs
its span is the current one, so the spans a backend makes (an instrumented
HTTP client's requests) are its children: one trace per call.

Spans go to the global tracer provider unless the port was given
``tracer_provider=`` (metrics likewise, ``meter_provider=``). The library
needs only ``opentelemetry-api`` (``pip install 'sandrail[otel]'``); without
it, or with no provider configured and debug logging off, a call costs one
check and nothing else.

Strategy (C17): nothing the caller sent is trusted to be shown. The span is
named before the call runs, by the tool's name only when it is one of the
port's own; every identity attribute is taken at the end from the result's
content, which the core vouches holds no env value (it refuses a call whose
identity holds one, and masks output); a failure's detail is masked with the
call's own redactions and cut short. Effects are named by type, never by
their fields, so ``Start.env`` never leaves the call.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any, Final

from sandrail.core import (
    EffectFailure,
    Redactions,
    ToolRequest,
    ToolResult,
    mask_text,
    redaction_secrets,
)

__all__ = ["OFF", "CallTrace", "Telemetry"]

logger = logging.getLogger("sandrail")

DURATION_METRIC: Final = "gen_ai.execute_tool.duration"
_OPERATION: Final = "execute_tool"
_DETAIL_LIMIT: Final = 200
_RESULT_ATTRIBUTES: Final = (
    ("call_id", "gen_ai.tool.call.id"),
    ("operation_key", "sandrail.operation_key"),
    ("session_id", "sandrail.session_id"),
    ("task_id", "sandrail.task_id"),
    ("sandbox_id", "sandrail.sandbox_id"),
)
_REQUEST_IDENTITY: Final = (
    ("call_id", "gen_ai.tool.call.id", ("call", "call_id")),
    ("operation_key", "sandrail.operation_key", ("operation_key",)),
    ("session_id", "sandrail.session_id", ("session_id",)),
)
"""The identity a span takes from the request when the result does not
show it (a call refused before anything ran): where it is in the request."""

Interpret = Callable[[Any], Any]


def _load_api() -> tuple[ModuleType, ModuleType] | None:
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        return None
    return trace, metrics


_UNKNOWN: Final = object()


def _nothing_set(module: ModuleType | None, name: str) -> bool:
    """Whether the API's global ``name`` says no provider was ever set.

    Strategy: the public getters (``get_tracer_provider``) read the process
    environment on every call while nothing is set, a few microseconds that
    every call would pay; the module global they return is read here instead,
    and only trusted when it is there and empty (any other API version, or a
    provider named by the environment, takes the public path)."""
    return module is not None and getattr(module, name, _UNKNOWN) is None


class Telemetry:
    """The telemetry of one port: where its spans and metrics go.

    ``tracer_provider`` / ``meter_provider``: an OpenTelemetry provider, or
    ``None`` for the global one (looked up at every call, so a provider
    configured after the port was built is used). Raises ``ImportError`` with
    the install hint when a provider is given but opentelemetry-api is missing.
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self._api = _load_api()
        if self._api is None and (tracer_provider is not None or meter_provider is not None):
            raise ImportError(
                "tracer_provider= needs opentelemetry-api: pip install 'sandrail[otel]'"
            )
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._tracers: tuple[Any, Any] | None = None  # (provider, tracer)
        self._histograms: tuple[Any, Any] | None = None  # (provider, histogram)
        # Where the global providers live, when a quick look can tell that
        # none was set (see _nothing_set); None: always ask the public getters.
        self._globals: tuple[ModuleType, ModuleType] | None = None
        named = {"OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER"} & set(os.environ)
        if self._api is not None and not named:
            internal = sys.modules.get("opentelemetry.metrics._internal")
            if internal is not None:
                self._globals = (self._api[0], internal)

    def begin(
        self, request: ToolRequest, tool_names: frozenset[str], redactions: Callable[[], Redactions]
    ) -> CallTrace | _Off:
        """The trace of one call about to run; :data:`OFF` when nobody listens."""
        log = logger.isEnabledFor(logging.DEBUG)
        tracer = histogram = None
        if self._api is not None:
            tracer = self._tracer()
            histogram = self._histogram()
        if tracer is None and histogram is None and not log:
            return OFF
        name = request.call.name if isinstance(request.call.name, str) else None
        tool = name if name in tool_names else None
        return CallTrace(tool, tracer, histogram, log, redactions, self._api, request)

    def _tracer(self) -> Any:
        assert self._api is not None
        trace, _ = self._api
        provider = self._tracer_provider
        if provider is None:
            if self._globals is not None and _nothing_set(self._globals[0], "_TRACER_PROVIDER"):
                return None
            provider = trace.get_tracer_provider()
            if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
                return None  # nobody configured one: no span at all
        cached = self._tracers
        if cached is None or cached[0] is not provider:
            cached = (provider, provider.get_tracer("sandrail"))
            self._tracers = cached
        return cached[1]

    def _histogram(self) -> Any:
        assert self._api is not None
        _, metrics = self._api
        provider = self._meter_provider
        if provider is None:
            if self._globals is not None and _nothing_set(self._globals[1], "_METER_PROVIDER"):
                return None
            provider = metrics.get_meter_provider()
            if isinstance(provider, metrics.NoOpMeterProvider) or (
                type(provider).__name__ == "_ProxyMeterProvider"
            ):
                return None
        cached = self._histograms
        if cached is None or cached[0] is not provider:
            histogram = provider.get_meter("sandrail").create_histogram(
                DURATION_METRIC, unit="s", description="Duration of tool executions."
            )
            cached = (provider, histogram)
            self._histograms = cached
        return cached[1]


def _plain_text(value: object) -> bool:
    """A non-blank string of valid Unicode, as the core's identity checks want."""
    if not isinstance(value, str) or not value.strip():
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Off:
    """No listener: every method does nothing, and ``step`` hands the
    interpreter back untouched (the call pays nothing per effect)."""

    active = False

    def step(self, interpret: Interpret) -> Interpret:
        return interpret

    def step_async(self, interpret: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Any]:
        return interpret

    def end(self, result: ToolResult) -> None:
        pass

    def abandon(self, why: str) -> None:
        pass


OFF: Final = _Off()


class CallTrace:
    """The span, metric and log lines of one call (see the module doc)."""

    active = True

    def __init__(
        self,
        tool: str | None,
        tracer: Any,
        histogram: Any,
        log: bool,
        redactions: Callable[[], Redactions],
        api: tuple[ModuleType, ModuleType] | None,
        request: ToolRequest | None = None,
    ) -> None:
        self._tool = tool
        self._request = request
        self._histogram = histogram
        self._log = log
        self._redactions = redactions
        self._api = api
        self._started = time.perf_counter()
        self._ended = False
        self._span: Any = None
        if tracer is not None:
            attributes = {"gen_ai.operation.name": _OPERATION}
            if tool is not None:
                attributes["gen_ai.tool.name"] = tool
            self._span = tracer.start_span(
                f"{_OPERATION} {tool}" if tool is not None else _OPERATION,
                kind=api[0].SpanKind.INTERNAL if api is not None else None,
                attributes=attributes,
            )

    def step(self, interpret: Interpret) -> Interpret:
        """``interpret`` with each effect and its answer noted, the call's
        span current meanwhile: the spans a backend makes (an instrumented
        HTTP client's) are its children, one trace per call."""

        def traced(effect: Any) -> Any:
            try:
                with self._current():
                    outcome = interpret(effect)
            except EffectFailure as failure:
                self._failed(effect, failure)
                raise
            self._answered(effect, outcome)
            return outcome

        return traced

    def step_async(self, interpret: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Any]:
        """The same for an asynchronous interpreter."""

        async def traced(effect: Any) -> Any:
            try:
                with self._current():
                    outcome = await interpret(effect)
            except EffectFailure as failure:
                self._failed(effect, failure)
                raise
            self._answered(effect, outcome)
            return outcome

        return traced

    def _current(self) -> contextlib.AbstractContextManager[Any]:
        """The call's span made current (nothing without a span)."""
        if self._span is None or self._api is None:
            return contextlib.nullcontext()
        # Never the exception an interpreter raised: its text may hold an env
        # value (a failure's detail is masked and cut by _failed instead).
        current: contextlib.AbstractContextManager[Any] = self._api[0].use_span(
            self._span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )
        return current

    def _answered(self, effect: Any, outcome: Any) -> None:
        name = type(effect).__name__
        answer = type(outcome).__name__
        if self._span is not None:
            self._span.add_event(name, {"sandrail.outcome": answer})
        if self._log:
            logger.debug("%s: %s -> %s", self._tool or _OPERATION, name, answer)

    def _failed(self, effect: Any, failure: EffectFailure) -> None:
        name = type(effect).__name__
        detail = self._detail(failure.detail)
        if self._span is not None:
            self._span.add_event(
                name,
                {
                    "sandrail.outcome": "failure",
                    "sandrail.failure.delivery": failure.delivery.value,
                    "sandrail.failure.aborted": failure.aborted,
                    "sandrail.failure.detail": detail,
                },
            )
        if self._log:
            logger.debug(
                "%s: %s failed (%s%s): %s",
                self._tool or _OPERATION,
                name,
                failure.delivery.value,
                ", aborted" if failure.aborted else "",
                detail,
            )

    def _detail(self, text: object) -> str:
        if not isinstance(text, str):
            return ""
        try:
            masked = mask_text(text, self._redactions())
        except Exception:
            return "(detail not shown)"
        return masked if len(masked) <= _DETAIL_LIMIT else masked[:_DETAIL_LIMIT] + "…"

    def end(self, result: ToolResult) -> None:
        """End the call with its result (once; later calls do nothing)."""
        if self._ended:
            return
        self._ended = True
        content: Mapping[str, Any] = result.content
        status = result.status
        error_type = content.get("error_type")
        error = (error_type if isinstance(error_type, str) else status) if status != "ok" else None
        executed = content.get("executed")
        if not isinstance(executed, bool):
            # Stated on errors (false) and uncertain results (true) where a
            # result says it; otherwise an ok call did what it was asked and
            # an uncertain one may have: unknown, so left out.
            executed = {"ok": True, "error": False}.get(status)
        attributes: dict[str, Any] = {"sandrail.status": status}
        if executed is not None:
            attributes["sandrail.executed"] = executed
        if error is not None:
            attributes["error.type"] = error
        attributes.update(self._identity(content))
        if self._span is not None:
            self._span.set_attributes(attributes)
            if status in ("error", "uncertain") and self._api is not None:
                trace = self._api[0]
                self._span.set_status(trace.Status(trace.StatusCode.ERROR, error))
            self._span.end()
        self._measure(status, error)
        if self._log:
            logger.debug(
                "%s: %s%s (operation key %s, task %s)",
                self._tool or _OPERATION,
                status,
                f" {error}" if error else "",
                attributes.get("sandrail.operation_key"),
                attributes.get("sandrail.task_id"),
            )

    def _identity(self, content: Mapping[str, Any]) -> dict[str, str]:
        """The call's identity attributes: from the result's content, which
        the core vouches holds no env value, and what it does not show (a
        call refused before anything ran) from the request, unless a value
        the call masks (the session's, or one of its own env values) is in
        it: the core refuses such an identity, and so does the span (C17)."""
        attributes: dict[str, str] = {}
        for key, attribute in _RESULT_ATTRIBUTES:
            value = content.get(key)
            if isinstance(value, str):
                attributes[attribute] = value
        missing = [item for item in _REQUEST_IDENTITY if item[1] not in attributes]
        if not missing or self._request is None:
            return attributes
        try:
            arguments = self._request.call.arguments
            env = arguments.get("env") if isinstance(arguments, Mapping) else None
            redactions = Redactions(self._redactions().values | redaction_secrets(env))
            for _, attribute, path in missing:
                found: Any = self._request
                for name in path:
                    found = getattr(found, name)
                if _plain_text(found) and mask_text(found, redactions) == found:
                    attributes[attribute] = str.__str__(found)
        except Exception:
            pass  # a request without those parts: the span goes without them
        return attributes

    def abandon(self, why: str) -> None:
        """End a call that left without a result (the caller cancelled it, a
        replay diverged, the process is stopping)."""
        if self._ended:
            return
        self._ended = True
        if self._span is not None:
            self._span.set_attributes(self._identity({}))
            self._span.set_attribute("error.type", why)
            if self._api is not None:
                trace = self._api[0]
                self._span.set_status(trace.Status(trace.StatusCode.ERROR, why))
            self._span.end()
        self._measure(None, why)
        if self._log:
            logger.debug("%s: ended without a result (%s)", self._tool or _OPERATION, why)

    def _measure(self, status: str | None, error: str | None) -> None:
        if self._histogram is None:
            return
        attributes: dict[str, Any] = {"gen_ai.operation.name": _OPERATION}
        if self._tool is not None:
            attributes["gen_ai.tool.name"] = self._tool
        if status is not None:
            attributes["sandrail.status"] = status
        if error is not None:
            attributes["error.type"] = error
        self._histogram.record(time.perf_counter() - self._started, attributes)
