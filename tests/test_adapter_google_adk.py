"""The Google ADK adapter, in LlmAgent runs driven by a scripted ``BaseLlm``, on
the simulator (docs/howto/google-adk.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.runners import InMemoryRunner
from google.adk.tools.base_tool import BaseTool
from hypothesis import HealthCheck, given, settings

import sandrail
from sandrail.adapters import google_adk
from sandrail.core import ErrorCode, canonical_json
from sandrail.testing.strategies import schema_values
from tests.adk_rig import (
    answer,
    confirmation_calls,
    responses_sent,
    run_command,
    scripted,
    text,
)
from tests.embed_rig import ARGUMENT_ERRORS, asks_for_rm, launches, toolset


class _Run:
    """One agent, runner and session; ``send`` runs one invocation."""

    def __init__(self, tools: sandrail.Toolset, turns: list[Any]) -> None:
        self.model = scripted(turns)
        agent = LlmAgent(name="ops", model=self.model, tools=google_adk.tools(tools))
        self.runner = InMemoryRunner(agent=agent, app_name="app")
        self.session = asyncio.run(
            self.runner.session_service.create_session(app_name="app", user_id="u")
        )

    def send(self, message: Any) -> list[Any]:
        async def main() -> list[Any]:
            return [
                event
                async for event in self.runner.run_async(
                    user_id="u", session_id=self.session.id, new_message=message
                )
            ]

        return asyncio.run(main())


def test_adk_tools_declare_the_profiles_schema() -> None:
    tools = toolset()
    made = google_adk.tools(tools)
    assert [tool.name for tool in made] == list(tools.names)
    for tool in made:
        assert isinstance(tool, BaseTool)
        declaration = tool._get_declaration()
        assert declaration.parameters_json_schema == tools.schema(tool.name, "openai-strict")


@pytest.mark.untraced
@pytest.mark.parametrize("name", ["run_command", "read_command_output", "stop_command"])
def test_schema_honesty_what_adk_declares_is_never_refused_as_invalid(name: str) -> None:
    """Every argument valid against the declaration ADK sends the model passes
    every argument check of the port through the tool (the policy denies last)."""
    tools = toolset(authorize=lambda request: sandrail.Deny(reason="checked"))
    tool = next(t for t in google_adk.tools(tools) if t.name == name)
    declared = tool._get_declaration().parameters_json_schema
    calls = {"n": 0}

    class Context:
        session = type("S", (), {"id": "s", "events": []})()
        invocation_id = "inv"
        tool_confirmation = None

        @property
        def function_call_id(self) -> str:
            return f"c{calls['n']}"

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(schema_values(declared))
    def check(arguments: dict[str, Any]) -> None:
        calls["n"] += 1
        content = asyncio.run(tool.run_async(args=arguments, tool_context=Context()))
        assert content.get("error_type") not in ARGUMENT_ERRORS, content
        assert content["error_type"] == ErrorCode.POLICY_DENIED.value, content

    check()


def test_c12_a_call_and_its_result_fed_back_within_the_budget() -> None:
    tools = toolset(max_output_bytes=1500)
    run = _Run(tools, [[run_command("seq 9000", "c1"), run_command("echo héllo", "c2")], "ok"])
    run.send(text("go"))
    big, small = responses_sent(run.model)
    for response in (big, small):
        assert len(canonical_json(response)) <= 1500
    assert big["output_budget"]["truncated"] is True
    assert small["stdout"] == "héllo\n"
    # adk:{session}:{invocation}:{event}:{call id}, of the model event that made the call.
    stored = asyncio.run(
        run.runner.session_service.get_session(
            app_name="app", user_id="u", session_id=run.session.id
        )
    )
    assert stored is not None
    (made,) = [e for e in stored.events if any(c.id == "c2" for c in e.get_function_calls())]
    assert small["operation_key"] == f"adk:{run.session.id}:{made.invocation_id}:{made.id}:c2"
    assert launches(tools) == 2


def test_c2_a_background_run_is_read_by_cursor() -> None:
    tools = toolset()

    def read(request: Any) -> list[dict[str, Any]]:
        (started,) = responses_sent_of(request)
        args = {"task_id": started["task_id"], "stdout_cursor": 2, "stderr_cursor": None}
        args |= {"max_bytes": None, "wait_seconds": 5}
        return [{"name": "read_command_output", "args": args, "id": "c2"}]

    def responses_sent_of(request: Any) -> list[dict[str, Any]]:
        return [
            dict(part.function_response.response)
            for content in request.contents
            for part in content.parts or ()
            if part.function_response is not None
        ]

    run = _Run(tools, [[run_command("seq 3", "c1", background=True)], read, "ok"])
    run.send(text("go"))
    started, read_back = responses_sent(run.model)
    assert "read_command_output" in started["instruction"]
    assert read_back["stdout"] == "2\n3\n"
    assert launches(tools) == 1


def test_c8_confirmation_approved_runs_the_call_once_under_its_key() -> None:
    tools = toolset(authorize=asks_for_rm)
    run = _Run(tools, [[run_command("rm -rf /tmp/x", "c1")], "ok", "ok"])
    events = run.send(text("go"))
    (asked,) = confirmation_calls(events)
    payload = asked.args["toolConfirmation"]["payload"]
    assert payload["action_requests"][0]["args"]["command"] == "rm -rf /tmp/x"
    assert launches(tools) == 0
    run.send(answer(asked, True))
    (result,) = responses_sent(run.model)
    assert result["status"] == "ok"
    assert result["operation_key"] == payload["operation_key"]
    assert launches(tools) == 1
    run.send(answer(asked, True))  # the same answer again (a client's retry)
    assert launches(tools) == 1


def test_c5_confirmation_rejected_runs_nothing_and_the_model_reads_why() -> None:
    tools = toolset(authorize=asks_for_rm)
    run = _Run(tools, [[run_command("rm -rf /tmp/x", "c1")], "ok"])
    (asked,) = confirmation_calls(run.send(text("go")))
    run.send(answer(asked, False))
    (result,) = responses_sent(run.model)
    assert result["error_type"] == ErrorCode.APPROVAL_REJECTED.value
    assert result["executed"] is False
    assert launches(tools) == 0


def test_c2_one_confirmation_answered_from_two_runners_launches_once() -> None:
    """Two harness processes on one session store answering the same
    question: two toolsets on one sandbox, two runners on one session."""
    from sandrail.interpreters.simulator import Simulator

    sim = Simulator()
    first_tools = toolset(sim, authorize=asks_for_rm)
    run = _Run(first_tools, [[run_command("rm -rf /tmp/x", "c1")], "ok", "ok"])
    (asked,) = confirmation_calls(run.send(text("go")))
    other = _Run(toolset(sim, authorize=asks_for_rm), ["ok"])
    other.runner.session_service = run.runner.session_service
    other.session = run.session
    run.send(answer(asked, True))
    other.send(answer(asked, True))
    assert sum(sim.launches.values()) == 1


@pytest.mark.parametrize("second", [True, False], ids=["confirm-confirm", "confirm-reject"])
def test_c2_one_confirmation_answered_from_two_runners_at_once_launches_at_most_once(
    second: bool, tmp_path: Path
) -> None:
    """The same question answered by two harnesses at the same time (two
    toolsets sharing a durable record, two runners on one session store,
    their invocations interleaved on one loop): the command runs once at
    most, whichever answer lands first."""
    from sandrail.interpreters.simulator import Simulator
    from sandrail.records import SQLiteRecord

    sim = Simulator()
    path = tmp_path / "record.sqlite"
    run = _Run(
        toolset(sim, authorize=asks_for_rm, record=SQLiteRecord(path)),
        [[run_command("rm -rf /tmp/x", "c1")], "ok"],
    )
    (asked,) = confirmation_calls(run.send(text("go")))
    other = _Run(toolset(sim, authorize=asks_for_rm, record=SQLiteRecord(path)), ["ok"])
    other.runner.session_service = run.runner.session_service
    other.session = run.session

    async def answering(each: _Run, confirmed: bool) -> list[Any]:
        return [
            event
            async for event in each.runner.run_async(
                user_id="u", session_id=each.session.id, new_message=answer(asked, confirmed)
            )
        ]

    async def both() -> list[Any]:
        return await asyncio.gather(answering(run, True), answering(other, second))

    asyncio.run(both())
    assert sum(sim.launches.values()) <= 1
    if second:
        assert sum(sim.launches.values()) == 1


def test_c8_deny_asks_nobody() -> None:
    tools = toolset(authorize=asks_for_rm)
    run = _Run(tools, [[run_command("shutdown now", "c1")], "ok"])
    events = run.send(text("go"))
    assert confirmation_calls(events) == []
    (result,) = responses_sent(run.model)
    assert result["error_type"] == ErrorCode.POLICY_DENIED.value


def test_c2_a_scripted_models_reused_call_ids_are_new_calls_in_a_new_invocation() -> None:
    tools = toolset()
    run = _Run(
        tools, [[run_command("echo one", "c1")], "ok", [run_command("echo two", "c1")], "ok"]
    )
    run.send(text("go"))
    run.send(text("again"))
    one, two = responses_sent(run.model)
    assert one["stdout"] == "one\n"
    assert two["stdout"] == "two\n"
    assert launches(tools) == 2


@pytest.mark.parametrize("options", [{"timeout_seconds": 0}, {"profile": "nope"}])
def test_bad_adapter_settings_are_refused_at_once(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"timeout|profile"):
        google_adk.tools(toolset(), **options)


def test_c8_a_call_edited_in_the_stored_session_before_the_answer_runs_nothing() -> None:
    """The person is asked about ``rm -rf /tmp/staging``; the stored session
    is changed before the answer, consistently (the model's function call
    and the ``originalFunctionCall`` ADK keeps in its confirmation request),
    so ADK itself sees no mismatch. ``{"confirmed": true}`` runs nothing:
    the model reads ``approval_mismatch``."""
    _edited_before_the_answer(toolset(authorize=asks_for_rm), ids=())


@pytest.mark.parametrize("ids", [("event",), ("invocation",), ("event", "invocation")])
def test_c8_a_call_whose_key_changed_in_the_stored_session_gets_no_approval(
    ids: tuple[str, ...],
) -> None:
    """The same edit, and the model event's id or its invocation id changed
    too, so the call's key is new: the confirmation answers a question about
    another call, and nothing runs (``approval_mismatch``)."""
    _edited_before_the_answer(toolset(authorize=asks_for_rm), ids=ids)


def _edited_before_the_answer(tools: sandrail.Toolset, *, ids: tuple[str, ...]) -> None:
    run = _Run(tools, [[run_command("rm -rf /tmp/staging", "c1")], "ok", "ok"])
    (asked,) = confirmation_calls(run.send(text("go")))
    production = run_command("rm -rf /tmp/PRODUCTION", "c1")["args"]
    stored = run.runner.session_service.sessions["app"]["u"][run.session.id]
    for event in stored.events:
        for part in (event.content.parts if event.content else None) or ():
            call = part.function_call
            if call is not None and call.name == "run_command":
                call.args = dict(production)
                if "event" in ids:
                    event.id = "forged-event"
                if "invocation" in ids:
                    event.invocation_id = "forged-invocation"
            if call is not None and call.name == "adk_request_confirmation":
                call.args["originalFunctionCall"]["args"] = dict(production)
    run.send(answer(asked, True))
    assert launches(tools) == 0
    (result,) = responses_sent(run.model)
    assert (result["error_type"], result["executed"]) == (
        ErrorCode.APPROVAL_MISMATCH.value,
        False,
    )


@pytest.mark.parametrize("second", ["echo one", "echo two"])
def test_c2_a_scripted_models_reused_call_id_is_a_new_call_in_the_next_model_turn(
    second: str,
) -> None:
    """Two model turns of one invocation reuse the function call id ``c1``:
    each turn is an event of its own, so the second call is a new call (it
    runs, same command or another), never a repeat or a conflict of the
    first."""
    tools = toolset()
    run = _Run(tools, [[run_command("echo one", "c1")], [run_command(second, "c1")], "ok"])
    run.send(text("go"))
    one, two = responses_sent(run.model)
    assert (one["status"], two["status"]) == ("ok", "ok")
    assert two["stdout"] == second.removeprefix("echo ") + "\n"
    assert two["deduplicated"] is False
    assert one["operation_key"] != two["operation_key"]
    assert launches(tools) == 2


@pytest.mark.parametrize("edit", ["none", "calls_swapped", "requests_swapped", "arguments_swapped"])
def test_c8_a_confirmation_moved_to_another_calls_request_runs_nothing(edit: str) -> None:
    """Two calls ask for confirmation, staging first, PRODUCTION second; the
    person confirms the first request and rejects the second. The stored
    session is edited before the answer: the two requests'
    ``originalFunctionCall`` swapped (the question stays, the call moves),
    the two requests' whole contents swapped, or the two calls' arguments
    swapped (in the model's event and in the requests alike, the questions
    left as they were), so ADK hands the confirmation to PRODUCTION. In the
    last, the first call now repeats the second exactly, which a repeat of
    an unsettled call would run under the second call's key: the approval
    given to the first call's question covers that call alone. Nothing runs
    after any edit; unedited, staging runs once."""
    tools = toolset(authorize=asks_for_rm)
    turn = [run_command("rm -rf /tmp/staging", "c1"), run_command("rm -rf /tmp/PRODUCTION", "c2")]
    run = _Run(tools, [turn, "ok", "ok"])
    first, second = confirmation_calls(run.send(text("go")))
    assert first.args["originalFunctionCall"]["args"]["command"] == "rm -rf /tmp/staging"
    stored = run.runner.session_service.sessions["app"]["u"][run.session.id]
    (requests,) = [
        calls
        for event in stored.events
        if len(
            calls := [c for c in event.get_function_calls() if c.name == "adk_request_confirmation"]
        )
        == 2
    ]
    one, two = (call.args for call in requests)
    if edit == "calls_swapped":
        one["originalFunctionCall"], two["originalFunctionCall"] = (
            two["originalFunctionCall"],
            one["originalFunctionCall"],
        )
    if edit == "requests_swapped":
        requests[0].args, requests[1].args = two, one
    if edit == "arguments_swapped":
        made = [
            e for e in stored.events if any(c.name == "run_command" for c in e.get_function_calls())
        ]
        calls = made[0].get_function_calls()
        calls[0].args, calls[1].args = calls[1].args, calls[0].args
        one["originalFunctionCall"]["args"], two["originalFunctionCall"]["args"] = (
            two["originalFunctionCall"]["args"],
            one["originalFunctionCall"]["args"],
        )
    run.send(answer(first, True))
    run.send(answer(second, False))
    ran = [r.get("command") for r in responses_sent(run.model) if r.get("status") == "ok"]
    assert ran == ([] if edit != "none" else ["rm -rf /tmp/staging"])
    assert launches(tools) == (0 if edit != "none" else 1)


def _answers(*pairs: tuple[Any, bool]) -> Any:
    """One user message answering several confirmation requests."""
    from google.genai import types

    return types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    name="adk_request_confirmation", id=asked.id, response={"confirmed": ok}
                )
            )
            for asked, ok in pairs
        ],
    )


def _events_results(events: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """The ``run_command`` responses among ``events``, by function call id
    (the last one of an id)."""
    return {
        response.id: dict(response.response or {})
        for event in events
        for response in event.get_function_responses()
        if response.name == "run_command"
    }


@pytest.mark.parametrize("together", [True, False], ids=["one-message", "two-messages"])
@pytest.mark.parametrize("rejected", ["ca", "cb"])
def test_c2_c8_two_identical_calls_of_one_turn_are_two_decisions(
    rejected: str, together: bool
) -> None:
    """One model response makes the same call twice (``ca`` and ``cb``);
    the person confirms one and rejects the other, in one message or in
    two. Each function call is its own call: the confirmed one runs once
    under its own key, the rejected one runs nothing and says so under its
    own key, never "ok" or the other call's task."""
    confirmed = "cb" if rejected == "ca" else "ca"
    tools = toolset(authorize=asks_for_rm)
    twice = [run_command("rm -rf /tmp/x", "ca"), run_command("rm -rf /tmp/x", "cb")]
    run = _Run(tools, [twice, "ok", "ok"])
    asked = {
        q.args["originalFunctionCall"]["id"]: q for q in confirmation_calls(run.send(text("go")))
    }
    keys = {
        call: q.args["toolConfirmation"]["payload"]["operation_key"] for call, q in asked.items()
    }
    assert keys["ca"] != keys["cb"]
    if together:
        told = _events_results(
            run.send(_answers((asked[confirmed], True), (asked[rejected], False)))
        )
    else:
        told = _events_results(run.send(_answers((asked[confirmed], True))))
        told |= _events_results(run.send(_answers((asked[rejected], False))))
    assert (told[confirmed]["status"], told[confirmed]["operation_key"]) == (
        "ok",
        keys[confirmed],
    )
    assert (told[rejected]["status"], told[rejected]["error_type"]) == (
        "error",
        ErrorCode.APPROVAL_REJECTED.value,
    )
    assert told[rejected]["executed"] is False
    assert told[rejected]["operation_key"] == keys[rejected]
    assert launches(tools) == 1


def test_c2_two_identical_calls_of_one_turn_both_confirmed_launch_twice() -> None:
    """Both identical calls of one model response confirmed: two calls, two
    launches, each under its own key (as when the policy allows both)."""
    tools = toolset(authorize=asks_for_rm)
    twice = [run_command("rm -rf /tmp/x", "ca"), run_command("rm -rf /tmp/x", "cb")]
    run = _Run(tools, [twice, "ok"])
    asked = confirmation_calls(run.send(text("go")))
    told = _events_results(run.send(_answers(*((q, True) for q in asked))))
    assert {call: (r["status"], r["deduplicated"]) for call, r in told.items()} == {
        "ca": ("ok", False),
        "cb": ("ok", False),
    }
    assert told["ca"]["operation_key"] != told["cb"]["operation_key"]
    assert launches(tools) == 2


def test_c8_a_rejected_call_made_again_in_a_later_turn_is_asked_about_again() -> None:
    """``c1`` is rejected; in a later model turn the model makes the same
    call as ``c2``. Nothing ran under ``c1``, so ``c2`` is a new call and a
    new question: the person is asked, and ``c2`` runs once confirmed."""
    tools = toolset(authorize=asks_for_rm)
    run = _Run(
        tools,
        [[run_command("rm -rf /tmp/x", "c1")], "ok", [run_command("rm -rf /tmp/x", "c2")], "ok"],
    )
    (first,) = confirmation_calls(run.send(text("go")))
    told = _events_results(run.send(answer(first, False)))
    assert told["c1"]["error_type"] == ErrorCode.APPROVAL_REJECTED.value
    (second,) = confirmation_calls(run.send(text("please, after all")))
    assert second.args["originalFunctionCall"]["id"] == "c2"
    assert launches(tools) == 0
    told = _events_results(run.send(answer(second, True)))
    assert (told["c2"]["status"], told["c2"]["operation_key"].endswith(":c2")) == ("ok", True)
    assert launches(tools) == 1


@pytest.mark.parametrize("first", ["earlier", "repeat"])
def test_c2_c8_a_repeat_of_a_call_awaiting_confirmation_is_that_call_whichever_is_confirmed_first(
    first: str,
) -> None:
    """``c1`` waits for its confirmation; the user writes again instead, and
    in a later model turn the model makes the same call as ``c2``, which is
    asked about too. A repeat of the unanswered ``c1`` is ``c1``: whichever
    question the person confirms first runs the command once, and the other
    confirmation reads that run (``deduplicated``), never a refusal of an
    approval the person gave to exactly what they were shown. After the
    first run the scripted model makes ``c2`` again, reusing the id in a
    new turn: that is a new call and a new question, and the confirmation
    of the earlier ``c2`` still goes to the call it asked about."""
    tools = toolset(authorize=asks_for_rm)
    rm = "rm -rf /tmp/x"
    turns = [[run_command(rm, "c1")], [run_command(rm, "c2")], [run_command(rm, "c2")], "ok", "ok"]
    run = _Run(tools, turns)
    (q1,) = confirmation_calls(run.send(text("go")))
    (q2,) = confirmation_calls(run.send(text("do it anyway")))
    assert q2.args["originalFunctionCall"]["id"] == "c2"
    told = []
    for question in [q1, q2] if first == "earlier" else [q2, q1]:
        # The answered call's response comes first; the model's new c2 follows.
        told.append(_events_results(reversed(run.send(answer(question, True)))))
    confirmed = ["c1", "c2"] if first == "earlier" else ["c2", "c1"]
    ran, read = told[0][confirmed[0]], told[1][confirmed[1]]
    assert (ran["status"], ran["deduplicated"]) == ("ok", False)
    assert (read["status"], read["deduplicated"]) == ("ok", True)
    assert ran["operation_key"] == read["operation_key"]
    assert ran["operation_key"].endswith(":c1")
    assert launches(tools) == 1


def test_c2_c8_a_reused_id_with_other_arguments_runs_only_on_its_own_answer() -> None:
    """``c1`` (``rm -f /tmp/first``) waits for its confirmation; a later
    turn reuses ``c1`` for another command, which is asked about too. ADK
    checks an answer against the latest call of its id, so it refuses the
    earlier question's answer itself (``ValueError``): nothing runs. The
    later call's own confirmation runs it once (the how-to says both)."""
    tools = toolset(authorize=asks_for_rm)
    turns = [[run_command("rm -f /tmp/first", "c1")], [run_command("rm -f /tmp/second", "c1")]]
    run = _Run(tools, [*turns, "ok"])
    (q1,) = confirmation_calls(run.send(text("go")))
    (q2,) = confirmation_calls(run.send(text("again")))
    with pytest.raises(ValueError, match="mismatch"):
        run.send(answer(q1, True))
    assert launches(tools) == 0
    told = _events_results(run.send(answer(q2, True)))
    assert (told["c1"]["status"], told["c1"]["deduplicated"]) == ("ok", False)
    assert launches(tools) == 1
