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
  to what the person saw;
- a key stays bound to the first call asked about under it: a later call
  under the same key with another tool or other arguments is never asked
  about as a new question (:meth:`Decisions.ask` answers ``"mismatch"``, and
  the toolset answers ``approval_mismatch``, nothing run). A framework that
  re-runs a paused step hands the answer of the question it saved to the
  next question the step asks (LangGraph's ``interrupt()`` matches answers
  by their place in the node, not by what was asked); were a changed call
  a fresh question, the old answer would approve what nobody saw.

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

Where a question was shown. A framework that pauses several calls at once
can hand a person's answer back by position (LangGraph resumes the first
pending question with an answer given without a question id, and
``HumanInTheLoopMiddleware`` matches a batch of decisions to its calls by
their order). A saved run edited in between (its calls reordered) then hands
each answer to another call, each of which was asked about. So an adapter
can name where a question stands when it is shown (``shown_as``: its place
among the questions shown with it), and :meth:`Decisions.shown` is true for
an answer only where the question was shown in that very place. Each place
is a row of its own (another domain again), kept only once the question was
really put to a person.
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

__all__ = ["Asked", "Decision", "Decisions", "Question"]

Decision = Literal["asked", "approved", "rejected"]
Asked = Literal["asked", "mismatch", "rejected"]

_DOMAIN: Final = "sandrail/approval-question/v1"
_SHOWN: Final = "sandrail/approval-shown/v1"
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
        """Whether ``request`` is the call asked about (C3's "same launch"):
        the same recorded digest (``masked``: the values the session masks,
        see :class:`Decisions`), and where this process knows the full one
        (env values included), the same full digest too."""
        full, recorded = _digests(request, masked)
        if recorded is None or recorded != self.recorded:
            return False
        return self.full is None or full == self.full


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
        # The full digest (env values included) of each key's call asked
        # about here, with its recorded digest: it binds only while the
        # record still names that call.
        self._full: OrderedDict[str, tuple[str, str | None]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, request: ToolRequest) -> Question | None:
        """The question asked under ``request``'s key, or ``None``."""
        key = _key(request)
        row = self._row(request, key) if key is not None else None
        if row is None or key is None:
            return None
        with self._lock:
            here = self._full.get(key)
        full = here[0] if here is not None and here[1] == row.launch_digest else None
        decision: Decision = "asked"
        if row.launched:
            decision = "rejected" if row.ledger_epoch == "rejected" else "approved"
        return Question(decision=decision, recorded=row.launch_digest, full=full)

    def ask(self, request: ToolRequest) -> Asked:
        """A person is to be asked about ``request`` (its policy answered
        ``ApprovalRequired``): keep the question, and answer whether it may
        be asked:

        - ``"asked"``: it may (it is the call asked about under its key, or
          the first);
        - ``"rejected"``: a person rejected the key's call first; that
          rejection stands, and nobody is asked again;
        - ``"mismatch"``: a question about another call (another tool, other
          arguments) was asked or decided under its key already. That one
          stands and this one must not be asked, for the answer a framework
          saved for the first would be taken for it (see the module doc).

        A decided key keeps its decision (a decision is never asked over)."""
        key = _key(request)
        masked = self._masked()
        full, recorded = _digests(request, masked)
        if key is None or full is None:
            return "asked"
        known = self.of(request)
        if known is not None and known.decision == "rejected":
            return "rejected"
        if known is not None and not known.covers(request, masked):
            return "mismatch"
        self._remember_full(key, full, recorded)
        self._keep(request, key, launched=False, decision=None, recorded=recorded)
        return "asked"

    def decide(
        self, request: ToolRequest, decision: Literal["approved", "rejected"]
    ) -> Question | None:
        """Keep a person's ``decision`` about ``request``'s key, and return
        the question as it then stands: its first decision (made here, or by
        any process sharing the record) and the call that decision was made
        about. An approval is kept as one of ``request``'s very call (the
        call asked about, or the person's edit of it), so a later approval
        of another call under the key is told apart (``covers`` is false
        for it) however the record was raced. ``None`` for a key that is
        not text (nothing can be kept for it)."""
        key = _key(request)
        if key is None:
            return None
        known = self.of(request)
        if known is not None and known.decision != "asked":
            return known
        full, recorded = _digests(request, self._masked())
        if decision == "rejected" and known is not None:
            recorded, full = known.recorded, known.full
        kept = self._keep(request, key, launched=True, decision=decision, recorded=recorded)
        if kept is None or not kept.launched:  # the record failed: this process alone
            return Question(decision=decision, recorded=recorded, full=full)
        standing: Decision = "rejected" if kept.ledger_epoch == "rejected" else "approved"
        if kept.launch_digest == recorded and full is not None:
            self._remember_full(key, full, recorded)
        else:
            full = None
        return Question(decision=standing, recorded=kept.launch_digest, full=full)

    def show(self, request: ToolRequest, shown_as: str) -> None:
        """``request``'s question is being put to a person in the place
        ``shown_as`` names (see the module doc): keep that, where the key's
        question is this very call (a question about another call under
        the key is not shown again)."""
        key = _key(request)
        question = self.of(request)
        if key is None or question is None or not question.covers(request, self._masked()):
            return
        task = self._task_id(key, _SHOWN, shown_as)
        if task is None:
            return
        row = _question_row(task, key, launched=False, decision=None, recorded=question.recorded)
        try:
            self._remember(request, merged(self._resolved(request, task), row))
        except Exception:
            return  # read as never shown: the answer is refused, nothing runs

    def shown(self, request: ToolRequest, shown_as: str) -> bool:
        """Whether ``request``'s question was put to a person in the place
        ``shown_as`` names (see :meth:`show`): false for another call under
        its key."""
        key = _key(request)
        question = self.of(request)
        if key is None or question is None or not question.covers(request, self._masked()):
            return False
        task = self._task_id(key, _SHOWN, shown_as)
        row = self._resolved(request, task) if task is not None else None
        return row is not None and row.launch_digest == question.recorded

    def _remember_full(self, key: str, full: str, recorded: str | None) -> None:
        """Keep the full digest of the call asked about or approved under
        ``key`` here, with the recorded one it goes with."""
        with self._lock:
            self._full[key] = (full, recorded)
            self._full.move_to_end(key)
            while len(self._full) > _KEPT:
                self._full.popitem(last=False)

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
        new = _question_row(task, key, launched=launched, decision=decision, recorded=recorded)
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
        return self._resolved(request, task) if task is not None else None

    def _resolved(self, request: ToolRequest, task: str) -> OwnedCommand | None:
        try:
            row = self._resolve(request, task)
        except Exception:
            return None
        return row if isinstance(row, OwnedCommand) and row.task_id == task else None

    def _task_id(self, key: str, domain: str = _DOMAIN, *more: str) -> str | None:
        """The row's task id, or ``None`` for a key that is not valid text
        (a lone surrogate: the port refuses such a key before it asks)."""
        frame = [domain, self._session_id, self._owner.key(), key, *more]
        try:
            return hashlib.sha256(canonical_json(frame)).hexdigest()
        except Exception:
            return None


def _question_row(
    task: str, key: str, *, launched: bool, decision: Decision | None, recorded: str | None
) -> OwnedCommand:
    """A row of the record for a question (see the module doc): no sandbox,
    ``launched`` for a decision, the decision as its epoch, the call asked
    about as its digest."""
    return OwnedCommand(
        task_id=task,
        operation_key=key,
        sandbox_id=None,
        launched=launched,
        ledger_epoch=decision,
        launch_digest=recorded,
    )


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
