"""The port a harness embeds: ``command_tools(...)`` and ``code_tools(...)``.

A port binds one session and one owner to a backend (any interpreter of the
sandbox effects) and the harness's callbacks. ``execute`` / ``execute_sync``
run one request through the pure tool program and return a
:class:`~sandrail.core.ToolResult` for every input: a malformed request, a
callback that raises or an interpreter bug all become results, and so does
an ``asyncio.CancelledError`` a backend raises when nobody cancelled the
call (an SDK's own task cancelled: a backend failure). What passes through:
a :class:`~sandrail.core.FatalInterpreterError` (a replay divergence), the
caller's own cancellation of ``await execute(...)``, and
``KeyboardInterrupt``/``SystemExit`` (the process is being stopped: never
turned into a result).

Strategy: the port answers the harness effects itself (policy, authority,
ownership ledger, artifacts) and passes sandbox effects to the backend. It
converts every unexpected exception into an ``EffectFailure`` in exactly one
place, :meth:`_Call.interpret`, and watches which side effects it dispatched
so that even a crash of the core reports ``uncertain`` rather than guessing.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, TypeAlias, cast

import attrs

from sandrail._artifact_calls import (
    ArtifactStore,
    ArtifactWriter,
    CallArtifacts,
    StreamingArtifactStore,
)
from sandrail._session_memory import memory_for
from sandrail._telemetry import Telemetry
from sandrail.core import (
    DEFAULT_MAX_OUTPUT_BYTES,
    MAX_TIMEOUT_SECONDS,
    MIN_MAX_OUTPUT_BYTES,
    SANDBOX_EFFECTS,
    AgentOwner,
    Allow,
    AppendArtifact,
    ApprovalRequired,
    AuthorityReport,
    Authorize,
    Cancel,
    CheckAuthority,
    CloseArtifact,
    Delivery,
    Deny,
    Effect,
    EffectFailure,
    Ensure,
    ErrorCode,
    FatalInterpreterError,
    NativeOwner,
    OpenArtifact,
    OwnedCommand,
    Owner,
    PolicyDecision,
    PortSettings,
    Publish,
    Read,
    RememberOwned,
    ResolveOwned,
    Start,
    ToolDefinition,
    ToolRequest,
    ToolResult,
    WriteArtifact,
    canonical_json,
    code_tool_definitions,
    command_tool_definitions,
    crash_result,
    error_result,
    redaction_secrets,
    request_digest,
    snapshot_request,
    tool_program,
    unchanged,
)
from sandrail.core._masking import MIN_REDACTED_LENGTH, Redactions
from sandrail.core._shown import NOTHING_SHOWN, ShownIdentities, shown_by
from sandrail.interpreters._drivers import drive, drive_async
from sandrail.interpreters._masking import MaskedReads
from sandrail.records._protocol import OwnershipRecord, note_answer

__all__ = [
    "ALLOW",
    "ArtifactStore",
    "ArtifactWriter",
    "AuthorityCallback",
    "AuthorizeCallback",
    "RememberOwnedCallback",
    "ResolveOwnedCallback",
    "StreamingArtifactStore",
    "ToolPort",
    "code_tools",
    "command_tools",
]

ALLOW = Allow()
"""The policy decision that lets a call go ahead."""

AuthorizeCallback: TypeAlias = Callable[[ToolRequest], PolicyDecision | Awaitable[PolicyDecision]]
AuthorityCallback: TypeAlias = Callable[[ToolRequest], bool]
ResolveOwnedCallback: TypeAlias = Callable[[ToolRequest, str], OwnedCommand | None]
RememberOwnedCallback: TypeAlias = Callable[[ToolRequest, OwnedCommand], object]

_SIDE_EFFECTS = (Ensure, Publish, Start, Cancel)
_SIDE_EFFECT_TYPES = frozenset(_SIDE_EFFECTS)
_SANDBOX_TYPES = frozenset(SANDBOX_EFFECTS)
_DECISIONS = frozenset((Allow, ApprovalRequired, Deny))
_NOTED = frozenset((*SANDBOX_EFFECTS, RememberOwned))
"""Effects whose sending :meth:`_Call._note` records (what a crash report needs)."""


class ToolPort:
    """Tools bound to one session, one owner and one backend.

    Build it with :func:`command_tools` or :func:`code_tools`.
    """

    def __init__(
        self,
        *,
        settings: PortSettings,
        backend: Callable[[Any], Any],
        authorize: AuthorizeCallback,
        assert_authority: AuthorityCallback,
        resolve_owned_command: ResolveOwnedCallback | None,
        artifacts: ArtifactStore | None,
        redact: frozenset[str] = frozenset(),
        remember_owned_command: RememberOwnedCallback | None = None,
        answers: OwnershipRecord | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._settings = settings
        self._backend = backend
        self._authorize = authorize
        self._assert_authority = assert_authority
        self._resolve_owned = resolve_owned_command
        self._remember_owned = remember_owned_command
        self._artifacts = artifacts
        self._ledger: dict[str, OwnedCommand] = {}
        self._ledger_lock = threading.Lock()
        # Env values this session passed to commands (through any port on
        # this backend object), and values the harness named, masked in all
        # output (C17); and the identity values its results showed (item 3
        # of issue 20). Kept in memory only: never in an effect or a
        # recording (see sandrail._session_memory).
        self._masks = memory_for(backend, settings.session_id)
        self._masks.learn(redact)
        # Where the last answer of each task is noted for operators, and
        # where traces go (issue 17).
        self._answers = answers
        self._telemetry = telemetry if telemetry is not None else Telemetry()
        self._tool_names = frozenset(definition.name for definition in settings.definitions)

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        """The tool definitions to offer the model; requests must carry one of these."""
        return self._settings.definitions

    @property
    def settings(self) -> PortSettings:
        return self._settings

    def definition(self, name: str) -> ToolDefinition:
        """The definition of tool ``name``; ``KeyError`` if this port has none."""
        found = self._settings.definition(name)
        if found is None:
            raise KeyError(f"this port has no tool named {name!r}")
        return found

    @property
    def owned_commands(self) -> Mapping[str, OwnedCommand]:
        """The default ledger: commands this port launched, by task id (C4)."""
        with self._ledger_lock:
            return dict(self._ledger)

    def execute_sync(self, request: ToolRequest) -> ToolResult:
        """Run one call to its result, blocking. Never raises (see module doc).

        With an asynchronous backend (``backend.asynchronous`` true) this runs
        :meth:`execute` on a private event loop; it refuses to do so inside a
        running loop, where ``await port.execute(...)`` is the right call.
        """
        call = _Call(self, request, asynchronous=False)
        try:
            return self._execute_sync(call, request)
        finally:
            call.artifacts.abort_all()
            call.trace.abandon("no_result")  # nothing when the call ended with one

    def _execute_sync(self, call: _Call, request: ToolRequest) -> ToolResult:
        try:
            if _is_asynchronous(self._backend):
                try:
                    asyncio.get_running_loop()
                except RuntimeError:
                    return asyncio.run(self.execute(request))
                return error_result(
                    ErrorCode.SYNC_CONTRACT_INVALID,
                    instruction="execute_sync was called inside an event loop; await execute().",
                )
            call.open()
            result = drive(
                tool_program(
                    request,
                    self._settings,
                    call.snapshot,
                    self._masks.secrets,
                    call.shown_identities(),
                ),
                call.trace.step(call.interpret),
            )
        except FatalInterpreterError:
            raise
        except Exception:
            result = call.crashed()
        return call.finish(result)

    async def execute(self, request: ToolRequest) -> ToolResult:
        """Run one call to its result. Never raises (see module doc)."""
        call = _Call(self, request, asynchronous=True)
        try:
            return await self._execute(call, request)
        finally:
            call.artifacts.abort_all()
            call.trace.abandon("no_result")  # nothing when the call ended with one

    async def _execute(self, call: _Call, request: ToolRequest) -> ToolResult:
        try:
            call.open()
            result = await drive_async(
                tool_program(
                    request,
                    self._settings,
                    call.snapshot,
                    self._masks.secrets,
                    call.shown_identities(),
                ),
                call.trace.step_async(call.interpret_async),
            )
        except FatalInterpreterError:
            raise
        except Exception:
            result = call.crashed()
        return call.finish(result)

    def _learn(self, values: frozenset[str]) -> None:
        """Mask ``values`` from now on, in this call and every later one."""
        self._masks.learn(values)

    def _current_redactions(self) -> Redactions:
        return self._masks.redactions


def _cancel_requested() -> bool:
    """Whether someone asked to cancel the running task (its caller), as
    opposed to a ``CancelledError`` a backend raised of its own."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _is_asynchronous(backend: object) -> bool:
    """Whether ``backend`` answers with awaitables. A backend whose attribute
    cannot even be read is a broken backend: the caller's ``except`` turns
    that into a result."""
    return getattr(backend, "asynchronous", False) is True


class _Call:
    """The port's side of one call: answers harness effects, forwards sandbox
    effects, and converts every unexpected exception into an EffectFailure.

    A backend that defines ``open_call(request, answer_harness, mask_reads)``
    (a recorder or a replayer) sees every effect of a well-formed call,
    harness effects included: it gets an interpreter for this call back from
    ``open_call`` and answers harness effects by calling ``answer_harness``
    (or from a recording). A backend that passes sandbox effects on to an
    interpreter of its own must pass them through ``mask_reads(inner)``, so
    what it sees of output is already masked (C17). If that interpreter has
    ``finish(result)``, it is called with the result. A malformed request is
    refused by the core without any effect, so it never reaches such a backend.
    """

    def __init__(self, port: ToolPort, request: ToolRequest, *, asynchronous: bool) -> None:
        self.port = port
        self.request = request
        self.asynchronous = asynchronous
        self.dispatched = False
        self.sandbox_id: str | None = None
        self.task_id: str | None = None
        self.layered: Callable[[Effect], Any] | None = None
        # Reads are masked below any recorder, so neither the core nor a
        # cassette ever holds a secret or a piece of one (C17).
        self.sandbox: Callable[[Effect], Any] = MaskedReads(port._backend, port._current_redactions)
        # Taken before anything runs, so that even a crash can report the
        # locator the request had when it arrived (C6).
        self.snapshot = snapshot_request(request, port.settings)
        self.shown: ToolRequest = request
        self.named: frozenset[str] = frozenset()
        """Values a layered backend (a recorder) masks besides the port's."""
        self.artifacts = CallArtifacts(port._artifacts, self.redactions)
        """Artifacts this call writes; whatever is left open when it ends is aborted."""
        self.policy_drifted = False
        """The policy changed the arguments it was shown: the harness changed
        the request mid-call, which the next guard reports as drift (C9)."""
        self.trace = port._telemetry.begin(request, port._tool_names, self.redactions)

    def open(self) -> None:
        open_call = getattr(self.port._backend, "open_call", None)
        if callable(open_call) and self.snapshot is not None:
            answer = self.answer_harness_async if self.asynchronous else self.answer_harness
            self.layered = open_call(self.request, answer, self.mask_reads)

    def crashed(self) -> ToolResult:
        return crash_result(
            self.snapshot,
            self.port.settings,
            dispatched=self.dispatched,
            sandbox_id=self.sandbox_id,
            task=self.task_id,
        )

    def policy_request(self) -> ToolRequest:
        """The request as the policy must judge it: with the arguments the
        call checks and runs (its one plain copy), not a live object that may
        answer the policy one thing and the program another (C8, C9). A copy
        of its own, so a policy that changes it changes nothing."""
        snapshot = self.snapshot
        if snapshot is None:
            return self.request
        arguments = dict(snapshot.arguments)
        if not all(type(value) in _SCALARS for value in arguments.values()):
            arguments = json.loads(json.dumps(arguments))  # nested data: a deep copy
        return attrs.evolve(self.request, call=attrs.evolve(self.request.call, arguments=arguments))

    def ask_policy(self) -> object:
        """Call the harness's policy with :meth:`policy_request`."""
        self.shown = self.policy_request()
        try:
            return self.port._authorize(self.shown)
        finally:
            self.ask_policy_settled()

    def ask_policy_settled(self) -> None:
        """Note whether the policy changed what it was shown (an asynchronous
        policy may, until it returns)."""
        if self.snapshot is not None and self.shown.call.arguments != self.snapshot.arguments:
            self.policy_drifted = True

    def mask_reads(
        self, inner: Callable[[Effect], Any], named: Iterable[str] = ()
    ) -> Callable[[Effect], Any]:
        """``inner`` with its reads masked: what a layered backend (a
        recorder) must call sandbox effects through. ``named`` are more
        values to mask (a recorder's named secrets)."""
        extra = frozenset(named)
        if not extra:
            return MaskedReads(inner, self.port._current_redactions)
        self.named |= extra  # an artifact reference must not show them either
        return MaskedReads(
            inner, lambda: Redactions(self.port._current_redactions().values | extra)
        )

    def redactions(self) -> Redactions:
        """Every value this call masks: the port's, and a recorder's named ones."""
        current = self.port._current_redactions()
        return Redactions(current.values | self.named) if self.named else current

    def shown_identities(self) -> ShownIdentities:
        """What the session's results showed, for a call with env values to
        be checked against (the others need not pay for it)."""
        snapshot = self.snapshot
        if snapshot is None or not snapshot.arguments.get("env"):
            return NOTHING_SHOWN
        return self.port._masks.shown()

    def finish(self, result: ToolResult) -> ToolResult:
        # Later calls' env values are checked against these (item 3).
        self.port._masks.saw(shown_by(result.content))
        try:
            finish = getattr(self.layered, "finish", None)
            if callable(finish):
                finish(result)
        except FatalInterpreterError:
            raise
        except Exception:
            # The result is true whatever the recorder makes of it; a
            # recorder that cannot write must report that itself.
            pass
        if self.port._answers is not None:
            note_answer(self.port._answers, self.request, self.port.settings.owner, result)
        self.trace.end(result)
        return result

    def _note(self, effect: Effect) -> None:
        kind = type(effect)
        if kind not in _NOTED:
            return  # nothing a crash report needs
        if kind in _SIDE_EFFECT_TYPES:
            self.dispatched = True
        if isinstance(effect, Start) and effect.env:
            self.port._learn(redaction_secrets(effect.env))
        sandbox_id = getattr(effect, "sandbox_id", None)
        if isinstance(sandbox_id, str):
            self.sandbox_id = sandbox_id
        task = getattr(effect, "task_id", None)
        if isinstance(task, str) and kind in (Start, Publish):
            self.task_id = task

    # -- sync ------------------------------------------------------------------

    def interpret(self, effect: Effect) -> Any:
        if type(effect) is CheckAuthority and self.layered is None:
            return self._check(effect)  # the guard, several times a call; never raises
        self._note(effect)
        try:
            if self.layered is not None:
                return self.layered(effect)
            kind = type(effect)
            if kind is Read:
                return self.sandbox(effect)
            if kind in _SANDBOX_TYPES:
                return self.port._backend(effect)  # only reads need masking
            if isinstance(effect, SANDBOX_EFFECTS):
                return self.sandbox(effect)
            return self.answer_harness(effect)
        except (EffectFailure, FatalInterpreterError):
            raise
        except (Exception, asyncio.CancelledError) as exc:
            # Blocking, nobody can have cancelled this call: a CancelledError
            # is the backend's own (an SDK's task), a failure like any other.
            raise _unexpected(effect, exc) from exc

    def answer_harness(self, effect: Effect) -> Any:
        """Answer one harness effect from the harness's callbacks (sync mode)."""
        try:
            if isinstance(effect, Authorize):
                decision = self.ask_policy()
                if type(decision) not in _DECISIONS and inspect.isawaitable(decision):
                    _discard(decision)
                    raise EffectFailure(
                        Delivery.NOT_SENT, "authorize is asynchronous; use await port.execute()"
                    )
                return _policy(decision)
            return self._harness(effect)
        except EffectFailure:
            raise
        except Exception as exc:
            raise _unexpected(effect, exc) from exc

    # -- async -----------------------------------------------------------------

    async def interpret_async(self, effect: Effect) -> Any:
        self._note(effect)
        try:
            if self.layered is not None:
                if isinstance(effect, SANDBOX_EFFECTS):
                    return await self._abortable(self.layered, effect)
                outcome = self.layered(effect)
                return (await outcome) if inspect.isawaitable(outcome) else outcome
            if isinstance(effect, SANDBOX_EFFECTS):
                return await self._abortable(self.sandbox, effect)
            return await self.answer_harness_async(effect)
        except (EffectFailure, FatalInterpreterError):
            raise
        except asyncio.CancelledError as exc:
            if _cancel_requested():
                raise  # the caller's own cancellation goes on to the caller
            raise _unexpected(effect, exc) from exc  # the backend's own
        except Exception as exc:
            raise _unexpected(effect, exc) from exc

    async def answer_harness_async(self, effect: Effect) -> Any:
        """Answer one harness effect from the harness's callbacks (async mode)."""
        try:
            if isinstance(effect, Authorize):
                decision = self.ask_policy()
                if inspect.isawaitable(decision):
                    decision = await self._abortable(lambda _: decision, effect)
                    self.ask_policy_settled()
                return _policy(decision)
            return self._harness(effect)
        except EffectFailure:
            raise
        except Exception as exc:
            raise _unexpected(effect, exc) from exc

    async def _abortable(self, run: Callable[[Any], Any], effect: Effect) -> Any:
        """Await ``run(effect)``, waking at once if the request is aborted (C11)."""
        outcome = run(effect)
        if not inspect.isawaitable(outcome):
            return outcome
        token = self.request.cancel
        add_callback = getattr(token, "add_callback", None)
        if add_callback is None:
            return await outcome
        loop = asyncio.get_running_loop()
        aborted = loop.create_future()

        def settle() -> None:
            if not aborted.done():
                aborted.set_result(None)

        def fire() -> None:
            loop.call_soon_threadsafe(settle)

        remove = add_callback(fire)
        work = asyncio.ensure_future(outcome)
        try:
            done, _ = await asyncio.wait({work, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                return work.result()
            work.cancel()
            raise EffectFailure(Delivery.MAYBE_SENT, "aborted by the harness", aborted=True)
        finally:
            remove()
            if not aborted.done():
                aborted.cancel()

    # -- harness effects ---------------------------------------------------------

    def _harness(self, effect: Effect) -> Any:
        port = self.port
        if isinstance(effect, CheckAuthority):
            return self._check(effect)
        if isinstance(effect, ResolveOwned):
            with port._ledger_lock:
                mine = port._ledger.get(effect.task_id)
            if port._resolve_owned is None:
                return mine
            owned = port._resolve_owned(self.request, effect.task_id)
            owned = owned if isinstance(owned, OwnedCommand) else None
            # Whether a start may have left is this port's own knowledge as
            # much as the harness's record (C2): for a launch, either counts.
            launch_knows_more = mine is not None and (
                owned is None or (mine.launched and not owned.launched)
            )
            return mine if effect.for_launch and launch_knows_more else owned
        if isinstance(effect, RememberOwned):
            with port._ledger_lock:
                known = port._ledger.get(effect.task_id)
                epoch, digest = effect.ledger_epoch, effect.launch_digest
                if known and known.launched and known.sandbox_id == effect.sandbox_id:
                    # The epoch of the first start that may have left: a
                    # concurrent call of the same key must not replace it.
                    epoch = known.ledger_epoch
                if known and known.launched and known.launch_digest is not None:
                    digest = known.launch_digest  # likewise what it asked for
                record = OwnedCommand(
                    task_id=effect.task_id,
                    operation_key=effect.operation_key,
                    sandbox_id=effect.sandbox_id,
                    launched=effect.launched or (known is not None and known.launched),
                    ledger_epoch=epoch,
                    launch_digest=digest,
                )
                if known != record:
                    port._ledger[effect.task_id] = record
            if port._remember_owned is not None:
                # The harness's durable record; if it cannot be written, the
                # program must not go on to a start it could not reconcile.
                stored = port._remember_owned(self.request, record)
                if isinstance(stored, OwnedCommand) and stored.task_id == effect.task_id:
                    # A record that settles races answers with its row: another
                    # writer's start may have been recorded first (issue 17).
                    record = stored
                    with port._ledger_lock:
                        port._ledger[effect.task_id] = stored
            # The program needs the row only when it is not what it asked for.
            return None if record == _asked(effect) else record
        if isinstance(effect, AppendArtifact):
            return self.artifacts.append(effect)
        if isinstance(effect, OpenArtifact):
            return self.artifacts.open(effect)
        if isinstance(effect, CloseArtifact):
            return self.artifacts.close(effect)
        if isinstance(effect, WriteArtifact):
            return self.artifacts.write(effect)
        raise TypeError(f"not an effect: {effect!r}")

    def _check(self, effect: CheckAuthority) -> AuthorityReport:
        """One guard observation; any doubt counts against the call (fail closed).

        The authority callback runs first: it is itself an external boundary,
        so abort and drift are read after it returns (C9, C11).
        """
        verdict: object
        try:
            # Typed as bool, but a harness may hand back anything: trust only True.
            verdict = cast(object, self.port._assert_authority(self.request))
        except Exception:
            verdict = False
        if verdict is not True and inspect.isawaitable(verdict):
            # assert_authority must be synchronous and fast; a coroutine proves nothing.
            _discard(verdict)
            verdict = False
        try:
            aborted = bool(getattr(self.request.cancel, "cancelled", False))
        except Exception:
            aborted = True  # a token that cannot be read may have fired
        return _REPORTS[(aborted, self._drifted(effect), verdict is True)]

    def _drifted(self, effect: CheckAuthority) -> bool:
        """Whether the live request differs from the one the program checks
        (C9): compared with the snapshot's own copy where that is exact,
        else by digest; any failure counts as drift."""
        snapshot = self.snapshot
        try:
            if self.policy_drifted:
                return True
            if snapshot is not None and effect.request_digest == snapshot.digest:
                same = unchanged(self.request, snapshot)
                if same is not None:
                    return not same
            return request_digest(self.request) != effect.request_digest
        except Exception:
            return True


_SCALARS: Final = frozenset((str, int, float, bool, type(None)))
"""JSON's immutable values: a dict holding only these is copied whole by ``dict()``."""

_REPORTS: dict[tuple[bool, bool, bool], AuthorityReport] = {
    (aborted, drifted, held): AuthorityReport(aborted=aborted, drifted=drifted, authority_held=held)
    for aborted in (False, True)
    for drifted in (False, True)
    for held in (False, True)
}
"""Every guard observation, made once (they are frozen values)."""


def _asked(effect: RememberOwned) -> OwnedCommand:
    """The row ``effect`` asks the record to keep, as it asks for it."""
    return OwnedCommand(
        task_id=effect.task_id,
        operation_key=effect.operation_key,
        sandbox_id=effect.sandbox_id,
        launched=effect.launched,
        ledger_epoch=effect.ledger_epoch,
        launch_digest=effect.launch_digest,
    )


def _policy(decision: object) -> PolicyDecision:
    if isinstance(decision, (Allow, ApprovalRequired, Deny)):
        return decision
    return Deny(reason="The harness policy returned an unrecognised decision.")


def _discard(awaitable: object) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


def _unexpected(effect: Effect, exc: BaseException) -> EffectFailure:
    """Exceptions nobody classified: a side-effect request may have left."""
    delivery = Delivery.NOT_SENT if isinstance(effect, Authorize) else Delivery.MAYBE_SENT
    return EffectFailure(delivery, f"{type(effect).__name__} raised {type(exc).__name__}")


# ---------------------------------------------------------------------------
# Construction


def command_tools(
    *,
    backend: Callable[[Any], Any],
    session_id: str,
    owner: Owner,
    authorize: AuthorizeCallback,
    assert_authority: AuthorityCallback,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    artifacts: ArtifactStore | None = None,
    resolve_owned_command: ResolveOwnedCallback | None = None,
    remember_owned_command: RememberOwnedCallback | None = None,
    foreground_timeout_seconds: int = 300,
    background_timeout_seconds: int = 300,
    allow_internet_access: bool = False,
    redact: Iterable[str] = (),
    record: OwnershipRecord | None = None,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> ToolPort:
    """The command tools: ``sandbox_status``, ``run_command``,
    ``read_command_output`` and ``stop_command``.

    - ``backend``: the interpreter of sandbox effects (``Simulator()``,
      ``E2BBackend(...)``, a ``Replayer``, or a ``Recorder`` around one).
    - ``authorize(request)``: ``ALLOW``, ``ApprovalRequired(...)`` or
      ``Deny(...)``; may be async (then use ``await port.execute``).
    - ``assert_authority(request)``: ``True`` while the caller holds its
      lease; synchronous and fast, asked before and after every step.
    - ``resolve_owned_command(request, task_id)``: optional durable ownership
      lookup; by default the port's own ledger of what it launched.
    - ``remember_owned_command(request, owned)``: optional; called with each
      ownership record the port makes (before a start is sent, with
      ``launched=True``), for the harness to keep durably and answer from
      ``resolve_owned_command`` after a restart, or to share between the
      command and code ports of one session. With both, a retry after a
      restart expects the claim its first start may have made, so even a
      sandbox whose ledger was deleted never launches it twice (C2).
    - ``record``: a durable ownership record (``sandrail.records.SQLiteRecord``
      or ``PostgresRecord``) in place of the two callbacks: the port
      remembers and resolves through it, and notes each task's last answer
      there for operators (``sandrail uncertain``). A record (or
      ``remember_owned_command``) that cannot be written means the start
      never leaves (``error``, ``executed: false``); one that cannot be read
      means ``uncertain``, never a launch.
    - ``tracer_provider`` / ``meter_provider``: where the call's span and the
      ``gen_ai.execute_tool.duration`` histogram go (OpenTelemetry; default:
      the global providers, if opentelemetry-api is installed; giving one
      without it raises ``ImportError`` with the install hint).
    - ``artifacts``: optional store for results cut to fit the budget.
    - ``redact``: values to mask in all output from the start (C17), e.g.
      the env values a restarted harness passed to this session's commands
      before its restart. The port also masks every env value it passes
      itself, and so does every port on the same backend object and
      session, for as long as that backend lives (issue 20, item 4: a port
      per request forgets nothing). Values must be at least
      ``MIN_REDACTED_LENGTH`` (8) characters: a shorter one would mask
      ordinary text.

    Raises ``TypeError`` or ``ValueError`` at once for a port that could not
    work (a missing callback, a budget below 256 bytes, a timeout out of
    range); after construction, ``execute`` never raises.
    """
    definitions = _command_definitions(
        _timeout("foreground_timeout_seconds", foreground_timeout_seconds)
    )
    return _build(
        definitions,
        "sandrail.command-tools/v1",
        backend=backend,
        session_id=session_id,
        owner=owner,
        authorize=authorize,
        assert_authority=assert_authority,
        max_output_bytes=max_output_bytes,
        artifacts=artifacts,
        resolve_owned_command=resolve_owned_command,
        remember_owned_command=remember_owned_command,
        foreground_timeout_seconds=foreground_timeout_seconds,
        background_timeout_seconds=background_timeout_seconds,
        allow_internet_access=allow_internet_access,
        redact=redact,
        record=record,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )


def code_tools(
    *,
    backend: Callable[[Any], Any],
    session_id: str,
    owner: Owner,
    authorize: AuthorizeCallback,
    assert_authority: AuthorityCallback,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    artifacts: ArtifactStore | None = None,
    resolve_owned_command: ResolveOwnedCallback | None = None,
    remember_owned_command: RememberOwnedCallback | None = None,
    foreground_timeout_seconds: int = 300,
    background_timeout_seconds: int = 300,
    allow_internet_access: bool = False,
    redact: Iterable[str] = (),
    record: OwnershipRecord | None = None,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> ToolPort:
    """The snippet tool: ``run_code`` for a native owner, ``sandbox_run_code``
    for an agent owner. Same arguments and rules as :func:`command_tools`."""
    definitions = _code_definitions(
        _timeout("foreground_timeout_seconds", foreground_timeout_seconds),
        isinstance(owner, AgentOwner),
    )
    return _build(
        definitions,
        "sandrail.code-tools/v1",
        backend=backend,
        session_id=session_id,
        owner=owner,
        authorize=authorize,
        assert_authority=assert_authority,
        max_output_bytes=max_output_bytes,
        artifacts=artifacts,
        resolve_owned_command=resolve_owned_command,
        remember_owned_command=remember_owned_command,
        foreground_timeout_seconds=foreground_timeout_seconds,
        background_timeout_seconds=background_timeout_seconds,
        allow_internet_access=allow_internet_access,
        redact=redact,
        record=record,
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )


# Ports with the same settings share their definition objects (they are
# immutable): anything keyed by a definition then finds it by identity,
# instead of comparing whole schemas on every call.


@functools.lru_cache(maxsize=256)
def _command_definitions(foreground_timeout_seconds: int) -> tuple[ToolDefinition, ...]:
    return command_tool_definitions(foreground_timeout_seconds)


@functools.lru_cache(maxsize=256)
def _code_definitions(
    foreground_timeout_seconds: int, agent_owner: bool
) -> tuple[ToolDefinition, ...]:
    return code_tool_definitions(foreground_timeout_seconds, agent_owner=agent_owner)


def _timeout(name: str, value: object) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 < value <= MAX_TIMEOUT_SECONDS
    ):
        raise ValueError(
            f"{name} must be an integer from 1 to {MAX_TIMEOUT_SECONDS}, got {value!r}"
        )
    return value


def _build(
    definitions: tuple[ToolDefinition, ...],
    contract: str,
    *,
    backend: Callable[[Any], Any],
    session_id: str,
    owner: Owner,
    authorize: AuthorizeCallback,
    assert_authority: AuthorityCallback,
    max_output_bytes: int,
    artifacts: ArtifactStore | None,
    resolve_owned_command: ResolveOwnedCallback | None,
    remember_owned_command: RememberOwnedCallback | None,
    foreground_timeout_seconds: int,
    background_timeout_seconds: int,
    allow_internet_access: bool,
    redact: Iterable[str],
    record: OwnershipRecord | None = None,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> ToolPort:
    if not callable(backend):
        raise TypeError("backend must be an interpreter: a callable from effect to outcome")
    if not isinstance(session_id, str) or not session_id.strip() or not _unicode(session_id):
        raise ValueError("session_id must be a non-blank string of valid Unicode text")
    if isinstance(owner, NativeOwner):
        if not isinstance(owner.scope, Mapping):
            raise TypeError("NativeOwner.scope must be a JSON object (a mapping)")
        try:
            canonical_json(owner.scope)
        except ValueError as exc:
            raise ValueError(f"NativeOwner.scope must be JSON data: {exc}") from None
    elif isinstance(owner, AgentOwner):
        agent_id = owner.agent_id
        if not isinstance(agent_id, str) or not agent_id.strip() or not _unicode(agent_id):
            raise ValueError("AgentOwner.agent_id must be a non-blank string of valid Unicode text")
    else:
        raise TypeError(
            "owner must be sandrail.NativeOwner(scope=...) or sandrail.AgentOwner(agent_id=...)"
        )
    if not callable(authorize):
        raise TypeError("authorize must be a callable: request -> ALLOW | ApprovalRequired | Deny")
    if not callable(assert_authority):
        raise TypeError("assert_authority must be a callable: request -> bool")
    if record is not None:
        if remember_owned_command is not None or resolve_owned_command is not None:
            raise TypeError(
                "give record= or the remember_owned_command/resolve_owned_command pair, not both"
            )
        if not all(
            callable(getattr(record, name, None)) for name in ("remember", "resolve", "note")
        ):
            raise TypeError(
                "record must be a sandrail.records.OwnershipRecord (SQLiteRecord, PostgresRecord)"
            )
        remember_owned_command, resolve_owned_command = record.remember, record.resolve
    if remember_owned_command is not None and not callable(remember_owned_command):
        raise TypeError(
            "remember_owned_command must be None or a callable: (request, OwnedCommand) -> None"
        )
    if resolve_owned_command is not None and not callable(resolve_owned_command):
        raise TypeError(
            "resolve_owned_command must be None or a callable: "
            "(request, task_id) -> OwnedCommand | None"
        )
    if artifacts is not None and not callable(getattr(artifacts, "write", None)):
        raise TypeError(
            "artifacts must be None or have write(key, content, media_type) -> ArtifactRef"
        )
    if (
        isinstance(max_output_bytes, bool)
        or not isinstance(max_output_bytes, int)
        or max_output_bytes < MIN_MAX_OUTPUT_BYTES
    ):
        raise ValueError(
            f"max_output_bytes must be an integer of at least {MIN_MAX_OUTPUT_BYTES}, "
            f"got {max_output_bytes!r}"
        )
    if not isinstance(allow_internet_access, bool):
        raise TypeError("allow_internet_access must be a bool")
    secrets = _redact(redact)
    settings = PortSettings(
        session_id=session_id,
        owner=owner,
        definitions=definitions,
        contract=contract,
        max_output_bytes=max_output_bytes,
        foreground_timeout_seconds=foreground_timeout_seconds,
        background_timeout_seconds=_timeout(
            "background_timeout_seconds", background_timeout_seconds
        ),
        allow_internet_access=allow_internet_access,
        artifacts_enabled=artifacts is not None,
    )
    return ToolPort(
        settings=settings,
        backend=backend,
        authorize=authorize,
        assert_authority=assert_authority,
        resolve_owned_command=resolve_owned_command,
        remember_owned_command=remember_owned_command,
        artifacts=artifacts,
        redact=secrets,
        answers=record,
        telemetry=Telemetry(tracer_provider, meter_provider),
    )


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _redact(values: Iterable[str]) -> frozenset[str]:
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError("redact must be an iterable of strings (a list of values to mask)")
    found: set[str] = set()
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"redact holds a {type(value).__name__}; values to mask are strings")
        if len(value) < MIN_REDACTED_LENGTH:
            raise ValueError(
                f"redact holds a value of {len(value)} characters; values to mask need at "
                f"least {MIN_REDACTED_LENGTH} (a shorter one would mask ordinary text)"
            )
        if not _unicode(value):
            raise ValueError("redact holds a value that is not valid Unicode text")
        found.add(value)
    return frozenset(found)
