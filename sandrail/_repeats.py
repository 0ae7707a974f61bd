"""Whether a result settles its call, for the toolset's record of unsettled
calls (see :class:`~sandrail.Toolset`'s "Repeats of unsettled calls"). Which
earlier call a repeat is, is the core's rule (:func:`~sandrail.core.same_call`,
:func:`~sandrail.core.repeat_scope`)."""

from __future__ import annotations

from sandrail.core import ToolResult

__all__ = ["of_its_task"]


def of_its_task(result: ToolResult) -> bool:
    """Whether ``result`` is its key's task's own outcome (``ok``, or an
    ``error`` naming its ``task_id``), not a refusal that ran nothing."""
    if result.status == "ok":
        return True
    task = result.content.get("task_id")
    return isinstance(task, str) and bool(task)
