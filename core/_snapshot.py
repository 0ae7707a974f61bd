"""Requests as a program sees them: the port's settings, and the checks that
turn a harness's request into a private snapshot (or refuse it).

A malformed request is refused here with a specific error code before any
effect; a well-formed one becomes a :class:`_Snapshot` whose identity is the
program's own copy, so a harness mutating its request mid-call shows up as
drift (C9) while every locator keeps what the call began with (C13).
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
import operator
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring
from typing import Any, Final, NamedTuple

import attrs

from ._canonical import CanonicalJSONError, canonical_json
from ._definitions import (
    DEFAULT_BACKGROUND_TIMEOUT_SECONDS,
    DEFAULT_FOREGROUND_TIMEOUT_SECONDS,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_SANDBOX_DESCRIPTION,
    ToolDefinition,
    definitions_equal,
)
from ._identity import AgentIdentity, AgentOwner, NativeIdentity, Owner
from ._requests import RUNTIME_ARTIFACTS, ToolCall, ToolRequest
from ._results import (
    ErrorCode,
    ToolResult,
    error_result,
)

__all__ = [
    "PortSettings",
    "RequestParts",
    "digest_text",
    "owner_key",
    "plain_arguments",
    "request_digest",
    "request_parts",
    "snapshot_request",
    "unchanged",
]

_MAX_SAFE_INTEGER: Final = 2**53 - 1


@attrs.frozen(kw_only=True)
class PortSettings:
    """What a port is bound to; fixed at construction, plain data."""

    session_id: str
    owner: Owner
    definitions: tuple[ToolDefinition, ...]
    contract: str
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    foreground_timeout_seconds: int = DEFAULT_FOREGROUND_TIMEOUT_SECONDS
    background_timeout_seconds: int = DEFAULT_BACKGROUND_TIMEOUT_SECONDS
    allow_internet_access: bool = False
    """Whether the sandboxes the port's backend creates may reach the
    internet (``sandbox_status`` reports it)."""
    artifacts_enabled: bool = False
    sandbox_description: str = DEFAULT_SANDBOX_DESCRIPTION
    """The backend's words for where the commands run, which every one of
    ``definitions`` ends with (a recording keeps them, so that a replay
    offers the very same definitions)."""
    owner_key: str = attrs.field(init=False, eq=False, repr=False)
    """:func:`owner_key` of ``owner``, computed once."""
    plan: object = attrs.field(init=False, default=None, eq=False, repr=False)
    """The port's :class:`~sandrail.core._plan.SessionPlan`, made at its
    first call (:func:`~sandrail.core._plan.session_plan`)."""
    _by_name: dict[str, ToolDefinition] = attrs.field(init=False, eq=False, repr=False)
    _digest_tails: dict[tuple[str, object], str] = attrs.field(
        init=False, factory=dict, eq=False, repr=False
    )
    """The end of :func:`request_digest`'s text for the owner's own agent
    calls, by definition digest and result governance (:func:`_own_digest`)."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "owner_key", owner_key(self.owner))
        by_name: dict[str, ToolDefinition] = {}
        for definition in self.definitions:
            by_name.setdefault(definition.name, definition)  # the first, as a search finds it
        object.__setattr__(self, "_by_name", by_name)

    def definition(self, name: str) -> ToolDefinition | None:
        """The definition of tool ``name``, ``None`` if these settings have none."""
        if type(name) is str:
            return self._by_name.get(name)
        for definition in self.definitions:  # a str subclass compares as a str does
            if definition.name == name:
                return definition
        return None


def owner_key(owner: Owner) -> str:
    """A short, stable key for the sandbox owner (session-scoped metadata)."""
    return hashlib.sha256(canonical_json(owner.key())).hexdigest()[:32]


# ---------------------------------------------------------------------------
# The same request (C9)
#
# Strategy: a request is "the same request" while each of its parts
# (:class:`RequestParts`, the one definition) is. Two checks derive from it
# and must agree: the digest (:func:`request_digest`, the JSON form of every
# part hashed, recorded in each CheckAuthority) and the fast comparison the
# guard makes several times a call (:func:`unchanged`: every part still the
# very object it was, the mutable ones equal to the plain copies the
# snapshot took). A part added to the definition is covered by both; the
# cassette writes a request as these parts too.


class RequestParts(NamedTuple):
    """Everything in a request that makes it the request it is: all of it
    but its abort signal (a field of :class:`~sandrail.core.ToolRequest` or
    its call that is not here is never checked for drift)."""

    name: object
    call_id: object
    arguments: object
    operation_key: object
    session_id: object
    definition: object
    identity: object
    result_governance: object


_CALL_FIELDS: Final = frozenset(field.name for field in attrs.fields(ToolCall))
_PART_PATHS: Final = tuple(
    f"call.{name}" if name in _CALL_FIELDS else name for name in RequestParts._fields
)
"""Where each part lives: in the request, or in its call."""
_parts_of: Final[Callable[[object], tuple[object, ...]]] = operator.attrgetter(*_PART_PATHS)


def request_parts(request: ToolRequest) -> RequestParts:
    """The parts of ``request`` (``AttributeError`` if it has none)."""
    return RequestParts._make(_parts_of(request))


def request_digest(request: ToolRequest, arguments: object = None) -> str:
    """Digest of a request's parts (:class:`RequestParts`), for the drift
    check (C9).

    ``arguments`` stands in for ``request.call.arguments`` when given (the
    snapshot passes its own plain copy, so the digest covers exactly what the
    call checks and uses). A part's JSON form is itself, but for the port's
    own definition objects (immutable, they stand for themselves: their
    digest) and the identity (its locator). Only ever compared with a digest
    of the same request in the same process, so it uses Python's C JSON
    encoder (sorted keys) rather than the slower canonical form. Raises
    ``TypeError`` or ``ValueError`` (or ``AttributeError``) for a request
    with no JSON form; a port treats that as drift.
    """
    body = list(_parts_of(request))
    if arguments is not None:
        body[_ARGUMENTS] = arguments
    definition = body[_DEFINITION]
    if isinstance(definition, ToolDefinition):
        body[_DEFINITION] = "sha256:" + definition.digest
    identity = body[_IDENTITY]
    body[_IDENTITY] = None if identity is None else identity.locator()  # type: ignore[attr-defined]
    text = digest_text(body)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _own_digest(request: ToolRequest, arguments: dict[str, Any], settings: PortSettings) -> str:
    """:func:`request_digest` of ``request`` with ``arguments`` (a flat plain
    copy: strings, integers, booleans and nulls), for a request already
    checked as :func:`_check_request` checks it; ``""`` when it is not an
    agent's own call with one of the port's kind of definitions (then only
    the general function can tell).

    Strategy: the digest's text is a JSON list of the request's parts; for
    the owner's own agent, every part after the operation key (the session,
    the definition's digest, the locator, the result governance) is the same
    on every call of one tool, so that end of the text is encoded once per
    port and tool, and a call encodes only its name, call id, arguments and
    operation key."""
    owner, identity, definition = settings.owner, request.identity, request.definition
    governance = request.result_governance
    if (
        type(identity) is not AgentIdentity
        or type(owner) is not AgentOwner
        or type(identity.agent_id) is not str
        or identity.agent_id != owner.agent_id
        or type(definition) is not ToolDefinition
        or type(request.session_id) is not str
        or request.session_id != settings.session_id
        or (governance is not None and type(governance) is not str)
    ):
        return ""
    tails = settings._digest_tails
    tail = tails.get((definition.digest, governance))
    if tail is None:
        tail = digest_text(
            [settings.session_id, "sha256:" + definition.digest, identity.locator(), governance]
        )
        tail = "," + tail[1:]
        if len(tails) < _MAX_DIGEST_TAILS:
            tails[(definition.digest, governance)] = tail
    call = request.call
    text = "".join(
        (
            "[",
            encode_basestring(call.name),
            ",",
            encode_basestring(call.call_id),
            ",",
            digest_text(arguments),
            ",",
            encode_basestring(request.operation_key),
            tail,
        )
    )
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_MAX_DIGEST_TAILS: Final = 64
"""Ends of digest texts a port keeps (one a tool and governance)."""


_ARGUMENTS, _DEFINITION, _IDENTITY = (
    RequestParts._fields.index(name) for name in ("arguments", "definition", "identity")
)


def _plain(value: object) -> object:
    """What the JSON encoder makes of a mapping that is not a dict."""
    if isinstance(value, Mapping):
        return dict(value.items())
    raise TypeError(f"{type(value).__name__} is not JSON data")


_DIGEST_ENCODER: Final = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_plain
)
_make_encoder: Final[Any] = getattr(json.encoder, "c_make_encoder", None)


def digest_text(value: object) -> str:
    """The JSON text digests are taken of: sorted keys, compact, text as it
    is (no ``\\u`` escapes), no NaN; a mapping that is not a dict as a dict.
    Raises as ``json.dumps`` does (``TypeError``, ``ValueError``,
    ``RecursionError``) for a value with no such text.

    Strategy: exactly ``json.JSONEncoder(...).encode`` (its C encoder, made
    for each value as ``encode`` makes it, so a circular value is reported
    as one), without the Python layers ``encode`` walks through first."""
    if _make_encoder is None or type(value) is str:
        return _DIGEST_ENCODER.encode(value)
    encode = _make_encoder({}, _plain, encode_basestring, None, ":", ",", True, False, False)
    return "".join(encode(value, 0))


def plain_arguments(arguments: object) -> dict[str, Any] | None:
    """One plain copy of a call's arguments (dicts, lists, strings, numbers,
    booleans, null), taken in a single read of the harness's object, or
    ``None`` when they are not a JSON object. The program checks and uses
    only this copy: a mapping that answers differently on each read cannot
    get one thing checked and another run."""
    if type(arguments) is dict:
        # The common case: a dict of strings, integers, booleans and nulls,
        # whose JSON round trip would be an equal dict with its keys sorted.
        items = list(arguments.items())  # the single read
        if all(type(key) is str and type(value) in _FLAT for key, value in items):
            items.sort()  # distinct keys: values are never compared
            return dict(items)
    try:
        copy = json.loads(digest_text(arguments))
    except (TypeError, ValueError, RecursionError, AttributeError):
        return None
    return copy if isinstance(copy, dict) else None


_FLAT: Final = frozenset((str, int, bool, type(None)))
"""Exact types a JSON round trip returns as equal values of the same type
(floats are left to the round trip: NaN has no JSON form)."""


class _Seen(NamedTuple):
    """The request as the snapshot saw it, for :func:`unchanged`: its parts
    (in :class:`RequestParts` order) and then its identity's own fields, the
    objects ``still`` checks (strings and
    frozen objects cannot change in place, so still holding the very same
    object means unchanged), and plain copies of the mutable parts (the
    arguments, a native scope), taken in the same pass as the digest's. (A
    named tuple: made on every call, it must be cheap to make.)"""

    still: Callable[[object, tuple[object, ...]], bool]
    objects: tuple[object, ...]
    plain_arguments: object
    plain_scope: object
    flat_keys: tuple[str, ...] | None
    """For arguments of strings, integers, booleans and nulls only: their
    keys, and ``flat_types`` the exact type of each value (then an equal
    dict with the same types has the same JSON)."""
    flat_types: tuple[type, ...] | None


def _paths(kind: type) -> tuple[str, ...]:
    """Where the parts of a request whose identity is a ``kind`` live, and
    then every field of that identity, as its class declares them."""
    return (*_PART_PATHS, *(f"identity.{field.name}" for field in attrs.fields(kind)))


def _still(paths: tuple[str, ...]) -> Callable[[object, tuple[object, ...]], bool]:
    """A check that a request still holds, at each of ``paths``, the very
    object at the same place in ``objects`` (read by ``attrgetter(*paths)``).

    Strategy: the guard runs this several times a call, so it is generated
    once per identity class from the paths (as attrs generates ``__eq__``):
    one plain attribute load and one ``is`` per part, stopping at the first
    part that differs; nothing of the harness's objects runs but their
    attribute reads.
    """
    test = " and ".join(f"request.{path} is objects[{i}]" for i, path in enumerate(paths))
    still: Callable[[object, tuple[object, ...]], bool] = eval(f"lambda request, objects: {test}")
    return still


_READERS: Final = {
    kind: (operator.attrgetter(*_paths(kind)), _still(_paths(kind)))
    for kind in (NativeIdentity, AgentIdentity)
}
"""For each identity class: how the snapshot reads a request's parts and its
identity's fields, and how the guard checks they are still the same."""


@attrs.frozen(kw_only=True)
class _Snapshot:
    tool: str
    call_id: str
    operation_key: str
    session_id: str
    identity: NativeIdentity | AgentIdentity
    arguments: Mapping[str, Any]
    digest: str
    governed: bool
    seen: _Seen | None = attrs.field(default=None, eq=False, repr=False)

    def locator(self, sandbox_id: str | None = None, task: str | None = None) -> dict[str, Any]:
        content = self.identity.locator()
        content["session_id"] = self.session_id
        content["operation_key"] = self.operation_key
        content["call_id"] = self.call_id
        if sandbox_id is not None:
            content["sandbox_id"] = sandbox_id
        if task is not None:
            content["task_id"] = task
        return content


def _refuse(code: ErrorCode, instruction: str, **extra: Any) -> ToolResult:
    return error_result(code, instruction=instruction, **extra)


def _fits(content: Mapping[str, Any], max_output_bytes: int) -> bool:
    try:
        return len(canonical_json(content)) <= max_output_bytes
    except CanonicalJSONError:
        return False


def _nonblank(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _text(value: object) -> bool:
    """A non-blank string that JSON can carry (no lone surrogates) and every
    ownership record can keep (no NUL: PostgreSQL text refuses one, so a key
    holding it would be kept by one record and lost by another)."""
    if not _nonblank(value):
        return False
    assert isinstance(value, str)
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _reads_as_bool(token: object) -> bool:
    """Whether an abort token's ``cancelled`` reads as a bool (reading it may
    run harness code, which may fail: then it does not)."""
    try:
        return isinstance(token.cancelled, bool)  # type: ignore[attr-defined]
    except Exception:
        return False


def _check_identity(identity: object, owner: Owner) -> ToolResult | None:
    if isinstance(owner, AgentOwner):
        if not isinstance(identity, AgentIdentity) or identity.agent_id != owner.agent_id:
            return _refuse(
                ErrorCode.IDENTITY_REQUIRED,
                "This port is bound to an agent owner: pass AgentIdentity with the bound "
                "agent_id and no native identity fields.",
            )
        return None
    if not isinstance(identity, NativeIdentity):
        return _refuse(
            ErrorCode.IDENTITY_REQUIRED,
            "This port is bound to a native owner: pass NativeIdentity.",
        )
    try:
        same_scope = canonical_json(identity.scope) == canonical_json(owner.scope)
    except CanonicalJSONError:
        same_scope = False
    if not same_scope:
        return _refuse(ErrorCode.SCOPE_UNBOUND, "The request's scope differs from the port's.")
    fields = (identity.run_id, identity.turn_id, identity.build_id, identity.task_chain_id)
    if not all(_nonblank(value) for value in fields):
        return _refuse(
            ErrorCode.IDENTITY_REQUIRED,
            "run_id, turn_id, build_id and task_chain_id must be non-blank strings.",
        )
    if identity.parent_run_id is not None and not _nonblank(identity.parent_run_id):
        return _refuse(
            ErrorCode.PARENT_RUN_ID_INVALID,
            "parent_run_id must be a non-blank string or null.",
        )
    fence = identity.execution_fence
    if isinstance(fence, bool) or not isinstance(fence, int) or not 0 < fence <= _MAX_SAFE_INTEGER:
        return _refuse(ErrorCode.FENCE_REQUIRED, "execution_fence must be a positive safe integer.")
    return None


def _check_request(request: object, settings: PortSettings) -> _Snapshot | ToolResult:
    """Refuse a malformed request with a specific error, or snapshot it."""
    call = getattr(request, "call", None)
    name = getattr(call, "name", None)
    call_id = getattr(call, "call_id", None)
    if (
        not isinstance(request, ToolRequest)
        or not isinstance(call, ToolCall)
        or not isinstance(name, str)
        or not _text(call_id)
    ):
        return _refuse(
            ErrorCode.REQUEST_UNBOUND,
            "Pass a ToolRequest whose call has a string name and a non-blank call_id "
            "of valid Unicode text without NUL characters.",
        )
    if not _text(request.operation_key):
        return _refuse(
            ErrorCode.OPERATION_KEY_REQUIRED,
            "operation_key must be a non-blank string of valid Unicode text without NUL "
            "characters.",
        )
    definition = settings.definition(name)
    if definition is None:
        return _refuse(
            ErrorCode.TOOL_UNBOUND,
            "This port has no tool of that name.",
            available_tools=[d.name for d in settings.definitions],
        )
    if not definitions_equal(request.definition, definition):
        return _refuse(
            ErrorCode.DEFINITION_UNBOUND,
            "The request's tool definition differs from this port's; use port.definitions.",
        )
    if request.cancel is not None and not _reads_as_bool(request.cancel):
        return _refuse(
            ErrorCode.SIGNAL_UNBOUND, "cancel must be None or a token with a bool `cancelled`."
        )
    if request.session_id != settings.session_id:
        return _refuse(ErrorCode.SESSION_UNBOUND, "The request belongs to another session.")
    rejected = _check_identity(request.identity, settings.owner)
    if rejected is not None:
        return rejected
    if request.result_governance not in (None, RUNTIME_ARTIFACTS):
        return _refuse(
            ErrorCode.REQUEST_INVALID,
            f"result_governance must be None or {RUNTIME_ARTIFACTS!r}.",
        )
    return _snapshot_of(request, settings)


def _snapshot_of(request: ToolRequest, settings: PortSettings) -> _Snapshot | ToolResult:
    """The snapshot of a request whose every part but its arguments was
    checked; the refusal of arguments that are not a JSON object."""
    identity = request.identity
    assert isinstance(identity, (NativeIdentity, AgentIdentity))
    if isinstance(identity, NativeIdentity):
        # The snapshot's own copy: a harness that mutates its scope mid-call
        # is reported as drift, while every locator keeps the scope it began
        # with (C13).
        identity = attrs.evolve(identity, scope=json.loads(canonical_json(identity.scope)))
    arguments = plain_arguments(request.call.arguments)
    if arguments is None:
        return _refuse(
            ErrorCode.ARGUMENTS_INVALID,
            "arguments must be a JSON object: string keys; strings, numbers, booleans, "
            "null, lists and objects as values.",
        )
    flat = all(map(_FLAT.__contains__, map(type, arguments.values())))
    try:
        digest = (_own_digest(request, arguments, settings) if flat else "") or request_digest(
            request, arguments
        )
    except (ValueError, AttributeError, TypeError, RecursionError):
        digest = ""  # a request with no JSON form: every guard reports drift
    return _Snapshot(
        tool=request.call.name,
        call_id=request.call.call_id,
        operation_key=request.operation_key,
        session_id=request.session_id,
        identity=identity,
        arguments=arguments,
        digest=digest,
        governed=request.result_governance == RUNTIME_ARTIFACTS,
        seen=_seen(request, arguments, flat) if digest else None,
    )


def _seen(request: ToolRequest, arguments: dict[str, Any], flat: bool) -> _Seen:
    """What :func:`unchanged` compares ``request`` with later (``flat``:
    ``arguments`` hold strings, integers, booleans and nulls only)."""
    live = request.identity
    assert isinstance(live, (NativeIdentity, AgentIdentity))  # checked
    read, still = _READERS[type(live)]
    objects = read(request)
    scope = live.scope if isinstance(live, NativeIdentity) else None
    keys = types = None
    if flat:
        keys = tuple(arguments)
        types = tuple(map(type, arguments.values()))
        plain = dict(arguments)  # nothing nested to copy
    else:
        plain = _copy(arguments)
    # Positionally, in the order of its fields (a named tuple made by
    # keyword costs twice as much).
    return _Seen(
        still,
        objects,
        plain,
        None if scope is None else json.loads(digest_text(scope)),
        keys,
        types,
    )


def unchanged(request: ToolRequest, snap: _Snapshot) -> bool | None:
    """Whether ``request`` still says what it said when ``snap`` was taken
    from it (no drift, C9): ``True`` or ``False`` exactly when comparing
    :func:`request_digest` of it now with ``snap.digest`` would say so, or
    ``None`` when that cannot be told without the digest.

    Strategy: the guard runs before and after every step, several times a
    call, so it compares structure instead of hashing a JSON encoding: every
    part (:class:`RequestParts`) and every field of the identity must still
    be the very object it was (strings and frozen objects cannot change in
    place), and the mutable parts (the arguments, a native scope) must equal
    their plain copies with exactly the same JSON types (``1`` is not
    ``1.0`` nor ``True``). Anything unusual (a mapping that is not a dict, a
    tuple, a subclass, a replaced part) is left to the digest.
    """
    seen = snap.seen
    if seen is None:
        return None
    objects = seen.objects
    try:
        if not seen.still(request, objects):
            return None
    except Exception:
        return None  # an identity replaced by something without its fields
    # From here on, the very objects the request holds now.
    if type(objects[_DEFINITION]) is not ToolDefinition:
        return None
    identity = objects[_IDENTITY]
    if isinstance(identity, NativeIdentity):
        same_scope = _same_json(identity.scope, seen.plain_scope)
        if same_scope is not True:
            return same_scope
    live = objects[_ARGUMENTS]
    keys = seen.flat_keys
    try:
        if (
            keys is not None
            and type(live) is dict
            and live == seen.plain_arguments
            and tuple(map(type, map(live.__getitem__, keys))) == seen.flat_types
        ):
            return True  # equal keys and values, each of the very same JSON type
        return _same_json(live, seen.plain_arguments)
    except Exception:
        # A value put in whose comparison raises (or nested too deep to
        # walk): only the digest can judge it.
        return None


def _copy(plain: dict[str, Any]) -> dict[str, Any]:
    """An independent copy of plain JSON data (dicts, lists and scalars)."""
    if all(map(_FLAT.__contains__, map(type, plain.values()))):
        return dict(plain)  # nothing nested to copy
    return {
        key: value
        if type(value) is not dict and type(value) is not list
        else json.loads(digest_text(value))
        for key, value in plain.items()
    }


def _same_json(live: object, plain: object) -> bool | None:
    """Whether ``live`` encodes to the same JSON as ``plain`` (a plain copy:
    dicts, lists, str, int, float, bool, None); ``None`` when ``live`` holds
    something only an encoder can judge."""
    kind = type(live)
    if kind is str or kind is int:
        return type(plain) is kind and live == plain
    if live is None or kind is bool:
        return live is plain
    if kind is float:
        return type(plain) is float and float.__repr__(live) == float.__repr__(plain)
    if kind is dict:
        if type(plain) is not dict or len(live) != len(plain):  # type: ignore[arg-type]
            return False
        for key, value in live.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                return None
            if key not in plain:
                return False
            same = _same_json(value, plain[key])
            if same is not True:
                return same
        return True
    if kind is list:
        if type(plain) is not list or len(live) != len(plain):  # type: ignore[arg-type]
            return False
        for now, then in zip(live, plain, strict=True):  # type: ignore[call-overload]
            same = _same_json(now, then)
            if same is not True:
                return same
        return True
    return None


def snapshot_request(request: object, settings: PortSettings) -> _Snapshot | None:
    """The request as a program will see it (identity copied), or ``None``
    when the request is malformed. Never raises: a port takes this before
    running a call, so that :func:`crash_result` has a locator to report."""
    try:
        checked = _check_request(request, settings)
    except Exception:
        return None
    return None if isinstance(checked, ToolResult) else checked
