"""Strategies for JSON values, texts and result contents (canonical JSON and
the budget, C12-C14)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from sandrail.core import SHRINKABLE_FIELDS, fixed_size

__all__ = [
    "MAX_SAFE",
    "contents",
    "contents_and_budgets",
    "escape_heavy_text",
    "huge_texts",
    "identifiers",
    "json_scalars",
    "json_text",
    "json_values",
    "locators",
    "multibyte_chars",
    "presentation_texts",
    "result_json_values",
    "sandbox_ids",
    "small_texts",
]

MAX_SAFE = 2**53 - 1
"""The largest integer JSON carries exactly (and canonical JSON accepts)."""

json_text = st.text(st.characters(codec="utf-8"), max_size=40)
"""Text without lone surrogates: what JSON text can carry."""

escape_heavy_text = st.text(
    st.sampled_from(['"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "€", "😀", "a", "\u2028"]),
    max_size=40,
)
"""Text made of the characters JSON escapes, and a few multi-byte ones."""

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-MAX_SAFE, max_value=MAX_SAFE),
    st.floats(allow_nan=False, allow_infinity=False),
    json_text,
    escape_heavy_text,
)


def json_values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values as Python data (dict keys may hold any character)."""
    return st.recursive(
        json_scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.dictionaries(st.one_of(json_text, escape_heavy_text), children, max_size=5),
        ),
        max_leaves=max_leaves,
    )


identifiers = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=24
)
"""Printable ASCII without spaces: operation keys, call ids, session ids."""

# Canonical JSON rejects lone surrogates, so no text holds one.
_any_char = st.characters(codec="utf-8")
multibyte_chars = st.sampled_from("éßЖ中文日本語한국어€∑😀🎉🚀𝄞")
_escape_char = st.sampled_from('"\\\n\r\t\b\f\x00\x01\x1f\x7f/ a')
_log_char = st.sampled_from("abcdefghij0123456789 :=-_/.[]\n")

_piece = st.one_of(
    st.text(_any_char, min_size=1, max_size=40),
    st.text(multibyte_chars, min_size=1, max_size=20),
    st.text(_escape_char, min_size=1, max_size=20),
    st.text(_log_char, min_size=1, max_size=80),
)


def _repeat(head: str, piece: str, times: int, tail: str) -> str:
    return head + piece * times + tail


small_texts = st.one_of(
    st.text(_any_char, max_size=30),
    st.text(multibyte_chars, max_size=40),
    st.text(_escape_char, max_size=40),
    st.builds(_repeat, st.text(_log_char, max_size=40), _piece, st.integers(0, 8), st.just("")),
)
"""Text from empty to a few hundred bytes: tiny, multi-byte, escape-heavy, log-like."""

_ends = st.text(_any_char, max_size=12) | st.text(_escape_char, max_size=12)
huge_texts = st.builds(_repeat, _ends, _piece, st.integers(100, 6000), _ends)
"""Text of up to a few hundred thousand characters, made cheaply by repetition."""

presentation_texts = st.one_of(small_texts, huge_texts)
"""What command, stdout and stderr may hold: tiny to huge."""

result_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(_any_char, max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(_any_char, max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)
"""Any JSON value a result's fixed part may hold."""

_fixed_keys = st.text(_any_char, max_size=12).filter(lambda key: key not in SHRINKABLE_FIELDS)


@st.composite
def contents(draw: st.DrawFn) -> dict[str, Any]:
    """A result content: shrinkable text fields, sometimes non-text values under
    shrinkable names, and any number of fixed fields."""
    content: dict[str, Any] = draw(st.dictionaries(_fixed_keys, result_json_values, max_size=4))
    for key in SHRINKABLE_FIELDS:
        value = draw(
            st.one_of(
                st.just(None),
                presentation_texts,
                presentation_texts,
                result_json_values.filter(bool),
            )
        )
        if value is not None:
            content[key] = value
    return content


@st.composite
def contents_and_budgets(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """A content and a budget: anywhere from 256 up, or near its fixed size."""
    content = draw(contents())
    fixed = fixed_size(content)
    budget = draw(
        st.one_of(
            st.integers(256, 60_000),
            st.integers(max(0, fixed - 3), fixed + 120),
            st.integers(fixed, fixed + 2_000),
        )
    )
    return content, budget


sandbox_ids = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789"), min_size=1, max_size=128
)


@st.composite
def locators(draw: st.DrawFn) -> dict[str, Any]:
    """The identity part of an uncertain result: owner identity, session, operation, call."""
    identity: dict[str, Any]
    if draw(st.booleans()):
        identity = {"agent_id": draw(st.text(_any_char, min_size=1, max_size=64))}
    else:
        identity = {
            "scope": draw(
                st.dictionaries(st.text(_any_char, max_size=8), result_json_values, max_size=3)
            ),
            "run_id": draw(st.text(_any_char, max_size=40)),
            "turn_id": draw(st.text(_any_char, max_size=40)),
            "build_id": draw(st.text(_any_char, max_size=40)),
            "task_chain_id": draw(st.text(_any_char, max_size=40)),
            "parent_run_id": draw(st.none() | st.text(_any_char, max_size=40)),
            "execution_fence": draw(st.integers(0, 2**53 - 1)),
        }
    return {
        **identity,
        "session_id": draw(st.text(_any_char, min_size=1, max_size=64)),
        "operation_key": draw(st.text(_any_char, min_size=1, max_size=128)),
        "call_id": draw(st.text(_any_char, min_size=1, max_size=64)),
    }
