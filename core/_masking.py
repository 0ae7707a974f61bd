"""Masking secret values in command output, across page boundaries (C17).

A command may print an environment value it was given; the model must never
see it, whole or in pieces. Output reaches the core in pages (``Read``
outcomes), and a secret can straddle two of them: masking each page's text
on its own shows ``AAAA`` on one page and ``BBBB`` on the next.

Strategy: masking is a function of the whole stream, applied one page at a
time. Every byte covered by an occurrence of any secret belongs to a *masked
interval* (overlapping occurrences merge). A page never starts or ends
inside a masked interval: a start inside one moves to its end, an end inside
one moves to its end when the interval is known to be complete, or back to
its start otherwise. A page that reaches the end of what has been written so
far holds back a tail that could still become a secret (a prefix of one)
while more output may follow. Inside the page each interval reads as
:data:`REDACTED`. So the concatenation of consecutive pages is the masked
stream, and no page, nor any two adjacent pages, contains a secret.

To see intervals that cross a page's edges, the page is read *widened*: a
``Read`` whose cursors start up to ``L - 1`` bytes earlier and that asks for
``3 L + 4`` more bytes (``L``: the longest secret in UTF-8 bytes).
:func:`widen` builds that read and :func:`mask_chunk` cuts the asked page
out of its answer. This relies on one property of interpreters: an
``OutputChunk``'s text is the exact decoding of the bytes between its start
and its next cursor, with bytes that are not UTF-8 decoded by
``surrogateescape`` (lone surrogates). :func:`mask_chunk` checks it and
refuses an answer that breaks it; it also turns lone surrogates into U+FFFD,
so the text a result shows is always valid Unicode.

Every search for values is one pass of one automaton over all of them,
built once per set of values: a page costs about its bytes plus the longest
value, however many values there are. The automaton is the native one over
each value's anchors (:mod:`._anchored`, the ``native`` extra) when it is
installed, else (and for a page made to defeat the anchors) the pure one
over every value's bytes (:mod:`._patterns`); both answer alike.

Values shorter than :data:`MIN_REDACTED_LENGTH` characters are not masked: a
short value (``1``, ``true``) would mask ordinary text; the env-name rule
(:mod:`._env`) keeps start-up programs from printing short values.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from ._anchored import AnchoredSearch, OverBudget, anchored_search
from ._effects import TERMINAL_STATUSES, CommandState, OutputChunk, Read
from ._patterns import PatternAutomaton

__all__ = [
    "MAX_MASKED_BYTES",
    "MIN_REDACTED_LENGTH",
    "REDACTED",
    "MaskingError",
    "NeedMoreOutput",
    "Redactions",
    "mask_chunk",
    "mask_text",
    "redaction_secrets",
    "sanitize_text",
    "widen",
]

REDACTED: Final = "<redacted>"
"""What a secret value a command printed is replaced by in results (C17)."""

MIN_REDACTED_LENGTH: Final = 8
"""Secret values shorter than this many characters are not searched for."""

MAX_MASKED_BYTES: Final = 8 * 1024 * 1024
"""The most a session keeps of values to mask, in UTF-8 bytes: it masks
every env value it passed for as long as its backend lives, so a session
that keeps passing new ones is refused more before the memory and the
masking work grow without bound."""

_REDACTED_BYTES: Final = REDACTED.encode("ascii")

_FIND_AT_MOST: Final = 8
"""A text that at most this many values fit in is searched value by value
(``bytes.find``, C speed) while the set has no automaton yet: building one
costs time linear in all the values' bytes, which a short text (a path, a
reason, an identity) never needs to pay for long values it cannot hold."""

_PREPARED_KEPT: Final = 8
"""Value sets kept prepared (the latest ones: each port's set, a call's set
with its own env, a recorder's with its named secrets): preparing one is
linear in the values' total size, so it is done once per set, not once per
call or read."""


class _Prepared:
    """One set of values, encoded and sorted, and its automata once built."""

    __slots__ = ("anchored", "automaton", "encoded", "minus_lengths")

    def __init__(self, values: frozenset[str]) -> None:
        usable: list[bytes] = []
        for value in values:
            if not isinstance(value, str) or len(value) < MIN_REDACTED_LENGTH:
                continue
            try:
                usable.append(value.encode("utf-8"))
            except UnicodeEncodeError:
                continue
        self.encoded = tuple(sorted(usable, key=lambda data: (-len(data), data)))
        self.minus_lengths = tuple(-len(data) for data in self.encoded)
        """Ascending: the values that fit in ``n`` bytes are those from
        ``bisect_left(minus_lengths, -n)`` on."""
        self.automaton: PatternAutomaton | None = None
        """The pure automaton, built when first needed."""
        self.anchored: AnchoredSearch | bool | None = False
        """The native one (``False``: not built yet; ``None``: not installed)."""

    def native(self) -> AnchoredSearch | None:
        """The native automaton, built on first use (``None`` without it)."""
        if self.anchored is False:
            self.anchored = anchored_search(self.encoded)
        assert not isinstance(self.anchored, bool)
        return self.anchored

    def searched(self) -> bool:
        """Whether an automaton over every value is built already."""
        return self.automaton is not None or self.anchored not in (False, None)


_PREPARED: dict[frozenset[str], _Prepared] = {}


def redaction_secrets(env: object) -> frozenset[str]:
    """The values of an ``env`` argument that output is searched for (C17)."""
    if not isinstance(env, Mapping):
        return frozenset()
    return frozenset(
        value
        for value in env.values()
        if isinstance(value, str) and len(value) >= MIN_REDACTED_LENGTH and value != REDACTED
    )


class MaskingError(ValueError):
    """An ``OutputChunk`` broke the exactness property masking relies on."""


@attrs.frozen(kw_only=True)
class NeedMoreOutput:
    """:func:`mask_chunk` could not place a page without more bytes after the
    ones it was given: read again with at least ``max_bytes``."""

    max_bytes: int


class Redactions:
    """A set of secret values, prepared for masking.

    Only values of at least :data:`MIN_REDACTED_LENGTH` characters that are
    valid Unicode count; others are dropped (they cannot be printed as such).

    Every search goes through one automaton over all the values (the
    native one when installed, else :class:`PatternAutomaton`), built on
    first use and shared by every ``Redactions`` of the same values (a port
    makes one per call and per read): a page costs one pass over its bytes,
    whatever the number of values.
    """

    __slots__ = ("_prepared", "longest", "values")

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values: frozenset[str] = frozenset(values)
        prepared = _PREPARED.get(self.values)
        if prepared is None:
            prepared = _Prepared(self.values)
            # Oldest first; ports in other threads may evict at the same time.
            for oldest in list(_PREPARED)[: max(0, len(_PREPARED) - _PREPARED_KEPT + 1)]:
                _PREPARED.pop(oldest, None)
            _PREPARED[self.values] = prepared
        self._prepared = prepared
        self.longest = len(prepared.encoded[0]) if prepared.encoded else 0
        """The longest value in UTF-8 bytes (0 when there is none)."""

    @property
    def _encoded(self) -> tuple[bytes, ...]:
        return self._prepared.encoded

    @property
    def _shortest(self) -> int:
        return len(self._prepared.encoded[-1]) if self._prepared.encoded else 1

    def __repr__(self) -> str:
        return f"Redactions(<{len(self._encoded)} values>)"

    def __bool__(self) -> bool:
        return bool(self._encoded)

    def _search(self) -> PatternAutomaton:
        """The pure automaton (the reference, and the fallback)."""
        prepared = self._prepared
        if prepared.automaton is None:
            prepared.automaton = PatternAutomaton(prepared.encoded)
        return prepared.automaton

    def intervals(self, data: bytes) -> list[tuple[int, int]]:
        """Merged intervals of ``data`` covered by an occurrence of any value,
        overlapping occurrences included; sorted and disjoint. Occurrences
        that merely touch stay apart (each reads as its own marker).

        One pass over ``data`` for all values together."""
        if len(data) < self._shortest:
            return []  # no value fits: no automaton needed
        prepared = self._prepared
        if not prepared.searched():
            first = bisect.bisect_left(prepared.minus_lengths, -len(data))
            if len(prepared.encoded) - first <= _FIND_AT_MOST:
                return _outside_markers(data, _found(data, prepared.encoded[first:]))
        native = prepared.native()
        spans = None
        # Past its budget (output made of the anchors' bytes), the pure
        # automaton's case.
        if native is not None:
            with contextlib.suppress(OverBudget):
                spans = native.occurrences(data)
        if spans is None:
            spans = self._search().occurrences(data)
        return _outside_markers(data, _merged(spans))

    def pending_prefix(self, data: bytes, low: int) -> int | None:
        """The earliest position ``p >= low`` where ``data[p:]`` is a proper
        prefix of some value (a secret that bytes not read yet may complete),
        or ``None``. Linear in the longest value, whatever their number."""
        if not self._encoded or low >= len(data):
            return None
        native = self._prepared.native()
        if native is not None:
            with contextlib.suppress(OverBudget):
                return native.pending(data, low)
        return self._search().pending(data, low)

    def mask(self, data: bytes) -> bytes:
        """``data`` with every interval replaced by :data:`REDACTED`."""
        intervals = self.intervals(data)
        if not intervals:
            return data
        parts: list[bytes] = []
        cursor = 0
        for start, end in intervals:
            parts.append(data[cursor:start])
            parts.append(_REDACTED_BYTES)
            cursor = end
        parts.append(data[cursor:])
        return b"".join(parts)


def _outside_markers(data: bytes, intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``intervals`` but those that lie within a :data:`REDACTED` marker of
    ``data``: a value that is part of the marker (``redacted``) never masks
    a marker again, so masking text twice gives what masking it once gives,
    whatever the values (what is shown is never a function of them)."""
    if not intervals or _REDACTED_BYTES not in data:
        return intervals
    markers = []
    at = data.find(_REDACTED_BYTES)
    while at != -1:
        markers.append((at, at + len(_REDACTED_BYTES)))
        at = data.find(_REDACTED_BYTES, at + 1)
    return [
        (start, end)
        for start, end in intervals
        if not any(low <= start and end <= high for low, high in markers)
    ]


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spans ordered by end, overlapping ones merged (touching ones apart)."""
    merged: list[tuple[int, int]] = []
    # A span may reach back over several earlier intervals (a longer value
    # ending later), which it then absorbs.
    for start, end in spans:
        while merged and merged[-1][1] > start:
            start = min(start, merged.pop()[0])
        merged.append((start, end))
    return merged


def _found(data: bytes, values: Iterable[bytes]) -> list[tuple[int, int]]:
    """What :meth:`Redactions.intervals` answers, value by value: every
    occurrence of each value, overlapping ones merged (touching ones apart)."""
    spans: list[tuple[int, int]] = []
    for value in values:
        at = data.find(value)
        while at != -1:
            spans.append((at, at + len(value)))
            at = data.find(value, at + 1)
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def mask_text(text: str, redactions: Redactions) -> str:
    """``text`` (a whole stream or a whole string) with every secret masked."""
    if not redactions:
        return text
    data = text.encode("utf-8", "surrogatepass")
    masked = redactions.mask(data)
    return text if masked is data else masked.decode("utf-8", "surrogatepass")


def sanitize_text(text: str) -> str:
    """``text`` with lone surrogates (undecodable output bytes) as U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text


def widen(read: Read, redactions: Redactions, *, extra: int = 0) -> Read:
    """The read that :func:`mask_chunk` needs to answer ``read``: both
    cursors up to ``L - 1`` bytes earlier, and ``3 L + 4`` (plus ``extra``)
    more bytes per stream. Without secrets, ``read`` itself."""
    if not redactions:
        return read
    back = redactions.longest - 1
    return attrs.evolve(
        read,
        stdout_cursor=max(0, read.stdout_cursor - back),
        stderr_cursor=max(0, read.stderr_cursor - back),
        max_bytes=read.max_bytes + 3 * redactions.longest + 4 + extra,
    )


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


@attrs.frozen
class _Page:
    text: str
    next_cursor: int
    short: bool
    """Empty, and more bytes exist beyond those given: read again, wider."""
    start: int
    """Where ``text`` begins in the stream."""


def _raw_start(text: str, next_cursor: int, cursor: int) -> tuple[bytes | None, int]:
    """The bytes ``text`` decodes exactly (``None`` for ASCII: the text is
    its bytes) and where they begin, checked against the cursor asked."""
    if text.isascii():
        data, length = None, len(text)
    else:
        try:
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise MaskingError("output text holds characters no byte decodes to") from exc
        length = len(data)
    start = next_cursor - length
    if length and not cursor <= start <= cursor + 3:
        raise MaskingError(
            "the output's text does not match its cursors (interpreters must decode "
            "output bytes exactly, undecodable ones with surrogateescape)"
        )
    return data, start


def _page(
    text: str,
    next_cursor: int,
    widened_cursor: int,
    asked_cursor: int,
    asked_max: int,
    size: int,
    growing: bool,
    redactions: Redactions,
) -> _Page:
    """Cut the page asked for (``asked_cursor``, ``asked_max``) from the
    text of a widened read, masked (see the module doc). Positions are byte
    offsets in the stream; ``size`` is the stream's size at the read and
    ``growing`` whether the command may still write to it."""
    encoded, start = _raw_start(text, next_cursor, widened_cursor)
    data = text.encode("ascii") if encoded is None else encoded
    end = next_cursor
    if asked_cursor >= end:
        return _Page("", asked_cursor, short=size > end, start=asked_cursor)
    final = not growing and end >= size
    intervals = [(low + start, high + start) for low, high in redactions.intervals(data)]
    # Where the earliest tail starts that bytes not read yet may complete
    # into a secret: nothing from there on can be shown yet.
    pending = None if final else redactions.pending_prefix(data, 0)
    held = None if pending is None else pending + start

    def settled(position: int) -> bool:
        """Whether no occurrence completed by bytes not read yet can reach
        back before ``position`` (it would have to start with a held tail)."""
        return held is None or held >= position

    def covering(position: int) -> tuple[int, int] | None:
        for low, high in intervals:
            if low < position < high:
                return low, high
        return None

    def empty(at: int) -> _Page:
        return _Page("", at, short=size > end, start=at)

    begin = max(asked_cursor, start)
    while begin < end and _continuation(data[begin - start]):
        begin += 1
    hit = covering(begin)
    if hit is not None:
        if not settled(hit[1]):
            return empty(asked_cursor)  # where this secret ends is not known yet
        begin = hit[1]
    if begin >= end:
        return empty(begin)
    stop = min(begin + asked_max, end)
    while begin + 1 < stop < end and _continuation(data[stop - start]):
        stop -= 1
    while True:  # each rule can only move the end back, but one: see below
        moved = stop
        hit = covering(stop)
        if hit is not None:
            # A settled end lies at or before the held tail, so extending to
            # it is the one move forward, and never past what may not show.
            stop = hit[1] if settled(hit[1]) else hit[0]
        for low, high in intervals:
            if high == stop and not settled(high):
                stop = low  # it may merge with bytes not read yet
        if held is not None and held < stop:
            hit = covering(held)
            stop = hit[0] if hit is not None else held
        if stop == moved:
            break
    if stop <= begin:
        return empty(begin)
    masked = redactions.mask(data[begin - start : stop - start])
    return _Page(masked.decode("utf-8", "replace"), stop, short=False, start=begin)


def mask_chunk(
    asked: Read, widened: Read, chunk: OutputChunk, redactions: Redactions
) -> OutputChunk | NeedMoreOutput:
    """The answer to ``asked``, cut from ``chunk`` (the answer to ``widened``,
    from :func:`widen`), with every secret masked (see the module doc).

    Returns :class:`NeedMoreOutput` when a page starts at a possible secret
    whose end lies beyond the bytes given while more bytes exist; read
    ``widened`` again with the returned ``max_bytes``. Raises
    :class:`MaskingError` when the chunk's text does not match its cursors.
    Without secrets, returns ``chunk`` with its text sanitized. Either way the
    answer says where each text starts (``stdout_start``, ``stderr_start``).
    """
    state: CommandState = chunk.state
    if not redactions:
        _, out_start = _raw_start(chunk.stdout, chunk.next_stdout_cursor, asked.stdout_cursor)
        _, err_start = _raw_start(chunk.stderr, chunk.next_stderr_cursor, asked.stderr_cursor)
        stdout, stderr = sanitize_text(chunk.stdout), sanitize_text(chunk.stderr)
        if type(chunk) is not OutputChunk:
            return attrs.evolve(
                chunk, stdout=stdout, stderr=stderr, stdout_start=out_start, stderr_start=err_start
            )
        if (
            stdout is chunk.stdout
            and stderr is chunk.stderr
            and chunk.stdout_start == out_start
            and chunk.stderr_start == err_start
        ):
            return chunk  # already as the answer must be: frozen, so shared
        return OutputChunk(
            stdout=stdout,
            stderr=stderr,
            next_stdout_cursor=chunk.next_stdout_cursor,
            next_stderr_cursor=chunk.next_stderr_cursor,
            more=chunk.more,
            state=state,
            stdout_start=out_start,
            stderr_start=err_start,
        )
    growing = state.status not in TERMINAL_STATUSES
    out = _page(
        chunk.stdout,
        chunk.next_stdout_cursor,
        widened.stdout_cursor,
        asked.stdout_cursor,
        asked.max_bytes,
        state.stdout_bytes,
        growing,
        redactions,
    )
    err = _page(
        chunk.stderr,
        chunk.next_stderr_cursor,
        widened.stderr_cursor,
        asked.stderr_cursor,
        asked.max_bytes,
        state.stderr_bytes,
        growing,
        redactions,
    )
    if out.short or err.short:
        return NeedMoreOutput(max_bytes=2 * widened.max_bytes)
    return OutputChunk(
        stdout=out.text,
        stderr=err.text,
        next_stdout_cursor=out.next_cursor,
        next_stderr_cursor=err.next_cursor,
        more=chunk.more
        or state.stdout_bytes > out.next_cursor
        or state.stderr_bytes > err.next_cursor,
        state=state,
        stdout_start=out.start,
        stderr_start=err.start,
    )
