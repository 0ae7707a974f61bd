"""Model-based test: ports against the simulator under drawn fault plans.

The machine reuses a small pool of operation keys across rules (so retries,
conflicts and reads of earlier launches happen often), restarts the harness
(new ports and a backend that forgot what it sent; the session's ownership
record is durable and shared by its command and code ports, as the README
recommends), lets virtual time pass and delivers held requests late. After
every step the kit's judge (:mod:`sandrail.testing`) holds every call so far
against the simulator's ground truth; at the end, once every held request
has arrived, it judges the whole run again.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sandrail.interpreters.simulator import FaultPlan
from sandrail.testing import SCRIPTS, SECRET, World
from sandrail.testing._calls import Mode
from sandrail.testing._commands import BUILD, BUILD_TOKEN, SERVE
from sandrail.testing.strategies import fault_plans

KEYS = ("op-a", "op-b", "op-c")
COMMANDS = ("echo hi", BUILD, BUILD_TOKEN, SERVE, "seq 3000", "exit 3")
BUDGET = 1_500


class PortMachine(RuleBasedStateMachine):
    """Drives one simulated world through a sequence of calls from a few ports."""

    mode: ClassVar[Mode] = "agent"

    def __init__(self) -> None:
        super().__init__()
        self.world: World | None = None
        self.calls = 0

    @initialize(plan=fault_plans())
    def start(self, plan: FaultPlan) -> None:
        self.world = World.simulated(plan, scripts=SCRIPTS, secrets=[SECRET])
        self._ports()

    def _ports(self, *, restarted: bool = False) -> None:
        assert self.world is not None
        options: dict[str, Any] = {
            "owner": self.mode,
            "durable_ownership": True,
            "max_output_bytes": BUDGET,
        }
        if restarted:
            # The env values this session passed before the restart, as the
            # README says a restarted harness must name them (C17).
            options["redact"] = [SECRET]
        self.port = self.world.command_tools(**options)
        self.code_port = self.world.code_tools(**options)

    # -- rules -----------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), command=st.sampled_from(COMMANDS), background=st.booleans())
    def run_command(self, key: str, command: str, background: bool) -> None:
        args: dict[str, Any] = {"command": command, "timeout": 30}
        if background:
            args = {"command": command, "background": True, "background_timeout": 30}
        if command == BUILD_TOKEN:
            args["env"] = {"API_TOKEN": SECRET}  # it prints it: C17
        self.call(self.port, "run_command", args, key)

    @rule(key=st.sampled_from(KEYS), code=st.sampled_from(["print(1)", "print(2)"]))
    def run_code(self, key: str, code: str) -> None:
        tool = "sandbox_run_code" if self.mode == "agent" else "run_code"
        self.call(self.code_port, tool, {"code": code}, key)

    @rule(
        key=st.sampled_from(KEYS),
        cursor=st.integers(0, 64),
        wait=st.sampled_from([0, 0, 5, 600]),
    )
    def read(self, key: str, cursor: int, wait: int) -> None:
        assert self.world is not None
        task = self.world.task_of(self.port, key)
        args = {"task_id": task, "stdout_cursor": cursor, "wait_seconds": wait}
        self.call(self.port, "read_command_output", args, f"read-{self.calls}")

    @rule(key=st.sampled_from(KEYS))
    def stop(self, key: str) -> None:
        assert self.world is not None
        task = self.world.task_of(self.port, key)
        self.call(self.port, "stop_command", {"task_id": task}, f"stop-{self.calls}")

    @rule()
    def status(self) -> None:
        self.call(self.port, "sandbox_status", {}, f"status-{self.calls}")

    @rule(seconds=st.sampled_from([0.5, 5.0, 60.0]))
    def time_passes(self, seconds: float) -> None:
        assert self.world is not None
        self.world.advance(seconds)

    @rule()
    def held_requests_arrive(self) -> None:
        assert self.world is not None
        self.world.deliver_held()

    @rule()
    def restart_harness(self) -> None:
        """The harness crashes and comes back: new ports with empty in-memory
        ledgers; the durable ownership records stay."""
        self._ports(restarted=True)

    def call(self, port: Any, name: str, args: dict[str, Any], key: str) -> None:
        assert self.world is not None
        self.calls += 1
        self.world.call(port, name, args, key=key, call_id=f"call-{self.calls}")

    # -- the judge ---------------------------------------------------------------

    @invariant()
    def every_call_keeps_the_contract(self) -> None:
        """C2-C18 so far (held requests still held)."""
        if self.world is not None:
            self.world.assert_contract(deliver_held=False, harness=False)

    def teardown(self) -> None:
        """C5 once every held request has arrived, and everything else again."""
        if self.world is not None:
            self.world.assert_contract(harness=False)  # random calls, no harness's


class NativePortMachine(PortMachine):
    mode = "native"


machine_settings = settings(
    stateful_step_count=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestAgentPort = pytest.mark.untraced(PortMachine.TestCase)
TestAgentPort.settings = machine_settings
TestNativePort = pytest.mark.untraced(NativePortMachine.TestCase)
TestNativePort.settings = machine_settings
