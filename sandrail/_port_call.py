"""The port's side of one call: :class:`PortCall`.

A port runs each request's tool program with a :class:`PortCall` as its
interpreter. The call answers harness effects itself (policy, authority,
the ownership record, artifacts) from the harness's callbacks, passes
sandbox effects to the backend, and converts every unexpected exception
into an :class:`~sandrail.core.EffectFailure` (C6: a side-effect request
may have left), in :meth:`PortCall.interpret` and its twin. It notes which
side effects it passed on, so even a crash of the core reports
``uncertain`` rather than guessing.

Sync and async. The two interpreters :meth:`PortCall.interpret` and
:meth:`PortCall.interpret_async` route every effect alike
(:meth:`PortCall.route`) and answer harness effects alike
(:meth:`PortCall.answer_harness`). They differ on purpose in three things
only, and nowhere else:

- waiting: the async one awaits a sandbox effect so that an abort wakes it
  at once (C11); a blocking backend call cannot be interrupted, so the sync
  one sees an abort at the next guard;
- the policy: the async one awaits an asynchronous ``authorize``; the sync
  one refuses it (nothing is sent: ``await port.execute()`` is the call);
- cancellation: a ``CancelledError`` the caller asked for goes on to the
  async caller; in a blocking call nobody can have, so it is the backend's
  own, a failure like any other.

A synchronous call also refuses an awaitable answer from a backend that
returns one without saying so (:func:`~sandrail.interpreters._drivers.answered_now`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from sandrail._artifact_calls import ArtifactStore, CallArtifacts
from sandrail._masks import Masks, holder_of
from sandrail._options import (
    AuthorityCallback,
    AuthorizeCallback,
    RememberOwnedCallback,
    ResolveOwnedCallback,
)
from sandrail._ownership import OwnershipRecord
from sandrail._ownership_backlog import note_answer
from sandrail._telemetry import Telemetry
from sandrail.core import (
    ALL_WELL,
    HARNESS_EFFECTS,
    NOTHING_SHOWN,
    SANDBOX_EFFECTS,
    SIDE_EFFECTS,
    Allow,
    AppendArtifact,
    ApprovalRequired,
    AuthorityReport,
    Authorize,
    CheckAuthority,
    CloseArtifact,
    Delivery,
    Deny,
    Effect,
    EffectFailure,
    Ensure,
    FatalInterpreterError,
    Inspect,
    OpenArtifact,
    OwnedCommand,
    PolicyDecision,
    PortSettings,
    Program,
    Redactions,
    RememberOwned,
    ResolveOwned,
    ShownIdentities,
    Start,
    ToolRequest,
    ToolResult,
    WriteArtifact,
    asked,
    crash_result,
    known_to_launch,
    merged,
    redaction_secrets,
    request_digest,
    shown_by,
    snapshot_request,
    tool_program,
    unchanged,
    unexpected_failure,
    with_arguments,
)
from sandrail.interpreters._drivers import answered_now
from sandrail.interpreters._masking import masked_reads

logger = logging.getLogger("sandrail")

__all__ = ["Binding", "Honour", "Ledger", "PortCall"]

Honour = Callable[[PolicyDecision, ToolRequest], PolicyDecision]
"""What a port's policy answer becomes before the program reads it, given
the request the policy was shown (a toolset's approvals: a person's
approval turns ``ApprovalRequired`` into ``ALLOW`` for that call). Called
with the answer itself, awaited already where it was awaitable."""

_SANDBOX_TYPES: Final = frozenset(SANDBOX_EFFECTS)
_SIDE_EFFECT_TYPES: Final = frozenset(SIDE_EFFECTS)
_DECISIONS: Final = frozenset((Allow, ApprovalRequired, Deny))
_NOTED: Final = frozenset((*SANDBOX_EFFECTS, RememberOwned))
"""Effects whose sending :meth:`PortCall.note` records (what a crash report needs)."""
_DIRECT: Final = frozenset((*HARNESS_EFFECTS, *SANDBOX_EFFECTS))
"""The effect types :meth:`PortCall.interpret` routes without :meth:`PortCall.route`."""
_SCALARS: Final = frozenset((str, int, float, bool, type(None)))
"""JSON's immutable values: a dict holding only these is copied whole by ``dict()``."""


class Ledger:
    """The port's own ownership record: the commands it launched, by task
    id (C4), kept by the rules of :mod:`sandrail.core._claim` (C2)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owned: dict[str, OwnedCommand] = {}

    def snapshot(self) -> dict[str, OwnedCommand]:
        with self._lock:
            return dict(self._owned)

    def get(self, task_id: str) -> OwnedCommand | None:
        with self._lock:
            return self._owned.get(task_id)

    def remember(self, effect: RememberOwned) -> OwnedCommand:
        """Keep what ``effect`` records, as :func:`~sandrail.core.remembered` says."""
        return self.keep_merged(asked(effect))

    def keep_merged(self, row: OwnedCommand) -> OwnedCommand:
        """Keep ``row`` merged over the one kept for its task, as
        :func:`~sandrail.core.merged` says; the row kept."""
        with self._lock:
            known = self._owned.get(row.task_id)
            record = merged(known, row)
            if record is not known and known != record:
                self._owned[row.task_id] = record
            return record

    def keep(self, record: OwnedCommand) -> None:
        """Keep ``record`` as it is: the row a durable record answered with."""
        with self._lock:
            self._owned[record.task_id] = record


@attrs.frozen(kw_only=True)
class Binding:
    """Everything a port binds its calls to: its settings, its backend, the
    harness's callbacks and store, its ledger and its masks."""

    settings: PortSettings
    backend: Callable[[Any], Any]
    authorize: AuthorizeCallback
    assert_authority: AuthorityCallback
    resolve_owned: ResolveOwnedCallback | None
    remember_owned: RememberOwnedCallback | None
    artifacts: ArtifactStore | None
    ledger: Ledger
    masks: Masks
    answers: OwnershipRecord | None
    """Where each task's last answer is noted for operators (``record=``)."""
    telemetry: Telemetry
    honour: Honour | None = None
    """What every policy answer passes through (:data:`Honour`), before any
    recorder's layer sees it (a recording holds the answers the program got)."""
    tool_names: frozenset[str] = attrs.field(init=False)
    adopted: set[str] = attrs.field(factory=set, eq=False)
    """The sessions whose sandbox the durable record was asked for already
    (:meth:`PortCall.adopt_session`)."""
    sync_backend: Callable[[Effect], Any] = attrs.field(init=False)
    """The backend as a synchronous call uses it (:func:`answered_now`), made once."""

    @tool_names.default
    def _names(self) -> frozenset[str]:
        return frozenset(definition.name for definition in self.settings.definitions)

    @sync_backend.default
    def _sync_backend(self) -> Callable[[Effect], Any]:
        return answered_now(self.backend)

    def port_redactions(self) -> Redactions:
        """What every call of this port masks now (the set grows as calls
        pass env values)."""
        return self.masks.redactions


def _named_of(interpreter: object) -> frozenset[str]:
    """A layered backend's ``named`` values for a call (none unless it has
    a set of strings there, and asking for it does not raise)."""
    with contextlib.suppress(Exception):
        named = getattr(interpreter, "named", None)
        if isinstance(named, frozenset) and all(isinstance(value, str) for value in named):
            return named
    return frozenset()


class PortCall:
    """The port's side of one call (see the module doc).

    Every call's program is wrapped in layers
    (:func:`~sandrail.interpreters._drivers.layered`) before a driver runs
    it: :func:`~sandrail.interpreters._masking.masked_reads` outermost, so
    reads are masked below everything else (C17), and, for a backend that
    defines ``open_layer(request)`` (a recorder), the layer it returns for
    this call inside it (its ``wrap(program)``; its ``named`` values are
    masked too, and its ``finish(result)`` is called with the result).

    A backend that defines ``open_call(request, answer_harness)`` (a
    replayer) answers every effect of a well-formed call itself, harness
    effects included: it gets an interpreter for this call back from
    ``open_call`` and answers harness effects by calling ``answer_harness``
    (or from a recording); its reads are not masked again (a recording
    holds them masked). The values in that interpreter's ``named``, if it
    has one, are refused in the call's identity as masked values are. If
    that interpreter has ``finish(result)``, it is called with the result.
    A malformed request is refused by the core without any effect, so it
    never reaches such a backend.
    """

    def __init__(self, binding: Binding, request: ToolRequest, *, asynchronous: bool) -> None:
        self.binding = binding
        self.request = request
        self.asynchronous = asynchronous
        self.dispatched = False
        self.sandbox_id: str | None = None
        self.task_id: str | None = None
        self.layered: Callable[[Effect], Any] | None = None
        self.finishing: Any = None
        """What is told the call's result: a layered backend's interpreter,
        or a recording layer."""
        self.backend = binding.backend if asynchronous else binding.sync_backend
        # Taken before anything runs, so that even a crash can report the
        # locator the request had when it arrived (C6).
        self.snapshot = snapshot_request(request, binding.settings)
        self.shown: ToolRequest = request
        self.named: frozenset[str] = frozenset()
        """Values a layered backend (a recorder) masks besides the port's."""
        self._artifacts: CallArtifacts | None = None
        self.policy_drifted = False
        """The policy changed the arguments it was shown: the harness changed
        the request mid-call, which the next guard reports as drift (C9)."""
        self.result: ToolResult | None = None
        self.trace = binding.telemetry.begin(request, binding.tool_names, self.redactions)

    # -- the call's life ----------------------------------------------------------

    @property
    def artifacts(self) -> CallArtifacts:
        """Artifacts this call writes (made at the first artifact effect);
        whatever is left open when it ends is aborted (:meth:`abort_artifacts`)."""
        if self._artifacts is None:
            self._artifacts = CallArtifacts(self.binding.artifacts, self.redactions)
        return self._artifacts

    def abort_artifacts(self) -> None:
        """Abort whatever artifact this call left open."""
        if self._artifacts is not None:
            self._artifacts.abort_all()

    def program(self) -> Program:
        """The tool program to drive, in its layers (see the class doc)."""
        settings, secrets = self.binding.settings, self.binding.masks.secrets
        backend = self.binding.backend
        if self.snapshot is None:
            # Refused by the core before any effect.
            return tool_program(self.request, settings, None, secrets, self.shown_identities())
        open_call = getattr(backend, "open_call", None)
        if callable(open_call):
            answer = self.answer_harness_async if self.asynchronous else self.answer_harness
            self.layered = self.finishing = open_call(self.request, answer)
            # A replayer's named secrets are this call's, as a recorder's are (C17).
            self.named |= _named_of(self.layered)
            return tool_program(
                self.request, settings, self.snapshot, secrets | self.named, self.shown_identities()
            )
        open_layer = getattr(backend, "open_layer", None)
        recording = None
        if callable(open_layer):
            recording = self.finishing = open_layer(self.request)
            # A recorder's named secrets are this call's too: masked wherever
            # env values are (its result, its artifacts), and refused in its
            # identity, so the cassette holds no piece of one (C17).
            self.named |= recording.named
            secrets = secrets | recording.named
        program = tool_program(
            self.request, settings, self.snapshot, secrets, self.shown_identities()
        )
        if recording is not None:
            program = recording.wrap(program)
        # Reads are masked below any recorder, so neither the core nor a
        # cassette ever holds a secret or a piece of one (C17).
        return masked_reads(program, self.redactions)

    def shown_identities(self) -> ShownIdentities:
        """What the session's results showed, for a call with env values to
        be checked against (the others need not pay for it)."""
        snapshot = self.snapshot
        if snapshot is None or not snapshot.arguments.get("env"):
            return NOTHING_SHOWN
        return self.binding.masks.shown()

    def __enter__(self) -> PortCall:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> bool:
        """Whatever broke that is not fatal (a bug of the core, a layered
        backend that raised) ends the call with :func:`crash_result`."""
        if kind is None or not issubclass(kind, Exception):
            return False
        if issubclass(kind, FatalInterpreterError):
            return False
        self.result = crash_result(
            self.snapshot,
            self.binding.settings,
            dispatched=self.dispatched,
            sandbox_id=self.sandbox_id,
            task=self.task_id,
        )
        return True

    async def finish_async(self) -> ToolResult:
        """:meth:`finish` for an asynchronous call: a durable record's note
        is made in a worker thread first, off the event loop."""
        answers = self.binding.answers
        if answers is not None and self.result is not None:
            await asyncio.to_thread(
                note_answer, answers, self.request, self.binding.settings.owner, self.result
            )
        return self.finish(noted=answers is not None)

    def finish(self, *, noted: bool = False) -> ToolResult:
        """The call's result, after a layered backend was told it, the
        ownership record noted it (unless ``noted``: already done) and its
        trace ended."""
        result = self.result
        assert result is not None  # set by the driver, or by __exit__
        # Later calls' env values are checked against these (C17).
        self.binding.masks.saw(shown_by(result.content))
        try:
            finish = getattr(self.finishing, "finish", None)
            if callable(finish):
                finish(result)
        except FatalInterpreterError:
            raise
        except Exception:
            # The result is true whatever the recorder makes of it; a
            # recorder that cannot write must report that itself.
            pass
        if self.binding.answers is not None and not noted:
            note_answer(self.binding.answers, self.request, self.binding.settings.owner, result)
        self.trace.end(result)
        return result

    # -- masking ------------------------------------------------------------------

    def redactions(self) -> Redactions:
        """Every value this call masks: the port's, and a recorder's named ones."""
        current = self.binding.masks.redactions
        return Redactions(current.values | self.named) if self.named else current

    # -- the interpreters ---------------------------------------------------------

    def note(self, effect: Effect) -> None:
        """Keep what a crash report needs to know about ``effect`` (C6)."""
        kind = type(effect)
        if kind not in _NOTED:
            return
        if kind in _SIDE_EFFECT_TYPES:
            self.dispatched = True
        if isinstance(effect, Start) and effect.env:
            self.binding.masks.learn(redaction_secrets(effect.env))
        sandbox_id = getattr(effect, "sandbox_id", None)
        if isinstance(sandbox_id, str):
            self.sandbox_id = sandbox_id
        task = getattr(effect, "task_id", None)
        if isinstance(task, str) and kind.launch_step:
            self.task_id = task

    def route(self, effect: Effect) -> Any:
        """The answer to ``effect`` from whoever answers it: a layered backend
        (every effect), the backend (sandbox effects; reads masked), or the
        harness. Asynchronous answers come back as awaitables."""
        if self.layered is not None:
            return self.layered(effect)
        if isinstance(effect, SANDBOX_EFFECTS):
            return self.backend(effect)
        if self.asynchronous:
            return self.answer_harness_async(effect)
        return self.answer_harness(effect)

    def interpret(self, effect: Effect) -> Any:
        """The synchronous interpreter (see the module doc)."""
        kind = type(effect)
        if self.layered is None and kind in _DIRECT:
            # Every effect of an exact effect type, routed as route() would
            # without asking again what it is.
            if kind in _NOTED:
                self.note(effect)
            try:
                if kind is CheckAuthority:
                    # The guard, several times a call. (Compared by type,
                    # which mypy does not narrow by.)
                    return self.check(effect)  # type: ignore[arg-type]
                if kind in _SANDBOX_TYPES:
                    if (kind is Ensure or kind is Inspect) and (
                        effect.session_id not in self.binding.adopted  # type: ignore[union-attr]
                    ):
                        self.adopt_session(effect)  # type: ignore[arg-type]
                    return self.backend(effect)
                return self.answer_harness(effect)
            except (EffectFailure, FatalInterpreterError):
                raise
            except (Exception, asyncio.CancelledError) as exc:
                raise unexpected_failure(effect, exc) from exc
        self.note(effect)
        try:
            if (
                isinstance(effect, Ensure | Inspect)
                and effect.session_id not in self.binding.adopted
            ):
                self.adopt_session(effect)
            return self.route(effect)
        except (EffectFailure, FatalInterpreterError):
            raise
        except (Exception, asyncio.CancelledError) as exc:
            # Blocking, nobody can have cancelled this call: a CancelledError
            # is the backend's own (an SDK's task), a failure like any other.
            raise unexpected_failure(effect, exc) from exc

    async def interpret_async(self, effect: Effect) -> Any:
        """The asynchronous interpreter (see the module doc)."""
        self.note(effect)
        try:
            if (
                isinstance(effect, Ensure | Inspect)
                and effect.session_id not in self.binding.adopted
            ):
                if self._adoption() is None:
                    self.binding.adopted.add(effect.session_id)  # nothing to ask: no hop
                else:
                    await asyncio.to_thread(self.adopt_session, effect)
            if isinstance(effect, SANDBOX_EFFECTS):
                return await self._abortable(self.route, effect)
            outcome = self.route(effect)
            return (await outcome) if inspect.isawaitable(outcome) else outcome
        except (EffectFailure, FatalInterpreterError):
            raise
        except asyncio.CancelledError as exc:
            if _cancel_requested():
                raise  # the caller's own cancellation goes on to the caller
            raise unexpected_failure(effect, exc) from exc  # the backend's own
        except Exception as exc:
            raise unexpected_failure(effect, exc) from exc

    def adopt_session(self, effect: Ensure | Inspect) -> None:
        """Before the port's first ``Ensure`` or ``Inspect`` of a session:
        hand the backend the sandbox the durable record says the session's
        launches went to (``adopt_session``), so that a restarted harness
        never makes a second sandbox for a session whose sandbox is gone (its
        tasks could relaunch there; ``docs/explanation/limits.md``). Asked
        once per port and session; nothing to do without a record that
        answers ``session_sandbox`` or a backend that takes it. A record that
        cannot be read fails the effect ``not_sent``: nothing is made."""
        binding = self.binding
        both = self._adoption()
        if both is not None:
            lookup, adopt = both
            try:
                sandbox_id = lookup(effect.session_id, binding.settings.owner)
            except Exception as exc:
                raise EffectFailure(
                    Delivery.NOT_SENT, "the ownership record could not be read"
                ) from exc
            if isinstance(sandbox_id, str):
                adopt(effect.session_id, effect.owner_key, sandbox_id)
        binding.adopted.add(effect.session_id)

    def _adoption(self) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        """The record's ``session_sandbox`` and the backend's
        ``adopt_session``, when both exist (else nothing is to be asked)."""
        lookup = getattr(self.binding.answers, "session_sandbox", None)
        adopt = getattr(holder_of(self.binding.backend), "adopt_session", None)
        return (lookup, adopt) if callable(lookup) and callable(adopt) else None

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

    # -- harness effects ----------------------------------------------------------

    def answer_harness(self, effect: Effect) -> Any:
        """Answer one harness effect from the harness's callbacks (sync mode:
        an asynchronous policy is refused, nothing sent)."""
        try:
            if isinstance(effect, Authorize):
                decision = self.ask_policy()
                if type(decision) not in _DECISIONS and inspect.isawaitable(decision):
                    _discard(decision)
                    logger.warning("%s", _ASYNC_POLICY)
                    raise EffectFailure(Delivery.NOT_SENT, _ASYNC_POLICY)
                return self.honoured(decision)
            return self._harness(effect)
        except EffectFailure:
            raise
        except Exception as exc:
            _say_policy_raised(effect, exc)
            raise unexpected_failure(effect, exc) from exc

    async def answer_harness_async(self, effect: Effect) -> Any:
        """Answer one harness effect (async mode: an asynchronous policy is
        awaited, waking on abort; a durable record's read or write runs in a
        worker thread, never blocking the event loop on its database, and
        also wakes on abort (C11); every other effect as in sync mode)."""
        if isinstance(effect, ResolveOwned | RememberOwned) and self.binding.answers is not None:
            return await self._abortable(
                lambda _: asyncio.to_thread(self.answer_harness, effect), effect
            )
        if not isinstance(effect, Authorize):
            return self.answer_harness(effect)
        try:
            decision = self.ask_policy()
            if inspect.isawaitable(decision):
                decision = await self._abortable(lambda _: decision, effect)
                self.ask_policy_settled()
            return self.honoured(decision)
        except EffectFailure:
            raise
        except Exception as exc:
            _say_policy_raised(effect, exc)
            raise unexpected_failure(effect, exc) from exc

    def honoured(self, decision: object) -> PolicyDecision:
        """The policy's answer ``decision`` as the program reads it: checked
        (:func:`_policy`), then through the port's :attr:`Binding.honour`."""
        checked = _policy(decision)
        honour = self.binding.honour
        return checked if honour is None else honour(checked, self.shown)

    def policy_request(self) -> ToolRequest:
        """The request as the policy must judge it: with the arguments the
        call checks and runs (its one plain copy), not a live object that may
        answer the policy one thing and the program another (C8, C9). A copy
        of its own, so a policy that changes it changes nothing."""
        snapshot = self.snapshot
        if snapshot is None:
            return self.request
        arguments = dict(snapshot.arguments)
        if not all(map(_SCALARS.__contains__, map(type, arguments.values()))):
            arguments = json.loads(json.dumps(arguments))  # nested data: a deep copy
        return with_arguments(self.request, arguments)

    def ask_policy(self) -> object:
        """Call the harness's policy with :meth:`policy_request`."""
        self.shown = self.policy_request()
        try:
            return self.binding.authorize(self.shown)
        finally:
            self.ask_policy_settled()

    def ask_policy_settled(self) -> None:
        """Note whether the policy changed what it was shown (an asynchronous
        policy may, until it returns)."""
        if self.snapshot is not None and self.shown.call.arguments != self.snapshot.arguments:
            self.policy_drifted = True

    def _harness(self, effect: Effect) -> Any:
        if isinstance(effect, CheckAuthority):
            return self.check(effect)
        if isinstance(effect, ResolveOwned):
            return self._resolve(effect)
        if isinstance(effect, RememberOwned):
            return self._remember(effect)
        if isinstance(effect, AppendArtifact):
            return self.artifacts.append(effect)
        if isinstance(effect, OpenArtifact):
            return self.artifacts.open(effect)
        if isinstance(effect, CloseArtifact):
            return self.artifacts.close(effect)
        if isinstance(effect, WriteArtifact):
            return self.artifacts.write(effect)
        raise TypeError(f"not an effect: {effect!r}")

    def _remember(self, effect: RememberOwned) -> OwnedCommand | None:
        """Keep ``effect``'s row in the port's ledger and the harness's
        durable record; answer with the row kept when it is not the one
        asked for (a record that settles races answers with its row:
        another writer's start may have been recorded first)."""
        ledger = self.binding.ledger
        row = asked(effect)
        record = ledger.keep_merged(row)
        remember = self.binding.remember_owned
        if remember is not None:
            # If it cannot be written, the program must not go on to a start
            # it could not reconcile.
            stored = remember(self.request, record)
            if isinstance(stored, OwnedCommand) and stored.task_id == effect.task_id:
                record = stored
                ledger.keep(stored)
        return None if record is row or record == row else record

    def _resolve(self, effect: ResolveOwned) -> OwnedCommand | None:
        mine = self.binding.ledger.get(effect.task_id)
        resolve = self.binding.resolve_owned
        if resolve is None:
            return mine
        theirs = resolve(self.request, effect.task_id)
        return known_to_launch(mine, theirs, for_launch=effect.for_launch)

    # -- the guard ----------------------------------------------------------------

    def check(self, effect: CheckAuthority) -> AuthorityReport:
        """One guard observation; any doubt counts against the call (fail closed).

        The authority callback runs first: it is itself an external boundary,
        so abort and drift are read after it returns (C9, C11).
        """
        request = self.request
        # Typed as bool, but a harness may hand back anything: trust only True.
        verdict: Any
        try:
            verdict = self.binding.assert_authority(request)
        except Exception:
            verdict = False
        if verdict is True and request.cancel is None:
            # The common case: held, nothing to abort; only drift to read.
            return _HELD_DRIFTED if self._drifted(effect) else ALL_WELL
        if verdict is not True and inspect.isawaitable(verdict):
            # assert_authority must be synchronous and fast; a coroutine proves nothing.
            logger.warning("assert_authority returned %s: %s", _what(verdict), _NO_VERDICT)
            _discard(verdict)
            verdict = False
        elif verdict is not True and verdict is not False:
            # A harness bug (None, "yes", 1), not a lost lease: counted as
            # False all the same, and said, since every call then stops.
            logger.warning("assert_authority returned %s: %s", _what(verdict), _NO_VERDICT)
        cancel = request.cancel
        if cancel is None:
            aborted = False
        else:
            try:
                aborted = bool(getattr(cancel, "cancelled", False))
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


_REPORTS: Final[Mapping[tuple[bool, bool, bool], AuthorityReport]] = {
    (aborted, drifted, held): ALL_WELL
    if (aborted, drifted, held) == (False, False, True)
    else AuthorityReport(aborted=aborted, drifted=drifted, authority_held=held)
    for aborted in (False, True)
    for drifted in (False, True)
    for held in (False, True)
}
"""Every guard observation, made once (they are frozen values); all well is
the core's own :data:`~sandrail.core._call.ALL_WELL`, which a program
recognises by identity."""
_HELD_DRIFTED: Final = _REPORTS[(False, True, True)]
"""The observation of a call whose authority is held and that nothing
aborts, but whose request drifted."""


def _cancel_requested() -> bool:
    """Whether someone asked to cancel the running task (its caller), as
    opposed to a ``CancelledError`` a backend raised of its own."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _policy(decision: object) -> PolicyDecision:
    """``decision`` if it is one; else the failure of the harness's
    callback, named in a warning of the ``sandrail`` logger.

    Strategy: a policy that returns something else (``True``, the shape
    ``assert_authority`` takes; ``"allow"``; ``None``; the ``Deny`` class)
    is a harness bug, not a denial: every call would be refused while its
    author reads "policy denied" and looks at the policy's rules. Nothing
    runs either way; the call is answered
    ``e2b_command_harness_callback_failed`` (the model is told the harness
    failed, not that the call was refused), and the log says what was
    returned and what is accepted, on every such call (a harness that
    refuses every call should be loud)."""
    if isinstance(decision, (Allow, ApprovalRequired, Deny)):
        return decision
    problem = (
        f"authorize returned {_what(decision)}, which is no decision: it must return "
        "sandrail.ALLOW, sandrail.ApprovalRequired(interaction_id=...) or "
        "sandrail.Deny(reason=...); nothing ran"
    )
    logger.warning("%s", problem)
    raise EffectFailure(Delivery.NOT_SENT, problem)


def _say_policy_raised(effect: Effect, exc: Exception) -> None:
    """A policy that raised is the harness's failure, said in a warning of
    the ``sandrail`` logger (the exception's type only: its message may
    quote the call, env values and all)."""
    if isinstance(effect, Authorize):
        logger.warning(
            "authorize raised %s; nothing ran (the call answers "
            "e2b_command_harness_callback_failed)",
            type(exc).__name__,
        )


def _what(value: object) -> str:
    """A short name of what a callback returned: its type, and the value
    itself only when it is a bool, None or a short word (``"allow"``),
    which hold nothing of a call."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str) and len(value) <= 20 and value.replace("_", "").isalnum():
        return f"the string {value!r}"
    if isinstance(value, type):
        return f"the class {value.__qualname__} (not an instance of it)"
    if inspect.isawaitable(value):
        return f"an awaitable ({type(value).__qualname__})"
    return f"a {type(value).__qualname__}"


_NO_VERDICT: Final = (
    "it must return True (the caller still holds its authority) or False; counted as "
    "False, so the call stops where it stands"
)

_ASYNC_POLICY: Final = (
    "authorize is asynchronous (it returned an awaitable), and a synchronous call "
    "(call_sync, execute_sync) cannot await it: use await toolset.call(...) or "
    "await port.execute(...), or give a synchronous authorize; nothing ran"
)


def _discard(awaitable: object) -> None:
    """Close an awaitable that will never be awaited, without the
    "never awaited" warning (the log already says what went wrong)."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            close()
