"""One worker process of the engine tests: a Temporal worker or a DBOS
executor running sandrail's tools on a local-e2b server (named by the E2B_*
variables), with a durable record shared by every worker.

``python -m tests.engine_worker temporal ADDRESS TASK_QUEUE RECORD LOG`` (an
activity worker: ``ENGINE_SLOTS`` activities at once, 8 by default)
``python -m tests.engine_worker dbos DATABASE_URL EXECUTOR_ID RECORD LOG [RECOVER_ID...]``

The record is wrapped so the worker can die where the test wants it to
(``ENGINE_KILL``: the probability, per call, of a SIGKILL of itself at one
of two moments: just before a start may leave, the record's ``remember``;
or after the command ended and its answer was made, before the engine
recorded it, the record's ``note``), or freeze there (``ENGINE_FREEZE=
remember``: SIGSTOP itself once, for a zombie the test wakes later). Each
answer the record is told is appended to LOG as a JSON line (flushed at
once): what a call of this worker answered, even one the engine dropped.
``ENGINE_AGENT=1`` adds the activities (the workflow, for DBOS) of the
pydantic-ai durable agent of ``tests/engine_agents.py``; ``ENGINE_OPENAI_AGENTS=1``
the tool activity of the OpenAI Agents SDK agent of
``tests/engine_openai_agents.py``. ``ENGINE_SECRET``
is a worker-side secret joined to every command's env.
A DBOS executor given RECOVER_IDs first recovers those executors'
pending workflows (what DBOS Conductor does for an executor that died).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import threading
from typing import Any

from temporalio import activity

import sandrail
from sandrail.integrations.temporal import TOOL_ACTIVITY, SandboxActivities, ToolCallInput
from sandrail.interpreters.e2b import E2BBackend
from sandrail.records import Answer, open_record

SCOPE = {"tenant": "engine-tests"}


class DyingRecord:
    """A record that may kill or freeze this process at its hooks (see the
    module doc), and logs every answer it is told."""

    def __init__(self, inner: Any, log_path: str) -> None:
        self._inner = inner
        self._log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()
        self._kill = float(os.environ.get("ENGINE_KILL", "0"))
        self._freeze = os.environ.get("ENGINE_FREEZE")
        self._rng = random.Random(os.getpid())

    def _maybe_die(self, hook: str) -> None:
        if self._freeze == hook:
            self._freeze = None
            self._write({"event": "frozen", "hook": hook})
            os.kill(os.getpid(), signal.SIGSTOP)
            self._write({"event": "woken", "hook": hook})
            return
        if self._kill and self._rng.random() < self._kill:
            self._write({"event": "killed", "hook": hook})
            os.kill(os.getpid(), signal.SIGKILL)

    def _write(self, line: dict[str, Any]) -> None:
        with self._lock:
            self._log.write(json.dumps({"pid": os.getpid(), **line}) + "\n")
            self._log.flush()

    def remember(self, request: Any, owned: Any) -> Any:
        self._maybe_die("remember")
        return self._inner.remember(request, owned)

    def resolve(self, request: Any, task_id: str) -> Any:
        return self._inner.resolve(request, task_id)

    def note(self, answer: Answer) -> None:
        self._inner.note(answer)
        self._write(
            {
                "event": "answer",
                "status": answer.status,
                "error_type": answer.error_type,
                "operation_key": answer.locator.get("operation_key"),
                "fence": answer.locator.get("execution_fence"),
            }
        )
        self._maybe_die("note")

    def unresolved(self, *, limit: int = 1000) -> Any:
        return self._inner.unresolved(limit=limit)

    def close(self) -> None:
        self._inner.close()


def authorize(request: sandrail.ToolRequest) -> sandrail.core.PolicyDecision:
    """A person approves commands that say ``APPROVE-ME``; the rest run."""
    if "APPROVE-ME" in str(request.call.arguments.get("command")):
        return sandrail.ApprovalRequired(interaction_id=f"approve:{request.operation_key}")
    return sandrail.ALLOW


def _backend() -> E2BBackend:
    return E2BBackend(
        api_key=os.environ["E2B_API_KEY"],
        api_url=os.environ["E2B_API_URL"],
        sandbox_url=os.environ["E2B_SANDBOX_URL"],
    )


def _secrets() -> dict[str, str]:
    secret = os.environ.get("ENGINE_SECRET")
    return {"ENGINE_SECRET": secret} if secret else {}


def temporal(address: str, task_queue: str, record_spec: str, log: str) -> int:
    from temporalio.client import Client
    from temporalio.worker import Worker

    async def main() -> None:
        record = DyingRecord(open_record(record_spec), log)
        sandbox = SandboxActivities(
            backend=_backend(),
            scope=SCOPE,
            record=record,
            env=_secrets(),
            authorize=authorize,
            reconcile_attempts=4,
        )
        (tool_activity,) = sandbox.activities

        @activity.defn(name=TOOL_ACTIVITY)
        async def logged(call: ToolCallInput) -> str:
            """The sandrail activity, logging how an attempt ended (the
            test knows a zombie's attempt is over, answered or cancelled)."""
            try:
                text: str = await tool_activity(call)
            except BaseException as exc:
                record._write({"event": "attempt_ended", "raised": type(exc).__name__})
                raise
            record._write({"event": "attempt_ended", "raised": None})
            return text

        plugins: list[Any] = []
        if os.environ.get("ENGINE_AGENT"):
            # The pydantic-ai durable agent's activities too, its tools
            # built from this worker's sandrail toolsets.
            from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin

            from tests import engine_agents

            engine_agents.TOOLSETS[:] = [sandbox.toolset]
            plugins = [PydanticAIPlugin(), AgentPlugin(engine_agents.TEMPORAL_AGENT)]
        activities: list[Any] = [logged]
        if os.environ.get("ENGINE_OPENAI_AGENTS"):
            # The OpenAI Agents SDK agent's tool activity, run by this
            # worker's sandrail activity.
            from tests import engine_openai_agents

            engine_openai_agents.TOOL[:] = [logged]
            activities.append(engine_openai_agents.run_command)
        client = await Client.connect(address, plugins=plugins[:1])
        slots = int(os.environ.get("ENGINE_SLOTS", "8"))
        # An activity worker only: the tests run the workflows on a worker
        # of their own, so a killed or frozen process holds no workflow task
        # (nor a sticky queue) that Temporal must first time out.
        worker = Worker(
            client,
            task_queue=task_queue,
            activities=activities,
            max_concurrent_activities=slots,
            max_concurrent_activity_task_polls=min(slots, 2),
            plugins=plugins[1:],
        )
        record._write({"event": "ready"})
        await worker.run()

    asyncio.run(main())
    return 0


def dbos(database_url: str, executor_id: str, record_spec: str, log: str, *recover: str) -> int:
    import time

    from dbos import DBOS

    from tests import engine_dbos_app

    record = DyingRecord(open_record(record_spec), log)
    engine_dbos_app.configure(
        database_url,
        executor_id,
        _backend(),
        record,
        _secrets(),
        agent=bool(os.environ.get("ENGINE_AGENT")),
    )
    DBOS.launch()
    engine_dbos_app.listen()
    if recover:
        # What DBOS Conductor does for executors that died: their pending
        # workflows are handed to this one (a test-only use of DBOS's own call).
        DBOS._recover_pending_workflows(list(recover))
    record._write({"event": "ready"})
    while True:
        time.sleep(3600)


def main(argv: list[str]) -> int:
    engine, *rest = argv
    if engine == "temporal":
        return temporal(*rest)
    if engine == "dbos":
        return dbos(*rest)
    raise SystemExit(f"unknown engine {engine!r}")


if __name__ == "__main__":
    sandrail.__name__  # noqa: B018  (imported first: the library loads before the engines)
    sys.exit(main(sys.argv[1:]))
