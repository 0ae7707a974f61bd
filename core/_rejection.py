"""The ``e2b_command_arguments_invalid`` content: what is wrong with a call's
arguments, within the byte budget (C12).

A reason names the field and what it must be, never what it held
(environment values stay out of results, C17); a text too long for the
budget is cut as every text is (:func:`~sandrail.core._budget.cut_text`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs

from ._budget import cut_text
from ._canonical import canonical_size, escaped_size
from ._compiled_schema import is_unicode
from ._definitions import MIN_MAX_OUTPUT_BYTES
from ._results import ErrorCode

__all__ = ["ArgumentProblem", "arguments_rejection", "printable"]

_INSTRUCTION: Final = "Nothing ran. Fix these arguments and try again."
# Longest field or reason text (in canonical bytes) kept once content must shrink.
_TEXT_LIMIT: Final = 256
_ENTRY_OVERHEAD: Final = len('{"field":"","reason":""}')


@attrs.frozen
class ArgumentProblem:
    """One thing wrong with a call's arguments.

    ``path`` names the field, e.g. ``arguments.env.HOME``, ``arguments.x[0]``,
    or ``arguments`` for the whole object; ``reason`` says in plain words what
    it must be. Neither ever quotes a value.
    """

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"field": self.path, "reason": self.reason}


def arguments_rejection(
    problems: Iterable[ArgumentProblem], max_output_bytes: int
) -> dict[str, Any]:
    """The ``error`` content for invalid arguments, within ``max_output_bytes``.

    Shape: ``status: "error"``, ``ok: false``,
    ``error_type: "e2b_command_arguments_invalid"``,
    ``executed: false``, ``problems`` (a list of ``{field, reason}``) and a
    one-line ``instruction``. When everything does not fit, long texts are cut
    (head and tail kept, with a marker naming the bytes left out), the
    problems that still do not fit are dropped from the end and counted in
    ``problems_omitted``. The first problem stays if it fits at all; if not
    even it does, the bare content (those four keys) is returned. The canonical JSON
    of the result is always at most ``max_output_bytes`` (C12).

    Raises ``ValueError`` if ``max_output_bytes`` is below
    :data:`~sandrail.core._definitions.MIN_MAX_OUTPUT_BYTES`.
    """
    if type(max_output_bytes) is not int or max_output_bytes < MIN_MAX_OUTPUT_BYTES:
        raise ValueError(
            f"max_output_bytes must be an integer of at least {MIN_MAX_OUTPUT_BYTES}, "
            f"got {max_output_bytes!r}"
        )
    bare: dict[str, Any] = {
        "status": "error",
        "ok": False,
        "error_type": ErrorCode.ARGUMENTS_INVALID.value,
        "executed": False,
    }
    listed = list(problems)
    layout = _Layout(bare | {"problems": [], "instruction": _INSTRUCTION}, len(listed))
    # Strategy: measure before building. Problem texts can be megabytes each
    # (a field name is whatever key the model sent), so sizes are summed entry
    # by entry and the walk stops as soon as the budget is spent.
    whole = _longest_prefix(layout, listed, max_output_bytes, cap=False)
    if len(whole) == len(listed):
        content = layout.content(whole)
    else:
        content = _fit_problems(layout, listed, max_output_bytes) or bare
    # The arithmetic above is exact; this last measure makes C12 hold even if it were not.
    return content if canonical_size(content) <= max_output_bytes else bare


def printable(text: str) -> str:
    """``text`` with any lone surrogate spelled out as ``\\udxxx``."""
    if is_unicode(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# --- fitting the rejection into a budget --------------------------------------------


def _entry(field: str, reason: str) -> dict[str, str]:
    return {"field": field, "reason": reason}


class _Layout:
    """Exact canonical sizes of the rejection content around its problem list."""

    def __init__(self, frame: dict[str, Any], count: int) -> None:
        self.frame = frame
        self.count = count
        self.frame_size = canonical_size(frame)
        # `,"problems_omitted":0`; each further digit of the count adds a byte.
        self.omitted_size = canonical_size(frame | {"problems_omitted": 0}) - self.frame_size - 1

    def total(self, kept: int, entries_size: int) -> int:
        omitted = self.count - kept
        commas = max(kept - 1, 0)
        extra = self.omitted_size + len(str(omitted)) if omitted else 0
        return self.frame_size + entries_size + commas + extra

    def content(self, kept: list[dict[str, str]]) -> dict[str, Any]:
        content = self.frame | {"problems": kept}
        if len(kept) < self.count:
            content["problems_omitted"] = self.count - len(kept)
        return content


def _longest_prefix(
    layout: _Layout, problems: Sequence[ArgumentProblem], budget: int, *, cap: bool
) -> list[dict[str, str]]:
    """The longest prefix of ``problems`` that fits (texts cut to
    :data:`_TEXT_LIMIT` if ``cap``)."""
    kept: list[dict[str, str]] = []
    used = 0
    for problem in problems:
        field, reason = printable(problem.path), printable(problem.reason)
        if cap:
            field, reason = _capped(field), _capped(reason)
        size = _ENTRY_OVERHEAD + escaped_size(field) + escaped_size(reason)
        if layout.total(len(kept) + 1, used + size) > budget:
            break
        kept.append(_entry(field, reason))
        used += size
    return kept


def _fit_problems(
    layout: _Layout, problems: Sequence[ArgumentProblem], budget: int
) -> dict[str, Any] | None:
    """The longest prefix with texts capped, or else the first problem cut to
    the room left; ``None`` if not even that fits."""
    kept = _longest_prefix(layout, problems, budget, cap=True)
    if not kept:
        first = problems[0]
        pair = (printable(first.path), printable(first.reason))
        entry = _cut_first(pair, budget - layout.total(1, _ENTRY_OVERHEAD))
        if entry is None:
            return None
        kept = [entry]
    return layout.content(kept)


def _cut_first(pair: tuple[str, str], room: int) -> dict[str, str] | None:
    """The first problem with its texts cut to share ``room`` bytes."""
    field, reason = pair
    reason_size = escaped_size(reason)
    field_room = min(escaped_size(field), max(room // 2, room - reason_size))
    short_field = cut_text(field, field_room)
    if short_field is None:
        return None
    short_reason = cut_text(reason, room - escaped_size(short_field))
    if short_reason is None:
        return None
    return _entry(short_field, short_reason)


def _capped(text: str) -> str:
    # _TEXT_LIMIT is far above any marker's size, so this never gives up.
    return cut_text(text, _TEXT_LIMIT) or ""
