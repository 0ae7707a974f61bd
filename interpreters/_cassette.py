"""The cassette format: one JSON object a line, written by the recorder and
read back by the replayer.

Four kinds of line, each an object with a ``kind``:

- ``header`` (the first line, exactly once): format name and ``version``,
  the sandrail version, the tool set, the owner, the session and the port
  settings that change decisions;
- ``call``: a request the port received, numbered from 1, with
  ``identity_redacted: true`` when a secret was cut out of its identity
  (the core refused it for that; a replay of the file takes that refusal
  as recorded, since the file lacks what it was refused for);
- ``step``: one effect of a call and what answered it, either ``outcome``
  (a value, ``null`` included) or ``failure`` (a typed
  :class:`~sandrail.core.EffectFailure`); ``step`` numbers run over the whole
  recording;
- ``result``: the call's final :class:`~sandrail.core.ToolResult`.

The format's parts have modules of their own: its JSON forms (constants,
converter, lines) are :mod:`._cassette_codec`, what a cassette leaves out is
:mod:`._cassette_redaction` (C17). This module reads a cassette back and
re-exports their names, so the recorder, the replayer and :mod:`.replay`
import the format from one place.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Callable, Mapping
from typing import Any, Final, get_args

import attrs

from sandrail.core import (
    DEFAULT_SANDBOX_DESCRIPTION,
    Effect,
    Outcome,
    Owner,
    ToolResult,
    check_sandbox_description,
)

from ._cassette_codec import (
    _CONTRACT_TOOLS,
    FIRST_RESULT_FORMAT,
    FORMAT,
    MARKER,
    MIN_SCRUBBED_LENGTH,
    VERSION,
    ToolSet,
    decode_effect,
    decode_failure,
    decode_outcome,
    decode_owner,
    decode_request,
    dump_line,
    encode_effect,
    encode_failure,
    encode_outcome,
    encode_request,
    header_line,
    normalize,
    result_format,
)
from ._cassette_limits import MAX_CASSETTE_BYTES, LimitError, outcome_problem, read_bounded
from ._cassette_redaction import CallRedaction

__all__ = [
    "FORMAT",
    "MARKER",
    "MAX_CASSETTE_BYTES",
    "MIN_SCRUBBED_LENGTH",
    "VERSION",
    "CallRedaction",
    "Cassette",
    "CassetteError",
    "RecordedCall",
    "RecordedStep",
    "check_replayable",
    "decode_effect",
    "decode_failure",
    "decode_outcome",
    "decode_owner",
    "decode_request",
    "dump_line",
    "effect_fields",
    "encode_effect",
    "encode_failure",
    "encode_outcome",
    "encode_request",
    "header_line",
    "load_cassette",
    "normalize",
    "parse_cassette",
    "result_data",
]


class CassetteError(ValueError):
    """A cassette that cannot be read: truncated, corrupt, or from a future
    format version. The message names the file and line."""


@attrs.frozen(kw_only=True)
class RecordedStep:
    """One effect and its answer, as recorded."""

    step: int
    line: int
    effect: dict[str, Any]
    outcome: dict[str, Any] | None
    failure: dict[str, Any] | None
    effect_value: Effect | None = attrs.field(default=None, eq=False, repr=False)
    """``effect`` decoded (when the reader decoded it)."""
    outcome_value: Outcome = attrs.field(default=None, eq=False, repr=False)
    """``outcome`` decoded (when the reader decoded it); outcomes are frozen
    values, so one object answers every replay."""
    fields: tuple[tuple[Any, ...], tuple[type, ...]] | None = attrs.field(
        default=None, eq=False, repr=False
    )
    """The decoded effect's field values and their types (:func:`effect_fields`),
    what a live effect is matched by."""

    def answer(self) -> Outcome:
        """The recorded outcome; raises the recorded :class:`EffectFailure`."""
        if self.failure is not None:
            raise decode_failure(self.failure)
        if self.outcome_value is not None or self.outcome is None:
            return self.outcome_value
        return decode_outcome(self.outcome)


@attrs.define(kw_only=True)
class RecordedCall:
    """One request with its steps and result, as recorded."""

    number: int
    line: int
    request: dict[str, Any]
    steps: list[RecordedStep] = attrs.field(factory=list)
    result: dict[str, Any] | None = None
    request_text: str = attrs.field(default="", eq=False, repr=False)
    """The request's line as written (a replay whose live line is the same
    text has matched it, without comparing field by field)."""
    result_text: str = attrs.field(default="", eq=False, repr=False)
    """The result's line as written."""
    identity_redacted: bool = False
    """A secret was cut out of the call's identity (its operation key or
    call id): the recorded core refused the call for it, and a replay of
    the file takes that refusal as recorded
    (:meth:`~sandrail.interpreters._replayer.Replayer.take_refused`)."""

    def describe(self) -> str:
        call = self.request.get("call", {})
        return (
            f"call {self.number}: {call.get('name')!s} call_id={call.get('call_id')!r} "
            f"operation_key={self.request.get('operation_key')!r}"
        )


@attrs.frozen(kw_only=True)
class Cassette:
    """A parsed recording. Build it with :func:`load_cassette`."""

    source: str
    header: Mapping[str, Any]
    calls: tuple[RecordedCall, ...]
    complete: bool = True
    """Whether the recording ends with the line its recorder writes on close.
    Without it, the file may have been cut short between two calls."""

    @property
    def tools(self) -> ToolSet:
        """The tool group the recorded port offered."""
        return self.header["tools"]  # type: ignore[no-any-return]

    @property
    def owner(self) -> Owner:
        """The recorded port's owner."""
        return decode_owner(self.header["owner"])

    @property
    def settings(self) -> Mapping[str, Any]:
        """The recorded port's settings, as plain data."""
        return self.header["settings"]  # type: ignore[no-any-return]

    @property
    def sandbox_description(self) -> str:
        """The recorded backend's words for its sandbox, which the recorded
        port's tool descriptions end with (a recording without them: the
        words of a backend that states none)."""
        return self.header.get(  # type: ignore[no-any-return]
            "sandbox_description", DEFAULT_SANDBOX_DESCRIPTION
        )

    @property
    def result_format(self) -> Mapping[str, str]:
        """What the recorded sandrail's results looked like where a replay
        depends on it (:func:`~._cassette_codec.result_format`)."""
        return self.header.get(  # type: ignore[no-any-return]
            "result_format", FIRST_RESULT_FORMAT
        )

    @property
    def step_count(self) -> int:
        """How many effects the recording holds, over all its calls."""
        return sum(len(call.steps) for call in self.calls)


def load_cassette(path: str | os.PathLike[str], *, max_bytes: int = MAX_CASSETTE_BYTES) -> Cassette:
    """Read and check a cassette file; :class:`CassetteError` names the line
    of the first problem (unreadable file, bad JSON, truncation, a future
    version, a malformed effect, or an outcome no sandbox can give). A file
    that is not a regular file, or is bigger than ``max_bytes``, is refused
    before it is read (:mod:`._cassette_limits`)."""
    source = str(path)
    try:
        data = read_bounded(path, max_bytes)
    except LimitError as exc:
        raise CassetteError(f"{source}: {exc}") from None
    except OSError as exc:
        raise CassetteError(f"{source}: cannot read the file: {exc.strerror or exc}") from None
    return parse_cassette(data, source=source)


_SETTINGS_KEYS = {
    "max_output_bytes": int,
    "foreground_timeout_seconds": int,
    "background_timeout_seconds": int,
    "allow_internet_access": bool,
    "artifacts_enabled": bool,
}


def parse_cassette(data: bytes, *, source: str = "<cassette>") -> Cassette:
    """Parse cassette bytes (see :func:`load_cassette`)."""

    def fail(number: int, message: str) -> CassetteError:
        return CassetteError(f"{source}:{number}: {message}")

    records = _records(data, source, fail)
    header = _check_header(records[0][1], lambda message: fail(1, message))
    calls, complete = _calls(records[1:], fail)
    for call in calls.values():
        if call.result is None:
            why = (
                "it ended without one (interrupted, or its result could not be written)"
                if complete
                else "the file is truncated"
            )
            raise fail(
                records[-1][0],
                f"the recording ends before the result of {call.describe()}, whose request is "
                f"on line {call.line}: {why}",
            )
    return Cassette(source=source, header=header, calls=tuple(calls.values()), complete=complete)


_Record = tuple[int, dict[str, Any], str]
"""A line's number, its record, and its text."""


def _records(data: bytes, source: str, fail: Callable[[int, str], CassetteError]) -> list[_Record]:
    """Every line of ``data`` read as a record (a JSON object with a
    ``kind``); ``CassetteError`` naming the first line that is not one."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines and lines[-1] != b"" and data.startswith(b"{"):
        # (A file that does not begin as a cassette does is named by its
        # first line below, not called truncated.)
        raise CassetteError(
            f"{source}:{len(lines)}: the last line has no newline: the file is truncated"
        )
    if not lines:
        raise CassetteError(f"{source}: the file is empty: not a sandrail cassette")
    # Strategy (speed): the file is decoded as one text (0x0A never occurs
    # inside a UTF-8 sequence, so its lines are the byte lines decoded), and
    # each line goes straight to the decoder. Only a line it does not read
    # whole (surrounding spaces, bad JSON) or a file that is not UTF-8 takes
    # the long way, which names the line.
    try:
        texts: list[str] | None = data.decode("utf-8").split("\n")[: len(lines)]
    except UnicodeDecodeError:
        texts = None
    records: list[_Record] = []
    for number, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8") if texts is None else texts[number - 1]
            record = _read_line(text)
        except UnicodeDecodeError:
            raise fail(number, "not UTF-8 text: the file is corrupt") from None
        except json.JSONDecodeError as exc:
            raise fail(number, f"not valid JSON ({exc.msg}): the file is corrupt") from None
        if type(record) is not dict or not isinstance(record.get("kind"), str):
            raise fail(number, 'not a cassette record (a JSON object with a "kind")')
        records.append((number, record, text))
    return records


def _calls(
    records: list[_Record], fail: Callable[[int, str], CassetteError]
) -> tuple[dict[int, RecordedCall], bool]:
    """The calls the records after the header hold, in order, and whether
    the end line closed them; ``CassetteError`` for records out of order."""
    calls: dict[int, RecordedCall] = {}
    last_step = 0
    complete = False
    for number, record, text in records:
        kind = record["kind"]
        if complete:
            raise fail(number, "a line after the end line")
        if kind == "end":
            if record.get("calls") != len(calls):
                raise fail(
                    number,
                    f"the end line counts {record.get('calls')!r} calls, the file holds "
                    f"{len(calls)}: the file is corrupt",
                )
            complete = True
            continue
        try:
            call_number = record["call"]
            if kind == "call":
                if call_number != len(calls) + 1:
                    raise ValueError(f"expected call {len(calls) + 1}, found call {call_number}")
                _check_request(record["request"])
                redacted = record.get("identity_redacted", False)
                if redacted is not True and redacted is not False:
                    raise ValueError(f"identity_redacted must be true or false, got {redacted!r}")
                calls[call_number] = RecordedCall(
                    number=call_number,
                    line=number,
                    request=record["request"],
                    request_text=text,
                    identity_redacted=redacted,
                )
                continue
            call = calls.get(call_number) if isinstance(call_number, int) else None
            if call is None:
                raise ValueError(f"call {call_number!r} has no request line before it")
            if call.result is not None:
                raise ValueError(f"call {call_number} already has its result")
            if kind == "step":
                if record["step"] != last_step + 1:
                    raise ValueError(f"expected step {last_step + 1}, found {record['step']!r}")
                last_step += 1
                call.steps.append(_check_step(record, number))
            elif kind == "result":
                if not isinstance(record["result"], dict):
                    raise ValueError("the result is not a JSON object")
                call.result = record["result"]
                call.result_text = text
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except KeyError as exc:
            raise fail(number, f"{kind} record without {exc.args[0]!r}") from None
        except ValueError as exc:
            raise fail(number, str(exc)) from None
    return calls, complete


_DECODER: Final = json.JSONDecoder()


def _read_line(text: str) -> Any:
    """``json.loads(text)``, raising what it raises, by the shortest way:
    the decoder made once, and no whitespace skipped (a line has none)."""
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        return json.loads(text)  # the error it names
    return value if end == len(text) else json.loads(text)


def _check_header(record: dict[str, Any], fail: Any) -> dict[str, Any]:
    if record.get("kind") != "header" or record.get("format") != FORMAT:
        raise fail(f"not a sandrail cassette (the first line is no {FORMAT} header)")
    version = record.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise fail(f"invalid format version {version!r}")
    if version > VERSION:
        raise fail(
            f"cassette format version {version} is newer than this sandrail reads "
            f"(version {VERSION}); upgrade sandrail to replay it"
        )
    if record.get("tools") not in ("command", "code"):
        raise fail(f"unknown tool set {record.get('tools')!r}")
    if _CONTRACT_TOOLS.get(record.get("contract")) != record.get("tools"):  # type: ignore[arg-type]
        raise fail(
            f"unknown tool contract {record.get('contract')!r} for tool set {record.get('tools')!r}"
        )
    if not isinstance(record.get("session_id"), str):
        raise fail("the header has no session_id")
    try:
        decode_owner(record.get("owner"))
    except ValueError as exc:
        raise fail(f"bad owner: {exc}") from None
    if "sandbox_description" in record:
        try:
            check_sandbox_description(record["sandbox_description"])
        except (TypeError, ValueError) as exc:
            raise fail(f"bad sandbox_description: {exc}") from None
    shape = record.get("result_format", FIRST_RESULT_FORMAT)
    if not isinstance(shape, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in shape.items()
    ):
        raise fail("result_format must be an object of strings")
    settings = record.get("settings")
    if not isinstance(settings, dict) or set(settings) != set(_SETTINGS_KEYS):
        raise fail(f"settings must hold exactly: {', '.join(sorted(_SETTINGS_KEYS))}")
    for key, kind in _SETTINGS_KEYS.items():
        value = settings[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise fail(f"setting {key} must be {kind.__name__}, got {value!r}")
    return record


def check_replayable(cassette: Cassette) -> None:
    """``CassetteError`` unless this sandrail's results look like the
    recorded ones (:func:`~._cassette_codec.result_format`): each recorded
    result is compared whole, so a recording made with another omission
    marker would diverge at its first cut result, where the two look alike
    in the message. The rule: a cassette replays only under the result
    format it was recorded with; record it again under a new one."""
    recorded, current = cassette.result_format, result_format()
    if recorded == current:
        return
    part = next(
        key for key in sorted({*recorded, *current}) if recorded.get(key) != current.get(key)
    )
    raise CassetteError(
        f"{cassette.source}:1: recorded by sandrail "
        f"{cassette.header.get('sandrail_version')!s} with another result format (its "
        f"{part.replace('_', ' ')} is {recorded.get(part)!r}, this sandrail's is "
        f"{current.get(part)!r}): its results cannot replay here; record it again"
    )


def _check_request(request: Any) -> None:
    if not isinstance(request, dict):
        raise ValueError("the request is not a JSON object")
    call = request.get("call")
    if not isinstance(call, dict) or not {"name", "call_id", "arguments"} <= set(call):
        raise ValueError("the request has no call with name, call_id and arguments")
    for key in ("operation_key", "session_id", "identity", "cancellable", "result_governance"):
        if key not in request:
            raise ValueError(f"the request has no {key!r}")
    if "definition" not in request and request.get("definition_from_port") is not True:
        raise ValueError("the request has no definition")


def _check_step(record: dict[str, Any], line: int) -> RecordedStep:
    effect = decode_effect(record["effect"])
    has_outcome, has_failure = "outcome" in record, "failure" in record
    if has_outcome == has_failure:
        raise ValueError('a step needs exactly one of "outcome" and "failure"')
    outcome: Outcome = None
    if has_failure:
        decode_failure(record["failure"])
    else:
        outcome = decode_outcome(record["outcome"])
        problem = outcome_problem(outcome)
        if problem is not None:
            raise ValueError(f"malformed outcome {record['outcome'].get('type')!r}: {problem}")
    return RecordedStep(
        step=record["step"],
        line=line,
        effect=record["effect"],
        outcome=record.get("outcome"),
        failure=record.get("failure"),
        effect_value=effect,
        outcome_value=outcome,
        fields=effect_fields(effect),
    )


def _getter(kind: type) -> Callable[[Any], tuple[Any, ...]]:
    """A function from a ``kind`` to the tuple of its field values."""
    names = [field.name for field in attrs.fields(kind)]
    if len(names) == 1:
        name = names[0]
        return lambda value: (getattr(value, name),)
    return operator.attrgetter(*names)


_FIELD_GETTERS: Final = {kind: _getter(kind) for kind in get_args(Effect)}


def effect_fields(effect: Effect) -> tuple[tuple[Any, ...], tuple[type, ...]]:
    """An effect's field values, in order, and their types: two effects of
    one class are the same, ``1`` never standing for ``True``, when both
    tuples are equal."""
    values = _FIELD_GETTERS[type(effect)](effect)
    return values, tuple(map(type, values))


def result_data(result: ToolResult) -> dict[str, Any]:
    """A result as JSON data, as a cassette holds it."""
    return normalize(result.to_dict())  # type: ignore[no-any-return]
