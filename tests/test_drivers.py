"""Which driver runs a call: one rule for whether a backend is asynchronous,
the same answer through every entry point.

Three kinds of backend: a synchronous callable (the simulator), an
``async def`` function (no flag), and an object that declares
``asynchronous = True`` and returns awaitables from a plain method (as the
E2B backend, a recorder or the testing kit's faulty backend do). Every entry
point (the port's ``execute_sync`` and ``execute``, the toolset's
``call_sync`` and ``call``, the Anthropic adapter's ``handle_sync`` and
``handle``) runs each kind to the same ``ok``; a synchronous entry point
inside a running event loop refuses an asynchronous backend of either kind
before anything is sent.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import sandrail
from sandrail.adapters.anthropic import AnthropicTools
from sandrail.core import Effect
from sandrail.interpreters._drivers import is_asynchronous
from sandrail.interpreters.simulator import Simulator

SESSION = "kinds-session"
OWNER = sandrail.AgentOwner(agent_id="kinds-agent")


class _AwaitableReturning:
    """Declares itself asynchronous; its plain ``__call__`` returns a coroutine."""

    asynchronous = True

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    def __call__(self, effect: Effect) -> Awaitable[Any]:
        return self._answer(effect)

    async def _answer(self, effect: Effect) -> Any:
        await asyncio.sleep(0)
        return self.sim(effect)


class _AsyncCallable:
    """An object whose ``__call__`` is ``async def`` (no flag)."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim

    async def __call__(self, effect: Effect) -> Any:
        return self.sim(effect)


def _async_function(sim: Simulator) -> Callable[[Effect], Awaitable[Any]]:
    async def backend(effect: Effect) -> Any:
        return sim(effect)

    return backend


def _async_partial(sim: Simulator) -> Callable[[Effect], Awaitable[Any]]:
    async def answer(inner: Simulator, effect: Effect) -> Any:
        return inner(effect)

    return functools.partial(answer, sim)


KINDS: dict[str, Callable[[Simulator], Any]] = {
    "sync": lambda sim: sim,
    "async-def": _async_function,
    "async-partial": _async_partial,
    "async-call": _AsyncCallable,
    "awaitable-returning": _AwaitableReturning,
}
ASYNCHRONOUS = {"async-def", "async-partial", "async-call", "awaitable-returning"}


def _port(backend: Any) -> sandrail.ToolPort:
    return sandrail.command_tools(
        backend=backend,
        session_id=SESSION,
        owner=OWNER,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )


def _toolset(backend: Any) -> sandrail.Toolset:
    return sandrail.Toolset(
        backend=backend,
        session_id=SESSION,
        owner=OWNER,
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        tools=("command",),
    )


def _request(port: sandrail.ToolPort, key: str) -> sandrail.ToolRequest:
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c1", arguments={"command": "true"}),
        operation_key=key,
        session_id=SESSION,
        definition=port.definition("run_command"),
        identity=sandrail.AgentIdentity(agent_id=OWNER.agent_id),
    )


def _block(key: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": key, "name": "run_command", "input": {"command": "true"}}


def _port_execute_sync(backend: Any) -> sandrail.ToolResult:
    port = _port(backend)
    return port.execute_sync(_request(port, "k"))


def _port_execute(backend: Any) -> sandrail.ToolResult:
    port = _port(backend)
    return asyncio.run(port.execute(_request(port, "k")))


def _toolset_call_sync(backend: Any) -> sandrail.ToolResult:
    return _toolset(backend).call_sync(
        "run_command", {"command": "true"}, call_id="c1", operation_key="k"
    )


def _toolset_call(backend: Any) -> sandrail.ToolResult:
    call = _toolset(backend).call(
        "run_command", {"command": "true"}, call_id="c1", operation_key="k"
    )
    return asyncio.run(call)


def _status_of(block: dict[str, Any]) -> str:
    # The tool_result block's content is the result's JSON; its status is
    # read back through the toolset's result type (ok results carry ok: true).
    import json

    content = json.loads(block["content"])
    return "ok" if content.get("ok") is True and not block["is_error"] else str(content)


def _anthropic_handle_sync(backend: Any) -> str:
    return _status_of(AnthropicTools(_toolset(backend)).handle_sync(_block("k")))


def _anthropic_handle(backend: Any) -> str:
    return _status_of(asyncio.run(AnthropicTools(_toolset(backend)).handle(_block("k"))))


ENTRY_POINTS: dict[str, Callable[[Any], Any]] = {
    "port.execute_sync": _port_execute_sync,
    "port.execute": _port_execute,
    "toolset.call_sync": _toolset_call_sync,
    "toolset.call": _toolset_call,
    "anthropic.handle_sync": _anthropic_handle_sync,
    "anthropic.handle": _anthropic_handle,
}


@pytest.fixture
def no_unawaited_coroutines() -> Iterator[None]:
    """A coroutine a backend returned and nobody awaited fails the test."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        gc.collect()
    unawaited = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert not unawaited


@pytest.mark.parametrize("kind", list(KINDS))
def test_one_rule_says_which_backends_are_asynchronous(kind: str) -> None:
    assert is_asynchronous(KINDS[kind](Simulator())) is (kind in ASYNCHRONOUS)


def test_a_backend_whose_flag_cannot_be_read_is_not_asynchronous() -> None:
    class Broken:
        @property
        def asynchronous(self) -> bool:
            raise RuntimeError("no")

        def __call__(self, effect: Effect) -> Any:
            raise AssertionError("never asked")

    assert is_asynchronous(Broken()) is False
    assert is_asynchronous(object()) is False


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.usefixtures("no_unawaited_coroutines")
def test_every_kind_of_backend_runs_ok_through_every_entry_point(kind: str, entry: str) -> None:
    """C7 through every door: each kind of backend launches the command once
    and answers ``ok`` (an ``async def`` backend through ``execute_sync`` used
    to answer ``uncertain``: its coroutine was taken for the Ensure answer)."""
    sim = Simulator()
    answer = ENTRY_POINTS[entry](KINDS[kind](sim))
    status = answer if isinstance(answer, str) else answer.status
    assert status == "ok", answer if isinstance(answer, str) else answer.to_json()
    assert sum(sim.launches.values()) == 1


SYNC_ENTRY_POINTS = ("port.execute_sync", "toolset.call_sync", "anthropic.handle_sync")


@pytest.mark.parametrize("entry", SYNC_ENTRY_POINTS)
@pytest.mark.parametrize("kind", sorted(ASYNCHRONOUS))
@pytest.mark.usefixtures("no_unawaited_coroutines")
def test_c5_a_sync_entry_point_in_a_running_loop_refuses_every_asynchronous_backend(
    kind: str, entry: str
) -> None:
    """Inside a running event loop nothing can be awaited: the synchronous
    entry points refuse before anything is sent (``error``, executed false,
    never ``uncertain``), whichever way the backend is asynchronous."""
    sim = Simulator()
    backend = KINDS[kind](sim)

    async def inside() -> Any:
        return ENTRY_POINTS[entry](backend)

    answer = asyncio.run(inside())
    if isinstance(answer, str):
        assert "e2b_command_sync_contract_invalid" in answer
    else:
        assert answer.status == "error", answer.to_json()
        assert answer.error_type == "e2b_command_sync_contract_invalid"
        assert answer.content["executed"] is False
    assert sum(sim.launches.values()) == 0


@pytest.mark.usefixtures("no_unawaited_coroutines")
def test_c6_an_undeclared_awaitable_answer_to_a_sync_call_is_closed_and_uncertain() -> None:
    """A plain function that returns awaitables without declaring it cannot
    be told apart before it answers: at a synchronous entry point its
    answer to the first side effect is closed (nothing of it runs, no
    warning) and, as the function itself may have sent something, the call
    is ``uncertain`` with a detail that says how to declare it (C6)."""
    sim = Simulator()
    answer = _async_function(sim)

    def backend(effect: Effect) -> Any:
        return answer(effect)

    port = _port(backend)
    result = port.execute_sync(_request(port, "k"))
    assert result.status == "uncertain", result.to_json()
    assert result.error_type == "e2b_sandbox_outcome_unknown"
    assert sum(sim.launches.values()) == 0
    assert asyncio.run(port.execute(_request(port, "k2"))).status == "ok"
