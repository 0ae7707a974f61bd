"""The cassette's JSON forms: the format's name and version, one cattrs
converter for what a recording holds, and the JSON lines it is written in.

Effects, outcomes, owners and identities go through one cattrs converter with
tagged unions (the tag is the class name under ``"type"``); text stays text.

Its own module because both directions stand on it: the recorder writes
with it, the reader (:mod:`._cassette`) decodes with it, and redaction
(:mod:`._cassette_redaction`) works on the JSON data it makes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, get_args

from cattrs import Converter
from cattrs.errors import BaseValidationError
from cattrs.strategies import configure_tagged_union

from sandrail.core import (
    MIN_REDACTED_LENGTH,
    REDACTED,
    AgentIdentity,
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
    definitions_equal,
    omission_marker,
    request_parts,
)

from ._fast_decode import FastDecoder

__all__ = [
    "FIRST_RESULT_FORMAT",
    "FORMAT",
    "MARKER",
    "MIN_SCRUBBED_LENGTH",
    "VERSION",
    "ToolSet",
    "decode_effect",
    "decode_failure",
    "decode_outcome",
    "decode_owner",
    "decode_request",
    "dump_line",
    "encode_effect",
    "encode_failure",
    "encode_outcome",
    "encode_request",
    "header_line",
    "normalize",
    "result_format",
]

FORMAT = "sandrail-cassette"
VERSION = 1
MARKER = REDACTED
MIN_SCRUBBED_LENGTH = MIN_REDACTED_LENGTH
"""Env values this long or longer are also cut out of every other string;
shorter ones (``1``, ``true``) would match text by chance. Named secrets are
cut out whatever their length."""

_SAMPLE_OMITTED: Final = 12345
"""The byte count the header's sample of the omission marker counts."""

FIRST_RESULT_FORMAT: Final[Mapping[str, str]] = {
    "omission_marker": f"\n[... {_SAMPLE_OMITTED} bytes omitted ...]\n"
}
"""The result format of a cassette whose header does not say it: the one
sandrail wrote before headers said it. Never edit it, not even when the
marker changes: it is what every such cassette already holds."""


def result_format() -> dict[str, str]:
    """What this sandrail's results look like where a recorded result
    depends on more than the effects' answers: the marker standing for text
    left out of a cut field (a sample of it). A replay compares each
    recorded result whole, so a cassette recorded with another format
    cannot replay here (:func:`~sandrail.interpreters._cassette.check_replayable`)."""
    return {"omission_marker": omission_marker(_SAMPLE_OMITTED)}


ToolSet = Literal["command", "code"]
_CONTRACT_TOOLS: Mapping[str, ToolSet] = {
    "sandrail.command-tools/v1": "command",
    "sandrail.code-tools/v1": "code",
}


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
    if isinstance(data, dict) and data.get("type") in _NAMES_ITS_BACKEND and "backend" not in data:
        # Written before outcomes named their backend, when every one of
        # these meant ``e2b`` (the field's old default): read it so.
        data = {**data, "backend": "e2b"}
    return _decode(data, OutcomeValue, "outcome")  # type: ignore[no-any-return]


_NAMES_ITS_BACKEND: Final = frozenset({"SandboxReady", "SandboxState"})
"""The outcomes whose ``backend`` a cassette of this version may omit."""


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
        "sandbox_description": settings.sandbox_description,
        "redaction": MARKER,
        "result_format": result_format(),
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
