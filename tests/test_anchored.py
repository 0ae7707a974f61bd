"""The native anchored search answers exactly as the pure automaton (C17).

:mod:`sandrail.core._anchored` is masking's fast path (the ``native`` extra):
these properties hold it to :class:`sandrail.core._patterns.PatternAutomaton`,
the pure reference, on random values and output made to be hard for it
(shared prefixes, periodic values, runs of the anchors' bytes), and check
that masking falls back to the pure automaton, with the same answers, when
the library is missing or a page is over the anchors' budget.
"""

from __future__ import annotations

import contextlib
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandrail.core import Redactions
from sandrail.core import _anchored as anchored
from sandrail.core import _masking as masking
from sandrail.core._masking import _merged
from sandrail.core._patterns import PatternAutomaton

pytestmark = pytest.mark.skipif(
    not anchored.native_available(), reason="the native extra (ahocorasick-rs) is not installed"
)


def _native(values: list[bytes]) -> anchored.AnchoredSearch:
    search = anchored.anchored_search(values)
    assert search is not None
    return search


values_of = st.lists(
    st.builds(
        lambda head, tail: head + tail,
        st.sampled_from([b"", b"aaaaaaa", b"abababa", b"a" * 12, b"a" * 30, b"ab" * 10]),
        st.binary(min_size=1, max_size=6).map(lambda raw: bytes(b"ab\xc3"[x % 3] for x in raw)),
    ).filter(lambda value: len(value) >= anchored.ANCHOR)
    | st.builds(
        lambda unit, times: unit * times, st.sampled_from([b"a", b"ab", b"aab"]), st.integers(8, 20)
    ),
    min_size=1,
    max_size=12,
)
output_of = st.lists(
    st.sampled_from([b"a", b"b", b"\xc3", b"Z", b"a" * 17, b"a" * 45, b"ab" * 9, b"aab" * 5]),
    max_size=16,
).map(b"".join)


@given(values_of, output_of, st.integers(0, 200))
def test_c17_native_search_answers_as_the_pure_automaton(
    values: list[bytes], data: bytes, low: int
) -> None:
    """Every occurrence's bytes and the earliest held tail are what the pure
    automaton finds, whenever the anchors answer at all."""
    native, pure = _native(values), PatternAutomaton(values)
    # Past the budget the caller asks the pure automaton: the next test.
    with contextlib.suppress(anchored.OverBudget):
        assert _merged(native.occurrences(data)) == _merged(pure.occurrences(data))
    with contextlib.suppress(anchored.OverBudget):
        assert native.pending(data, low) == pure.pending(data, low)


@given(values_of, output_of, st.integers(0, 200))
def test_c17_masking_answers_alike_with_and_without_the_native_search(
    values: list[bytes], data: bytes, low: int
) -> None:
    """:class:`Redactions` (native first, the pure automaton past the
    anchors' budget) answers as it does with the pure automaton alone."""
    texts = [value.decode("utf-8", "surrogateescape") for value in values]
    texts = [text for text in texts if masking.sanitize_text(text) == text]
    with_native = Redactions(texts)
    answers = (with_native.intervals(data), with_native.pending_prefix(data, low))
    with _without_native():
        alone = Redactions(texts)
        assert alone._prepared.native() is None
        assert (alone.intervals(data), alone.pending_prefix(data, low)) == answers


@settings(max_examples=25)
@given(st.integers(0, 2**32), st.integers(0, 4))
def test_c17_native_search_of_long_values_over_many_windows_answers_as_the_pure_one(
    seed: int, shape: int
) -> None:
    """Values longer than the first tails searched and pages longer than a
    window: an anchor or a held tail across a window's edge is found once."""
    draw = random.Random(seed)
    letters = "ab" if shape < 2 else "abcdefgh"
    values = [
        "".join(draw.choice(letters) for _ in range(draw.randint(8, 3_000))) for _ in range(6)
    ]
    pieces = [draw.choice(values)[: draw.randint(1, 3_000)] for _ in range(8)]
    data = "".join(piece + draw.choice(letters) * draw.randint(0, 9) for piece in pieces).encode()
    data += values[shape][: draw.randint(1, len(values[shape]))].encode()
    encoded = [value.encode() for value in values]
    native, pure = _native(encoded), PatternAutomaton(encoded)
    with contextlib.suppress(anchored.OverBudget):
        assert _merged(native.occurrences(data)) == _merged(pure.occurrences(data))
    for low in (0, len(data) // 2, len(data) - 300, len(data) - 5):
        with contextlib.suppress(anchored.OverBudget):
            assert native.pending(data, max(low, 0)) == pure.pending(data, max(low, 0))


@pytest.fixture
def tiny_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(anchored, "_CHECKS_FREE", 0)
    monkeypatch.setattr(anchored, "_BYTES_PER_CHECK", 1 << 40)
    monkeypatch.setattr(anchored, "_TAILS_TRIED", 0)


def test_c17_a_page_over_the_anchors_budget_is_searched_by_the_pure_automaton(
    tiny_budget: None,
) -> None:
    """Output made of an anchor's bytes is over the budget: the same answer
    comes from the pure automaton (built for it), never a guess."""
    values = ["a" * 8, "a" * 9 + "b", "aaaaaaaaaaaaaaaaaaaab"]
    masking._PREPARED.clear()
    redactions = Redactions(values)
    data = b"x" + b"a" * 30 + b"b" + b"a" * 12
    native = redactions._prepared.native()
    assert native is not None
    with pytest.raises(anchored.OverBudget):
        native.occurrences(data)
    with pytest.raises(anchored.OverBudget):
        native.pending(b"xx" + b"a" * 3 + b"z" + b"a" * 4, 0)
    assert redactions.intervals(data) == [(1, 32), (32, 44)]  # touching: two markers
    assert redactions.pending_prefix(b"xy" + b"a" * 5, 0) == 2
    assert redactions._prepared.automaton is not None  # the fallback was built


def test_c17_the_anchors_are_distinct_where_the_values_differ() -> None:
    """Values sharing a long prefix are anchored where they differ (their
    ends), so output of the prefix alone is no candidate for any."""
    values = [b"a" * 200 + bytes([0x61 + n]) + b"!" for n in range(1, 9)]
    search = _native(values)
    assert len(search._groups) == len(values)
    assert search.occurrences(b"a" * 1_000) == []
    assert search.occurrences(b"a" * 300 + values[3] + b"a" * 5) == [(300, 502)]


def test_c17_native_search_refuses_values_shorter_than_an_anchor() -> None:
    with pytest.raises(ValueError, match="at least 8 bytes"):
        _native([b"short"])
    assert anchored.anchored_search([]) is None


class _without_native:
    """The library missing: an import of it fails, and nothing prepared with it is kept."""

    def __enter__(self) -> None:
        self._saved = sys.modules.get("ahocorasick_rs")
        sys.modules["ahocorasick_rs"] = None  # type: ignore[assignment]
        anchored._NATIVE.clear()
        masking._PREPARED.clear()

    def __exit__(self, *exc: object) -> None:
        if self._saved is None:
            sys.modules.pop("ahocorasick_rs", None)
        else:
            sys.modules["ahocorasick_rs"] = self._saved
        anchored._NATIVE.clear()
        masking._PREPARED.clear()


def test_c17_without_the_native_library_masking_uses_the_pure_automaton() -> None:
    """The extra is optional: without it every search is the pure automaton's."""
    values = [f"tok-{n:04d}-secret" for n in range(20)]
    data = ("x " + values[5] + " y " + values[12][:9]).encode()
    with _without_native():
        assert not anchored.native_available()
        assert anchored.anchored_search([value.encode() for value in values]) is None
        redactions = Redactions(values)
        assert redactions.intervals(data) == [(2, 17)]
        assert redactions.pending_prefix(data, 0) == 20
        assert redactions._prepared.automaton is not None
    assert anchored.native_available()
