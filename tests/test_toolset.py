"""The Toolset: one call for every tool, the operation-key rule,
cancellation that behaves as an abort, and results as the model is sent them."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandrail
from sandrail.core import TOOLS, ToolSet, canonical_json
from sandrail.interpreters.simulator import Script, Simulator
from sandrail.testing import native_identity
from tests.embed_rig import RealTimeWaits, launches, toolset


def test_the_toolset_offers_both_tool_sets_with_plain_schemas() -> None:
    tools = toolset()
    assert tools.names == tuple(
        name for name, record in TOOLS.items() if record.tool_set is not ToolSet.NATIVE_CODE
    )
    schema = tools.schema("run_command")
    assert type(schema) is dict
    assert json.loads(json.dumps(schema)) == schema
    assert schema == tools.definition("run_command").to_dict()["parameters"]
    with pytest.raises(KeyError, match="no tool named 'rm'"):
        tools.definition("rm")


def test_operation_keys_are_run_id_then_call_id() -> None:
    tools = toolset(run_id="run-1")
    assert tools.operation_key("call-9") == "run-1:call-9"
    assert tools.operation_key("call-9", run_id="run-2") == "run-2:call-9"
    assert toolset().run_id != toolset().run_id  # a fresh run id by default
    with pytest.raises(ValueError, match="call_id"):
        tools.operation_key(" ")


def test_construction_refuses_toolsets_that_could_not_work() -> None:
    with pytest.raises(TypeError, match="native owner needs identity"):
        sandrail.Toolset(
            backend=Simulator(),
            session_id="s",
            owner=sandrail.NativeOwner(scope={"t": 1}),
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
        )
    with pytest.raises(ValueError, match="tools must name"):
        toolset(tools=("shell",))
    with pytest.raises(ValueError, match="run_id"):
        toolset(run_id="")


def test_a_native_owner_states_its_current_identity_on_every_call() -> None:
    scope = {"tenant": "t"}
    fences = iter([1, 2])

    def identity() -> sandrail.NativeIdentity:
        return native_identity(fence=next(fences), scope=scope)

    tools = sandrail.Toolset(
        backend=Simulator(),
        session_id="s",
        owner=sandrail.NativeOwner(scope=scope),
        identity=identity,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        tools=("code",),
    )
    assert tools.names == ("run_code",)
    first = tools.call_sync("run_code", {"code": "print(1)"}, call_id="a", operation_key="k1")
    second = tools.call_sync("run_code", {"code": "print(1)"}, call_id="b", operation_key="k2")
    assert (first.content["execution_fence"], second.content["execution_fence"]) == (1, 2)


def test_c5_calls_the_port_cannot_take_are_refused_as_results() -> None:
    tools = toolset()
    unknown = tools.call_sync("rm", {}, call_id="c", operation_key="k")
    assert unknown.error_type == "e2b_command_tool_unbound"
    assert unknown.content["available_tools"] == list(tools.names)
    not_an_object = tools.call_sync("run_command", ["echo"], call_id="c", operation_key="k")
    assert not_an_object.content["problems"] == [
        {"field": "arguments", "reason": "must be a JSON object"}
    ]
    strict = tools.call_sync(
        "run_command", "echo", call_id="c", operation_key="k", profile="openai-strict"
    )
    assert strict.error_type == "e2b_command_arguments_invalid"
    assert launches(tools) == 0


@given(st.text(max_size=300), st.integers(min_value=256, max_value=2_000))
def test_c12_to_json_is_the_canonical_text_within_the_budget(text: str, budget: int) -> None:
    sim = Simulator(scripts={"talk": Script.prints(text * 20)})
    tools = toolset(sim, max_output_bytes=max(budget, 1_200))
    result = tools.call_sync("run_command", {"command": "talk"}, call_id="c", operation_key="k")
    sent = result.to_json()
    assert sent.encode("utf-8") == canonical_json(result.content)
    assert len(sent.encode("utf-8")) <= tools.max_output_bytes
    assert result.is_error is (result.status != "ok")


def test_c11_a_cancelled_await_before_dispatch_runs_nothing() -> None:
    gate: asyncio.Event

    async def policy(request: object) -> sandrail.Allow:
        await gate.wait()
        return sandrail.ALLOW

    tools = toolset(RealTimeWaits(), authorize=policy)

    async def main() -> None:
        nonlocal gate
        gate = asyncio.Event()
        await asyncio.wait_for(
            tools.call("run_command", {"command": "echo x"}, call_id="c", operation_key="k"),
            timeout=0.1,
        )

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(main())
    assert tools.abandoned["k"].error_type == "canceled"
    assert tools.abandoned["k"].content["executed"] is False
    assert launches(tools) == 0


def test_c11_a_cancelled_await_after_launch_is_uncertain_and_the_retry_reconciles() -> None:
    backend = RealTimeWaits()
    tools = toolset(backend)

    async def cancel_while_running() -> None:
        call = asyncio.ensure_future(
            tools.call("run_command", {"command": "sleep 1"}, call_id="c", operation_key="k")
        )
        await backend.waiting.wait()  # launched: the command runs
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(cancel_while_running())
    lost = tools.abandoned["k"]
    assert lost.status == "uncertain"
    assert lost.content["operation_key"] == "k"
    assert lost.content["task_id"]
    retry = asyncio.run(
        tools.call("run_command", {"command": "sleep 1"}, call_id="c2", operation_key="k")
    )
    assert retry.status == "ok"
    assert retry.content["deduplicated"] is True
    assert launches(tools) == 1


def test_c11_the_harness_abort_signal_reaches_the_call() -> None:
    backend = RealTimeWaits()
    tools = toolset(backend)
    token = sandrail.CancelToken()

    async def main() -> sandrail.ToolResult:
        call = asyncio.ensure_future(
            tools.call(
                "run_command", {"command": "sleep 1"}, call_id="c", operation_key="k", cancel=token
            )
        )
        await backend.waiting.wait()  # launched: the command runs
        token.cancel()
        return await call

    result = asyncio.run(main())
    assert result.status == "uncertain"
    assert result.error_type == "e2b_command_aborted"


def test_c11_an_abort_signal_without_callbacks_is_read_at_every_check() -> None:
    class Flag:
        cancelled = True

    tools = toolset()
    result = tools.call_sync(
        "run_command", {"command": "echo x"}, call_id="c", operation_key="k", cancel=Flag()
    )
    assert result.error_type == "canceled"
    assert launches(tools) == 0


def test_abandoned_results_are_bounded() -> None:
    held = asyncio.Event()  # set: the policy holds the call until cancelled

    def policy(request: object) -> Any:
        if not held.is_set():
            return sandrail.ALLOW

        async def forever() -> sandrail.Allow:
            await asyncio.Event().wait()
            return sandrail.ALLOW

        return forever()

    tools = toolset(authorize=policy)
    for index in range(1030):
        tools._abandoned[str(index)] = tools.call_sync(
            "sandbox_status", {}, call_id="c", operation_key="k"
        )
    held.set()
    asyncio.run(_abandon(tools))
    assert len(tools.abandoned) == 1024
    assert "0" not in tools.abandoned


async def _abandon(tools: Any) -> None:
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(
            tools.call("sandbox_status", {}, call_id="c", operation_key="last"), 0.05
        )


def test_c12_refusals_fit_the_smallest_budget() -> None:
    smallest = toolset().minimum_output_bytes()
    tools = toolset(max_output_bytes=smallest)
    many_bad = [{"name": f"LD_{index}", "value": "x"} for index in range(50)]
    refused = tools.call_sync(
        "run_command",
        {"command": "x", "env": many_bad},
        call_id="c",
        operation_key="k",
        profile="anthropic-strict",
    )
    unknown = tools.call_sync("no_such_tool", {}, call_id="c", operation_key="k")
    for result in (refused, unknown):
        assert result.status == "error"
        assert len(result.to_json().encode("utf-8")) <= smallest


def test_c3_an_empty_env_in_any_profile_is_the_same_launch_as_none() -> None:
    tools = toolset()
    first = tools.call_sync(
        "run_command",
        {"command": "echo x", "env": []},
        call_id="c1",
        operation_key="k",
        profile="openai-strict",
    )
    for retry in (
        {"command": "echo x"},
        {"command": "echo x", "env": {}},
        {"command": "echo x", "env": None},
    ):
        again = tools.call_sync("run_command", retry, call_id="c2", operation_key="k")
        assert again.content["deduplicated"] is True, again.to_json()
    assert first.status == "ok"
    assert launches(tools) == 1


@pytest.mark.parametrize(
    ("module", "extra", "build"),
    [
        ("mcp.server.lowlevel", "mcp", "sandrail.adapters.mcp:server"),
        ("agents", "openai-agents", "sandrail.adapters.openai_agents:function_tools"),
        ("pydantic_ai", "pydantic-ai", "sandrail.adapters.pydantic_ai:toolset"),
        ("langchain_core", "langchain", "sandrail.adapters.langchain:tools"),
        ("langgraph", "langchain", "sandrail.adapters.langchain:tools"),
        ("deepagents", "deepagents", "sandrail.adapters.deepagents:SandrailSandbox"),
        ("google.adk", "google-adk", "sandrail.adapters.google_adk:tools"),
    ],
)
def test_an_adapter_without_its_framework_names_the_extra(
    module: str, extra: str, build: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    monkeypatch.setitem(sys.modules, module, None)  # importing it now fails
    where, name = build.split(":")
    adapter = getattr(importlib.import_module(where), name)
    with pytest.raises(ImportError, match=rf"pip install 'sandrail\[{extra}\]'"):
        adapter(toolset())


def test_c5_an_identity_function_that_fails_runs_nothing() -> None:
    def broken() -> sandrail.NativeIdentity:
        raise RuntimeError("lease store down")

    tools = sandrail.Toolset(
        backend=Simulator(),
        session_id="s",
        owner=sandrail.NativeOwner(scope={"t": 1}),
        identity=broken,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    result = tools.call_sync("run_command", {"command": "echo x"}, call_id="c", operation_key="k")
    assert result.error_type == "e2b_command_harness_callback_failed"
    assert result.content["executed"] is False
    assert launches(tools) == 0


def test_c2_c3_the_command_and_code_ports_share_one_ownership_record() -> None:
    """Both ports derive the same task id from one operation key; a start the
    command port may have sent binds the key, so the code port's call under
    it is a conflict that runs nothing, even with the ledger wiped."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan

    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    tools = toolset(sim)
    first = tools.call_sync(
        "run_command", {"command": "echo once"}, call_id="c1", operation_key="k"
    )
    assert first.status == "uncertain"
    sim.wipe_ledger("sbx-1")
    second = tools.call_sync(
        "sandbox_run_code", {"code": "print(1)"}, call_id="c2", operation_key="k"
    )
    assert second.status == "error", second.content
    assert second.content["error_type"] == "e2b_command_operation_conflict"
    again = tools.call_sync(
        "run_command", {"command": "echo once"}, call_id="c3", operation_key="k"
    )
    assert again.status == "uncertain", again.content  # its claim went with the ledger
    assert sum(sim.launches.values()) == 1


def test_c17_a_toolset_masks_what_it_is_told_to_redact() -> None:
    sim = Simulator(scripts={"leak": Script.prints("token tok-1234567890\n")})
    tools = toolset(sim, redact=["tok-1234567890"])
    result = tools.call_sync("run_command", {"command": "leak"}, call_id="c1", operation_key="k")
    assert result.content["stdout"] == f"token {sandrail.core.REDACTED}\n"


def test_c17_an_env_value_of_the_command_port_is_masked_in_the_code_ports_output() -> None:
    """``run_command`` with ``env`` wrote the value
    to a file; ``sandbox_run_code`` of the same toolset printed the file in
    clear (each port masked only what it had passed). The ports of a session
    (here the toolset's two) share what they mask."""
    secret = "pw-0123456789abcdef"
    task = sandrail.task_id("embed-session", sandrail.AgentOwner(agent_id="embed-agent"), "k2")
    sim = Simulator(scripts={f"python /tmp/sandrail/code/{task}.py": Script.prints(secret + "\n")})
    tools = toolset(sim)
    wrote = tools.call_sync(
        "run_command",
        {"command": "echo $PW > /tmp/pw", "env": {"PW": secret}},
        call_id="c1",
        operation_key="k1",
    )
    assert wrote.status == "ok", wrote.content
    shown = tools.call_sync(
        "sandbox_run_code",
        {"code": "print(open('/tmp/pw').read())"},
        call_id="c2",
        operation_key="k2",
    )
    assert shown.status == "ok", shown.content
    assert secret not in shown.to_json()
    assert shown.content["stdout"] == f"{sandrail.core.REDACTED}\n"


def test_c14_a_toolset_whose_budget_cannot_hold_the_identity_is_refused_at_once() -> None:
    """Every result carries the call's full identity (C13, C14): a budget
    below it would refuse every call, so the toolset refuses to be built,
    naming the minimum; at the minimum, calls are admitted."""
    smallest = toolset().minimum_output_bytes()
    assert smallest > 256
    for budget in (256, smallest - 1):
        with pytest.raises(ValueError, match=rf"too small.*at least {smallest}"):
            toolset(max_output_bytes=budget)
    tools = toolset(max_output_bytes=smallest)
    for name in tools.names:
        result = tools.call_sync(name, {}, call_id="c", operation_key="k")
        assert result.error_type != "e2b_command_budget_below_minimum_identity", name
    ran = tools.call_sync("run_command", {"command": "echo x"}, call_id="c", operation_key="k")
    assert ran.status == "ok"
    longer = tools.minimum_output_bytes(call_id="c" * 11, operation_key="k" * 11)
    assert longer == smallest + 20


def test_c14_a_native_identity_function_is_measured_at_its_shortest() -> None:
    scope = {"tenant": "t"}

    def identity() -> sandrail.NativeIdentity:
        return native_identity(scope=scope)

    common: dict[str, Any] = {
        "backend": Simulator(),
        "session_id": "s",
        "owner": sandrail.NativeOwner(scope=scope),
        "identity": identity,
        "authorize": lambda request: sandrail.ALLOW,
        "assert_authority": lambda request: True,
    }
    with pytest.raises(ValueError, match="too small"):
        sandrail.Toolset(max_output_bytes=256, **common)
    smallest = sandrail.Toolset(**common).minimum_output_bytes()
    tools = sandrail.Toolset(max_output_bytes=smallest, **common)
    ran = tools.call_sync("run_command", {"command": "echo x"}, call_id="c", operation_key="k")
    assert ran.status == "ok", ran.to_json()


def test_c5_call_sync_with_an_async_function_backend_in_a_running_loop_runs_nothing() -> None:
    """An ``async def`` backend (no ``asynchronous`` flag): inside a running
    loop nothing can be awaited, so nothing is sent and the result says so,
    never ``uncertain`` (which would tell the model "do not run this
    again" for a call that never left); outside a loop it runs."""
    import gc
    import warnings

    sim = Simulator()

    async def backend(effect: Any) -> Any:
        return sim(effect)

    tools = toolset(backend)

    async def inside() -> sandrail.ToolResult:
        return tools.call_sync("run_command", {"command": "echo x"}, call_id="c", operation_key="k")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" fails the test
        refused = asyncio.run(inside())
        gc.collect()
    assert refused.status == "error"
    assert refused.error_type == "e2b_command_sync_contract_invalid"
    assert refused.content["executed"] is False
    assert sum(sim.launches.values()) == 0
    ran = tools.call_sync("run_command", {"command": "echo x"}, call_id="c", operation_key="k2")
    assert ran.status == "ok", ran.to_json()
    assert sum(sim.launches.values()) == 1


def test_c11_a_deadline_after_launch_returns_the_uncertain_result() -> None:
    """``timeout_seconds`` aborts the call as a CancelToken does and returns
    its result (with the locator) instead of raising; the retry with the
    same key reconciles (C2, C11)."""
    backend = RealTimeWaits()
    tools = toolset(backend)
    timed = asyncio.run(
        tools.call(
            "run_command",
            {"command": "sleep 2"},
            call_id="c",
            operation_key="k",
            timeout_seconds=0.3,
        )
    )
    assert timed.status == "uncertain"
    assert timed.error_type == "e2b_command_aborted"
    assert timed.content["task_id"]
    assert tools.abandoned == {}
    again = tools.call_sync("run_command", {"command": "sleep 2"}, call_id="c2", operation_key="k")
    assert again.content["deduplicated"] is True
    assert launches(tools) == 1


def test_c11_a_deadline_before_dispatch_runs_nothing() -> None:
    gate: asyncio.Event

    async def policy(request: object) -> sandrail.Allow:
        await gate.wait()
        return sandrail.ALLOW

    tools = toolset(RealTimeWaits(), authorize=policy)

    async def main() -> sandrail.ToolResult:
        nonlocal gate
        gate = asyncio.Event()
        return await tools.call(
            "run_command",
            {"command": "echo x"},
            call_id="c",
            operation_key="k",
            timeout_seconds=0.1,
        )

    result = asyncio.run(main())
    assert result.error_type == "canceled"
    assert result.content["executed"] is False
    assert launches(tools) == 0


def test_c11_a_deadline_in_call_sync_is_seen_by_the_port() -> None:
    tools = toolset(RealTimeWaits())
    result = tools.call_sync(
        "run_command", {"command": "sleep 2"}, call_id="c", operation_key="k", timeout_seconds=0.3
    )
    assert result.error_type == "e2b_command_aborted"


def test_timeouts_that_are_not_positive_numbers_are_harness_bugs() -> None:
    tools = toolset()
    for bad in (0, -1, float("nan"), float("inf"), True, "5"):
        with pytest.raises(ValueError, match="timeout_seconds"):
            tools.call_sync(
                "sandbox_status", {}, call_id="c", operation_key="k", timeout_seconds=bad
            )


def test_c2_an_exact_repeat_of_an_uncertain_call_reconciles_under_its_key() -> None:
    """A model's retry is a new call id, so a new key: with
    ``reconcile_repeats`` it runs under the unsettled call's key and
    reconciles; once a settled result was returned, the next repeat runs
    anew; a call with other arguments is its own call."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan

    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    tools = toolset(sim)

    def call(key: str, **arguments: Any) -> sandrail.ToolResult:
        return tools.call_sync(
            "run_command",
            {"command": "echo once", **arguments},
            call_id=key,
            operation_key=key,
            profile="openai-strict",
            reconcile_repeats=True,
            run_id="run",
        )

    lost = call("k1")
    assert lost.status == "uncertain"
    other = call("k2", cwd="/tmp")  # not a repeat: other arguments
    assert other.content["operation_key"] == "k2"
    repeat = call("k3", cwd=None, env=[])  # the same call in canonical form
    assert repeat.status == "ok"
    assert repeat.content["operation_key"] == "k1"
    assert repeat.content["deduplicated"] is True
    assert repeat.content["call_id"] == "k3"
    assert sum(sim.launches.values()) == 2
    anew = call("k4")  # settled and returned: a repeat now is a new call
    assert anew.content["operation_key"] == "k4"
    assert sum(sim.launches.values()) == 3


def test_c2_an_exact_repeat_of_a_cancelled_await_reconciles() -> None:
    """The result of a call whose await was cancelled never reached the
    model, whatever it was: a repeat reconciles it."""
    backend = RealTimeWaits()
    tools = toolset(backend)

    async def cancel_while_running() -> None:
        call = asyncio.ensure_future(
            tools.call(
                "run_command",
                {"command": "sleep 1"},
                call_id="c",
                operation_key="k1",
                reconcile_repeats=True,
                run_id="run",
            )
        )
        await backend.waiting.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(cancel_while_running())
    assert tools.abandoned["k1"].status == "uncertain"
    repeat = tools.call_sync(
        "run_command",
        {"command": "sleep 1"},
        call_id="c2",
        operation_key="k2",
        reconcile_repeats=True,
        run_id="run",
    )
    assert repeat.content["operation_key"] == "k1"
    assert repeat.content["deduplicated"] is True
    assert launches(tools) == 1


def test_c2_without_reconcile_repeats_a_new_key_is_a_new_call() -> None:
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan

    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    tools = toolset(sim)
    lost = tools.call_sync("run_command", {"command": "echo"}, call_id="c", operation_key="k1")
    assert lost.status == "uncertain"
    again = tools.call_sync("run_command", {"command": "echo"}, call_id="c", operation_key="k2")
    assert again.content["operation_key"] == "k2"
    assert sum(sim.launches.values()) == 2


def test_unsettled_calls_are_bounded() -> None:
    tools = toolset()
    for index in range(1030):
        request = sandrail.ToolRequest(
            call=sandrail.ToolCall(name="run_command", call_id="c", arguments={"command": "x"}),
            operation_key=f"k{index}",
            session_id="s1",
            definition=tools.definition("run_command"),
            identity=sandrail.AgentIdentity(agent_id="agent-1"),
        )
        tools._record(("run", str(index)), request, _UNCERTAIN, returned=True)
    assert len(tools._unsettled) == 1024
    assert ("run", "0") not in tools._unsettled


_UNCERTAIN = sandrail.ToolResult(status="uncertain", content={"ok": False})


@pytest.mark.parametrize("profile", ["openai-strict", "anthropic-strict"])
def test_c5_an_integer_too_long_to_print_is_refused_as_a_result(profile: str) -> None:
    tools = toolset()
    huge = 10**5000
    for arguments in (
        {"command": "x", "timeout": huge},
        {"command": "x", "env": [{"name": "A", "value": huge}]},
    ):
        result = tools.call_sync(
            "run_command",
            arguments,
            call_id="c",
            operation_key="k",
            profile=profile,  # type: ignore[arg-type]
        )
        assert result.error_type == "e2b_command_arguments_invalid"
    assert launches(tools) == 0


SECRET = "hunter2hunter2"


@pytest.mark.parametrize("profile", ["full", "openai-strict", "anthropic-strict"])
def test_c17_env_values_never_echo_in_argument_problems(profile: str) -> None:
    """A model may write an env value into a name the refusal quotes: an env
    name, an unknown argument. Masked like the command, within the budget
    even when masks are longer than the values they hide (C12, C17)."""
    smallest = toolset().minimum_output_bytes()
    short = "abcdefgh"  # 8 characters, masked by 10: masking grows the text
    for budget in (smallest, 24_000):
        tools = toolset(max_output_bytes=budget, redact=[SECRET])
        strict = profile != "full"
        env: Any = {"LD_" + SECRET: "x", "BASH" + short * 40: short}
        if strict:
            env = [{"name": name, "value": value} for name, value in env.items()]
        for arguments in (
            {"command": "true", "env": env},
            {
                "command": "true",
                SECRET: 1,
                short * 60: 2,
                "env": {"A": short} if not strict else [{"name": "A", "value": short}],
            },
        ):
            result = tools.call_sync(
                "run_command",
                arguments,
                call_id="c",
                operation_key="k",
                profile=profile,  # type: ignore[arg-type]
            )
            sent = result.to_json()
            assert result.error_type == "e2b_command_arguments_invalid", sent
            assert SECRET not in sent
            assert short not in sent
            assert len(sent.encode("utf-8")) <= budget


def _lost_start() -> Simulator:
    """A simulator whose first Start's response is lost: the call is uncertain."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan

    return Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))


def test_c2_repeats_reconcile_across_runs_of_one_toolset() -> None:
    """A later run's identical call, while the earlier run's call is
    unsettled, is the model repeating it as told: it
    reconciles that call (with or without ``run_id=``: by default the run is
    the part of the key before ``:{call_id}``); once settled, the next
    identical call is a new call."""
    for explicit in (True, False):
        sim = _lost_start()
        tools = toolset(sim)

        def call(
            run: str, call_id: str, explicit: bool = explicit, tools: Any = tools
        ) -> sandrail.ToolResult:
            return tools.call_sync(
                "run_command",
                {"command": "echo once"},
                call_id=call_id,
                operation_key=tools.operation_key(call_id, run_id=run),
                reconcile_repeats=True,
                run_id=run if explicit else None,
            )

        first = call("run-1", "a")
        assert first.status == "uncertain"
        later = call("run-2", "b")
        assert (later.content["operation_key"], later.content["deduplicated"]) == ("run-1:a", True)
        anew = call("run-3", "c")  # settled: a new call
        assert (anew.content["operation_key"], anew.content["deduplicated"]) == ("run-3:c", False)
        assert sum(sim.launches.values()) == 2


def test_c2_a_key_of_another_form_matches_no_other_call() -> None:
    """Without ``run_id=`` a key that is not ``f"{run}:{call_id}"`` has no
    run to match in: the call is its own."""
    sim = _lost_start()
    tools = toolset(sim)
    for key in ("k1", "k2"):
        result = tools.call_sync(
            "run_command",
            {"command": "echo once"},
            call_id=key,
            operation_key=key,
            reconcile_repeats=True,
        )
        assert result.content["operation_key"] == key


def test_c2_a_refused_repeat_leaves_the_earlier_call_unsettled() -> None:
    """A repeat refused before anything ran (its identity does not fit the
    budget) is no outcome of the earlier call's task: the next repeat still
    reconciles that call instead of launching again."""
    sim = _lost_start()
    budget = toolset().minimum_output_bytes(call_id="c" * 8, operation_key="run:" + "c" * 8)
    tools = toolset(sim, max_output_bytes=budget)

    def call(call_id: str) -> sandrail.ToolResult:
        return tools.call_sync(
            "run_command",
            {"command": "echo once"},
            call_id=call_id,
            operation_key=f"run:{call_id}",
            reconcile_repeats=True,
        )

    assert call("c1").status == "uncertain"
    refused = call("c" * 400)
    assert refused.error_type == "e2b_command_budget_below_minimum_identity"
    settled = call("c3")
    assert settled.status == "ok"
    assert settled.content["operation_key"] == "run:c1"
    assert settled.content["deduplicated"] is True
    assert launches(tools) == 1
    anew = call("c4")  # its own task's result was returned: now a new call
    assert anew.content["operation_key"] == "run:c4"


@pytest.mark.parametrize(
    ("first", "repeat"),
    [
        ({"timeout": None}, {"timeout": 300}),
        ({"timeout": 900}, {"timeout": 300}),  # capped at the toolset's 300
        ({"background": None}, {"background": False}),
        ({"env": None}, {"env": []}),
        ({"timeout": 5}, {"timeout": 5.0}),
    ],
)
def test_c2_repeats_match_arguments_as_the_port_reads_them(
    first: dict[str, Any], repeat: dict[str, Any]
) -> None:
    sim = _lost_start()
    tools = toolset(sim)

    def call(call_id: str, arguments: dict[str, Any]) -> sandrail.ToolResult:
        full = {"command": "echo once", "cwd": None, "timeout": None, "env": None}
        return tools.call_sync(
            "run_command",
            {**full, "background": None, **arguments},
            call_id=call_id,
            operation_key=f"run:{call_id}",
            profile="openai-strict",
            reconcile_repeats=True,
        )

    assert call("c1", first).status == "uncertain"
    again = call("c2", repeat)
    assert again.status == "ok"
    assert again.content["operation_key"] == "run:c1"
    assert launches(tools) == 1


@pytest.mark.parametrize("arguments", [(), (None, None), ("command", "echo hi"), [1], "x"])
def test_c5_arguments_that_are_not_an_object_are_refused_never_raised(arguments: Any) -> None:
    tools = toolset()
    results = [
        tools.call_sync("run_command", arguments, call_id="c", operation_key="k"),
        asyncio.run(tools.call("run_command", arguments, call_id="c", operation_key="k")),
    ]
    for result in results:
        assert result.error_type == "e2b_command_arguments_invalid"
    assert launches(tools) == 0


@pytest.mark.parametrize(
    "bad", [sandrail.MAX_CALL_TIMEOUT_SECONDS + 1, 1e10, 10**400, float("inf")]
)
def test_timeouts_past_the_documented_maximum_are_a_clear_value_error(bad: object) -> None:
    tools = toolset()
    with pytest.raises(ValueError, match="at most"):
        tools.call_sync("sandbox_status", {}, call_id="c", operation_key="k", timeout_seconds=bad)
    result = tools.call_sync(
        "sandbox_status",
        {},
        call_id="c",
        operation_key="k",
        timeout_seconds=sandrail.MAX_CALL_TIMEOUT_SECONDS,
    )
    assert result.status == "ok"


@pytest.mark.parametrize("effect", ["Ensure", "Start", "Wait"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_c6_a_backend_s_own_cancelled_error_is_a_backend_failure(
    effect: str, asynchronous: bool
) -> None:
    """A CancelledError the backend raises when nobody cancelled the call
    (an SDK's own task) is a failure of that effect, with the port's usual
    result (``uncertain`` once something may have been sent), never an
    exception out of ``call_sync``; the retry reconciles, launching once."""
    sim = Simulator()
    raised = []

    def answer(sent: Any) -> Any:
        if type(sent).__name__ == effect and not raised:
            raised.append(sent)
            raise asyncio.CancelledError
        return sim(sent)

    async def answer_async(sent: Any) -> Any:
        return answer(sent)

    tools = toolset(answer_async if asynchronous else answer)
    first = tools.call_sync("run_command", {"command": "echo x"}, call_id="c", operation_key="k")
    assert raised
    assert first.status in ("uncertain", "error")
    assert not tools.abandoned
    again = tools.call_sync("run_command", {"command": "echo x"}, call_id="c", operation_key="k")
    assert again.status == "ok"
    assert sum(sim.launches.values()) == 1


def test_c11_the_caller_s_own_cancellation_still_reaches_the_caller() -> None:
    """Only a CancelledError nobody asked for is a backend failure: the
    caller cancelling ``await port.execute(...)`` still gets it."""
    backend = RealTimeWaits()
    port = toolset(backend)._ports["run_command"]
    request = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c", arguments={"command": "sleep 1"}),
        operation_key="k",
        session_id="embed-session",
        definition=port.definition("run_command"),
        identity=sandrail.AgentIdentity(agent_id="embed-agent"),
    )

    async def cancel_while_running() -> None:
        task = asyncio.ensure_future(port.execute(request))
        await backend.waiting.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_while_running())


def test_a_recorder_backend_is_attached_by_a_one_group_toolset(tmp_path: Any) -> None:
    from sandrail.interpreters.replay import Recorder

    cassette = tmp_path / "rec.jsonl"
    with Recorder(Simulator(), str(cassette)) as recorder:
        tools = toolset(recorder, tools=("command",))
        result = tools.call_sync(
            "run_command", {"command": "echo hi"}, call_id="c", operation_key="k"
        )
        assert result.status == "ok"
    kinds = [json.loads(line)["kind"] for line in cassette.read_text().splitlines()]
    assert kinds[0] == "header"
    assert "call" in kinds


def test_a_recorder_backend_a_toolset_cannot_attach_is_refused_naming_what_to_do(
    tmp_path: Any,
) -> None:
    from sandrail.interpreters.replay import Recorder

    with Recorder(Simulator(), str(tmp_path / "a.jsonl")) as recorder:
        with pytest.raises(ValueError, match=r'tools=\("command",\)'):
            toolset(recorder)
        toolset(recorder, tools=("code",))
        with pytest.raises(ValueError, match="already records a port"):
            toolset(recorder, tools=("command",))


@pytest.mark.parametrize("run_id", ["", "  ", 5])
def test_c2_a_run_id_that_is_not_a_non_blank_string_is_a_harness_bug(run_id: Any) -> None:
    tools = toolset()
    with pytest.raises(ValueError, match="run_id"):
        tools.call_sync("sandbox_status", {}, call_id="c", operation_key="k", run_id=run_id)


@pytest.mark.parametrize("owner", ["agent-1", None, {"agent_id": "agent-1"}])
def test_toolset_an_owner_of_another_type_is_told_what_owner_takes(owner: object) -> None:
    """``owner="agent-1"`` used to be told that "a native owner needs
    identity=NativeIdentity(...)", a concept the tutorial never introduces."""
    with pytest.raises(TypeError) as raised:
        sandrail.Toolset(
            backend=Simulator(),
            session_id="session-1",
            owner=owner,  # type: ignore[arg-type]
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
        )
    message = str(raised.value)
    assert "owner must be sandrail.AgentOwner(agent_id=...)" in message
    assert "NativeOwner(scope=...)" in message
    assert "a native owner needs" not in message
    if owner == "agent-1":
        assert "owner=sandrail.AgentOwner(agent_id='agent-1')" in message


@pytest.mark.parametrize(
    "spelled",
    [
        {"timeout": 300},
        {"timeout": 300.0},
        {"timeout": None},
        {"timeout": 5000},  # above the foreground cap: the port sets 300 all the same
    ],
)
def test_c3_a_deadline_spelled_as_its_default_is_the_same_launch(spelled: dict[str, Any]) -> None:
    """A retry that spells out the default timeout is the call that left it
    out: answered from the first launch, never a false conflict."""
    tools = toolset()
    first = tools.call_sync("run_command", {"command": "echo hi"}, call_id="c", operation_key="k")
    again = tools.call_sync(
        "run_command", {"command": "echo hi", **spelled}, call_id="c", operation_key="k"
    )
    assert (first.status, again.status) == ("ok", "ok"), again.content
    assert again.content["deduplicated"] is True
    assert launches(tools) == 1


def test_c3_a_deadline_that_changes_the_launch_is_another_launch() -> None:
    """A timeout that sets another deadline is another call (a conflict under
    the same key, nothing new runs), and a value the schema refuses is still
    refused, never settled into the default."""
    tools = toolset()
    tools.call_sync("run_command", {"command": "echo hi"}, call_id="c", operation_key="k")
    other = tools.call_sync(
        "run_command", {"command": "echo hi", "timeout": 60}, call_id="c", operation_key="k"
    )
    assert other.content["error_type"] == "e2b_command_operation_conflict"
    for refused in (0, -1, 86_401, True, "300", 300.5):
        answer = tools.call_sync(
            "run_command",
            {"command": "echo hi", "timeout": refused},
            call_id="r",
            operation_key="r",
        )
        assert answer.content["error_type"] == "e2b_command_arguments_invalid", refused
    background = tools.call_sync(
        "run_command",
        {"command": "echo bg", "background": True, "timeout": 300},
        call_id="b",
        operation_key="b",
    )
    assert background.content["error_type"] == "timeout_requires_foreground"
    assert launches(tools) == 1


def test_c3_a_background_deadline_spelled_as_its_default_is_the_same_launch() -> None:
    tools = toolset()
    default = sandrail.core.DEFAULT_BACKGROUND_TIMEOUT_SECONDS
    first = tools.call_sync(
        "run_command", {"command": "echo bg", "background": True}, call_id="c", operation_key="k"
    )
    again = tools.call_sync(
        "run_command",
        {"command": "echo bg", "background": True, "background_timeout": default},
        call_id="c",
        operation_key="k",
    )
    assert (first.status, again.status) == ("ok", "ok"), again.content
    assert again.content["deduplicated"] is True
    assert launches(tools) == 1


def _asks(request: sandrail.ToolRequest) -> Any:
    return sandrail.ApprovalRequired(interaction_id="ask")


def test_c2_c8_an_identical_call_of_the_same_turn_is_its_own_call() -> None:
    """``turn=``: an identical call of the same model turn never runs under
    the key of the earlier call waiting for a person (the model made both at
    once): the first rejected, the second approved, the second runs once
    under its own key. A blank turn is a harness bug (``ValueError``)."""
    tools = toolset(authorize=_asks)
    calls = [
        {
            "call_id": call_id,
            "operation_key": f"run-1:{call_id}",
            "reconcile_repeats": True,
            "run_id": "run-1",
            "turn": "message-1",
        }
        for call_id in ("c1", "c2")
    ]
    for call in calls:
        asked = tools.call_sync("run_command", {"command": "echo same"}, **call)
        assert asked.status == "approval_required"
    rejected = tools.rejection("no", name="run_command", call_id="c1", operation_key="run-1:c1")
    assert (rejected.content["call_id"], rejected.content["operation_key"]) == ("c1", "run-1:c1")
    ran = tools.call_sync("run_command", {"command": "echo same"}, **calls[1], approved=True)
    assert (ran.status, ran.content["operation_key"]) == ("ok", "run-1:c2")
    assert launches(tools) == 1
    with pytest.raises(ValueError, match="turn"):
        tools.call_sync(
            "run_command", {"command": "x"}, call_id="c3", operation_key="run-1:c3", turn=" "
        )


def _asked_then(
    tools: sandrail.Toolset, call_id: str, turn: str, **extra: Any
) -> sandrail.ToolResult:
    """``rm -rf /tmp/x`` as tool call ``call_id`` of model ``turn``, under
    the documented key of run ``run-1``, repeats reconciled."""
    return tools.call_sync(
        "run_command",
        {"command": "rm -rf /tmp/x"},
        call_id=call_id,
        operation_key=f"run-1:{call_id}",
        reconcile_repeats=True,
        turn=turn,
        **extra,
    )


def test_c8_a_call_rejected_with_nothing_run_is_settled_its_repeat_in_a_later_turn_asks_anew() -> (
    None
):
    """``c1`` was asked about and rejected: nothing ran, so it is settled.
    The same call as ``c2`` in a later turn is a new call under its own
    key: asked about (not answered with ``c1``'s rejection), and run once
    approved."""
    from tests.embed_rig import asks_for_rm

    tools = toolset(authorize=asks_for_rm)
    assert _asked_then(tools, "c1", "turn-1").needs_approval
    rejected = tools.rejection(name="run_command", call_id="c1", operation_key="run-1:c1")
    assert rejected.error_type == "approval_rejected"
    asked = _asked_then(tools, "c2", "turn-2")
    assert asked.needs_approval, asked.content
    assert tools.asked(
        "run_command", {"command": "rm -rf /tmp/x"}, call_id="c2", operation_key="run-1:c2"
    )
    ran = _asked_then(tools, "c2", "turn-2", approved=True)
    assert (ran.status, ran.content["operation_key"]) == ("ok", "run-1:c2")
    assert launches(tools) == 1


def test_c2_a_rejection_after_an_approval_that_may_have_run_leaves_its_call_unsettled() -> None:
    """``c1`` was approved and its start may have left (``uncertain``);
    the person rejects it afterwards, which stops nothing that ran. Its
    repeat in a later turn still reconciles under ``c1``'s key: never a
    second launch."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan
    from tests.embed_rig import asks_for_rm

    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    tools = toolset(sim, authorize=asks_for_rm)
    assert _asked_then(tools, "c1", "turn-1").needs_approval
    first = _asked_then(tools, "c1", "turn-1", approved=True)
    assert first.status == "uncertain"
    late = tools.rejection(name="run_command", call_id="c1", operation_key="run-1:c1")
    assert late.status == "uncertain"
    again = _asked_then(tools, "c2", "turn-2")
    assert again.content["operation_key"] == "run-1:c1", again.content
    assert sum(sim.launches.values()) == 1


def _twice_uncertain() -> tuple[sandrail.Toolset, Simulator]:
    """Two identical calls ``ca`` and ``cb`` of model turn ``turn-1``, both
    launched and both answered ``uncertain`` (each start's answer lost)."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan

    lost = tuple(Fault(effect="Start", kind=FaultKind.RESPONSE_LOST, occurrence=n) for n in (0, 1))
    sim = Simulator(plan=FaultPlan(lost))
    tools = toolset(sim)
    for call_id in ("ca", "cb"):
        assert _asked_then(tools, call_id, "turn-1").status == "uncertain"
    assert sum(sim.launches.values()) == 2
    return tools, sim


@pytest.mark.parametrize("one_message", [False, True], ids=["two_turns", "one_message"])
def test_c2_two_identical_uncertain_calls_are_reconciled_by_two_repeats(one_message: bool) -> None:
    """The model repeats each of two identical ``uncertain`` calls, as told,
    in one later message or in two turns: each repeat reconciles one of
    them, and nothing launches a third time. Only a repeat after both were
    answered is a new call."""
    tools, sim = _twice_uncertain()
    turns = ("turn-2", "turn-2") if one_message else ("turn-2", "turn-3")
    repeats = [_asked_then(tools, c, t) for c, t in zip(("c2", "c3"), turns, strict=True)]
    keys = {result.content["operation_key"] for result in repeats}
    assert keys == {"run-1:ca", "run-1:cb"}
    assert sum(sim.launches.values()) == 2
    anew = _asked_then(tools, "c4", "turn-4")
    assert (anew.content["operation_key"], anew.content["deduplicated"]) == ("run-1:c4", False)
    assert sum(sim.launches.values()) == 3


def test_c2_a_repeat_run_again_stays_under_the_key_it_ran_under() -> None:
    """``c2`` repeated the uncertain ``c1`` and ran under its key, which
    settled it; a framework that runs tool call ``c2`` again (a re-run, a
    second answer) gets that same launch back, never a launch of its own."""
    from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan

    sim = Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),)))
    tools = toolset(sim)
    assert _asked_then(tools, "c1", "turn-1").status == "uncertain"
    first = _asked_then(tools, "c2", "turn-2")
    assert (first.status, first.content["operation_key"]) == ("ok", "run-1:c1")
    again = _asked_then(tools, "c2", "turn-2")
    assert (again.content["operation_key"], again.content["deduplicated"]) == ("run-1:c1", True)
    assert sum(sim.launches.values()) == 1


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync-policy", "async-policy"])
def test_c8_an_approved_call_runs_once_under_a_policy_that_asks_sync_or_async(
    asynchronous: bool,
) -> None:
    """The toolset honours a person's approval in the layer each call runs
    in, after the port has the policy's answer (awaited, for an
    asynchronous policy): the approved call runs once, its repeat reads that
    run, and a call nobody approved still waits for a person."""
    question = sandrail.ApprovalRequired(interaction_id="q-1")

    def sync_policy(request: object) -> Any:
        return question

    async def async_policy(request: object) -> Any:
        await asyncio.sleep(0)
        return question

    tools = toolset(authorize=async_policy if asynchronous else sync_policy)

    async def main() -> list[sandrail.ToolResult]:
        call = {"call_id": "c1", "operation_key": "k1"}
        asked = await tools.call("run_command", {"command": "echo x"}, **call)
        ran = await tools.call("run_command", {"command": "echo x"}, approved=True, **call)
        again = await tools.call("run_command", {"command": "echo x"}, approved=True, **call)
        other = await tools.call(
            "run_command", {"command": "echo y"}, call_id="c2", operation_key="k2"
        )
        return [asked, ran, again, other]

    asked, ran, again, other = asyncio.run(main())
    assert asked.needs_approval
    assert (ran.status, ran.content["deduplicated"]) == ("ok", False)
    assert (again.status, again.content["deduplicated"]) == ("ok", True)
    assert other.needs_approval
    assert launches(tools) == 1
