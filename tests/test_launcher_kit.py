"""What a backend author reusing the launcher gets: every launcher effect
answered through one typed entry, the cache's reach stated by its types,
a clear error for the effects the backend answers itself, and the kit's
fault table struck on their transport."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sandrail.core import Cancel, Delivery, EffectFailure, Ensure, Inspect, Publish, Start
from sandrail.interpreters.launcher import Box, Launcher, NotLauncherEffectError
from sandrail.testing import (
    Fault,
    FaultKind,
    FaultPlan,
    FaultyTransport,
    Strike,
    Target,
    World,
    simulator_target,
)
from sandrail.testing._transport_faults import effect_of
from tests.rig import launcher_for

_TASK = "a" * 64


class _Refused:
    """A transport whose every call is refused before it leaves."""

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        raise ConnectionRefusedError

    async def write_files(
        self, sandbox: Any, files: list[tuple[str, bytes]], *, request_timeout: float
    ) -> None:
        raise ConnectionRefusedError

    def exit_status(self, exc: BaseException) -> tuple[int, str] | None:
        return None

    def classify(self, exc: BaseException, what: str) -> EffectFailure:
        return EffectFailure(Delivery.NOT_SENT, f"{what}: refused")


def _launcher() -> Launcher:
    async def box(sandbox_id: str) -> Box:
        return Box(sandbox=None, sandbox_id=sandbox_id)

    return launcher_for(_Refused(), box)


def _start() -> Start:
    return Start(
        sandbox_id="s",
        task_id=_TASK,
        request_digest="d",
        command="echo hi",
        cwd=None,
        env=None,
        timeout_seconds=5,
    )


@pytest.mark.parametrize(
    "effect",
    [
        _start(),
        Publish(sandbox_id="s", task_id=_TASK, path=f"/tmp/sandrail/code/{_TASK}.py", source="1"),
        Cancel(sandbox_id="s", task_id=_TASK),
    ],
)
def test_side_effects_are_never_answered_from_the_cache(effect: Any) -> None:
    assert _launcher().cached(effect) is None


@pytest.mark.parametrize(
    "effect",
    [Inspect(session_id="s", owner_key="o"), Ensure(session_id="s", owner_key="o"), "Wait"],
)
def test_an_effect_the_backend_answers_itself_is_a_clear_type_error(effect: Any) -> None:
    launcher = _launcher()
    with pytest.raises(
        NotLauncherEffectError, match="answers Publish, Start, Wait, Read and Cancel"
    ):
        launcher.cached(effect)
    with pytest.raises(TypeError, match="does not answer"):
        asyncio.run(launcher.answer(effect))


def test_answer_sends_a_launcher_effect_to_the_sandbox() -> None:
    with pytest.raises(EffectFailure, match="nothing ran") as failed:
        asyncio.run(_launcher().answer(Cancel(sandbox_id="s", task_id=_TASK)))
    assert failed.value.delivery is Delivery.NOT_SENT


# -- faults on a transport ---------------------------------------------------------------


class _Answering(_Refused):
    """A transport that answers every line (and notes it)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        self.lines.append(line)
        return "answer"


_START_LINE = f"exec bash /root/.sandrail/bin/launcher-0123456789abcdef.sh start {_TASK} 7"


def _run(transport: FaultyTransport, line: str) -> str:
    return asyncio.run(transport.run("sbx", line, timeout=1, request_timeout=1))


@pytest.mark.parametrize(
    ("line", "effect"),
    [
        (_START_LINE, "Start"),
        ("bash /root/.sandrail/bin/.launcher-0123456789abcdef.sh.42 init launcher-x.sh", "Ensure"),
        (f"exec bash /root/.sandrail/bin/l.sh wait {_TASK} 100 32768", "Wait"),
        (f"exec bash /root/.sandrail/bin/l.sh publish {_TASK} 7 py", "Publish"),
        (f"bash /root/.sandrail/bin/l.sh discard {_TASK} 7", None),
        ("echo hi", None),
    ],
)
def test_a_launcher_line_is_the_decisive_call_of_its_effect(line: str, effect: str | None) -> None:
    assert effect_of(line) == effect


def _strike_start(kind: FaultKind) -> tuple[_Answering, FaultyTransport, EffectFailure]:
    """A transport whose first Start line meets ``kind``: the transport
    under it, the struck transport and the failure it raised."""
    inner = _Answering()
    transport = FaultyTransport(inner, FaultPlan([Fault(effect="Start", kind=kind)]))
    with pytest.raises(EffectFailure) as struck:
        _run(transport, _START_LINE)
    return inner, transport, struck.value


def test_a_lost_answer_on_the_transport_reaches_the_sandbox_and_says_maybe_sent() -> None:
    inner, transport, struck = _strike_start(FaultKind.RESPONSE_LOST)
    assert inner.lines == [_START_LINE]  # the table's row: applied, then the answer lost
    failure = transport.classify(struck, "Start")
    assert (failure.delivery, failure.detail) == (Delivery.MAYBE_SENT, "Start: response lost")
    assert transport.exit_status(struck) is None
    assert _run(transport, _START_LINE) == "answer"  # occurrence 1: no fault
    assert [fault.kind for fault in transport.faults_fired] == [FaultKind.RESPONSE_LOST]


def test_an_undelivered_request_on_the_transport_never_reaches_the_sandbox() -> None:
    inner, transport, struck = _strike_start(FaultKind.NOT_DELIVERED)
    assert inner.lines == []
    assert transport.classify(struck, "Start").delivery is Delivery.NOT_SENT
    assert transport.classify(ConnectionError(), "Start").detail == "Start: refused"  # its own


def test_staging_and_discards_pass_through_unstruck() -> None:
    inner = _Answering()
    plan = FaultPlan([Fault(effect="Start", kind=FaultKind.NOT_DELIVERED)])
    transport = FaultyTransport(inner, plan)
    discard = f"bash /root/.sandrail/bin/l.sh discard {_TASK} 7"
    assert _run(transport, discard) == "answer"
    assert transport.faults_fired == []


def test_a_faulty_transport_wraps_only_a_transport() -> None:
    with pytest.raises(TypeError, match="wraps a launcher Transport"):
        FaultyTransport(object())  # type: ignore[arg-type]


def test_a_target_can_strike_its_transport_through_the_kit() -> None:
    def make_target(strike: Strike) -> Target:
        faulty = strike(_Answering())
        assert isinstance(faulty, FaultyTransport)
        return simulator_target()

    plan = [Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]
    with World.on(make_target, plan) as world:
        assert isinstance(world.faults, FaultyTransport)
