"""What a person was asked about, and what they decided, by operation key.

An approval covers the call the person was asked about: the same tool, the
same arguments as the port reads them, the same operation key. A saved run
can come back changed (its history edited, a block with the same id but
other input), and one saved copy can be answered twice (rejected, then
approved on another copy). So a :class:`~sandrail.Toolset` keeps, for each
key it answered ``approval_required`` (its policy asked for a person), the
question and the first decision made about it, and an approval counts only
when it matches:

- the call's tool and arguments are those asked about, else the call is
  refused (``approval_mismatch``) and nothing runs;
- a call a person rejected first stays rejected: approving it afterwards
  answers ``approval_rejected`` and runs nothing. An approval given first
  stands too: rejecting the call afterwards runs nothing more, and answers
  for the launch the approval may have made (C5);
- a key the toolset never asked about is asked about again (the policy
  decides, as for any call): nothing runs on an approval nobody can match
  to what the person saw.

Strategy: the questions live in the toolset's ownership record, so they
reach as far as its owned commands do: this toolset alone without a durable
record; with one (``record=``, or the ``remember_owned_command`` and
``resolve_owned_command`` callbacks), every process and fleet worker that
shares it, across restarts. Each key's question is one row of its own, whose
task id is drawn from another domain than any task's (so no task ever reads
it); ``launch_digest`` holds the call asked about (the recorded digest: env
values masked, as a person is shown them and as every record keeps them),
``launched`` marks a decision and ``ledger_epoch`` names it. The record's own
merge rule (:func:`~sandrail.core.merged`: once a row is ``launched``, its
epoch and digest stay) is exactly "the first decision stands", settled by a
fleet's record in one transaction like a race between two starts. The
process that asked also keeps the full digest (env values included) in
memory, so there a changed env value is a changed call too.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Literal

import attrs

from sandrail.core import (
    OwnedCommand,
    Owner,
    ToolRequest,
    canonical_json,
    launch_digest,
    merged,
    recorded_digest,
)

__all__ = ["Decision", "Decisions", "Question"]

Decision = Literal["asked", "approved", "rejected"]

_DOMAIN: Final = "sandrail/approval-question/v1"
_KEPT: Final = 1024

Remember = Callable[[ToolRequest, OwnedCommand], object]
Resolve = Callable[[ToolRequest, str], OwnedCommand | None]


@attrs.frozen
class Question:
    """One key's question as it stands."""

    decision: Decision
    recorded: str | None
    """The recorded digest of the call asked about (``None``: a decision
    made by key alone, a rejection in a process that never asked)."""
    full: str | None
    """Its full launch digest, where this process asked it, else ``None``."""

    def covers(self, request: ToolRequest, masked: frozenset[str] = frozenset()) -> bool:
        """Whether ``request`` is the call asked about (C3's "same launch");
        ``masked``: the values the session masks (see :class:`Decisions`)."""
        full, recorded = _digests(request, masked)
        if self.full is not None:
            return full == self.full
        return recorded is not None and recorded == self.recorded


class Decisions:
    """The questions of one toolset's session and owner, kept in its
    ownership record through ``remember`` and ``resolve`` (see the module
    doc). A record that fails is read as holding no question (the call is
    asked about again) and a decision it cannot keep stands for this
    process alone; neither ever lets a call run unasked."""

    def __init__(
        self,
        remember: Remember,
        resolve: Resolve,
        session_id: str,
        owner: Owner,
        masked: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        """``masked``: the values the session masks now (``redact=``, env
        values of earlier calls): the recorded digest a question row keeps
        is taken with them masked, as every record's is (C17)."""
        self._masked = masked
        self._remember = remember
        self._resolve = resolve
        self._session_id = session_id
        self._owner = owner
        self._full: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, request: ToolRequest) -> Question | None:
        """The question asked under ``request``'s key, or ``None``."""
        key = _key(request)
        row = self._row(request, key) if key is not None else None
        if row is None or key is None:
            return None
        with self._lock:
            full = self._full.get(key)
        decision: Decision = "asked"
        if row.launched:
            decision = "rejected" if row.ledger_epoch == "rejected" else "approved"
        return Question(decision=decision, recorded=row.launch_digest, full=full)

    def ask(self, request: ToolRequest) -> None:
        """A person is asked about ``request`` (its policy answered
        ``ApprovalRequired``): keep the question, unless one was decided
        under its key already (a decision is never asked over)."""
        key = _key(request)
        full, recorded = _digests(request, self._masked())
        if key is None or full is None:
            return
        with self._lock:
            self._full[key] = full
            self._full.move_to_end(key)
            while len(self._full) > _KEPT:
                self._full.popitem(last=False)
        self._keep(request, key, launched=False, decision=None, recorded=recorded)

    def decide(self, request: ToolRequest, decision: Literal["approved", "rejected"]) -> Decision:
        """Keep a person's ``decision`` about ``request``'s key, and return
        the decision that stands: the first one made (here, or by any
        process sharing the record)."""
        key = _key(request)
        if key is None:
            return decision
        known = self.of(request)
        if known is not None and known.decision != "asked":
            return known.decision
        recorded = known.recorded if known is not None else _digests(request, self._masked())[1]
        kept = self._keep(request, key, launched=True, decision=decision, recorded=recorded)
        if kept is None or not kept.launched:
            return decision
        return "rejected" if kept.ledger_epoch == "rejected" else "approved"

    def _keep(
        self,
        request: ToolRequest,
        key: str,
        *,
        launched: bool,
        decision: Decision | None,
        recorded: str | None,
    ) -> OwnedCommand | None:
        task = self._task_id(key)
        if task is None:
            return None
        new = OwnedCommand(
            task_id=task,
            operation_key=key,
            sandbox_id=None,
            launched=launched,
            ledger_epoch=decision,
            launch_digest=recorded,
        )
        known = self._row(request, key)
        if known is not None and known.launched and not launched:
            return known  # decided: a later question does not reopen it
        try:
            kept = self._remember(request, merged(known, new))
        except Exception:
            return None
        return kept if isinstance(kept, OwnedCommand) else None

    def _row(self, request: ToolRequest, key: str) -> OwnedCommand | None:
        task = self._task_id(key)
        if task is None:
            return None
        try:
            row = self._resolve(request, task)
        except Exception:
            return None
        return row if isinstance(row, OwnedCommand) and row.task_id == task else None

    def _task_id(self, key: str) -> str | None:
        """The row's task id, or ``None`` for a key that is not valid text
        (a lone surrogate: the port refuses such a key before it asks)."""
        frame = [_DOMAIN, self._session_id, self._owner.key(), key]
        try:
            return hashlib.sha256(canonical_json(frame)).hexdigest()
        except Exception:
            return None


def _key(request: ToolRequest) -> str | None:
    key = request.operation_key
    return str.__str__(key) if isinstance(key, str) else None


def _digests(
    request: ToolRequest, masked: frozenset[str] = frozenset()
) -> tuple[str | None, str | None]:
    """The full and the recorded digest (``masked`` values masked) of
    ``request``'s tool and arguments as the port reads them, or ``None`` for
    arguments without one (the port refuses those before anything is asked)."""
    call = request.call
    try:
        name, arguments = str(call.name), call.arguments
        return launch_digest(name, arguments), recorded_digest(name, arguments, masked)
    except Exception:
        return None, None
