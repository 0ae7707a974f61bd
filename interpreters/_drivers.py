"""The two drivers, the only code that awaits a tool program's answers, the
one rule that picks between them, and :func:`layered`, how a program is
wrapped in another (program middleware).

Strategy: a program yields an effect; the driver hands it to an interpreter
and resumes the program with the outcome, or throws the interpreter's
:class:`EffectFailure` into it. Anything else the interpreter raises is the
interpreter's business (the port converts it before it gets here). The
generator is closed in ``finally`` whatever happens. The two drivers are
one loop written twice, as psycopg 3 writes its ``wait``/``wait_async``:
they differ only in that :func:`drive_async` awaits an outcome that is
awaitable, and everything else about a call lives in the program they drive.

A concern that sits between a program and its interpreter (masking reads,
recording a call) is a *layer*: a function from a program to a program,
written with :func:`layered`. It sees each effect the program yields and
each answer or failure sent back, may yield other effects in its place, and
never awaits: whichever driver runs the outermost program awaits for every
layer, so a layer is written once for sync and async calls alike.

Which driver runs a call is decided by :func:`is_asynchronous` alone: every
entry point (the port's ``execute_sync``, the toolset's ``call_sync``, a
recorder or fault injector asking about the backend it wraps) asks it, so a
backend is asynchronous everywhere or nowhere.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Final, TypeVar

from sandrail.core import Delivery, Effect, EffectFailure, OutcomeValue, Program, ToolResult

__all__ = [
    "AsyncInterpreter",
    "Layer",
    "SyncInterpreter",
    "answered_now",
    "drive",
    "drive_async",
    "is_asynchronous",
    "layered",
]

SyncInterpreter = Callable[[Effect], Any]
AsyncInterpreter = Callable[[Effect], Awaitable[Any] | Any]
Layer = Callable[[Program], Program]
"""A program wrapped in another: see :func:`layered`."""
_Result = TypeVar("_Result")
Step = Generator[Effect, Any, Any]
"""How a layer answers one effect: it yields the effects it needs answered
(the effect itself, or others in its place) and returns the answer the
wrapped program is sent; an :class:`EffectFailure` it lets through (or
raises) is thrown into the wrapped program instead."""


def is_asynchronous(backend: object) -> bool:
    """Whether ``backend`` answers effects with awaitables, so that a call on
    it must run under :func:`drive_async`: it says so (``asynchronous =
    True``), or it is an ``async def`` function (a ``functools.partial`` of
    one included) or an object whose ``__call__`` is one.

    A backend that returns awaitables from a plain function without saying
    so cannot be told apart before it answers; a synchronous call refuses
    such an answer (:func:`answered_now`). A backend whose ``asynchronous``
    cannot even be read is not asynchronous: calling it fails like any
    broken backend, and the port turns that into a result.
    """
    try:
        if getattr(backend, "asynchronous", False) is True:
            return True
    except Exception:
        return False
    if isinstance(backend, _ROUTINES):
        return inspect.iscoroutinefunction(backend)
    return _calls_a_coroutine(type(backend))


_ROUTINES: Final = (types.FunctionType, types.MethodType, functools.partial)
"""What :func:`inspect.iscoroutinefunction` can tell about (and quickly);
any other backend is an object, asynchronous when its class's ``__call__`` is."""


def _calls_a_coroutine(kind: type) -> bool:
    """Whether calling an instance of ``kind`` runs an ``async def``: its
    class's own ``__call__``, as Python calls it (not an instance attribute).
    Asked once a class."""
    known = _ASYNC_CALL.get(kind)
    if known is None:
        call = next((vars(k)["__call__"] for k in kind.__mro__ if "__call__" in vars(k)), None)
        known = _ASYNC_CALL[kind] = inspect.iscoroutinefunction(call)
    return known


_ASYNC_CALL: dict[type, bool] = {}


def answered_now(backend: Callable[[Effect], Any]) -> SyncInterpreter:
    """``backend`` as a synchronous call must use it: an awaitable answer
    (from a backend that returns them without saying so, see
    :func:`is_asynchronous`) is closed unawaited, so nothing of it runs, and
    the effect fails as ``maybe_sent``: the function that made it may have
    sent something before returning it (C6)."""

    def answer(effect: Effect) -> Any:
        outcome = backend(effect)
        if type(outcome) in _OUTCOMES:
            return outcome  # the common case, without an ABC check
        if inspect.isawaitable(outcome):
            close = getattr(outcome, "close", None)
            if callable(close):
                close()
            raise EffectFailure(
                Delivery.MAYBE_SENT,
                f"{type(effect).__name__} was answered with an awaitable in a synchronous "
                "call: a backend that answers so must declare asynchronous = True",
            )
        return outcome

    return answer


_OUTCOMES: Final = frozenset((type(None), *typing.get_args(OutcomeValue)))
"""The types of every outcome an effect can have: never awaitable."""


def drive(program: Program, interpret: SyncInterpreter) -> ToolResult:
    """Run ``program`` to its result, answering each effect with ``interpret``."""
    try:
        effect = next(program)
        while True:
            try:
                outcome = interpret(effect)
            except EffectFailure as failure:
                effect = program.throw(failure)
            else:
                effect = program.send(outcome)
    except StopIteration as stop:
        result: ToolResult = stop.value
        return result
    finally:
        program.close()


async def drive_async(program: Program, interpret: AsyncInterpreter) -> ToolResult:
    """Like :func:`drive`, awaiting outcomes that are awaitable."""
    try:
        effect = next(program)
        while True:
            try:
                outcome = interpret(effect)
                if inspect.isawaitable(outcome):
                    outcome = await outcome
            except EffectFailure as failure:
                effect = program.throw(failure)
            else:
                effect = program.send(outcome)
    except StopIteration as stop:
        result: ToolResult = stop.value
        return result
    finally:
        program.close()


def layered(
    program: Generator[Effect, Any, _Result], step: Callable[[Effect], Step | None]
) -> Generator[Effect, Any, _Result]:
    """``program`` with each effect it yields handled by ``step(effect)``:
    ``None`` passes the effect on as it is (its answer, or failure, goes
    back unchanged); a :data:`Step` answers it. Anything but an
    :class:`EffectFailure` that reaches the layer goes on out of it, as it
    would out of the program; ``program`` is closed when the layer is."""
    try:
        effect = next(program)
        while True:
            handle = step(effect)
            try:
                answer = (yield effect) if handle is None else (yield from handle)
            except EffectFailure as failure:
                effect = program.throw(failure)
            else:
                effect = program.send(answer)
    except StopIteration as stop:
        result: _Result = stop.value
        return result
    finally:
        program.close()
