"""Streaming a cut command's full output to the artifact store (C15).

A foreground result shows only the two ends of output that cannot fit its
budget (:mod:`._collect` reads just those). The artifact store must get all of
it, and "all" may be megabytes: holding it whole in memory to write it in one
piece would make the memory a call needs grow with what the command printed.

Strategy: the artifact is written in pieces. Its text is the canonical JSON of
the result content with the full streams, exactly what
:class:`~sandrail.core.WriteArtifact` would have stored, so its template is
encoded once with the two streams left open (canonical key order puts
``stderr`` before ``stdout``), and each stream is read from the sandbox a page
at a time, escaped, and appended. Memory per call is a page, whatever the
output's size. Pages follow each other by their cursors; any page that does
not (a gap, no progress, a stream shorter than its reported size) or any
failure of the store or a read discards the artifact: the result then goes
without one, as when :class:`~sandrail.core.WriteArtifact` fails. The guard
runs before and after every step, reads and store steps alike (C9); when it
says stop, the artifact is discarded and its verdict ends the call.

At most :data:`~sandrail.core.RETAINED_OUTPUT_LIMIT` bytes of both streams go
to the store, shared as :func:`retained` says; an artifact holding less than
all of them says ``"retention_limited": true``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any, Final

from ._call import _Call
from ._canonical import CanonicalJSONError, canonical_json_split, escaped_json_text
from ._contents import usable_artifact
from ._definitions import RETAINED_OUTPUT_LIMIT
from ._effects import (
    AppendArtifact,
    CloseArtifact,
    Effect,
    EffectFailure,
    OpenArtifact,
    OutputChunk,
    Read,
)
from ._results import ArtifactRef, ToolResult

__all__ = ["STREAM_PAGE_BYTES", "retained", "stream_output_artifact"]

STREAM_PAGE_BYTES: Final = 1 << 20
"""Bytes of one stream read (and appended) at a time: the memory a streamed
artifact costs the core, about, whatever the output's size."""

_MIN_READ_BYTES: Final = 4
"""A read must be able to return one whole UTF-8 character."""

_STREAMS: Final = ("stdout", "stderr")


class _Broken(Exception):
    """The artifact cannot be completed; it is discarded, the call goes on."""


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
    call: _Call, sandbox_id: str, task: str, filled: dict[str, Any]
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
    key = f"{call.snap.operation_key}:{call.snap.call_id}:output"
    try:
        yield from _step(call, OpenArtifact(key=key))
    except EffectFailure:
        return (yield from call.guard())
    except _Stopped as stopped:
        yield from _discard(key)
        return stopped.result
    try:
        yield from _step(call, AppendArtifact(key=key, text=segments[0]))
        for name, after in zip(order, segments[1:], strict=True):
            yield from _stream(call, sandbox_id, task, key, name, sizes, keep[name])
            yield from _step(call, AppendArtifact(key=key, text=after))
        stored = yield CloseArtifact(key=key, keep=True)
    except _Stopped as stopped:
        yield from _discard(key)
        return stopped.result
    except (EffectFailure, _Broken):
        yield from _discard(key)
        return (yield from call.guard())
    if isinstance(stored, ArtifactRef) and usable_artifact(stored):
        call.output_artifact = stored
    return (yield from call.guard())


class _Stopped(Exception):
    """The guard after a step said stop: ``result`` ends the call."""

    def __init__(self, result: ToolResult) -> None:
        super().__init__(result)
        self.result = result


def _step(call: _Call, effect: Effect) -> Generator[Effect, Any, Any]:
    """``effect``'s outcome, then the guard; raises :class:`_Stopped` when
    the guard says stop (an effect's failure propagates)."""
    outcome = yield effect
    stop = yield from call.guard()
    if stop is not None:
        raise _Stopped(stop)
    return outcome


def _stream(
    call: _Call,
    sandbox_id: str,
    task: str,
    key: str,
    name: str,
    sizes: dict[str, int],
    keep: int,
) -> Generator[Effect, Any, None]:
    """Append the first ``keep`` bytes of stream ``name``, escaped, a page at
    a time; the other stream is read from its end. Raises :class:`_Broken`
    when the pages do not follow each other, :class:`_Stopped` when a guard
    says stop."""
    cursor = 0
    while cursor < keep:
        asked = max(min(STREAM_PAGE_BYTES, keep - cursor), _MIN_READ_BYTES)
        cursors = {**sizes, name: cursor}
        chunk = yield from _step(
            call,
            Read(
                sandbox_id=sandbox_id,
                task_id=task,
                stdout_cursor=cursors["stdout"],
                stderr_cursor=cursors["stderr"],
                max_bytes=asked,
            ),
        )
        if not isinstance(chunk, OutputChunk):
            raise _Broken
        if name == "stdout":
            text, start, after = chunk.stdout, chunk.stdout_start, chunk.next_stdout_cursor
        else:
            text, start, after = chunk.stderr, chunk.stderr_start, chunk.next_stderr_cursor
        if (start is not None and start != cursor) or after <= cursor:
            raise _Broken  # a gap, an overlap, or a stream shorter than reported
        try:
            escaped = escaped_json_text(text)
        except CanonicalJSONError:
            raise _Broken from None
        yield from _step(call, AppendArtifact(key=key, text=escaped))
        cursor = after


def _discard(key: str) -> Generator[Effect, Any, None]:
    # Should this fail, the port aborts what a call left open when it ends.
    with contextlib.suppress(EffectFailure):
        yield CloseArtifact(key=key, keep=False)
