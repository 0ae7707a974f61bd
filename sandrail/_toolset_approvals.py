"""What a :class:`~sandrail.Toolset` answers a framework's human in the loop:
what the policy says of a call before it runs (``ask_policy``), whether a
person was already asked about it (``asked``), the question shown
(``asking``), an approval given through the framework's own gate
(``approve``) and the rejection the model reads (``rejection``); and, for a
call run as approved, whether the approval covers it.

A key stays bound to the first call asked about under it, and the first
decision about a key stands (:mod:`sandrail._decisions`, where both are
kept): an approval or an answer given to another call runs nothing.

Its own module because it is the toolset's side of approval, apart from how
a call runs: :class:`ToolsetApprovals` is the base of
:class:`~sandrail.Toolset` and stands on :class:`ToolsetRequests` for the
requests it asks about.
"""

from __future__ import annotations

from typing import Final

import attrs

from sandrail._approval import Approvals, rejection
from sandrail._decisions import Decisions, Question
from sandrail._launched import alike, lookup
from sandrail._toolset_requests import ToolsetRequests, _Prepared
from sandrail.core import (
    ErrorCode,
    OwnedCommand,
    PolicyDecision,
    Profile,
    ToolRequest,
    ToolResult,
    bound_result,
    error_result,
    refused_after_launch,
)
from sandrail.core import task_id as task_of

__all__ = ["ToolsetApprovals"]

_CHANGED_AFTER_ASKING: Final = (
    "Nothing ran: this call was changed after a person was asked about it (another tool or "
    "other arguments under its operation key), so no approval covers it and nobody is asked "
    "about it. Do not repeat it; ask the user what to do."
)


class ToolsetApprovals(ToolsetRequests):
    """A toolset's questions to a person and their answers (see the module
    doc): the base of :class:`~sandrail.Toolset`, which sets the state
    below."""

    _decisions: Decisions
    _approvals: Approvals

    def _asked(self, request: ToolRequest, asking: ToolResult) -> ToolResult:
        """``asking`` (``approval_required``) when a person may be asked about
        ``request`` now, else what stands under its key: the rejection a
        person made first, or ``approval_mismatch`` when another call was
        asked about under it (nobody is asked about this one: the answer a
        framework saved for that question would be taken for it; see
        :mod:`sandrail._decisions`). Nothing ran in any of them."""
        asked = self._decisions.ask(request)
        if asked == "asked":
            return asking
        if asked == "rejected":
            return self._rejected_first(request)
        return self._mismatch(_CHANGED_AFTER_ASKING)

    def _mismatch(self, instruction: str | None = None) -> ToolResult:
        extra = {} if instruction is None else {"instruction": instruction}
        return bound_result(
            error_result(ErrorCode.APPROVAL_MISMATCH, **extra), self._max_output_bytes
        )

    def _rejected_first(self, request: ToolRequest) -> ToolResult:
        """The rejection that stands for ``request``'s key (it is kept
        already, so nothing is decided anew)."""
        call = request.call
        return self.rejection(
            name=str(call.name), call_id=call.call_id, operation_key=request.operation_key
        )

    def _approval_of(
        self, prepared: _Prepared, approved: bool, edited: bool
    ) -> tuple[ToolResult | None, bool]:
        """Whether the prepared request, said to be ``approved``, runs as
        approved: only when it is the call a person was asked about under
        its key (or the person's own edit of it: ``edited``), and no other
        decision came first (see :mod:`sandrail._decisions`). A repeat that
        runs under an earlier call's key is held to the question asked under
        its own key too, where there is one: an approval given to that
        question covers that call alone. Returns the refusal that runs
        nothing instead (``approval_mismatch``, or the rejection that
        stands), else ``None`` and whether it is approved (a key nobody was
        asked about is asked about again, unless the person wrote the
        arguments: ``edited``)."""
        if not approved:
            return None, False
        request = prepared.request
        own = self._own_question(prepared)
        if own is not None and own.decision == "rejected":
            return self._rejected_first(request), False
        if own is not None and not edited and not own.covers(request, self._masks.secrets):
            return self._mismatch(), False
        question = self._decisions.of(request)
        if question is None and not edited:
            return None, False
        if question is not None and question.decision == "rejected":
            return self._rejected_first(request), False
        if (
            question is not None
            and not edited
            and not question.covers(request, self._masks.secrets)
        ):
            return self._mismatch(), False
        standing = self._decisions.decide(request, "approved")
        if standing is not None and standing.decision == "rejected":
            return self._rejected_first(request), False
        if standing is not None and not standing.covers(request, self._masks.secrets):
            return self._mismatch(), False  # an approval of another call came first
        return None, True

    def _own_question(self, prepared: _Prepared) -> Question | None:
        """The question asked under the key the caller gave, when the
        request runs under another (an earlier call's, which it repeats);
        ``None`` otherwise or when nobody was asked under it."""
        request = prepared.request
        if prepared.asked_key == request.operation_key:
            return None
        return self._decisions.of(attrs.evolve(request, operation_key=prepared.asked_key))

    async def ask_policy(
        self,
        name: str,
        arguments: object,
        *,
        call_id: str,
        operation_key: str,
        profile: Profile = "full",
        reconcile_repeats: bool = False,
        run_id: str | None = None,
        turn: str | None = None,
    ) -> PolicyDecision | None:
        """What the harness's policy answers for this call, without running
        it: ``ALLOW``, ``ApprovalRequired(...)`` (a person must decide) or
        ``Deny(...)``; ``None`` when the call would be refused before the
        policy is asked (its arguments are invalid), the policy failed or
        answered nonsense, or a question or decision about another call
        stands under its key (running the call then reports that, and nobody
        should be asked). An adapter asks before handing the call to its
        framework's human-in-the-loop; the call itself asks again when it
        runs. The arguments, keys and ``turn`` are those :meth:`~sandrail.Toolset.call`
        would take.
        """
        prepared = self._prepare(
            name,
            arguments,
            call_id,
            operation_key,
            profile,
            None,
            None,
            reconcile_repeats,
            run_id,
            turn,
        )
        if isinstance(prepared, ToolResult):
            return None
        return await self._approvals.ask(prepared.request)

    def asked(
        self,
        name: str,
        arguments: object,
        *,
        call_id: str,
        operation_key: str,
        profile: Profile = "full",
        reconcile_repeats: bool = False,
        run_id: str | None = None,
        shown_as: str | None = None,
        turn: str | None = None,
    ) -> bool:
        """Whether a person has already been asked about this very call: a
        question about it (this tool, these arguments) is kept under its key,
        here or in the shared durable record, or a person already decided
        about its key (that decision stands, and running the call is checked
        against it: another call under the key is refused). An adapter whose framework
        pauses for the answer asks this *before* it runs the call: when the
        framework then hands the pause an answer at once (a saved run resumed
        after it was edited, so the call, or its key, changed since the
        question was shown), that answer was given to another question, and
        the call must not run on it. The arguments, keys and ``turn`` are those
        :meth:`~sandrail.Toolset.call` would take; ``False`` for a call the toolset would
        refuse before asking anyone.

        ``shown_as``: where the framework hands this call's answer back from
        (its place among the questions shown together: an answer given by
        position lands on whichever call holds that place now). An
        undecided question then counts as asked only where :meth:`~sandrail.Toolset.asking`
        kept it with the same ``shown_as``: a saved run whose calls were
        reordered after the questions were shown hands each answer to
        another call, and none of them runs on it."""
        prepared = self._prepare(
            name,
            arguments,
            call_id,
            operation_key,
            profile,
            None,
            None,
            reconcile_repeats,
            run_id,
            turn,
        )
        if isinstance(prepared, ToolResult):
            return False
        own = self._own_question(prepared)
        if own is not None and not own.covers(prepared.request, self._masks.secrets):
            return False  # asked about another call under its own key
        question = self._decisions.of(prepared.request)
        if question is None:
            return False
        if question.decision != "asked":
            # A decided key: its first decision stands, and is what running
            # the call checks it against (another call under it is refused).
            return True
        if not question.covers(prepared.request, self._masks.secrets):
            return False
        if shown_as is None:
            return True
        # Where this very call's question was shown: under the key it was
        # asked with (see asking), which a repeat does not share.
        own_key = attrs.evolve(prepared.request, operation_key=prepared.asked_key)
        return self._decisions.shown(own_key, shown_as)

    def asking(
        self,
        name: str,
        arguments: object,
        *,
        call_id: str,
        operation_key: str,
        profile: Profile = "full",
        shown_as: str | None = None,
    ) -> None:
        """A framework shows a person this call (a ``HumanInTheLoopMiddleware``
        that pauses before it runs, or an adapter pausing on the
        ``approval_required`` the call answered): keep the question under
        its key, here and in the shared durable record, so that
        :meth:`~sandrail.Toolset.asked` tells the answer to it apart from an answer handed to
        another call; with ``shown_as``, keep the place it was shown in too
        (see :meth:`~sandrail.Toolset.asked`). Say it once the question was really put to the
        person (the framework paused), not before: an answer the framework
        hands back at once was given to another question. A key already
        asked about keeps its first question (another call under it is not
        shown in any place); a call the toolset would refuse is not kept."""
        prepared = self._prepare(
            name, arguments, call_id, operation_key, profile, None, None, False, None
        )
        if isinstance(prepared, ToolResult):
            return
        self._decisions.ask(prepared.request)
        if shown_as is not None:
            self._decisions.show(prepared.request, shown_as)

    def approve(
        self,
        name: str,
        arguments: object,
        *,
        call_id: str,
        operation_key: str,
        profile: Profile = "full",
    ) -> ToolResult | None:
        """Keep a person's approval of this call, given through a framework's
        own gate that runs the call afterwards by itself, without
        ``approved=True`` (LangChain's ``HumanInTheLoopMiddleware``: see
        :func:`sandrail.adapters.langchain.human_in_the_loop`). The person
        saw these arguments, or wrote them, so the approval covers them as
        they are; it is kept as the key's decision, here and wherever the
        same durable record is shared, unless another decision came first
        (the first decision stands).

        Returns ``None`` when the approval stands (let the call run), else
        the result the model reads instead, the call not run: the rejection
        a person made first (``approval_rejected``), or ``approval_mismatch``
        when an approval of another call (other arguments) came first.
        Arguments the toolset would refuse are not kept (``None``: the call
        itself is refused when it runs). Raises ``ValueError`` for an
        unknown ``profile``."""
        prepared = self._prepare(
            name, arguments, call_id, operation_key, profile, None, None, False, None
        )
        if isinstance(prepared, ToolResult):
            return None
        return self._approval_of(prepared, True, True)[0]

    def rejection(
        self,
        reason: str | None = None,
        *,
        name: str | None = None,
        call_id: str | None = None,
        operation_key: str | None = None,
        arguments: object = None,
        profile: Profile = "full",
    ) -> ToolResult:
        """The result the model reads when a person rejected its call:
        ``error`` with ``executed: false`` and ``error_type``
        ``approval_rejected`` (nothing ran), what to do instead, the call
        it is about (``call_id`` and ``operation_key``, when given: of two
        identical calls, the one a person rejected), and the
        person's ``reason`` when given (values this toolset masks are masked
        in it, C17), within :attr:`~sandrail.Toolset.max_output_bytes`.

        Given the call's tool ``name``, ``call_id`` and ``operation_key``,
        the ownership record is asked first: when that key already launched
        (it was approved before, and is rejected now), the answer is never
        "nothing ran" (C5) but ``uncertain`` with the task's locator and
        ``error_type`` ``approval_rejected``: nothing more runs, and the
        model is pointed at the task to read (C6). With the call's
        ``arguments`` (in ``profile``'s shape), only a launch of these very
        arguments counts: another call that reused the key never ran (C3).

        Given ``name`` and ``operation_key``, the rejection is also kept as
        the person's decision about that key, unless an approval came first
        (the first decision stands): an approval of the key afterwards, here
        or wherever the same durable record is shared, runs nothing and is
        answered with this rejection (``docs/howto/approval.md``)."""
        rejected = rejection(
            self._max_output_bytes,
            reason,
            self._masks.secrets,
            call_id=call_id,
            operation_key=operation_key,
        )
        if name is None or operation_key is None or name not in self._ports:
            return rejected
        standing = self._decisions.decide(
            lookup(self._ports[name].definition(name), self._session_id, operation_key, call_id),
            "rejected",
        )
        known = self.launched(name, operation_key)
        approved_first = known is None and standing is not None and standing.decision == "approved"
        if approved_first:
            # An approval came first (another process holds it): its start
            # may be leaving now, under the task the key always runs as.
            known = OwnedCommand(
                task_id=task_of(self._session_id, self._owner, operation_key),
                operation_key=operation_key,
                sandbox_id=None,
                launched=False,
                ledger_epoch=None,
                launch_digest=standing.recorded if standing is not None else None,
            )
        if known is None:
            return rejected
        definition = self._ports[name].definition(name)
        if arguments is not None:  # a launch of these very arguments (C3)
            converted = self._converted(definition, profile, arguments)
            if isinstance(converted, ToolResult) or not alike(
                known, name, converted, self._masks.secrets
            ):
                return rejected
        try:
            identity = self._identity() if callable(self._identity) else self._identity
        except Exception:
            identity = None
        request = lookup(definition, self._session_id, operation_key, call_id, identity)
        return refused_after_launch(
            ErrorCode.APPROVAL_REJECTED,
            known,
            request,
            reason=rejected.content.get("outcome_reason"),
            readable="read_command_output" in self._ports,
            max_output_bytes=self._max_output_bytes,
            approved_first=approved_first,
        )
