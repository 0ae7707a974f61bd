"""Collecting an ended command's output for a foreground result (C12, C15).

Strategy: a result shows at most ``max_output_bytes`` of output, so there is
no reason to move more than that out of the sandbox. When the output cannot
fit anyway and no artifact store wants the whole of it, each stream that must
be cut is read only at its two ends: the budget's fair share of the stream
(water-filling, as :func:`~sandrail.core.fit_to_budget` will share it) is
planned from the sizes the ended command reported, and about half a share is
read from each end. The fit then cuts an :class:`~sandrail.core._budget.Excerpt`,
whose marker counts the bytes never read as well. A command's output therefore
costs about the budget to collect, whatever its size (16 MiB or 16 GiB).

With an artifact store, the full output of a cut result is then streamed to
the store page by page (:mod:`._streamed`), never held whole; unless all of it
takes at most a page (:data:`~sandrail.core._streamed.STREAM_PAGE_BYTES`):
then one read of everything costs fewer round trips than the ends and a
stream, for the same memory. When everything may fit, when output that small
goes to an artifact store, or when the runtime governs results, every
retained byte is read instead, up to :data:`~sandrail.core.RETAINED_OUTPUT_LIMIT`.

Between reads the guard runs, as around any external step (C9).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Final, TypeGuard

import attrs

from ._budget import SHRINKABLE_FIELDS, Excerpt, _water_fill, fixed_size
from ._call import CallState
from ._canonical import CanonicalJSONError, escaped_size
from ._definitions import RETAINED_OUTPUT_LIMIT
from ._effects import CommandState, Effect, EffectFailure, OutputChunk, Read
from ._results import ErrorCode, ToolResult
from ._streamed import STREAM_PAGE_BYTES, stream_output_artifact

__all__ = ["collect_output"]

_MIN_READ_BYTES: Final = 4
"""A read must be able to return one whole UTF-8 character."""

_EXCERPT_MARGIN: Final = 16
"""Bytes read beyond half a share at each end: a character the fit wants
whole at the boundary, and the marker's last digits."""

_Collected = tuple[str, str, CommandState, bool]


def collect_output(
    call: CallState,
    sandbox_id: str,
    task: str,
    ended: CommandState,
    content: dict[str, Any],
) -> Generator[Effect, Any, dict[str, Any] | ToolResult]:
    """``content`` (a launch result built for ``ended``) with its
    ``stdout`` and ``stderr``, and the state fields of the last read; or the
    result that ends the call (a failed read, a guard that stopped it)."""
    plan = None
    small = ended.stdout_bytes + ended.stderr_bytes <= STREAM_PAGE_BYTES
    if not call.snap.governed and not (call.settings.artifacts_enabled and small):
        plan = _plan(content, ended, call.settings.max_output_bytes)
    if plan is not None:
        excerpts = yield from _read_ends(call, sandbox_id, task, ended, plan)
        if isinstance(excerpts, ToolResult):
            return excerpts
        if excerpts is not None:
            stdout, stderr, final = excerpts
            filled = _with_output(content, stdout, stderr, final, limited=False)
            if call.settings.artifacts_enabled:
                stop = yield from stream_output_artifact(call, sandbox_id, task, filled)
                if stop is not None:
                    return stop
            return filled
    collected = yield from _read_all(call, sandbox_id, task, ended)
    if isinstance(collected, ToolResult):
        return collected
    stdout_text, stderr_text, final, limited = collected
    return _with_output(content, stdout_text, stderr_text, final, limited=limited)


def _with_output(
    content: dict[str, Any],
    stdout: str | Excerpt,
    stderr: str | Excerpt,
    final: CommandState,
    *,
    limited: bool,
) -> dict[str, Any]:
    filled = dict(content)
    filled.update(
        command_status=final.status,
        exit_code=final.exit_code,
        stdout_bytes=final.stdout_bytes,
        stderr_bytes=final.stderr_bytes,
        stdout=stdout,
        stderr=stderr,
    )
    if limited:
        filled["retention_limited"] = True
    return filled


@attrs.frozen
class _Plan:
    """Per stream: ``None`` to read it whole, or the bytes to read at each end."""

    stdout: int | None
    stderr: int | None


def _plan(content: dict[str, Any], ended: CommandState, budget: int) -> _Plan | None:
    """How to read the ends of the streams that cannot fit, or ``None`` when
    all of the output may fit (then it is read whole)."""
    sizes = {"stdout": ended.stdout_bytes, "stderr": ended.stderr_bytes}
    if sum(sizes.values()) <= budget:
        return None
    probe = dict(content, stdout="", stderr="")
    try:
        room = budget - fixed_size(probe)
        others = {
            key: escaped_size(value)
            for key in SHRINKABLE_FIELDS
            if key not in sizes and isinstance(value := probe.get(key), str) and value
        }
    except CanonicalJSONError:
        return None
    if room <= 0:
        return None
    # A stream's bytes are a lower bound of its escaped size: what may be
    # kept whole by this estimate is read whole, and the fit decides.
    _, allowances = _water_fill({**others, **sizes}, room)
    ends: dict[str, int | None] = {}
    for key, size in sizes.items():
        share = allowances.get(key)
        if share is None or 2 * (share // 2 + _EXCERPT_MARGIN) >= size:
            ends[key] = None
        else:
            ends[key] = share // 2 + _EXCERPT_MARGIN
    if ends["stdout"] is None and ends["stderr"] is None:
        return None
    return _Plan(stdout=ends["stdout"], stderr=ends["stderr"])


def _read_ends(
    call: CallState, sandbox_id: str, task: str, ended: CommandState, plan: _Plan
) -> Generator[Effect, Any, tuple[str | Excerpt, str | Excerpt, CommandState] | ToolResult | None]:
    """Read the head of both streams (a stream read whole: all of it), then
    the tail of each stream cut by ``plan``. ``None`` when the ends met after
    all (the caller then reads everything)."""
    heads = (
        ended.stdout_bytes if plan.stdout is None else plan.stdout,
        ended.stderr_bytes if plan.stderr is None else plan.stderr,
    )
    head = yield from _read(call, sandbox_id, task, 0, 0, max(*heads, _MIN_READ_BYTES))
    if not isinstance(head, OutputChunk):
        return head
    stop = call.stopped_by((yield call.check))
    if stop is not None:
        return stop
    tails = (
        ended.stdout_bytes - (plan.stdout or 0),
        ended.stderr_bytes - (plan.stderr or 0),
    )
    size = max(plan.stdout or 0, plan.stderr or 0, _MIN_READ_BYTES)
    tail = yield from _read(call, sandbox_id, task, tails[0], tails[1], size)
    if not isinstance(tail, OutputChunk):
        return tail
    stdout = _stream(plan.stdout, ended.stdout_bytes, _side(head, 0), _side(tail, 0), tails[0])
    stderr = _stream(plan.stderr, ended.stderr_bytes, _side(head, 1), _side(tail, 1), tails[1])
    if stdout is None or stderr is None:
        return None
    return stdout, stderr, tail.state


_Side = tuple[str, int | None, int]
"""One stream of a read: its text, where the text starts, the next cursor."""


def _side(chunk: OutputChunk, stream: int) -> _Side:
    if stream == 0:
        return chunk.stdout, chunk.stdout_start, chunk.next_stdout_cursor
    return chunk.stderr, chunk.stderr_start, chunk.next_stderr_cursor


def _stream(
    ends: int | None, size: int, head: _Side, tail: _Side, asked: int
) -> str | Excerpt | None:
    """One stream's output from its head and tail reads, or ``None`` when it
    was not read as planned (the caller then reads everything)."""
    head_text, _, head_stop = head
    if ends is None:
        return head_text if head_stop >= size else None
    tail_text, tail_start, tail_stop = tail
    start = asked if tail_start is None else tail_start
    if tail_stop < size or head_stop > start:
        return None
    if head_stop == start:
        # The ends met (a masked value the head's page could not end inside
        # carried it to the tail): consecutive pages, the whole stream.
        return head_text + tail_text
    return Excerpt(head=head_text, tail=tail_text, omitted_bytes=start - head_stop)


def _read(
    call: CallState, sandbox_id: str, task: str, stdout_cursor: int, stderr_cursor: int, size: int
) -> Generator[Effect, Any, OutputChunk | ToolResult]:
    try:
        chunk = yield Read(
            sandbox_id=sandbox_id,
            task_id=task,
            stdout_cursor=stdout_cursor,
            stderr_cursor=stderr_cursor,
            max_bytes=size,
        )
    except EffectFailure as failure:
        return call.failed(failure, side_effect=Read.side_effect)
    if not _evidence(chunk):
        return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
    return chunk


def _evidence(chunk: object) -> TypeGuard[OutputChunk]:
    """Whether a read answered with output the sandbox can still show. A
    state of ``unknown`` (the task's record or output is gone, say deleted
    since the wait) is no evidence: its empty text is not the command's
    output, so the result is ``uncertain``, never ``ok`` (C6, C7)."""
    return isinstance(chunk, OutputChunk) and chunk.state.status != "unknown"


def _read_all(
    call: CallState, sandbox_id: str, wanted: str, ended: CommandState
) -> Generator[Effect, Any, _Collected | ToolResult]:
    """Read all retained output of an ended command through byte cursors, at
    most :data:`RETAINED_OUTPUT_LIMIT` bytes for both streams together.

    Returns stdout, stderr, the last state, and whether the limit cut the
    reading short. ``Read.max_bytes`` bounds each stream, so each read asks
    for the most per stream that keeps the total within the room left, given
    the sizes the ended command reported (one read usually does). Between
    reads the guard runs, as around any external step (C9).
    """
    stdout: list[str] = []
    stderr: list[str] = []
    cursors = (0, 0)
    final = ended
    while True:
        room = RETAINED_OUTPUT_LIMIT - cursors[0] - cursors[1]
        left = (final.stdout_bytes - cursors[0], final.stderr_bytes - cursors[1])
        if room < 2 * _MIN_READ_BYTES:
            return "".join(stdout), "".join(stderr), final, True
        per_stream = max(_per_stream(room, left), _MIN_READ_BYTES)
        try:
            chunk = yield Read(
                sandbox_id=sandbox_id,
                task_id=wanted,
                stdout_cursor=cursors[0],
                stderr_cursor=cursors[1],
                max_bytes=per_stream,
            )
        except EffectFailure as failure:
            return call.failed(failure, side_effect=Read.side_effect)
        if not _evidence(chunk):
            return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
        final = chunk.state
        stdout.append(chunk.stdout)
        stderr.append(chunk.stderr)
        advanced = (chunk.next_stdout_cursor, chunk.next_stderr_cursor) != cursors
        cursors = (chunk.next_stdout_cursor, chunk.next_stderr_cursor)
        if not chunk.more:
            return "".join(stdout), "".join(stderr), final, False
        if not advanced:
            return (yield from call.settle(call.uncertain(ErrorCode.EVIDENCE_INCOMPLETE)))
        stop = call.stopped_by((yield call.check))
        if stop is not None:
            return stop


def _per_stream(room: int, left: tuple[int, int]) -> int:
    """The largest per-stream read whose two streams fit in ``room`` bytes,
    given how many bytes each stream has ``left`` (unknown sizes: half each)."""
    low, high = sorted(max(size, 0) for size in left)
    if high == 0:
        return room // 2
    if low + high <= room:
        return high
    if 2 * low >= room:
        return room // 2
    return room - low
