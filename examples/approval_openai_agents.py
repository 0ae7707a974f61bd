"""A person approves a sandbox command through the OpenAI Agents SDK's
interruptions and RunState.

The harness's policy answers ApprovalRequired for deploys: the run stops
with an interruption, nothing has run. The state is saved as a string (a
web app keeps it between requests, or across a restart), a person decides,
and the run resumes from the saved copy: state.approve(item) runs the call
once. Resuming the same saved copy again (a crash after the first resume)
launches nothing new: the call's operation key travels in the saved state.

Offline: the SDK's ScriptedModel plays the model.
Run: python examples/approval_openai_agents.py   (needs: pip install 'sandrail[openai-agents]')
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from _approval_setup import DEPLOY, approval_toolset
from agents import Agent, Runner, RunState
from agents.testing import ScriptedModel, assistant_message, function_call

from sandrail.adapters.openai_agents import function_tools, rejection

tools = approval_toolset()  # deploys need a person: see _approval_setup.py
model = ScriptedModel(
    [
        [function_call("run_command", DEPLOY, call_id="call_1")],
        [assistant_message("Deployed.")],
        [assistant_message("Deployed.")],
    ]
)
agent = Agent(name="ops", model=model, tools=function_tools(tools))


def ask_person(item: Any) -> bool:
    """Your UI asks a person; this example approves."""
    print("asking a person about:", item.tool_name, item.raw_item.arguments)
    return True


async def main() -> None:
    first = await Runner.run(agent, "Deploy the app.")
    saved = first.to_state().to_string()  # kept between requests
    for attempt in ("resumed", "resumed again"):
        state = await RunState.from_string(agent, saved)
        for item in state.get_interruptions():
            if ask_person(item):
                state.approve(item)
            else:
                state.reject(item, rejection_message=rejection(tools, item=item))
        result = await Runner.run(agent, state)
        (sent,) = [i.output for i in result.new_items if i.type == "tool_call_output_item"]
        content = json.loads(sent)
        print(f"{attempt}:", content["status"], "deduplicated:", content["deduplicated"])
    print("final:", result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
