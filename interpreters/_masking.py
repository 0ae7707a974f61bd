"""Masked reads: a layer that answers the ``Read`` effects of a program
with secrets masked across page boundaries (C17; the rules are in
:mod:`sandrail.core._masking`).

The port wraps every call's program in :func:`masked_reads`, below any
recorder's layer, so that neither the core nor a cassette ever holds a
secret or a piece of one. Every other effect passes through untouched. A
layer (:func:`~sandrail.interpreters._drivers.layered`) never awaits, so
this one serves synchronous and asynchronous calls alike.

Strategy: one generator, :func:`_masked_read`, decides which reads to make
and what the page is; the driver of the call answers them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Final

from sandrail.core import (
    Delivery,
    EffectFailure,
    MaskingError,
    NeedMoreOutput,
    OutputChunk,
    Program,
    Read,
    Redactions,
    mask_chunk,
    unexpected_failure,
    widen,
)
from sandrail.interpreters._drivers import layered

__all__ = ["masked_reads"]

_MAX_ROUNDS: Final = 8
"""Widenings of one read before giving up on placing the page (only a chain
of overlapping secrets longer than the whole read gets there)."""

_Steps = Generator[Read, Any, Any]


def _masked_read(read: Read, redactions: Redactions) -> _Steps:
    """The reads that answer ``read`` with secrets masked; returns the answer."""
    widened = widen(read, redactions)
    chunk: Any = None
    for _ in range(_MAX_ROUNDS):
        chunk = yield widened
        if not isinstance(chunk, OutputChunk):
            return chunk  # the core judges an answer of the wrong type
        try:
            answer = mask_chunk(read, widened, chunk, redactions)
        except MaskingError as exc:
            raise EffectFailure(Delivery.MAYBE_SENT, f"Read: {exc}") from None
        if not isinstance(answer, NeedMoreOutput):
            return answer
        widened = widen(read, redactions, extra=answer.max_bytes - widened.max_bytes)
    # Nothing could be shown without showing part of a secret: an empty page
    # that has not advanced (the core reports that as incomplete evidence).
    return OutputChunk(
        stdout="",
        stderr="",
        next_stdout_cursor=read.stdout_cursor,
        next_stderr_cursor=read.stderr_cursor,
        more=True,
        state=chunk.state,
        stdout_start=read.stdout_cursor,
        stderr_start=read.stderr_cursor,
    )


def _sanitized_read(read: Read, redactions: Redactions) -> _Steps:
    """The read that answers ``read`` when there is no secret yet: the page
    is the answer, only sanitized (the core judges an answer of the wrong
    type). Text that does not match its cursors fails the read as any
    unexpected error of its interpreter would."""
    outcome = yield read
    if not isinstance(outcome, OutputChunk):
        return outcome
    try:
        answer = mask_chunk(read, read, outcome, redactions)
    except MaskingError as exc:
        raise unexpected_failure(read, exc) from exc
    assert isinstance(answer, OutputChunk)  # without secrets, never NeedMoreOutput
    return answer


def masked_reads(program: Program, redactions: Callable[[], Redactions]) -> Program:
    """``program`` with every ``Read`` answered through :func:`mask_chunk`.

    ``redactions`` is asked for the current secrets at each read (a port's
    set grows as calls pass env values). Without secrets a read still passes
    through :func:`mask_chunk`, which turns undecodable bytes into U+FFFD.
    """

    def step(effect: object) -> _Steps | None:
        if type(effect) is not Read and not isinstance(effect, Read):
            return None
        current = redactions()
        if not current:
            return _sanitized_read(effect, current)
        return _masked_read(effect, current)

    return layered(program, step)
