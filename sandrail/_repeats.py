"""Which earlier call a model's repeat is (see :class:`~sandrail.Toolset`'s
"Repeats of unsettled calls"): the run a call belongs to, the arguments as
the port reads them, and the digest two calls must share to be one call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sandrail._port import ToolPort
from sandrail.core import (
    LAUNCH_TOOLS,
    CanonicalJSONError,
    ToolResult,
    launch_digest,
    launch_timeout,
)

__all__ = ["as_the_port_reads", "of_its_task", "repeat_digest", "run_of"]


def run_of(run_id: object, operation_key: object, call_id: object) -> str:
    """Where a call's repeats are matched (see the module doc): every call
    of the toolset that names its run (``run_id`` given, or a
    ``f"{run}:{call_id}"`` key) matches in one scope, whatever the run: a
    model told to repeat an uncertain call exactly may do so on a later run
    or turn (a new pydantic-ai run id, a new ``Runner.run``), and that
    repeat must still be matched to the first call (issue 18 follow-up B1).
    A key of any other form is its own scope (a call that matches no
    other). Read as plain strings: a ``str`` subclass's own methods are
    never called."""
    run, key, call = (
        str.__str__(v) if isinstance(v, str) else None for v in (run_id, operation_key, call_id)
    )
    if run is not None:
        return "runs"
    if key is None:
        return "key"  # the port refuses a key that is not a string
    if call is not None and key.endswith(":" + call) and len(key) > len(call) + 1:
        return "runs"
    return "key:" + key


def as_the_port_reads(port: ToolPort, name: str, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    """``arguments`` with the deadline the port would use in place of one
    left out (``null``) or capped (:func:`~sandrail.core.launch_timeout`,
    the program's own rule): what repeat matching compares."""
    if name not in LAUNCH_TOOLS:
        return arguments
    try:
        argument, seconds = launch_timeout(name, arguments, port.settings)
    except TypeError:
        return arguments  # not a number: the port refuses it anyway
    return {**arguments, argument: seconds}


def of_its_task(result: ToolResult) -> bool:
    """Whether ``result`` is its key's task's own outcome (``ok``, or an
    ``error`` naming its ``task_id``), not a refusal that ran nothing."""
    if result.status == "ok":
        return True
    task = result.content.get("task_id")
    return isinstance(task, str) and bool(task)


def repeat_digest(name: str, arguments: Mapping[str, Any]) -> str | None:
    """What makes two calls one call's repeat: what the port deems the same
    launch (C3: the tool and its canonical arguments with defaults filled in,
    so key order, 1 versus 1.0 or an empty env make no difference)."""
    try:
        return launch_digest(name, arguments)
    except (CanonicalJSONError, TypeError, ValueError, RecursionError):
        return None  # the port refuses such arguments anyway
