"""A world under test: a backend, its ground truth, the ports on it, and a
record of every call they made and every effect each call caused.

The calls' records and what each is charged with are :mod:`._attribution`
(the base of :class:`World`); the event loop concurrent calls share is
:mod:`._kept_loop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

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
    SandboxReady,
)
from sandrail.interpreters._drivers import is_asynchronous
from sandrail.interpreters.launcher import Transport
from sandrail.interpreters.replay import Recorder
from sandrail.interpreters.simulator import (
    Fault,
    FaultPlan,
    Script,
    SimulatedHarness,
    Simulator,
    emulate,
)

from ._attribution import Attribution
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
)
from ._faults import FaultyBackend
from ._kept_loop import _run
from ._launches import (
    Unscripted,
    launched_commands,
    unscripted,
    unscripted_launches,
    unscripted_message,
)
from ._record_faults import FaultyRecord, RecordFaultPlan
from ._transport_faults import FaultyTransport
from ._truth import GroundTruth, Target, TargetFactory, takes_strike
from ._world_ports import AsyncTap, WatchedToolset, checked_groups, toolset_identity, world_options

__all__ = ["World"]


class World(Attribution):
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

        def strike(upstream: Any, /) -> Any:
            nonlocal faults
            if faults is not None:
                raise RuntimeError("strike() wraps one upstream per target")
            if isinstance(upstream, Transport):
                faults = FaultyTransport(upstream, _plan(plan), harness=harness)
            else:
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

    @property
    def can_kill_sandbox(self) -> bool:
        """Whether this world can kill a sandbox as its provider would (the
        simulator can; a target only with its ``kill_sandbox`` control)."""
        return self.sim is not None or (
            self.target is not None and self.target.kill_sandbox is not None
        )

    def kill_sandbox(self, session_id: str = SESSION) -> None:
        """The provider kills ``session_id``'s sandbox. ``ValueError`` when
        the session has no sandbox yet or the world cannot kill one (see
        :attr:`can_kill_sandbox`): a kill that did nothing would let a
        check of what follows a death pass vacuously."""
        sandbox_id = self.sandbox_of(session_id)
        if sandbox_id is None:
            raise ValueError(f"session {session_id} has no sandbox to kill")
        if self.sim is not None:
            self.sim.kill_sandbox(sandbox_id)
        elif self.target is not None and self.target.kill_sandbox is not None:
            self.target.kill_sandbox(sandbox_id)
        else:
            raise ValueError("this world has no kill_sandbox control")

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


def _plan(plan: FaultPlan | Sequence[Fault] | None) -> FaultPlan:
    if plan is None:
        return FaultPlan()
    if isinstance(plan, FaultPlan):
        return plan
    return FaultPlan(tuple(plan))
