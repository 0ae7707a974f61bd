"""What the approval examples share: a toolset on the in-memory simulator
whose policy asks a person before any deploy.

Each examples/approval_*.py imports it; what differs, and what each example
is for, is how its framework stops the run and hands the decision to a
person (docs/howto/approval.md). Python puts an example's own folder on the
path, so `python examples/approval_mcp.py` finds this module from anywhere.
"""

from __future__ import annotations

from typing import Any

import sandrail
from sandrail.interpreters.simulator import Simulator

DEPLOY: dict[str, Any] = {
    "command": "echo deploying",
    "cwd": None,
    "timeout": None,
    "env": None,
    "background": None,
}
"""The arguments the scripted model sends: a deploy (strict tools send every field)."""


def policy(request: sandrail.ToolRequest) -> Any:
    """The harness's policy: a deploy needs a person, anything else may run."""
    if "deploy" in str(request.call.arguments.get("command", "")):
        return sandrail.ApprovalRequired(interaction_id=f"approve-{request.call.call_id}")
    return sandrail.ALLOW


def approval_toolset() -> sandrail.Toolset:
    """The sandbox tools under :func:`policy`, on the in-memory simulator."""
    return sandrail.Toolset(
        backend=Simulator(),
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=policy,
        assert_authority=lambda request: True,
    )
