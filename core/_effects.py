"""Effects: what a tool program asks the world to do, as plain data.

A tool program (see :mod:`sandrail.core._programs`) is a generator that yields
an :data:`Effect`, receives that effect's outcome, and finally returns a
:class:`~sandrail.core.ToolResult`. Interpreters turn effects into outcomes;
when an effect fails they raise :class:`EffectFailure`, which the driver
throws into the program. Every effect is frozen, slotted, keyword-only and
compared by value, so a recording can be matched step by step.

Two families:

- **harness effects** (:class:`Authorize`, :class:`CheckAuthority`,
  :class:`ResolveOwned`, :class:`RememberOwned`, :class:`WriteArtifact`,
  :class:`OpenArtifact`, :class:`AppendArtifact`, :class:`CloseArtifact`)
  are answered by the port from the harness's callbacks and stores;
- **sandbox effects** (:class:`Inspect`, :class:`Ensure`, :class:`Publish`,
  :class:`Start`, :class:`Wait`, :class:`Read`, :class:`Cancel`) are answered
  by a backend: the simulator, E2B, or a replayer.

Effects hold requests, never policy: budgets and other derived values stay in
the core so they are not part of the replay contract.

Each effect class states its own facts (whether it is a side effect, a step
of a launch, what an unexplained failure of it means) in its class body, and
every family of effects (:data:`HARNESS_EFFECTS`, :data:`SANDBOX_EFFECTS`,
:data:`SIDE_EFFECTS`, :data:`LAUNCH_STEPS`) is derived from the unions and
those facts: adding an effect is adding its class to its union.
"""

from __future__ import annotations

import enum
import re
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Final, Literal

import attrs

from ._results import ArtifactRef

__all__ = [
    "HARNESS_EFFECTS",
    "LAUNCH_STEPS",
    "MAX_BACKEND_LABEL_CHARS",
    "MAX_BOUNDARY_CHARS",
    "SANDBOX_EFFECTS",
    "SIDE_EFFECTS",
    "STAGING_DIRECTORY",
    "TERMINAL_STATUSES",
    "Allow",
    "AppendArtifact",
    "ApprovalRequired",
    "AuthorityReport",
    "Authorize",
    "BackendLabel",
    "Cancel",
    "CancelRequested",
    "CheckAuthority",
    "CloseArtifact",
    "CommandState",
    "CommandStatus",
    "Delivery",
    "Deny",
    "Effect",
    "EffectFailure",
    "Ensure",
    "FatalInterpreterError",
    "HarnessEffect",
    "Inspect",
    "OpenArtifact",
    "Outcome",
    "OutcomeValue",
    "OutputChunk",
    "OwnedCommand",
    "PolicyDecision",
    "Publish",
    "Published",
    "Read",
    "RememberOwned",
    "ResolveOwned",
    "SandboxEffect",
    "SandboxPhase",
    "SandboxReady",
    "SandboxState",
    "Start",
    "StartRefused",
    "Started",
    "Wait",
    "WriteArtifact",
    "check_backend_label",
    "staged_suffix",
    "unexpected_failure",
]

# ---------------------------------------------------------------------------
# Outcomes (nouns)

CommandStatus = Literal["running", "exited", "timed_out", "canceled", "unknown"]
"""What the sandbox knows about a command. ``unknown``: the sandbox could not tell."""

BackendLabel = str
"""What a backend says it is, in every result that names the backend: 1 to
:data:`MAX_BACKEND_LABEL_CHARS` of ``a-z``, ``0-9`` and ``-``, beginning
with a letter. Each backend states its own, with its boundary (see
:class:`SandboxState`); the core knows no backend by name."""
MAX_BACKEND_LABEL_CHARS: Final = 9
"""The longest label a backend may state (``simulator`` is this long);
admission's worst case measures a label this long, so it holds for every
backend."""
MAX_BOUNDARY_CHARS: Final = 244
"""The longest boundary text a backend may state (as long as the
simulator's, the longest built-in one); admission's worst case measures a
boundary this long."""
_LABEL: Final = re.compile(r"[a-z][a-z0-9-]*")
_BOUNDARY: Final = re.compile(r"[ -~]+")


def _label(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if (
        not isinstance(value, str)
        or len(value) > MAX_BACKEND_LABEL_CHARS
        or not _LABEL.fullmatch(value)
    ):
        raise ValueError(
            f"a backend label is 1 to {MAX_BACKEND_LABEL_CHARS} of a-z, 0-9 and -, "
            "beginning with a letter"
        )


def check_backend_label(label: object) -> str:
    """``label``, a backend's ``backend_label`` (see :data:`BackendLabel`),
    as a plain ``str``: what a port checks when it is made, so that no result
    it builds can carry a label longer than admission measured (C14).
    ``TypeError`` unless it is a ``str``; ``ValueError`` naming the limit
    and what was given unless it is 1 to :data:`MAX_BACKEND_LABEL_CHARS` of
    ``a-z``, ``0-9`` and ``-``, beginning with a letter."""
    if not isinstance(label, str):
        raise TypeError(f"a backend's backend_label must be a str, got {type(label).__name__}")
    text = str.__str__(label)
    if len(text) > MAX_BACKEND_LABEL_CHARS or not _LABEL.fullmatch(text):
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(
            f"a backend's backend_label must be 1 to {MAX_BACKEND_LABEL_CHARS} characters "
            f"of a-z, 0-9 and -, beginning with a letter (the longest a result is sized "
            f"for); got {shown!r} ({len(text)} characters)"
        )
    return text


def _boundary(instance: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and (
        not isinstance(value, str)
        or len(value) > MAX_BOUNDARY_CHARS
        or not _BOUNDARY.fullmatch(value)
    ):
        raise ValueError(f"a boundary is 1 to {MAX_BOUNDARY_CHARS} printable ASCII characters")


TERMINAL_STATUSES: frozenset[str] = frozenset({"exited", "timed_out", "canceled"})
"""The statuses of a command that has ended (every :data:`CommandStatus` but
``running`` and ``unknown``)."""

SandboxPhase = Literal["absent", "creating", "ready", "closing", "closed", "unknown"]


@attrs.frozen(kw_only=True)
class Allow:
    """Policy allows the call."""


@attrs.frozen(kw_only=True)
class ApprovalRequired:
    """Policy wants a human decision first; ``interaction_id`` tracks it."""

    interaction_id: str


@attrs.frozen(kw_only=True)
class Deny:
    """Policy refuses the call."""

    reason: str = ""


PolicyDecision = Allow | ApprovalRequired | Deny


@attrs.frozen(kw_only=True)
class AuthorityReport:
    """One guard observation: is the call aborted, has the request drifted,
    does the caller still hold its authority?"""

    aborted: bool
    drifted: bool
    authority_held: bool


@attrs.frozen(kw_only=True)
class OwnedCommand:
    """A command this session launched: its operation key and, when known,
    the sandbox it runs in."""

    task_id: str
    operation_key: str
    sandbox_id: str | None = None
    launched: bool = False
    """True once a start of this task may have reached the sandbox (recorded
    before the start is sent): every later start then expects its claim."""
    ledger_epoch: str | None = None
    """The epoch of ``sandbox_id``'s ledger when the first start of this task
    may have left (see :class:`Start`); ``None`` when the sandbox did not
    say."""
    launch_digest: str | None = None
    """What the first start of this task asked for (its request digest): a
    later call of the key with other arguments is a conflict (C3) even while
    that start may still arrive."""


@attrs.frozen(kw_only=True)
class SandboxState:
    """What :class:`Inspect` found. ``sandbox_id`` is ``None`` when absent.
    ``backend`` is what answered (see :data:`BackendLabel`)."""

    sandbox_id: str | None
    phase: SandboxPhase
    backend: BackendLabel = attrs.field(validator=_label)
    """Required: a backend that did not say what it is must not pass for
    another (the E2B interpreter says ``e2b``, the simulator ``simulator``)."""
    isolated: bool | None = None
    """Whether commands run isolated from the host, as the backend states it
    (with ``boundary``; ``sandbox_status`` says both)."""
    boundary: str | None = attrs.field(default=None, validator=_boundary)
    """The boundary in words, as the backend states it (at most
    :data:`MAX_BOUNDARY_CHARS`); ``None``: it states none, and
    ``sandbox_status`` says to assume nothing is isolated."""


@attrs.frozen(kw_only=True)
class SandboxReady:
    """The sandbox :class:`Ensure` found or created.

    ``ledger_epoch`` names the sandbox's ledger of task claims as it is now:
    it changes whenever that ledger is lost (a command deleted it), and never
    otherwise. ``None``: the sandbox cannot tell (then a retry after a start
    that may have left can only expect its claim). ``backend`` is what
    answered (see :data:`BackendLabel`)."""

    sandbox_id: str
    backend: BackendLabel = attrs.field(validator=_label)
    """Required, as :attr:`SandboxState.backend` is."""
    ledger_epoch: str | None = None


@attrs.frozen(kw_only=True)
class Published:
    """The snippet file is in place (newly written or already identical)."""

    path: str


@attrs.frozen(kw_only=True)
class CommandState:
    """A command's state as last observed in the sandbox.

    ``exit_code`` is set only when the sandbox observed one. ``stdout_bytes``
    and ``stderr_bytes`` are the retained output sizes so far.
    """

    status: CommandStatus
    exit_code: int | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0


@attrs.frozen(kw_only=True)
class Started:
    """:class:`Start` reached the sandbox. ``first_launch`` is false when the
    task was already claimed with the same request digest: nothing new ran
    (C2), and ``state`` is that first launch's state."""

    task_id: str
    first_launch: bool
    state: CommandState


@attrs.frozen(kw_only=True)
class StartRefused:
    """:class:`Start` reached the sandbox and launched nothing.

    ``reason`` is ``"conflict"`` when the task id was claimed with another
    request digest (C3), ``"stale_fence"`` when a higher execution fence was
    already seen in this sandbox (C10), ``"publish_conflict"`` when the
    snippet path holds other source, ``"claim_lost"`` when the sandbox has
    no claim of the task and cannot prove it never had one (its ledger was
    lost since the first start may have left, see :class:`Start`):
    launching could launch twice (C2); ``"not_started"`` when the sandbox
    claimed the task but the command could not begin (its working directory
    is missing or not enterable, its arguments and environment too big to
    execute): nothing ran, and a retry gets the same answer.
    """

    reason: Literal["conflict", "stale_fence", "publish_conflict", "claim_lost", "not_started"]


@attrs.frozen(kw_only=True)
class OutputChunk:
    """Bytes read from both streams starting at the given cursors.

    Text never ends inside a UTF-8 character; the next cursors point just past
    what was returned. ``more`` is true when either stream holds bytes beyond
    the next cursor at the time of the read.

    ``stdout_start`` and ``stderr_start`` say where each text begins in its
    stream: the asked cursor, moved forward off a partial character (or, as
    the port's masked reads report it, past a secret it would otherwise have
    started inside). ``None`` when the interpreter does not say; the port
    fills them in for the core.
    """

    stdout: str
    stderr: str
    next_stdout_cursor: int
    next_stderr_cursor: int
    more: bool
    state: CommandState
    stdout_start: int | None = None
    stderr_start: int | None = None


@attrs.frozen(kw_only=True)
class CancelRequested:
    """The cancel request reached the sandbox; ``state`` is what was observed
    right after (a request is not proof that the command is gone)."""

    state: CommandState


# ---------------------------------------------------------------------------
# Failures


class Delivery(enum.Enum):
    """Whether a failed request may have reached the sandbox."""

    NOT_SENT = "not_sent"
    MAYBE_SENT = "maybe_sent"


class EffectFailure(Exception):
    """An effect could not produce an outcome.

    Interpreters raise this (and only this) for expected failures; the driver
    throws it into the program. ``delivery`` says whether the request may
    have reached the sandbox; the core alone decides what that means for the
    result (C5, C6). ``aborted`` marks a failure caused by the harness's abort
    signal. ``refused`` marks a request the backend's provider refused as
    such (its API key, say), which no retry gets past: with ``NOT_SENT`` the
    call answers ``e2b_backend_refused`` instead of "could not be reached".
    """

    def __init__(
        self, delivery: Delivery, detail: str, *, aborted: bool = False, refused: bool = False
    ) -> None:
        super().__init__(f"{delivery.value}: {detail}")
        self.delivery = delivery
        self.detail = detail
        self.aborted = aborted
        self.refused = refused

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EffectFailure):
            return NotImplemented
        return (self.delivery, self.detail, self.aborted, self.refused) == (
            other.delivery,
            other.detail,
            other.aborted,
            other.refused,
        )

    def __hash__(self) -> int:
        return hash((self.delivery, self.detail, self.aborted, self.refused))

    def __repr__(self) -> str:
        refused = ", refused=True" if self.refused else ""
        return (
            f"EffectFailure({self.delivery.value!r}, {self.detail!r}, "
            f"aborted={self.aborted}{refused})"
        )


def unexpected_failure(effect: object, exc: BaseException) -> EffectFailure:
    """The failure an exception nobody classified stands for, answering
    ``effect``: the port converts every such exception with this, and a
    recorder records what it converts (so a replay raises the same).
    Asking the policy sends nothing; any other effect's request may have
    left (C6)."""
    # Anything that is not an effect at all may have sent anything.
    delivery = getattr(type(effect), "failure_delivery", Delivery.MAYBE_SENT)
    return EffectFailure(delivery, f"{type(effect).__name__} raised {type(exc).__name__}")


class FatalInterpreterError(Exception):
    """An interpreter error that must reach the caller instead of becoming a
    result: a replay divergence is a failing test, not a tool outcome. Every
    other exception an interpreter raises is turned into an
    :class:`EffectFailure` (``maybe_sent``) by the port."""


# ---------------------------------------------------------------------------
# Harness effects (verbs)


@attrs.frozen(kw_only=True)
class Authorize:
    """Ask the harness policy about this call. Outcome: :data:`PolicyDecision`."""

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.NOT_SENT

    tool: str
    call_id: str


@attrs.frozen(kw_only=True)
class CheckAuthority:
    """Guard check. Outcome: :class:`AuthorityReport`.

    ``request_digest`` is the digest of the request as first seen; a live
    request whose digest differs has drifted (C9).
    """

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    request_digest: str


@attrs.frozen(kw_only=True)
class ResolveOwned:
    """Find a command this session owns. Outcome: :class:`OwnedCommand`, or
    ``None`` when the session owns no such command (C4).

    ``for_launch``: asked by a launch of the task, to learn whether a start
    of it may already have left (C2); the port then answers from everything
    it knows, its own record included. Otherwise it is an ownership check,
    and a harness's ``resolve_owned_command`` has the last word."""

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    task_id: str
    for_launch: bool = False


@attrs.frozen(kw_only=True)
class RememberOwned:
    """Record, before its launch is requested, that this session owns a
    command, so it can be reconciled even if the launch's answer is lost.
    ``launched``: a start of it is about to be sent, so any later start must
    expect its claim (C2). ``ledger_epoch``: the sandbox's ledger epoch when
    the task's first start may have left (kept by the harness's durable
    record, so even a restarted harness can prove a start never arrived).
    ``launch_digest``: the request digest of that first start. Outcome:
    ``None``."""

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    task_id: str
    operation_key: str
    sandbox_id: str
    launched: bool = False
    ledger_epoch: str | None = None
    launch_digest: str | None = None


@attrs.frozen(kw_only=True)
class WriteArtifact:
    """Store a full, uncut result whole (C15). Outcome: :class:`ArtifactRef`.

    ``content`` is the canonical JSON text of the result content. The tool
    programs write artifacts through :class:`OpenArtifact`,
    :class:`AppendArtifact` and :class:`CloseArtifact` instead, so that the
    guard runs before the store commits and big output never has to be held
    whole; the port still answers this effect for programs of its own.
    """

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    key: str
    content: str
    media_type: str = "application/json"


@attrs.frozen(kw_only=True)
class OpenArtifact:
    """Begin storing a full, uncut result piece by piece (C15). Outcome:
    ``None``.

    The pieces follow as :class:`AppendArtifact` effects under the same
    ``key``, and one :class:`CloseArtifact` ends it. Their texts, joined, are
    the canonical JSON text of the result content, as :class:`WriteArtifact`
    stores it.
    """

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    key: str
    media_type: str = "application/json"


@attrs.frozen(kw_only=True)
class AppendArtifact:
    """Add ``text`` to the end of the artifact opened under ``key``.
    Outcome: ``None``."""

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    key: str
    text: str


@attrs.frozen(kw_only=True)
class CloseArtifact:
    """End the artifact opened under ``key``: ``keep`` it (outcome:
    :class:`ArtifactRef`) or discard what was appended (outcome: ``None``)."""

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    key: str
    keep: bool


# ---------------------------------------------------------------------------
# Sandbox effects (verbs)


@attrs.frozen(kw_only=True)
class Inspect:
    """Look up this session's sandbox without creating it.
    Outcome: :class:`SandboxState`. Not a side effect."""

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    session_id: str
    owner_key: str


@attrs.frozen(kw_only=True)
class Ensure:
    """Find this session's sandbox or create it (idempotent per session and
    owner). Outcome: :class:`SandboxReady`. A side effect (C5)."""

    side_effect: ClassVar[bool] = True
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    session_id: str
    owner_key: str


@attrs.frozen(kw_only=True)
class Publish:
    """Write a snippet to ``path``, private to the sandbox's user and not
    changeable by its commands (0600; on E2B root's, 0440 for the user's
    group), unless the same source is already there (C16). Outcome:
    :class:`Published`, or :class:`StartRefused` (``publish_conflict``) when
    other source is there. Once ``task_id`` is claimed the answer is
    :class:`Published` whatever the file holds: the start answers from the
    claim. A side effect."""

    side_effect: ClassVar[bool] = True
    launch_step: ClassVar[bool] = True
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    sandbox_id: str
    task_id: str
    path: str
    source: str


STAGING_DIRECTORY: Final = "/tmp/sandrail/code/"
"""Where a launch stages the file it runs (:class:`Publish`)."""
_STAGING_PATH: Final = re.compile(r"/tmp/sandrail/code/([0-9a-f]{64})\.([a-z]{1,8})")


def staged_suffix(effect: Publish) -> str:
    """The suffix of ``effect``'s path (``py`` for ``….py``) when the path is
    its own task's staging path, ``/tmp/sandrail/code/<task id>.<suffix>``
    (the effect's own ``task_id``, a suffix of 1 to 8 of ``a-z``): the one
    form every backend accepts, so a tool staging anywhere else fails on the
    simulator as it does on the launcher. Raises :class:`EffectFailure`
    (``NOT_SENT``: nothing was written) for any other path."""
    match = _STAGING_PATH.fullmatch(effect.path)
    if match is None or match.group(1) != effect.task_id:
        raise EffectFailure(Delivery.NOT_SENT, "Publish: the snippet path is not sandrail's")
    return match.group(2)


@attrs.frozen(kw_only=True)
class Start:
    """Launch ``command`` as task ``task_id``, at most once ever (C2).

    The sandbox claims the task id atomically. A claim with the same
    ``request_digest`` means this is a retry: nothing runs and the first
    launch's state comes back. A claim with another digest, or a ``fence``
    below the highest seen in the sandbox, launches nothing.
    Outcome: :class:`Started` or :class:`StartRefused`. A side effect.

    ``env`` values reach the command through a private file, never the
    process environment or any output (C17). ``timeout_seconds`` is enforced
    inside the sandbox. ``expect_claim`` is true when a start of this task
    may already have reached the sandbox. ``claim_epoch`` is the sandbox's
    ledger epoch (:attr:`SandboxReady.ledger_epoch`) when the task's first
    start may have left. A sandbox without the task's claim launches only
    when it can prove its ledger never held one: its ledger epoch is still
    ``claim_epoch`` (any claim made since would still be there), or, without
    a ``claim_epoch``, when no start may have left before
    (``expect_claim`` false). Otherwise it launches nothing
    (``StartRefused("claim_lost")``): a start held in the network that
    arrives after the ledger was lost must not launch a second time (C2).
    """

    side_effect: ClassVar[bool] = True
    launch_step: ClassVar[bool] = True
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    sandbox_id: str
    task_id: str
    request_digest: str
    command: str
    cwd: str | None
    env: Mapping[str, str] | None
    timeout_seconds: int
    fence: int | None = None
    expect_claim: bool = False
    claim_epoch: str | None = None


@attrs.frozen(kw_only=True)
class Wait:
    """Block until the command ends or ``timeout_seconds`` pass, whichever is
    first, and report its state. Event-driven: returns as soon as the command
    ends; an abort interrupts it at once (as an aborted
    :class:`EffectFailure`). Never changes the command's own deadline.
    Outcome: :class:`CommandState`. Not a side effect."""

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    sandbox_id: str
    task_id: str
    timeout_seconds: float


@attrs.frozen(kw_only=True)
class Read:
    """Read both streams from byte cursors, at most ``max_bytes`` each.
    Re-reading an old cursor returns the same bytes.
    Outcome: :class:`OutputChunk`. Not a side effect."""

    side_effect: ClassVar[bool] = False
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    sandbox_id: str
    task_id: str
    stdout_cursor: int
    stderr_cursor: int
    max_bytes: int


@attrs.frozen(kw_only=True)
class Cancel:
    """Request the end of the command's whole process group (C18).
    Outcome: :class:`CancelRequested`. A side effect."""

    side_effect: ClassVar[bool] = True
    launch_step: ClassVar[bool] = False
    failure_delivery: ClassVar[Delivery] = Delivery.MAYBE_SENT

    sandbox_id: str
    task_id: str


HarnessEffect = (
    Authorize
    | CheckAuthority
    | ResolveOwned
    | RememberOwned
    | WriteArtifact
    | OpenArtifact
    | AppendArtifact
    | CloseArtifact
)
SandboxEffect = Inspect | Ensure | Publish | Start | Wait | Read | Cancel
Effect = HarnessEffect | SandboxEffect


def _declaring(family: object, *facts: str) -> tuple[Any, ...]:
    """The effect classes of the union ``family``, in its order, each of which
    must state every one of ``facts`` in its own class body (``TypeError`` at
    import otherwise): an effect added to a union without its facts is a bug
    caught at once, never a silent default inherited from somewhere."""
    kinds = typing.get_args(family)
    for kind in kinds:
        missing = [fact for fact in facts if fact not in vars(kind)]
        if missing:
            raise TypeError(f"effect {kind.__name__} does not state {', '.join(missing)}")
    return kinds


_FACTS: Final = ("side_effect", "launch_step", "failure_delivery")
"""What every effect states of itself, as class-level facts:

- ``side_effect``: it may change the sandbox (C5): once one may have
  reached it, a failure is ``uncertain`` (C6). Reads, inspections and the
  harness's effects are not.
- ``launch_step``: a step of a launch (the snippet's publish, the start):
  once it is sent, the task it names is this call's own (a crash report
  names it, C6).
- ``failure_delivery``: what an exception nobody classified, raised while
  it was answered, says of its request (:func:`unexpected_failure`): asking
  the policy sends nothing; any other request may have left."""

HARNESS_EFFECTS: Final[tuple[type[HarnessEffect], ...]] = _declaring(HarnessEffect, *_FACTS)
"""The effects the port answers from the harness's callbacks and stores,
derived from :data:`HarnessEffect`."""
SANDBOX_EFFECTS: Final[tuple[type[SandboxEffect], ...]] = _declaring(SandboxEffect, *_FACTS)
"""The effects a backend answers, derived from :data:`SandboxEffect`."""
SIDE_EFFECTS: Final[tuple[type[Effect], ...]] = tuple(
    kind for kind in (*HARNESS_EFFECTS, *SANDBOX_EFFECTS) if kind.side_effect
)
"""The effects that change the sandbox (C5): once one may have reached it, a
failure is ``uncertain`` (C6). Derived from each effect's ``side_effect``."""
LAUNCH_STEPS: Final[tuple[type[Effect], ...]] = tuple(
    kind for kind in (*HARNESS_EFFECTS, *SANDBOX_EFFECTS) if kind.launch_step
)
"""The steps of a launch (each effect's ``launch_step``)."""


OutcomeValue = (
    PolicyDecision
    | AuthorityReport
    | OwnedCommand
    | SandboxState
    | SandboxReady
    | Published
    | Started
    | StartRefused
    | CommandState
    | OutputChunk
    | CancelRequested
    | ArtifactRef
)
"""Every outcome an effect can have but ``None`` (a tagged union for cassettes)."""

Outcome = OutcomeValue | None
