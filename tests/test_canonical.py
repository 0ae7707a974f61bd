"""Canonical JSON agrees with RFC 8785 (the rfc8785 package) for result values."""

from __future__ import annotations

import math

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from sandrail.core import CanonicalJSONError, canonical_json, canonical_size, escaped_size
from sandrail.testing.strategies import MAX_SAFE, json_text, json_values


@given(json_values())
def test_c12_canonical_json_agrees_with_rfc8785(value: object) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_c12_floats_follow_ecmascript_formatting(value: float) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@given(st.dictionaries(st.text(), st.integers(0, 9), max_size=8))
def test_c12_keys_sort_by_utf16_code_units(value: dict[str, int]) -> None:
    try:
        expected = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        with pytest.raises(CanonicalJSONError):
            canonical_json(value)
    else:
        assert canonical_json(value) == expected


def test_c12_keys_beyond_the_bmp_sort_as_utf16() -> None:
    # U+FFFF sorts after U+10000 by code point, but before it in UTF-16.
    value = {"\uffff": 1, "\U00010000": 2}
    assert canonical_json(value) == rfc8785.dumps(value)
    assert canonical_json(value).index("\U00010000".encode()) < canonical_json(value).index(
        "\uffff".encode()
    )


@given(json_text)
def test_c12_escaped_size_is_the_string_cost_inside_canonical_json(text: str) -> None:
    assert escaped_size(text) == len(canonical_json(text)) - 2
    assert canonical_size(text) == len(canonical_json(text))


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({1: "x"}, "not a string"),
        (MAX_SAFE + 1, "exact range"),
        (-MAX_SAFE - 1, "exact range"),
        (math.nan, "no JSON form"),
        (math.inf, "no JSON form"),
        ("\ud800", "lone surrogate"),
        ({"a": b"bytes"}, "no JSON form"),
        (object(), "no JSON form"),
    ],
)
def test_c12_values_without_a_canonical_form_are_refused_clearly(
    value: object, fragment: str
) -> None:
    with pytest.raises(CanonicalJSONError, match=fragment):
        canonical_json(value)


def test_c12_tuples_encode_as_arrays_and_bools_are_not_ints() -> None:
    assert canonical_json((1, True, None, "a")) == b'[1,true,null,"a"]'
    assert canonical_json({"b": [], "a": {}}) == b'{"a":{},"b":[]}'
