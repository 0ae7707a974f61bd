"""Effects state their own facts, and every family of effects is derived from
the unions and those facts (C5, C6)."""

from __future__ import annotations

import typing

import attrs
import pytest

from sandrail.core import (
    HARNESS_EFFECTS,
    LAUNCH_STEPS,
    SANDBOX_EFFECTS,
    SIDE_EFFECTS,
    Authorize,
    Cancel,
    Delivery,
    Effect,
    Ensure,
    HarnessEffect,
    Publish,
    SandboxEffect,
    SandboxReady,
    SandboxState,
    Start,
    unexpected_failure,
)
from sandrail.core._effects import _declaring

ALL = typing.get_args(Effect)


def test_families_are_exactly_the_unions() -> None:
    """Each family is its union's members, in the union's order, and
    together they are every effect, each once."""
    assert typing.get_args(HarnessEffect) == HARNESS_EFFECTS
    assert typing.get_args(SandboxEffect) == SANDBOX_EFFECTS
    assert set(HARNESS_EFFECTS).isdisjoint(SANDBOX_EFFECTS)
    assert HARNESS_EFFECTS + SANDBOX_EFFECTS == ALL


def test_c5_side_effects_are_the_effects_that_say_so() -> None:
    """C5/C6 read SIDE_EFFECTS; it holds exactly the effects whose own
    ``side_effect`` is true, and only sandbox effects change the sandbox."""
    assert tuple(kind for kind in ALL if kind.side_effect) == SIDE_EFFECTS
    assert (Ensure, Publish, Start, Cancel) == SIDE_EFFECTS
    assert set(SIDE_EFFECTS) <= set(SANDBOX_EFFECTS)
    assert LAUNCH_STEPS == tuple(kind for kind in ALL if kind.launch_step) == (Publish, Start)


@pytest.mark.parametrize("kind", ALL, ids=lambda kind: kind.__name__)
def test_every_effect_states_its_facts_in_its_own_class(kind: type) -> None:
    """No fact is inherited or defaulted: each class body states all three,
    and none of them is an attrs field (facts are not part of the value a
    cassette records)."""
    for fact in ("side_effect", "launch_step", "failure_delivery"):
        assert fact in vars(kind), (kind, fact)
    assert {"side_effect", "launch_step", "failure_delivery"}.isdisjoint(
        field.name for field in attrs.fields(kind)
    )


def test_an_effect_added_to_a_union_without_its_facts_fails_at_once() -> None:
    @attrs.frozen(kw_only=True)
    class Forgetful:
        key: str

    with pytest.raises(TypeError, match="Forgetful does not state side_effect"):
        _declaring(Ensure | Forgetful, "side_effect")


def test_c6_an_unexplained_failure_is_maybe_sent_but_for_asking_the_policy() -> None:
    """What :func:`unexpected_failure` says is each effect's own
    ``failure_delivery``; something that is no effect at all may have sent
    anything."""
    for kind in ALL:
        assert kind.failure_delivery is (
            Delivery.NOT_SENT if kind is Authorize else Delivery.MAYBE_SENT
        )
    policy = unexpected_failure(Authorize(tool="t", call_id="c"), ValueError())
    assert policy.delivery is Delivery.NOT_SENT
    ensure = unexpected_failure(Ensure(session_id="s", owner_key="o"), ValueError())
    assert ensure.delivery is Delivery.MAYBE_SENT
    assert unexpected_failure(object(), ValueError()).delivery is Delivery.MAYBE_SENT


@pytest.mark.parametrize("kind", [SandboxState, SandboxReady])
def test_an_answer_naming_no_backend_is_refused_not_taken_for_e2b(kind: type) -> None:
    """Every result names the backend that answered: an answer that does not
    say is refused where it is made, never reported as ``e2b``."""
    fields = {"sandbox_id": "box-1"} | ({"phase": "ready"} if kind is SandboxState else {})
    with pytest.raises(TypeError, match="backend"):
        kind(**fields)
    assert kind(**fields, backend="local-sh").backend == "local-sh"
