"""A port wired to the simulator, for scenario and stateful tests.

No mocks: the port, the core and the simulator are the real objects; the
simulated harness is the one a fault plan can act on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import sandrail
from sandrail import ToolRequest, ToolResult
from sandrail.core import NativeIdentity, SandboxPhase, SandboxState, canonical_json
from sandrail.interpreters.launcher import Box, Launcher, Transport
from sandrail.interpreters.simulator import FaultPlan, Script, SimulatedHarness, Simulator
from sandrail.testing import AGENT, SCOPE, SESSION, native_identity

__all__ = [
    "AGENT",
    "NATIVE_FIELDS",
    "SCOPE",
    "SESSION",
    "Mode",
    "Rig",
    "locator_keys",
    "native_identity",
    "size",
]

Mode = Literal["agent", "native"]

NATIVE_FIELDS = (
    "scope",
    "run_id",
    "turn_id",
    "build_id",
    "task_chain_id",
    "parent_run_id",
    "execution_fence",
)


class Rig:
    """One port (command or code tools) on one simulator."""

    def __init__(
        self,
        *,
        mode: Mode = "agent",
        tools: Literal["command", "code"] = "command",
        scripts: Mapping[str, Script] | None = None,
        plan: FaultPlan | None = None,
        sim: Simulator | None = None,
        session_id: str = SESSION,
        max_output_bytes: int = 24_000,
        **port_options: Any,
    ) -> None:
        self.mode = mode
        self.session_id = session_id
        self.sim = sim or Simulator(scripts=scripts, plan=plan, harness=SimulatedHarness())
        self.harness = self.sim.harness
        self.owner: sandrail.AgentOwner | sandrail.NativeOwner = (
            sandrail.AgentOwner(agent_id=AGENT)
            if mode == "agent"
            else sandrail.NativeOwner(scope=SCOPE)
        )
        factory = sandrail.command_tools if tools == "command" else sandrail.code_tools
        port_options.setdefault("authorize", self.harness.authorize)
        port_options.setdefault("assert_authority", self.harness.assert_authority)
        self.port = factory(
            backend=self.sim,
            session_id=session_id,
            owner=self.owner,
            max_output_bytes=max_output_bytes,
            **port_options,
        )

    @property
    def code_tool(self) -> str:
        return "sandbox_run_code" if self.mode == "agent" else "run_code"

    def identity(self, *, fence: int = 1) -> sandrail.AgentIdentity | NativeIdentity:
        if self.mode == "agent":
            return sandrail.AgentIdentity(agent_id=AGENT)
        return native_identity(fence=fence)

    def request(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        key: str = "op-1",
        call_id: str = "call-1",
        fence: int = 1,
        **overrides: Any,
    ) -> ToolRequest:
        fields: dict[str, Any] = {
            "call": sandrail.ToolCall(name=name, call_id=call_id, arguments=dict(arguments or {})),
            "operation_key": key,
            "session_id": self.session_id,
            "definition": self.port.definition(name) if name in self.tool_names else {},
            "identity": self.identity(fence=fence),
            "cancel": self.harness.cancel_token,
        }
        fields.update(overrides)
        return ToolRequest(**fields)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.port.definitions)

    def run(self, name: str, arguments: Mapping[str, Any] | None = None, **kw: Any) -> ToolResult:
        """A fresh call: reset the harness (new token, authority back), then execute."""
        self.harness.reset()
        return self.port.execute_sync(self.request(name, arguments, **kw))

    def task_id(self, key: str = "op-1") -> str:
        return sandrail.task_id(self.session_id, self.owner, key)


def size(result: ToolResult) -> int:
    return len(canonical_json(result.content))


def locator_keys(mode: Mode) -> set[str]:
    base = {"session_id", "operation_key", "call_id"}
    return base | ({"agent_id"} if mode == "agent" else set(NATIVE_FIELDS))


def inspect_answer(
    backend: Any, sandbox_id: str | None, phase: SandboxPhase, *, isolated: bool
) -> SandboxState:
    """What ``backend`` (a backend class stating its label and boundary)
    answers an ``Inspect`` with: the sandbox, its phase, and the backend's
    own words."""
    label, words = backend.backend_label, backend.boundary
    return SandboxState(
        sandbox_id=sandbox_id, phase=phase, backend=label, isolated=isolated, boundary=words
    )


def launcher_for(transport: Transport, box: Callable[[str], Awaitable[Box]]) -> Launcher:
    """A launcher on ``transport`` with fixed test settings: a 1 s request
    timeout, a fixed ledger key, no sandbox ever gone or dead."""
    return Launcher(
        transport,
        request_timeout=1.0,
        box=box,
        ledger_key=lambda: b"k" * 32,
        max_command_seconds=lambda: 60,
        note_gone=lambda sandbox_id, exc: None,
        is_dead=lambda sandbox_id: False,
    )
