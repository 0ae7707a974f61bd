"""Deliberately broken variants of the core the checks must catch.

Each mutant patches private names of :mod:`sandrail.core._programs`,
:mod:`sandrail.core._launch`, :mod:`sandrail.core._owned` or
:mod:`sandrail.core._call`, or wraps the programs of some tool records
(:func:`_programs_wrapped`: a wrapper takes a program and gives a program),
for the length of a ``with`` block and restores them after. A mutant that no check
catches means the campaign cannot see that kind of bug: a failure.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any
from unittest import mock

import attrs

from sandrail.core import (
    BudgetError,
    Cancel,
    CancelRequested,
    CommandState,
    Delivery,
    Effect,
    EffectFailure,
    ErrorCode,
    OutputChunk,
    OwnedCommand,
    Read,
    ResolveOwned,
    SandboxReady,
    Start,
    ToolKind,
    ToolResult,
    canonical_json,
    error_result,
)
from sandrail.core import _call as call_module
from sandrail.core import _launch as launches
from sandrail.core import _owned as owned
from sandrail.core import _programs as programs
from sandrail.core import _tools as tools
from sandrail.core._budget import fit_to_budget as real_fit_to_budget
from sandrail.core._guard import Continue, Observation, Phase, Verdict
from sandrail.core._guard import decide as real_decide
from sandrail.core._identity import task_id as derive_task_id
from sandrail.core._masking import mask_text
from sandrail.core._plan import SessionPlan
from sandrail.interpreters import _masking as masking
from sandrail.interpreters._drivers import Step, layered

__all__ = ["MUTANTS", "Mutant"]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_Program = Generator[Effect, Any, ToolResult]


@attrs.frozen
class Mutant:
    """A named broken core: ``expected`` is the contract line that must catch it."""

    name: str
    description: str
    expected: str
    patch: Callable[[], contextlib.AbstractContextManager[None]]


def _proxy(
    inner: _Program,
    answer: Callable[[Effect], tuple[bool, Any]],
    after_failure: Callable[[Effect], Iterator[Effect]],
) -> _Program:
    """``inner`` in a layer (as the port's own are) in which ``answer`` may
    answer an effect itself (``(True, outcome)``) and ``after_failure`` may
    yield more effects before a failure is thrown back in."""

    def step(effect: Effect) -> Step:
        handled, outcome = answer(effect)
        return _answered(outcome) if handled else _passed_on(effect)

    def _passed_on(effect: Effect) -> Step:
        try:
            return (yield effect)
        except EffectFailure:
            for extra in after_failure(effect):
                with contextlib.suppress(EffectFailure):
                    yield extra
            raise

    return layered(inner, step)


def _answered(outcome: Any) -> Step:
    """A step that answers at once, yielding nothing."""
    yield from ()
    return outcome


def _programs_wrapped(
    kind: ToolKind, wrap: Callable[[Callable[[Any], _Program]], Callable[[Any], _Program]]
) -> contextlib.AbstractContextManager[Any]:
    """The records of every tool of ``kind`` with their programs wrapped by
    ``wrap``, in place of the real ones while the block runs."""
    swapped = {
        name: attrs.evolve(record, program=wrap(record.program))
        for name, record in tools.TOOLS.items()
        if record.kind is kind
    }
    return mock.patch.dict(tools._RECORDS, swapped)


def _unanswered(effect: Effect) -> tuple[bool, Any]:
    return False, None


def _nothing_more(effect: Effect) -> Iterator[Effect]:
    return iter(())


@contextlib.contextmanager
def _relaunch_after_uncertain() -> Iterator[None]:
    """(a) After a failed Start, start the command again under a new task id."""

    def relaunch(effect: Effect) -> Iterator[Effect]:
        if isinstance(effect, Start):
            other = hashlib.sha256(effect.task_id.encode()).hexdigest()
            yield attrs.evolve(effect, task_id=other)

    def wrap(real: Callable[[Any], _Program]) -> Callable[[Any], _Program]:
        return lambda call: _proxy(real(call), _unanswered, relaunch)

    with _programs_wrapped(ToolKind.LAUNCHES, wrap):
        yield


@contextlib.contextmanager
def _maybe_sent_is_not_executed() -> Iterator[None]:
    """(b) A failure that may have reached the sandbox is reported as nothing ran."""
    real = call_module.CallState.failed

    def failed(self: Any, failure: EffectFailure, *, side_effect: bool) -> ToolResult:
        if failure.delivery is Delivery.MAYBE_SENT and not failure.aborted:
            return error_result(ErrorCode.SANDBOX_UNAVAILABLE, instruction="Nothing ran.")
        return real(self, failure, side_effect=side_effect)

    with mock.patch.object(call_module.CallState, "failed", failed):
        yield


@contextlib.contextmanager
def _skip_post_dispatch_authority() -> Iterator[None]:
    """(c) Once something was dispatched, stop asking about authority and drift."""
    real = real_decide

    def decide(phase: Phase, observation: Observation) -> Verdict:
        if phase is Phase.AFTER_DISPATCH and observation is not Observation.ABORTED:
            return Continue()
        return real(phase, observation)

    with mock.patch.object(call_module, "decide", decide):
        yield


@contextlib.contextmanager
def _truncate_identity() -> Iterator[None]:
    """(d) Admit every identity, and cut identity fields when nothing else fits."""
    real = real_fit_to_budget

    def fit(content: Mapping[str, Any], max_output_bytes: int, **options: Any) -> dict[str, Any]:
        cut = dict(content)
        while True:
            try:
                return real(cut, max_output_bytes, **options)
            except BudgetError:
                texts = [key for key, value in cut.items() if isinstance(value, str)]
                longest = max(texts, key=lambda key: len(cut[key]))
                if len(cut[longest]) < 2:
                    raise
                cut[longest] = cut[longest][: len(cut[longest]) // 2]

    def admission_size(plan: Any, record: Any, snap: Any) -> int:
        return 0

    with (
        mock.patch.object(SessionPlan, "admission_size", admission_size),
        mock.patch.object(call_module, "fit_to_budget", fit),
    ):
        yield


@contextlib.contextmanager
def _cut_identity_to_fit() -> Iterator[None]:
    """(d') Admission intact, but a result that must be cut loses half its
    operation key first, as a budget that treats identity as text would."""
    real = real_fit_to_budget

    def fit(content: Mapping[str, Any], max_output_bytes: int, **options: Any) -> dict[str, Any]:
        cut = dict(content)
        key = cut.get("operation_key")
        if isinstance(key, str) and len(canonical_json(cut)) > max_output_bytes:
            cut["operation_key"] = key[: max(1, len(key) // 2)]
        return real(cut, max_output_bytes, **options)

    with mock.patch.object(call_module, "fit_to_budget", fit):
        yield


@contextlib.contextmanager
def _show_env_values() -> Iterator[None]:
    """(g) Leave env values a command printed in its output."""

    def unmasked(asked: Read, widened: Read, chunk: OutputChunk, redactions: Any) -> OutputChunk:
        return chunk

    with (
        mock.patch.object(masking, "widen", lambda read, redactions, **_: read),
        mock.patch.object(masking, "mask_chunk", unmasked),
        mock.patch.object(call_module, "mask_text", lambda text, redactions: text),
    ):
        yield


@contextlib.contextmanager
def _mask_per_page() -> Iterator[None]:
    """(i) Mask each page of output on its own, as if a secret could not
    straddle two pages."""

    def per_page(asked: Read, widened: Read, chunk: OutputChunk, redactions: Any) -> OutputChunk:
        return attrs.evolve(
            chunk,
            stdout=mask_text(chunk.stdout, redactions),
            stderr=mask_text(chunk.stderr, redactions),
        )

    with (
        mock.patch.object(masking, "widen", lambda read, redactions, **_: read),
        mock.patch.object(masking, "mask_chunk", per_page),
    ):
        yield


@contextlib.contextmanager
def _claim_epoch_of_now() -> Iterator[None]:
    """(l) A retry proves "never claimed" with the sandbox's ledger epoch of
    now, not the one its first start was sent under."""

    def launch(inner: _Program) -> _Program:
        now: str | None = None
        try:
            effect = next(inner)
            while True:
                if isinstance(effect, Start) and effect.expect_claim:
                    effect = attrs.evolve(effect, claim_epoch=now)
                try:
                    outcome = yield effect
                except EffectFailure as failure:
                    effect = inner.throw(failure)
                    continue
                if isinstance(outcome, SandboxReady):
                    now = outcome.ledger_epoch
                effect = inner.send(outcome)
        except StopIteration as stop:
            result: ToolResult = stop.value
            return result
        finally:
            inner.close()

    def wrap(real: Callable[[Any], _Program]) -> Callable[[Any], _Program]:
        return lambda call: launch(real(call))

    with _programs_wrapped(ToolKind.LAUNCHES, wrap):
        yield


@contextlib.contextmanager
def _starts_rewritten(rewrite: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """Every Start the launch program makes, its fields passed through ``rewrite`` first."""

    def start(**fields: Any) -> Start:
        rewrite(fields)
        return Start(**fields)

    with mock.patch.object(launches, "Start", start):
        yield


def _owned_commands_answered(
    answer: Callable[[Effect], tuple[bool, Any]],
) -> contextlib.AbstractContextManager[Any]:
    """The read/stop program of an owned task, with ``answer`` answering
    effects first (see :func:`_proxy`)."""

    def wrap(real: Callable[[Any], _Program]) -> Callable[[Any], _Program]:
        return lambda call: _proxy(real(call), answer, _nothing_more)

    return _programs_wrapped(ToolKind.OWNED_TASK, wrap)


def _first_start_without_epoch() -> contextlib.AbstractContextManager[None]:
    """(m) The first start of a task carries no ledger epoch: a copy held in
    the network can launch again after the ledger was lost."""

    def drop_epoch(fields: dict[str, Any]) -> None:
        if not fields.get("expect_claim"):
            fields["claim_epoch"] = None

    return _starts_rewritten(drop_epoch)


@contextlib.contextmanager
def _stop_without_cancel() -> Iterator[None]:
    """(j) Report a stop as done without sending the Cancel."""

    def pretend(effect: Effect) -> tuple[bool, Any]:
        if isinstance(effect, Cancel):
            return True, CancelRequested(state=CommandState(status="canceled", exit_code=143))
        return False, None

    with _owned_commands_answered(pretend):
        yield


@contextlib.contextmanager
def _uncertain_after_dispatch() -> Iterator[None]:
    """(k) Answer uncertain whenever anything was dispatched: keeps every
    contract line, and tells the harness nothing."""
    real = call_module.CallState.finish

    def finish(self: Any, result: ToolResult) -> Generator[Effect, Any, ToolResult]:
        if self.phase is Phase.AFTER_DISPATCH:
            return self.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)  # type: ignore[no-any-return]
        return (yield from real(self, result))

    with mock.patch.object(call_module.CallState, "finish", finish):
        yield


def _ignore_fence() -> contextlib.AbstractContextManager[None]:
    """(e) Send every Start without its execution fence."""
    return _starts_rewritten(lambda fields: fields.update(fence=None))


@contextlib.contextmanager
def _skip_ownership() -> Iterator[None]:
    """(f) Read or stop any task id asked for, whoever launched it."""
    real_task_id = derive_task_id
    real_planned_task_id = SessionPlan.task_id

    def claim(effect: Effect) -> tuple[bool, Any]:
        if isinstance(effect, ResolveOwned):
            owned = OwnedCommand(
                task_id=effect.task_id, operation_key=effect.task_id, sandbox_id=None
            )
            return True, owned
        return False, None

    def task_id(session_id: str, owner: Any, operation_key: str) -> str:
        # The derivation check passes for any task id used as its own key.
        if _HEX64.fullmatch(operation_key):
            return operation_key
        return real_task_id(session_id, owner, operation_key)

    def planned_task_id(plan: Any, operation_key: str) -> str:
        if _HEX64.fullmatch(operation_key):
            return operation_key
        return real_planned_task_id(plan, operation_key)

    with (
        _owned_commands_answered(claim),
        mock.patch.object(programs, "task_id", task_id),
        mock.patch.object(SessionPlan, "task_id", planned_task_id),
        mock.patch.object(owned, "task_id", task_id),
    ):
        yield


@contextlib.contextmanager
def _nothing_ran_after_launch() -> Iterator[None]:
    """(n) A retry whose Ensure fails says "nothing ran, may be retried",
    whatever an earlier call of its key started."""

    def failed(call: Any, failure: EffectFailure, wanted: str) -> _Program:
        result: ToolResult = call.failed(failure, side_effect=True)
        yield from ()
        return result

    with mock.patch.object(launches, "_failed_before_start", failed):
        yield


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "relaunch_after_uncertain",
        "on a failed Start, start again under another task id",
        "C2",
        _relaunch_after_uncertain,
    ),
    Mutant(
        "maybe_sent_not_executed",
        "a failure that may have reached the sandbox becomes error, executed false",
        "C5",
        _maybe_sent_is_not_executed,
    ),
    Mutant(
        "skip_post_dispatch_authority",
        "no authority or drift check after the first dispatch",
        "C9",
        _skip_post_dispatch_authority,
    ),
    Mutant(
        "truncate_identity",
        "admit any identity and cut identity fields to fit",
        "C14",
        _truncate_identity,
    ),
    Mutant(
        "cut_identity_to_fit",
        "a result that must be cut loses half its operation key",
        "C13",
        _cut_identity_to_fit,
    ),
    Mutant("ignore_fence", "every Start goes out with fence=None", "C10", _ignore_fence),
    Mutant(
        "show_env_values",
        "output that prints an env value is shown unmasked",
        "C17",
        _show_env_values,
    ),
    Mutant(
        "mask_per_page",
        "each page of output is masked on its own: a secret split across pages shows",
        "C17",
        _mask_per_page,
    ),
    Mutant(
        "skip_ownership_check",
        "read or stop any task id, another session's included",
        "C4",
        _skip_ownership,
    ),
    Mutant(
        "claim_epoch_of_now",
        "a retry proves 'never claimed' with the ledger epoch of now, not of its first start",
        "C2",
        _claim_epoch_of_now,
    ),
    Mutant(
        "first_start_without_epoch",
        "the first start carries no ledger epoch: a late copy launches after a wipe",
        "C2",
        _first_start_without_epoch,
    ),
    Mutant(
        "nothing_ran_after_launch",
        "a retry whose Ensure fails says nothing ran, though its key's task launched",
        "C6",
        _nothing_ran_after_launch,
    ),
    Mutant(
        "stop_without_cancel",
        "a stop reports the command canceled without sending the Cancel",
        "C18",
        _stop_without_cancel,
    ),
    Mutant(
        "uncertain_after_dispatch",
        "every call that dispatched anything answers uncertain, retries included",
        "decisive",
        _uncertain_after_dispatch,
    ),
)
