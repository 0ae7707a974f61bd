"""What the engine integrations add per tool call, against a bare activity
or step doing the same call in the same run.

Each engine runs one workflow of N sequential tool calls (``run_command``
``echo hi`` on the in-memory simulator, so the engine's own round trips
dominate): the bare variant is an activity (a step) that calls a
:class:`~sandrail.Toolset` with a key it makes itself; the integration
variant is :class:`~sandrail.integrations.temporal.SandboxActivities`
(:class:`~sandrail.integrations.dbos.SandboxSteps`): key, session, fence,
heartbeats, the status watch and the answer rule. The ratio is bare time
over integration time (1.0: nothing added; below 1: slower). Temporal runs
on the CLI's dev server; DBOS on a PostgreSQL this run starts itself.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks._common import row

GOAL = "The integration's per-call cost stays small next to the engine's own round trips."


def _toolset(backend: Any, session: str) -> Any:
    import sandrail

    return sandrail.Toolset(
        backend=backend,
        session_id=session,
        owner=sandrail.AgentOwner(agent_id="bench"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )


_BARE: dict[str, Any] = {}
"""The bare variants' toolset, set by each measurement."""

try:
    from temporalio import activity, workflow

    @activity.defn(name="bench_bare")
    async def _bare_activity(command: str) -> str:
        info = activity.info()
        key = f"{info.workflow_id}:{info.workflow_run_id}:{info.activity_id}"
        result = await _BARE["toolset"].call(
            "run_command", {"command": command}, call_id="c", operation_key=key
        )
        return str(result.to_json())

    @workflow.defn(name="BenchBare", sandboxed=False)
    class _Bare:
        @workflow.run
        async def run(self, n: int) -> None:
            for _ in range(n):
                await workflow.execute_activity(
                    _bare_activity, "echo hi", start_to_close_timeout=timedelta(seconds=30)
                )

    @workflow.defn(name="BenchSandrail", sandboxed=False)
    class _Integrated:
        @workflow.run
        async def run(self, n: int) -> None:
            from sandrail.integrations.temporal import call_tool

            for _ in range(n):
                await call_tool("run_command", {"command": "echo hi"})

except ImportError:  # pragma: no cover - the temporal extra is not installed
    pass


def _temporal(calls: int) -> tuple[float, float]:
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    from sandrail.integrations.temporal import SandboxActivities
    from sandrail.interpreters.simulator import Simulator

    simulator = Simulator()
    _BARE["toolset"] = _toolset(simulator, "bench-bare")
    sandbox = SandboxActivities(backend=simulator, scope={"bench": "temporal"})
    binary = str(Path(sys.executable).parent / "temporal")

    async def measure() -> tuple[float, float]:
        async with (
            await WorkflowEnvironment.start_local(
                dev_server_existing_path=binary, ip="127.0.0.1"
            ) as env,
            Worker(
                env.client,
                task_queue="bench",
                workflows=[_Bare, _Integrated],
                activities=[_bare_activity, *sandbox.activities],
                workflow_runner=UnsandboxedWorkflowRunner(),
            ),
        ):
            for name in ("BenchBare", "BenchSandrail"):  # warm both up first
                await env.client.execute_workflow(
                    name, 3, id=f"{name}-warm-{time.time_ns()}", task_queue="bench"
                )
            timings = []
            for name in ("BenchBare", "BenchSandrail"):
                began = time.perf_counter()
                await env.client.execute_workflow(
                    name, calls, id=f"{name}-{time.time_ns()}", task_queue="bench"
                )
                timings.append((time.perf_counter() - began) / calls)
            return timings[0], timings[1]

    return asyncio.run(measure())


def _dbos(calls: int) -> tuple[float, float]:
    from dbos import DBOS

    from sandrail.integrations.dbos import SandboxSteps
    from sandrail.interpreters.simulator import Simulator
    from tests.postgres_server import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (no initdb/pg_ctl found)")
    root = Path(tempfile.mkdtemp(prefix="sandrail-bench-pg-"))
    server = PostgresServer(bindir, root)
    server.start()
    try:
        DBOS(config={"name": "sandrail-bench", "system_database_url": server.url()})
        simulator = Simulator()
        bare_toolset = _toolset(simulator, "bench-bare")
        steps = SandboxSteps(backend=simulator, scope={"bench": "dbos"}, name="bench")

        @DBOS.step(name="bench_bare")
        def bare(command: str) -> str:
            key = f"{DBOS.workflow_id}:{DBOS.step_id}"
            result = bare_toolset.call_sync(
                "run_command", {"command": command}, call_id="c", operation_key=key
            )
            return result.to_json()

        @DBOS.workflow(name="bench_bare_workflow")
        def bare_workflow(n: int) -> None:
            for _ in range(n):
                bare("echo hi")

        @DBOS.workflow(name="bench_sandrail_workflow")
        def integrated_workflow(n: int) -> None:
            for _ in range(n):
                steps.call("run_command", {"command": "echo hi"})

        DBOS.launch()
        bare_workflow(3)  # warm both up first
        integrated_workflow(3)
        timings = []
        for run in (bare_workflow, integrated_workflow):
            began = time.perf_counter()
            run(calls)
            timings.append((time.perf_counter() - began) / calls)
        DBOS.destroy()
        return timings[0], timings[1]
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def run(quick: bool) -> list[dict[str, Any]]:
    calls = 20 if quick else 100
    rows = []
    for engine, measure in (("temporal", _temporal), ("dbos", _dbos)):
        bare, integrated = measure(calls)
        rows.append(row("engines", f"{engine} bare", "per call", bare * 1000, "ms"))
        rows.append(
            row(
                "engines",
                f"{engine} sandrail.integrations",
                "per call",
                integrated * 1000,
                "ms",
                ratio=bare / integrated,
            )
        )
    return rows
