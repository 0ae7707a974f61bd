"""A person approves a sandbox command through pydantic-ai's deferred tools.

The harness's policy answers ApprovalRequired for deploys: the agent run
ends with DeferredToolRequests, nothing has run. A person decides; a new run
with the message history (saved as JSON, as a web app would between
requests) and DeferredToolResults runs the approved call once, under the
operation key of the run that made it.

Offline: pydantic-ai's FunctionModel plays the model.
Run: python examples/approval_pydantic_ai.py   (needs: pip install 'sandrail[pydantic-ai]')
"""

from __future__ import annotations

import json
from typing import Any

from _approval_setup import DEPLOY, approval_toolset
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import FunctionModel

from sandrail.adapters.pydantic_ai import rejected, toolset

tools = approval_toolset()  # deploys need a person: see _approval_setup.py


def model(messages: list[Any], info: Any) -> ModelResponse:
    returned = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if returned:
        return ModelResponse(parts=[TextPart(f"Tool said: {returned[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("run_command", DEPLOY)])


agent = Agent(
    FunctionModel(model), toolsets=[toolset(tools)], output_type=[str, DeferredToolRequests]
)


def ask_person(call: ToolCallPart) -> bool:
    """Your UI asks a person; this example approves."""
    print("asking a person about:", call.tool_name, call.args)
    return True


first = agent.run_sync("Deploy the app.")
assert isinstance(first.output, DeferredToolRequests)
saved = ModelMessagesTypeAdapter.dump_json(first.all_messages())  # kept between requests

requests: DeferredToolRequests = first.output
approvals = {
    call.tool_call_id: True
    if ask_person(call)
    else rejected(tools, requests=requests, tool_call_id=call.tool_call_id)
    for call in requests.approvals
}
resumed = agent.run_sync(
    message_history=ModelMessagesTypeAdapter.validate_json(saved),
    deferred_tool_results=DeferredToolResults(approvals=approvals),
)
(sent,) = [
    json.loads(p.content)
    for m in resumed.new_messages()
    for p in m.parts
    if isinstance(p, ToolReturnPart)
]
print("approved and ran:", sent["status"], sent["stdout"].strip())
