"""Replaying (``docs/howto/record-and-replay.md``): the :class:`Replayer` that answers every effect
of a port's calls from a recording and raises
:class:`~sandrail.interpreters._divergence.DivergenceError` at the first
difference, and keeps the transcript
(:class:`~sandrail.interpreters._transcript.ReplayReport`) of what it ran."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any, Literal

import attrs

from sandrail.core import (
    AgentOwner,
    Effect,
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
    CallRedaction,
    Cassette,
    CassetteError,
    RecordedCall,
    RecordedStep,
    check_replayable,
    dump_line,
    effect_fields,
    encode_effect,
    encode_request,
    load_cassette,
    result_data,
)
from ._divergence import (
    DivergenceError,
    describe_request,
    difference,
    differs,
    hidden_values,
    render,
)
from ._transcript import CallEntry, Entry, ReplayReport, ResultEntry, StepEntry

__all__ = ["Replayer"]


class Replayer:
    """An interpreter that answers every effect from a recording.

    ``source`` is a cassette path or a :class:`Cassette`
    (:class:`CassetteError` when it was recorded with another result
    format, :func:`~._cassette.check_replayable`). Calls are matched
    in recorded order; in each call, effects in order, by value, after the
    same redaction the recorder applied (name the same ``secrets`` when the
    live requests carry them). Any difference raises
    :class:`DivergenceError`. Call :meth:`assert_consumed` at the end.
    """

    def __init__(
        self, source: str | os.PathLike[str] | Cassette, *, secrets: Iterable[str] = ()
    ) -> None:
        self.cassette = source if isinstance(source, Cassette) else load_cassette(source)
        check_replayable(self.cassette)
        self._secrets = tuple(secrets)
        self._seen_env: set[str] = set()
        """Env values the replayed calls' starts passed (as the recorder
        keeps them: cut out of every later call)."""
        self._settings = _settings_of(self.cassette)
        self._lock = threading.Lock()
        self._opened = 0
        self._finished = 0
        # What ran, as the recorded objects it matched: the transcript's
        # entries are built from them only when a report is asked for.
        self._ran: list[_Ran] = []

    def __call__(self, effect: Effect) -> Any:
        raise TypeError("a Replayer answers through open_call: use it as a port's backend")

    @property
    def sandbox_description(self) -> str:
        """The recorded backend's words for its sandbox (the cassette's
        header keeps them): a port replaying the recording offers the very
        definitions the recorded port offered, so every request is the same
        request (C9) as the recorded one."""
        return self.cassette.sandbox_description

    @property
    def transcript(self) -> tuple[Entry, ...]:
        """What was replayed so far: each effect and each result, in order."""
        with self._lock:
            ran = tuple(self._ran)
        return tuple(_entry(item) for item in ran)

    def report(self) -> ReplayReport:
        """The replay so far."""
        return ReplayReport(
            source=self.cassette.source,
            header=self.cassette.header,
            transcript=self.transcript,
            complete=self.cassette.complete,
        )

    def open_call(
        self, request: ToolRequest, answer_harness: Callable[[Effect], Any]
    ) -> _ReplayCall:
        """Match ``request`` with the next recorded call (the port calls
        this). Recorded outputs were masked when they were recorded; the port
        does not mask them again."""
        with self._lock:
            calls = self.cassette.calls
            recorded = calls[self._opened] if self._opened < len(calls) else None
            self._opened += recorded is not None
            # As the recorder cut them: env values earlier calls passed are
            # secrets of this call too.
            secrets = (*self._secrets, *sorted(self._seen_env))
        # The live port masks both (its own and the named ones, which join
        # its calls' secrets): its core's digests are computed without them.
        redaction = CallRedaction.of(request, secrets, frozenset(secrets))
        live = redaction.scrub(encode_request(redaction.request, self._settings), env_slot=False)
        if recorded is None:
            raise DivergenceError(
                f"replay diverged: the recording holds {len(calls)} calls, and a call "
                f"{len(calls) + 1} came ({describe_request(live)})",
                call=len(calls) + 1,
                got=live,
            )
        line: dict[str, Any] = {"kind": "call", "call": recorded.number, "request": live}
        if recorded.identity_redacted:
            line["identity_redacted"] = True
        same_line = dump_line(line)
        found = None if same_line == recorded.request_text else difference(recorded.request, live)
        if found is not None:
            raise _diverged_at("request", recorded, found, live)
        self._log(recorded)
        return _ReplayCall(self, recorded, redaction)

    def take_refused(self, call: RecordedCall) -> None:
        """Take the next recorded call, ``call``, as it was answered, without
        running it: a call the recorded core refused before anything ran for
        a secret in its identity, which the cassette cut out (so no core can
        decide it again from the cassette). :class:`DivergenceError` for a
        call that ran (its launch was keyed by what the cassette lacks) or
        that is not next."""
        if call.steps or not call.identity_redacted:
            raise _unreplayable(call)
        with self._lock:
            calls = self.cassette.calls
            if self._opened >= len(calls) or calls[self._opened] is not call:
                raise _unreplayable(call)
            self._opened += 1
        self._log(call)
        self._log(_Finished(call))

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

    def _log(self, ran: _Ran) -> None:
        with self._lock:
            self._ran.append(ran)
            if type(ran) is _Finished:
                self._finished += 1


def _unreplayable(call: RecordedCall) -> DivergenceError:
    return DivergenceError(
        f"replay diverged: {call.describe()} (recording line {call.line}) ran with a "
        "secret's text in its identity (its operation key or call id), which the cassette "
        "cut out: its launch was keyed by what the cassette does not hold, so it cannot "
        "replay; record it again with no secret in the identity",
        call=call.number,
        line=call.line,
        expected=call.request,
    )


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
        self.named: frozenset[str] = frozenset(replayer._secrets)
        """The replayer's named secrets: the port masks them in this call's
        result and refuses them in its identity, as the recording port did
        a recorder's, so a live request that carries them gets back what was
        recorded (and never shows them)."""

    def _answer(self, step: RecordedStep) -> Outcome:
        answer = step.answer()
        if isinstance(answer, OwnedCommand) and answer.launch_digest in self._live_digests:
            return attrs.evolve(answer, launch_digest=self._live_digests[answer.launch_digest])
        return answer

    def __call__(self, effect: Effect) -> Outcome:
        if isinstance(effect, Start) and effect.env:
            with self._replayer._lock:
                self._replayer._seen_env.update(redaction_secrets(effect.env))
        steps = self._recorded.steps
        if self._position < len(steps):
            step = steps[self._position]
            if _same_effect(effect, step):
                # The very effect recorded: nothing to redact in it (a value
                # the recorder redacted would differ), nothing to explain.
                return self._take(step)
        live = self._redaction.scrub(encode_effect(effect), env_slot=isinstance(effect, Start))
        if self._position >= len(steps):
            raise self._diverged(
                f"  the recording has no more effects for this call\n  got:      {render(live)}",
                step=None,
                got=live,
            )
        step = steps[self._position]
        found = difference(step.effect, live)
        if found is not None:
            field, expected, got = found
            shown = render(live)
            for value in hidden_values(expected, got):
                shown = shown.replace(value, "<not shown>")
            raise self._diverged(
                f"  expected: {render(step.effect)}\n"
                f"  got:      {shown}\n"
                f"{differs(field, expected, got)}",
                step=step,
                got=live,
                field=field,
            )
        return self._take(step)

    def _take(self, step: RecordedStep) -> Outcome:
        """Move past ``step`` (the effect matched it), log it, and give its
        recorded answer (raising a recorded failure)."""
        self._position += 1
        self._replayer._log((self._recorded.number, step))
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
                    self._replayer._log(_Finished(recorded))
                    return
        live = self._redaction.scrub(result_data(result), env_slot=False)
        found = difference(recorded.result, live)
        if found is not None:
            raise _diverged_at("result", recorded, found, live, ran=self._ran())
        self._replayer._log(_Finished(recorded))

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


def _diverged_at(
    part: Literal["request", "result"],
    recorded: RecordedCall,
    found: tuple[str, Any, Any],
    live: Any,
    *,
    ran: str = "",
) -> DivergenceError:
    """A divergence at the request or the result of ``recorded``: ``found``
    is the first difference (field, recorded value, live value), ``live``
    the live record, ``ran`` what ran before it in the call."""
    field, expected, got = found
    where = "recording line" if part == "request" else "request on recording line"
    return DivergenceError(
        f"replay diverged at the {part} of {recorded.describe()} ({where} {recorded.line})\n"
        f"{ran}{differs(f'{part}.{field}', expected, got)}",
        call=recorded.number,
        line=recorded.line,
        expected=recorded.request if part == "request" else recorded.result,
        got=live,
        field=f"{part}.{field}",
    )


class _Finished:
    """A recorded call ran to its result (a transcript item)."""

    __slots__ = ("call",)

    def __init__(self, call: RecordedCall) -> None:
        self.call = call


_Ran = RecordedCall | tuple[int, RecordedStep] | _Finished
"""What :meth:`Replayer._log` notes: a call begun, a step (with its call's
number) answered, a call finished."""


def _entry(ran: _Ran) -> Entry:
    """The transcript entry of what :meth:`Replayer._log` noted."""
    if isinstance(ran, tuple):
        call, step = ran
        return StepEntry(
            call=call,
            step=step.step,
            effect=step.effect,
            outcome=step.outcome,
            failure=step.failure,
        )
    if isinstance(ran, _Finished):
        assert ran.call.result is not None  # parse_cassette refuses calls without one
        return ResultEntry(call=ran.call.number, result=ran.call.result)
    return CallEntry(call=ran.number, request=ran.request)


def _same_effect(live: Effect, step: RecordedStep) -> bool:
    """Whether ``live`` is the effect ``step`` recorded, field by field, with
    the same types (``1`` is not ``True``): the replay's fast path, matched
    by the field tuples the cassette's reader made."""
    recorded = step.fields
    if recorded is None or type(live) is not type(step.effect_value):
        return False
    values, kinds = effect_fields(live)
    return values == recorded[0] and kinds == recorded[1]


def _answer(step: RecordedStep) -> str:
    if step.failure is not None:
        failure = step.failure
        aborted = ", aborted" if failure.get("aborted") else ""
        return f"failure({failure.get('delivery')}: {failure.get('detail')!r}{aborted})"
    return render(step.outcome)


def _settings_of(cassette: Cassette) -> PortSettings:
    """The port settings the header describes (``CassetteError`` if impossible)."""
    header = cassette.header
    settings = header["settings"]
    owner = cassette.owner
    foreground = settings["foreground_timeout_seconds"]
    try:
        if header["tools"] == "command":
            definitions = command_tool_definitions(foreground, sandbox=cassette.sandbox_description)
        else:
            definitions = code_tool_definitions(
                foreground,
                agent_owner=isinstance(owner, AgentOwner),
                sandbox=cassette.sandbox_description,
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
        sandbox_description=cassette.sandbox_description,
        **settings,
    )
