"""The pydantic-ai durable agent of the engine tests: one agent whose
scripted model asks for one ``run_command`` (the user prompt is the
command) and then answers with the tool's JSON; its sandrail tools are
built on the worker that runs each call, inside a ``DynamicToolset``
(pydantic-ai makes such a toolset's calls activities or steps).

:data:`TEMPORAL_AGENT` has the ``TemporalDurability`` capability; the worker
processes (``tests/engine_worker.py``) set :data:`TOOLSETS` to their
engine's ``SandboxActivities.toolset``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.durable_exec.temporal import TemporalDurability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import DynamicToolset
from temporalio.common import RetryPolicy

import sandrail
from sandrail.adapters import pydantic_ai as sandrail_pydantic_ai

TOOLSETS: list[Callable[[], sandrail.Toolset]] = []
"""The worker's way to the running call's toolset (set by the worker)."""


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                return ModelResponse(parts=[TextPart(str(part.content))])
    command = str(messages[0].parts[-1].content)  # type: ignore[union-attr]
    arguments = {"command": command, "timeout": 60}
    return ModelResponse(parts=[ToolCallPart("run_command", arguments, tool_call_id="call-run-1")])


def _sandrail_tools(ctx: Any) -> Any:
    (toolset,) = TOOLSETS
    return sandrail_pydantic_ai.toolset(toolset(), profile="full")


TEMPORAL_AGENT: Agent[None, str] = Agent(
    FunctionModel(_model),
    name="sandrail_agent",
    toolsets=[DynamicToolset(_sandrail_tools, id="sandrail")],
    capabilities=[
        TemporalDurability(
            activity_config={
                "start_to_close_timeout": timedelta(seconds=8),
                "retry_policy": RetryPolicy(
                    initial_interval=timedelta(milliseconds=300), maximum_attempts=10
                ),
            },
        )
    ],
)
"""The agent, durable on Temporal (built outside any workflow, as
pydantic-ai asks; its workflow is ``AgentRun`` in ``tests/engine_workflows.py``)."""


def dbos_agent() -> Agent[None, str]:
    """The agent, durable on DBOS (built by an executor before
    ``DBOS.launch()``; each call of its ``DynamicToolset`` is a step)."""
    from pydantic_ai.durable_exec.dbos import DBOSDurability

    return Agent(
        FunctionModel(_model),
        name="sandrail_dbos_agent",
        toolsets=[DynamicToolset(_sandrail_tools, id="sandrail")],
        capabilities=[DBOSDurability()],
    )
