"""A second backend through the conformance kit: ``tests/toy_backend.py``
reuses the launcher by importing it (``sandrail.interpreters.launcher``),
with a transport of its own (plain HTTP, no e2b SDK), and passes every
conformance scenario and a small fault campaign, as the E2B interpreter
does. What "add a backend" costs: that one file."""

from __future__ import annotations

from typing import ClassVar

import pytest

import sandrail
from sandrail.local_e2b import LocalE2B
from sandrail.testing import Strike, Target
from sandrail.testing.conformance import BackendConformance
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


@needs_root
def test_a_backend_states_its_own_label_and_boundary(server: LocalE2B) -> None:
    """The core names no vendor for it: ``sandbox_status`` and every launch
    say what the backend says it is, and the boundary it states."""
    backend = ToyShellBackend(server)
    try:
        toolset = sandrail.Toolset(
            backend=backend,
            session_id="toy-session",
            owner=sandrail.AgentOwner(agent_id="agent-1"),
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
        )
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
