"""A person approves a sandbox command through MCP elicitation.

An embedded MCP server (sandrail.adapters.mcp.server) with a policy that
answers ApprovalRequired for deploys asks the person at the client with
elicitation; the official MCP client's elicitation callback plays that
person. Approved, the call runs once; declined, nothing runs. A client
without elicitation gets the approval_required result instead (see
docs/howto/mcp.md).

Run: python examples/approval_mcp.py   (needs: pip install 'sandrail[mcp]')
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import mcp_types
from _approval_setup import approval_toolset
from mcp import Client

from sandrail.adapters.mcp import server

toolset = approval_toolset()  # deploys need a person: see _approval_setup.py


async def person(context: Any, params: Any) -> mcp_types.ElicitResult:
    """The client's elicitation UI: shows the question, the person approves."""
    print("asked:", params.message)
    return mcp_types.ElicitResult(action="accept", content={"approve": True})


async def main() -> None:
    async with Client(server(toolset), elicitation_callback=person) as client:
        result = await client.call_tool("run_command", {"command": "echo deploying"})
    content = json.loads(result.content[0].text)
    print("approved and ran:", result.meta["sandrail/status"], content["stdout"].strip())


if __name__ == "__main__":
    asyncio.run(main())
