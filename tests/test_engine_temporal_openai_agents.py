"""The OpenAI Agents SDK on Temporal through its official integration
(``temporalio-openai-agents``), its tool a sandrail activity, against the
real engine: the CLI's dev server, activity workers as separate processes
SIGKILLed while the tool's command runs, commands on a local-e2b server
whose ground truth counts every launch.

The integration pins an older openai-agents than the test extra
(``temporalio-openai-agents`` 1.1.0 needs ``openai-agents>=0.22,<0.23``), so
this file skips in the main test environment; ``.ci/run`` runs it in an
environment of its own with that version set.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("temporalio.openai_agents") is None:
    pytest.skip(
        "temporalio.openai_agents is not importable: pip install temporalio-openai-agents "
        "'openai-agents==0.22.*' (.ci/run runs this file in an environment of its own)",
        allow_module_level=True,
    )

from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.openai_agents.testing import TestModelProvider
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from sandrail.local_e2b import LocalE2B, serve
from tests import engine_openai_agents
from tests.engine_rig import Workers, temporal_binary
from tests.postgres_server import PostgresServer
from tests.test_engine_temporal import _attempts, _until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="local-e2b user separation needs root")


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve(signal_scope="process") as running:
        yield running


@pytest.fixture(scope="module")
def dev_server() -> Iterator[str]:
    """The address of one dev server for the module's tests."""
    loop = asyncio.new_event_loop()
    env = loop.run_until_complete(
        WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary("temporal"), ip="127.0.0.1"
        )
    )
    try:
        yield env.client.service_client.config.target_host
    finally:
        loop.run_until_complete(env.shutdown())
        loop.close()


def _plugin() -> OpenAIAgentsPlugin:
    """The integration, its model the scripted one (run by its model activity)."""
    return OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=30)),
        model_provider=TestModelProvider(engine_openai_agents.ScriptedModel()),
    )


@pytest.mark.long
def test_c2_openai_agents_temporal_tool_call_launches_once_across_a_killed_worker(
    server: LocalE2B, postgres: PostgresServer, dev_server: str, tmp_path: Path
) -> None:
    """C2 for an OpenAI Agents SDK agent in a Temporal workflow (the
    integration's ``OpenAIAgentsPlugin``; its tool ``activity_as_tool`` of an
    activity that runs sandrail's tool activity): every tool worker is
    SIGKILLed while the agent's tool call runs its command; new workers take
    the activity's next attempt, whose operation key (workflow, run and
    activity id) is the same, so it reconciles the first launch: one launch,
    answered ``ok`` and ``deduplicated``, which the model reads back."""
    prefix = f"oa-{uuid.uuid4().hex[:8]}"
    queue, tool_queue = f"q-{prefix}", f"q-{prefix}-tools"
    record = postgres.url(postgres.fresh_database())

    async def scenario() -> tuple[dict[str, Any], dict[int, int], int]:
        client = await Client.connect(dev_server, plugins=[_plugin()])
        workers = Workers(
            server,
            tmp_path,
            lambda number, log: ["temporal", dev_server, tool_queue, record, str(log)],
            env={"ENGINE_OPENAI_AGENTS": "1"},
        )
        # The workflow and the model activity run here; the tool runs in the workers.
        agents = Worker(client, task_queue=queue, workflows=[engine_openai_agents.OpenAIAgentRun])
        try:
            async with agents:
                for _ in range(2):
                    workers.spawn()
                for number in list(workers.live):
                    workers.wait_ready(number)
                handle = await client.start_workflow(
                    "OpenAIAgentRun",
                    args=[f"{server.mark(prefix)}; sleep 2", tool_queue],
                    id=prefix,
                    task_queue=queue,
                    result_type=str,
                )
                await _until(lambda: server.truth().marked(prefix) > 0)
                for number in list(workers.live):
                    workers.kill(number)
                workers.replace_dead()
                answer = json.loads(await asyncio.wait_for(handle.result(), 120))
                return answer, await _attempts(handle), workers.kills
        finally:
            workers.stop()

    answer, attempts, kills = asyncio.run(scenario())
    assert kills == 2
    assert answer["status"] == "ok", answer
    assert answer["deduplicated"] is True  # the retry reconciled the first launch
    assert answer["operation_key"].startswith(f"temporal:{prefix}:"), answer
    assert max(attempts.values()) >= 2  # the tool call's activity ran again
    assert server.truth().marked(prefix) == 1  # C2
