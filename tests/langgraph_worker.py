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
  its ``execute`` tool instead. A flavor ending in ``-gated`` asks through
  sandrail's ``human_in_the_loop`` middleware instead of the policy (which
  then allows everything), answered with its ``{"decisions": [...]}``.

OUT receives one JSON object: the interrupts, or the tool results (each
with the id of its tool message, so two processes that read one message
from the thread can tell it from two runs of the tool).
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


FLAVOR = os.environ.get("FLAVOR", "langchain")
GATED = FLAVOR.endswith("-gated")


def policy(request: sandrail.ToolRequest) -> Any:
    if not GATED and "ask-me" in str(request.call.arguments.get("command", "")):
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

    deep = FLAVOR.startswith("deepagents")

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

            from sandrail.adapters.deepagents import SandrailSandbox, human_in_the_loop

            sandbox = SandrailSandbox(tools)
            gates = [human_in_the_loop(sandbox, {"execute": True})] if GATED else []
            agent = create_deep_agent(
                model=scripted([turn, turn]), backend=sandbox, checkpointer=saver, middleware=gates
            )
        else:
            gates = [lc.human_in_the_loop(tools, {"run_command": True})] if GATED else []
            agent = create_agent(
                scripted([turn, turn]), tools=lc.tools(tools), checkpointer=saver, middleware=gates
            )
        approve: Any = {"type": "approve"}
        reject: Any = {"type": "reject", "message": "no"}
        if GATED:
            approve, reject = {"decisions": [approve]}, {"decisions": [reject]}
        given: Any = {
            "start": {"messages": [{"role": "user", "content": "go"}]},
            "approve": Command(resume=approve),
            "reject": Command(resume=reject),
            "again": None,
        }[mode]
        state = agent.invoke(given, config)
    answer = {
        "interrupts": [i.value for i in state.get("__interrupt__", ())],
        "results": [
            {"text": m.content, "artifact": m.artifact, "message_id": m.id}
            if deep
            else {**_read(m.content), "message_id": m.id}
            for m in state["messages"]
            if isinstance(m, ToolMessage)
        ],
    }
    with open(out, "w", encoding="utf-8") as file:
        json.dump(answer, file)
    backend.close()
    return 0


def _read(content: str) -> Any:
    """A sandrail result's JSON, or a middleware's own answer as ``{"text"}``."""
    try:
        return json.loads(content)
    except ValueError:
        return {"text": content}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
