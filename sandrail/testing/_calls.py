"""The records of a world's calls, and the port that makes them.

A :class:`WatchedPort` is an ordinary port whose ``execute`` opens a
:class:`CallRecord` in a context variable before the call runs; the world's
tap (:mod:`._world`) finds the record there and charges every effect, fault
and launch to it.
"""

from __future__ import annotations

import contextvars
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

import sandrail
from sandrail import ToolPort, ToolRequest, ToolResult
from sandrail.core import (
    SIDE_EFFECTS,
    TOOLS,
    Delivery,
    EffectFailure,
    ErrorCode,
    NativeIdentity,
    SandboxEffect,
    ToolKind,
    ToolSet,
    UnknownToolError,
)
from sandrail.interpreters.simulator import Fault

if TYPE_CHECKING:
    from ._world import World

__all__ = [
    "AGENT",
    "OWNED_TOOLS",
    "SCOPE",
    "SESSION",
    "CallRecord",
    "LateDelivery",
    "Mode",
    "WatchedPort",
    "code_tool",
    "native_identity",
    "tool_kind",
]

Mode = Literal["agent", "native"]
LateDelivery = Literal["manual", "next_effect"]

SESSION = "session-1"
AGENT = "agent-1"
SCOPE: Mapping[str, Any] = {"tenant": "acme", "project": "rails"}
OWNED_TOOLS = frozenset(name for name, tool in TOOLS.items() if tool.kind is ToolKind.OWNED_TASK)
"""The tools that act on a task this session launched (their records say so)."""


def code_tool(mode: Mode) -> str:
    """The snippet tool's name for an owner of ``mode`` (its record's tool set)."""
    wanted = ToolSet.AGENT_CODE if mode == "agent" else ToolSet.NATIVE_CODE
    return next(name for name, tool in TOOLS.items() if tool.tool_set is wanted)


def tool_kind(name: object) -> ToolKind | None:
    """What the tool ``name`` does (its record's kind), or ``None`` for a name
    the core has no record of: a call of it is refused as ``tool_unbound``
    before anything runs (:meth:`CallRecord.launches` holds the call to that)."""
    try:
        return TOOLS[name].kind  # type: ignore[index]
    except (KeyError, TypeError):
        return None


_UNBOUND = ErrorCode.TOOL_UNBOUND.value

_CURRENT: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar(
    "sandrail_testing_call", default=None
)
_LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("sandrail_testing_label", default="")
_BATCH: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sandrail_testing_batch", default=False
)


def native_identity(*, fence: int = 1, scope: Mapping[str, Any] = SCOPE) -> NativeIdentity:
    """The native identity the kit's helpers send (one run, one turn, ``fence``)."""
    return NativeIdentity(
        scope=scope,
        run_id="run-1",
        turn_id="turn-1",
        build_id="build-1",
        task_chain_id="chain-1",
        parent_run_id=None,
        execution_fence=fence,
    )


@attrs.define(eq=False)
class CallRecord:
    """One tool call and everything the world saw it cause.

    ``effects`` are the sandbox effects it sent with what each gave (an
    outcome or the :class:`EffectFailure` raised); ``faults`` the faults
    that struck them; ``launched`` the real launches it caused, per task id
    (late deliveries of its held requests included). ``aborted``,
    ``drifted`` and ``authority_lost`` are what the world's simulated harness
    did to this call (a fault plan flips them).
    """

    number: int
    label: str
    session_id: str
    owner: sandrail.AgentOwner | sandrail.NativeOwner
    request: ToolRequest
    budget: int
    governed: bool
    task: str | None
    """Launch tools: the task id the key derives; read/stop: the task asked for."""
    fence: int | None
    conflict: bool = False
    """A launch whose task the sandbox already holds with other arguments (C3)."""
    foreign: bool = False
    """A read or stop of a task this session's keys never derive (C4)."""
    oversized: bool = False
    """The identity alone cannot fit the budget (C14)."""
    concurrent: bool = False
    launched_before: int = 0
    """Launch tools: how many times the task had launched when the call began."""
    one_call: str | None = None
    """Launch tools: the digest of the call as one call to its port
    (:func:`~sandrail.core.same_call`: its defaults and its deadline as the
    port sets them), so two spellings of one launch are one; ``None`` for
    arguments without one."""
    effects: list[tuple[SandboxEffect, object]] = attrs.Factory(list)
    faults: list[Fault] = attrs.Factory(list)
    launched: Counter[str] = attrs.Factory(Counter)
    result: ToolResult | None = None
    reached_unanswered: list[SandboxEffect] = attrs.Factory(list)
    """Effects the ground truth saw reach the sandbox (its ``applied``), while
    the port got a failure for them."""
    aborted: bool = False
    drifted: bool = False
    authority_lost: bool = False
    record_faults: list[tuple[str, str]] = attrs.Factory(list)
    """Faults of the ownership record that struck this call: (``resolve`` or
    ``remember``, kind) (see :mod:`sandrail.testing._record_faults`)."""

    @property
    def tool(self) -> str:
        """The tool the call named."""
        return self.request.call.name

    @property
    def launches(self) -> bool:
        """Whether the tool the call named launches (its record's kind).

        A tool the core has no record of launches nothing, and its call must
        have been refused as ``tool_unbound``: answered any other way, it is
        more than the kit can judge, and :class:`~sandrail.core.UnknownToolError`
        is raised (never a guess)."""
        kind = tool_kind(self.tool)
        if kind is None:
            result = self.result
            if result is not None and result.content.get("error_type") != _UNBOUND:
                raise UnknownToolError(self.tool, tuple(TOOLS))
            return False
        return kind is ToolKind.LAUNCHES

    @property
    def key(self) -> str:
        """The call's operation key."""
        return self.request.operation_key

    @property
    def status(self) -> str | None:
        """The result's status; ``None`` while the call has not returned."""
        return None if self.result is None else self.result.status

    @property
    def dispatched(self) -> bool:
        """Whether a side-effect request of this call may have reached the sandbox."""
        return any(
            isinstance(effect, SIDE_EFFECTS)
            and not (isinstance(answer, EffectFailure) and answer.delivery is Delivery.NOT_SENT)
            for effect, answer in self.effects
        )


class WatchedPort(ToolPort):
    """A port whose calls its :class:`World` records (built by
    :meth:`World.command_tools` / :meth:`World.code_tools`; otherwise an
    ordinary :class:`~sandrail.ToolPort`)."""

    def __init__(self, *, world: World, **port: Any) -> None:
        super().__init__(**port)
        self._world = world

    def execute_sync(self, request: ToolRequest) -> ToolResult:
        """Execute as :meth:`sandrail.ToolPort.execute_sync` does, recording the
        call and its result in the world."""
        with self._world._watching(self, request) as record:
            result = super().execute_sync(record.request)
            record.result = result
        return result

    async def execute(self, request: ToolRequest) -> ToolResult:
        """Execute as :meth:`sandrail.ToolPort.execute` does, recording the call
        and its result in the world."""
        current = _CURRENT.get()
        if current is not None and current.request is request:
            # execute_sync running this call on its own loop: already watched.
            return await super().execute(request)
        with self._world._watching(self, request) as record:
            result = await super().execute(record.request)
            record.result = result
        return result
