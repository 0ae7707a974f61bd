"""sandrail tools in a pydantic-ai agent.

Offline: pydantic-ai's TestModel plays the model (it calls every tool with
arguments built from the schemas). With a real model, pass its name instead.
Run: python examples/pydantic_ai_tools.py   (needs: pip install 'sandrail[pydantic-ai]')
"""

from __future__ import annotations

import json

from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

import sandrail
from sandrail.adapters import pydantic_ai
from sandrail.interpreters.simulator import Simulator

toolset = sandrail.Toolset(
    backend=Simulator(),
    session_id="session-1",
    owner=sandrail.AgentOwner(agent_id="agent-1"),
    authorize=lambda request: sandrail.ALLOW,
    assert_authority=lambda request: True,
)
agent = Agent(
    TestModel(call_tools=["run_command", "sandbox_status"]),
    toolsets=[pydantic_ai.toolset(toolset)],
)


def main() -> None:
    result = agent.run_sync("Run something in the sandbox.")
    for name, text in json.loads(result.output).items():
        print(name, "->", json.loads(text)["ok"])


if __name__ == "__main__":
    main()
