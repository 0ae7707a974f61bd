"""sandrail inside DBOS, against the real engine: DBOS 3 executors as
separate processes on a PostgreSQL 15 the tests start themselves (a fresh
data directory, an unprivileged user, a unix socket), SIGKILLed at random
moments and replaced by executors of other ids that recover their pending
workflows, commands on a local-e2b server whose ground truth counts every
launch. The sandrail record lives in the same database as DBOS.

The figures are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOSClient

import sandrail
from sandrail.core import Effect, Start
from sandrail.integrations import dbos as sandrail_dbos
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator
from sandrail.local_e2b import LocalE2B, serve
from tests import engine_dbos_app
from tests.engine_rig import Figures, Workers, dump_database, kill_and_replace
from tests.postgres_server import PostgresServer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="local-e2b user separation needs root")

SECRET = "tok_engine_dbos_5d1e8b44"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve(signal_scope="process") as running:
        yield running


class App:
    """One DBOS application on its own database, its executors, a client."""

    def __init__(self, server: LocalE2B, postgres: PostgresServer, out: Path, **env: str) -> None:
        self.database = postgres.fresh_database()
        self.url = postgres.url(self.database)
        self.postgres = postgres
        self.workers = Workers(server, out, self._argv, env=env)
        self.client = DBOSClient(system_database_url=self.url)

    def _argv(self, number: int, log: Path) -> list[str]:
        gone = [f"exec-{n}" for n in range(number) if n not in self.workers.live]
        return ["dbos", self.url, f"exec-{number}", self.url, str(log), *gone]

    def enqueue(self, workflow_id: str, commands: Any, workflow: str = "tool_calls") -> Any:
        options: Any = {
            "queue_name": engine_dbos_app.QUEUE,
            "workflow_name": workflow,
            "workflow_id": workflow_id,
            "app_version": None,
        }
        return self.client.enqueue(options, commands)

    def dump(self) -> str:
        """Every row of every table of the database (DBOS's and sandrail's)."""
        return dump_database(self.postgres, self.database)

    def close(self) -> None:
        self.workers.stop()
        self.client.destroy()


def _wait(handle: Any, seconds: float = 150) -> Any:
    """The workflow's result, or an ``AssertionError`` after ``seconds``
    (DBOS's ``get_result`` waits without end: a workflow that never ends
    would hold the test's worker until the run's own timeout)."""
    found: queue.Queue[tuple[bool, Any]] = queue.Queue()

    def read() -> None:
        try:
            found.put((True, handle.get_result(polling_interval_sec=0.2)))
        except BaseException as exc:  # handed to the test's thread
            found.put((False, exc))

    threading.Thread(target=read, daemon=True).start()
    try:
        ok, value = found.get(timeout=seconds)
    except queue.Empty:
        raise AssertionError(f"workflow {handle.workflow_id} not done after {seconds} s") from None
    if not ok:
        raise value
    return value


def _result(handle: Any, seconds: float = 150) -> list[dict[str, Any]]:
    return [json.loads(text) for text in _wait(handle, seconds)]


@pytest.mark.long
def test_c2_dbos_executors_killed_at_random_launch_each_call_once(
    server: LocalE2B, postgres: PostgresServer, tmp_path: Path
) -> None:
    """C2, C6, C17 under DBOS: two executors run 3 workflows of 3 calls from
    a queue; executors SIGKILL themselves before a start may leave and after
    the answer was made (before DBOS recorded the step), and the test
    SIGKILLs one while a command runs; each dead executor is replaced by one
    of another id that recovers its pending workflows (the step in flight
    runs again from its first line). From local-e2b's ground truth: every
    call launched exactly once; the answers after recovery are decisive; the
    worker-side secret is nowhere in DBOS's database (workflow inputs, step
    outputs) nor in sandrail's record there."""
    rng = random.Random(26)
    prefix = f"dbs-{uuid.uuid4().hex[:8]}"
    app = App(server, postgres, tmp_path, ENGINE_KILL="0.12", ENGINE_SECRET=SECRET)
    calls = {f"{prefix}-w{w}": [f"{prefix}.w{w}.c{c}" for c in range(3)] for w in range(3)}
    try:
        for _ in range(2):
            app.workers.spawn()
        for number in list(app.workers.live):
            app.workers.wait_ready(number)
        handles = {
            workflow_id: app.enqueue(
                workflow_id,
                [f"{server.mark(m)}; echo secret=$ENGINE_SECRET; sleep 0.6" for m in marks],
            )
            for workflow_id, marks in calls.items()
        }
        done = threading.Event()
        killer = threading.Thread(
            target=kill_and_replace, args=(app.workers, server, prefix, rng, done, 3)
        )
        killer.start()
        try:
            results = {workflow_id: _result(handle) for workflow_id, handle in handles.items()}
        finally:
            done.set()
            killer.join()
        truth = server.truth()
        launches = {mark: truth.marked(mark) for marks in calls.values() for mark in marks}
        # A call was recovered when an executor that replaced a dead one answered it.
        recovered = {
            line["operation_key"]
            for line in app.workers.events()
            if line["event"] == "answer" and line["worker"] >= 2
        }
        answers = [answer for texts in results.values() for answer in texts]
        retried = [answer for answer in answers if answer["operation_key"] in recovered]
        statuses: dict[str, int] = {}
        for answer in answers:
            statuses[answer["status"]] = statuses.get(answer["status"], 0) + 1
        figures = Figures(
            engine="dbos",
            workers=2,
            started=len(app.workers.logs),
            kills=app.workers.kills,
            self_kills=dict(app.workers.self_kills()),
            calls=len(answers),
            launches=launches,
            retried_calls=len(retried),
            decisive_retried=sum(answer["status"] in ("ok", "error") for answer in retried),
            statuses=statuses,
        )
        figures.check(tmp_path)
        dump = app.dump()
        # The scan reads what DBOS keeps (inputs and outputs as base64 of a
        # pickle): the workflows' own commands are there to be found.
        assert "echo secret=$ENGINE_SECRET" in dump
        assert "secret=<redacted>" in dump  # a step's output, decoded
        assert SECRET not in dump  # C17: nothing secret in the engine's database
        assert all("secret=<redacted>" in a["stdout"] for a in answers if a["status"] == "ok")
    finally:
        app.close()


@pytest.mark.long
def test_c10_dbos_zombie_executor_loses_to_the_one_that_recovered_its_workflow(
    server: LocalE2B, postgres: PostgresServer, tmp_path: Path
) -> None:
    """C9, C2: an executor freezes just before its start leaves; another
    executor recovers its workflow (a newer execution: a higher dispatch
    count) and launches the command. The frozen one is woken beside it and
    loses: it reads the newer dispatch before it sends anything (C9: its
    authority is gone), or its start, under the same key, finds the newer
    execution's claim and launches nothing (C2). One launch. A fork of the
    recovered workflow then runs in the same sandbox (its step runs again,
    as a new call): every call's fence is 1, so no relative is refused."""
    prefix = f"dzb-{uuid.uuid4().hex[:8]}"
    app = App(server, postgres, tmp_path)
    try:
        zombie = app.workers.spawn(ENGINE_FREEZE="remember")
        app.workers.wait_ready(0)
        handle = app.enqueue(prefix, [f"{server.mark(prefix)}; sleep 0.3"])
        deadline = time.monotonic() + 60
        while not any(e["event"] == "frozen" for e in app.workers.events(0)):
            assert time.monotonic() < deadline, "the executor never froze"
            time.sleep(0.1)
        del app.workers.live[0]  # seen as gone: the next executor recovers exec-0
        app.workers.spawn()
        app.workers.live[0] = zombie
        (answer,) = _result(handle)
        os.kill(zombie.pid, signal.SIGCONT)
        deadline = time.monotonic() + 20
        while not any(e["event"] == "answer" for e in app.workers.events(0)):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        zombie_answers = [e for e in app.workers.events(0) if e["event"] == "answer"]
        launched = server.truth().marked(prefix)
        # A fork of the recovered workflow shares its sandbox, where fence 2
        # was seen: its own first execution must not start below it.
        fork = app.client.fork_workflow(prefix, 1)
        (forked,) = _result(fork)
    finally:
        app.close()
    assert answer["status"] == "ok", answer
    assert answer["execution_fence"] == 1, answer
    assert launched == 1  # C2
    assert all(
        # refused, or the same call answered from the newer execution's claim
        e["status"] in ("error", "uncertain") or e["operation_key"] == answer["operation_key"]
        for e in zombie_answers
    ), zombie_answers
    assert forked["status"] == "ok", forked  # no stale fence for the fork
    assert forked["execution_fence"] == 1, forked
    assert forked["sandbox_id"] == answer["sandbox_id"]
    assert server.truth().marked(prefix) == 2  # the fork ran the step again, once


@pytest.mark.long
def test_c2_pydantic_ai_dbos_agent_tool_call_launches_once_across_a_killed_executor(
    server: LocalE2B, postgres: PostgresServer, tmp_path: Path
) -> None:
    """C2 for pydantic-ai's durable agent on DBOS (``DBOSDurability``,
    sandrail's adapter inside a ``DynamicToolset``, whose calls are steps):
    the executor is SIGKILLed while the agent's tool call runs its command;
    an executor of another id recovers the workflow and runs the step again,
    under the same operation key (pydantic-ai's run id, derived from the
    workflow, and the model's tool call id), so it reconciles the first
    launch: one launch, answered ``ok``."""
    prefix = f"dpa-{uuid.uuid4().hex[:8]}"
    app = App(server, postgres, tmp_path, ENGINE_AGENT="1")
    try:
        app.workers.spawn()
        app.workers.wait_ready(0)
        handle = app.enqueue(prefix, f"{server.mark(prefix)}; sleep 2", workflow="agent_run")
        deadline = time.monotonic() + 60
        while not server.truth().marked(prefix):
            assert time.monotonic() < deadline, app.workers.stderr(0)
            time.sleep(0.1)
        app.workers.kill(0)
        app.workers.replace_dead()  # exec-1, which recovers exec-0's workflows
        answer = json.loads(_wait(handle))
    finally:
        app.close()
    assert answer["status"] == "ok", answer
    assert answer["call_id"] == "call-run-1"
    assert answer["deduplicated"] is True  # the re-run step reconciled the first launch
    assert server.truth().marked(prefix) == 1  # C2


def test_c2_dbos_fork_reruns_from_its_step_in_the_same_sandbox(
    server: LocalE2B, postgres: PostgresServer, tmp_path: Path
) -> None:
    """A fork is a new workflow (a new id): the steps from its start step on
    run again as new calls (new keys), the steps before it are copied and
    never re-run; its session is the original workflow's, so the fork runs in
    the sandbox the earlier steps used. A fork of the fork, and then a
    sibling fork of the original from its first step, run their steps too:
    no fork's execution is refused by a fence another one left."""
    prefix = f"frk-{uuid.uuid4().hex[:8]}"
    app = App(server, postgres, tmp_path)
    try:
        app.workers.spawn()
        app.workers.wait_ready(0)
        first = _result(
            app.enqueue(prefix, [server.mark(f"{prefix}.a"), server.mark(f"{prefix}.b")])
        )
        fork = app.client.fork_workflow(prefix, 2)
        forked = _result(fork)
        deeper = _result(app.client.fork_workflow(fork.workflow_id, 2))
        sibling = _result(app.client.fork_workflow(prefix, 1))
    finally:
        app.close()
    truth = server.truth()
    assert [answer["status"] for answer in [*deeper, *sibling]] == ["ok"] * 4, (deeper, sibling)
    assert truth.marked(f"{prefix}.a") == 2  # the original's, and the sibling's
    assert truth.marked(f"{prefix}.b") == 4  # one each: original, fork, its fork, sibling
    assert forked[0] == first[0]  # copied, not re-run
    assert forked[1]["operation_key"] == f"dbos:{fork.workflow_id}:2"
    assert forked[1]["operation_key"] != first[1]["operation_key"]
    assert forked[1]["session_id"] == first[1]["session_id"] == f"dbos:{prefix}"
    assert forked[1]["sandbox_id"] == first[1]["sandbox_id"]
    assert forked[1]["task_chain_id"] == prefix


def test_c11_dbos_cancelled_workflow_aborts_the_running_step(
    server: LocalE2B, postgres: PostgresServer, tmp_path: Path
) -> None:
    """C11 under DBOS: DBOS does not interrupt a running step, so sandrail
    forwards a cancelled workflow to the call: it is aborted within a poll
    and ends ``uncertain`` (the command had started), never a lost launch."""
    prefix = f"dcn-{uuid.uuid4().hex[:8]}"
    app = App(server, postgres, tmp_path)
    try:
        app.workers.spawn()
        app.workers.wait_ready(0)
        app.enqueue(prefix, [f"{server.mark(prefix)}; sleep 60"])
        deadline = time.monotonic() + 60
        while not server.truth().marked(prefix):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        began = time.monotonic()
        app.client.cancel_workflow(prefix)
        while not any(e["event"] == "answer" for e in app.workers.events(0)):
            assert time.monotonic() - began < 30, "the call was not aborted"
            time.sleep(0.1)
        (line,) = [e for e in app.workers.events(0) if e["event"] == "answer"]
    finally:
        app.close()
    assert line["status"] == "uncertain"
    assert line["error_type"] == "e2b_command_aborted"
    assert server.truth().marked(prefix) == 1


def test_dbos_operation_key_outside_a_step_is_a_clear_error() -> None:
    for read in (sandrail_dbos.operation_key, sandrail_dbos.session_id):
        with pytest.raises(sandrail_dbos.NotInStepError, match="inside a DBOS step"):
            read()


def test_dbos_steps_refuse_bad_options_at_once() -> None:
    sim = Simulator()
    with pytest.raises(ValueError, match="poll_seconds"):
        sandrail_dbos.SandboxSteps(backend=sim, scope={}, poll_seconds=0)
    with pytest.raises(ValueError, match="reconcile_attempts"):
        sandrail_dbos.SandboxSteps(backend=sim, scope={}, reconcile_attempts=101)
    with pytest.raises(TypeError, match="identity"):
        sandrail_dbos.SandboxSteps(backend=sim, scope={}, identity=None, name="bad-options")


# -- answers: the uncertain bound, refusals="raise" (DBOS in this process) ---------


class _Counting:
    """The simulator, counting the starts it is sent."""

    def __init__(self, simulator: Simulator) -> None:
        self.simulator = simulator
        self.starts = 0

    def __call__(self, effect: Effect) -> Any:
        if isinstance(effect, Start):
            self.starts += 1
        return self.simulator(effect)


@contextlib.contextmanager
def _dbos_here(postgres: PostgresServer) -> Iterator[None]:
    """DBOS launched in this process on a fresh database (destroyed after)."""
    from dbos import DBOS

    DBOS(
        config={
            "name": "sandrail-answers",
            "system_database_url": postgres.url(postgres.fresh_database()),
        }
    )
    DBOS.launch()
    try:
        yield
    finally:
        DBOS.destroy(destroy_registry=True)


def test_c6_dbos_uncertain_is_retried_within_its_bound_and_never_launches_twice(
    postgres: PostgresServer,
) -> None:
    """C6, C2 under DBOS: a start whose answer is lost every time is
    ``uncertain``; the step is retried (each retry reconciles under the same
    key, never launching again) for ``reconcile_attempts`` attempts, then
    returned with its locator; with ``refusals="raise"`` it is raised as
    ``SandrailRefusal`` once the bound is reached."""
    from dbos import DBOS

    lost = FaultPlan(
        tuple(Fault(effect="Start", occurrence=n, kind=FaultKind.RESPONSE_LOST) for n in range(20))
    )
    backend = _Counting(Simulator(plan=lost))
    tag = uuid.uuid4().hex[:8]
    steps = sandrail_dbos.SandboxSteps(
        backend=backend, scope={"tenant": "t"}, reconcile_attempts=3, name=f"unc-{tag}"
    )

    @DBOS.workflow(name=f"unc-return-{tag}")
    def returned() -> str:
        return steps.call("run_command", {"command": "echo one"})

    @DBOS.workflow(name=f"unc-raise-{tag}")
    def raised() -> str:
        return steps.call("run_command", {"command": "echo two"}, refusals="raise")

    with _dbos_here(postgres):
        answer = json.loads(returned())
        starts_returned = backend.starts
        with pytest.raises(sandrail_dbos.SandrailRefusal) as failure:
            raised()
    assert answer["status"] == "uncertain", answer
    assert answer["operation_key"].startswith("dbos:")
    assert starts_returned == 3  # the bound: three attempts, then returned
    assert backend.starts == 6
    raised_answer = json.loads(failure.value.text)
    assert raised_answer["status"] == "uncertain"
    assert failure.value.kind == raised_answer["error_type"]
    assert sorted(backend.simulator.launches.values()) == [1, 1]  # C2: once per key


def test_c8_dbos_refusal_raised_is_not_retried(postgres: PostgresServer) -> None:
    """C8 under DBOS: with ``refusals="raise"`` a refusal (``policy_denied``)
    raises ``SandrailRefusal`` after one attempt (DBOS does not retry it),
    its text the answer's JSON; nothing reached the sandbox."""
    from dbos import DBOS

    asked: list[str] = []

    def deny(request: sandrail.ToolRequest) -> sandrail.core.PolicyDecision:
        asked.append(request.operation_key)
        return sandrail.Deny(reason="not here")

    backend = _Counting(Simulator())
    tag = uuid.uuid4().hex[:8]
    steps = sandrail_dbos.SandboxSteps(
        backend=backend, scope={"tenant": "t"}, authorize=deny, name=f"deny-{tag}"
    )

    @DBOS.workflow(name=f"deny-{tag}")
    def denied() -> str:
        return steps.call("run_command", {"command": "rm -rf /"}, refusals="raise")

    with _dbos_here(postgres), pytest.raises(sandrail_dbos.SandrailRefusal) as failure:
        denied()
    assert failure.value.kind == "policy_denied"
    assert json.loads(failure.value.text)["executed"] is False
    assert len(asked) == 1  # one attempt: not retried
    assert backend.starts == 0


def test_c8_dbos_bad_call_id_or_arguments_are_one_refusal_never_retried(
    postgres: PostgresServer,
) -> None:
    """A blank or NUL-holding call id and arguments that are not an object
    are the call's bad input: answered with the toolset's refusal after one
    attempt, nothing launched; never a ``ValueError`` DBOS retries."""
    from dbos import DBOS

    backend = _Counting(Simulator())
    tag = uuid.uuid4().hex[:8]
    steps = sandrail_dbos.SandboxSteps(backend=backend, scope={"tenant": "t"}, name=f"bad-{tag}")

    @DBOS.workflow(name=f"bad-{tag}")
    def bad() -> list[str]:
        return [
            steps.call("run_command", {"command": "echo blank"}, call_id=""),
            steps.call("run_command", {"command": "echo nul"}, call_id="a\x00b"),
            steps.call("run_command", ["echo", "list"], call_id="call-1"),  # type: ignore[arg-type]
        ]

    with _dbos_here(postgres):
        answers = [json.loads(text) for text in bad()]
    assert [answer["error_type"] for answer in answers] == [
        "e2b_command_request_unbound",
        "e2b_command_request_unbound",
        "e2b_command_arguments_invalid",
    ]
    assert all(answer["executed"] is False for answer in answers)
    assert backend.starts == 0


def test_dbos_async_steps_run_tools_and_give_the_toolset(postgres: PostgresServer) -> None:
    """An async workflow: ``call_async`` runs a tool as an async step, and
    ``toolset()`` inside an async step of one's own gives the workflow's
    toolset (DBOS refuses its blocking status read on a running event loop:
    sandrail makes it off the loop)."""
    from dbos import DBOS

    backend = _Counting(Simulator())
    tag = uuid.uuid4().hex[:8]
    steps = sandrail_dbos.SandboxSteps(backend=backend, scope={"tenant": "t"}, name=f"as-{tag}")

    @DBOS.step(name=f"own-{tag}")
    async def own_step() -> str:
        return steps.toolset().session_id

    @DBOS.workflow(name=f"as-{tag}")
    async def run() -> list[str]:
        return [await steps.call_async("run_command", {"command": "echo hi"}), await own_step()]

    async def main() -> list[str]:
        return await run()

    with _dbos_here(postgres):
        text, session = asyncio.run(main())
    answer = json.loads(text)
    assert answer["status"] == "ok", answer
    assert session == answer["session_id"]
    assert backend.starts == 1


def test_c1_dbos_keys_of_workflow_ids_holding_colons_never_meet(postgres: PostgresServer) -> None:
    """C1, C2: the key's parts are escaped, so a workflow id holding
    ``:call:`` and another workflow's call id never make one key (joined
    plainly, ``dbos:x:call:y:1`` would be both), and plain ids keep the
    plain ``dbos:{workflow id}:{step id}``."""
    from dbos import DBOS, SetWorkflowID

    tag = uuid.uuid4().hex[:8]

    @DBOS.step(name=f"key-{tag}")
    def key(call_id: str | None) -> str:
        return sandrail_dbos.operation_key(call_id)

    @DBOS.workflow(name=f"keys-{tag}")
    def keys(call_id: str | None) -> str:
        return key(call_id)

    with _dbos_here(postgres):
        with SetWorkflowID(f"{tag}:call:y"):
            colons = keys(None)
        with SetWorkflowID(tag):
            called = keys("y:1")
        with SetWorkflowID(f"{tag}-plain"):
            plain = keys(None)
    assert colons != called
    assert colons == f"dbos:{tag}%3Acall%3Ay:1"
    assert called == f"dbos:{tag}:call:y%3A1"
    assert plain == f"dbos:{tag}-plain:1"
