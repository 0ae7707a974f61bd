"""The options a port is built with, written once.

:class:`PortOptions` names the keyword options of
:func:`sandrail.command_tools`, :func:`sandrail.code_tools` and
:class:`sandrail.Toolset` (which adds its own); :data:`DEFAULTS` holds the
defaults of the optional ones; :func:`port_settings` checks them all and
makes the port's :class:`~sandrail.core.PortSettings`. A function that
takes ``**options: Unpack[PortOptions]`` is type-checked against the names
and types here, and :func:`given_options` refuses a name that is not one
(``TypeError``, as Python would for a keyword it does not know).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, TypeAlias, TypedDict, cast

from sandrail._artifact_calls import ArtifactStore
from sandrail._masks import checked_redact, is_text
from sandrail._ownership import OwnershipRecord
from sandrail._toolset_backend import internet_access_of, label_of, sandbox_description_of
from sandrail.core import (
    DEFAULT_BACKGROUND_TIMEOUT_SECONDS,
    DEFAULT_FOREGROUND_TIMEOUT_SECONDS,
    DEFAULT_MAX_OUTPUT_BYTES,
    MAX_TIMEOUT_SECONDS,
    MIN_MAX_OUTPUT_BYTES,
    AgentOwner,
    NativeOwner,
    OwnedCommand,
    Owner,
    PolicyDecision,
    PortSettings,
    ToolDefinition,
    ToolRequest,
    canonical_json,
    tool_records,
)

__all__ = [
    "DEFAULTS",
    "AuthorityCallback",
    "AuthorizeCallback",
    "Defaulted",
    "PortOptions",
    "RememberOwnedCallback",
    "ResolveOwnedCallback",
    "check_owner",
    "checked_timeout",
    "given_options",
    "owned_callbacks",
    "port_settings",
]

AuthorizeCallback: TypeAlias = Callable[[ToolRequest], PolicyDecision | Awaitable[PolicyDecision]]
AuthorityCallback: TypeAlias = Callable[[ToolRequest], bool]
ResolveOwnedCallback: TypeAlias = Callable[[ToolRequest, str], OwnedCommand | None]
RememberOwnedCallback: TypeAlias = Callable[[ToolRequest, OwnedCommand], object]


class Defaulted(TypedDict, total=False):
    """The optional keyword options of a port (:data:`DEFAULTS` has them all)."""

    max_output_bytes: int
    artifacts: ArtifactStore | None
    resolve_owned_command: ResolveOwnedCallback | None
    remember_owned_command: RememberOwnedCallback | None
    foreground_timeout_seconds: int
    background_timeout_seconds: int
    allow_internet_access: bool | None
    redact: Iterable[str]
    record: OwnershipRecord | None
    tracer_provider: Any
    meter_provider: Any


class PortOptions(Defaulted):
    """The keyword options of a port (see :func:`sandrail.command_tools` for
    what each means): these five are required, the :class:`Defaulted` ones
    are not."""

    backend: Callable[[Any], Any]
    session_id: str
    owner: Owner
    authorize: AuthorizeCallback
    assert_authority: AuthorityCallback


DEFAULTS: Final[Defaulted] = {
    "max_output_bytes": DEFAULT_MAX_OUTPUT_BYTES,
    "artifacts": None,
    "resolve_owned_command": None,
    "remember_owned_command": None,
    "foreground_timeout_seconds": DEFAULT_FOREGROUND_TIMEOUT_SECONDS,
    "background_timeout_seconds": DEFAULT_BACKGROUND_TIMEOUT_SECONDS,
    "allow_internet_access": None,
    "redact": (),
    "record": None,
    "tracer_provider": None,
    "meter_provider": None,
}


def given_options(
    options: Mapping[str, Any], caller: str, extra: Iterable[str] = ()
) -> PortOptions:
    """``options`` with the defaults filled in; ``TypeError`` naming a
    keyword ``caller`` does not take (``extra`` are its own besides these)
    or a required one that is missing, as Python's own message would."""
    known = PortOptions.__required_keys__ | PortOptions.__optional_keys__ | set(extra)
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    missing = sorted(PortOptions.__required_keys__ - set(options))
    if missing:
        names = ", ".join(repr(name) for name in missing)
        raise TypeError(f"{caller}() missing required keyword argument(s): {names}")
    return cast(PortOptions, {**DEFAULTS, **options})


def checked_timeout(name: str, value: object) -> int:
    """``value`` if it is a whole number of seconds a port's timeout may be
    (1 to ``MAX_TIMEOUT_SECONDS``), else ``ValueError`` naming ``name``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 < value <= MAX_TIMEOUT_SECONDS
    ):
        raise ValueError(
            f"{name} must be an integer from 1 to {MAX_TIMEOUT_SECONDS}, got {value!r}"
        )
    return value


def port_settings(
    options: PortOptions,
    contract: str,
    definitions: Callable[[int, str], tuple[ToolDefinition, ...]],
) -> tuple[PortSettings, frozenset[str]]:
    """The settings of a port with ``options`` (defaults filled in) offering
    ``definitions(foreground_timeout_seconds, sandbox_description)`` (the
    backend's words for its sandbox, :func:`sandbox_description_of`), and
    the values it masks from the start (``redact``). ``TypeError`` or
    ``ValueError`` at once for a port that could not work: a timeout out of
    range, a backend that is not callable or states a label, description or
    internet access it cannot have, a callback that is not callable, a
    session or owner that is not plain text, a budget below 256 bytes;
    :class:`~sandrail.core.UnknownToolError` for a definition of a tool the
    core has no record of. (Checked in this order: the first problem is the
    one named.)"""
    foreground = checked_timeout(
        "foreground_timeout_seconds", options["foreground_timeout_seconds"]
    )
    backend = options["backend"]
    if not callable(backend):
        raise TypeError("backend must be an interpreter: a callable from effect to outcome")
    label_of(backend)  # a label longer than results are sized for fails here
    description = sandbox_description_of(backend)
    offered = definitions(foreground, description)
    tool_records(offered)  # a tool the core has no record of fails here, not at its first call
    internet = internet_access_of(backend, options["allow_internet_access"])
    session_id = options["session_id"]
    if not isinstance(session_id, str) or not session_id.strip() or not _identity_text(session_id):
        raise ValueError(
            "session_id must be a non-blank string of valid Unicode text without NUL characters"
        )
    check_owner(options["owner"])
    _check_callbacks(options)
    max_output_bytes = options["max_output_bytes"]
    if (
        isinstance(max_output_bytes, bool)
        or not isinstance(max_output_bytes, int)
        or max_output_bytes < MIN_MAX_OUTPUT_BYTES
    ):
        raise ValueError(
            f"max_output_bytes must be an integer of at least {MIN_MAX_OUTPUT_BYTES}, "
            f"got {max_output_bytes!r}"
        )
    secrets = checked_redact(options["redact"])
    settings = PortSettings(
        session_id=session_id,
        owner=options["owner"],
        definitions=offered,
        contract=contract,
        max_output_bytes=max_output_bytes,
        foreground_timeout_seconds=options["foreground_timeout_seconds"],
        background_timeout_seconds=checked_timeout(
            "background_timeout_seconds", options["background_timeout_seconds"]
        ),
        allow_internet_access=internet,
        artifacts_enabled=options["artifacts"] is not None,
        sandbox_description=description,
    )
    return settings, secrets


def owned_callbacks(
    options: PortOptions,
) -> tuple[RememberOwnedCallback | None, ResolveOwnedCallback | None]:
    """The ownership callbacks a port (or a toolset) uses: those of
    ``record=`` when one is given, else the harness's pair. ``TypeError``
    for both at once, or a ``record`` that is not an ownership record."""
    record = options["record"]
    remember, resolve = options["remember_owned_command"], options["resolve_owned_command"]
    if record is None:
        return remember, resolve
    if remember is not None or resolve is not None:
        raise TypeError(
            "give record= or the remember_owned_command/resolve_owned_command pair, not both"
        )
    if not all(callable(getattr(record, name, None)) for name in ("remember", "resolve", "note")):
        raise TypeError(
            "record must be a sandrail.records.OwnershipRecord (SQLiteRecord, PostgresRecord)"
        )
    return record.remember, record.resolve


def _check_callbacks(options: PortOptions) -> None:
    if not callable(options["authorize"]):
        raise TypeError("authorize must be a callable: request -> ALLOW | ApprovalRequired | Deny")
    if not callable(options["assert_authority"]):
        raise TypeError("assert_authority must be a callable: request -> bool")
    remember, resolve = owned_callbacks(options)
    if remember is not None and not callable(remember):
        raise TypeError(
            "remember_owned_command must be None or a callable: (request, OwnedCommand) -> None"
        )
    if resolve is not None and not callable(resolve):
        raise TypeError(
            "resolve_owned_command must be None or a callable: "
            "(request, task_id) -> OwnedCommand | None"
        )
    artifacts = options["artifacts"]
    if artifacts is not None and not callable(getattr(artifacts, "write", None)):
        raise TypeError(
            "artifacts must be None or have write(key, content, media_type) -> ArtifactRef"
        )


def check_owner(owner: object) -> None:
    """``TypeError`` or ``ValueError`` for an ``owner`` a port cannot take,
    saying what it takes."""
    if isinstance(owner, NativeOwner):
        if not isinstance(owner.scope, Mapping):
            raise TypeError("NativeOwner.scope must be a JSON object (a mapping)")
        try:
            canonical_json(owner.scope)
        except ValueError as exc:
            raise ValueError(f"NativeOwner.scope must be JSON data: {exc}") from None
    elif isinstance(owner, AgentOwner):
        agent_id = owner.agent_id
        if not isinstance(agent_id, str) or not agent_id.strip() or not _identity_text(agent_id):
            raise ValueError(
                "AgentOwner.agent_id must be a non-blank string of valid Unicode text "
                "without NUL characters"
            )
    else:
        hint = (
            f"; for an agent named {owner!r}: owner=sandrail.AgentOwner(agent_id={owner!r})"
            if isinstance(owner, str) and owner.strip() and len(owner) <= 100
            else ""
        )
        raise TypeError(
            "owner must be sandrail.AgentOwner(agent_id=...) (an agent's own sandbox; the "
            "tutorial's) or sandrail.NativeOwner(scope=...) (a harness's run, with "
            f"identity=sandrail.NativeIdentity(...)), not {type(owner).__name__}{hint}"
        )


def _identity_text(text: str) -> bool:
    """Whether ``text`` can name an identity (a session, an agent): valid
    Unicode, and no NUL, which PostgreSQL text cannot hold (so every
    ownership record keeps it alike)."""
    return "\x00" not in text and is_text(text)
