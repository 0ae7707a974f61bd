"""Deep Agents and Google ADK loops on local-e2b through the unmodified e2b SDK:
Deep Agents' file tools (which its BaseSandbox builds on shell commands) on a
real bash, its shell tool approved, and an ADK confirmation, each command
counted from inside the sandbox (docs/howto/deepagents.md, docs/howto/google-adk.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from deepagents import create_deep_agent
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

import sandrail
from sandrail.adapters.deepagents import SandrailSandbox
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B, serve
from tests.langchain_rig import scripted, tool_messages

pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve(signal_scope="process") as running:
        yield running


def _toolset(server: LocalE2B, **kwargs: Any) -> sandrail.Toolset:
    settings: dict[str, Any] = {
        "session_id": f"frameworks-{uuid.uuid4().hex[:8]}",
        "owner": sandrail.AgentOwner(agent_id="frameworks-agent"),
        "authorize": lambda request: sandrail.ALLOW,
        "assert_authority": lambda request: True,
        **kwargs,
    }
    return sandrail.Toolset(backend=E2BBackend(**server.sdk_options), **settings)


def _call(name: str, call_id: str, **args: Any) -> list[dict[str, Any]]:
    return [{"name": name, "args": args, "id": call_id}]


def test_deep_agents_file_tools_and_shell_run_on_a_real_sandbox(server: LocalE2B) -> None:
    tools = _toolset(server)
    path = f"/home/user/notes-{uuid.uuid4().hex[:6]}.txt"
    model = scripted(
        [
            _call("write_file", "w1", file_path=path, content="alpha\nbeta\n"),
            _call("edit_file", "e1", file_path=path, old_string="beta", new_string="gamma"),
            _call("read_file", "r1", file_path=path),
            _call("grep", "g1", pattern="gamma", path="/home/user"),
            _call("execute", "x1", command=f"wc -l < {path}"),
        ]
    )
    agent = create_deep_agent(model=model, backend=SandrailSandbox(tools))
    out = agent.invoke({"messages": [{"role": "user", "content": "edit the notes"}]})
    wrote, edited, read, grepped, counted = tool_messages(out["messages"])
    assert "Updated file" in wrote.content or path in wrote.content, wrote.content
    assert "Error" not in edited.content, edited.content
    assert "alpha" in read.content
    assert "gamma" in read.content
    assert path in grepped.content
    assert counted.content.startswith("2\n")
    assert counted.artifact == {"truncated": False, "exit_code": 0}


def test_deep_agents_shell_approved_by_the_policy_runs_once_per_resume(server: LocalE2B) -> None:
    mark = f"da.{uuid.uuid4().hex[:10]}"

    def policy(request: sandrail.ToolRequest) -> Any:
        if mark in request.call.arguments["command"]:
            return sandrail.ApprovalRequired(interaction_id="ask")
        return sandrail.ALLOW

    tools = _toolset(server, authorize=policy)
    model = scripted([_call("execute", "x1", command=f"{server.mark(mark)}; echo ran"), "ok"])
    agent = create_deep_agent(
        model=model, backend=SandrailSandbox(tools), checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [{"role": "user", "content": "go"}]}, config)
    asked_at = agent.get_state(config).config
    done = agent.invoke(Command(resume={"type": "approve"}), config)
    agent.invoke(Command(resume={"type": "approve"}), asked_at)
    assert tool_messages(done["messages"])[-1].content.startswith("ran\n")
    assert server.truth().marked(mark) == 1


def test_adk_confirmation_on_a_real_sandbox_runs_the_call_once(server: LocalE2B) -> None:
    from tests.adk_rig import answer, confirmation_calls, responses_sent, run_command, text
    from tests.test_adapter_google_adk import _Run

    mark = f"adk.{uuid.uuid4().hex[:10]}"

    def policy(request: sandrail.ToolRequest) -> Any:
        return sandrail.ApprovalRequired(interaction_id="ask")

    tools = _toolset(server, authorize=policy)
    run = _Run(tools, [[run_command(f"{server.mark(mark)}; echo ran", "c1")], "ok", "ok"])
    (asked,) = confirmation_calls(run.send(text("go")))
    run.send(answer(asked, True))
    run.send(answer(asked, True))
    (result,) = responses_sent(run.model)
    assert result["stdout"] == "ran\n"
    assert json.loads(json.dumps(result))["status"] == "ok"
    assert server.truth().marked(mark) == 1


def test_c12_deep_agents_file_tools_on_big_outputs_under_a_small_budget_are_whole(
    server: LocalE2B, tmp_path: Any
) -> None:
    """On a real bash, with a 4 kB budget: ``ls`` of 20,000 files, ``glob``
    over a tree of 4,000, ``read_file`` of a 6 MB file, each answered whole
    (the rest read by cursor), each command launched once."""
    from deepagents.backends.sandbox import _build_read_cmd, _parse_read_output

    from tests.test_adapter_deepagents import _in_a_run, _printed

    tools = _toolset(server, max_output_bytes=4000)
    root = f"/home/user/big-{uuid.uuid4().hex[:6]}"
    setup = (
        f"mkdir -p {root}/flat {root}/tree && cd {root}/flat && seq -w 20000 | xargs touch && "
        f"cd {root}/tree && for d in $(seq 40); do mkdir d$d; "
        "(cd d$d && seq 100 | sed 's/$/.py/' | xargs touch); done && "
        f"yes \"$(printf 'x%.0s' $(seq 3000))\" | head -n 2000 > {root}/big.txt"
    )
    made = tools.call_sync(
        "run_command", {"command": setup}, call_id="setup", operation_key=f"{root}:setup"
    )
    assert made.exit_code == 0, made.to_json()
    backend = SandrailSandbox(tools)
    listed = _in_a_run(lambda: backend.ls(f"{root}/flat"))
    found = _in_a_run(lambda: backend.glob("**/*.py", f"{root}/tree"))
    read = _in_a_run(lambda: backend.read(f"{root}/big.txt"))
    assert listed.error is None, listed.error
    assert len(listed.entries) == 20_000
    assert (found.error, found.truncated, len(found.matches)) == (None, False, 4000)
    assert read.error is None, read.error
    local = tmp_path / "big.txt"
    local.write_text(("x" * 3000 + "\n") * 2000)
    printed = _printed(_build_read_cmd(str(local), 0, 2000))
    assert read.file_data == _parse_read_output(printed, str(local)).file_data


def test_c12_deep_agents_uploads_and_downloads_whole_files_and_says_what_is_missing(
    server: LocalE2B,
) -> None:
    """Deep Agents' ``upload_files`` and ``download_files`` on a real bash:
    bytes go in and come back exactly (a file bigger than the 4 kB budget
    too, read back by cursor), and a directory, a missing file or a
    relative path are answered as the protocol names them, never as a
    permission problem or a partial file."""
    from tests.test_adapter_deepagents import _in_a_run

    tools = _toolset(server, max_output_bytes=4000)
    root = f"/home/user/files-{uuid.uuid4().hex[:6]}"
    made = tools.call_sync(
        "run_command", {"command": f"mkdir -p {root}/dir"}, call_id="mk", operation_key=f"{root}:mk"
    )
    assert made.exit_code == 0, made.to_json()
    backend = SandrailSandbox(tools)
    small, big = bytes(range(256)), bytes(range(256)) * 64  # 16 KiB: over the budget
    uploaded = _in_a_run(
        lambda: backend.upload_files(
            [
                (f"{root}/small.bin", small),
                (f"{root}/big.bin", big),
                (f"{root}/dir", b"x"),
                ("rel", b"x"),
            ]
        )
    )
    assert [u.error for u in uploaded] == [None, None, "is_directory", "invalid_path"]
    got = _in_a_run(
        lambda: backend.download_files(
            [f"{root}/small.bin", f"{root}/big.bin", f"{root}/dir", f"{root}/none", "rel"]
        )
    )
    assert [(g.content, g.error) for g in got] == [
        (small, None),
        (big, None),
        (None, "is_directory"),
        (None, "file_not_found"),
        (None, "invalid_path"),
    ]
