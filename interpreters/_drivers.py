"""The two drivers: the only code that resumes a tool program.

Strategy: a program yields an effect; the driver hands it to an interpreter
and resumes the program with the outcome, or throws the interpreter's
:class:`EffectFailure` into it. Anything else the interpreter raises is the
interpreter's business (the port converts it before it gets here). The
generator is closed in ``finally`` whatever happens.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from sandrail.core import Effect, EffectFailure, Program, ToolResult

__all__ = ["AsyncInterpreter", "SyncInterpreter", "drive", "drive_async"]

SyncInterpreter = Callable[[Effect], Any]
AsyncInterpreter = Callable[[Effect], Awaitable[Any] | Any]


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
