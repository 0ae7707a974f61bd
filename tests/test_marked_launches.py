"""sandrail.testing.MarkedLaunches: ground truth counted by the marks each
launched command sends, for a backend whose world keeps no launch record."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import attrs
import pytest

from sandrail.core import Effect, Ensure, Start
from sandrail.testing import (
    SCRIPTS,
    MarkedBackend,
    MarkedLaunches,
    Simulator,
    Strike,
    Target,
    check_backend,
)

_MARKED = re.compile(r"mark ([A-Za-z0-9_.-]+); (.*)", re.DOTALL)


class MarkingWorld:
    """A simulator whose commands send their mark when they really launch
    (as a command's first line would), into :attr:`marks`."""

    def __init__(self) -> None:
        self.simulator = Simulator(scripts=SCRIPTS)
        self.marks: list[str] = []

    def __call__(self, effect: Effect) -> Any:
        if not isinstance(effect, Start):
            return self.simulator(effect)
        found = _MARKED.fullmatch(effect.command)
        assert found is not None, effect.command
        before = self.simulator.launches.get(effect.task_id, 0)
        try:
            return self.simulator(attrs.evolve(effect, command=found.group(2)))
        finally:
            launched = self.simulator.launches.get(effect.task_id, 0) - before
            self.marks.extend([found.group(1)] * launched)


def _truth(world: MarkingWorld) -> MarkedLaunches:
    return MarkedLaunches(
        mark=lambda text: f"mark {text}",
        marks=lambda: world.marks,
        live_processes=world.simulator.live_processes,
    )


def marked_target(strike: Strike) -> Target:
    world = MarkingWorld()
    truth = _truth(world)
    return Target(
        backend=truth.backend(strike(world)),
        truth=truth,
        kill_sandbox=world.simulator.kill_sandbox,
        wipe_ledger=world.simulator.wipe_ledger,
        advance=world.simulator.advance,
    )


def test_a_backend_judged_by_its_marks_passes_the_conformance_kit() -> None:
    report = check_backend(marked_target, plans=12)
    assert report.passed, report.summary()


def _start(task_id: str = "a" * 64, command: str = "echo hi") -> Start:
    return Start(
        sandbox_id="sbx",
        task_id=task_id,
        command=command,
        cwd=None,
        env={},
        timeout_seconds=5,
        request_digest="d",
        fence=None,
    )


def test_marks_count_launches_per_task_of_this_world_only() -> None:
    marks: list[str] = []
    truth = MarkedLaunches(mark=str, marks=lambda: marks, live_processes=lambda _: 0, prefix="w1")
    marks += ["w1." + "a" * 64, "w1." + "a" * 64, "w2." + "a" * 64, "w1." + "b" * 64, "junk"]
    assert dict(truth.launches) == {"a" * 64: 2, "b" * 64: 1}
    assert truth.mark_of("c" * 64) == "w1." + "c" * 64


@pytest.mark.parametrize("prefix", ["", "a b", "x" * 65, "a.b", "a;rm"])
def test_a_mark_prefix_with_unsafe_characters_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="mark prefix"):
        MarkedLaunches(mark=str, marks=list, live_processes=lambda _: 0, prefix=prefix)


def test_every_start_runs_its_mark_first_and_settles_after_it_returned() -> None:
    seen: list[Any] = []
    events: list[str] = []

    def inner(effect: Effect) -> str:
        seen.append(effect)
        events.append("start")
        return "answer"

    def settle(task_id: str) -> Any:
        events.append("before " + task_id[:2])
        return lambda: events.append("after")

    truth = MarkedLaunches(mark=lambda t: f"mark {t}", marks=list, live_processes=lambda _: 0)
    backend = truth.backend(inner, settle=settle)
    assert isinstance(backend, MarkedBackend)
    assert not backend.asynchronous
    assert backend(_start()) == "answer"
    assert seen[0].command == f"mark {truth.prefix}.{'a' * 64}; echo hi"
    assert events == ["before aa", "start", "after"]
    assert truth.sandbox_of == {"a" * 64: "sbx"}


def test_an_asynchronous_backend_stays_asynchronous_when_marked() -> None:
    async def inner(effect: Effect) -> Any:
        return effect

    truth = MarkedLaunches(mark=lambda t: f"mark {t}", marks=list, live_processes=lambda _: 0)
    backend = truth.backend(inner)
    assert backend.asynchronous
    started = asyncio.run(backend(_start()))
    assert started.command.startswith(f"mark {truth.prefix}.")
    ensure = Ensure(session_id="s", owner_key="o")
    assert asyncio.run(backend(ensure)) is ensure


def test_a_target_factory_whose_strike_has_a_default_is_given_the_kits_faults() -> None:
    """``make_target(strike=None)`` takes the kit's faults where its backend
    meets its world; a factory with only other defaulted parameters, or
    none, gets them in front of the whole backend."""
    from sandrail.testing._truth import takes_strike

    def defaulted(strike: Any = None) -> Any: ...
    def required(strike: Any) -> Any: ...
    def other(scripts: Any = None) -> Any: ...
    def bare() -> Any: ...

    assert [takes_strike(f) for f in (defaulted, required, other, bare)] == [
        True,
        True,
        False,
        False,
    ]
