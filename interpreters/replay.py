"""Recording and replay (DESIGN §7): cassettes of effects, exact replay,
loud divergence.

Record a session by putting a :class:`Recorder` around any interpreter and
attaching it to the port built on it::

    recorder = Recorder(Simulator(), "session.jsonl", secrets=["hunter2-token"])
    port = recorder.attach(sandrail.command_tools(backend=recorder, ...))
    port.execute_sync(request)
    recorder.close()

Replay it with :func:`replay_file` (or ``sandrail replay session.jsonl``): the
port is rebuilt from the header with a :class:`Replayer` as its backend, every
recorded request runs again through the real core, each effect the core asks
for must equal the recorded one, and each result must equal the recorded
result. The first difference raises :class:`DivergenceError`, which names the
step, the call, the effect expected, the one got and the field that differs.
A :class:`Replayer` also works as the backend of a port a test builds itself.

The line format is described in :mod:`sandrail.interpreters._cassette`.

Strategy: the port hands a backend that has ``open_call`` every effect of a
call, harness effects included. The recorder answers harness effects through
the port (``answer_harness``) and sandbox effects through the interpreter it
wraps, and writes each answer before passing it on; the replayer answers
everything from the recording, so a replay needs no harness, no sandbox and
no clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import IO, Any, get_args

import attrs

import sandrail
from sandrail._port import ALLOW, ToolPort, _unexpected, code_tools, command_tools
from sandrail.core import (
    HARNESS_EFFECTS,
    AgentOwner,
    ArtifactRef,
    Delivery,
    Effect,
    EffectFailure,
    FatalInterpreterError,
    Outcome,
    OwnedCommand,
    PortSettings,
    Start,
    ToolRequest,
    ToolResult,
    code_tool_definitions,
    command_tool_definitions,
    redaction_secrets,
)

from ._cassette import (
    MARKER,
    VERSION,
    CallRedaction,
    Cassette,
    CassetteError,
    RecordedCall,
    RecordedStep,
    decode_effect,
    decode_failure,
    decode_outcome,
    decode_request,
    dump_line,
    encode_effect,
    encode_failure,
    encode_outcome,
    encode_request,
    header_line,
    load_cassette,
    normalize,
    parse_cassette,
    result_data,
)

__all__ = [
    "MARKER",
    "VERSION",
    "CallEntry",
    "Cassette",
    "CassetteError",
    "DivergenceError",
    "Entry",
    "Recorder",
    "RecorderNotAttachedError",
    "ReplayReport",
    "Replayer",
    "ResultEntry",
    "StepEntry",
    "decode_effect",
    "decode_failure",
    "decode_outcome",
    "encode_effect",
    "encode_failure",
    "encode_outcome",
    "load_cassette",
    "parse_cassette",
    "render",
    "replay_file",
]

_ABANDONED = EffectFailure(Delivery.MAYBE_SENT, "aborted by the harness", aborted=True)
"""What the port raises when it abandons an async sandbox effect on abort (C11)."""


class DivergenceError(FatalInterpreterError):
    """The live core did not do what the recording says: a failing test.

    The port lets it through instead of turning it into a result. Attributes
    say where: ``step`` (over the whole recording, ``None`` for a result or a
    request), ``call``, ``line`` of the cassette, ``expected`` and ``got``
    (JSON data), and ``field`` (a dotted path, ``None`` when a whole record is
    missing). ``report`` is the replay so far, when :func:`replay_file` ran it.
    """

    def __init__(
        self,
        message: str,
        *,
        call: int | None = None,
        step: int | None = None,
        line: int | None = None,
        expected: Any = None,
        got: Any = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.call = call
        self.step = step
        self.line = line
        self.expected = expected
        self.got = got
        self.field = field
        self.report: ReplayReport | None = None


# ---------------------------------------------------------------------------
# Recording


class RecorderNotAttachedError(FatalInterpreterError, RuntimeError):
    """A recorder was used before :meth:`Recorder.attach`: a setup mistake the
    port lets through rather than report as a tool outcome."""


class Recorder:
    """An interpreter that passes every effect through and writes it down.

    ``inner`` answers sandbox effects (sync or async, e.g. ``Simulator()``);
    harness effects are answered by the port. ``sink`` is a path (the file is
    created or replaced) or an open text stream. ``secrets`` are extra strings
    that must never reach the cassette (C17); environment values never do.

    Call :meth:`attach` with the port built on this recorder before the first
    request: it writes the header from the port's settings. A recorder
    records one port; :meth:`close` closes a file it opened.
    """

    def __init__(
        self,
        inner: Callable[[Any], Any],
        sink: str | os.PathLike[str] | IO[str],
        *,
        secrets: Iterable[str] = (),
    ) -> None:
        self.inner = inner
        if isinstance(sink, str | os.PathLike):
            self._stream: IO[str] = open(sink, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
            self._owns_stream = True
        else:
            self._stream = sink
            self._owns_stream = False
        self._secrets = tuple(secrets)
        self._seen_env: set[str] = set()
        self._closed = False
        self._settings: PortSettings | None = None
        self._lock = threading.Lock()
        self._calls = 0
        self._steps = 0

    @property
    def asynchronous(self) -> bool:
        """True when the wrapped interpreter is (the port then runs async)."""
        return getattr(self.inner, "asynchronous", False) is True

    def attach(self, port: ToolPort) -> ToolPort:
        """Bind to ``port`` (built with this recorder as its backend), write
        the header, and return ``port``. ``RuntimeError`` if already attached."""
        with self._lock:
            if self._settings is not None:
                raise RuntimeError("this recorder already records a port")
            self._settings = port.settings
            self._write(header_line(port.settings, sandrail.__version__))
        return port

    def __call__(self, effect: Effect) -> Any:
        raise TypeError("a Recorder answers through open_call: use it as a port's backend")

    def open_call(
        self,
        request: ToolRequest,
        answer_harness: Callable[[Effect], Any],
        mask_reads: Callable[..., Callable[[Effect], Any]] | None = None,
    ) -> _RecordingCall:
        """Start recording one call (the port calls this; see ``_port._Call``).

        Sandbox effects go to ``inner`` through ``mask_reads``: output is
        masked (env values, and this recorder's named ``secrets``) before it
        is recorded, across page boundaries, so no cassette holds a secret
        even in pieces (C17)."""
        with self._lock:
            # Env values earlier calls passed are secrets for this call too:
            # a later read may print them (C17).
            named = (*self._secrets, *sorted(self._seen_env))
        redaction = CallRedaction.of(request, named)
        with self._lock:
            if self._settings is None:
                raise RecorderNotAttachedError(
                    "attach the recorder to its port first: port = recorder.attach(port)"
                )
            self._calls += 1
            number = self._calls
            data = redaction.scrub(
                encode_request(redaction.request, self._settings), env_slot=False
            )
            self._write({"kind": "call", "call": number, "request": data})
        sandbox = self.inner if mask_reads is None else mask_reads(self.inner, self._secrets)
        return _RecordingCall(self, number, redaction, answer_harness, sandbox)

    def close(self) -> None:
        """Write the end line (it counts the calls, so a replay can tell a
        complete recording from one cut short), flush, and close the file if
        the recorder opened it. Closing twice does nothing more."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._settings is not None:
                self._write({"kind": "end", "calls": self._calls})
        self._stream.flush()
        if self._owns_stream:
            self._stream.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _write(self, record: Mapping[str, Any]) -> None:
        self._stream.write(dump_line(record) + "\n")
        self._stream.flush()

    def _write_step(
        self,
        call: int,
        redaction: CallRedaction,
        effect: Effect,
        answer: Outcome | EffectFailure,
    ) -> None:
        record: dict[str, Any] = {"kind": "step", "call": call, "step": 0}
        record["effect"] = redaction.scrub(
            normalize(encode_effect(effect)), env_slot=isinstance(effect, Start)
        )
        if isinstance(answer, EffectFailure):
            record["failure"] = redaction.scrub(encode_failure(answer), env_slot=False)
        else:
            record["outcome"] = redaction.scrub(normalize(encode_outcome(answer)), env_slot=False)
        with self._lock:
            self._steps += 1
            record["step"] = self._steps
            self._write(record)

    def _write_result(self, call: int, redaction: CallRedaction, result: ToolResult) -> None:
        data = redaction.scrub(result_data(result), env_slot=False)
        with self._lock:
            self._write({"kind": "result", "call": call, "result": data})


class _RecordingCall:
    """The recorder's interpreter for one call."""

    def __init__(
        self,
        recorder: Recorder,
        number: int,
        redaction: CallRedaction,
        answer_harness: Callable[[Effect], Any],
        sandbox: Callable[[Effect], Any],
    ) -> None:
        self._recorder = recorder
        self._number = number
        self._redaction = redaction
        self._answer_harness = answer_harness
        self._sandbox = sandbox
        self._pending: Effect | None = None

    def __call__(self, effect: Effect) -> Any:
        self._settle_abandoned()
        if isinstance(effect, Start) and effect.env:
            with self._recorder._lock:
                self._recorder._seen_env.update(redaction_secrets(effect.env))
        answer = self._answer_harness if isinstance(effect, HARNESS_EFFECTS) else self._sandbox
        try:
            outcome = answer(effect)
        except EffectFailure as failure:
            self._record(effect, failure)
            raise
        except FatalInterpreterError:
            raise
        except Exception as exc:
            # Convert as the port would, so the replay raises the very same failure.
            converted = _unexpected(effect, exc)
            self._record(effect, converted)
            raise converted from exc
        if inspect.isawaitable(outcome):
            self._pending = effect
            return self._settle(effect, outcome)
        self._record(effect, outcome)
        return outcome

    async def _settle(self, effect: Effect, awaitable: Awaitable[Any]) -> Any:
        try:
            outcome = await awaitable
        except EffectFailure as failure:
            self._record_pending(effect, failure)
            raise
        except asyncio.CancelledError:
            self._settle_abandoned()
            raise
        except FatalInterpreterError:
            raise
        except Exception as exc:
            converted = _unexpected(effect, exc)
            self._record_pending(effect, converted)
            raise converted from exc
        self._record_pending(effect, outcome)
        return outcome

    def _record_pending(self, effect: Effect, answer: Outcome | EffectFailure) -> None:
        if self._pending is effect:
            self._pending = None
            self._record(effect, answer)

    def _settle_abandoned(self) -> None:
        # The program only moves on once an effect is answered: an effect still
        # pending now was abandoned by the port because the harness aborted.
        if self._pending is not None:
            effect, self._pending = self._pending, None
            self._record(effect, _ABANDONED)

    def _record(self, effect: Effect, answer: Outcome | EffectFailure) -> None:
        self._recorder._write_step(self._number, self._redaction, effect, answer)

    def finish(self, result: ToolResult) -> None:
        self._settle_abandoned()
        self._recorder._write_result(self._number, self._redaction, result)


# ---------------------------------------------------------------------------
# Replaying


@attrs.frozen(kw_only=True)
class StepEntry:
    """One replayed effect and the recorded answer it got."""

    call: int
    step: int
    effect: Mapping[str, Any]
    outcome: Mapping[str, Any] | None
    failure: Mapping[str, Any] | None


@attrs.frozen(kw_only=True)
class CallEntry:
    """A replayed call begins: its request (as recorded, redacted)."""

    call: int
    request: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class ResultEntry:
    """The result a replayed call ended with (equal to the recorded one)."""

    call: int
    result: Mapping[str, Any]


Entry = CallEntry | StepEntry | ResultEntry


@attrs.frozen(kw_only=True)
class ReplayReport:
    """What a replay ran: the header and a transcript in order."""

    source: str
    header: Mapping[str, Any]
    transcript: tuple[Entry, ...]
    complete: bool = True
    """False when the recording has no end line: it may have been cut short."""

    @property
    def calls(self) -> int:
        return sum(isinstance(entry, ResultEntry) for entry in self.transcript)

    @property
    def steps(self) -> int:
        return sum(isinstance(entry, StepEntry) for entry in self.transcript)


class Replayer:
    """An interpreter that answers every effect from a recording.

    ``source`` is a cassette path or a :class:`Cassette`. Calls are matched
    in recorded order; in each call, effects in order, by value, after the
    same redaction the recorder applied (name the same ``secrets`` when the
    live requests carry them). Any difference raises
    :class:`DivergenceError`. Call :meth:`assert_consumed` at the end.
    """

    def __init__(
        self, source: str | os.PathLike[str] | Cassette, *, secrets: Iterable[str] = ()
    ) -> None:
        self.cassette = source if isinstance(source, Cassette) else load_cassette(source)
        self._secrets = tuple(secrets)
        self._settings = _settings_of(self.cassette)
        self._lock = threading.Lock()
        self._opened = 0
        self._finished = 0
        self._transcript: list[Entry] = []

    def __call__(self, effect: Effect) -> Any:
        raise TypeError("a Replayer answers through open_call: use it as a port's backend")

    @property
    def transcript(self) -> tuple[Entry, ...]:
        with self._lock:
            return tuple(self._transcript)

    def report(self) -> ReplayReport:
        """The replay so far."""
        return ReplayReport(
            source=self.cassette.source,
            header=self.cassette.header,
            transcript=self.transcript,
            complete=self.cassette.complete,
        )

    def open_call(
        self,
        request: ToolRequest,
        answer_harness: Callable[[Effect], Any],
        mask_reads: Callable[..., Callable[[Effect], Any]] | None = None,
    ) -> _ReplayCall:
        """Match ``request`` with the next recorded call (the port calls this).

        ``mask_reads`` is not used: recorded outputs were masked when they
        were recorded."""
        redaction = CallRedaction.of(request, self._secrets)
        live = redaction.scrub(encode_request(redaction.request, self._settings), env_slot=False)
        with self._lock:
            calls = self.cassette.calls
            if self._opened >= len(calls):
                raise DivergenceError(
                    f"replay diverged: the recording holds {len(calls)} calls, and a call "
                    f"{len(calls) + 1} came ({_describe_request(live)})",
                    call=len(calls) + 1,
                    got=live,
                )
            recorded = calls[self._opened]
            self._opened += 1
        same_line = dump_line({"kind": "call", "call": recorded.number, "request": live})
        found = None if same_line == recorded.request_text else _difference(recorded.request, live)
        if found is not None:
            field, expected, got = found
            raise DivergenceError(
                f"replay diverged at the request of {recorded.describe()} "
                f"(recording line {recorded.line})\n"
                f"  differs:  request.{field}: recorded {_value(expected)}, live {_value(got)}",
                call=recorded.number,
                line=recorded.line,
                expected=recorded.request,
                got=live,
                field=f"request.{field}",
            )
        self._log(CallEntry(call=recorded.number, request=recorded.request))
        return _ReplayCall(self, recorded, redaction)

    def assert_consumed(self) -> None:
        """Raise :class:`DivergenceError` unless every recorded call ran to its result."""
        with self._lock:
            calls = self.cassette.calls
            if self._finished >= len(calls):
                return
            missing = calls[self._finished]
            more = len(calls) - self._finished - 1
        also = f" and {more} more" if more else ""
        raise DivergenceError(
            f"replay diverged: the recording was not fully consumed: {missing.describe()} "
            f"(recording line {missing.line}){also} never ran to the end",
            call=missing.number,
            line=missing.line,
            expected=missing.request,
        )

    def _log(self, entry: Entry) -> None:
        with self._lock:
            self._transcript.append(entry)
            if isinstance(entry, ResultEntry):
                self._finished += 1


class _ReplayCall:
    """The replayer's interpreter for one call."""

    def __init__(self, replayer: Replayer, recorded: RecordedCall, redaction: CallRedaction):
        self._replayer = replayer
        self._recorded = recorded
        self._redaction = redaction
        self._position = 0
        # A digest over secret-bearing arguments was recorded as the digest of
        # the redacted ones; the live core (with the secrets) must get its own
        # back where an outcome carries one.
        self._live_digests = {swapped: live for live, swapped in redaction.digests.items()}

    def _answer(self, step: RecordedStep) -> Outcome:
        answer = step.answer()
        if isinstance(answer, OwnedCommand) and answer.launch_digest in self._live_digests:
            return attrs.evolve(answer, launch_digest=self._live_digests[answer.launch_digest])
        return answer

    def __call__(self, effect: Effect) -> Outcome:
        steps = self._recorded.steps
        if self._position < len(steps):
            step = steps[self._position]
            if _same_effect(effect, step.effect_value):
                # The very effect recorded: nothing to redact in it (a value
                # the recorder redacted would differ), nothing to explain.
                self._position += 1
                self._replayer._log(
                    StepEntry(
                        call=self._recorded.number,
                        step=step.step,
                        effect=step.effect,
                        outcome=step.outcome,
                        failure=step.failure,
                    )
                )
                return self._answer(step)
        live = self._redaction.scrub(encode_effect(effect), env_slot=isinstance(effect, Start))
        if self._position >= len(steps):
            raise self._diverged(
                f"  the recording has no more effects for this call\n  got:      {render(live)}",
                step=None,
                got=live,
            )
        step = steps[self._position]
        found = _difference(step.effect, live)
        if found is not None:
            field, expected, got = found
            raise self._diverged(
                f"  expected: {render(step.effect)}\n"
                f"  got:      {render(live)}\n"
                f"  differs:  {field}: recorded {_value(expected)}, live {_value(got)}",
                step=step,
                got=live,
                field=field,
            )
        self._position += 1
        self._replayer._log(
            StepEntry(
                call=self._recorded.number,
                step=step.step,
                effect=step.effect,
                outcome=step.outcome,
                failure=step.failure,
            )
        )
        return self._answer(step)

    def finish(self, result: ToolResult) -> None:
        recorded = self._recorded
        steps = recorded.steps
        if self._position < len(steps):
            step = steps[self._position]
            raise self._diverged(
                f"  the call ended, but the recording expects more effects\n"
                f"  expected: {render(step.effect)}",
                step=step,
                got=None,
            )
        assert recorded.result is not None  # parse_cassette refuses calls without one
        if self._redaction.bare and recorded.result_text:
            # The line the recorder wrote for this result, if nothing differs.
            with contextlib.suppress(TypeError, ValueError):
                line = dump_line(
                    {"kind": "result", "call": recorded.number, "result": result.to_dict()}
                )
                if line == recorded.result_text:
                    self._replayer._log(ResultEntry(call=recorded.number, result=recorded.result))
                    return
        live = self._redaction.scrub(result_data(result), env_slot=False)
        found = _difference(recorded.result, live)
        if found is not None:
            field, expected, got = found
            raise DivergenceError(
                f"replay diverged at the result of {recorded.describe()} "
                f"(request on recording line {recorded.line})\n"
                f"{self._ran()}"
                f"  differs:  result.{field}: recorded {_value(expected)}, live {_value(got)}",
                call=recorded.number,
                line=recorded.line,
                expected=recorded.result,
                got=live,
                field=f"result.{field}",
            )
        self._replayer._log(ResultEntry(call=recorded.number, result=recorded.result))

    def _ran(self) -> str:
        done = self._recorded.steps[: self._position]
        if not done:
            return "  ran before it in this call: nothing\n"
        lines = [f"    step {s.step}  {render(s.effect)} -> {_answer(s)}\n" for s in done]
        return "  ran before it in this call:\n" + "".join(lines)

    def _diverged(
        self, body: str, *, step: RecordedStep | None, got: Any, field: str | None = None
    ) -> DivergenceError:
        """A divergence at this call's next effect; ``step`` is the recorded
        one expected there (``None`` when the recording has no more)."""
        recorded = self._recorded
        index = self._position + 1
        if step is None:
            where = f"effect {index} of {recorded.describe()}"
        else:
            where = (
                f"step {step.step} (recording line {step.line}), "
                f"effect {index} of {recorded.describe()}"
            )
        return DivergenceError(
            f"replay diverged at {where}\n{self._ran()}{body}",
            call=recorded.number,
            step=None if step is None else step.step,
            line=None if step is None else step.line,
            expected=None if step is None else step.effect,
            got=got,
            field=field,
        )


def _same_effect(live: Effect, recorded: Effect | None) -> bool:
    """Whether ``live`` is ``recorded``, field by field, with the same types
    (``1`` is not ``True``): the replay's fast path."""
    if recorded is None or type(live) is not type(recorded) or live != recorded:
        return False
    return all(
        type(getattr(live, name)) is type(getattr(recorded, name)) for name in _FIELDS[type(live)]
    )


_FIELDS: dict[type, tuple[str, ...]] = {
    kind: tuple(field.name for field in attrs.fields(kind)) for kind in get_args(Effect)
}


def _answer(step: RecordedStep) -> str:
    if step.failure is not None:
        failure = step.failure
        aborted = ", aborted" if failure.get("aborted") else ""
        return f"failure({failure.get('delivery')}: {failure.get('detail')!r}{aborted})"
    return render(step.outcome)


# ---------------------------------------------------------------------------
# Replaying a whole file


class _NoArtifacts:
    """Stands in for the recorded session's artifact store: the recording
    answers every WriteArtifact, so this is never written to."""

    def write(self, key: str, content: str, media_type: str) -> ArtifactRef:
        raise FatalInterpreterError("a replay must not write artifacts")


def _settings_of(cassette: Cassette) -> PortSettings:
    """The port settings the header describes (``CassetteError`` if impossible)."""
    header = cassette.header
    settings = header["settings"]
    owner = cassette.owner
    foreground = settings["foreground_timeout_seconds"]
    try:
        if header["tools"] == "command":
            definitions = command_tool_definitions(foreground)
        else:
            definitions = code_tool_definitions(
                foreground, agent_owner=isinstance(owner, AgentOwner)
            )
    except (TypeError, ValueError) as exc:
        raise CassetteError(
            f"{cassette.source}:1: the header's settings are invalid: {exc}"
        ) from None
    return PortSettings(
        session_id=header["session_id"],
        owner=owner,
        definitions=definitions,
        contract=header["contract"],
        **settings,
    )


def replay_port(cassette: Cassette, replayer: Replayer) -> ToolPort:
    """A port like the recorded one, with ``replayer`` as its backend and
    callbacks that are never asked (the recording answers harness effects)."""
    settings = cassette.settings
    factory = command_tools if cassette.tools == "command" else code_tools
    try:
        return factory(
            backend=replayer,
            session_id=cassette.header["session_id"],
            owner=cassette.owner,
            authorize=lambda request: ALLOW,
            assert_authority=lambda request: True,
            max_output_bytes=settings["max_output_bytes"],
            artifacts=_NoArtifacts() if settings["artifacts_enabled"] else None,
            foreground_timeout_seconds=settings["foreground_timeout_seconds"],
            background_timeout_seconds=settings["background_timeout_seconds"],
            allow_internet_access=settings["allow_internet_access"],
        )
    except (TypeError, ValueError) as exc:
        raise CassetteError(
            f"{cassette.source}:1: the header's settings cannot build a port: {exc}"
        ) from None


def replay_file(source: str | os.PathLike[str] | Cassette) -> ReplayReport:
    """Re-run every recorded request through the core against its recording.

    Returns the report when every effect and every result matched and the
    recording was fully consumed. Raises :class:`DivergenceError` (with
    ``report`` set to the replay so far) at the first difference, and
    :class:`CassetteError` for a file that cannot be read.
    """
    cassette = source if isinstance(source, Cassette) else load_cassette(source)
    replayer = Replayer(cassette)
    port = replay_port(cassette, replayer)
    try:
        for call in cassette.calls:
            try:
                request = decode_request(call.request, port.definitions)
            except (KeyError, TypeError, ValueError) as exc:
                raise CassetteError(
                    f"{cassette.source}:{call.line}: cannot rebuild the request: {exc}"
                ) from None
            port.execute_sync(request)
        replayer.assert_consumed()
    except DivergenceError as error:
        error.report = replayer.report()
        raise
    return replayer.report()


# ---------------------------------------------------------------------------
# Rendering


def render(data: Any, *, width: int = 48) -> str:
    """An effect or outcome (JSON data) as one readable line:
    ``Start(sandbox_id="sbx-1", ...)``; strings longer than ``width`` are
    shortened in the middle."""
    if not isinstance(data, Mapping) or "type" not in data:
        return _value(data, width)
    fields = ", ".join(
        f"{key}={_value(value, width)}" for key, value in data.items() if key != "type"
    )
    return f"{data['type']}({fields})"


def _value(value: Any, width: int = 200) -> str:
    if isinstance(value, Mapping) and "type" in value:
        return render(value, width=width)
    if isinstance(value, Mapping) and value and len(value) <= 8:
        inner = ", ".join(f"{key}={_value(item, width)}" for key, item in value.items())
        return "{" + inner + "}"
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > width:
        keep = max(width // 2 - 2, 4)
        text = f"{text[:keep]}…{text[-keep:]}"
    return text


def _difference(expected: Any, got: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first field where two JSON values differ: (dotted path, expected, got)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        if expected.get("type") != got.get("type"):
            return (_join(path, "type"), expected.get("type"), got.get("type"))
        for key in [*expected, *(k for k in got if k not in expected)]:
            if key not in got or key not in expected:
                return (_join(path, key), expected.get(key, "<absent>"), got.get(key, "<absent>"))
            found = _difference(expected[key], got[key], _join(path, key))
            if found is not None:
                return found
        return None
    if isinstance(expected, list) and isinstance(got, list):
        for index, (left, right) in enumerate(zip(expected, got, strict=False)):
            found = _difference(left, right, _join(path, str(index)))
            if found is not None:
                return found
        if len(expected) != len(got):
            return (_join(path, "length"), len(expected), len(got))
        return None
    if expected == got and type(expected) is type(got):
        return None
    numbers = (
        isinstance(expected, int | float)
        and isinstance(got, int | float)
        and not isinstance(expected, bool)
        and not isinstance(got, bool)
    )
    if numbers and expected == got:
        return None
    return (path or "<value>", expected, got)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe_request(data: Mapping[str, Any]) -> str:
    call = data.get("call", {})
    return f"{call.get('name')}, call_id {call.get('call_id')!r}"
