"""The public helpers every adapter is built on (``sandrail.adapters.kit``):
the operation key from a framework's identity, the model's arguments, the
approval round trip and refusals, and that the adapters stand on them alone
(no private sandrail module)."""

from __future__ import annotations

import ast
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sandrail
from sandrail.adapters import kit
from sandrail.adapters.kit import Adapter, ModelCall
from sandrail.interpreters.simulator import Simulator
from sandrail.testing import HostileStr

ADAPTERS = Path(kit.__file__).parent
NULLS = {"cwd": None, "timeout": None, "env": None, "background": None}


_SIMULATORS: dict[int, Simulator] = {}


def _toolset(policy: Any = None) -> sandrail.Toolset:
    simulator = Simulator()
    toolset = sandrail.Toolset(
        backend=simulator,
        session_id="kit-session",
        owner=sandrail.AgentOwner(agent_id="kit-agent"),
        authorize=policy if policy is not None else (lambda request: sandrail.ALLOW),
        assert_authority=lambda request: True,
    )
    _SIMULATORS[id(toolset)] = simulator
    return toolset


def _launches(toolset: sandrail.Toolset) -> int:
    return sum(_SIMULATORS[id(toolset)].launches.values())


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_adapters_import_no_private_sandrail_module() -> None:
    """An adapter is glue on public names: no ``sandrail._x``, no
    ``sandrail.core._x`` (nor any other private module of sandrail's but
    the adapter's own ``sandrail.adapters._x``). Only the kit itself, the
    boundary, reaches behind the public names."""
    adapters = sorted(path for path in ADAPTERS.glob("*.py") if path.name != "kit.py")
    assert {path.name for path in adapters} >= {
        "mcp.py",
        "openai_agents.py",
        "pydantic_ai.py",
        "anthropic.py",
        "_mcp_approval.py",
    }
    private = {
        f"{path.name}: {name}"
        for path in adapters
        for name in _imports(path)
        if name.startswith("sandrail")
        and not name.startswith("sandrail.adapters")
        and any(part.startswith("_") and part != "__version__" for part in name.split("."))
    }
    assert private == set()


def test_c2_call_of_derives_the_documented_key_as_plain_text() -> None:
    adapter = Adapter(_toolset(), framework="toy")
    call = adapter.call_of(
        HostileStr("run_command"),
        {HostileStr("command"): "echo hi"},
        call_id=HostileStr("c1"),
        run_id="run-1",
    )
    assert isinstance(call, ModelCall)
    assert (call.operation_key, call.run_id, call.call_id) == ("run-1:c1", "run-1", "c1")
    assert type(call.name) is str
    assert type(call.call_id) is str
    assert [type(key) for key in call.arguments] == [str]  # type: ignore[attr-defined]
    own = adapter.call_of("run_command", {}, call_id="c1", operation_key="client-key")
    assert isinstance(own, ModelCall)
    assert (own.operation_key, own.run_id) == ("client-key", None)


@pytest.mark.parametrize(
    ("call_id", "run_id", "missing"),
    [
        (None, "run-1", "tool call id"),
        ("  ", "run-1", "tool call id"),
        ("c1", None, "run id"),
        ("c1", "", "run id"),
        ("c1", 7, "run id"),
        (None, None, "run id and no tool call id"),
    ],
)
def test_c2_a_call_without_a_stable_identity_is_refused_naming_it(
    call_id: object, run_id: object, missing: str
) -> None:
    """No safe key, no made-up one: a shared stand-in would make two runs'
    calls one call, a fresh one would let a retry launch twice."""
    tools = _toolset()
    refused = Adapter(tools, framework="toy").call_of(
        "run_command", {"command": "echo hi"}, call_id=call_id, run_id=run_id
    )
    assert isinstance(refused, sandrail.ToolResult)
    assert refused.error_type == "e2b_command_operation_key_required"
    assert refused.executed is False
    assert f"toy gave it no {missing}" in str(refused.instruction)
    assert _launches(tools) == 0


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ("{not json", "must be a JSON object (the text is not JSON)"),
        (b'{"command": NaN}', "must be a JSON object (the text is not JSON)"),
        ("[1, 2]", "must be a JSON object"),
        ("7", "must be a JSON object"),
    ],
)
def test_c5_text_that_is_not_a_json_object_runs_nothing(arguments: object, reason: str) -> None:
    tools = _toolset()
    adapter = Adapter(tools, framework="toy")
    call = adapter.call_of("run_command", arguments, call_id="c1", run_id="r")
    result = call if isinstance(call, sandrail.ToolResult) else adapter.run_sync(call)
    assert result.error_type == "e2b_command_arguments_invalid"
    assert result.content["problems"] == [{"field": "arguments", "reason": reason}]
    assert "not json" not in result.to_json()  # never quoted
    assert _launches(tools) == 0


class _Unreadable(dict[str, Any]):
    def keys(self) -> Any:
        raise RuntimeError("no keys today")


def test_c5_arguments_that_raise_when_read_run_nothing() -> None:
    tools = _toolset()
    refused = Adapter(tools, framework="toy").call_of(
        "run_command", _Unreadable(command="x"), call_id="c1", run_id="r"
    )
    assert isinstance(refused, sandrail.ToolResult)
    assert refused.content["problems"] == [
        {"field": "arguments", "reason": "must be a JSON object (it could not be read)"}
    ]
    assert _launches(tools) == 0


def test_parsed_arguments_reads_what_call_of_reads() -> None:
    assert kit.parsed_arguments('{"command": "x"}') == {"command": "x"}
    assert kit.parsed_arguments({"command": "x"}) == {"command": "x"}
    for not_an_object in ("[1]", "nope", '{"a": Infinity}', {1: "x"}, 7, None):
        assert kit.parsed_arguments(not_an_object) is None


def test_c2_run_reconciles_a_repeat_and_a_client_key_runs_under_itself() -> None:
    """Through the kit, a model's repeat of an unsettled call is matched to
    it (``reconcile_repeats`` under its run); a call under a client's own
    key is its own, and the same key again is its retry (C2)."""
    tools = _toolset()
    adapter = Adapter(tools, framework="toy")
    first = adapter.call_of("run_command", {"command": "echo a"}, call_id="c1", run_id="r")
    assert isinstance(first, ModelCall)
    assert adapter.run_sync(first).status == "ok"
    own = adapter.call_of("run_command", {"command": "echo b"}, call_id="m1", operation_key="k")
    assert isinstance(own, ModelCall)
    again = [asyncio.run(adapter.run(own)), asyncio.run(adapter.run(own))]
    assert [(r.status, r.deduplicated, r.operation_key) for r in again] == [
        ("ok", False, "k"),
        ("ok", True, "k"),
    ]
    assert _launches(tools) == 2


def _asks(request: sandrail.ToolRequest) -> Any:
    if "deploy" in str(request.call.arguments.get("command", "")):
        return sandrail.ApprovalRequired(interaction_id="ask-1")
    if "rm -rf" in str(request.call.arguments.get("command", "")):
        return sandrail.Deny(reason="no")
    return sandrail.ALLOW


def test_c8_the_approval_round_trip_through_the_kit() -> None:
    """Asked first: ``asks_a_person`` is true only for ``ApprovalRequired``;
    the call waits (nothing ran), runs once approved, and a rejection of
    another call runs nothing."""
    tools = _toolset(_asks)
    adapter = Adapter(tools, framework="toy", profile="openai-strict")

    def call(command: str, call_id: str) -> ModelCall:
        made = adapter.call_of(
            "run_command", {**NULLS, "command": command}, call_id=call_id, run_id="r"
        )
        assert isinstance(made, ModelCall)
        return made

    deploy, denied, plain = call("echo deploy", "c1"), call("rm -rf /", "c2"), call("true", "c3")
    assert [asyncio.run(adapter.asks_a_person(c)) for c in (deploy, denied, plain)] == [
        True,
        False,
        False,
    ]
    waiting = adapter.run_sync(deploy)
    assert (waiting.status, waiting.executed) == ("approval_required", False)
    assert _launches(tools) == 0
    approved = adapter.run_sync(deploy, approved=True)
    assert (approved.status, approved.stdout) == ("ok", "deploy\n")
    rejected = adapter.reject(call("echo deploy again", "c4"), "not today")
    assert (rejected.error_type, rejected.executed) == ("approval_rejected", False)
    assert rejected.content["outcome_reason"] == "not today"
    assert _launches(tools) == 1


def test_c5_rejecting_a_call_that_already_ran_says_so() -> None:
    tools = _toolset(_asks)
    adapter = Adapter(tools, framework="toy")
    deploy = adapter.call_of("run_command", {"command": "echo deploy"}, call_id="c1", run_id="r")
    assert isinstance(deploy, ModelCall)
    assert adapter.run_sync(deploy).status == "approval_required"
    assert adapter.run_sync(deploy, approved=True).status == "ok"
    late = adapter.reject(deploy)
    assert (late.status, late.error_type) == ("uncertain", "approval_rejected")
    assert late.task_id is not None


def test_refusals_fit_the_budget() -> None:
    tools = _toolset()
    adapter = Adapter(tools, framework="toy")
    refused = adapter.refusal(sandrail.ErrorCode.CANCELED, "x" * 100_000)
    assert refused.error_type == "canceled"
    assert refused.executed is False
    assert len(refused.to_json().encode()) <= tools.max_output_bytes


def test_adapter_settings_are_checked_when_given() -> None:
    tools = _toolset()
    with pytest.raises(TypeError, match=r"sandrail\.Toolset"):
        Adapter(object(), framework="toy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="profile must be one of"):
        Adapter(tools, framework="toy", profile="loose")  # type: ignore[arg-type]
    for timeout in (0, -1, True, "5", sandrail.MAX_CALL_TIMEOUT_SECONDS + 1):
        with pytest.raises(ValueError, match="timeout_seconds"):
            Adapter(tools, framework="toy", timeout_seconds=timeout)  # type: ignore[arg-type]
    assert kit.check_timeout(5) == 5.0
    assert kit.check_run_id(None) is None
    assert type(kit.check_run_id(HostileStr("r"))) is str
    with pytest.raises(ValueError, match="run_id must be a non-blank string"):
        kit.check_run_id(" ")
    with pytest.raises(TypeError, match="thread_id must be a non-blank string, got int"):
        kit.check_run_id(3, name="thread_id")


@given(st.lists(st.text(min_size=1), min_size=1, max_size=3))
def test_c2_run_id_of_never_joins_two_identities_into_one(parts: list[str]) -> None:
    """Different parts, different run ids: ``("a:b", "c")`` is not
    ``("a", "b:c")``; and the parts can be read back."""
    joined = kit.run_id_of(*parts)
    if any(not part.strip() for part in parts):
        assert joined is None
        return
    assert joined is not None
    from urllib.parse import unquote

    assert [unquote(piece) for piece in joined.split(":")] == parts


def test_run_id_of_keeps_a_plain_part_and_refuses_a_missing_one() -> None:
    assert kit.run_id_of("thread-1") == "thread-1"
    assert kit.run_id_of("thread 1", "ns|x") == "thread 1:ns|x"
    assert kit.run_id_of("a:b", "c") != kit.run_id_of("a", "b:c")
    assert kit.run_id_of("a", None) is None
    assert kit.run_id_of("a", " ") is None
    assert kit.run_id_of() is None


def test_c17_shown_arguments_mask_env_values_wherever_they_appear() -> None:
    secret = "hunter2-token"
    for env in ({"TOKEN": secret}, [{"name": "TOKEN", "value": secret}]):
        shown = kit.shown_arguments({"command": f"curl -H {secret}", "env": env})
        assert secret not in shown
        assert "<redacted>" in shown
        assert "TOKEN" in shown
    assert kit.shown_arguments([1]) == "(arguments that are not an object)"
    assert kit.shown_arguments({"x": float("nan")}) == "(arguments that cannot be shown)"
    long = kit.shown_arguments({"command": "x" * 10_000})
    assert len(long) < 1_600
    assert "characters…]" in long


def test_require_names_the_extra() -> None:
    with pytest.raises(ImportError, match=r"pip install 'sandrail\[nothing\]'"):
        kit.require("sandrail_no_such_module", "nothing")
    assert kit.require("json", "none") is json
