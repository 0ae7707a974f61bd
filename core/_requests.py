"""What a harness hands to a port: the call, its operation key, and who asks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, Protocol, runtime_checkable

import attrs

from ._identity import OwnerIdentity

__all__ = ["RUNTIME_ARTIFACTS", "AbortSignal", "ToolCall", "ToolRequest", "with_arguments"]

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


def _copier(kind: type, replaced: str) -> Callable[[Any, Any], Any]:
    """A function ``(old, value)`` making a ``kind`` like ``old`` but with
    ``replaced`` set to ``value``: what ``attrs.evolve`` does, generated
    once from the class's fields (so a field added to it is copied too)
    instead of looked up on every call."""
    given = ", ".join(
        f"{field.alias}={'value' if field.name == replaced else 'old.' + field.name}"
        for field in attrs.fields(kind)
        if field.init
    )
    copier: Callable[[Any, Any], Any] = eval(f"lambda old, value: kind({given})", {"kind": kind})
    return copier


_CALL_WITH_ARGUMENTS: Final = _copier(ToolCall, "arguments")
_REQUEST_WITH_CALL: Final = _copier(ToolRequest, "call")


def with_arguments(request: ToolRequest, arguments: Mapping[str, Any]) -> ToolRequest:
    """``request`` with its call's arguments replaced by ``arguments``: a new
    request, as ``attrs.evolve`` would make it (a subclass of either class
    is evolved as it is)."""
    call = request.call
    if type(call) is not ToolCall or type(request) is not ToolRequest:
        return attrs.evolve(request, call=attrs.evolve(call, arguments=arguments))
    return _REQUEST_WITH_CALL(request, _CALL_WITH_ARGUMENTS(call, arguments))  # type: ignore[no-any-return]
