"""sandrail tools in an OpenAI Agents SDK agent (strict function tools).

Offline: the SDK's ScriptedModel plays the model. With a real model, drop
`model=` (and the RunConfig) and set OPENAI_API_KEY.
Run: python examples/openai_agents_tools.py   (needs: pip install 'sandrail[openai-agents]')
"""

from __future__ import annotations

import asyncio
import json

from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel, assistant_message, function_call

import sandrail
from sandrail.adapters.openai_agents import function_tools
from sandrail.interpreters.simulator import Simulator

toolset = sandrail.Toolset(
    backend=Simulator(),
    session_id="session-1",
    owner=sandrail.AgentOwner(agent_id="agent-1"),
    authorize=lambda request: sandrail.ALLOW,
    assert_authority=lambda request: True,
)
model = ScriptedModel(
    [
        [
            function_call(
                "run_command",
                {
                    "command": "echo hello",
                    "cwd": None,
                    "timeout": None,
                    "env": None,
                    "background": None,
                },
                call_id="call_1",
            )
        ],
        [assistant_message("The sandbox said hello.")],
    ]
)
agent = Agent(name="ops", model=model, tools=function_tools(toolset))


async def main() -> None:
    result = await Runner.run(
        agent, "Say hello from the sandbox.", run_config=RunConfig(tracing_disabled=True)
    )
    sent = [
        item["output"]
        for item in model.calls[-1].input
        if item.get("type") == "function_call_output"
    ]
    print("tool output:", json.loads(sent[0])["stdout"].strip())
    print("final:", result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
