"""Shared pieces of the embedding tests: a toolset on the simulator, and a
backend whose waits take real time, so a framework can cancel a call while
its command runs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import sandrail
from sandrail.core import Effect, ErrorCode, Start, Wait
from sandrail.interpreters.simulator import Simulator

ARGUMENT_ERRORS = frozenset(
    {
        ErrorCode.ARGUMENTS_INVALID.value,
        ErrorCode.COMMAND_REQUIRED.value,
        ErrorCode.BACKGROUND_TIMEOUT_REQUIRES_BACKGROUND.value,
        ErrorCode.TIMEOUT_REQUIRES_FOREGROUND.value,
        ErrorCode.UNSUPPORTED_LANGUAGE.value,
    }
)
"""Every argument-stage error a port can answer: none may follow a schema-valid argument."""


def asks_for_rm(request: sandrail.ToolRequest) -> Any:
    """A policy that asks a person about ``rm ...``, denies ``shutdown ...``
    and allows the rest."""
    command = request.call.arguments.get("command", "")
    if command.startswith("rm"):
        return sandrail.ApprovalRequired(interaction_id="ask-rm")
    if command.startswith("shutdown"):
        return sandrail.Deny(reason="never")
    return sandrail.ALLOW


HANGS = "sleep infinity"
"""A command that never ends (in the simulator, and so in real time here)."""


class RealTimeWaits:
    """An asynchronous backend over a :class:`Simulator` whose ``Wait`` for a
    ``sleep N`` command sleeps N seconds in real time (at most ``limit``; a
    hanging command, the limit), so a framework can cancel the call meanwhile;
    everything else is the simulator's, at once."""

    asynchronous = True

    def __init__(self, sim: Simulator | None = None, *, limit: float = 20.0) -> None:
        self.sim = sim or Simulator()
        self.limit = limit
        self.waiting = asyncio.Event()
        self._seconds: dict[str, float] = {}

    async def __call__(self, effect: Effect) -> Any:
        if isinstance(effect, Start) and effect.command.startswith("sleep "):
            word = effect.command.split()[1]
            self._seconds[effect.task_id] = self.limit if word == "infinity" else float(word)
        if isinstance(effect, Wait) and effect.task_id in self._seconds:
            self.waiting.set()
            await asyncio.sleep(
                min(self._seconds[effect.task_id], effect.timeout_seconds, self.limit)
            )
        return self.sim(effect)


def toolset(
    backend: Any = None, *, max_output_bytes: int = 24_000, **kwargs: Any
) -> sandrail.Toolset:
    settings: dict[str, Any] = {
        "session_id": "embed-session",
        "owner": sandrail.AgentOwner(agent_id="embed-agent"),
        "authorize": lambda request: sandrail.ALLOW,
        "assert_authority": lambda request: True,
        **kwargs,
    }
    return sandrail.Toolset(
        backend=backend if backend is not None else Simulator(),
        max_output_bytes=max_output_bytes,
        **settings,
    )


def command_toolset(
    backend: Any, *, session_id: str = "s-1", agent_id: str = "agent-1", **kwargs: Any
) -> sandrail.Toolset:
    """A toolset of the command tools alone for ``session_id`` of agent
    ``agent_id``, allowing everything: what a recording and its replay both
    need to be made with (the cassette holds the session and the owner)."""
    settings: dict[str, Any] = {
        "tools": ("command",),
        "authorize": lambda request: sandrail.ALLOW,
        "assert_authority": lambda request: True,
        **kwargs,
    }
    return sandrail.Toolset(
        backend=backend,
        session_id=session_id,
        owner=sandrail.AgentOwner(agent_id=agent_id),
        **settings,
    )


def simulator(toolset_or_backend: Any) -> Simulator:
    backend = toolset_or_backend
    if isinstance(backend, sandrail.Toolset):
        backend = backend._ports["run_command"]._backend
    return backend.sim if isinstance(backend, RealTimeWaits) else backend


def launches(toolset: sandrail.Toolset) -> int:
    """How many commands really started, ever (the simulator's ground truth)."""
    return sum(simulator(toolset).launches.values())


def assert_aborted_then_reconciled(tools: sandrail.Toolset, key: str, retry: Any) -> None:
    """What a framework's timeout must leave behind, whenever it struck: an
    abort before dispatch ran nothing; an abort after it is ``uncertain``,
    and ``retry()`` (the same call, same operation key) reconciles it without
    a second launch (C2, C5, C11)."""
    abandoned = tools.abandoned[key]
    if abandoned.status == "error":
        assert abandoned.error_type == "canceled"
        assert abandoned.content["executed"] is False
        assert launches(tools) == 0
        return
    assert abandoned.status == "uncertain"
    assert abandoned.error_type == "e2b_command_aborted"
    again = retry()
    assert again["deduplicated"] is True
    assert launches(tools) == 1


def mcp_content(result: Any) -> dict[str, Any]:
    """The JSON object in the one text block of an MCP tool result."""
    (block,) = result.content
    parsed: dict[str, Any] = json.loads(block.text)
    return parsed


def assert_each_call_its_own(
    told: dict[str, Any], rejected: str | None, keys: dict[str, str]
) -> None:
    """Of two identical calls ``ca`` and ``cb`` of one model turn, the
    ``rejected`` one (if any) read ``approval_rejected`` with nothing run,
    and the other ran anew under its own key from ``keys``."""
    for call in ("ca", "cb"):
        if call == rejected:
            assert (told[call]["error_type"], told[call]["executed"]) == (
                "approval_rejected",
                False,
            )
        else:
            assert (told[call]["status"], told[call]["deduplicated"]) == ("ok", False)
            assert told[call]["operation_key"] == keys[call]
