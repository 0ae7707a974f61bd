"""The Temporal workflows of the engine tests (imported by the workers in
``tests/engine_worker.py`` and by the tests that start them).

``ToolCalls`` runs each command with ``call_tool`` in order and returns the
answers; ``Parallel`` runs them all at once; ``Continued`` runs them in
order and then continues as new ``rounds`` times; ``OneCall`` runs one tool
call; ``Keys`` reads the keys of two activities; ``Approval`` asks for a
person's approval of one call (a signal) and runs it once approved.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from sandrail.integrations.temporal import call_tool, operation_key, session_id
    from tests import engine_agents

HEARTBEAT = timedelta(seconds=2)
RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=300),
    maximum_interval=timedelta(seconds=1),
    maximum_attempts=25,
)


async def _run(command: str, call_id: str | None = None) -> str:
    return await call_tool(
        "run_command",
        {"command": command, "timeout": 60},
        call_id=call_id,
        refusals="return",
        heartbeat_timeout=HEARTBEAT,
        retry_policy=RETRY,
    )


@workflow.defn(name="ToolCalls")
class ToolCalls:
    @workflow.run
    async def run(self, commands: list[str]) -> list[str]:
        return [await _run(command) for command in commands]


@workflow.defn(name="Parallel")
class Parallel:
    @workflow.run
    async def run(self, commands: list[str]) -> list[str]:
        return list(await asyncio.gather(*(_run(command) for command in commands)))


@workflow.defn(name="Continued")
class Continued:
    @workflow.run
    async def run(self, commands: list[str], rounds: int) -> list[str]:
        answers = [await _run(command) for command in commands]
        if rounds > 0:
            workflow.continue_as_new(args=[commands, rounds - 1])
        return answers


@workflow.defn(name="Approval")
class Approval:
    def __init__(self) -> None:
        self._approved: bool | None = None

    @workflow.signal
    def decide(self, approved: bool) -> None:
        self._approved = approved

    @workflow.run
    async def run(self, command: str) -> list[str]:
        first = await _run(command, call_id="call-approve-1")
        await workflow.wait_condition(lambda: self._approved is not None)
        if not self._approved:
            return [first]
        second = await call_tool(
            "run_command",
            {"command": command, "timeout": 60},
            call_id="call-approve-1",
            refusals="return",
            approved=True,
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RETRY,
        )
        return [first, second]


@workflow.defn(name="OneCall")
class OneCall:
    @workflow.run
    async def run(self, name: str, arguments: dict[str, Any], refusals: str) -> str:
        return await call_tool(
            name,
            arguments,
            refusals="raise" if refusals == "raise" else "return",
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200), maximum_attempts=20
            ),
        )


@activity.defn(name="KeyOf")
async def key_of(call_id: str | None) -> list[str]:
    return [operation_key(call_id), session_id()]


@workflow.defn(name="Keys")
class Keys:
    @workflow.run
    async def run(self) -> list[list[str]]:
        options: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=10)}
        return [
            await workflow.execute_activity(key_of, None, **options),
            await workflow.execute_activity(key_of, "call_7", **options),
            [workflow.info().run_id],
        ]


@workflow.defn(name="AgentRun")
class AgentRun:
    """A pydantic-ai durable agent's run (``tests/engine_agents.py``)."""

    @workflow.run
    async def run(self, command: str) -> str:
        result = await engine_agents.TEMPORAL_AGENT.run(command)
        return result.output


WORKFLOWS = [ToolCalls, Parallel, Continued, Approval]
