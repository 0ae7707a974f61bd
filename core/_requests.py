"""What a harness hands to a port: the call, its operation key, and who asks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from ._identity import OwnerIdentity

__all__ = ["RUNTIME_ARTIFACTS", "AbortSignal", "ToolCall", "ToolRequest"]

RUNTIME_ARTIFACTS: Literal["runtime-artifacts/v1"] = "runtime-artifacts/v1"
"""``result_governance`` value: the runtime bounds results itself (no C12 cut)."""


@runtime_checkable
class AbortSignal(Protocol):
    """What a request's ``cancel`` must be: anything with a bool
    ``cancelled`` (and, to wake waits at once, ``add_callback``).
    :class:`sandrail.CancelToken` is the stock one."""

    @property
    def cancelled(self) -> bool: ...


@attrs.frozen(kw_only=True)
class ToolCall:
    """One tool call as the model made it."""

    name: str
    call_id: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ToolRequest:
    """Everything a port needs to run one call.

    Fields are not validated on construction: a port answers a malformed
    request with a specific ``error`` result rather than an exception.

    - ``definition``: the tool definition the call was made from; must equal
      the port's own (a stale or edited definition is refused).
    - ``identity``: :class:`NativeIdentity` or :class:`AgentIdentity`,
      matching the port's owner mode.
    - ``cancel``: the abort signal; ``None`` means the call cannot be aborted.
    - ``result_governance``: ``"runtime-artifacts/v1"`` when the runtime
      bounds results itself.
    """

    call: ToolCall
    operation_key: str
    session_id: str
    definition: Any
    identity: OwnerIdentity | None = None
    cancel: AbortSignal | None = None
    result_governance: str | None = None
