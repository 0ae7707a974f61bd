"""One tool call in flight: its locator so far, whether a side effect may
have left, and the verdicts that follow from that (C5, C6, C9, C11, C12).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import Any, Final

import attrs

from ._budget import SHRINKABLE_FIELDS, BudgetError, Excerpt, fit_to_budget
from ._canonical import CanonicalJSONError, canonical_json
from ._contents import (
    _output_budget_note,
    _uncertain_content,
    cut_output_instruction,
    usable_artifact,
)
from ._effects import (
    AppendArtifact,
    AuthorityReport,
    CheckAuthority,
    CloseArtifact,
    Delivery,
    Effect,
    EffectFailure,
    OpenArtifact,
)
from ._guard import Continue, Phase, Refuse, decide, observe
from ._masking import Redactions, mask_text, redaction_secrets
from ._results import (
    ArtifactRef,
    BackgroundCommandRef,
    ErrorCode,
    ToolResult,
)
from ._snapshot import PortSettings, _refuse, _Snapshot
from ._tool_record import ToolRecord

__all__ = ["ALL_WELL", "BrokenArtifactError", "CallState", "StoppedError", "bound_result"]

_MAX_SAFE: Final = 2**53 - 1


class StoppedError(Exception):
    """A step ends the call with ``result``: the guard after it said stop, or
    what it got (a failure, a refusal, an answer of the wrong kind) leaves
    nothing more to do. Raised by the steps of a program, caught where the
    program returns its result."""

    def __init__(self, result: ToolResult) -> None:
        super().__init__(result)
        self.result = result


class BrokenArtifactError(Exception):
    """An artifact cannot be completed as asked; it is discarded, the call
    goes on without it."""


ALL_WELL: Final = AuthorityReport(aborted=False, drifted=False, authority_held=True)
"""The guard's observation when all is well: an interpreter that answers
with this very object lets the program decide without reading it."""


def _all_well(report: object) -> bool:
    """Whether a guard observation is all well: no abort, no drift, the
    authority held."""
    return (
        type(report) is AuthorityReport
        and report.authority_held
        and not report.aborted
        and not report.drifted
    )


def _discard(key: str) -> Generator[Effect, Any, None]:
    # Should this fail, the port aborts what a call left open when it ends.
    with contextlib.suppress(EffectFailure):
        yield CloseArtifact(key=key, keep=False)


class CallState:
    """The state one tool call carries between steps: what is known of its
    locator and whether a side effect may have been dispatched (its
    :class:`Phase`, changed only by :meth:`dispatched`)."""

    def __init__(
        self,
        record: ToolRecord,
        snap: _Snapshot,
        settings: PortSettings,
        secrets: frozenset[str],
        own_task: str,
    ) -> None:
        self.record = record
        """The tool's record (:mod:`._tools`): what the steps ask of the tool."""
        self.snap = snap
        self.settings = settings
        self.own_task = own_task
        """The task id this call's key derives (C1), computed once, at
        admission: a launch launches it."""
        env = snap.arguments.get("env")
        self.secrets = secrets | redaction_secrets(env) if env else secrets
        self.phase = Phase.BEFORE_DISPATCH
        self.sandbox_id: str | None = None
        self.task_id: str | None = None
        self.observed: str | None = None
        self.background_ref: BackgroundCommandRef | None = None
        self.output_stored = False
        """The output was already streamed to the artifact store (C15), so
        :meth:`finish` must not store the content again; ``output_artifact``
        is the store's reference, or ``None`` if the store failed."""
        self.output_artifact: ArtifactRef | None = None
        self.check = CheckAuthority(request_digest=snap.digest)
        """The guard's effect (the same every time: the request it checks)."""

    def dispatched(self) -> None:
        """A side-effect request may have reached the sandbox: from now on
        every failure is ``uncertain`` (C6). The one place the phase
        changes, and it never changes back."""
        self.phase = Phase.AFTER_DISPATCH

    # -- verdicts ----------------------------------------------------------

    @property
    def readable(self) -> bool:
        """Whether this port offers ``read_command_output``: what a result
        may tell the model to call (it can only call the tools it has)."""
        return self.settings.definition("read_command_output") is not None

    def uncertain(self, reason: ErrorCode) -> ToolResult:
        """C6: the full locator, never ``executed: false``, never a retry."""
        task = self.task_id
        instruction = self.record.uncertain_words(self.readable and task is not None)
        content = _uncertain_content(
            self.snap, reason, self.observed, self.sandbox_id, task, instruction
        )
        return ToolResult(
            status="uncertain",
            content=self.fit(content),
            background_command_ref=self.background_ref,
        )

    def fit(self, content: dict[str, Any]) -> dict[str, Any]:
        if self.snap.governed:
            return content
        # Admission reserved room for every fixed part, so this cannot raise
        # for contents built by this module; BudgetError here is a bug.
        return fit_to_budget(content, self.settings.max_output_bytes)

    def failed(self, failure: EffectFailure, *, side_effect: bool) -> ToolResult:
        """What an effect failure means, given what was dispatched (C5, C6, C11)."""
        if self.phase is Phase.AFTER_DISPATCH:
            reason = ErrorCode.ABORTED if failure.aborted else ErrorCode.EVIDENCE_INCOMPLETE
            return self.uncertain(reason)
        if side_effect and failure.delivery is Delivery.MAYBE_SENT:
            self.dispatched()
            reason = ErrorCode.ABORTED if failure.aborted else ErrorCode.SANDBOX_OUTCOME_UNKNOWN
            return self.uncertain(reason)
        if failure.aborted:
            return _refuse(ErrorCode.CANCELED, "The call was aborted before anything ran.")
        if failure.refused and failure.delivery is Delivery.NOT_SENT:
            return _refuse(
                ErrorCode.BACKEND_REFUSED,
                "The sandbox provider refused the harness's request itself (its API key or "
                "its settings); nothing ran, and repeating the call will not help. Tell the "
                "user: the harness must fix its configuration.",
            )
        return _refuse(
            ErrorCode.SANDBOX_UNAVAILABLE if side_effect else ErrorCode.READ_FAILED,
            "The sandbox could not be reached; nothing ran. A retry with the same "
            "operation key is safe, but reaches nothing if the sandbox is gone "
            "(sandbox_status says so): this session makes no second sandbox.",
        )

    def guard(self) -> Generator[Effect, Any, ToolResult | None]:
        """Check abort, drift and authority now (C9, C11): the result that
        ends the call, or ``None`` to go on."""
        return self.stopped_by((yield self.check))

    def stopped_by(self, report: object) -> ToolResult | None:
        """What the guard's observation ``report`` (the answer to
        :attr:`check`) means: the result that ends the call, or ``None`` to
        go on. A step writes ``stop = call.stopped_by((yield call.check))``:
        :meth:`guard` without a generator of its own, for the hot path."""
        if report is ALL_WELL or _all_well(report):
            return None  # the common case, decided without the table
        return self._stop_for(report)

    def go_on(self) -> Generator[Effect, Any, None]:
        """:meth:`guard` as a step: raises :class:`StoppedError` when it
        says stop."""
        report = yield self.check
        if _all_well(report):
            return  # the common case, decided without the table
        stop = self._stop_for(report)
        if stop is not None:
            raise StoppedError(stop)

    def went_on(self, report: object) -> None:
        """The guard's observation ``report`` (the answer to :attr:`check`)
        as a step: raises :class:`StoppedError` when it says stop. A step
        writes ``call.went_on((yield call.check))``: :meth:`go_on` without
        a generator of its own, for the hot path."""
        if report is ALL_WELL or _all_well(report):
            return  # the common case (the port answers with this very object)
        stop = self._stop_for(report)
        if stop is not None:
            raise StoppedError(stop)

    def _stop_for(self, report: object) -> ToolResult | None:
        """What a guard observation means now (the table, C9, C11)."""
        if not isinstance(report, AuthorityReport):
            report = AuthorityReport(aborted=False, drifted=False, authority_held=False)
        elif _all_well(report):
            return None  # go on, before and after dispatch alike
        verdict = decide(
            self.phase,
            observe(
                aborted=report.aborted,
                drifted=report.drifted,
                authority_held=report.authority_held,
            ),
        )
        if isinstance(verdict, Continue):
            return None
        if isinstance(verdict, Refuse):
            return _refuse(verdict.code, "Nothing ran. Check the harness's authority and retry.")
        return self.uncertain(verdict.reason)

    def settle(self, result: ToolResult) -> Generator[Effect, Any, ToolResult]:
        """``result``, unless the guard after the step that led to it says
        otherwise (C9, C11: checked after every external step, whatever the
        step answered)."""
        stop = yield from self.guard()
        return result if stop is None else stop

    # -- artifacts ------------------------------------------------------------

    @property
    def artifact_key(self) -> str:
        return f"{self.snap.operation_key}:{self.snap.call_id}:output"

    def step(self, effect: Effect) -> Generator[Effect, Any, Any]:
        """``effect``'s outcome, then the guard (C9). Raises
        :class:`StoppedError` when the guard says stop; an effect's failure
        propagates."""
        outcome = yield effect
        yield from self.go_on()
        return outcome

    def append_artifact(self, text: str) -> Generator[Effect, Any, None]:
        """Add ``text`` to this call's open artifact, then guard."""
        yield from self.step(AppendArtifact(key=self.artifact_key, text=text))

    def store_artifact(
        self, write: Callable[[], Generator[Effect, Any, None]]
    ) -> Generator[Effect, Any, ToolResult | None]:
        """Keep the full result content in the artifact store (C15): open an
        artifact, let ``write`` append its text, then commit it. The guard
        runs after every step (C9); the store is told to commit only after
        the last piece passed it, so a stop, a failed step or a ``write``
        that raises :class:`BrokenArtifactError` discards what was written.
        Sets ``output_stored``, and ``output_artifact`` when the store kept a
        usable artifact. Returns the result that ends the call when a guard
        says stop, else ``None`` (the call goes on, with or without one)."""
        self.output_stored = True
        key = self.artifact_key
        try:
            yield from self.step(OpenArtifact(key=key))
        except EffectFailure:
            return (yield from self.guard())
        except StoppedError as stopped:
            yield from _discard(key)
            return stopped.result
        try:
            yield from write()
            stored = yield CloseArtifact(key=key, keep=True)
        except StoppedError as stopped:
            yield from _discard(key)
            return stopped.result
        except (EffectFailure, BrokenArtifactError):
            yield from _discard(key)
            return (yield from self.guard())
        if isinstance(stored, ArtifactRef) and usable_artifact(stored):
            self.output_artifact = stored
        return (yield from self.guard())

    def masked(self, content: dict[str, Any]) -> dict[str, Any]:
        """``content`` with this call's secrets masked in its presentation
        text (stdout, stderr, the command itself): a copy (C17)."""
        if not self.secrets:
            return content
        masked = dict(content)
        redactions = Redactions(self.secrets)
        for key in SHRINKABLE_FIELDS:
            if isinstance(masked.get(key), str):
                masked[key] = mask_text(masked[key], redactions)
        return masked

    def finish(self, result: ToolResult) -> Generator[Effect, Any, ToolResult]:
        """Guard, then fit the content to the budget; when text must be cut
        and an artifact store exists, keep the full content there (C12, C15).
        """
        stop = self.stopped_by((yield self.check))
        if stop is not None:
            return stop
        content = dict(result.content)
        if self.secrets:
            # A command may print an env value it was given; the model must
            # not see it (C17). Masked before the budget measures anything.
            content = self.masked(content)
            result = attrs.evolve(result, content=content)
            content = dict(content)
        if self.snap.governed:
            return result
        budget = self.settings.max_output_bytes
        try:
            if _fits_whole(content, budget):
                return result  # the common case: nothing to cut
            fitted = fit_to_budget(content, budget)
        except (BudgetError, CanonicalJSONError):
            return self.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
        if all(fitted.get(key) is content.get(key) for key in SHRINKABLE_FIELDS):
            return result  # nothing was cut
        if self.settings.artifacts_enabled and not self.output_stored:
            text = canonical_json(content).decode("utf-8")
            stop = yield from self.store_artifact(lambda: self.append_artifact(text))
            if stop is not None:
                return stop
        artifact = self.output_artifact
        content["output_budget"] = _output_budget_note(artifact)
        said = cut_output_instruction(self.readable and isinstance(content.get("task_id"), str))
        if said:
            earlier = content.get("instruction")
            content["instruction"] = f"{earlier} {said}" if isinstance(earlier, str) else said
        try:
            fitted = fit_to_budget(content, budget)
        except BudgetError:
            return self.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)
        return attrs.evolve(
            result,
            content=fitted,
            artifact_refs=result.artifact_refs + ((artifact,) if artifact else ()),
        )


def _fits_whole(content: dict[str, Any], budget: int) -> bool:
    """Whether ``content`` fits ``budget`` as it is.

    Strategy: most results are a few hundred bytes against a budget of
    thousands, so a bound on the canonical size (every character escaped at
    its worst, six bytes) settles them without encoding. Otherwise the
    canonical JSON is measured, but only when no text is longer than the
    budget in characters (each costs at least a byte, so a longer one cannot
    fit, and huge output is never encoded whole just to learn that). Raises
    ``CanonicalJSONError`` for content with no canonical form. A text read
    only at its ends (an :class:`Excerpt`) never fits as it is: it is always
    cut, and its marker says how much was never read."""
    bound = _content_bound(content)
    if bound < 0:
        return False
    if bound and bound <= budget:
        return True
    for key in SHRINKABLE_FIELDS:
        text = content.get(key)
        if isinstance(text, str) and len(text) > budget:
            return False
    return len(canonical_json(content)) <= budget


def _content_bound(content: dict[str, Any]) -> int:
    """:func:`_size_bound` of ``content``, walked flat (a result's content
    is mostly top-level scalars): ``-1`` when a shrinkable field is an
    :class:`Excerpt` (it never fits as it is), ``0`` when no bound is known."""
    total = 1
    for key, value in content.items():
        kind = type(value)
        if kind is str:
            size = 6 * len(value) + 2
        elif (
            value is None
            or kind is bool
            or kind is float
            or (kind is int and -_MAX_SAFE <= value <= _MAX_SAFE)
        ):
            size = _NUMBER_BOUND
        elif kind is Excerpt and key in SHRINKABLE_FIELDS:
            return -1
        else:
            inner = _size_bound(value)
            if inner is None:
                return 0 if not _excerpt_in(content) else -1
            size = inner
        if type(key) is not str:
            return 0 if not _excerpt_in(content) else -1
        total += 6 * len(key) + 4 + size
    return total + 1


def _excerpt_in(content: dict[str, Any]) -> bool:
    """Whether a shrinkable field of ``content`` is an :class:`Excerpt`."""
    return any(isinstance(content.get(key), Excerpt) for key in SHRINKABLE_FIELDS)


_NUMBER_BOUND: Final = 26
"""No safe integer, float, ``true``, ``false`` or ``null`` takes more bytes."""


def _size_bound(value: object) -> int | None:
    """An upper bound on the canonical size of plain JSON ``value``, or
    ``None`` for anything else (then only encoding can tell)."""
    kind = type(value)
    if kind is str:
        return 6 * len(value) + 2  # type: ignore[arg-type]
    if value is None or kind is bool or kind is float:
        return _NUMBER_BOUND
    if kind is int:
        return _NUMBER_BOUND if -_MAX_SAFE <= value <= _MAX_SAFE else None  # type: ignore[operator]
    if kind is dict:
        total = 1
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                return None
            inner = _size_bound(item)
            if inner is None:
                return None
            total += 6 * len(key) + 4 + inner
        return total + 1
    if kind is list:
        total = 1
        for item in value:  # type: ignore[attr-defined]
            inner = _size_bound(item)
            if inner is None:
                return None
            total += inner + 1
        return total + 1
    return None


def bound_result(result: ToolResult, max_output_bytes: int) -> ToolResult:
    """The last line of C12: fit any result's content, whatever built it.

    Results built here already fit; this catches text the harness supplied
    (a deny reason, say). If even the fixed part cannot fit, the result keeps
    its status and code and drops everything else but ``executed``.
    """
    try:
        if len(canonical_json(result.content)) <= max_output_bytes:
            return result
        return attrs.evolve(result, content=fit_to_budget(result.content, max_output_bytes))
    except (BudgetError, CanonicalJSONError):
        keep = ("status", "ok", "error_type", "executed", "evidence_incomplete")
        bare = {key: result.content[key] for key in keep if key in result.content}
        return attrs.evolve(result, content=bare)
