"""One automaton over many byte strings (Aho-Corasick), for masking (C17).

Masking asks two questions of a page of output, for every secret value at
once: which bytes are covered by an occurrence of one, and where the
earliest tail starts that is a proper prefix of one. Asking them value by
value costs the number of values times the page; this automaton answers both
in one pass over the page, whatever the number of values.

Strategy: the states are the trie of the values (every prefix of one), held
without a node object per prefix. The values are sorted; value ``j`` owns
the prefixes it shares with no earlier value, of depths ``lcp[j] + 1`` up to
its length (``lcp[j]``: the bytes it shares with value ``j - 1``), so a
state is a pair ``(j, depth)`` and its number is ``offset[j] + depth -
lcp[j]`` (the root is 0). A state's child along its owner's bytes is free;
the one other child a later value starts is in a dict. Failure links (the
longest proper suffix that is a state) and outputs (the longest value that
is a suffix of the state) are computed once, breadth first, into flat
arrays: memory is a few bytes per distinct prefix, time linear in the
values' total size. Scanning follows the classic automaton; at the root it
skips to the next byte that starts a value with one ``re`` search.
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Sequence
from typing import Final

__all__ = ["PatternAutomaton"]

_MEMO_KEPT: Final = 1 << 16
"""Transitions (state, byte) an automaton remembers: the states a scan
visits repeat, and a remembered move is one dict lookup."""

_RUNS: Final = tuple(re.compile(b"[^" + re.escape(bytes([byte])) + b"]") for byte in range(256))
"""For each byte, a search for the first byte that is not it (a run's end)."""


def _common_prefix(left: bytes, right: bytes) -> int:
    """The length of the longest common prefix (by halving, in C-speed
    slice comparisons)."""
    low, high = 0, min(len(left), len(right))
    while low < high:
        middle = (low + high + 1) // 2
        if left[:middle] == right[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


class PatternAutomaton:
    """The Aho-Corasick automaton of a set of non-empty byte strings."""

    __slots__ = (
        "_branch",
        "_fail_depth",
        "_fail_owner",
        "_firsts",
        "_lcp",
        "_lengths",
        "_marks",
        "_memo",
        "_offset",
        "_output",
        "_parents",
        "_values",
        "longest",
    )

    def __init__(self, values: Sequence[bytes]) -> None:
        ordered = sorted({value for value in values if value})
        self._values = ordered
        self._lengths = [len(value) for value in ordered]
        self.longest = max(self._lengths, default=0)
        lcp = [0] * len(ordered)
        for j in range(1, len(ordered)):
            lcp[j] = _common_prefix(ordered[j - 1], ordered[j])
        self._lcp = lcp
        offset = [0] * (len(ordered) + 1)
        for j, value in enumerate(ordered):
            offset[j + 1] = offset[j] + len(value) - lcp[j]
        self._offset = offset
        # The child a later value starts: keyed by (its parent's number) *
        # 256 + byte. The parent's owner is the last earlier value sharing
        # fewer bytes with the one before (a stack of smaller lcps).
        branch: dict[int, int] = {}
        parents = [0] * len(ordered)
        stack: list[int] = [0]
        for j in range(1, len(ordered)):
            depth = lcp[j]
            while len(stack) > 1 and lcp[stack[-1]] >= depth:
                stack.pop()
            parents[j] = self._number(stack[-1], depth)
            branch[parents[j] * 256 + ordered[j][depth]] = j
            stack.append(j)
        self._branch = branch
        self._parents = parents
        """The number of the state each value's own states hang from."""
        self._firsts = (
            re.compile(b"[" + b"".join(re.escape(bytes([b])) for b in self._first_bytes()) + b"]")
            if ordered
            else None
        )
        size = offset[-1] + 1
        self._fail_owner = array("i", bytes(4 * size))
        self._fail_depth = array("i", bytes(4 * size))
        self._output = array("i", bytes(4 * size))
        self._link()
        self._memo: dict[int, tuple[int, int, int, int]] = {}

    def _first_bytes(self) -> list[int]:
        return sorted({value[0] for value in self._values})

    def _number(self, owner: int, depth: int) -> int:
        return 0 if depth == 0 else self._offset[owner] + depth - self._lcp[owner]

    def _step(self, owner: int, depth: int, byte: int) -> tuple[int, int]:
        """The state after ``byte`` from ``(owner, depth)``, following
        failure links (already computed for every shallower state)."""
        values, lengths, branch = self._values, self._lengths, self._branch
        fail_owner, fail_depth = self._fail_owner, self._fail_depth
        while True:
            if depth < lengths[owner] and values[owner][depth] == byte:
                return owner, depth + 1
            number = self._number(owner, depth)
            child = branch.get(number * 256 + byte)
            if child is not None:
                return child, depth + 1
            if depth == 0:
                return 0, 0
            owner, depth = fail_owner[number], fail_depth[number]

    def _link(self) -> None:
        """Failure links and outputs of every state, shallowest first."""
        values, lengths, lcp = self._values, self._lengths, self._lcp
        starts: dict[int, list[int]] = {}
        for j in range(len(values)):
            starts.setdefault(lcp[j] + 1, []).append(j)
        active: list[int] = []
        marks: dict[int, array[int]] = {}
        output, fail_owner, fail_depth = self._output, self._fail_owner, self._fail_depth
        offset, parents = self._offset, self._parents
        for depth in range(1, self.longest + 1):
            active = [j for j in active if lengths[j] >= depth]
            active.extend(starts.get(depth, ()))
            for j in active:
                base = offset[j] - lcp[j]  # this value's own states, numbered in a row
                number = base + depth
                if depth == 1:
                    owner = at = 0
                else:
                    # The parent's failure state, stepped by this byte.
                    parent = base + depth - 1 if depth - 1 > lcp[j] else parents[j]
                    owner, at = fail_owner[parent], fail_depth[parent]
                    byte = values[j][depth - 1]
                    if at < lengths[owner] and values[owner][at] == byte:
                        at += 1  # the common case, without a call
                    else:
                        owner, at = self._step(owner, at, byte)
                fail_owner[number], fail_depth[number] = owner, at
                if depth == lengths[j]:
                    found = depth
                else:
                    found = output[offset[owner] + at - lcp[owner]] if at else 0
                output[number] = found
                if found:
                    marks.setdefault(j, array("i")).append(depth)
        self._marks = marks

    def _walk(
        self, data: bytes, start: int, found: list[tuple[int, int]] | None
    ) -> tuple[int, int]:
        """Run the automaton over ``data[start:]`` from the root; returns the
        final state. With ``found``, appends spans covered by occurrences
        (see :meth:`occurrences`)."""
        firsts, memo, runs, lengths = self._firsts, self._memo, _RUNS, self._lengths
        if firsts is None:
            return 0, 0
        owner = depth = number = 0
        size = len(data)
        at = start
        while at < size:
            if depth == 0:
                hit = firsts.search(data, at)
                if hit is None:
                    return 0, 0
                at = hit.start()
            elif not depth & 15 and depth < lengths[owner]:
                jump = self._climb(data, at, owner, depth)
                if jump:
                    at += jump
                    depth += jump
                    number += jump  # the owner's own states are numbered in a row
                    continue
            byte = data[at]
            at += 1
            key = number * 256 + byte
            move = memo.get(key)
            if move is None:
                owner, depth = self._step(owner, depth, byte)
                after = self._number(owner, depth)
                move = (owner, depth, after, self._output[after] if depth else 0)
                if len(memo) < _MEMO_KEPT:
                    memo[key] = move
            owner, depth, after, length = move
            if after == number and depth:
                # A run of this byte keeps the state where it is: skip it in
                # one search; every byte of it ends the same occurrence.
                run = runs[byte].search(data, at)
                stop = size if run is None else run.start()
                if length and found is not None:
                    found.append((at - length, stop))
                at = stop
            elif length and found is not None:
                found.append((at - length, at))
            number = after
        return owner, depth

    def _climb(self, data: bytes, at: int, owner: int, depth: int) -> int:
        """How many bytes from ``at`` follow the owner's own states from
        ``depth`` with no occurrence ending among them (0 when fewer than
        16 do): the scan skips them in C-speed comparisons."""
        value = self._values[owner]
        if data[at : at + 16] != value[depth : depth + 16]:
            return 0
        limit = self._lengths[owner]
        marks = self._marks.get(owner)
        if marks is not None:
            nearest = bisect.bisect_right(marks, depth)
            if nearest < len(marks):
                limit = marks[nearest] - 1  # the next state with an output
        limit = min(limit, depth + len(data) - at)
        if limit <= depth:
            return 0
        return _common_prefix(data[at : at + limit - depth], value[depth:limit])

    def occurrences(self, data: bytes) -> list[tuple[int, int]]:
        """Spans of ``data`` covered by occurrences of the values, ordered by
        end: for each end position the longest value ending there, and a run
        of one byte that keeps ending an occurrence as one span. Merging
        overlapping spans gives the bytes covered by any occurrence."""
        found: list[tuple[int, int]] = []
        self._walk(data, 0, found)
        return found

    def pending(self, data: bytes, low: int) -> int | None:
        """The earliest ``p >= low`` where ``data[p:]`` is a non-empty proper
        prefix of some value, or ``None``. Reads at most the last
        ``longest - 1`` bytes."""
        end = len(data)
        owner, depth = self._walk(data, max(low, end - self.longest + 1), None)
        lengths, lcp, values = self._lengths, self._lcp, self._values
        while depth:
            below = owner + 1
            if depth < lengths[owner] or (below < len(values) and lcp[below] >= depth):
                return end - depth
            number = self._number(owner, depth)
            owner, depth = self._fail_owner[number], self._fail_depth[number]
        return None
