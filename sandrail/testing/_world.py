"""A world under test: a backend, its ground truth, the ports on it, and a
record of every call they made and every effect each call caused.

Strategy: the ports a :class:`World` builds are ordinary ports whose
``execute`` also opens a :class:`CallRecord` (in a context variable), and
whose backend is the world's *tap*: every sandbox effect passes through it,
so it can attribute each effect, each fault that fired and each real launch
(read from the ground truth before and after the effect) to the call that
caused it, even when two calls interleave on one event loop. Requests held
for late delivery arrive only through :meth:`World.deliver_held` (or at the
next effect, if asked), which attributes a late launch to the call whose
request was held. The judge (:mod:`._judge`) reads these records.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import hashlib
import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs

import sandrail
from sandrail import ToolPort, ToolRequest, ToolResult
from sandrail._options import given_options
from sandrail._port import ToolGroup, build_port
from sandrail.core import (
    Effect,
    EffectFailure,
    NativeIdentity,
    NativeOwner,
    OwnedCommand,
    PortSettings,
    SandboxEffect,
    SandboxReady,
    Start,
    Started,
    StartRefused,
    ToolKind,
    launch_digest,
    plain_arguments,
    same_call,
)
from sandrail.interpreters._cancel import EitherSignal
from sandrail.interpreters._drivers import is_asynchronous
from sandrail.interpreters.replay import Recorder
from sandrail.interpreters.simulator import (
    Fault,
    FaultPlan,
    Script,
    SimulatedHarness,
    Simulator,
    emulate,
)

from ._calls import (
    _BATCH,
    _CURRENT,
    _LABEL,
    SESSION,
    CallRecord,
    LateDelivery,
    Mode,
    WatchedPort,
    code_tool,
    native_identity,
    tool_kind,
)
from ._faults import FaultyBackend
from ._launches import (
    Unscripted,
    launched_commands,
    unscripted,
    unscripted_launches,
    unscripted_message,
)
from ._record_faults import FaultyRecord, RecordFaultPlan
from ._truth import GroundTruth, Target, TargetFactory, takes_strike
from ._world_ports import AsyncTap, WatchedToolset, checked_groups, toolset_identity, world_options

__all__ = ["World"]


class World:
    """A backend under ``plan``, the ports on it, and the ground truth per call.

    Build one with :meth:`simulated` (the in-memory simulator, faults struck
    by the simulator itself) or :meth:`on` (any :class:`Target`, faults
    struck in front of its backend by a
    :class:`~sandrail.testing.FaultyBackend`). Then make ports with
    :meth:`command_tools` / :meth:`code_tools`, call them as a harness does
    (``port.execute_sync(request)``, or :meth:`call`), and ask the judge:
    :meth:`violations` or :meth:`assert_contract`.

    ``deliver_at``: numbers (from 1) of sandbox effects before which every
    held request is delivered, as if it arrived just then.
    ``late_delivery``: ``"manual"`` (held requests arrive only on
    :meth:`deliver_held`, and before the judge judges) or ``"next_effect"``
    (also just before the next effect anyone sends). With ``record_dir``,
    every port records its session into a cassette there.
    """

    def __init__(
        self,
        *,
        backend: Any,
        faults: Any,
        truth: GroundTruth,
        harness: SimulatedHarness,
        simulator: Simulator | None = None,
        target: Target | None = None,
        deliver_at: frozenset[int] = frozenset(),
        late_delivery: LateDelivery = "manual",
        record_dir: Path | None = None,
        secrets: Sequence[str] = (),
        unscripted_watch: Unscripted | None = None,
    ) -> None:
        self.backend = backend
        """What the tap forwards to: the simulator, a FaultyBackend in front of
        the target's backend, or that backend (with the faults inside it)."""
        self.faults = faults
        """What strikes the plan: the simulator or a FaultyBackend (its
        ``faults_fired``, ``held``, ``late_deliveries`` and ``deliver_held``)."""
        self.truth = truth
        self.harness = harness
        self.sim = simulator
        """The simulator, for a world made by :meth:`simulated` (else ``None``)."""
        self.target = target
        self.deliver_at = deliver_at
        self.late_delivery: LateDelivery = late_delivery
        self.record_dir = record_dir
        self.secrets = tuple(secrets)
        """Values that must never appear in a result or recording (C17)."""
        self.default_owner: Mode = "agent"
        """The owner of ports made without one (``"agent"`` or ``"native"``):
        the conformance kit runs its scenarios once with each."""
        self.calls: list[CallRecord] = []
        self.claims: dict[str, str] = {}
        """Task id -> the launch digest it was first launched with."""
        self.fence_marks: dict[str, int] = {}
        """Sandbox -> the highest request fence among Starts that reached it."""
        self.stale_launches: list[tuple[CallRecord | None, int, int]] = []
        """Launches whose request fence was below the sandbox's mark (C10)."""
        self.keys: dict[str, set[str]] = {}
        """Session -> operation keys its launches used."""
        self.durable: dict[tuple[str, str], OwnedCommand] = {}
        """The harness's durable ownership record, by (session, task id), for
        ports made with ``durable_ownership=True``: shared by the command and
        code ports of a session and kept across a restart (a new
        :meth:`port` on the same world stands for a restarted harness)."""
        self.faulty_record: FaultyRecord | None = None
        """Strikes record faults on :attr:`durable` (see :meth:`strike_record`)."""
        self.recordings: list[Path] = []
        self.unscripted_watch = unscripted_watch
        """Notes the commands the simulator does not emulate (``None``: the
        world cannot tell)."""
        self.refuse_unscripted = False
        """Whether :meth:`violations` lists unscripted launches (see
        :meth:`simulated`)."""
        self._recorders: list[Recorder] = []
        self._task_ids: dict[tuple[str, str], tuple[object, str]] = {}
        self._owner_of: dict[int, CallRecord | None] = {}
        self._seen = 0
        self._applied = getattr(truth, "applied", None)

    # -- construction --------------------------------------------------------------

    @classmethod
    def simulated(
        cls,
        plan: FaultPlan | Sequence[Fault] | None = None,
        *,
        scripts: Mapping[str, Script] | None = None,
        late_delivery: LateDelivery = "manual",
        deliver_at: frozenset[int] = frozenset(),
        record_dir: Path | None = None,
        secrets: Sequence[str] = (),
        unscripted: Literal["fail", "allow"] = "fail",
        **simulator_options: Any,
    ) -> World:
        """A world on a fresh :class:`Simulator` that strikes ``plan`` (a
        :class:`FaultPlan` or a list of :class:`Fault`). ``scripts`` and the
        other keyword arguments go to the simulator.

        ``unscripted``: with ``"fail"`` (the default), each launch of a
        command or snippet the simulator neither emulates nor has a script
        for (it ran nothing and exited 127, under a result whose ``status``
        is ``ok``) is a violation :meth:`violations` lists and
        :meth:`assert_contract` raises; ``"allow"`` lets them be (a test of
        exit 127 itself). :meth:`unscripted` lists them either way.
        ``ValueError`` for any other value.
        """
        if unscripted not in ("fail", "allow"):
            raise ValueError(f'unscripted must be "fail" or "allow", got {unscripted!r}')
        default = simulator_options.pop("default", emulate)
        watch = Unscripted(default) if callable(default) else None
        harness = SimulatedHarness()
        sim = Simulator(
            default=default if watch is None else watch,
            scripts=scripts,
            plan=_plan(plan),
            harness=harness,
            late_delivery="manual",
            **simulator_options,
        )
        world = cls(
            backend=sim,
            faults=sim,
            truth=sim,
            harness=harness,
            simulator=sim,
            deliver_at=deliver_at,
            late_delivery=late_delivery,
            record_dir=record_dir,
            secrets=secrets,
            unscripted_watch=watch,
        )
        world.refuse_unscripted = unscripted == "fail"
        return world

    @classmethod
    def on(
        cls,
        target: Target | TargetFactory,
        plan: FaultPlan | Sequence[Fault] | None = None,
        *,
        late_delivery: LateDelivery = "manual",
        deliver_at: frozenset[int] = frozenset(),
        record_dir: Path | None = None,
        secrets: Sequence[str] = (),
    ) -> World:
        """A world on a target's backend with ``plan`` struck in front of it.

        ``target`` is a :class:`Target`, or a factory of one; a factory that
        takes a ``strike`` parameter places the faults itself, around the
        upstream its backend calls (see :data:`~sandrail.testing.TargetFactory`).
        """
        harness = SimulatedHarness()
        faults: FaultyBackend | None = None

        def strike(upstream: Callable[[Any], Any]) -> Callable[[Any], Any]:
            nonlocal faults
            if faults is not None:
                raise RuntimeError("strike() wraps one upstream per target")
            faults = FaultyBackend(upstream, _plan(plan), harness=harness)
            return faults

        if not isinstance(target, Target):
            target = target(strike) if takes_strike(target) else target()  # type: ignore[call-arg]
        assert isinstance(target, Target)
        if faults is None:
            faults = FaultyBackend(target.backend, _plan(plan), harness=harness)
            backend: Any = faults
        else:
            backend = target.backend
        try:
            faults.use_controls(target)
        except ValueError:
            target.close()
            raise
        return cls(
            backend=backend,
            faults=faults,
            truth=target.truth,
            harness=harness,
            target=target,
            deliver_at=deliver_at,
            late_delivery=late_delivery,
            record_dir=record_dir,
            secrets=secrets,
        )

    @property
    def asynchronous(self) -> bool:
        """Whether the backend answers with awaitables (ports then run async;
        see :func:`~sandrail.interpreters._drivers.is_asynchronous`)."""
        return is_asynchronous(self.backend)

    # -- ports -------------------------------------------------------------------------

    def command_tools(self, **options: Any) -> WatchedPort:
        """A port with the command tools on this world (see :meth:`port`)."""
        return self.port("command", **options)

    @property
    def code_tool(self) -> str:
        """The snippet tool's name for :attr:`default_owner` (``run_code``
        for a native owner, ``sandbox_run_code`` for an agent)."""
        return code_tool(self.default_owner)

    def code_tools(self, **options: Any) -> WatchedPort:
        """A port with the snippet tool on this world (see :meth:`port`)."""
        return self.port("code", **options)

    def port(
        self,
        tools: Literal["command", "code"] = "command",
        *,
        session_id: str = SESSION,
        owner: sandrail.AgentOwner | sandrail.NativeOwner | Mode | None = None,
        durable_ownership: bool = False,
        interleave: bool = False,
        **options: Any,
    ) -> WatchedPort:
        """A new port (a harness process) on this world, its calls recorded.

        ``owner`` is an owner, or ``"agent"`` / ``"native"`` for the kit's
        own (``agent-1``; or the scope :data:`SCOPE`); by default
        :attr:`default_owner`. Every other keyword
        goes to :func:`sandrail.command_tools` (``authorize``,
        ``assert_authority``, ``max_output_bytes``, ...); ``authorize`` and
        ``assert_authority`` default to allowing everything, and the world's
        simulated harness is consulted as well, so that fault plans can take
        authority away or change the request. With ``durable_ownership``, the
        port keeps its ownership records in :attr:`durable` (as a harness with
        a database would: shared by the session's ports, and kept across a
        restart, which is simply another :meth:`port` call on this world; the
        world has no ``restart`` method) unless ``resolve_owned_command`` is
        given.
        ``interleave``: an asynchronous port whose effects yield to the event
        loop first, so concurrent calls interleave effect by effect.
        """
        given, recorder = world_options(
            self,
            tools,
            session_id=session_id,
            owner=owner,
            durable_ownership=durable_ownership,
            interleave=interleave,
            options=options,
        )
        port = build_port(
            tools,
            given_options(given, f"{tools}_tools"),
            port_type=functools.partial(WatchedPort, world=self),
        )
        assert isinstance(port, WatchedPort)
        if recorder is not None:
            recorder.attach(port)
        return port

    def toolset(
        self,
        *,
        tools: Iterable[ToolGroup] = ("command", "code"),
        session_id: str = SESSION,
        owner: sandrail.AgentOwner | sandrail.NativeOwner | Mode | None = None,
        identity: Any = None,
        durable_ownership: bool = False,
        interleave: bool = False,
        **options: Any,
    ) -> sandrail.Toolset:
        """A :class:`~sandrail.Toolset` on this world, its calls recorded as
        a port's are: hand it to an adapter (pydantic-ai, the Agents SDK,
        Anthropic, MCP) and judge the harness built on it.

        ``tools``, ``run_id`` and every option of :class:`~sandrail.Toolset`
        but ``backend`` (``TypeError``: the world's tap is the backend) mean
        what they mean there; ``session_id``, ``owner``,
        ``durable_ownership`` and ``interleave`` what they mean for
        :meth:`port`. ``identity`` defaults to the owner's (for a native
        owner, :func:`~sandrail.testing.native_identity`). In a world with a
        ``record_dir`` a toolset records one tool group: give
        ``tools=("command",)`` or ``("code",)`` (``ValueError`` otherwise).
        """
        groups = checked_groups(self, tools)
        given, _ = world_options(
            self,
            "+".join(groups),
            session_id=session_id,
            owner=owner,
            durable_ownership=durable_ownership,
            interleave=interleave,
            options=options,
        )
        return WatchedToolset(
            world=self,
            tools=groups,
            identity=toolset_identity(given["owner"], identity),
            **given,
        )

    def tap(self, interleave: bool = False) -> Any:
        """The backend a port of this world sends its effects to: the tap,
        or its asynchronous twin (see :meth:`port`'s ``interleave``)."""
        return AsyncTap(self, interleave) if interleave or self.asynchronous else self._tap

    def keep_recorder(self, recorder: Recorder) -> None:
        """Close ``recorder`` with the world."""
        self._recorders.append(recorder)

    def durable_record(
        self, session_id: str
    ) -> tuple[
        Callable[[ToolRequest, str], OwnedCommand | None],
        Callable[[ToolRequest, OwnedCommand], None],
    ]:
        """``resolve_owned_command`` and ``remember_owned_command`` callbacks
        backed by :attr:`durable` for ``session_id``."""

        if self.faulty_record is not None:
            return self.faulty_record.callbacks(session_id)

        def resolve(request: ToolRequest, task: str) -> OwnedCommand | None:
            return self.durable.get((session_id, task))

        def remember(request: ToolRequest, owned: OwnedCommand) -> None:
            self.durable[(session_id, owned.task_id)] = owned

        return resolve, remember

    def strike_record(self, plan: RecordFaultPlan) -> None:
        """Strike ``plan`` on the durable ownership record of the ports made
        from now on with ``durable_ownership=True`` (a database down, a
        connection dropped after a write, a slow one)."""
        self.faulty_record = FaultyRecord(
            self.durable, plan, current=_CURRENT.get, advance=self.advance
        )

    # -- calls -----------------------------------------------------------------------

    def request(
        self,
        port: ToolPort,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        key: str,
        call_id: str | None = None,
        fence: int = 1,
    ) -> ToolRequest:
        """A well-formed request for ``port``: its session, its owner's
        identity (native: :func:`native_identity` with ``fence``)."""
        owner = port.settings.owner
        identity: sandrail.AgentIdentity | NativeIdentity = (
            native_identity(fence=fence, scope=owner.scope)
            if isinstance(owner, NativeOwner)
            else sandrail.AgentIdentity(agent_id=owner.agent_id)
        )
        return ToolRequest(
            call=sandrail.ToolCall(
                name=tool,
                call_id=call_id or f"call-{len(self.calls) + 1}",
                arguments=dict(arguments or {}),
            ),
            operation_key=key,
            session_id=port.settings.session_id,
            definition=port.definition(tool),
            identity=identity,
        )

    def call(
        self,
        port: ToolPort,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        key: str,
        call_id: str | None = None,
        fence: int = 1,
        label: str | None = None,
    ) -> ToolResult:
        """Make one call on ``port`` (built by this world) and return its
        result; ``label`` (else the one :meth:`labelled` set) marks its record."""
        request = self.request(port, tool, arguments, key=key, call_id=call_id, fence=fence)
        with self.labelled(_LABEL.get() if label is None else label):
            return port.execute_sync(request)

    def call_concurrently(
        self, port: ToolPort, requests: Sequence[ToolRequest], *, label: str | None = None
    ) -> list[ToolResult]:
        """Run ``requests`` at once on ``port`` (an asynchronous one, e.g. made
        with ``interleave=True``); their records are marked concurrent."""
        self.harness.reset()
        batch = _BATCH.set(True)

        async def all_of() -> list[ToolResult]:
            return list(await asyncio.gather(*(port.execute(request) for request in requests)))

        try:
            with self.labelled(_LABEL.get() if label is None else label):
                return _run(all_of())
        finally:
            _BATCH.reset(batch)

    @contextlib.contextmanager
    def labelled(self, label: str) -> Iterator[None]:
        """Calls made inside the block carry ``label`` in their records."""
        token = _LABEL.set(label)
        try:
            yield
        finally:
            _LABEL.reset(token)

    @contextlib.contextmanager
    def _watching(self, port: ToolPort, request: ToolRequest) -> Iterator[CallRecord]:
        """Open the record of a call about to run on ``port``."""
        concurrent = _BATCH.get()
        if not concurrent:
            self.harness.reset()
        record = self._open(port, request, concurrent=concurrent)
        token = _CURRENT.set(record)
        try:
            yield record
        finally:
            _CURRENT.reset(token)
            self._observe_harness(record)

    def _open(self, port: ToolPort, request: ToolRequest, *, concurrent: bool) -> CallRecord:
        settings = port.settings
        owner = settings.owner
        session_id = settings.session_id
        identity = request.identity
        fence = identity.execution_fence if isinstance(identity, NativeIdentity) else None
        watched = attrs.evolve(
            request, cancel=EitherSignal(self.harness.cancel_token, request.cancel)
        )
        tool = request.call.name
        arguments = plain_arguments(request.call.arguments) or {}
        task: str | None = None
        conflict = foreign = False
        key = request.operation_key
        kind = tool_kind(tool)  # None: the port refuses the call (the judge holds it to that)
        if kind is ToolKind.LAUNCHES and isinstance(key, str):
            task = self._task_id(session_id, owner, key)
            self.keys.setdefault(session_id, set()).add(key)
            claimed = self.claims.get(task)
            conflict = claimed is not None and claimed != launch_digest(tool, arguments)
        elif kind is ToolKind.OWNED_TASK:
            asked = arguments.get("task_id")
            task = asked if isinstance(asked, str) else None
            owned = {self._task_id(session_id, owner, k) for k in self.keys.get(session_id, ())}
            foreign = task is not None and task not in owned
        locator: dict[str, Any] = {} if identity is None else identity.locator()
        locator |= {"session_id": session_id, "operation_key": key, "call_id": request.call.call_id}
        try:
            oversized = len(sandrail.canonical_json(locator)) > settings.max_output_bytes
        except ValueError:
            oversized = False
        record = CallRecord(
            number=len(self.calls) + 1,
            label=_LABEL.get(),
            session_id=session_id,
            owner=owner,
            request=watched,
            budget=settings.max_output_bytes,
            governed=request.result_governance is not None,
            task=task,
            fence=fence,
            conflict=conflict,
            foreign=foreign,
            oversized=oversized,
            concurrent=concurrent,
            launched_before=0 if task is None else self.truth.launches.get(task, 0),
            one_call=_one_call(tool, arguments, settings) if kind is ToolKind.LAUNCHES else None,
        )
        self.calls.append(record)
        return record

    def _task_id(
        self, session_id: str, owner: sandrail.AgentOwner | sandrail.NativeOwner, key: str
    ) -> str:
        """:func:`sandrail.task_id`, worked out once per session, owner and key
        (a read asks for every key of its session)."""
        found = self._task_ids.get((session_id, key))
        if found is not None and (found[0] is owner or found[0] == owner):
            return found[1]
        task = sandrail.task_id(session_id, owner, key)
        self._task_ids[(session_id, key)] = (owner, task)
        return task

    def _observe_harness(self, record: CallRecord) -> None:
        # The request's token fires with the world's (a fault) or the harness's own.
        token = record.request.cancel
        record.aborted = self.harness.cancel_token.cancelled or bool(
            getattr(token, "cancelled", False)
        )
        record.drifted = self.harness.drifted
        record.authority_lost = not self.harness.authority_held

    # -- world events --------------------------------------------------------------------

    def deliver_held(self) -> None:
        """Deliver every held request now, attributing late launches."""
        marks = self._before_late_delivery()
        if marks is not None:
            self.faults.deliver_held()
            self._attribute_late(*marks)

    async def _deliver_held_async(self) -> None:
        """:meth:`deliver_held` from inside the event loop of an asynchronous port."""
        marks = self._before_late_delivery()
        if marks is not None:
            deliver = getattr(self.faults, "deliver_held_async", None)
            if deliver is not None:
                await deliver()
            else:
                self.faults.deliver_held()
            self._attribute_late(*marks)

    def _before_late_delivery(self) -> tuple[dict[str, int], int] | None:
        """How often each held start's task had launched, and how many late
        deliveries there were, before the held requests arrive (``None``:
        nothing is held)."""
        held = list(getattr(self.faults, "held", ()))
        if not held:
            return None
        before = {
            effect.task_id: self.truth.launches.get(effect.task_id, 0)
            for effect in held
            if isinstance(effect, Start)
        }
        return before, len(self.faults.late_deliveries)

    def _attribute_late(self, before: Mapping[str, int], start: int) -> None:
        """Charge the launches the ground truth counted while held requests
        arrived to the calls that sent them: the start that answered
        ``first_launch``, else (a backend whose answer hides it) the first
        start of the task that was not refused."""
        fresh = {task: self.truth.launches.get(task, 0) - count for task, count in before.items()}
        delivered = [
            (effect, result)
            for effect, result in self.faults.late_deliveries[start:]
            if isinstance(effect, Start) and not isinstance(result, EffectFailure)
        ]
        charged: set[int] = set()
        for first_only in (True, False):
            for number, (effect, result) in enumerate(delivered):
                if (
                    number not in charged
                    and fresh.get(effect.task_id, 0) > 0
                    and isinstance(result, Started)
                    and (result.first_launch or not first_only)
                ):
                    fresh[effect.task_id] -= 1
                    charged.add(number)
        for number, (effect, _) in enumerate(delivered):
            self._applied_start(self._owner_of.get(id(effect)), effect, launched=number in charged)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time pass (a world without a clock ignores it)."""
        if self.sim is not None:
            self.sim.advance(seconds)
        elif self.target is not None and self.target.advance is not None:
            self.target.advance(seconds)

    def sandbox_of(self, session_id: str = SESSION) -> str | None:
        """The sandbox the calls of ``session_id`` were last told they use."""
        for record in reversed(self.calls):
            if record.session_id != session_id:
                continue
            for _, answer in reversed(record.effects):
                if isinstance(answer, SandboxReady):
                    return answer.sandbox_id
        return None

    def wipe_ledger(self, session_id: str = SESSION) -> None:
        """A command deletes the task claims of ``session_id``'s sandbox (if
        it has one yet, and the world can do that)."""
        sandbox_id = self.sandbox_of(session_id)
        if sandbox_id is None:
            return
        if self.sim is not None:
            self.sim.wipe_ledger(sandbox_id)
        elif self.target is not None and self.target.wipe_ledger is not None:
            self.target.wipe_ledger(sandbox_id)

    def close(self) -> None:
        """Close the cassettes being written and release the target."""
        for recorder in self._recorders:
            recorder.close()
        self._recorders.clear()
        if self.target is not None:
            target, self.target = self.target, None
            target.close()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- ground truth helpers -----------------------------------------------------------

    def task_of(self, port: ToolPort, key: str) -> str:
        """The task id ``key`` derives on ``port`` (C1)."""
        return sandrail.task_id(port.settings.session_id, port.settings.owner, key)

    def launches_of(self, port: ToolPort, key: str) -> int:
        """How many times the command of ``key`` on ``port`` really launched."""
        return self.truth.launches.get(self.task_of(port, key), 0)

    def check_watched(self) -> None:
        """Raise ``RuntimeError`` if the world's simulator answered effects
        its tap never saw: calls made on ports or toolsets this world did
        not build (``sandrail.Toolset(backend=world.sim, ...)``) go unjudged."""
        sim = self.sim
        if sim is not None and len(sim.effects_seen) > self._seen:
            raise RuntimeError(
                f"the simulator answered {len(sim.effects_seen) - self._seen} effect(s) no port "
                "of this world sent: make ports with world.command_tools() / "
                "world.code_tools(), or a Toolset with world.toolset(), so that the "
                "judge sees their calls"
            )

    def launched_commands(self) -> Counter[str]:
        """Command text -> how many times the calls of this world launched it,
        whatever its task id; a snippet counts under its source (its command
        names a hash of its key). A harness that retries with a new operation
        key launches one command twice under two task ids: C2 cannot see
        that, this can (``assert max(world.launched_commands().values()) <= 1``)."""
        return launched_commands(self)

    def unscripted(self) -> list[str]:
        """What the calls of this world launched that the simulator neither
        emulates nor has a script for (a command's text, a snippet's
        source), once each: each ran nothing and exited 127. Script them
        (``scripts={text: Script.prints(...)}``)."""
        return unscripted(self)

    def violations(self, *, deliver_held: bool = True, harness: bool = True) -> list[Any]:
        """Every contract line the calls so far broke (see :func:`judge`),
        every harness violation (line ``"harness"``: an ``uncertain`` call
        made again under another operation key; ``harness=False`` leaves
        them out, for calls drawn at random rather than made by a harness),
        then, unless the world allows them (see :meth:`simulated`), each
        call that launched an unscripted command (line ``"unscripted"``)."""
        from ._judge import Violation, judge

        found: list[Any] = judge(self, deliver_held=deliver_held, harness=harness)
        if self.refuse_unscripted:
            found += [
                Violation("unscripted", record.number, unscripted_message(text))
                for record, text in unscripted_launches(self)
            ]
        return found

    def assert_contract(self, *, deliver_held: bool = True, harness: bool = True) -> None:
        """Raise :class:`ContractViolationError` listing every broken line,
        if any (the harness's own among them unless ``harness`` is false:
        see :meth:`violations`)."""
        from ._judge import ContractViolationError

        found = self.violations(deliver_held=deliver_held, harness=harness)
        if found:
            raise ContractViolationError(found, self)

    # -- the tap ---------------------------------------------------------------------

    def _tap(self, effect: Effect) -> Any:
        """Pass one sandbox effect on, attributing what it causes."""
        self._seen += 1
        if self._seen in self.deliver_at or self.late_delivery == "next_effect":
            self.deliver_held()
        mark = self._mark(effect)
        answer: object
        try:
            answer = self.backend(effect)
        except EffectFailure as failure:
            answer = failure
        return self._settle(effect, answer, mark)

    def _mark(self, effect: Effect) -> tuple[int, int, int]:
        fired = len(self.faults.faults_fired)
        applied = -1 if self._applied is None else len(self._applied)
        launches = self.truth.launches.get(effect.task_id, 0) if isinstance(effect, Start) else 0
        return fired, applied, launches

    def _settle(self, effect: Effect, answer: object, mark: tuple[int, int, int]) -> Any:
        fired, applied, launches = mark
        assert isinstance(effect, SandboxEffect)
        record = _CURRENT.get()
        self._owner_of[id(effect)] = record
        applied_now = None if self._applied is None else self._applied[applied:]
        if record is not None:
            record.effects.append((effect, answer))
            record.faults.extend(self.faults.faults_fired[fired:])
            if applied_now and isinstance(answer, EffectFailure) and effect in applied_now:
                record.reached_unanswered.append(effect)
        if isinstance(effect, Start):
            if applied_now is not None:
                reached = effect in applied_now
            else:
                reached = isinstance(answer, Started | StartRefused)
            if reached:
                launched = self.truth.launches.get(effect.task_id, 0) > launches
                self._applied_start(record, effect, launched=launched)
            elif self.truth.launches.get(effect.task_id, 0) > launches and record is not None:
                record.launched[effect.task_id] += 1  # launched, though nobody saw it reach
        if isinstance(answer, EffectFailure):
            raise answer
        return answer

    def _applied_start(self, record: CallRecord | None, effect: Start, *, launched: bool) -> None:
        # The fence the harness asked for (its request's), not the one the
        # Start carried: a core that drops the fence must still be caught.
        fence = effect.fence if record is None else record.fence
        mark = self.fence_marks.get(effect.sandbox_id)
        if launched:
            if record is not None:
                record.launched[effect.task_id] += 1
            self.claims.setdefault(effect.task_id, effect.request_digest)
            if fence is not None and mark is not None and fence < mark:
                self.stale_launches.append((record, fence, mark))
        if fence is not None and (mark is None or fence > mark):
            self.fence_marks[effect.sandbox_id] = fence


_T = TypeVar("_T")
_RUNNER: dict[str, tuple[int, asyncio.Runner]] = {}


def _run(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(coroutine)``, on one event loop kept for the main thread
    of this process (a campaign makes thousands of concurrent calls, and a
    new loop costs about a millisecond each); any other thread, and a call
    from inside a running loop, gets exactly ``asyncio.run``. As there, the
    coroutine runs in a copy of the caller's context, and the tasks it leaves
    behind are cancelled before this returns."""
    if threading.current_thread() is not threading.main_thread():
        return asyncio.run(coroutine)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return asyncio.run(coroutine)  # raises, as it does there
    kept = _RUNNER.get("main")
    if kept is None or kept[0] != os.getpid():  # a fork must not share its parent's loop
        runner = asyncio.Runner()
        weakref.finalize(runner, runner.close)
        kept = _RUNNER["main"] = (os.getpid(), runner)
    runner = kept[1]
    try:
        return runner.run(coroutine, context=contextvars.copy_context())
    finally:
        _cancel_left(runner.get_loop())


def _cancel_left(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a run left on ``loop`` and let them finish (as
    ``asyncio.run`` does when it closes its loop)."""
    left = asyncio.all_tasks(loop)
    if not left:
        return
    for task in left:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))


def _plan(plan: FaultPlan | Sequence[Fault] | None) -> FaultPlan:
    if plan is None:
        return FaultPlan()
    if isinstance(plan, FaultPlan):
        return plan
    return FaultPlan(tuple(plan))


def _one_call(tool: str, arguments: Mapping[str, Any], settings: PortSettings) -> str | None:
    """The digest of a launch as one call to a port with ``settings``."""
    try:
        text = same_call(tool, arguments, settings)
    except Exception:
        return None
    return None if text is None else hashlib.sha256(text).hexdigest()
