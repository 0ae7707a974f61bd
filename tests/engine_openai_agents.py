"""The OpenAI Agents SDK agent of the engine tests, durable on Temporal
through its official integration (``temporalio-openai-agents``, module
``temporalio.openai_agents``): one agent whose scripted model asks for one
``run_command`` (the user prompt is the command) and then answers with the
tool's JSON.

The tool is ``activity_as_tool(run_command)``: the model's call becomes the
``run_command`` activity, which runs sandrail's tool activity (the worker
processes of ``tests/engine_worker.py`` set :data:`TOOL` to it). Its key is
the workflow, run and activity id, the same in every attempt on any worker
(``docs/howto/temporal-openai-agents.md``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Model, ModelResponse, Runner
    from temporalio.openai_agents.testing import ResponseBuilders
    from temporalio.openai_agents.workflow import activity_as_tool

    from sandrail.integrations.temporal import ToolCallInput

TOOL: list[Callable[[ToolCallInput], Awaitable[str]]] = []
"""The worker's sandrail tool activity (set by the worker)."""

HEARTBEAT = timedelta(seconds=2)
RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=300),
    maximum_interval=timedelta(seconds=1),
    maximum_attempts=25,
)


@activity.defn(name="run_command")
async def run_command(command: str, timeout: int) -> str:
    """Run a shell command in the workflow's sandbox; sandrail's answer (JSON)."""
    (tool,) = TOOL
    arguments = {"command": command, "timeout": timeout}
    return await tool(ToolCallInput("run_command", arguments, refusals="return"))


class ScriptedModel(Model):
    """Asks for one ``run_command`` of the user's prompt, then answers with
    what the tool said (run by the integration's model activity)."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [input] if isinstance(input, str) else list(input)
        for item in items:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                return ResponseBuilders.output_message(str(item["output"]))
        command = items[0] if isinstance(items[0], str) else str(items[0]["content"])
        arguments = json.dumps({"command": command, "timeout": 60})
        return ResponseBuilders.tool_call(arguments, "run_command", call_id="call-run-1")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@workflow.defn(name="OpenAIAgentRun")
class OpenAIAgentRun:
    """The agent's run; its tool calls go to ``tool_queue`` (the sandrail workers)."""

    @workflow.run
    async def run(self, command: str, tool_queue: str) -> str:
        agent: Agent[None] = Agent(
            name="sandrail_agent",
            instructions="Run the user's command with run_command.",
            tools=[
                activity_as_tool(
                    run_command,
                    task_queue=tool_queue,
                    start_to_close_timeout=timedelta(seconds=60),
                    heartbeat_timeout=HEARTBEAT,
                    retry_policy=RETRY,
                )
            ],
        )
        result = await Runner.run(agent, command)
        return str(result.final_output)
