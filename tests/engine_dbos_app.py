"""The DBOS application of the engine tests: a queue its executors listen
to, a workflow that runs each command as a sandrail step, and (for an
executor configured with ``agent=True``) one that runs the pydantic-ai
durable agent of ``tests/engine_agents.py`` (used by
``tests/engine_worker.py``; the tests enqueue its workflows with a
``DBOSClient``). pydantic-ai is imported only by an executor that runs the
agent: the import costs each executor seconds of its start, which the tests
of the other workflows need not wait for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dbos import DBOS

from sandrail.integrations.dbos import SandboxSteps

QUEUE = "sandrail_engine_tests"
APP = "sandrail-engine-tests"
SCOPE = {"tenant": "engine-tests"}

_steps: list[SandboxSteps] = []


def configure(
    database_url: str,
    executor_id: str,
    backend: Any,
    record: Any,
    secrets: Mapping[str, str],
    agent: bool = False,
    **options: Any,
) -> SandboxSteps:
    """DBOS configured on ``database_url``, and the sandrail step (before
    ``DBOS.launch()``); with ``agent``, the agent's workflow too."""
    DBOS(
        config={
            "name": APP,
            "system_database_url": database_url,
            "executor_id": executor_id,
            "log_level": "WARNING",
        }
    )
    steps = SandboxSteps(
        backend=backend, scope=SCOPE, record=record, env=secrets, poll_seconds=0.2, **options
    )
    _steps[:] = [steps]
    if agent:
        _register_agent(steps)
    return steps


def _register_agent(steps: SandboxSteps) -> None:
    """The pydantic-ai durable agent's workflow, its tools ``steps``'."""
    from tests import engine_agents

    engine_agents.TOOLSETS[:] = [steps.toolset]
    agent = engine_agents.dbos_agent()

    @DBOS.workflow(name="agent_run")
    async def agent_run(command: str) -> str:
        """A pydantic-ai durable agent's run (``tests/engine_agents.py``)."""
        result = await agent.run(command)
        return result.output


def listen() -> None:
    """Register the queue this executor takes workflows from (after launch)."""
    DBOS.register_queue(QUEUE, worker_concurrency=4, polling_interval_sec=0.2)


@DBOS.workflow(name="tool_calls")
def tool_calls(commands: list[str]) -> list[str]:
    (steps,) = _steps
    return [steps.call("run_command", {"command": command, "timeout": 60}) for command in commands]
