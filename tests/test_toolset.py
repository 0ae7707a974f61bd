"""The Toolset (DESIGN §10): one call for every tool, the operation-key rule,
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
from sandrail.core import canonical_json
from sandrail.interpreters.simulator import Script, Simulator
from tests.embed_rig import RealTimeWaits, launches, toolset


def test_the_toolset_offers_both_tool_sets_with_plain_schemas() -> None:
    tools = toolset()
    assert tools.names == (
        "sandbox_status",
        "run_command",
        "read_command_output",
        "stop_command",
        "sandbox_run_code",
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
        return sandrail.NativeIdentity(
            scope=scope,
            run_id="run",
            turn_id="turn",
            build_id="build",
            task_chain_id="chain",
            parent_run_id=None,
            execution_fence=next(fences),
        )

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
    tools = toolset()
    for index in range(1030):
        tools._abandoned[str(index)] = tools.call_sync(
            "sandbox_status", {}, call_id="c", operation_key="k"
        )
    asyncio.run(_abandon(tools))
    assert len(tools.abandoned) == 1024
    assert "0" not in tools.abandoned


async def _abandon(tools: Any) -> None:
    gate = asyncio.Event()

    async def policy(request: object) -> sandrail.Allow:
        await gate.wait()
        return sandrail.ALLOW

    tools._ports["sandbox_status"]._authorize = policy
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
        return sandrail.NativeIdentity(
            scope=scope,
            run_id="r",
            turn_id="t",
            build_id="b",
            task_chain_id="c",
            parent_run_id=None,
            execution_fence=1,
        )

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
        tools._record(str(index), f"k{index}", _UNCERTAIN, returned=True)
    assert len(tools._unsettled) == 1024
    assert "0" not in tools._unsettled


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
