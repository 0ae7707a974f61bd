"""Streaming a cut command's full output to the artifact store (C15).

A foreground result shows only the two ends of output that cannot fit its
budget (:mod:`._collect` reads just those). The artifact store must get all of
it, and "all" may be megabytes: holding it whole in memory to write it in one
piece would make the memory a call needs grow with what the command printed.

Strategy: the artifact is written in pieces. Its text is the canonical JSON of
the result content with the full streams, exactly what storing that content
whole would store (as :meth:`CallState.finish` does for smaller output), so its template is
encoded once with the two streams left open (canonical key order puts
``stderr`` before ``stdout``), and each stream is read from the sandbox a page
at a time, escaped, and appended. Memory per call is a page, whatever the
output's size. Pages follow each other by their cursors; any page that does
not (a gap, no progress, a stream shorter than its reported size) or any
failure of the store or a read discards the artifact: the result then goes
without one, as when the store fails a whole write. The guard
runs before and after every step, reads and store steps alike (C9); when it
says stop, the artifact is discarded and its verdict ends the call.

At most :data:`~sandrail.core.RETAINED_OUTPUT_LIMIT` bytes of both streams go
to the store, shared as :func:`retained` says; an artifact holding less than
all of them says ``"retention_limited": true``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Final

from ._call import BrokenArtifactError, CallState
from ._canonical import CanonicalJSONError, canonical_json_split, escaped_json_text
from ._definitions import RETAINED_OUTPUT_LIMIT
from ._effects import (
    Effect,
    OutputChunk,
    Read,
)
from ._results import ToolResult

__all__ = ["STREAM_PAGE_BYTES", "retained", "stream_output_artifact"]

STREAM_PAGE_BYTES: Final = 1 << 20
"""Bytes of one stream read (and appended) at a time: the memory a streamed
artifact costs the core, about, whatever the output's size."""

_MIN_READ_BYTES: Final = 4
"""A read must be able to return one whole UTF-8 character."""

_STREAMS: Final = ("stdout", "stderr")


def retained(stdout_bytes: int, stderr_bytes: int) -> tuple[int, int]:
    """How many leading bytes of each stream go to the store: all of both
    when they fit :data:`RETAINED_OUTPUT_LIMIT` together; otherwise the
    limit shared fairly (the smaller stream whole if it takes at most half)."""
    limit = RETAINED_OUTPUT_LIMIT
    if stdout_bytes + stderr_bytes <= limit:
        return stdout_bytes, stderr_bytes
    low = min(stdout_bytes, stderr_bytes)
    if 2 * low >= limit:
        return limit // 2, limit - limit // 2
    if stdout_bytes == low:
        return stdout_bytes, limit - stdout_bytes
    return limit - stderr_bytes, stderr_bytes


def stream_output_artifact(
    call: CallState, sandbox_id: str, task: str, filled: dict[str, Any]
) -> Generator[Effect, Any, ToolResult | None]:
    """Store the full output of ``filled`` (a launch result whose ``stdout``
    and ``stderr`` may be excerpts) as an artifact, reading it from the
    sandbox page by page. Sets ``call.output_artifact`` when the store kept a
    usable one. Returns the result that ends the call when the guard says
    stop, else ``None`` (with or without an artifact, the call goes on).

    The guard runs before the first step and after every step, the store's
    included (C9): no read or store step follows a stop."""
    call.output_stored = True  # an excerpt must never be stored as the output
    stop = yield from call.guard()
    if stop is not None:
        return stop
    sizes = {key: filled[f"{key}_bytes"] for key in _STREAMS}
    keep = dict(zip(_STREAMS, retained(sizes["stdout"], sizes["stderr"]), strict=True))
    whole = dict(filled, stdout="", stderr="")
    if keep != sizes:
        whole["retention_limited"] = True
    try:
        segments, order = canonical_json_split(call.masked(whole), _STREAMS)
    except CanonicalJSONError:
        return None

    def write() -> Generator[Effect, Any, None]:
        yield from call.append_artifact(segments[0])
        for name, after in zip(order, segments[1:], strict=True):
            yield from _stream(call, sandbox_id, task, name, sizes, keep[name])
            yield from call.append_artifact(after)

    return (yield from call.store_artifact(write))


def _stream(
    call: CallState,
    sandbox_id: str,
    task: str,
    name: str,
    sizes: dict[str, int],
    keep: int,
) -> Generator[Effect, Any, None]:
    """Append the first ``keep`` bytes of stream ``name``, escaped, a page at
    a time; the other stream is read from its end. Raises
    :class:`BrokenArtifactError` when the pages do not follow each other,
    :class:`StoppedError` when a guard says stop."""
    cursor = 0
    while cursor < keep:
        asked = max(min(STREAM_PAGE_BYTES, keep - cursor), _MIN_READ_BYTES)
        cursors = {**sizes, name: cursor}
        chunk = yield from call.step(
            Read(
                sandbox_id=sandbox_id,
                task_id=task,
                stdout_cursor=cursors["stdout"],
                stderr_cursor=cursors["stderr"],
                max_bytes=asked,
            ),
        )
        if not isinstance(chunk, OutputChunk) or chunk.state.status == "unknown":
            raise BrokenArtifactError  # no answer, or the output is gone: no evidence
        if name == "stdout":
            text, start, after = chunk.stdout, chunk.stdout_start, chunk.next_stdout_cursor
        else:
            text, start, after = chunk.stderr, chunk.stderr_start, chunk.next_stderr_cursor
        if (start is not None and start != cursor) or after <= cursor:
            raise BrokenArtifactError  # a gap, an overlap, or a stream shorter than reported
        try:
            escaped = escaped_json_text(text)
        except CanonicalJSONError:
            raise BrokenArtifactError from None
        yield from call.append_artifact(escaped)
        cursor = after
