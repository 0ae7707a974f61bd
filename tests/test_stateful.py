"""Model-based test: the port against the simulator under drawn fault plans.

The machine reuses a small pool of operation keys across rules (so retries,
conflicts and reads of earlier launches happen often), restarts the harness
(a new port, an empty ledger, the same sandbox), lets virtual time pass and
delivers held requests late. After every call it judges the result against
the simulator's ground truth with the checks in :mod:`tests.invariants`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import sandrail
from sandrail import ToolRequest, ToolResult
from sandrail.core import OwnedCommand, Start
from sandrail.interpreters.simulator import FaultPlan, Script, SimulatedHarness, Simulator
from tests import invariants
from tests.rig import Mode, Rig
from tests.strategies import fault_plans

KEYS = ("op-a", "op-b", "op-c")
COMMANDS = ("echo hi", "build", "serve", "seq 3000", "exit 3")
SCRIPTS = {
    "build": Script.prints("compiled\n" * 50, stderr="warning\n", exit_code=0, duration=2),
    "serve": Script.hangs("listening\n", children=2),
    "print(1)": Script.prints("1\n"),
}
BUDGET = 1_500


class PortMachine(RuleBasedStateMachine):
    """Drives one simulator through a sequence of calls from a few ports."""

    mode: ClassVar[Mode] = "agent"

    def __init__(self) -> None:
        super().__init__()
        self.sim = Simulator()
        self.rig = Rig(mode=self.mode, sim=self.sim)
        self.code_rig = Rig(mode=self.mode, sim=self.sim, tools="code")
        self.record: dict[str, OwnedCommand] = {}
        self.calls = 0

    @initialize(plan=fault_plans())
    def start(self, plan: FaultPlan) -> None:
        self.sim = Simulator(
            scripts=SCRIPTS, plan=plan, harness=SimulatedHarness(), late_delivery="manual"
        )
        self.record = {}
        self.restart_harness()

    # -- rules -----------------------------------------------------------------

    @rule(key=st.sampled_from(KEYS), command=st.sampled_from(COMMANDS), background=st.booleans())
    def run_command(self, key: str, command: str, background: bool) -> None:
        args: dict[str, Any] = {"command": command, "timeout": 30}
        if background:
            args = {"command": command, "background": True, "background_timeout": 30}
        self.call(self.rig, "run_command", args, key)

    @rule(key=st.sampled_from(KEYS), code=st.sampled_from(["print(1)", "print(2)"]))
    def run_code(self, key: str, code: str) -> None:
        self.call(self.code_rig, self.code_rig.code_tool, {"code": code}, key)

    @rule(
        key=st.sampled_from(KEYS),
        cursor=st.integers(0, 64),
        wait=st.sampled_from([0, 0, 5, 600]),
    )
    def read(self, key: str, cursor: int, wait: int) -> None:
        args = {"task_id": self.rig.task_id(key), "stdout_cursor": cursor, "wait_seconds": wait}
        self.call(self.rig, "read_command_output", args, f"read-{self.calls}")

    @rule(key=st.sampled_from(KEYS))
    def stop(self, key: str) -> None:
        self.call(
            self.rig, "stop_command", {"task_id": self.rig.task_id(key)}, f"stop-{self.calls}"
        )

    @rule()
    def status(self) -> None:
        self.call(self.rig, "sandbox_status", {}, f"status-{self.calls}")

    @rule(seconds=st.sampled_from([0.5, 5.0, 60.0]))
    def time_passes(self, seconds: float) -> None:
        self.sim.advance(seconds)

    @rule()
    def held_requests_arrive(self) -> None:
        self.sim.deliver_held()

    @rule()
    def restart_harness(self) -> None:
        """The harness crashes and comes back: new ports and a new backend
        (which has not seen what the old one sent). The session's ownership
        record is durable and shared by its command and code ports, as the
        README recommends (without it, a command that deletes the sandbox's
        ledger could make a new port launch its task again)."""
        self.sim.forget_sent()
        record = self.record
        callbacks: dict[str, Any] = {
            "resolve_owned_command": lambda request, task: record.get(task),
            "remember_owned_command": lambda request, owned: record.__setitem__(
                owned.task_id, owned
            ),
        }
        self.rig = Rig(mode=self.mode, sim=self.sim, max_output_bytes=BUDGET, **callbacks)
        self.code_rig = Rig(
            mode=self.mode, sim=self.sim, tools="code", max_output_bytes=BUDGET, **callbacks
        )

    # -- the judge ---------------------------------------------------------------

    def call(self, rig: Rig, name: str, args: dict[str, Any], key: str) -> None:
        self.calls += 1
        rig.harness.reset()
        request = rig.request(name, args, key=key, call_id=f"call-{self.calls}")
        launch = name in invariants.LAUNCH_TOOLS
        task = rig.task_id(key) if launch else None
        before = dict(self.sim.launches)
        held_before = any(isinstance(e, Start) and e.task_id == task for e in self.sim.held)
        result = rig.port.execute_sync(request)
        self.judge(result, request, rig, task, before, held_before)

    def judge(
        self,
        result: ToolResult,
        request: ToolRequest,
        rig: Rig,
        task: str | None,
        before: dict[str, int],
        held_before: bool,
    ) -> None:
        assert isinstance(result, sandrail.ToolResult)
        invariants.check_budget(result, request, BUDGET)
        invariants.check_identity(result, request)
        if result.status == "error":
            self.sim.deliver_held()
            invariants.check_error_launched_nothing(
                result, None if held_before else task, before, self.sim
            )
        if task is not None:
            invariants.check_ok_launch(result, request, task, self.sim)
        if result.status == "uncertain" and task is not None:
            assert result.content.get("task_id", task) == task

    @invariant()
    def never_two_launches(self) -> None:
        invariants.check_at_most_one_launch(self.sim)


class NativePortMachine(PortMachine):
    mode = "native"


machine_settings = settings(
    stateful_step_count=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestAgentPort = PortMachine.TestCase
TestAgentPort.settings = machine_settings
TestNativePort = NativePortMachine.TestCase
TestNativePort.settings = machine_settings
