"""The cassette format: one JSON object a line, written by the recorder and
read back by the replayer.

Four kinds of line, each an object with a ``kind``:

- ``header`` (the first line, exactly once): format name and ``version``,
  the sandrail version, the tool set, the owner, the session and the port
  settings that change decisions;
- ``call``: a request the port received, numbered from 1;
- ``step``: one effect of a call and what answered it, either ``outcome``
  (a value, ``null`` included) or ``failure`` (a typed
  :class:`~sandrail.core.EffectFailure`); ``step`` numbers run over the whole
  recording;
- ``result``: the call's final :class:`~sandrail.core.ToolResult`.

Effects, outcomes, owners and identities go through one cattrs converter with
tagged unions (the tag is the class name under ``"type"``); text stays text.

Strategy for redaction (C17): a cassette must hold no environment value and
no secret the caller named, yet replay must still match value by value. So
the same :class:`CallRedaction` is applied to what is written and, at replay,
to what the live core asks: environment values become the marker where they
are passed (request arguments, ``Start.env``); secrets (named ones, and env
values of :data:`MIN_SCRUBBED_LENGTH` characters or more) are cut out of every
other string (output that echoes them, artifacts). An env *name* that holds
a secret is written as a name of its own, ``REDACTED_NAME_1`` and on in the
order the env lists them (a name a command can still be given, so the
redacted request replays). Digests the core computes over secret-bearing
arguments are swapped for the digests of the redacted request: a replay of
the redacted request computes exactly those, and a digest of a weak secret
is itself a leak. So no byte written is a function of a secret, wherever in
the request it stood.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, get_args

import attrs
from cattrs import Converter
from cattrs.errors import BaseValidationError
from cattrs.strategies import configure_tagged_union

from sandrail.core import (
    MIN_REDACTED_LENGTH,
    REDACTED,
    AgentIdentity,
    CanonicalJSONError,
    Delivery,
    Effect,
    EffectFailure,
    NativeIdentity,
    Outcome,
    OutcomeValue,
    Owner,
    OwnerIdentity,
    PortSettings,
    ToolCall,
    ToolDefinition,
    ToolRequest,
    ToolResult,
    definitions_equal,
    launch_digest,
    recorded_digest,
    request_digest,
    request_parts,
)

from ._cassette_limits import MAX_CASSETTE_BYTES, LimitError, outcome_problem, read_bounded
from ._fast_decode import FastDecoder

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

FORMAT = "sandrail-cassette"
VERSION = 1
MARKER = REDACTED
MIN_SCRUBBED_LENGTH = MIN_REDACTED_LENGTH
"""Env values this long or longer are also cut out of every other string;
shorter ones (``1``, ``true``) would match text by chance. Named secrets are
cut out whatever their length."""

ToolSet = Literal["command", "code"]
_CONTRACT_TOOLS: Mapping[str, ToolSet] = {
    "sandrail.command-tools/v1": "command",
    "sandrail.code-tools/v1": "code",
}


class CassetteError(ValueError):
    """A cassette that cannot be read: truncated, corrupt, or from a future
    format version. The message names the file and line."""


# ---------------------------------------------------------------------------
# The converter


def _strict(kind: type, name: str) -> Any:
    def structure(value: Any, _: type) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {name}, got a boolean")
        if kind is float and isinstance(value, int):
            return float(value)
        if not isinstance(value, kind):
            raise TypeError(f"expected {name}, got {type(value).__name__}")
        return value

    return structure


def _make_converter() -> Converter:
    converter = Converter(forbid_extra_keys=True)
    converter.register_structure_hook(str, _strict(str, "a string"))
    converter.register_structure_hook(int, _strict(int, "an integer"))
    converter.register_structure_hook(float, _strict(float, "a number"))
    converter.register_structure_hook(bool, _strict(bool, "a boolean"))
    for union in (Effect, OutcomeValue, Owner, OwnerIdentity):
        configure_tagged_union(union, converter, tag_name="type")
    return converter


_converter = _make_converter()


def _tag_first(data: dict[str, Any]) -> dict[str, Any]:
    return {"type": data.pop("type"), **data}


def encode_effect(effect: Effect) -> dict[str, Any]:
    """An effect as JSON data: ``{"type": "Start", ...fields}``."""
    return _tag_first(_converter.unstructure(effect, Effect))


def decode_effect(data: Any) -> Effect:
    """The effect :func:`encode_effect` wrote; ``ValueError`` for anything else."""
    return _decode(data, Effect, "effect")  # type: ignore[no-any-return]


def encode_outcome(outcome: Outcome) -> dict[str, Any] | None:
    """An outcome as JSON data; ``None`` stays ``None``."""
    if outcome is None:
        return None
    return _tag_first(_converter.unstructure(outcome, OutcomeValue))


def decode_outcome(data: Any) -> Outcome:
    """The outcome :func:`encode_outcome` wrote; ``ValueError`` for anything else."""
    if data is None:
        return None
    return _decode(data, OutcomeValue, "outcome")  # type: ignore[no-any-return]


def encode_failure(failure: EffectFailure) -> dict[str, Any]:
    """An :class:`~sandrail.core.EffectFailure` as a recording keeps it
    (``refused`` only when set, so recordings of every other failure read as
    they always did)."""
    encoded: dict[str, Any] = {
        "delivery": failure.delivery.value,
        "detail": failure.detail,
        "aborted": failure.aborted,
    }
    if failure.refused:
        encoded["refused"] = True
    return encoded


def decode_failure(data: Any) -> EffectFailure:
    """The failure :func:`encode_failure` wrote; ``ValueError`` for anything else."""
    if not isinstance(data, dict) or not (
        {"delivery", "detail", "aborted"}
        <= set(data)
        <= {"delivery", "detail", "aborted", "refused"}
    ):
        raise ValueError("a failure needs exactly: delivery, detail, aborted (and refused, if set)")
    delivery, detail, aborted = data["delivery"], data["detail"], data["aborted"]
    refused = data.get("refused", False)
    if delivery not in {d.value for d in Delivery}:
        raise ValueError(f"unknown delivery {delivery!r}")
    if not isinstance(detail, str) or not isinstance(aborted, bool):
        raise ValueError("failure detail must be a string and aborted a boolean")
    if refused is not True and "refused" in data:
        raise ValueError("failure refused, when kept, must be true")
    return EffectFailure(Delivery(delivery), detail, aborted=aborted, refused=refused)


_SCALARS = frozenset((str, int, float, bool, type(None)))
_DECODED: dict[tuple[object, ...], Any] = {}
_DECODED_LIMIT = 65_536


def _decode(data: Any, union: Any, what: str) -> Any:
    if not isinstance(data, dict):
        raise ValueError(f"the {what} is not a JSON object")
    # Strategy: a session repeats many flat effects and outcomes exactly (each
    # guard's CheckAuthority and its all-well report, Allow, the sandbox), and
    # decoded values are frozen, so one decoding serves them all. The key
    # keeps each value's type: ``true`` must never stand for ``1``.
    key: tuple[object, ...] | None = (what,)
    for name, value in data.items():
        kind = type(value)
        if kind not in _SCALARS:
            key = None
            break
        key += (name, kind, value)  # type: ignore[operator]
    if key is not None:
        found = _DECODED.get(key)
        if found is not None:
            return found
    decoded = _structure(data, union, what)
    if key is not None and decoded is not None and len(_DECODED) < _DECODED_LIMIT:
        _DECODED[key] = decoded
    return decoded


_FAST: Final = {
    "effect": FastDecoder(get_args(Effect)),
    "outcome": FastDecoder(get_args(OutcomeValue)),
}
"""The common shapes, decoded without the converter (:mod:`._fast_decode`)."""


def _structure(data: dict[str, Any], union: Any, what: str) -> Any:
    fast = _FAST.get(what)
    if fast is not None:
        decoded = fast.decode(data)
        if decoded is not None:
            return decoded
    tag = data.get("type")
    try:
        return _converter.structure(data, union)
    except KeyError:
        raise ValueError(f"unknown {what} type {tag!r}") from None
    except (BaseValidationError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed {what} {tag!r}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, BaseValidationError) and exc.exceptions:
        return _reason(exc.exceptions[0])
    return str(exc) or type(exc).__name__


# ---------------------------------------------------------------------------
# JSON lines


_ENCODERS: Final = {
    (ensure_ascii, allow_nan): json.JSONEncoder(ensure_ascii=ensure_ascii, allow_nan=allow_nan)
    for ensure_ascii in (False, True)
    for allow_nan in (False, True)
}
"""One encoder for each way a line is written, made once: ``json.dumps``
makes a new one on every call that passes an option."""


def _dumps(value: Any, *, ensure_ascii: bool = True, allow_nan: bool = True) -> str:
    """``json.dumps(value, ensure_ascii=..., allow_nan=...)``, with an encoder
    made once (it is on the fast path)."""
    return _ENCODERS[(ensure_ascii, allow_nan)].encode(value)


def normalize(data: Any) -> Any:
    """``data`` as it reads back from a cassette line (tuples become lists...)."""
    return json.loads(_dumps(data))


def dump_line(data: Mapping[str, Any]) -> str:
    """One cassette line (no newline): readable UTF-8 text where possible.

    Text that is not valid Unicode (lone surrogates) is written with JSON
    escapes instead, so every line stays valid UTF-8 and reads back exactly.
    NaN and infinities are refused (``ValueError``): JSON has no such numbers.
    """
    line = _dumps(data, ensure_ascii=False, allow_nan=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = _dumps(data, ensure_ascii=True, allow_nan=False)
    return line


def header_line(settings: PortSettings, sandrail_version: str) -> dict[str, Any]:
    """The header a recording of a port with ``settings`` starts with."""
    tools = _CONTRACT_TOOLS.get(settings.contract)
    if tools is None:
        raise ValueError(f"unknown tool contract {settings.contract!r}")
    return {
        "kind": "header",
        "format": FORMAT,
        "version": VERSION,
        "sandrail_version": sandrail_version,
        "tools": tools,
        "contract": settings.contract,
        "session_id": settings.session_id,
        "owner": _tag_first(_converter.unstructure(settings.owner, Owner)),
        "settings": {
            "max_output_bytes": settings.max_output_bytes,
            "foreground_timeout_seconds": settings.foreground_timeout_seconds,
            "background_timeout_seconds": settings.background_timeout_seconds,
            "allow_internet_access": settings.allow_internet_access,
            "artifacts_enabled": settings.artifacts_enabled,
        },
        "redaction": MARKER,
    }


def encode_request(request: ToolRequest, settings: PortSettings | None) -> dict[str, Any]:
    """A request as JSON data: its parts (:class:`~sandrail.core.RequestParts`,
    what makes it the request it is), and the cancel token only as
    ``cancellable``. The definition is written as ``"definition_from_port":
    true`` when it is the port's own (the common case), else in full."""
    parts = request_parts(request)
    data: dict[str, Any] = {
        "call": {
            "name": _jsonable(parts.name),
            "call_id": _jsonable(parts.call_id),
            "arguments": _jsonable(parts.arguments),
        },
        "operation_key": _jsonable(parts.operation_key),
        "session_id": _jsonable(parts.session_id),
    }
    ours = None if settings is None else settings.definition(str(data["call"]["name"]))
    if ours is not None and definitions_equal(parts.definition, ours):
        data["definition_from_port"] = True
    elif isinstance(parts.definition, ToolDefinition):
        data["definition"] = parts.definition.to_dict()
    else:
        data["definition"] = _jsonable(parts.definition)
    identity = parts.identity
    if isinstance(identity, NativeIdentity | AgentIdentity):
        data["identity"] = _tag_first(_converter.unstructure(identity, OwnerIdentity))
    else:
        data["identity"] = _jsonable(identity)
    data["cancellable"] = request.cancel is not None
    data["result_governance"] = _jsonable(parts.result_governance)
    if _json_data(data):
        return data  # it reads back as it is: no round trip to make
    return normalize(data)  # type: ignore[no-any-return]


def _json_data(data: Any) -> bool:
    """Whether ``data`` reads back from JSON text exactly as it is: dicts
    with string keys, lists, strings, booleans, ``None``, and numbers JSON
    writes as they are (not NaN nor the infinities, nor huge integers)."""
    kind = type(data)
    if kind is dict:
        return all(type(key) is str and _json_data(value) for key, value in data.items())
    if kind is list:
        return all(_json_data(item) for item in data)
    if kind is float:
        return bool(data - data == 0.0)  # neither NaN nor infinite
    if kind is int:
        return bool(-_BIG < data < _BIG)  # json refuses an int of thousands of digits
    return kind in _SCALARS


_BIG: Final = 1 << 64


def _jsonable(value: Any) -> Any:
    """``value`` if it has a JSON form, else a marker naming its type (the
    core refuses such requests anyway; the marker keeps the line writable)."""
    if value is None or type(value) in _ALWAYS_JSON:
        return value  # every value of these types has one
    try:
        _dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return f"<unserializable {type(value).__name__}>"
    return value


_ALWAYS_JSON: Final = frozenset((str, bool))  # not int: json refuses a 5,000-digit one


def decode_request(data: Mapping[str, Any], definitions: Iterable[ToolDefinition]) -> ToolRequest:
    """Rebuild a recorded request; ``definitions`` are the replaying port's.

    The cancel token, when there was one, is a fresh one that never fires:
    every abort the recording saw comes back through its outcomes.
    """
    from sandrail.interpreters._cancel import CancelToken

    call = data["call"]
    definition: Any = data.get("definition")
    if data.get("definition_from_port"):
        definition = next((d for d in definitions if d.name == call["name"]), None)
    identity: Any = data["identity"]
    if isinstance(identity, dict) and "type" in identity:
        identity = _decode(identity, OwnerIdentity, "identity")
    return ToolRequest(
        call=ToolCall(name=call["name"], call_id=call["call_id"], arguments=call["arguments"]),
        operation_key=data["operation_key"],
        session_id=data["session_id"],
        definition=definition,
        identity=identity,
        cancel=CancelToken() if data["cancellable"] else None,
        result_governance=data["result_governance"],
    )


def decode_owner(data: Any) -> Owner:
    return _decode(data, Owner, "owner")  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------
# Redaction


@attrs.frozen
class CallRedaction:
    """What to cut out of everything one call writes (see the module doc)."""

    secrets: tuple[str, ...]
    """Substrings replaced by :data:`MARKER`, longest first."""
    digests: Mapping[str, str]
    """Digests of the real request mapped to those of the redacted one."""
    request: ToolRequest
    """The request with its secrets redacted: what a replay runs."""
    names: Mapping[str, str] = attrs.field(factory=dict)
    """Env names that hold a secret, mapped to the names written instead."""

    @classmethod
    def of(
        cls, request: ToolRequest, named: Iterable[str], masked: frozenset[str] = frozenset()
    ) -> CallRedaction:
        """The redaction of ``request``: ``named`` values and env values cut
        out, and ``masked`` (the values the port masks, which its core's
        digests are computed without) too."""
        found = {secret for secret in named if secret} | set(masked)
        arguments = getattr(request.call, "arguments", None)
        env = arguments.get("env") if isinstance(arguments, Mapping) else None
        if isinstance(env, Mapping):
            found.update(
                value
                for value in env.values()
                if isinstance(value, str) and len(value) >= MIN_SCRUBBED_LENGTH
            )
        found.discard(MARKER)
        names = _env_names(env, found) if isinstance(env, Mapping) else {}
        bare = cls(tuple(sorted(found, key=lambda s: (-len(s), s))), {}, request, names)
        if not isinstance(arguments, Mapping) or (not found and not isinstance(env, Mapping)):
            return bare
        clean_arguments = bare.scrub(dict(arguments), env_slot=False)
        if isinstance(env, Mapping):
            clean_arguments["env"] = _redact_env(env, names)
        redacted = attrs.evolve(request, call=attrs.evolve(request.call, arguments=clean_arguments))
        digests: dict[str, str] = {}
        try:
            digests[request_digest(request)] = request_digest(redacted)
            tool = request.call.name
            digests[launch_digest(tool, arguments)] = launch_digest(tool, clean_arguments)
            # The ownership record's digest has no env value, but may hold a
            # named secret of the command.
            digests[recorded_digest(tool, arguments, masked)] = recorded_digest(
                tool, clean_arguments
            )
        except (CanonicalJSONError, AttributeError, TypeError, ValueError):
            pass  # no JSON form: the core refuses the request before any digest matters
        digests = {k: v for k, v in digests.items() if k != v}
        return cls(bare.secrets, digests, redacted, names)

    @property
    def bare(self) -> bool:
        """Nothing to redact: no secret to cut, no digest to swap."""
        return not self.secrets and not self.digests

    def scrub(self, data: Any, *, env_slot: bool) -> Any:
        """``data`` (JSON data) with digests swapped and secrets cut out;
        with ``env_slot``, ``data`` is an effect whose ``env`` values all go.
        Tuples become lists."""
        if env_slot and isinstance(data, dict) and isinstance(data.get("env"), dict):
            data = {**data, "env": _redact_env(data["env"], self.names)}
        if not self.secrets and not self.digests and _plain_json(data):
            return data  # nothing to swap or cut: the data as it is
        return self._scrub(data)

    def _scrub(self, data: Any) -> Any:
        if isinstance(data, str):
            data = self.digests.get(data, data)
            for secret in self.secrets:
                data = data.replace(secret, MARKER)
                # Inside JSON text (an artifact's content) the secret is escaped.
                escaped = json.dumps(secret, ensure_ascii=False)[1:-1]
                if escaped != secret:
                    data = data.replace(escaped, MARKER)
            return data
        if isinstance(data, dict):
            return {self._scrub(key): self._scrub(value) for key, value in data.items()}
        if isinstance(data, list | tuple):
            return [self._scrub(item) for item in data]
        return data


def _plain_json(data: Any) -> bool:
    """Whether ``data`` holds only dicts, lists and scalars (no tuples)."""
    kind = type(data)
    if kind is dict:
        return all(_plain_json(value) for value in data.values())
    if kind is list:
        return all(_plain_json(item) for item in data)
    return kind in _SCALARS


def _redact_env(env: Mapping[Any, Any], names: Mapping[str, str]) -> dict[Any, Any]:
    """``env`` as written: every value the marker, a name that holds a
    secret replaced (``names``), in the order of the names written (the
    order of the real ones would tell where a secret sorts)."""
    written = [names.get(name, name) for name in env]
    return dict.fromkeys(
        sorted(written, key=lambda name: (not isinstance(name, str), str(name))), MARKER
    )


NAME_PREFIX: Final = "REDACTED_NAME_"
"""What an env name that holds a secret is written as, numbered from 1."""


def _env_names(env: Mapping[Any, Any], secrets: Iterable[str]) -> dict[str, str]:
    """The names of ``env`` that hold one of ``secrets``, each mapped to a
    name of its own (:data:`NAME_PREFIX` and a number, in the order ``env``
    lists them, skipping a name ``env`` already has): a function of where
    secrets stand, never of what they are."""
    values = tuple(secrets)
    holding = [
        name for name in env if isinstance(name, str) and any(value in name for value in values)
    ]
    if not holding:
        return {}
    taken = set(env) - set(holding)
    names: dict[str, str] = {}
    number = 0
    for name in holding:
        number += 1
        while f"{NAME_PREFIX}{number}" in taken:
            number += 1
        names[name] = f"{NAME_PREFIX}{number}"
    return names


# ---------------------------------------------------------------------------
# Reading


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
            raise fail(
                records[-1][0],
                f"the recording ends before the result of {call.describe()}, whose request is "
                f"on line {call.line}: the file is truncated",
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
    elif lines and lines[-1] != b"":
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
                calls[call_number] = RecordedCall(
                    number=call_number, line=number, request=record["request"], request_text=text
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
    settings = record.get("settings")
    if not isinstance(settings, dict) or set(settings) != set(_SETTINGS_KEYS):
        raise fail(f"settings must hold exactly: {', '.join(sorted(_SETTINGS_KEYS))}")
    for key, kind in _SETTINGS_KEYS.items():
        value = settings[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise fail(f"setting {key} must be {kind.__name__}, got {value!r}")
    return record


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
