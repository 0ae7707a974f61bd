"""A second backend through the conformance kit: ``tests/toy_backend.py``
reuses the launcher by importing it (``sandrail.interpreters.launcher``),
with a transport of its own (plain HTTP, no e2b SDK), and passes every
conformance scenario and a small fault campaign, as the E2B interpreter
does. What "add a backend" costs: that one file."""

from __future__ import annotations

from typing import Any, ClassVar

import e2b
import httpx
import pytest

import sandrail
from sandrail.core import Delivery, EffectFailure, Ensure, SandboxReady
from sandrail.interpreters.launcher import Transport
from sandrail.local_e2b import LocalE2B
from sandrail.testing import Strike, Target, check_transport
from sandrail.testing.conformance import _BY_NAME, BackendConformance, run_scenario
from tests.e2b_world import needs_root, server_fixture
from tests.toy_backend import BOUNDARY, LABEL, ToyShellBackend, toy_target

server = server_fixture()


@needs_root
class TestToyBackendConformance(BackendConformance):
    """C2-C18 on a backend that is not E2B: the kit's scenarios (both owner
    modes) and campaign, with the launcher doing every launch."""

    campaign_plans: ClassVar[int | None] = 12
    server: LocalE2B

    @pytest.fixture(autouse=True)
    def _on(self, server: LocalE2B) -> None:
        self.server = server

    def make_target(self) -> Target:
        return toy_target(self.server)


def _toolset(backend: ToyShellBackend, session_id: str) -> sandrail.Toolset:
    return sandrail.Toolset(
        backend=backend,
        session_id=session_id,
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )


@needs_root
def test_a_backend_states_its_own_label_and_boundary(server: LocalE2B) -> None:
    """The core names no vendor for it: ``sandbox_status`` and every launch
    say what the backend says it is, and the boundary it states."""
    backend = ToyShellBackend(server)
    try:
        toolset = _toolset(backend, "toy-session")
        ran = toolset.call_sync(
            "run_command", {"command": "echo hi"}, call_id="c1", operation_key="k1"
        )
        assert (ran.status, ran.content["backend"], ran.content["stdout"]) == (
            "ok",
            LABEL,
            "hi\n",
        )
        status = toolset.call_sync("sandbox_status", {}, call_id="c2", operation_key="k2")
        assert status.content["backend"] == LABEL
        assert (status.content["isolated"], status.content["boundary"]) == (True, BOUNDARY)
        again = toolset.call_sync(
            "run_command", {"command": "echo hi"}, call_id="c3", operation_key="k1"
        )
        assert again.content["deduplicated"] is True  # C2: the launcher's claim, not a relaunch
    finally:
        backend.close()


@needs_root
def test_c2_after_its_sandbox_died_a_session_gets_no_second_sandbox(server: LocalE2B) -> None:
    """The rule the development page gives a backend: ``Ensure`` for a
    session whose sandbox is gone fails ``not_sent`` and keeps the session
    bound to it, so no task of the session can launch again in a fresh one."""
    backend = ToyShellBackend(server)
    try:
        toolset = _toolset(backend, "toy-dies")
        ran = toolset.call_sync(
            "run_command", {"command": "true"}, call_id="c1", operation_key="k1"
        )
        assert ran.status == "ok", ran.content
        made = len(server.truth().sandboxes)
        e2b.Sandbox.kill(ran.content["sandbox_id"], **server.sdk_options)
        repeat = toolset.call_sync(
            "run_command", {"command": "true"}, call_id="c-k1", operation_key="k1"
        )
        assert repeat.status == "uncertain", repeat.content  # it ran there once: unknowable
        new = toolset.call_sync(
            "run_command", {"command": "true"}, call_id="c2", operation_key="k2"
        )
        # Refused at Ensure, before any side effect: nothing ran, and it says so.
        assert (new.status, new.error_type) == ("error", "e2b_sandbox_unavailable"), new.content
        assert new.content["executed"] is False
        assert len(server.truth().sandboxes) == made
    finally:
        backend.close()


class _FreshWhenGone(ToyShellBackend):
    """A mutant: once the session's sandbox is gone, ``Ensure`` quietly
    makes it a new one (the rule of the development page, broken)."""

    async def _ensure(self, effect: Ensure) -> SandboxReady:
        try:
            return await super()._ensure(effect)
        except EffectFailure:
            self._sessions.pop((effect.session_id, effect.owner_key), None)
            return await super()._ensure(effect)


@needs_root
def test_c2_the_kit_catches_a_toy_that_makes_a_fresh_sandbox_after_a_death(
    server: LocalE2B,
) -> None:
    """The kit's death scenario on a real backend broken that way: the new key
    runs in the fresh sandbox instead of being refused."""
    scenario = _BY_NAME["c2_no_fresh_sandbox_after_the_old_one_died"]
    with pytest.raises(AssertionError, match="expected error e2b_sandbox_unavailable"):
        run_scenario(lambda: toy_target(server, backend_type=_FreshWhenGone), scenario)


@needs_root
class TestToyTransportUnderFaults(BackendConformance):
    """The scenarios and the fault campaign with the kit's faults struck on
    the toy's transport (the launcher's decisive calls, through
    ``strike(transport)``), so the launcher's and the backend's own failure
    handling meet every kind of fault."""

    campaign_plans: ClassVar[int | None] = 16
    server: LocalE2B

    @pytest.fixture(autouse=True)
    def _on(self, server: LocalE2B) -> None:
        self.server = server

    def make_target(self, strike: Strike) -> Target:
        return toy_target(self.server, strike)


class _NotSent:
    """A transport whose ``classify`` says ``not_sent`` for every failure
    (``timeouts_only``: for a timed-out line only), the rest its own."""

    def __init__(self, transport: Transport, *, timeouts_only: bool) -> None:
        self._transport = transport
        self._timeouts_only = timeouts_only

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        return await self._transport.run(
            sandbox, line, timeout=timeout, request_timeout=request_timeout
        )

    async def write_files(
        self, sandbox: Any, files: list[tuple[str, bytes]], *, request_timeout: float
    ) -> None:
        await self._transport.write_files(sandbox, files, request_timeout=request_timeout)

    def exit_status(self, exc: BaseException) -> tuple[int, str] | None:
        return self._transport.exit_status(exc)

    def classify(self, exc: BaseException, what: str) -> EffectFailure:
        if not self._timeouts_only or isinstance(exc, TimeoutError | httpx.TimeoutException):
            return EffectFailure(Delivery.NOT_SENT, f"{what}: not sent")
        return self._transport.classify(exc, what)


@needs_root
def test_check_transport_passes_the_toy_transport(server: LocalE2B) -> None:
    """The toy's own failure table answers every probe right."""
    assert check_transport(lambda strike: toy_target(server, strike)) == []


@needs_root
@pytest.mark.parametrize("timeouts_only", [False, True])
def test_check_transport_fails_a_transport_that_calls_a_timeout_not_sent(
    server: LocalE2B, timeouts_only: bool
) -> None:
    """A line that timed out after it started is ``maybe_sent``: a transport
    calling it ``not_sent`` would have the launcher start a task again. The
    scenarios and the campaign strike their faults above ``classify`` and
    pass such a transport; this check does not."""

    def lying(strike: Strike) -> Target:
        return toy_target(
            server, lambda transport: strike(_NotSent(transport, timeouts_only=timeouts_only))
        )

    problems = check_transport(lying)
    assert problems is not None
    assert any("timed out after the line had started" in problem for problem in problems), problems
    assert any("`echo ran; exit 5`" in problem for problem in problems) is not timeouts_only
