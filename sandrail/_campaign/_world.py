"""One simulated world of the campaign: a simulator, the ports on it, and
the ground truth of every call.

Strategy: every sandbox effect a port sends goes through :meth:`World.interpret`
(a tap in front of the simulator), which knows the call in flight from a
context variable, so it can attribute each effect, each fault and each real
launch to the call that caused it, even when two calls interleave on one
event loop. Held requests are delivered only by :meth:`World.deliver_held`
(the simulator runs with ``late_delivery="manual"``), which attributes a late
launch to the call whose request was held. The checks judge the calls from
these records.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

import sandrail
from sandrail import ToolPort, ToolRequest, ToolResult
from sandrail.core import (
    Cancel,
    Delivery,
    Effect,
    EffectFailure,
    Ensure,
    NativeIdentity,
    Outcome,
    OwnedCommand,
    Publish,
    SandboxEffect,
    Start,
    Started,
)
from sandrail.interpreters.replay import Recorder
from sandrail.interpreters.simulator import Fault, FaultPlan, Script, SimulatedHarness, Simulator

__all__ = [
    "AGENT",
    "BUDGET",
    "LAUNCH_TOOLS",
    "SCOPE",
    "SCRIPTS",
    "SECRET",
    "SESSION",
    "CallRecord",
    "Mode",
    "PortHandle",
    "World",
]

Mode = Literal["agent", "native"]
Tools = Literal["command", "code"]

SESSION = "session-1"
FOREIGN_SESSION = "session-2"
AGENT = "agent-1"
SCOPE: Mapping[str, Any] = {"tenant": "acme", "project": "rails"}
BUDGET = 1_500
"""Small enough that chatty output must be cut on every return path (C12)."""
SECRET = "s3cr3t-campaign-env-value"
"""An environment value no result and no recording may ever contain (C17)."""
LAUNCH_TOOLS = frozenset({"run_command", "run_code", "sandbox_run_code"})
SCRIPTS: Mapping[str, Script] = {
    "build": Script.prints("compiled unit\n" * 200, stderr="warning\n", exit_code=0, duration=2),
    "serve": Script.hangs("listening\n", children=2),
    # These two print the env value they are launched with (only ever with
    # it): their results and later reads must show it masked (C17).
    "build-token": Script.prints(
        "compiled unit\n" * 200 + f"deploying with {SECRET}\n", exit_code=0, duration=2
    ),
    "serve-token": Script.hangs(f"listening, token {SECRET}\n", children=2),
    "print(1)": Script.prints("1\n"),
    "print(2)": Script.prints("2\n"),
}
_SIDE_EFFECTS = (Ensure, Publish, Start, Cancel)

_CURRENT: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar(
    "sandrail_campaign_call", default=None
)


@attrs.define(eq=False)
class CallRecord:
    """One tool call and everything the world saw it cause."""

    number: int
    label: str
    mode: Mode
    session_id: str
    owner: sandrail.AgentOwner | sandrail.NativeOwner
    request: ToolRequest
    budget: int
    task: str | None
    """Launch tools: the task id the key derives; read/stop: the task asked for."""
    fence: int | None
    conflict: bool = False
    """A launch whose task the sandbox already holds with other arguments (C3)."""
    foreign: bool = False
    """A read or stop of a task this session's keys never derive (C4)."""
    oversized: bool = False
    """The identity alone cannot fit the budget (C14)."""
    concurrent: bool = False
    effects: list[tuple[SandboxEffect, object]] = attrs.Factory(list)
    faults: list[Fault] = attrs.Factory(list)
    launched: Counter[str] = attrs.Factory(Counter)
    result: ToolResult | None = None
    aborted: bool = False
    drifted: bool = False
    authority_lost: bool = False

    @property
    def tool(self) -> str:
        return self.request.call.name

    @property
    def dispatched(self) -> bool:
        """Whether a side-effect request of this call may have reached the sandbox."""
        return any(
            isinstance(effect, _SIDE_EFFECTS)
            and not (isinstance(answer, EffectFailure) and answer.delivery is Delivery.NOT_SENT)
            for effect, answer in self.effects
        )


@attrs.frozen
class PortHandle:
    port: ToolPort
    session_id: str
    owner: sandrail.AgentOwner | sandrail.NativeOwner
    mode: Mode
    tools: Tools


class _AsyncTap:
    """The world's tap as an asynchronous backend that yields to the loop
    before each effect, so two calls in flight interleave effect by effect."""

    asynchronous = True

    def __init__(self, world: World) -> None:
        self._world = world

    async def __call__(self, effect: Effect) -> Outcome:
        await asyncio.sleep(0)
        return self._world.interpret(effect)


class World:
    """A simulator under ``plan``, ports on it, and the ground truth per call.

    ``deliver_at``: numbers (from 1) of sandbox effects before which every
    held request is delivered, as if it arrived just then. With
    ``record_dir``, every port records its session into a cassette there.
    """

    def __init__(
        self,
        plan: FaultPlan,
        *,
        deliver_at: frozenset[int] = frozenset(),
        record_dir: Path | None = None,
        budget: int = BUDGET,
    ) -> None:
        self.harness = SimulatedHarness()
        self.sim = Simulator(
            scripts=SCRIPTS, plan=plan, harness=self.harness, late_delivery="manual"
        )
        self.budget = budget
        self.deliver_at = deliver_at
        self.record_dir = record_dir
        self.calls: list[CallRecord] = []
        self.claims: dict[str, str] = {}
        """Task id -> the launch digest it was first launched with."""
        self.fence_marks: dict[str, int] = {}
        """Sandbox -> the highest request fence among Starts it applied."""
        self.stale_launches: list[tuple[CallRecord | None, int, int]] = []
        """Launches whose request fence was below the sandbox's mark (C10)."""
        self.keys: dict[str, set[str]] = {}
        """Session -> operation keys its launches used."""
        self.read_cursors: dict[str, tuple[int, int]] = {}
        """The cursors the last ``ok`` read of each task returned."""
        self.durable: dict[tuple[str, str], OwnedCommand] = {}
        """The harness's durable ownership record, by (session, task id):
        shared by the command and code ports of a session, and kept across
        harness restarts (``resolve_owned_command`` and
        ``remember_owned_command``), as the README recommends."""
        self.recordings: list[Path] = []
        self._recorders: list[Recorder] = []
        self._owner_of: dict[int, tuple[CallRecord | None, SandboxEffect]] = {}
        self._seen = 0
        self._async_tap = _AsyncTap(self)

    # -- ports -------------------------------------------------------------------

    def port(
        self,
        *,
        mode: Mode,
        tools: Tools,
        session_id: str = SESSION,
        asynchronous: bool = False,
    ) -> PortHandle:
        """A new port (a harness process) on this world's simulator."""
        owner: sandrail.AgentOwner | sandrail.NativeOwner = (
            sandrail.AgentOwner(agent_id=AGENT)
            if mode == "agent"
            else sandrail.NativeOwner(scope=SCOPE)
        )
        backend: Any = self._async_tap if asynchronous else self.interpret
        recorder: Recorder | None = None
        if self.record_dir is not None:
            path = self.record_dir / f"port-{len(self.recordings) + 1}-{session_id}-{tools}.jsonl"
            recorder = Recorder(backend, path, secrets=[SECRET])
            self.recordings.append(path)
            self._recorders.append(recorder)
            backend = recorder
        factory = sandrail.command_tools if tools == "command" else sandrail.code_tools

        def resolve(request: ToolRequest, task: str) -> OwnedCommand | None:
            return self.durable.get((session_id, task))

        def remember(request: ToolRequest, owned: OwnedCommand) -> None:
            self.durable[(session_id, owned.task_id)] = owned

        port = factory(
            backend=backend,
            session_id=session_id,
            owner=owner,
            authorize=self.harness.authorize,
            assert_authority=self.harness.assert_authority,
            max_output_bytes=self.budget,
            resolve_owned_command=resolve,
            remember_owned_command=remember,
        )
        if recorder is not None:
            recorder.attach(port)
        return PortHandle(port, session_id, owner, mode, tools)

    def close(self) -> None:
        """Close the cassettes being written."""
        for recorder in self._recorders:
            recorder.close()
        self._recorders.clear()

    # -- calls -------------------------------------------------------------------

    def prepare(
        self,
        handle: PortHandle,
        tool: str,
        arguments: Mapping[str, Any],
        key: str,
        *,
        label: str,
        fence: int = 1,
        call_id: str | None = None,
        concurrent: bool = False,
    ) -> CallRecord:
        """The record of a call about to be made (its request included)."""
        number = len(self.calls) + 1
        identity: sandrail.AgentIdentity | NativeIdentity = (
            sandrail.AgentIdentity(agent_id=AGENT)
            if handle.mode == "agent"
            else NativeIdentity(
                scope=SCOPE,
                run_id="run-1",
                turn_id="turn-1",
                build_id="build-1",
                task_chain_id="chain-1",
                parent_run_id=None,
                execution_fence=fence,
            )
        )
        request = ToolRequest(
            call=sandrail.ToolCall(
                name=tool, call_id=call_id or f"call-{number}", arguments=dict(arguments)
            ),
            operation_key=key,
            session_id=handle.session_id,
            definition=handle.port.definition(tool),
            identity=identity,
            cancel=self.harness.cancel_token,
        )
        task: str | None
        record = CallRecord(
            number=number,
            label=label,
            mode=handle.mode,
            session_id=handle.session_id,
            owner=handle.owner,
            request=request,
            budget=self.budget,
            task=None,
            fence=fence if handle.mode == "native" else None,
            concurrent=concurrent,
        )
        if tool in LAUNCH_TOOLS:
            task = sandrail.task_id(handle.session_id, handle.owner, key)
            self.keys.setdefault(handle.session_id, set()).add(key)
            claimed = self.claims.get(task)
            record.conflict = claimed is not None and claimed != sandrail.core.launch_digest(
                tool, arguments
            )
        else:
            task = arguments.get("task_id")
            owned = {
                sandrail.task_id(handle.session_id, handle.owner, k)
                for k in self.keys.get(handle.session_id, ())
            }
            record.foreign = task is not None and task not in owned
        record.task = task
        locator = identity.locator() | {
            "session_id": handle.session_id,
            "operation_key": key,
            "call_id": request.call.call_id,
        }
        record.oversized = len(sandrail.canonical_json(locator)) > self.budget
        self.calls.append(record)
        return record

    def call(self, handle: PortHandle, record: CallRecord) -> CallRecord:
        """Run one prepared call to its result (a fresh harness state first)."""
        self.harness.reset()
        record.request = attrs.evolve(record.request, cancel=self.harness.cancel_token)
        token = _CURRENT.set(record)
        try:
            record.result = handle.port.execute_sync(record.request)
        finally:
            _CURRENT.reset(token)
        self._observe_harness(record)
        result = record.result
        if record.tool == "read_command_output" and result.status == "ok" and record.task:
            self.read_cursors[record.task] = (
                result.content["stdout_cursor"],
                result.content["stderr_cursor"],
            )
        return record

    def call_concurrently(self, handle: PortHandle, records: list[CallRecord]) -> None:
        """Run prepared calls at once on ``handle`` (an asynchronous port)."""
        self.harness.reset()
        for record in records:
            record.request = attrs.evolve(record.request, cancel=self.harness.cancel_token)

        async def one(record: CallRecord) -> None:
            _CURRENT.set(record)
            record.result = await handle.port.execute(record.request)

        async def all_of() -> None:
            await asyncio.gather(*(one(record) for record in records))

        asyncio.run(all_of())
        for record in records:
            self._observe_harness(record)

    def _observe_harness(self, record: CallRecord) -> None:
        record.aborted = self.harness.cancel_token.cancelled
        record.drifted = self.harness.drifted
        record.authority_lost = not self.harness.authority_held

    # -- the tap -------------------------------------------------------------------

    def interpret(self, effect: Effect) -> Outcome:
        """Pass one sandbox effect to the simulator, attributing what it causes."""
        self._seen += 1
        if self._seen in self.deliver_at:
            self.deliver_held()
        record = _CURRENT.get()
        sim = self.sim
        fired = len(sim.faults_fired)
        applied = len(sim.applied)
        launches = sim.launches.get(effect.task_id, 0) if isinstance(effect, Start) else 0
        answer: object
        try:
            answer = sim(effect)
        except EffectFailure as failure:
            answer = failure
        assert isinstance(effect, SandboxEffect)
        self._owner_of[id(effect)] = (record, effect)
        if record is not None:
            record.effects.append((effect, answer))
            record.faults.extend(sim.faults_fired[fired:])
        if isinstance(effect, Start) and len(sim.applied) > applied:
            launched = sim.launches.get(effect.task_id, 0) > launches
            self._applied_start(record, effect, launched=launched)
        if isinstance(answer, EffectFailure):
            raise answer
        return answer

    def deliver_held(self) -> None:
        """Deliver every held request now, attributing late launches."""
        start = len(self.sim.late_deliveries)
        self.sim.deliver_held()
        for effect, result in self.sim.late_deliveries[start:]:
            record = self._owner_of.get(id(effect), (None, effect))[0]
            if isinstance(effect, Start) and not isinstance(result, EffectFailure):
                launched = isinstance(result, Started) and result.first_launch
                self._applied_start(record, effect, launched=launched)

    def _applied_start(self, record: CallRecord | None, effect: Start, *, launched: bool) -> None:
        fence = None if record is None else record.fence
        mark = self.fence_marks.get(effect.sandbox_id)
        if launched:
            if record is not None:
                record.launched[effect.task_id] += 1
            self.claims.setdefault(effect.task_id, effect.request_digest)
            if fence is not None and mark is not None and fence < mark:
                self.stale_launches.append((record, fence, mark))
        if fence is not None and (mark is None or fence > mark):
            self.fence_marks[effect.sandbox_id] = fence
