"""A person approves a sandbox command in an Anthropic Messages tool loop.

The harness's policy answers ApprovalRequired for deploys: handle() runs
nothing and returns the approval_required result, which the harness does
not send to the model. A person decides: approve(block) runs that very call
once (under its own operation key: approving again, after a restart, runs
nothing new); reject(block) runs nothing and tells the model so.

Offline: the real Anthropic client over a mock transport plays the API.
Run: python examples/approval_anthropic.py   (needs: pip install 'sandrail[anthropic]')
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
from _approval_setup import DEPLOY, approval_toolset

from sandrail.adapters.anthropic import AnthropicTools

toolset = approval_toolset()  # deploys need a person: see _approval_setup.py
tools = AnthropicTools(toolset, run_id="conversation-42")  # keep it with the conversation


def fake_api(request: httpx2.Request) -> httpx2.Response:
    """Plays the Messages API: one tool_use, then a final answer."""
    sent = json.loads(request.content)
    last = sent["messages"][-1]["content"]
    if isinstance(last, list) and last[0]["type"] == "tool_result":
        text = f"The sandbox said: {json.loads(last[0]['content'])['stdout'].strip()}"
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        stop = "end_turn"
    else:
        content = [
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "run_command",
                "input": DEPLOY,
            }
        ]
        stop = "tool_use"
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "stop_sequence": None,
        "content": content,
        "stop_reason": stop,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    return httpx2.Response(200, json=reply)


def ask_person(block: Any) -> bool:
    """Your UI asks a person; this example approves."""
    print("asking a person about:", block.name, block.input)
    return True


client = anthropic.Anthropic(
    api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(fake_api))
)
messages: list[dict[str, Any]] = [{"role": "user", "content": "Deploy the app."}]
while True:
    reply = client.messages.create(
        model="claude-test", max_tokens=512, tools=tools.definitions, messages=messages
    )
    messages.append({"role": "assistant", "content": reply.content})
    if reply.stop_reason != "tool_use":
        break
    results = []
    for block in reply.content:
        if block.type != "tool_use":
            continue
        answer = tools.handle_sync(block)
        if tools.needs_approval(answer):  # nothing ran: a person decides
            answer = tools.approve_sync(block) if ask_person(block) else tools.reject(block)
        print("tool_result:", json.loads(answer["content"])["status"])
        results.append(answer)
    messages.append({"role": "user", "content": results})
print("final:", reply.content[0].text)
