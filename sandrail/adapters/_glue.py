"""The approval question the LangChain, Deep Agents and ADK adapters ask a person:
what :func:`approval_request` builds, on the adapter kit's
:func:`~sandrail.adapters.kit.shown_arguments`."""

from __future__ import annotations

import json
from typing import Any

from sandrail import ToolResult, Toolset
from sandrail.adapters.kit import ModelCall, shown_arguments

__all__ = ["approval_request"]


def approval_request(toolset: Toolset, asked: ToolResult, call: ModelCall) -> dict[str, Any]:
    """The question a person answers about ``call`` (whose result ``asked``
    is ``approval_required``): the tool, its arguments as the adapter kit
    shows them (every env value masked, wherever it appears), the call's
    identity and the policy's interaction id (every value the toolset's
    session masks masked in all of it, C17), in the shape of LangChain's
    ``HumanInTheLoopMiddleware`` requests (``action_requests``,
    ``review_configs``), so a client built for those shows it. Plain JSON
    data: checkpointers and session stores keep it as it is."""
    shown = shown_arguments(call.arguments, toolset=toolset)
    try:
        args: Any = json.loads(shown)
    except ValueError:  # cut to fit what a person reads
        args = {"shown": shown}
    interaction = asked.content.get("interaction_id")
    return {
        "type": "sandrail_approval",
        "action_requests": [
            {
                "name": call.name,
                "args": args,
                "description": toolset.masked(
                    f"sandrail asks a person to approve {call.name} "
                    f"(interaction {interaction}): {shown}"
                ),
            }
        ],
        "review_configs": [{"action_name": call.name, "allowed_decisions": ["approve", "reject"]}],
        "tool_call_id": call.call_id,
        "operation_key": call.operation_key,
        "interaction_id": interaction if isinstance(interaction, str) else None,
        "session_id": toolset.session_id,
    }
