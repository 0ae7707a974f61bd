"""Masked reads: a wrapper that answers ``Read`` effects with secrets masked
across page boundaries (C17; the rules are in :mod:`sandrail.core._masking`).

The port wraps its backend in one of these for every call, below any
recorder, so that neither the core nor a cassette ever holds a secret or a
piece of one. Every other effect passes through untouched. Works with
synchronous and asynchronous backends alike: the wrapper answers in kind.

Strategy: one generator, :func:`_masked_read`, decides which reads to make
and what the page is; :meth:`MaskedReads.__call__` and
:meth:`MaskedReads._finish_async` are its two drivers, alike but for
awaiting the backend's answer (the pattern of the tool programs' drivers).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Final

from sandrail.core import (
    Delivery,
    Effect,
    EffectFailure,
    MaskingError,
    NeedMoreOutput,
    OutputChunk,
    Read,
    Redactions,
    mask_chunk,
    widen,
)

__all__ = ["MaskedReads"]

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


def _sanitized(read: Read, outcome: Any, redactions: Redactions) -> Any:
    """A page read without secrets: its text sanitized (the core judges an
    answer of the wrong type)."""
    if not isinstance(outcome, OutputChunk):
        return outcome
    answer = mask_chunk(read, read, outcome, redactions)
    assert isinstance(answer, OutputChunk)  # without secrets, never NeedMoreOutput
    return answer


async def _sanitize_async(read: Read, outcome: Awaitable[Any], redactions: Redactions) -> Any:
    return _sanitized(read, await outcome, redactions)


class MaskedReads:
    """``inner`` with every ``Read`` answered through :func:`mask_chunk`.

    ``redactions`` is asked for the current secrets at each read (a port's
    set grows as calls pass env values). Without secrets a read still passes
    through :func:`mask_chunk`, which turns undecodable bytes into U+FFFD.
    """

    def __init__(
        self, inner: Callable[[Effect], Any], redactions: Callable[[], Redactions]
    ) -> None:
        self._inner = inner
        self._redactions = redactions

    def __call__(self, effect: Effect) -> Any:
        if type(effect) is not Read and not isinstance(effect, Read):
            return self._inner(effect)
        redactions = self._redactions()
        if not redactions:
            # No secret yet: the page is the answer, only sanitized.
            outcome = self._inner(effect)
            if inspect.isawaitable(outcome):
                return _sanitize_async(effect, outcome, redactions)
            return _sanitized(effect, outcome, redactions)
        steps = _masked_read(effect, redactions)
        widened = next(steps)
        outcome = self._inner(widened)
        if inspect.isawaitable(outcome):
            return self._finish_async(steps, outcome)
        while True:
            try:
                widened = steps.send(outcome)
            except StopIteration as done:
                return done.value
            outcome = self._inner(widened)

    async def _finish_async(self, steps: _Steps, first: Awaitable[Any]) -> Any:
        outcome = await first
        while True:
            try:
                widened = steps.send(outcome)
            except StopIteration as done:
                return done.value
            outcome = self._inner(widened)
            if inspect.isawaitable(outcome):
                outcome = await outcome
