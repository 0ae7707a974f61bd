"""Task ids (C1)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from sandrail.core import AgentOwner, NativeOwner, task_id
from sandrail.testing.strategies import identifiers, json_text

owners = st.one_of(
    st.builds(AgentOwner, agent_id=identifiers),
    st.builds(NativeOwner, scope=st.dictionaries(json_text, json_text, max_size=3)),
)


@given(json_text, owners, json_text)
def test_c1_task_id_is_64_lowercase_hex_and_stable(session: str, owner, key: str) -> None:  # type: ignore[no-untyped-def]
    first = task_id(session, owner, key)
    assert re.fullmatch(r"[a-f0-9]{64}", first)
    assert task_id(session, owner, key) == first


@given(json_text, json_text, owners, owners, json_text, json_text)
def test_c1_different_inputs_never_share_a_task_id(  # type: ignore[no-untyped-def]
    s1: str, s2: str, o1, o2, k1: str, k2: str
) -> None:
    if (s1, o1.key(), k1) != (s2, o2.key(), k2):
        assert task_id(s1, o1, k1) != task_id(s2, o2, k2)


def test_c1_framing_prevents_concatenation_collisions() -> None:
    owner = AgentOwner(agent_id="a")
    assert task_id("ab", owner, "c") != task_id("a", owner, "bc")


def test_c1_agent_and_native_owners_with_lookalike_ids_differ() -> None:
    assert task_id("s", AgentOwner(agent_id="x"), "k") != task_id(
        "s", NativeOwner(scope={"agent_id": "x"}), "k"
    )
