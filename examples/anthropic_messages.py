"""sandrail tools in an Anthropic Messages API tool loop (strict tool use).

Offline: the SDK's client talks to a scripted stand-in of the API through a
mock transport. With the real API, build `anthropic.Anthropic()` instead.
Run: python examples/anthropic_messages.py   (needs: pip install 'sandrail[anthropic]')
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2

import sandrail
from sandrail.adapters.anthropic import AnthropicTools
from sandrail.interpreters.simulator import Simulator

toolset = sandrail.Toolset(
    backend=Simulator(),
    session_id="session-1",
    owner=sandrail.AgentOwner(agent_id="agent-1"),
    authorize=lambda request: sandrail.ALLOW,
    assert_authority=lambda request: True,
)
tools = AnthropicTools(toolset, run_id="run-1")


def scripted_api(request: httpx2.Request) -> httpx2.Response:
    """Asks for one tool call, then ends the turn once it sees the result."""
    messages = json.loads(request.content)["messages"]
    if messages[-1]["role"] == "user" and isinstance(messages[-1]["content"], str):
        arguments = {
            "command": "echo hello",
            "cwd": None,
            "timeout": None,
            "env": None,
            "background": None,
        }
        content: list[dict[str, Any]] = [
            {"type": "tool_use", "id": "toolu_1", "name": "run_command", "input": arguments}
        ]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": "The sandbox said hello."}], "end_turn"
    return httpx2.Response(
        200,
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-5",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    )


def main() -> None:
    client = anthropic.Anthropic(
        api_key="offline", http_client=httpx2.Client(transport=httpx2.MockTransport(scripted_api))
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Say hello from the sandbox."}]
    while True:
        reply = client.messages.create(
            model="claude-sonnet-5", max_tokens=512, messages=messages, tools=tools.definitions
        )
        if reply.stop_reason != "tool_use":
            print("final:", reply.content[0].text)
            return
        results = [tools.handle_sync(block) for block in reply.content if block.type == "tool_use"]
        print("tool_result:", json.loads(results[0]["content"])["stdout"].strip())
        messages += [
            {"role": "assistant", "content": [block.model_dump() for block in reply.content]},
            {"role": "user", "content": results},
        ]


if __name__ == "__main__":
    main()
