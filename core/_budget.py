"""Fitting a result's content into ``max_output_bytes`` (C12-C14).

Strategy: the canonical size of a content is its *fixed size* (the canonical
size with every shrinkable string emptied) plus, for each shrinkable string,
the bytes it occupies inside its JSON quotes (:func:`escaped_size`). So the
budget left for the shrinkable strings, the *room*, is known before any of
them is touched, and the strings compete for it alone.

The room is shared by water-filling: strings that fit within the fair level
stay whole, the rest get equal allowances. A cut string (here, or any text
:func:`cut_text` shortens: the one cutter, one marker) keeps a head and a
tail (the tail gets at least half: the end of a failing build log is where
the error is) joined by an omission marker that says how many UTF-8 bytes
were left out. A greedy pass then hands the bytes that rounding, character
boundaries and shorter markers left over to the cut strings, until no
boundary can take its next character.

Huge strings are never escaped or encoded as a whole: a string with more
characters than the room is certainly cut (each character costs at least one
byte), and the longest head or tail within an allowance is found by searching
over slices of at most that many characters. The one whole-string pass left is
the UTF-8 length of a cut string, which the marker must state exactly: O(1)
for ASCII text (``str.isascii`` reads a flag), one C encoding pass otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, NamedTuple

from ._canonical import canonical_json, escaped_size
from ._effects import TERMINAL_STATUSES
from ._results import ErrorCode

__all__ = [
    "DEFAULT_OBSERVED_RESULTS",
    "DEFAULT_UNCERTAIN_REASON_CODES",
    "SHRINKABLE_FIELDS",
    "BudgetError",
    "Excerpt",
    "Omission",
    "cut_text",
    "fit_to_budget",
    "fixed_size",
    "minimal_uncertain_content",
    "minimal_uncertain_size",
    "omission_marker",
    "parse_omissions",
]

SHRINKABLE_FIELDS: Final = ("command", "stdout", "stderr", "instruction", "outcome_reason")
"""Top-level content keys holding presentation text, the only text C13 lets us shorten."""

DEFAULT_UNCERTAIN_REASON_CODES: Final = tuple(
    code.value
    for code in (
        ErrorCode.EVIDENCE_INCOMPLETE,
        ErrorCode.SANDBOX_OUTCOME_UNKNOWN,
        ErrorCode.AUTHORITY_LOST,
        ErrorCode.REQUEST_DRIFTED,
        ErrorCode.ABORTED,
    )
)
"""The ``error_type`` values an ``uncertain`` result can carry."""

DEFAULT_OBSERVED_RESULTS: Final = tuple(sorted(TERMINAL_STATUSES))
"""Terminal command states an ``uncertain`` result may report as ``observed_result``."""

_MARKER_FORMAT: Final = "\n[... {} bytes omitted ...]\n"
# Escaped size of a marker without its digits: each newline costs two bytes ("\n").
_MARKER_BASE: Final = escaped_size(_MARKER_FORMAT.format(""))
_MARKER_PATTERN: Final = re.compile(r"\n\[\.\.\. (0|[1-9][0-9]*) bytes omitted \.\.\.\]\n")


class BudgetError(ValueError):
    """The content's fixed part alone exceeds ``max_output_bytes``: nothing can fit.

    ``required_bytes`` is the smallest canonical size any fitted content can
    have (its :func:`fixed_size`); ``max_output_bytes`` is the budget asked for.
    """

    def __init__(self, required_bytes: int, max_output_bytes: int) -> None:
        super().__init__(
            f"content needs at least {required_bytes} bytes of canonical JSON with every"
            f" shrinkable field emptied, but max_output_bytes is {max_output_bytes}"
        )
        self.required_bytes = required_bytes
        self.max_output_bytes = max_output_bytes


class Excerpt(NamedTuple):
    """A text known only at its two ends, for :func:`fit_to_budget`: ``head``
    and ``tail`` were read, the ``omitted_bytes`` between them never were.

    A field holding one is always cut: it renders as part of ``head``, an
    omission marker counting everything left out (the unread bytes too), and
    part of ``tail``.
    """

    head: str
    tail: str
    omitted_bytes: int


class Omission(NamedTuple):
    """One omission marker found in a text: ``text[start:end]`` is the marker."""

    start: int
    end: int
    omitted_bytes: int


def omission_marker(omitted_bytes: int) -> str:
    """The marker standing for ``omitted_bytes`` UTF-8 bytes left out of a text.

    ``"\\n[... 16776960 bytes omitted ...]\\n"``: ASCII on a line of its own.
    Inside a JSON string it costs 28 bytes plus one per digit (each newline
    escapes to two bytes).
    """
    return _MARKER_FORMAT.format(omitted_bytes)


def parse_omissions(text: str) -> list[Omission]:
    """Every substring of ``text`` shaped like an omission marker, in order.

    A text that held marker-like lines before it was cut yields those too; the
    caller decides which one :func:`fit_to_budget` inserted.
    """
    return [
        Omission(match.start(), match.end(), int(match.group(1)))
        for match in _MARKER_PATTERN.finditer(text)
    ]


def fixed_size(content: Mapping[str, Any]) -> int:
    """Canonical size of ``content`` with every shrinkable string field set to ``""``.

    Raises :class:`~sandrail.core._canonical.CanonicalJSONError` when the
    content has no canonical form.
    """
    emptied = dict(content)
    for key in SHRINKABLE_FIELDS:
        if isinstance(emptied.get(key), str | Excerpt):
            emptied[key] = ""
    return len(canonical_json(emptied))


def fit_to_budget(
    content: Mapping[str, Any],
    max_output_bytes: int,
    *,
    utf8_lengths: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Return a new dict like ``content`` whose canonical JSON is at most ``max_output_bytes``.

    Contract (C12, C13):

    - If ``content`` already fits, the result is an equal copy.
    - Only top-level keys named in :data:`SHRINKABLE_FIELDS` whose values are
      ``str`` may change. Every other key keeps its value (the same object);
      a shrinkable key holding a non-``str`` counts as fixed.
    - A shortened field is ``head + omission_marker(n) + tail``, where ``head``
      is a prefix and ``tail`` a suffix of the original, and ``n`` is the
      number of UTF-8 bytes between them. Cuts fall between code points, so
      the result is valid UTF-8 whenever the input is.
    - Sharing is fair (water-filling): with ``room = max_output_bytes -
      fixed_size(content)``, a field whose escaped size is within the fair
      level stays whole, and the fields above it get equal allowances. Inside
      a cut field the tail gets at least half of what is left after the marker.
    - Utilisation: when any field was cut, bytes left unused are fewer than
      taking any cut field's next head or tail character would cost, so at
      most 5 (a character escapes to at most 6 bytes).
    - A field whose share cannot hold even its marker becomes ``""``. This
      happens only when the bytes left unused are fewer than that marker needs.
    - A shrinkable field may hold an :class:`Excerpt` (a text read only at
      its ends): it is always cut, never past the unread gap, and its marker
      counts the unread bytes too.

    Raises :class:`BudgetError` exactly when ``fixed_size(content) >
    max_output_bytes``, and ``CanonicalJSONError`` when the fixed part has no
    canonical form. Shrinkable strings must not hold lone surrogates (which
    ``canonical_json`` rejects); one is counted as a 3-byte character and may
    survive into the result.

    Cost: independent of the length of a cut ASCII string; one C encoding pass
    over a cut non-ASCII string to count its UTF-8 bytes, unless
    ``utf8_lengths`` gives it: a caller that already knows a field's UTF-8
    length (a reader knows how many bytes it read) may pass it, and must pass
    it right, since the marker states it. A length that cannot be right (below
    the character count or above four bytes a character) raises ``ValueError``.
    """
    fixed = fixed_size(content)
    if fixed > max_output_bytes:
        raise BudgetError(fixed, max_output_bytes)
    room = max_output_bytes - fixed
    texts = {
        key: value
        for key in SHRINKABLE_FIELDS
        if isinstance(value := content.get(key), str) and value
    }
    excerpts = {
        key: value for key in SHRINKABLE_FIELDS if isinstance(value := content.get(key), Excerpt)
    }
    # `None` stands for "longer than the room", which needs no exact size.
    sizes: dict[str, int | None] = {
        key: escaped_size(text) if len(text) <= room else None for key, text in texts.items()
    }
    known = [size for size in sizes.values() if size is not None]
    result = dict(content)
    if not excerpts and len(known) == len(sizes) and sum(known) <= room:
        return result

    lengths = utf8_lengths or {}
    for key, length in lengths.items():
        text = texts.get(key)
        if text is not None and not len(text) <= length <= 4 * len(text):
            raise ValueError(f"utf8_lengths[{key!r}] = {length} cannot be the length of that text")
    candidates = {key: _Cut(text, sizes[key], lengths.get(key)) for key, text in texts.items()}
    for key, excerpt in excerpts.items():
        candidates[key] = _Cut.of_excerpt(excerpt)
        sizes[key] = None
    emptied: set[str] = set()
    while True:
        wholes, allowances = _water_fill(
            {key: size for key, size in sizes.items() if key not in emptied}, room
        )
        cuts = {key: candidates[key] for key in allowances}
        deficient = [key for key, cut in cuts.items() if allowances[key] < cut.marker_only_size()]
        if not deficient:
            break
        # Drop the field whose marker is longest; the others then get more room.
        emptied.add(max(deficient, key=lambda key: cuts[key].marker_only_size()))

    spare = room - sum(sizes[key] or 0 for key in wholes)
    for key, cut in cuts.items():
        cut.start(allowances[key])
        spare -= cut.used()
    _fill(cuts, spare)

    for key in emptied:
        result[key] = ""
    for key, cut in cuts.items():
        result[key] = cut.render()
    return result


def cut_text(text: str, limit: int) -> str | None:
    """``text`` within ``limit`` bytes of its escaped size (what it occupies
    inside JSON quotes): itself if it fits, else cut as :func:`fit_to_budget`
    cuts a field, ``head + omission_marker(n) + tail`` with the tail given at
    least half; ``None`` when not even the marker fits. The one text cutter:
    every text sandrail shortens is cut by it, with one marker."""
    size = escaped_size(text) if len(text) <= limit else None
    if size is not None and size <= limit:
        return text
    cut = _Cut(text, size)
    if limit < cut.marker_only_size():
        return None
    cut.start(limit)
    return cut.render()


def minimal_uncertain_content(
    locator: Mapping[str, Any],
    *,
    reason_codes: Iterable[str] = DEFAULT_UNCERTAIN_REASON_CODES,
    observed_results: Iterable[str] = DEFAULT_OBSERVED_RESULTS,
) -> dict[str, Any]:
    """The largest of the smallest ``uncertain`` contents a call with ``locator`` can return.

    ``locator`` holds the owner identity, ``session_id``, ``operation_key``
    and ``call_id``. The content adds the longest of ``reason_codes`` as
    ``error_type``, ``evidence_incomplete``, the longest of
    ``observed_results``, and a ``sandbox_id`` (128 characters) and
    ``task_id`` (64) of the longest legal length. None of it may be cut
    (C13), so its canonical size is what any ``uncertain`` result of the call
    needs at least.
    """
    return {
        "status": "uncertain",
        "ok": False,
        "error_type": max(reason_codes, key=escaped_size),
        "evidence_incomplete": True,
        "observed_result": max(observed_results, key=escaped_size),
        **locator,
        "sandbox_id": "s" * 128,
        "task_id": "a" * 64,
    }


def minimal_uncertain_size(
    locator: Mapping[str, Any],
    *,
    reason_codes: Iterable[str] = DEFAULT_UNCERTAIN_REASON_CODES,
    observed_results: Iterable[str] = DEFAULT_OBSERVED_RESULTS,
) -> int:
    """Canonical size of :func:`minimal_uncertain_content` (the C14 admission check).

    A call whose ``max_output_bytes`` is below this size is rejected before
    any side effect with ``e2b_command_budget_below_minimum_identity``.
    """
    content = minimal_uncertain_content(
        locator, reason_codes=reason_codes, observed_results=observed_results
    )
    return len(canonical_json(content))


def _water_fill(sizes: Mapping[str, int | None], room: int) -> tuple[list[str], dict[str, int]]:
    """Split ``room`` fairly: (fields kept whole, allowance of each field to cut)."""
    order = sorted(sizes, key=lambda key: (sizes[key] is None, sizes[key] or 0))
    wholes: list[str] = []
    left = room
    for index, key in enumerate(order):
        size = sizes[key]
        sharing = len(order) - index
        if size is None or size * sharing > left:
            share, extra = divmod(left, sharing)
            cut = order[index:]
            return wholes, {name: share + int(rank < extra) for rank, name in enumerate(cut)}
        wholes.append(key)
        left -= size
    return wholes, {}


def _fill(cuts: Mapping[str, _Cut], spare: int) -> None:
    """Hand ``spare`` bytes to the cut fields until no boundary can take more."""
    progress = True
    while progress:
        progress = False
        for cut in cuts.values():
            if cut.whole:
                continue
            if cut.whole_cost() <= spare:
                # A field cut only a little beyond its allowance can be whole again.
                spare -= cut.make_whole()
                progress = True
                continue
            gained = cut.grow(spare)
            spare -= gained
            progress = progress or gained > 0


_UTF8_CHUNK: Final = 1 << 18


def _utf8_len(text: str) -> int:
    if text.isascii():
        return len(text)
    # In slices, so that a huge text is never held a second time as bytes.
    return sum(
        len(text[start : start + _UTF8_CHUNK].encode("utf-8", "surrogatepass"))
        for start in range(0, len(text), _UTF8_CHUNK)
    )


_NEVER: Final = 1 << 62
"""A cost no budget can pay."""


def _marker_size(omitted_bytes: int) -> int:
    return _MARKER_BASE + len(str(omitted_bytes))


class _Cut:
    """A field being cut: ``text[:head] + marker + text[len(text) - tail:]``.

    ``*_size`` are escaped sizes, ``*_bytes`` UTF-8 lengths of head and tail.
    """

    __slots__ = (
        "gap",
        "head",
        "head_bytes",
        "head_size",
        "size",
        "tail",
        "tail_bytes",
        "tail_size",
        "text",
        "total_bytes",
        "whole",
    )

    def __init__(
        self,
        text: str,
        size: int | None,
        total_bytes: int | None = None,
        gap: int | None = None,
    ) -> None:
        self.text = text
        self.size = size
        self.total_bytes = _utf8_len(text) if total_bytes is None else total_bytes
        self.gap = gap
        """For an excerpt: the index in ``text`` where the unread bytes lie,
        which neither the head nor the tail may cross."""
        self.whole = False
        self.head = self.head_size = self.head_bytes = 0
        self.tail = self.tail_size = self.tail_bytes = 0

    @classmethod
    def of_excerpt(cls, excerpt: Excerpt) -> _Cut:
        text = excerpt.head + excerpt.tail
        total = _utf8_len(excerpt.head) + _utf8_len(excerpt.tail) + excerpt.omitted_bytes
        return cls(text, None, total, gap=len(excerpt.head))

    def _bounds(self, head: bool) -> tuple[int, int]:
        """The omitted middle a boundary may move into: ``text[start:stop]``."""
        start, stop = self.head, len(self.text) - self.tail
        if self.gap is not None:
            if head:
                stop = min(stop, self.gap)
            else:
                start = max(start, self.gap)
        return start, max(start, stop)

    def omitted(self) -> int:
        return self.total_bytes - self.head_bytes - self.tail_bytes

    def marker_only_size(self) -> int:
        return _marker_size(self.total_bytes)

    def used(self) -> int:
        return self.head_size + self.tail_size + _marker_size(self.omitted())

    def whole_cost(self) -> int:
        """Extra bytes keeping the whole text would take (more than the room if
        unknown; an excerpt can never be whole)."""
        if self.gap is not None:
            return _NEVER
        return self.size - self.used() if self.size is not None else len(self.text)

    def make_whole(self) -> int:
        cost = self.whole_cost()
        self.whole = True
        return cost

    def start(self, allowance: int) -> None:
        """Cut to fit ``allowance``, which holds at least the marker of the whole text."""
        available = allowance - self.marker_only_size()
        start, stop = self._bounds(True)
        self._take(True, *_longest_prefix(self.text, start, stop, available // 2))
        start, stop = self._bounds(False)
        self._take(False, *_longest_suffix(self.text, start, stop, available - self.head_size))
        self.grow(allowance - self.used())

    def grow(self, spare: int) -> int:
        """Extend tail, then head, while ``spare`` allows; return the bytes taken."""
        before = self.used()
        limit = before + spare
        while True:
            grew_tail = self._extend(False, limit - self.used())
            grew_head = self._extend(True, limit - self.used())
            if not (grew_tail or grew_head):
                return self.used() - before

    def render(self) -> str:
        if self.whole:
            return self.text
        tail = self.text[len(self.text) - self.tail :]
        return self.text[: self.head] + omission_marker(self.omitted()) + tail

    def _extend(self, head: bool, spare: int) -> bool:
        """Move one boundary into the omitted middle as far as ``spare`` bytes allow."""
        start, stop = self._bounds(head)
        if start >= stop:
            return False
        find = _longest_prefix if head else _longest_suffix
        count, size = find(self.text, start, stop, spare)
        if count == 0:
            # The next character may still fit if it takes a digit off the marker.
            piece = self.text[start : start + 1] if head else self.text[stop - 1 : stop]
            count, size = len(piece), escaped_size(piece)
        piece = self.text[start : start + count] if head else self.text[stop - count : stop]
        piece_bytes = _utf8_len(piece)
        omitted = self.omitted()
        cost = size + _marker_size(omitted - piece_bytes) - _marker_size(omitted)
        if count == 0 or cost > spare:
            return False
        self._take(head, count, size, piece_bytes)
        return True

    def _take(self, head: bool, count: int, size: int, piece_bytes: int | None = None) -> None:
        if piece_bytes is None:
            if head:
                piece_bytes = _utf8_len(self.text[:count])
            else:
                piece_bytes = _utf8_len(self.text[len(self.text) - count :])
        if head:
            self.head += count
            self.head_size += size
            self.head_bytes += piece_bytes
        else:
            self.tail += count
            self.tail_size += size
            self.tail_bytes += piece_bytes


def _longest_prefix(text: str, start: int, stop: int, limit: int) -> tuple[int, int]:
    """Longest ``text[start:start + count]`` (within ``stop``) escaping to at most ``limit``
    bytes: ``(count, escaped size)``."""
    high = max(0, min(limit, stop - start))
    size = escaped_size(text[start : start + high])
    if size <= limit:
        return high, size
    # Each character costs at least one byte, so dropping `size - limit` of
    # them fits; search between that and `high`, escaping only the gap.
    low = high - (size - limit) if size - limit < high else 0
    low_size = size - escaped_size(text[start + low : start + high])
    while high - low > 1:
        middle = (low + high) // 2
        middle_size = low_size + escaped_size(text[start + low : start + middle])
        if middle_size <= limit:
            low, low_size = middle, middle_size
        else:
            high = middle
    return low, low_size


def _longest_suffix(text: str, start: int, stop: int, limit: int) -> tuple[int, int]:
    """Longest ``text[stop - count:stop]`` (within ``start``) escaping to at most ``limit``
    bytes: ``(count, escaped size)``."""
    high = max(0, min(limit, stop - start))
    size = escaped_size(text[stop - high : stop])
    if size <= limit:
        return high, size
    low = high - (size - limit) if size - limit < high else 0
    low_size = size - escaped_size(text[stop - high : stop - low])
    while high - low > 1:
        middle = (low + high) // 2
        middle_size = low_size + escaped_size(text[stop - middle : stop - low])
        if middle_size <= limit:
            low, low_size = middle, middle_size
        else:
            high = middle
    return low, low_size
