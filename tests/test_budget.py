"""Tests for ``sandrail.core._budget``: fitting results into ``max_output_bytes`` (C12-C14)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandrail.core._budget import (
    DEFAULT_OBSERVED_RESULTS,
    DEFAULT_UNCERTAIN_REASON_CODES,
    SHRINKABLE_FIELDS,
    BudgetError,
    Excerpt,
    Omission,
    fit_to_budget,
    fixed_size,
    minimal_uncertain_content,
    minimal_uncertain_size,
    omission_marker,
    parse_omissions,
)
from sandrail.core._canonical import canonical_json, escaped_size
from sandrail.testing.strategies import (
    contents,
    contents_and_budgets,
    huge_texts,
    locators,
    multibyte_chars,
    sandbox_ids,
)

# ---------------------------------------------------------------------------
# Reading a fitted result back
# ---------------------------------------------------------------------------


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _marker_size(omitted: int) -> int:
    return escaped_size(omission_marker(omitted))


def _shrinkable_texts(content: Mapping[str, Any]) -> dict[str, str]:
    return {
        key: value
        for key in SHRINKABLE_FIELDS
        if isinstance(value := content.get(key), str) and value
    }


def _split(original: str, shrunk: str) -> tuple[str, int, str] | None:
    """``(head, omitted, tail)`` if ``shrunk`` is ``head + marker(omitted) + tail`` of
    ``original`` with the right byte count; any marker occurrence may be the one."""
    for omission in parse_omissions(shrunk):
        head, tail = shrunk[: omission.start], shrunk[omission.end :]
        if (
            len(head) + len(tail) < len(original)
            and original.startswith(head)
            and original.endswith(tail)
            and omission.omitted_bytes == _utf8_len(original) - _utf8_len(head) - _utf8_len(tail)
        ):
            return head, omission.omitted_bytes, tail
    return None


class _Fitted:
    """A fitted result next to its original, split into kept, cut and emptied fields."""

    def __init__(self, content: Mapping[str, Any], budget: int) -> None:
        self.content = content
        self.budget = budget
        self.result = fit_to_budget(content, budget)
        self.size = len(canonical_json(self.result))
        self.unused = budget - self.size
        self.texts = _shrinkable_texts(content)
        self.kept = {key for key, text in self.texts.items() if self.result[key] == text}
        self.emptied = {key for key in self.texts if key not in self.kept and not self.result[key]}
        self.cuts: dict[str, tuple[str, int, str]] = {}
        for key in self.texts.keys() - self.kept - self.emptied:
            split = _split(self.texts[key], self.result[key])
            assert split is not None, f"{key} is not head + marker + tail: {self.result[key]!r}"
            self.cuts[key] = split

    def used(self, key: str) -> int:
        head, omitted, tail = self.cuts[key]
        return escaped_size(head) + _marker_size(omitted) + escaped_size(tail)

    def next_char_costs(self, key: str) -> tuple[int, int]:
        """What taking the next head character, or the next tail character, would cost."""
        head, omitted, tail = self.cuts[key]
        original = self.texts[key]
        costs = []
        for char in (original[len(head)], original[len(original) - len(tail) - 1]):
            shorter = omitted - _utf8_len(char)
            costs.append(escaped_size(char) + _marker_size(shorter) - _marker_size(omitted))
        return costs[0], costs[1]


# ---------------------------------------------------------------------------
# C12: every result fits
# ---------------------------------------------------------------------------


@pytest.mark.untraced
@given(contents_and_budgets())
def test_c12_result_fits_and_budget_error_exactly_when_fixed_part_alone_is_too_big(
    case: tuple[dict[str, Any], int],
) -> None:
    """C12: canonical size never exceeds the budget; BudgetError iff fixed_size > budget."""
    content, budget = case
    fixed = fixed_size(content)
    if fixed > budget:
        with pytest.raises(BudgetError) as caught:
            fit_to_budget(content, budget)
        assert caught.value.required_bytes == fixed
        assert caught.value.max_output_bytes == budget
        assert str(fixed) in str(caught.value)
    else:
        assert len(canonical_json(fit_to_budget(content, budget))) <= budget


@pytest.mark.untraced
@given(contents())
def test_c12_content_that_fits_comes_back_as_an_equal_copy(content: dict[str, Any]) -> None:
    for budget in (len(canonical_json(content)), len(canonical_json(content)) + 100):
        result = fit_to_budget(content, budget)
        assert result == content
        assert result is not content


@pytest.mark.untraced
@given(contents_and_budgets())
def test_c12_budget_is_shared_fairly_and_used_to_the_last_character(
    case: tuple[dict[str, Any], int],
) -> None:
    """C12 utilisation and fairness.

    - When anything was cut, at most max(budget // 100, 5) bytes stay unused;
      more strictly, no boundary of a cut field could take its next character.
    - A field within the fair level (room / number of fields) stays whole.
    - Cut fields get equal allowances: only character boundaries and the
      leftovers handed out at the end (under 6 bytes per field) tell them apart.
    - Inside a cut field the tail gets at least half (give or take boundaries).
    """
    content, budget = case
    fixed = fixed_size(content)
    if fixed > budget:
        return
    fitted = _Fitted(content, budget)
    if fitted.cuts:
        assert fitted.unused <= max(budget // 100, 5)
        for key in fitted.cuts:
            assert min(fitted.next_char_costs(key)) > fitted.unused
    for key, text in fitted.texts.items():
        if escaped_size(text) * len(fitted.texts) <= budget - fixed:
            assert key in fitted.kept
    used = [fitted.used(key) for key in fitted.cuts]
    if used:
        assert max(used) - min(used) <= 6 + 5 * len(used)
    for head, _, tail in fitted.cuts.values():
        assert escaped_size(tail) + 6 * (len(fitted.cuts) + 1) >= escaped_size(head)


def test_c12_small_field_is_kept_whole_while_a_huge_one_is_cut() -> None:
    stderr = "error: linker failed\n" * 20
    content = {"ok": False, "exit_code": 1, "stdout": "compiling...\n" * 100_000, "stderr": stderr}
    fitted = _Fitted(content, 4_000)
    assert fitted.result["stderr"] == stderr
    assert set(fitted.cuts) == {"stdout"}
    assert fitted.unused <= 5
    # Halving would leave ~half the budget unused; water-filling gives stdout the rest.
    assert fitted.used("stdout") >= 4_000 - fixed_size(content) - escaped_size(stderr) - 5


def test_c12_huge_result_fits_into_a_small_budget() -> None:
    line = "2024-05-01T12:00:00Z INFO step 1234: compiled foo/bar.py ok\n"
    content = {
        "ok": True,
        "exit_code": 0,
        "task_id": "f" * 64,
        "stdout": line * 40_000 + "✓ done",
        "stderr": 'warning: "deprecated"\n' * 30_000,
        "command": "make " + "-j8 " * 16_000,
    }
    fitted = _Fitted(content, 24_000)
    assert set(fitted.cuts) == {"stdout", "stderr", "command"}
    assert 24_000 - 5 <= fitted.size <= 24_000
    assert fitted.result["stdout"].endswith(line + "✓ done")


# ---------------------------------------------------------------------------
# C13: identity untouched; presentation text keeps head and tail around a marker
# ---------------------------------------------------------------------------


@pytest.mark.untraced
@given(contents_and_budgets())
def test_c13_only_presentation_text_is_cut_to_head_marker_tail(
    case: tuple[dict[str, Any], int],
) -> None:
    """C13:

    - every key but a shrinkable text keeps its value, byte-identical;
    - a changed text is head + marker(n) + tail of the original, n its
      omitted UTF-8 bytes (checked by `_Fitted`), or "" only when even the
      marker could not fit into the bytes left unused;
    - the result is valid UTF-8.
    """
    content, budget = case
    if fixed_size(content) > budget:
        return
    fitted = _Fitted(content, budget)
    assert fitted.result.keys() == content.keys()
    for key, value in content.items():
        if key not in SHRINKABLE_FIELDS or not isinstance(value, str):
            assert fitted.result[key] is value
            assert canonical_json(fitted.result[key]) == canonical_json(value)
    for key in fitted.texts.keys() - fitted.kept:
        assert key in fitted.cuts or key in fitted.emptied
    for key in fitted.emptied:
        assert fitted.unused < _marker_size(_utf8_len(fitted.texts[key]))
    for key in fitted.texts:
        fitted.result[key].encode("utf-8")  # strict: raises on a split character
    canonical_json(fitted.result).decode("utf-8")


def test_c13_marker_only_field_when_room_holds_just_the_marker() -> None:
    content = {"ok": True, "stdout": "x" * 5_000}
    budget = fixed_size(content) + _marker_size(5_000)
    result = fit_to_budget(content, budget)
    assert result["stdout"] == omission_marker(5_000)
    assert fit_to_budget(content, budget - 1)["stdout"] == ""


def test_c13_emptied_field_gives_its_room_to_the_others() -> None:
    # Three fields cannot all hold a marker; the one with the longest marker
    # (most digits) goes, and the other two share the room.
    content = {"stdout": "o" * 100_000, "stderr": "e" * 500, "command": "c" * 500}
    room = _marker_size(500) * 2 + 10
    fitted = _Fitted(content, fixed_size(content) + room)
    assert fitted.emptied == {"stdout"}
    assert set(fitted.cuts) == {"stderr", "command"}
    assert fitted.unused <= 5


def test_c13_marker_digit_change_is_accounted_exactly() -> None:
    # Taking one more character drops n from 100 to 99: the marker shrinks by
    # one byte, so a 2-byte character fits into 1 spare byte.
    text = "é" * 200  # 400 bytes
    content = {"stdout": text}
    for room in range(_marker_size(400), 400):
        fitted = _Fitted(content, fixed_size(content) + room)
        assert set(fitted.cuts) == {"stdout"}
        assert min(fitted.next_char_costs("stdout")) > fitted.unused


def test_c13_field_cut_just_beyond_its_allowance_is_kept_whole_from_leftovers() -> None:
    # Water-filling gives each field half the room, so stdout (4 bytes more
    # than half) is cut. stderr's half holds its marker (4 digits: about
    # 9,990 bytes omitted), ten 6-byte escapes and 5 bytes no escape fits in;
    # the final pass finds them enough to keep stdout whole after all. The
    # half is counted from the marker's size, so any marker text keeps it so.
    half = escaped_size(omission_marker(9_990)) + 10 * 6 + 5
    content = {"stdout": "a" * (half + 4), "stderr": "\x01" * 10_000}
    fitted = _Fitted(content, fixed_size(content) + 2 * half)
    assert fitted.kept == {"stdout"}
    assert set(fitted.cuts) == {"stderr"}


@given(
    content=st.fixed_dictionaries(
        {"stdout": st.text(multibyte_chars, min_size=1, max_size=80), "stderr": huge_texts}
    ),
    budget=st.integers(60, 300),
)
def test_c13_nearly_fitting_field_is_kept_whole_when_leftovers_allow(
    content: dict[str, Any], budget: int
) -> None:
    if fixed_size(content) > budget:
        return
    fitted = _Fitted(content, budget)
    assert fitted.size <= budget
    if "stdout" in fitted.cuts:
        # Keeping stdout whole would not have fitted into what was left.
        extra = escaped_size(fitted.texts["stdout"]) - fitted.used("stdout")
        assert extra > fitted.unused


@given(st.integers(0, 2**63))
def test_c13_marker_round_trips_and_costs_28_bytes_plus_digits(omitted: int) -> None:
    marker = omission_marker(omitted)
    assert marker.isascii()
    assert parse_omissions(marker) == [Omission(0, len(marker), omitted)]
    assert parse_omissions("x" + marker + "y") == [Omission(1, len(marker) + 1, omitted)]
    assert escaped_size(marker) == 28 + len(str(omitted))


# ---------------------------------------------------------------------------
# C14: the minimal uncertain result with the full identity
# ---------------------------------------------------------------------------


@given(
    locators(),
    st.sampled_from(DEFAULT_UNCERTAIN_REASON_CODES),
    st.none() | st.sampled_from(DEFAULT_OBSERVED_RESULTS),
    st.none() | sandbox_ids,
    st.none() | st.text(st.sampled_from("0123456789abcdef"), min_size=64, max_size=64),
)
def test_c14_minimal_uncertain_size_bounds_every_uncertain_content(
    locator: dict[str, Any],
    reason: str,
    observed: str | None,
    sandbox_id: str | None,
    task_id: str | None,
) -> None:
    content: dict[str, Any] = {"ok": False, "error_type": reason, **locator}
    if observed is not None:
        content["evidence_incomplete"] = True
        content["observed_result"] = observed
    if sandbox_id is not None:
        content["sandbox_id"] = sandbox_id
    if task_id is not None:
        content["task_id"] = task_id
    assert len(canonical_json(content)) <= minimal_uncertain_size(locator)


@pytest.mark.untraced
@given(locators())
def test_c14_minimal_uncertain_content_fits_exactly_its_size(locator: dict[str, Any]) -> None:
    content = minimal_uncertain_content(locator)
    size = minimal_uncertain_size(locator)
    assert len(canonical_json(content)) == size
    assert content["error_type"] == "e2b_command_evidence_incomplete"
    assert content["observed_result"] == "timed_out"
    assert fit_to_budget(content, size) == content
    with pytest.raises(BudgetError):
        fit_to_budget(content, size - 1)


def test_c14_reason_codes_and_observed_results_can_be_widened() -> None:
    locator = {"agent_id": "a", "session_id": "s", "operation_key": "k", "call_id": "c"}
    reason, observed = "e2b_command_a_much_longer_reason_code", "a_long_terminal_state"
    longer = minimal_uncertain_size(
        locator,
        reason_codes=(*DEFAULT_UNCERTAIN_REASON_CODES, reason),
        observed_results=(observed,),
    )
    widened = len(reason) - len("e2b_command_evidence_incomplete")
    widened += len(observed) - len("timed_out")
    assert longer == minimal_uncertain_size(locator) + widened


# -- excerpts: text read only at its two ends --------------------------------------

excerpt_text = st.text(alphabet=st.sampled_from('ab"\\\n\té€😀'), max_size=60)


@given(
    head=excerpt_text,
    tail=excerpt_text,
    omitted=st.integers(0, 10**9),
    other=excerpt_text,
    budget=st.integers(60, 400),
)
def test_c12_c13_an_excerpt_is_cut_at_its_gap_and_counts_what_was_never_read(
    head: str, tail: str, omitted: int, other: str, budget: int
) -> None:
    """A field read only at its ends renders as a prefix of its head, one
    marker, and a suffix of its tail; the marker counts the bytes left out of
    head and tail plus the bytes never read; the result fits the budget."""
    content = {"ok": True, "stdout": Excerpt(head, tail, omitted), "stderr": other}
    try:
        fitted = fit_to_budget(content, budget)
    except BudgetError:
        assert fixed_size(content) > budget
        return
    assert len(canonical_json(fitted)) <= budget
    text = fitted["stdout"]
    assert isinstance(text, str)
    if text == "":
        return
    (marker,) = parse_omissions(text)  # the alphabet has no "[": only the one inserted
    kept_head, kept_tail = text[: marker.start], text[marker.end :]
    assert head.startswith(kept_head)
    assert tail.endswith(kept_tail)
    left_out = (
        len(head.encode())
        - len(kept_head.encode())
        + omitted
        + len(tail.encode())
        - len(kept_tail.encode())
    )
    assert marker.omitted_bytes == left_out


def test_c12_an_excerpt_with_room_keeps_both_ends_whole() -> None:
    content = {"ok": True, "stdout": Excerpt("start\n", "\nend", 5_000_000)}
    fitted = fit_to_budget(content, 1_000)
    assert fitted["stdout"] == "start\n" + omission_marker(5_000_000) + "\nend"
    assert fixed_size(content) == fixed_size({"ok": True, "stdout": ""})
