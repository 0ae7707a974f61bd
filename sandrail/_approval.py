"""A person's approval of one tool call, as a :class:`~sandrail.Toolset` keeps it.

The harness's policy answers ``ApprovalRequired`` when a person must decide
(``docs/howto/approval.md``). Each framework adapter hands that question to its framework's
own human-in-the-loop machinery and, once a person approved, runs the call
again with ``approved=True``. This module is what makes that safe:

- An approval covers *that very call*: the same tool, the same arguments (as
  the port reads them) and the same operation key, which the toolset checks
  against the question it asked before it lets the call run as approved
  (:mod:`sandrail._decisions`: a changed call, or one rejected first, runs
  nothing). The toolset's ports pass each answer of the harness's policy
  through :meth:`Approvals.honoured`: while an approved call runs, an
  ``ApprovalRequired`` answer for a request matching it reaches the call's
  program as ``ALLOW``. Nothing else
  changes: ``ALLOW`` stays ``ALLOW`` and ``Deny`` stays final (a person
  cannot approve what the policy refuses), and a request with other
  arguments or another key is asked about as before.
- The call runs under its own operation key, so however often an approval is
  replayed (a saved run resumed twice, a client's retry), it launches at most
  once (C2).
- A rejection runs nothing: :func:`rejection` is the ``error`` result
  (``executed: false``) the model reads in its place.
- A call whose operation key already launched that very call (same
  arguments) is never asked about again: ``ApprovalRequired`` for it is
  taken as ``ALLOW``, and the call reconciles the one launch (C2) instead
  of telling the model that nothing ran (C5). The toolset decides what
  "already launched" is (its ownership record).

Strategy: the approval travels beside the request, not in it. The core's
request has no field for it, and the port shows the policy a copy of the
request, so the toolset keeps a count of the approved calls in flight by
(operation key, launch digest) and looks the copy up there. The entry lives
exactly as long as the approved call, so an approval is never left lying
around for a later call.
"""

from __future__ import annotations

import inspect
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sandrail._decisions import Decisions
from sandrail.core import (
    APPROVAL_REJECTED_INSTRUCTION,
    Allow,
    ApprovalRequired,
    CanonicalJSONError,
    Deny,
    ErrorCode,
    PolicyDecision,
    Redactions,
    ToolRequest,
    ToolResult,
    bound_result,
    error_result,
    launch_digest,
    mask_text,
)

__all__ = ["Approvals", "asks_a_person", "rejection"]

_Approved = tuple[str, str]  # (operation key, launch digest)

_REASON_CHARACTERS = 2000
"""A person's reason is cut to this many characters before the budget fits
the result (the model needs the gist, not an essay)."""


def asks_a_person(decision: object) -> bool:
    """Whether a policy's answer means "ask a person": an
    ``ApprovalRequired`` with a string interaction id (anything else that is
    not ``ALLOW`` is a refusal, as the port reads it, C8)."""
    return isinstance(decision, ApprovalRequired) and isinstance(decision.interaction_id, str)


def rejection(
    max_output_bytes: int,
    reason: str | None,
    secrets: frozenset[str],
    *,
    call_id: str | None = None,
    operation_key: str | None = None,
) -> ToolResult:
    """The result the model reads when a person rejected its call: ``error``,
    ``executed: false``, ``approval_rejected``, what to do instead, the
    call it is about (its ``call_id`` and ``operation_key``, when given: of
    two identical calls, the one that was rejected) and, when given, the
    person's ``reason`` (env values the session masks are masked in it,
    C17), all within ``max_output_bytes`` (C12)."""
    extra: dict[str, Any] = {}
    if isinstance(call_id, str) and call_id.strip():
        extra["call_id"] = str.__str__(call_id)
    if isinstance(operation_key, str) and operation_key.strip():
        extra["operation_key"] = str.__str__(operation_key)
    if isinstance(reason, str) and reason.strip():
        shown = reason if len(reason) <= _REASON_CHARACTERS else reason[:_REASON_CHARACTERS] + "…"
        try:
            shown.encode("utf-8")
        except UnicodeEncodeError:
            shown = shown.encode("utf-8", "replace").decode("utf-8")
        extra["outcome_reason"] = mask_text(shown, Redactions(secrets)) if secrets else shown
    result = error_result(
        ErrorCode.APPROVAL_REJECTED, instruction=APPROVAL_REJECTED_INSTRUCTION, **extra
    )
    return bound_result(result, max_output_bytes)


class Approvals:
    """The approved calls of one toolset that are running now, and what
    honours them (see the module doc)."""

    def __init__(
        self,
        policy: Callable[[ToolRequest], Any],
        launched: Callable[[ToolRequest], bool] = lambda request: False,
        decisions: Decisions | None = None,
    ) -> None:
        if not callable(policy):
            raise TypeError(
                "authorize must be a callable: request -> ALLOW | ApprovalRequired | Deny"
            )
        self._policy = policy
        self._launched = launched
        self._decisions = decisions
        self._running: Counter[_Approved] = Counter()
        self._lock = threading.Lock()

    @property
    def policy(self) -> Callable[[ToolRequest], Any]:
        """The harness's own policy, unwrapped."""
        return self._policy

    @contextmanager
    def approved(self, request: ToolRequest, approved: bool = True) -> Iterator[None]:
        """While the block runs, ``request`` (its key, tool and arguments) is
        approved by a person, when ``approved``. A request whose arguments
        have no launch digest is refused by the port before the policy is
        asked, so it needs no entry."""
        entry = _entry(request) if approved else None
        if entry is None:
            yield
            return
        with self._lock:
            self._running[entry] += 1
        try:
            yield
        finally:
            with self._lock:
                self._running[entry] -= 1
                if self._running[entry] <= 0:
                    del self._running[entry]

    def honoured(self, decision: PolicyDecision, request: ToolRequest) -> PolicyDecision:
        """The policy's answer ``decision`` about ``request`` (the copy the
        port showed it) as the call's program reads it: ``ALLOW`` when it
        asks a person about an approved call that is running (or one its key
        already launched), ``decision`` otherwise. The port calls this with
        the answer itself, awaited already where the policy is asynchronous;
        a failure of the policy never gets here (the port reports it, C8)."""
        if not asks_a_person(decision):
            return decision
        entry = _entry(request)
        with self._lock:
            approved = entry is not None and self._running[entry] > 0
        # A key that already launched this very call was approved (or
        # allowed) then: asking again would tell the model nothing ran (C5).
        # It reconciles that one launch instead, never launching anew (C2).
        return Allow() if approved or self._launched(request) else decision

    async def ask(self, request: ToolRequest) -> PolicyDecision | None:
        """The harness policy's answer for ``request`` without running
        anything (an adapter deciding whether to ask a person first), or
        ``None`` when the policy failed or answered something it cannot mean,
        or when the key's question or decision stands against this call
        (:meth:`Decisions.ask`): the call itself then reports that, and
        nobody is asked."""
        try:
            decision = self._policy(request)
            if inspect.isawaitable(decision):
                decision = await decision
        except Exception:
            return None
        if not isinstance(decision, (Allow, Deny, ApprovalRequired)) or (
            isinstance(decision, ApprovalRequired) and not asks_a_person(decision)
        ):
            return None
        if asks_a_person(decision):
            if self._launched(request):
                return Allow()
            # The question a person is now asked; or, when the key's first
            # question or decision stands against it (another call asked
            # about, a rejection), nobody is asked: the call reports that.
            if self._decisions is not None and self._decisions.ask(request) != "asked":
                return None
        return decision


def _entry(request: ToolRequest) -> _Approved | None:
    """What an approval is keyed by: the request's operation key and the
    digest of its tool and arguments as the port reads them (C3's notion of
    "the same launch")."""
    call = request.call
    try:
        return str.__str__(request.operation_key), launch_digest(str(call.name), call.arguments)
    except (CanonicalJSONError, AttributeError, TypeError, ValueError, RecursionError):
        return None
