"""A native search for many secret values at once, for masking (C17).

:class:`~sandrail.core._patterns.PatternAutomaton` answers masking's two
questions (which bytes an occurrence of a value covers; where the earliest
tail starts that a value may still complete) in pure Python: a step per byte
of a page, and a build over every byte of every value. This module answers
the same two questions with a compiled Aho-Corasick automaton
(`ahocorasick_rs <https://pypi.org/project/ahocorasick-rs/>`_, the optional
``native`` extra) when it is installed, and says so by returning ``None``
from :func:`anchored_search` when it is not: the pure automaton stays the
fallback, and the reference the tests hold this one to.

Why a native library may stand in the core: ``ahocorasick_rs`` is pure
computation over the bytes it is handed (no I/O, no clock, no randomness
that changes an answer, no state kept between calls); it is imported here
only, lazily, and nothing of it leaks past :class:`AnchoredSearch`, whose
answers are plain lists and integers.

Strategy: anchors, so the build does not scale with the values' length.
Every value is at least :data:`ANCHOR` bytes long (values shorter than
:data:`~sandrail.core._masking.MIN_REDACTED_LENGTH` characters are never
masked), so

- each value gets one *anchor*: an :data:`ANCHOR`-byte window of it, chosen
  to be distinct from the other values' anchors where it can be (the end
  first: values that share a long prefix differ there) and varied (a run of
  one byte matches runs of output). An occurrence of a value has its anchor
  at a known offset, so the automaton over the anchors finds every
  occurrence's candidate start, and one ``bytes.startswith`` at C speed
  confirms or refutes it;
- each value's first :data:`ANCHOR` bytes are its *head*: a tail of a page
  that a value may complete starts with a head, or is shorter than one.
  Candidates are confirmed in order with one binary search of the sorted
  values.

Both automata hold :data:`ANCHOR` bytes per value, whatever the values'
length. Output made to defeat the anchors (a run of a byte the anchors are
made of, candidates that almost match) costs work per candidate; past a
budget proportional to the page, :meth:`AnchoredSearch.occurrences` and
:meth:`AnchoredSearch.pending` raise :class:`OverBudget` and the caller asks
the pure automaton, which handles runs and shared prefixes in its own way.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, Final

__all__ = ["ANCHOR", "AnchoredSearch", "OverBudget", "anchored_search", "native_available"]

ANCHOR: Final = 8
"""Bytes of each anchor and head: the fewest any masked value has."""

_BYTES_PER_CHECK: Final = 16
"""A page's budget of candidate checks in :meth:`AnchoredSearch.occurrences`:
one per this many bytes (plus :data:`_CHECKS_FREE`). Real occurrences are
rarer than that; a denser page is made of the anchors' bytes, and each
candidate the native automaton reports costs about a microsecond, where the
pure automaton skips a run of one byte in one search."""
_CHECKS_FREE: Final = 512
_WINDOW: Final = 2048
"""Bytes searched at a time, so a page over its budget stops early."""
_TAILS_TRIED: Final = 64
"""Held-tail candidates :meth:`AnchoredSearch.pending` refutes before it
leaves the question to the pure automaton (each costs a binary search over
values as long as the tail)."""
_FIRST_TAILS: Final = 256
"""Bytes of a page's end searched first for held tails (then four times as
many each round): the earliest candidate is the answer, usually."""

_NATIVE: dict[str, Any] = {}


class OverBudget(Exception):
    """A page made more candidates than the anchors check for it: ask the
    pure automaton."""


def _native() -> Any:
    """The ``ahocorasick_rs`` module, or ``None`` when it is not installed
    (asked once)."""
    if "module" not in _NATIVE:
        try:
            import ahocorasick_rs

            _NATIVE["module"] = ahocorasick_rs
        except ImportError:
            _NATIVE["module"] = None
    return _NATIVE["module"]


def native_available() -> bool:
    """Whether the native automaton is installed (the ``native`` extra)."""
    return _native() is not None


def anchored_search(values: Sequence[bytes]) -> AnchoredSearch | None:
    """An :class:`AnchoredSearch` over ``values`` (each at least
    :data:`ANCHOR` bytes), or ``None`` without the native library."""
    native = _native()
    if native is None or not values:
        return None
    return AnchoredSearch(values, native)


def _anchor_offset(value: bytes, taken: dict[bytes, list[tuple[bytes, int]]]) -> int:
    """Where in ``value`` its anchor starts: the first of a few windows (the
    end, the start, then evenly inside) that no other value anchors at and
    that has the most distinct bytes."""
    last = len(value) - ANCHOR
    offsets = dict.fromkeys((last, 0, last // 2, last // 4, 3 * last // 4))
    best, best_score = last, (-1, -1)
    for offset in offsets:
        window = value[offset : offset + ANCHOR]
        score = (window not in taken, len(set(window)))
        if score > best_score:
            best, best_score = offset, score
    return best


class AnchoredSearch:
    """The native automata of a set of values (see the module doc).

    Answers what :class:`~sandrail.core._patterns.PatternAutomaton` answers,
    or raises :class:`OverBudget` when a page is too costly for the anchors
    (ask the pure automaton then)."""

    __slots__ = ("_anchors", "_groups", "_heads", "_values", "longest")

    def __init__(self, values: Sequence[bytes], native: Any) -> None:
        ordered = sorted({value for value in values if value})
        if any(len(value) < ANCHOR for value in ordered):
            raise ValueError(f"every value needs at least {ANCHOR} bytes")
        self._values = ordered
        self.longest = max((len(value) for value in ordered), default=0)
        groups: dict[bytes, list[tuple[bytes, int]]] = {}
        # Shortest first: a short value has few windows to choose from.
        for value in sorted(ordered, key=len):
            offset = _anchor_offset(value, groups)
            groups.setdefault(value[offset : offset + ANCHOR], []).append((value, offset))
        self._groups = tuple(tuple(members) for members in groups.values())
        self._anchors = native.BytesAhoCorasick(list(groups))
        self._heads = native.BytesAhoCorasick(list(dict.fromkeys(v[:ANCHOR] for v in ordered)))

    def occurrences(self, data: bytes) -> list[tuple[int, int]]:
        """Every occurrence of a value in ``data`` as a span, ordered by end
        (merging overlapping spans gives the bytes covered by any
        occurrence); :class:`OverBudget` when the page costs more checks
        than its budget."""
        groups, view, size = self._groups, memoryview(data), len(data)
        budget = _CHECKS_FREE
        spans: list[tuple[int, int]] = []
        low = 0
        while True:
            high = min(size, low + _WINDOW)
            budget += (high - low) // _BYTES_PER_CHECK
            for index, at, _ in self._anchors.find_matches_as_indexes(
                view[low:high], overlapping=True
            ):
                members = groups[index]
                budget -= len(members)
                if budget < 0:
                    raise OverBudget
                for value, offset in members:
                    start = low + at - offset
                    if start >= 0 and data.startswith(value, start):
                        spans.append((start + len(value), start))
            if high == size:
                break
            # An anchor that ends past this window starts in its last bytes.
            low = high - (ANCHOR - 1)
        spans.sort()
        return [(start, end) for end, start in spans]

    def pending(self, data: bytes, low: int) -> int | None:
        """The earliest ``p >= low`` where ``data[p:]`` is a non-empty proper
        prefix of some value, or ``None``; :class:`OverBudget` when more
        candidates were refuted than the budget allows."""
        end = len(data)
        first = max(low, end - self.longest + 1, 0)
        if first >= end:
            return None
        view, refuted = memoryview(data), 0
        window, size = first, _FIRST_TAILS
        while True:
            high = min(end, window + size)
            heads = self._heads.find_matches_as_indexes(view[window:high], overlapping=True)
            candidates: list[int] = [window + at for _, at, _ in heads]
            if high == end:  # tails shorter than a head
                candidates.extend(range(max(first, end - ANCHOR + 1), end))
            for position in candidates:
                if self._held(data[position:]):
                    return position
                refuted += 1
                if refuted > _TAILS_TRIED:
                    raise OverBudget
            if high == end:
                return None
            window, size = high - (ANCHOR - 1), 4 * size

    def _held(self, tail: bytes) -> bool:
        """Whether ``tail`` is a proper prefix of some value."""
        values = self._values
        index = bisect.bisect_left(values, tail)
        if index == len(values) or not values[index].startswith(tail):
            return False
        if len(values[index]) > len(tail):
            return True
        return index + 1 < len(values) and values[index + 1].startswith(tail)
