"""``FunctionTool`` s for the OpenAI Agents SDK, strict mode on.

    agent = Agent(name="ops", tools=sandrail.adapters.openai_agents.function_tools(toolset))

Each tool's schema is the ``openai-strict`` profile (every property required
and nullable, ``env`` as a ``{name, value}`` list), which the SDK's strict
mode takes as it is; the model's arguments come back in that shape and are
converted for the port. The tool's output is exactly ``result.to_json()``.

Operation keys: ``f"{run_id}:{tool_call_id}"``. ``run_id`` may be a string
or a function of the SDK's ``ToolContext``; by default it is a fresh id for
each ``Runner.run`` (the SDK has no run id of its own, so the adapter keeps
one per run context), which is right for retries inside one process. To make
a call retried after a process restart reconcile instead of running again,
pass your own durable run id (for example ``run_id=lambda ctx:
ctx.context.run_id``).

Timeouts: the SDK's ``timeout_seconds`` (or any cancellation of the tool's
await) aborts the call as a :class:`~sandrail.CancelToken` would (see
:class:`~sandrail.Toolset`); the SDK then tells the model the tool timed out,
and a retry of the call reconciles it.
"""

from __future__ import annotations

import json
import math
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from sandrail._toolset import Toolset
from sandrail.adapters import require
from sandrail.core import ArgumentProblem, ToolResult, arguments_rejection

__all__ = ["function_tools"]

RunId = str | Callable[[Any], str] | None


def function_tools(
    toolset: Toolset, *, run_id: RunId = None, timeout_seconds: float | None = None
) -> list[Any]:
    """One ``agents.FunctionTool`` per tool of ``toolset``, strict schemas on.

    ``timeout_seconds`` is passed to each tool (the SDK's per-call timeout).
    Raises ``ImportError`` naming the ``openai-agents`` extra when the SDK is
    missing.
    """
    agents = require("agents", "openai-agents")
    run_ids = _RunIds(run_id)
    return [
        agents.FunctionTool(
            name=name,
            description=toolset.definition(name).description,
            params_json_schema=toolset.schema(name, "openai-strict"),
            on_invoke_tool=_invoker(toolset, name, run_ids),
            strict_json_schema=True,
            timeout_seconds=timeout_seconds,
        )
        for name in toolset.names
    ]


def _invoker(toolset: Toolset, name: str, run_ids: _RunIds) -> Callable[[Any, str], Any]:
    async def invoke(ctx: Any, arguments_json: str) -> str:
        arguments = _parse(arguments_json)
        if isinstance(arguments, ArgumentProblem):
            content = arguments_rejection([arguments], toolset.max_output_bytes)
            return ToolResult(status="error", content=content).to_json()
        call_id = str(ctx.tool_call_id)
        result = await toolset.call(
            name,
            arguments,
            call_id=call_id,
            operation_key=toolset.operation_key(call_id, run_id=run_ids.of(ctx)),
            profile="openai-strict",
        )
        return result.to_json()

    return invoke


def _parse(text: str) -> object:
    def refuse(constant: str) -> float:
        raise ValueError(constant)

    try:
        value = json.loads(text, parse_constant=refuse)
    except (ValueError, TypeError, RecursionError):
        return ArgumentProblem("arguments", "must be a JSON object (the text is not JSON)")
    if isinstance(value, float) and not math.isfinite(value):  # pragma: no cover - refused above
        return ArgumentProblem("arguments", "must be a JSON object")
    return value


class _RunIds:
    """The run part of operation keys: given, computed, or one per run context."""

    def __init__(self, run_id: RunId) -> None:
        self._run_id = run_id
        # The SDK gives every tool call of one run the same `usage` object;
        # runs are told apart by it (weakly, so finished runs are forgotten).
        self._per_run: dict[int, tuple[weakref.ref[Any], str]] = {}

    def of(self, ctx: Any) -> str:
        if isinstance(self._run_id, str):
            return self._run_id
        if callable(self._run_id):
            return str(self._run_id(ctx))
        anchor = getattr(ctx, "usage", None)
        if anchor is None:
            return uuid.uuid4().hex
        known = self._per_run.get(id(anchor))
        if known is not None and known[0]() is anchor:
            return known[1]
        self._per_run = {k: v for k, v in self._per_run.items() if v[0]() is not None}
        fresh = uuid.uuid4().hex
        self._per_run[id(anchor)] = (weakref.ref(anchor), fresh)
        return fresh
