"""The Anthropic Messages adapter, with the ``anthropic`` SDK's own client on
an offline mock transport."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2 as httpx
import pytest

from sandrail.adapters.anthropic import AnthropicTools
from tests.embed_rig import (
    RealTimeWaits,
    assert_aborted_then_reconciled,
    assert_each_call_its_own,
    launches,
    toolset,
)

NULLS = {"cwd": None, "timeout": None, "env": None, "background": None}


class ScriptedAPI:
    """The Messages API as an httpx mock transport: answers each request with
    the next scripted reply, and keeps every request body it was sent."""

    def __init__(self, replies: list[list[dict[str, Any]]]) -> None:
        self._replies: Iterator[list[dict[str, Any]]] = iter(replies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        content = next(self._replies, [{"type": "text", "text": "done"}])
        stop = "tool_use" if any(block["type"] == "tool_use" for block in content) else "end_turn"
        body = {
            "id": f"msg_{len(self.requests)}",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        return httpx.Response(200, json=body)

    def client(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            api_key="offline", http_client=httpx.Client(transport=httpx.MockTransport(self))
        )


def _use(tool_use_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id, "name": name, "input": arguments}


def _loop(api: ScriptedAPI, tools: AnthropicTools) -> list[dict[str, Any]]:
    """A harness's tool loop, as the Messages API docs write it."""
    client = api.client()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    results: list[dict[str, Any]] = []
    while True:
        reply = client.messages.create(
            model="claude-test", max_tokens=100, messages=messages, tools=tools.definitions
        )
        if reply.stop_reason != "tool_use":
            return results
        answered = [tools.handle_sync(block) for block in reply.content if block.type == "tool_use"]
        results += answered
        messages += [
            {"role": "assistant", "content": [block.model_dump() for block in reply.content]},
            {"role": "user", "content": answered},
        ]


def test_anthropic_tools_list_strict_schemas_the_sdk_sends_as_given() -> None:
    tools = toolset()
    adapter = AnthropicTools(tools)
    api = ScriptedAPI([])
    _loop(api, adapter)
    sent = api.requests[0]["tools"]
    assert sent == adapter.definitions
    assert [tool["name"] for tool in sent] == list(tools.names)
    assert all(tool["strict"] is True for tool in sent)
    assert sent[1]["input_schema"] == tools.schema("run_command", "anthropic-strict")
    assert "strict" not in AnthropicTools(tools, strict=False).definitions[0]


def test_c12_anthropic_tool_result_is_exactly_to_json() -> None:
    tools = toolset(max_output_bytes=1500)
    api = ScriptedAPI(
        [
            [_use("toolu_1", "run_command", {**NULLS, "command": "echo héllo"})],
            [_use("toolu_2", "run_command", {**NULLS, "command": "seq 9000"})],
        ]
    )
    small, big = _loop(api, AnthropicTools(tools))
    assert api.requests[1]["messages"][-1]["content"][0] == small
    assert small["tool_use_id"] == "toolu_1"
    assert small["is_error"] is False
    assert json.loads(small["content"])["stdout"] == "héllo\n"
    assert len(big["content"].encode("utf-8")) <= 1500


def test_c2_anthropic_replayed_tool_use_deduplicates_within_a_run_only() -> None:
    tools = toolset()
    script = [[_use("toolu_1", "run_command", {**NULLS, "command": "echo x"})]]
    (first,) = _loop(ScriptedAPI(list(script)), AnthropicTools(tools, run_id="run-1"))
    (again,) = _loop(ScriptedAPI(list(script)), AnthropicTools(tools, run_id="run-1"))
    (other,) = _loop(ScriptedAPI(list(script)), AnthropicTools(tools, run_id="run-2"))
    flags = [json.loads(block["content"])["deduplicated"] for block in (first, again, other)]
    assert flags == [False, True, False]
    assert launches(tools) == 2


def test_anthropic_background_run_and_its_read() -> None:
    tools = toolset()
    adapter = AnthropicTools(tools)
    (started,) = _loop(
        ScriptedAPI(
            [[_use("toolu_1", "run_command", {**NULLS, "command": "echo bg", "background": True})]]
        ),
        adapter,
    )
    task_id = json.loads(started["content"])["task_id"]
    read_arguments = {
        "task_id": task_id,
        "stdout_cursor": None,
        "stderr_cursor": None,
        "max_bytes": None,
        "wait_seconds": 5,
    }
    (read,) = _loop(
        ScriptedAPI([[_use("toolu_2", "read_command_output", read_arguments)]]), adapter
    )
    assert json.loads(read["content"])["stdout"] == "bg\n"


def test_c5_anthropic_refused_calls_are_errors_that_ran_nothing() -> None:
    """Anthropic's strict mode does not enforce bounds, so the handler does."""
    tools = toolset()
    api = ScriptedAPI(
        [
            [
                _use("toolu_1", "run_command", {**NULLS, "command": "x", "timeout": 0}),
                _use("toolu_2", "read_command_output", {"task_id": "f" * 64}),
                _use("toolu_3", "nope", {}),
            ]
        ]
    )
    bounds, not_owned, unknown = _loop(api, AnthropicTools(tools))
    assert all(block["is_error"] is True for block in (bounds, not_owned, unknown))
    assert json.loads(bounds["content"])["problems"] == [
        {"field": "arguments.timeout", "reason": "must be an integer from 1 to 86400"}
    ]
    assert json.loads(not_owned["content"])["error_type"] == "e2b_command_not_owned"
    assert json.loads(unknown["content"])["error_type"] == "e2b_command_tool_unbound"
    assert launches(tools) == 0


def test_c11_anthropic_handler_cancelled_aborts_and_the_retry_reconciles() -> None:
    backend = RealTimeWaits()
    tools = toolset(backend)
    adapter = AnthropicTools(tools, run_id="run-c")
    block = _use("toolu_1", "run_command", {**NULLS, "command": "sleep 2"})

    async def timed() -> None:
        await asyncio.wait_for(adapter.handle(block), timeout=0.5)

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(timed())

    def retry() -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(asyncio.run(adapter.handle(block))["content"])
        return parsed

    assert_aborted_then_reconciled(tools, "run-c:toolu_1", retry)


class _Unreadable:
    """A block whose fields raise when read (a broken SDK object, say)."""

    type = "tool_use"

    @property
    def id(self) -> str:
        raise RuntimeError("no id today")

    name = "run_command"
    input = None


class _NoType:
    @property
    def type(self) -> str:
        raise RuntimeError("no type today")


def test_c5_anthropic_handlers_never_raise_for_any_block() -> None:
    """A block that cannot be read, an integer too long to print: each is
    a refusal that ran nothing, from every handler."""
    tools = toolset()
    claude = AnthropicTools(tools, run_id="run-1")
    huge = _use("toolu_1", "run_command", {**NULLS, "command": "x", "timeout": 10**5000})
    for block in (_Unreadable(), huge, {"type": "tool_use"}, object()):
        for answer in (claude.handle_sync(block), asyncio.run(claude.handle(block))):
            assert answer["is_error"] is True
            assert json.loads(answer["content"])["executed"] is False
    answered = asyncio.run(claude.handle_all([_NoType(), huge, {"type": "text"}]))
    assert [block["tool_use_id"] for block in answered] == ["toolu_1"]
    assert launches(tools) == 0


def test_anthropic_handle_all_names_plain_misuse_of_its_argument() -> None:
    claude = AnthropicTools(toolset(), run_id="run-1")
    for wrong in (None, 7, "tool_use", {"content": []}):
        with pytest.raises(TypeError, match="handle_all takes a reply's content"):
            asyncio.run(claude.handle_all(wrong))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="handle_all_sync takes a reply's content"):
            claude.handle_all_sync(wrong)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="run_id"):
        AnthropicTools(toolset(), run_id=" ")


def test_c11_anthropic_timeout_sends_the_uncertain_result_and_the_retry_reconciles() -> None:
    tools = toolset(RealTimeWaits())
    claude = AnthropicTools(tools, run_id="run-1", timeout_seconds=0.3)
    call = {**NULLS, "command": "sleep 2"}
    first = json.loads(asyncio.run(claude.handle(_use("toolu_1", "run_command", call)))["content"])
    assert first["error_type"] == "e2b_command_aborted"
    retry = json.loads(asyncio.run(claude.handle(_use("toolu_2", "run_command", call)))["content"])
    assert retry["task_id"] == first["task_id"]
    assert launches(tools) == 1


def test_c2_anthropic_repeats_reconcile_across_runs() -> None:
    """Run 1's call is left uncertain; run 2's identical call (another
    tool_use id, another run id) is the model repeating it as told: it
    reconciles run 1's call."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Simulator

    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    tools = toolset(sim)
    arguments = {**NULLS, "command": "date"}
    first = AnthropicTools(tools, run_id="run-1").handle_sync(
        _use("toolu_A", "run_command", arguments)
    )
    assert json.loads(first["content"])["ok"] is False
    later = json.loads(
        AnthropicTools(tools, run_id="run-2").handle_sync(
            _use("toolu_B", "run_command", arguments)
        )["content"]
    )
    assert later["operation_key"] == "run-1:toolu_A"
    assert later["deduplicated"] is True
    assert launches(tools) == 1


class _InputThatRaises(dict[str, Any]):
    def get(self, *args: Any) -> Any:
        raise RuntimeError("get")

    def items(self) -> Any:
        raise RuntimeError("items")

    def keys(self) -> Any:
        raise RuntimeError("keys")

    def __iter__(self) -> Any:
        raise RuntimeError("iter")


class _IdThatRaises(str):
    def __str__(self) -> str:
        raise RuntimeError("str")


def test_c5_anthropic_handlers_take_plain_copies_of_hostile_ids_and_inputs() -> None:
    """A block id that is a ``str`` subclass whose methods raise, an input
    whose ``get``/``items``/iteration raise: never a raise from a handler."""
    from sandrail.testing import HostileStr

    tools = toolset()
    claude = AnthropicTools(tools, run_id="run-1")
    arguments = {**NULLS, "command": "echo hi"}
    unreadable = {"type": "tool_use", "id": "t1", "name": "run_command"}
    unreadable["input"] = _InputThatRaises(arguments)
    for answer in (claude.handle_sync(unreadable), asyncio.run(claude.handle(unreadable))):
        assert answer["is_error"] is True
        assert json.loads(answer["content"])["executed"] is False
    assert launches(tools) == 0
    for hostile in (HostileStr("t2"), _IdThatRaises("t3")):
        block = {"type": "tool_use", "id": hostile, "name": "run_command", "input": arguments}
        for answer in (claude.handle_sync(block), asyncio.run(claude.handle(block))):
            assert type(answer["tool_use_id"]) is str
            assert answer["tool_use_id"] == str.__str__(hostile)
            assert json.loads(answer["content"])["ok"] is True


def test_c2_anthropic_handle_all_sync_answers_every_tool_use_in_order() -> None:
    """Without an event loop: every ``tool_use`` block of a reply answered in
    order, other blocks left out, and the reply's blocks again (a replay)
    launch nothing new."""
    tools = toolset()
    claude = AnthropicTools(tools, run_id="run-all")
    content = [
        {"type": "text", "text": "running two"},
        _use("toolu_1", "run_command", {**NULLS, "command": "echo one"}),
        _use("toolu_2", "run_command", {**NULLS, "command": "echo two"}),
    ]
    answered = claude.handle_all_sync(content)
    assert [block["tool_use_id"] for block in answered] == ["toolu_1", "toolu_2"]
    assert [json.loads(block["content"])["stdout"] for block in answered] == ["one\n", "two\n"]
    again = claude.handle_all_sync(content)
    assert [json.loads(block["content"])["deduplicated"] for block in again] == [True, True]
    assert launches(tools) == 2


@pytest.mark.parametrize("backwards", [False, True], ids=["in-order", "backwards"])
@pytest.mark.parametrize("rejected", ["ca", "cb", None])
def test_c2_c8_two_identical_calls_of_one_turn_are_two_decisions(
    rejected: str | None, backwards: bool
) -> None:
    """One reply holds the same ``tool_use`` twice (``ca`` and ``cb``);
    ``handle_all`` asks about each, and the person approves one and rejects
    the other (or approves both), in either order, each answered with the
    reply's ``turn_of``. Each block is its own call: an approved one runs under
    its own key, a rejected one runs nothing, two approvals two launches."""
    from tests.embed_rig import asks_for_rm

    tools = toolset(authorize=asks_for_rm)
    anthropic_tools = AnthropicTools(tools, run_id="run-1")
    content = [
        {
            "type": "tool_use",
            "id": call,
            "name": "run_command",
            "input": {**NULLS, "command": "rm -rf /tmp/x"},
        }
        for call in ("ca", "cb")
    ]
    asked = {
        a["tool_use_id"]: json.loads(a["content"]) for a in anthropic_tools.handle_all_sync(content)
    }
    assert [q["status"] for q in asked.values()] == ["approval_required"] * 2
    turn = anthropic_tools.turn_of(content)
    told = {
        block["id"]: json.loads(
            (
                anthropic_tools.reject(block)
                if block["id"] == rejected
                else anthropic_tools.approve_sync(block, turn=turn)
            )["content"]
        )
        for block in (content[::-1] if backwards else content)
    }
    assert_each_call_its_own(
        told, rejected, {c: tools.operation_key(c, run_id="run-1") for c in ("ca", "cb")}
    )
    assert launches(tools) == (1 if rejected else 2)
