"""The E2B failure table, row by row: each row's fault is struck on the wire
by local-e2b, the unmodified SDK raises its real exception chain, and the
test checks the chain, the delivery class and row the table gives it, the
ToolResult the port then returns, and what really happened (ground truth:
marks and sandboxes). The chains are the facts the table is built on.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import e2b
import httpx
import pyqwest
import pytest
from connectrpc.errors import ConnectError

import sandrail
from sandrail.core._effects import Delivery, Effect, EffectFailure, Start, Wait
from sandrail.interpreters import _e2b_failures
from sandrail.interpreters._launcher_script import LAUNCHER_NAME, LEDGER
from sandrail.interpreters.e2b import FAILURE_TABLE, E2BBackend, classify_failure
from sandrail.local_e2b import LocalE2B, Route, WireFault, WireFaultKind, serve
from tests.e2b_world import as_root, needs_root, new_session, port_on, request, server_fixture
from tests.local_e2b_helpers import chain, wait_until

pytestmark = needs_root
server = server_fixture()


class Recording:
    """The backend, recording every failure it raised (with its SDK cause)."""

    asynchronous = True

    def __init__(self, inner: E2BBackend) -> None:
        self.inner = inner
        self.failures: list[tuple[Effect, EffectFailure]] = []

    async def __call__(self, effect: Effect) -> Any:
        try:
            return await self.inner(effect)
        except EffectFailure as failure:
            self.failures.append((effect, failure))
            raise

    def last(self, kind: type[Any]) -> EffectFailure:
        found = [f for effect, f in self.failures if isinstance(effect, kind)]
        assert found, f"no {kind.__name__} failed"
        return found[-1]


@pytest.fixture
def world(server: LocalE2B) -> Iterator[tuple[Recording, sandrail.ToolPort]]:
    """A fresh backend (a failure may mark its sandbox gone) and session."""
    with E2BBackend(**server.sdk_options, request_timeout_seconds=2) as backend:
        recording = Recording(backend)
        yield recording, port_on(recording, new_session())
    server.clear_faults()


def _run(port: sandrail.ToolPort, key: str, command: str, **more: Any) -> sandrail.ToolResult:
    return port.execute_sync(request(port, "run_command", key, command=command, **more))


def _warm(port: sandrail.ToolPort) -> str:
    """Make the sandbox and install the launcher; its id."""
    result = _run(port, f"warm-{uuid.uuid4().hex[:6]}", "true")
    assert result.status == "ok", result.content
    return str(result.content["sandbox_id"])


def _cause(failure: EffectFailure) -> BaseException:
    cause = failure.__cause__
    assert cause is not None
    return cause


def _row(failure: EffectFailure) -> tuple[Delivery, str]:
    delivery, row = classify_failure(_cause(failure))
    assert failure.delivery is delivery
    return delivery, row


def _marker() -> str:
    return f"m-{uuid.uuid4().hex[:10]}"


_START = " start "
"""Matches only the launcher's ``start`` call (the request body holds its command)."""


# -- connection dropped: maybe_sent -----------------------------------------


@pytest.mark.parametrize("kind", [WireFaultKind.DROP_BEFORE_READ, WireFaultKind.DROP_AFTER_EFFECT])
def test_row_connection_dropped_on_start_either_way_is_maybe_sent_and_a_retry_launches_once(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort], kind: WireFaultKind
) -> None:
    """Dropped before the request was read, or after its effect: the same raw
    ConnectError ← pyqwest.WriteError. The retry expects the claim; where the
    start never arrived, the epoch proof lets it launch (decisively). Where
    it arrived, the launcher may still be taking the staged request when the
    backend discards it: the discard takes it by the same rename, so the
    retry never finds a claim without its digest (it was a conflict, under
    load: ``test_e2b_epochs``)."""
    recording, port = world
    _warm(port)
    mark = _marker()
    server.inject(WireFault(kind=kind, route=Route.START, match=_START))
    lost = _run(port, "op", server.mark(mark))
    assert lost.status == "uncertain"
    failure = recording.last(Start)
    assert chain(_cause(failure)) == [ConnectError, pyqwest.WriteError]
    assert _row(failure) == (Delivery.MAYBE_SENT, "connection dropped")
    retry = _run(port, "op", server.mark(mark))
    assert retry.status == "ok", retry.content
    # After its effect, the launcher may or may not have taken the staged
    # request before the backend deleted it: deduplicated or not, once.
    if kind is WireFaultKind.DROP_BEFORE_READ:
        assert retry.content["deduplicated"] is False
    assert server.truth().marked(mark) == 1


def test_row_connection_dropped_on_create_finds_the_sandbox_again(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    recording, port = world
    before = len(server.truth().sandboxes)
    server.inject(WireFault(kind=WireFaultKind.DROP_AFTER_EFFECT, route=Route.CREATE))
    lost = _run(port, "op", "true")
    assert lost.status == "uncertain"
    failure = recording.last(sandrail.core.Ensure)
    assert chain(_cause(failure)) == [httpx.WriteError, pyqwest.WriteError]
    assert _row(failure) == (Delivery.MAYBE_SENT, "connection dropped")
    retry = _run(port, "op", "true")
    assert retry.status == "ok", retry.content
    made = server.truth().sandboxes[before:]
    assert [s.sandbox_id for s in made] == [retry.content["sandbox_id"]]


def test_row_connection_dropped_when_the_server_dies_mid_stream() -> None:
    with serve(signal_scope="process") as doomed, E2BBackend(**doomed.sdk_options) as backend:
        recording = Recording(backend)
        port = port_on(recording, new_session())
        _warm(port)
        doomed.inject(WireFault(kind=WireFaultKind.KILL_SERVER, route=Route.START, match=" wait "))
        result = _run(port, "op", "sleep 1")
        assert result.status == "uncertain"
        failure = recording.last(Wait)
        assert chain(_cause(failure)) == [
            e2b.SandboxUnreachableException,
            ConnectError,
            pyqwest.RemoteProtocolError,
        ]
        assert _row(failure) == (Delivery.MAYBE_SENT, "connection dropped")
        assert wait_until(lambda: not doomed.alive)


# -- connect failed: not_sent ---------------------------------------------------


def test_row_connect_failed_envd_refused_stop_and_read_are_errors(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    recording, port = world
    started = _run(port, "bg", "sleep 30", background=True)
    task = started.content["task_id"]
    server.refuse("envd")
    # The refusal resets the SDK's idle connections; on a loaded machine its
    # client may not have seen a reset yet, and a request written on such a
    # connection is "connection dropped" (rightly maybe_sent, not this row).
    # A moment lets it see them, so the stop opens a new connection.
    time.sleep(0.5)
    try:
        stop = port.execute_sync(request(port, "stop_command", "stop", task_id=task))
        read = port.execute_sync(request(port, "read_command_output", "read", task_id=task))
    finally:
        server.clear_faults()
    assert (stop.status, stop.content.get("executed")) == ("error", False), (
        stop.content,
        [f.detail for _, f in recording.failures],
    )
    assert read.status == "error"
    failure = recording.last(sandrail.core.Cancel)
    # The SDK retries the connection; past its timeout the outer exception
    # is a TimeoutException, with the same refused connection beneath.
    # (between them, the CancelledError of its timeout machinery).
    seen = chain(_cause(failure))
    assert seen[0] in (e2b.SandboxUnreachableException, e2b.TimeoutException)
    assert (seen[1], seen[-1]) == (ConnectError, ConnectionError)
    assert _row(failure) == (Delivery.NOT_SENT, "connect failed")
    still = port.execute_sync(request(port, "read_command_output", "again", task_id=task))
    assert still.content["command_status"] == "running"  # the refused stop did nothing


def test_row_connect_failed_control_plane_refused(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    _, port = world
    server.refuse("api")
    try:
        result = _run(port, "op", "true")

        async def create() -> BaseException:
            try:
                await e2b.AsyncSandbox.create(**server.sdk_options)
            except Exception as exc:  # the real chain is what the test inspects
                return exc
            raise AssertionError("create should fail")

        raised = asyncio.run(create())
    finally:
        server.clear_faults()
    assert (result.status, result.content["executed"]) == ("error", False)
    assert chain(raised) == [httpx.ConnectError, ConnectionError]
    assert classify_failure(raised) == (Delivery.NOT_SENT, "connect failed")


# -- refused by E2B: not_sent ---------------------------------------------------


def test_row_refused_by_e2b_429_on_start_launches_nothing(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    recording, port = world
    _warm(port)
    mark = _marker()
    server.inject(WireFault(kind=WireFaultKind.STATUS_429, route=Route.START, match=_START))
    refused = _run(port, "op", server.mark(mark))
    # Uncertain, not an error: the call had already ensured the sandbox (a
    # side effect). Nothing launched, and the retry launches decisively.
    assert refused.status == "uncertain"
    failure = recording.last(Start)
    assert chain(_cause(failure)) == [e2b.RateLimitException, ConnectError]
    assert _row(failure) == (Delivery.NOT_SENT, "refused by E2B")
    assert server.truth().marked(mark) == 0
    retry = _run(port, "op", server.mark(mark))
    assert (retry.status, retry.content["deduplicated"]) == ("ok", False)
    assert server.truth().marked(mark) == 1


def test_row_refused_by_e2b_429_on_create_and_a_bad_key(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    recording, port = world
    before = len(server.truth().sandboxes)
    server.inject(WireFault(kind=WireFaultKind.STATUS_429, route=Route.CREATE, times=4))
    refused = _run(port, "op", "true")
    assert (refused.status, refused.content["executed"]) == ("error", False)
    failure = recording.last(sandrail.core.Ensure)
    assert chain(_cause(failure)) == [e2b.RateLimitException]
    assert _row(failure) == (Delivery.NOT_SENT, "refused by E2B")
    assert len(server.truth().sandboxes) == before

    async def create() -> BaseException:
        try:
            await e2b.AsyncSandbox.create(
                api_key="e2b_" + "0" * 40, api_url=server.api_url, sandbox_url=server.sandbox_url
            )
        except Exception as exc:  # the real chain is what the test inspects
            return exc
        raise AssertionError("create should fail")

    raised = asyncio.run(create())
    assert chain(raised) == [e2b.AuthenticationException]
    assert classify_failure(raised) == (Delivery.NOT_SENT, "refused by E2B")


# -- the launcher's own refusals: not_sent ------------------------------------


def test_row_launcher_refused_its_arguments_when_its_request_is_gone(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    """A root process in the sandbox sweeps every staged request away as it
    appears, as the launcher's sweep does to a start that arrives too late
    (by an atomic rename, then a delete: a start takes a request whole or
    not at all): the launcher refuses before any claim. A sweep that lands
    while a request is being written leaves the files written after it
    without the digest (written first): refused as ``bad-request``, the
    same row (on a loaded machine the write is slow enough for that to
    happen often)."""
    recording, port = world
    sandbox_id = _warm(port)
    inbox = f"{LEDGER}/inbox"
    sweeper = (
        f"for i in $(seq 3000); do for d in {inbox}/[0-9a-f]*; do "
        f'mv -T "$d" {inbox}/.swept.$i 2>/dev/null && rm -rf {inbox}/.swept.$i; '
        "done; sleep 0.002; done >/dev/null 2>&1 &"
    )
    as_root(server, sandbox_id, sweeper)
    marks = [_marker() for _ in range(5)]
    outcomes = [_run(port, f"op-{n}", server.mark(mark)) for n, mark in enumerate(marks)]
    as_root(server, sandbox_id, "pkill -f 'seq 3000' ; true")
    starts = [f for effect, f in recording.failures if isinstance(effect, Start)]
    # no-request: the sweep took it first; bad-request: the start took it
    # while the sweep was deleting its files (no digest left).
    refusals = [f for f in starts if "no-request" in f.detail or "bad-request" in f.detail]
    assert refusals, [o.content for o in outcomes]
    failure = refusals[0]
    assert chain(_cause(failure)) == [e2b.CommandExitException]
    assert _row(failure) == (Delivery.NOT_SENT, "launcher refused its arguments")
    assert all(_row(f) == _row(failure) for f in refusals)
    # A sweep can also take the directory from under the write itself
    # (staging failed): not sent either.
    assert all(f.delivery is Delivery.NOT_SENT for f in starts), [f.detail for f in starts]
    truth = server.truth()
    for outcome, mark in zip(outcomes, marks, strict=True):
        assert outcome.status in ("ok", "uncertain")
        assert truth.marked(mark) == (outcome.status == "ok")
    assert sum(o.status == "uncertain" for o in outcomes) == len(starts)


def test_row_launcher_missing_is_not_sent_and_reinstalled(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    recording, port = world
    sandbox_id = _warm(port)
    as_root(server, sandbox_id, f"rm -f {LEDGER}/bin/{LAUNCHER_NAME}")
    mark = _marker()
    missing = _run(port, "op", server.mark(mark))
    assert missing.status == "uncertain"
    assert server.truth().marked(mark) == 0
    failure = recording.last(Start)
    assert chain(_cause(failure)) == [e2b.CommandExitException]
    assert getattr(_cause(failure), "exit_code", None) == 127
    assert _row(failure) == (Delivery.NOT_SENT, "launcher missing")
    retry = _run(port, "op", server.mark(mark))
    assert (retry.status, retry.content["deduplicated"]) == ("ok", False)
    assert server.truth().marked(mark) == 1


# -- cancelled inside the SDK: maybe_sent -------------------------------------


def test_row_cancelled_inside_the_sdk_is_not_taken_for_our_cancellation() -> None:
    """A ``CancelledError`` the SDK raises of its own (nobody cancelled our
    task) must not escape as a cancellation: it becomes an ordinary failure,
    classified maybe_sent. (No wire fault makes the SDK raise one on top; the
    real chains carry it at the bottom, under a timeout: see ``timed out``.)"""

    async def gives_up() -> None:
        raise asyncio.CancelledError

    async def call() -> BaseException:
        try:
            await _e2b_failures.sdk_call(gives_up())
        except Exception as exc:  # what the backend's handlers see
            return exc
        raise AssertionError("should fail")

    raised = asyncio.run(call())
    failure = _e2b_failures.classify(raised, "Start")
    assert failure.delivery is Delivery.MAYBE_SENT
    assert "cancelled inside the SDK" in failure.detail


# -- sandbox not found: maybe_sent ------------------------------------------------


def test_row_sandbox_not_found_502_on_start_is_maybe_sent(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    recording, port = world
    _warm(port)
    server.inject(
        WireFault(kind=WireFaultKind.STATUS_502_NOT_FOUND, route=Route.START, match=_START)
    )
    result = _run(port, "op", "true")
    assert result.status == "uncertain"
    failure = recording.last(Start)
    assert chain(_cause(failure)) == [e2b.SandboxNotRunningException, ConnectError]
    assert _row(failure) == (Delivery.MAYBE_SENT, "sandbox not found")


def test_row_sandbox_not_found_when_killed_mid_wait(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    recording, port = world
    sandbox_id = _warm(port)
    results: list[sandrail.ToolResult] = []
    waiting = threading.Thread(target=lambda: results.append(_run(port, "op", "sleep 30")))
    waiting.start()
    time.sleep(1)
    e2b.Sandbox.kill(sandbox_id, **server.sdk_options)
    waiting.join(30)
    assert results[0].status == "uncertain"
    failure = recording.last(Wait)
    assert chain(_cause(failure)) == [e2b.SandboxNotRunningException, ConnectError]
    assert _row(failure) == (Delivery.MAYBE_SENT, "sandbox not found")
    again = _run(port, "later", "true")  # never a second sandbox for the session
    assert (again.status, again.content["executed"]) == ("error", False)


def test_c6_one_502_on_a_read_does_not_make_a_live_sandbox_dead(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    """A single 502 "not found" on a read of
    another task (a proxy's answer; the sandbox lives) made the backend
    believe the sandbox dead for good: the retry of a key that had run said
    "nothing ran, may be retried" and new keys failed. One answer is not a
    death: the next call asks the control plane again, and the retry
    deduplicates (C2) while the sandbox still shows ready."""
    _recording, port = world
    mark = _marker()
    first = _run(port, "op", server.mark(mark))
    assert first.status == "ok", first.content
    background = _run(port, "bg", "sleep 5", background=True)
    assert background.status == "ok", background.content
    server.inject(
        WireFault(
            kind=WireFaultKind.STATUS_502_NOT_FOUND, route=Route.START, match=" read ", times=1
        )
    )
    read = port.execute_sync(
        request(port, "read_command_output", "read", task_id=background.content["task_id"])
    )
    assert read.status == "error", read.content  # a read that fails: nothing changed
    server.clear_faults()
    retry = _run(port, "op", server.mark(mark))
    assert (retry.status, retry.content["deduplicated"]) == ("ok", True), retry.content
    assert _run(port, "new", "true").status == "ok"
    status = port.execute_sync(request(port, "sandbox_status", "status"))
    assert status.content["sandbox_phase"] == "ready", status.content
    assert server.truth().marked(mark) == 1


def test_c6_retries_of_a_key_that_ran_in_a_killed_sandbox_stay_uncertain(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    """After the sandbox was really killed, the
    first retry was ``uncertain`` and the next ones said "nothing ran, may be
    retried" (``executed: false``), which is false: the command ran. Every
    retry of that key stays ``uncertain`` with its locator; a new key is
    ``error`` (no second sandbox for the session), truthfully."""
    _recording, port = world
    mark = _marker()
    first = _run(port, "op", server.mark(mark))
    assert first.status == "ok", first.content
    e2b.Sandbox.kill(first.content["sandbox_id"], **server.sdk_options)
    for attempt in range(3):
        retry = port.execute_sync(
            request(
                port, "run_command", "op", call_id=f"retry-{attempt}", command=server.mark(mark)
            )
        )
        assert retry.status == "uncertain", (attempt, retry.content)
        assert "executed" not in retry.content
        assert retry.content["sandbox_id"] == first.content["sandbox_id"]
    fresh = _run(port, "new", "true")
    assert (fresh.status, fresh.content["executed"]) == ("error", False)
    assert server.truth().marked(mark) == 1


# -- unreachable mid-request: maybe_sent -------------------------------------------


@pytest.mark.parametrize("call", [_START, " wait "])
def test_row_unreachable_mid_request_stream_cut(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort], call: str
) -> None:
    recording, port = world
    _warm(port)
    mark = _marker()
    server.inject(WireFault(kind=WireFaultKind.CUT_STREAM, route=Route.START, match=call))
    cut = _run(port, "op", f"sleep 0.3; {server.mark(mark)}")
    assert cut.status == "uncertain"
    failure = recording.last(Start if call == _START else Wait)
    assert chain(_cause(failure)) == [e2b.SandboxUnreachableException]
    assert _row(failure) == (Delivery.MAYBE_SENT, "unreachable mid-request")
    retry = _run(port, "op", f"sleep 0.3; {server.mark(mark)}")
    assert retry.status == "ok", retry.content
    if call == " wait ":
        assert retry.content["deduplicated"] is True
    assert server.truth().marked(mark) == 1


# -- timed out: maybe_sent -----------------------------------------------------------


def test_row_timed_out_start_answered_after_the_request_timeout(
    server: LocalE2B, world: tuple[Recording, sandrail.ToolPort]
) -> None:
    recording, port = world
    _warm(port)
    mark = _marker()
    server.inject(WireFault(kind=WireFaultKind.DELAY, route=Route.START, match=_START, seconds=3))
    late = _run(port, "op", server.mark(mark))
    assert late.status == "uncertain"
    failure = recording.last(Start)
    seen = chain(_cause(failure))
    assert seen[:2] == [e2b.TimeoutException, ConnectError]
    assert seen[-1] is asyncio.CancelledError
    assert _row(failure) == (Delivery.MAYBE_SENT, "timed out")
    retry = _run(port, "op", server.mark(mark))
    assert retry.status == "ok", retry.content
    assert server.truth().marked(mark) == 1


def test_row_timed_out_create_answered_late_finds_the_same_sandbox(server: LocalE2B) -> None:
    """The SDK gives up on a create at twice its request timeout; the
    server made the sandbox anyway; the retry finds that one."""
    with E2BBackend(**server.sdk_options, request_timeout_seconds=1) as backend:
        recording = Recording(backend)
        port = port_on(recording, new_session())
        before = len(server.truth().sandboxes)
        server.inject(WireFault(kind=WireFaultKind.DELAY, route=Route.CREATE, seconds=2.5))
        late = _run(port, "op", "true")
        assert late.status == "uncertain"
        failure = recording.last(sandrail.core.Ensure)
        assert chain(_cause(failure)) == [httpx.ReadTimeout, TimeoutError, asyncio.CancelledError]
        assert _row(failure) == (Delivery.MAYBE_SENT, "timed out")
        assert wait_until(lambda: len(server.truth().sandboxes) > before)
        retry = _run(port, "op", "true")
    assert retry.status == "ok", retry.content
    made = server.truth().sandboxes[before:]
    assert [s.sandbox_id for s in made] == [retry.content["sandbox_id"]]


def test_row_timed_out_server_deadline(server: LocalE2B) -> None:
    """The server ends a command at its deadline (the async SDK does not
    enforce it): the real chain is TimeoutException alone."""

    async def run() -> BaseException:
        box = await e2b.AsyncSandbox.create(**server.sdk_options)
        try:
            await box.commands.run("sleep 5", timeout=1)
        except Exception as exc:  # the real chain is what the test inspects
            return exc
        finally:
            await box.kill()
        raise AssertionError("the deadline should end it")

    raised = asyncio.run(run())
    assert chain(raised) == [e2b.TimeoutException]
    assert classify_failure(raised) == (Delivery.MAYBE_SENT, "timed out")


# -- the table itself --------------------------------------------------------------


def test_every_row_has_its_wire_test() -> None:
    names = {name for name in globals() if name.startswith("test_row_")}
    for rule in FAILURE_TABLE:
        slug = rule.name.replace(" ", "_").replace("-", "_").lower()
        slug = {"refused_by_e2b": "refused_by_e2b"}.get(slug, slug)
        assert any(name.startswith(f"test_row_{slug}") for name in names), rule.name


def test_the_module_doc_lists_the_rows_in_order_with_their_delivery() -> None:
    doc = _e2b_failures.__doc__ or ""
    listed = re.findall(r"^- ``([^`]+)``: (not_sent|maybe_sent)\.", doc, re.MULTILINE)
    assert listed == [(rule.name, rule.delivery.value) for rule in FAILURE_TABLE]
