"""One harness process of the LangGraph tests on local-e2b: a create_agent run
with sandrail's LangChain tools, its state in a checkpointer another process
reads too, its commands on a local-e2b server (named by the E2B_* variables).

``python -m tests.langgraph_worker MODE CHECKPOINTER RECORD THREAD COMMAND OUT``

- ``MODE``: ``start`` (a new run), ``approve`` / ``reject`` (resume the
  thread's open question), ``again`` (``invoke(None)``: re-run what did not
  finish, as after a crash);
- ``CHECKPOINTER``: ``sqlite:PATH`` or ``postgres:URL``;
- ``RECORD``: the ownership record (a SQLite path);
- the scripted model calls ``run_command`` with ``COMMAND`` once, then ends;
  the policy asks a person about any command containing ``ask-me``. With
  ``FLAVOR=deepagents`` in the environment the agent is a Deep Agents one on
  :class:`~sandrail.adapters.deepagents.SandrailSandbox` and the model calls
  its ``execute`` tool instead.

OUT receives one JSON object: the interrupts, or the tool results.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langgraph.types import Command

import sandrail
from sandrail.adapters import langchain as lc
from sandrail.interpreters.e2b import E2BBackend
from sandrail.records import open_record
from tests.langchain_rig import run_command, scripted

SESSION = "langgraph-e2b"


@contextlib.contextmanager
def checkpointer(spec: str) -> Iterator[Any]:
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(where) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(where) as saver:
            saver.setup()
            yield saver


def policy(request: sandrail.ToolRequest) -> Any:
    if "ask-me" in str(request.call.arguments.get("command", "")):
        return sandrail.ApprovalRequired(interaction_id="ask")
    return sandrail.ALLOW


def main(argv: list[str]) -> int:
    mode, spec, record, thread, command, out = argv
    backend = E2BBackend(
        api_key=os.environ["E2B_API_KEY"],
        api_url=os.environ["E2B_API_URL"],
        sandbox_url=os.environ["E2B_SANDBOX_URL"],
    )
    tools = sandrail.Toolset(
        backend=backend,
        session_id=SESSION,
        owner=sandrail.AgentOwner(agent_id="langgraph-agent"),
        authorize=policy,
        assert_authority=lambda request: True,
        record=open_record(record),
    )

    deep = os.environ.get("FLAVOR") == "deepagents"

    def turn(messages: list[Any]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "done"
        if deep:
            return [{"name": "execute", "args": {"command": command}, "id": "call_1"}]
        return [run_command(command, "call_1", timeout=60)]

    config = {"configurable": {"thread_id": thread}}
    with checkpointer(spec) as saver:
        if deep:
            from deepagents import create_deep_agent

            from sandrail.adapters.deepagents import SandrailSandbox

            agent = create_deep_agent(
                model=scripted([turn, turn]), backend=SandrailSandbox(tools), checkpointer=saver
            )
        else:
            agent = create_agent(scripted([turn, turn]), tools=lc.tools(tools), checkpointer=saver)
        given: Any = {
            "start": {"messages": [{"role": "user", "content": "go"}]},
            "approve": Command(resume={"type": "approve"}),
            "reject": Command(resume={"type": "reject", "message": "no"}),
            "again": None,
        }[mode]
        state = agent.invoke(given, config)
    answer = {
        "interrupts": [i.value for i in state.get("__interrupt__", ())],
        "results": [
            {"text": m.content, "artifact": m.artifact} if deep else json.loads(m.content)
            for m in state["messages"]
            if isinstance(m, ToolMessage)
        ],
    }
    with open(out, "w", encoding="utf-8") as file:
        json.dump(answer, file)
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
