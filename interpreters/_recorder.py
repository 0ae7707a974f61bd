"""Recording (``docs/howto/record-and-replay.md``): the :class:`Recorder` an interpreter is wrapped
in, and the per-call interpreter that writes each effect, its answer and
the call's result to the cassette (redacted, C17)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import IO, Any, Protocol, TypeVar

from sandrail._version import __version__
from sandrail.core import (
    MIN_REDACTED_LENGTH,
    Effect,
    EffectFailure,
    FatalInterpreterError,
    Outcome,
    PortSettings,
    Program,
    Start,
    ToolRequest,
    ToolResult,
    redaction_secrets,
)
from sandrail.interpreters._drivers import Step, is_asynchronous, layered

from ._cassette import (
    MARKER,
    CallRedaction,
    dump_line,
    encode_effect,
    encode_failure,
    encode_outcome,
    encode_request,
    header_line,
    normalize,
    result_data,
)

__all__ = [
    "Recorder",
    "RecorderBusyError",
    "RecorderClosedError",
    "RecorderMisplacedError",
    "RecorderNotAttachedError",
    "RecorderWriteError",
]


class _Port(Protocol):
    """What a recorder needs of the port it records: its settings."""

    @property
    def settings(self) -> PortSettings: ...


_P = TypeVar("_P", bound=_Port)


class RecorderNotAttachedError(FatalInterpreterError, RuntimeError):
    """A recorder was used before :meth:`Recorder.attach`: a setup mistake the
    port lets through rather than report as a tool outcome."""


class RecorderMisplacedError(FatalInterpreterError, TypeError):
    """A recorder was handed a sandbox effect outside a call it records (it
    was wrapped inside another backend): it would record nothing, so it
    answers nothing, and the port lets this setup mistake through to the
    caller rather than tell the model a call may have run."""


class RecorderBusyError(RuntimeError):
    """:meth:`Recorder.close` was called while calls it records are still
    running (from another thread, or another task while an async call
    awaits): closing then would cut their records short, or make their
    last writes fail, so the recorder stays open and nothing is lost.
    Close it again once they have ended."""


class RecorderWriteError(OSError):
    """:meth:`Recorder.close` found that the file refused lines of the
    cassette (a full disk, say): the cassette is incomplete and cannot
    replay whole. The calls were answered as without a recorder, but for
    a call whose line was refused before its result: that call failed,
    as it would have on any failing backend. Raised once, after the
    recorder is closed."""


class RecorderClosedError(FatalInterpreterError, RuntimeError):
    """A call began on a recorder already closed: it could not be recorded,
    so nothing ran, and the port lets this setup mistake through to the
    caller rather than report it as a tool outcome."""


def _identity_redacted(request: ToolRequest, data: Mapping[str, Any]) -> bool:
    """Whether a secret was cut out of the call's identity (its operation
    key, its call id) as ``data``, the request written, holds it."""
    call = data.get("call")
    written_id = call.get("call_id") if isinstance(call, Mapping) else None
    return data.get("operation_key") != request.operation_key or written_id != getattr(
        request.call, "call_id", written_id
    )


def _named_secrets(secrets: Iterable[str]) -> tuple[str, ...]:
    """``secrets`` checked: strings of at least ``MIN_REDACTED_LENGTH`` characters."""
    named = (secrets,) if isinstance(secrets, str) else tuple(secrets)
    for secret in named:
        if not isinstance(secret, str):
            raise ValueError(f"Recorder secrets must be strings, got {type(secret).__name__}")
        if len(secret) < MIN_REDACTED_LENGTH:
            raise ValueError(
                f"Recorder secrets must have at least {MIN_REDACTED_LENGTH} characters, got one "
                f"of {len(secret)}: a shorter one cannot be masked in output without masking "
                "ordinary text"
            )
        if MARKER in secret:
            raise ValueError(
                f"a Recorder secret cannot hold the redaction marker {MARKER!r}: the cassette "
                "writes that marker wherever it cuts a secret"
            )
    return named


class Recorder:
    """A backend that passes every effect through and writes it down.

    ``inner`` answers sandbox effects (sync or async, e.g. ``Simulator()``);
    harness effects are answered by the port. The port wraps each call's
    program in this recorder's layer (:meth:`open_layer`), which writes down
    every effect and what answered it as the program sees it: above the
    port's masking, so output is recorded masked (C17). ``sink`` is a path (the file is
    created or replaced) or an open text stream. ``secrets`` are extra strings
    that must never reach the cassette (C17); environment values never do.
    Each is masked in output as env values are, so each must be a string of
    at least :data:`~sandrail.core._masking.MIN_REDACTED_LENGTH` (8)
    characters: a shorter one would mask ordinary text (``ok``, JSON keys)
    and make the recording unreplayable; ``ValueError`` otherwise, before
    the sink is touched.

    Call :meth:`attach` with the port built on this recorder before the first
    request: it writes the header from the port's settings. A recorder
    records one port; :meth:`close` closes a file it opened. A port on a
    recorder shares the session memory of the backend the recorder wraps:
    a value its session masked before the recorder was put around it stays
    masked, in results and in the cassette (C17).
    """

    def __init__(
        self,
        inner: Callable[[Any], Any],
        sink: str | os.PathLike[str] | IO[str],
        *,
        secrets: Iterable[str] = (),
    ) -> None:
        named = _named_secrets(secrets)
        self.inner = inner
        if isinstance(sink, str | os.PathLike):
            self._stream: IO[str] = open(sink, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
            self._owns_stream = True
        else:
            self._stream = sink
            self._owns_stream = False
        self._secrets = named
        self._seen_env: set[str] = set()
        self._closed = False
        self._lost: list[str] = []
        """Lines the file refused (see :meth:`close`)."""
        self._settings: PortSettings | None = None
        self._port_masks: Callable[[], frozenset[str]] = frozenset
        self._lock = threading.Lock()
        self._calls = 0
        self._steps = 0
        self._open = 0
        """Layers opened and not yet finished: the calls that may pass sandbox
        effects through (:meth:`__call__`)."""

    @property
    def asynchronous(self) -> bool:
        """True when the wrapped interpreter is (the port then runs async; see
        :func:`~sandrail.interpreters._drivers.is_asynchronous`)."""
        return is_asynchronous(self.inner)

    @property
    def backend_label(self) -> object:
        """The wrapped interpreter's ``backend_label`` (``None`` without one)."""
        return getattr(self.inner, "backend_label", None)

    @property
    def sandbox_description(self) -> object:
        """The wrapped interpreter's ``sandbox_description`` (``None`` without one)."""
        return getattr(self.inner, "sandbox_description", None)

    @property
    def allow_internet_access(self) -> object:
        """The wrapped interpreter's ``allow_internet_access`` (``None`` without one)."""
        return getattr(self.inner, "allow_internet_access", None)

    @property
    def attached(self) -> bool:
        """Whether :meth:`attach` bound this recorder to its port already."""
        return self._settings is not None

    def attach(self, port: _P) -> _P:
        """Bind to ``port`` (built with this recorder as its backend), write
        the header, and return ``port``. ``RuntimeError`` if already attached;
        ``ValueError``, with nothing written, when one of the recorder's
        ``secrets`` stands in the port's settings (its session id, its
        owner, the sandbox's description), which the header holds whole: a
        replay rebuilds the port from them, so they cannot be cut (C17)."""
        if self._closed:
            raise RecorderClosedError(
                "this Recorder is closed: it can record no port now; record with a new Recorder"
            )
        header = header_line(port.settings, __version__)
        text = dump_line(header)
        forms = (form for secret in self._secrets for form in (secret, json.dumps(secret)[1:-1]))
        if any(form in text for form in forms):
            raise ValueError(
                "one of this Recorder's secrets stands in the port's settings (its session id, "
                "owner or sandbox description), which the cassette's header holds whole: give "
                "the port settings without it; nothing was recorded"
            )
        with self._lock:
            if self._settings is not None:
                raise RuntimeError("this recorder already records a port")
            masked = getattr(port, "masked_values", None)
            if isinstance(masked, frozenset):
                # The values the port's session masks (redact=, env values
                # of earlier calls): they never reach the cassette either.
                self._port_masks = lambda: getattr(port, "masked_values", frozenset())
            self._write(header)  # attached once the header is written, not before
            self._settings = port.settings
        return port

    def __call__(self, effect: Effect) -> Any:
        """Answer a sandbox effect of a call being recorded with ``inner``
        (the port calls this, for a call whose :meth:`open_layer` it
        opened). Used as anything but a port's backend (wrapped in another
        backend, say), it would record nothing, so that is refused."""
        if not self._open:
            raise RecorderMisplacedError(
                "a Recorder records through the port's layer: use it as a port's backend, "
                "not inside another backend"
            )
        return self.inner(effect)

    def open_layer(self, request: ToolRequest) -> _RecordingLayer:
        """Start recording one call (the port calls this; see
        :class:`sandrail._port_call.PortCall`): the layer the call's program
        is wrapped in. The port masks output below it (env values, and this
        recorder's named ``secrets``, :attr:`_RecordingLayer.named`) across
        page boundaries, so no cassette holds a secret even in pieces (C17)."""
        with self._lock:
            # Env values earlier calls passed are secrets for this call too:
            # a later read may print them (C17).
            named = (*self._secrets, *sorted(self._seen_env))
        # The port masks the named secrets as it masks env values, so the
        # core's digests of what it records are computed without them too.
        redaction = CallRedaction.of(request, named, self._port_masks() | frozenset(self._secrets))
        with self._lock:
            if self._settings is None:
                raise RecorderNotAttachedError(
                    "attach the recorder to its port first: port = recorder.attach(port)"
                )
            if self._closed:
                raise RecorderClosedError(
                    "this Recorder is closed: a call on its port cannot be recorded, so it "
                    "was not run; record with a new Recorder"
                )
            number = self._calls + 1
            data = redaction.scrub(
                encode_request(redaction.request, self._settings), env_slot=False
            )
            record: dict[str, Any] = {"kind": "call", "call": number, "request": data}
            if _identity_redacted(request, data):
                # The core refuses a call whose identity holds a secret; a
                # replay, given the marker instead, must refuse it too.
                record["identity_redacted"] = True
            # Counted once its line is written: a call whose line could not
            # be written is no call of the cassette, and keeps no close waiting.
            self._write(record)
            self._calls = number
            self._open += 1
        return _RecordingLayer(self, number, redaction)

    def close(self) -> None:
        """Write the end line (it counts the calls, so a replay can tell a
        complete recording from one cut short), flush, and close the file if
        the recorder opened it. Closing twice does nothing more.

        :class:`RecorderBusyError`, with nothing written or closed, while a
        call it records is still running (close from another thread, or
        from another task while an async call awaits): closing under it
        would lose that call's record, and the port would have to report
        the recorder's failure as the call's. A call begun after close is
        refused before it runs (:class:`RecorderClosedError`)."""
        with self._lock:
            if self._closed:
                return
            if self._open:
                running = "1 call is" if self._open == 1 else f"{self._open} calls are"
                raise RecorderBusyError(
                    f"{running} still being recorded: close the Recorder after they end "
                    "(closing now would cut their records short); it is still open"
                )
            self._closed = True
            try:
                if self._settings is not None:
                    self._write({"kind": "end", "calls": self._calls})
                self._stream.flush()
            finally:
                if self._owns_stream:
                    self._stream.close()
        if self._lost:
            first = self._lost[0]
            more = f" and {len(self._lost) - 1} more" if len(self._lost) > 1 else ""
            raise RecorderWriteError(
                f"the cassette is incomplete: the file refused {first}{more}; it cannot "
                "replay whole"
            )

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.close()
        except RecorderBusyError:
            if exc is None:
                raise
            # The block's own exception says more than "calls still run";
            # the recorder stays open for them.

    def _write(self, record: Mapping[str, Any]) -> None:
        try:
            self._stream.write(dump_line(record) + "\n")
            self._stream.flush()
        except Exception as exc:
            # The call this line belongs to fails with it, or, for a result,
            # keeps its result (a recorder never changes a true one): either
            # way the cassette lacks the line, and close says so.
            call = record.get("call")
            of = "" if call is None else f" of call {call}"
            self._lost.append(f"the {record.get('kind')} line{of} ({exc})")
            raise

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

    def _ended(self) -> None:
        """A call's layer is done (its result written, or the call abandoned)."""
        with self._lock:
            self._open -= 1


class _RecordingLayer:
    """The recorder's layer for one call: each effect and its answer (or
    failure), as the call's program sees them, then the call's result."""

    def __init__(self, recorder: Recorder, number: int, redaction: CallRedaction) -> None:
        self._recorder = recorder
        self._number = number
        self._redaction = redaction
        self.named = frozenset(recorder._secrets)
        """The recorder's named secrets: the port masks them too."""
        self._finished = False

    def wrap(self, program: Program) -> Program:
        """``program``, recorded."""
        return layered(program, self._step)

    def _step(self, effect: Effect) -> Step:
        if isinstance(effect, Start) and effect.env:
            with self._recorder._lock:
                self._recorder._seen_env.update(redaction_secrets(effect.env))
        return self._recorded(effect)

    def _recorded(self, effect: Effect) -> Step:
        try:
            answer = yield effect
        except EffectFailure as failure:
            self._record(effect, failure)
            raise
        self._record(effect, answer)
        return answer

    def _record(self, effect: Effect, answer: Outcome | EffectFailure) -> None:
        self._recorder._write_step(self._number, self._redaction, effect, answer)

    def finish(self, result: ToolResult) -> None:
        """Write the call's result (the port calls this when the call ends).
        The call counts as running until it is written, so
        :meth:`Recorder.close` cannot end the file before it."""
        if self._finished:
            return
        try:
            self._recorder._write_result(self._number, self._redaction, result)
        finally:
            self.close()

    def close(self) -> None:
        """The call passes no more effects through (said once; the port
        says it too of a call abandoned without a result)."""
        if not self._finished:
            self._finished = True
            self._recorder._ended()
