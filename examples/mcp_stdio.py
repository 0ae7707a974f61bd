"""sandrail as an MCP server over stdio, driven by the official MCP client.

A real client (an IDE, an agent runtime) starts `sandrail mcp` the same way.
Run: python examples/mcp_stdio.py   (needs: pip install 'sandrail[mcp]')
"""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def main() -> None:
    # The server: `sandrail mcp` on the simulator (nothing really runs). With
    # E2B_API_KEY in its env and no --backend, it runs commands in E2B.
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "sandrail", "mcp", "--backend", "simulator"]
    )
    async with Client(server) as client:
        tools = (await client.list_tools()).tools
        print("tools:", ", ".join(tool.name for tool in tools))
        # The operation key travels in _meta: a retry with the same key never runs twice.
        meta = {"sandrail/operation_key": "run-1:call-1"}
        first = await client.call_tool("run_command", {"command": "echo hello"}, meta=meta)
        retry = await client.call_tool("run_command", {"command": "echo hello"}, meta=meta)
        for result in (first, retry):
            content = json.loads(result.content[0].text)
            print(result.meta["sandrail/status"], repr(content["stdout"]), content["deduplicated"])


if __name__ == "__main__":
    asyncio.run(main())
