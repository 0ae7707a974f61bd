"""Glue the LangChain, Deep Agents and ADK adapters share: the question a person
answers, a refusal for a call with no safe key, and the check of a timeout setting.
(The adapter kit's public helpers take these over when they land.)"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sandrail import ApprovalRequired, ErrorCode, ToolResult, Toolset
from sandrail.core import bound_result, error_result

__all__ = ["approval_request", "check_timeout", "no_key", "shown_arguments"]


def approval_request(
    toolset: Toolset,
    name: str,
    arguments: Mapping[str, Any],
    *,
    call_id: str,
    operation_key: str,
    decision: ApprovalRequired,
) -> dict[str, Any]:
    """The ``interrupt()`` value a person answers: the tool, its arguments
    with every env value hidden (the names stay), the call's identity and
    the policy's interaction id, in the shape of ``HumanInTheLoopMiddleware``'s
    request (``action_requests``, ``review_configs``) so a client built for it
    shows it. Plain JSON data: checkpointers store it as it is."""
    shown = shown_arguments(arguments)
    return {
        "type": "sandrail_approval",
        "action_requests": [
            {
                "name": name,
                "args": shown,
                "description": f"sandrail asks a person to approve {name} "
                f"(interaction {decision.interaction_id}).",
            }
        ],
        "review_configs": [{"action_name": name, "allowed_decisions": ["approve", "reject"]}],
        "tool_call_id": call_id,
        "operation_key": operation_key,
        "interaction_id": decision.interaction_id,
        "session_id": toolset.session_id,
    }


def shown_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """``arguments`` with each env value replaced by ``"[hidden]"`` (a
    mapping, or the strict profiles' ``{name, value}`` list): a person sees
    which variables a command gets, never their values (C17)."""
    shown = dict(arguments)
    env = shown.get("env")
    if isinstance(env, Mapping):
        shown["env"] = {str(k): "[hidden]" for k in env}
    elif isinstance(env, list):
        shown["env"] = [
            {"name": item.get("name"), "value": "[hidden]"} if isinstance(item, Mapping) else None
            for item in env
        ]
    return shown


def no_key(toolset: Toolset, why: str) -> ToolResult:
    """The refusal of a call with no safe operation key: nothing ran."""
    return bound_result(
        error_result(
            ErrorCode.OPERATION_KEY_REQUIRED,
            instruction=f"No safe operation key for this call ({why}); nothing ran.",
        ),
        toolset.max_output_bytes,
    )


def check_timeout(timeout_seconds: object) -> None:
    """``ValueError`` unless ``timeout_seconds`` is ``None`` or a positive,
    finite number."""
    if timeout_seconds is None:
        return
    if (
        isinstance(timeout_seconds, bool)
        or not isinstance(timeout_seconds, (int, float))
        or not math.isfinite(timeout_seconds)
        or timeout_seconds <= 0
    ):
        raise ValueError(f"timeout_seconds must be a positive number, got {timeout_seconds!r}")
