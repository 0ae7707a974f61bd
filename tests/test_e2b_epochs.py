"""C2 on E2B by ledger epochs carried in the effects: ``Ensure`` reports the
launcher's epoch, every ``Start`` carries the epoch its task's first start
may have left under, and the launcher compares them under its lock (the
simulator's ``_never_claimed`` is the reference). Also the staging and claim
races the flaky failure-table tests came from. Real bash, real users, the
unmodified SDK on local-e2b; launches counted by marks in the server's
ground truth.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import uuid
from typing import Any

import e2b
import pytest

import sandrail
from sandrail.core import OwnedCommand
from sandrail.core._effects import Ensure, SandboxReady, Start, Started, StartRefused
from sandrail.interpreters._launcher_script import LAUNCHER_NAME, LEDGER
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B, Route, WireFault, WireFaultKind
from tests.e2b_world import (
    TASK,
    as_root,
    needs_root,
    new_session,
    port_on,
    request,
    run,
    server_fixture,
    start_fields,
    wait,
)

pytestmark = needs_root
server = server_fixture()

_EPOCH = re.compile(r"[0-9a-f]{32}")
_WIPE = f"rm -rf {LEDGER}/tasks {LEDGER}/claims.*"
"""What a root command can do to the ledger (the launcher itself stays)."""


@pytest.fixture
def backend(server: LocalE2B) -> Any:
    with E2BBackend(**server.sdk_options, request_timeout_seconds=5) as fresh:
        yield fresh
    server.clear_faults()


def _ready(backend: E2BBackend, session: str) -> SandboxReady:
    ready = run(backend(Ensure(session_id=session, owner_key="o1")))
    assert isinstance(ready, SandboxReady)
    return ready


def _start(backend: E2BBackend, sandbox_id: str, command: str, **extra: Any) -> Any:
    outcome = run(backend(Start(**start_fields(sandbox_id, command, **extra))))
    assert isinstance(outcome, Started | StartRefused)
    return outcome


def _mark() -> str:
    return f"e-{uuid.uuid4().hex[:10]}"


def _task() -> str:
    return secrets.token_hex(32)


def test_c2_ensure_reports_the_ledger_epoch_which_changes_only_when_the_ledger_is_lost(
    server: LocalE2B, backend: E2BBackend
) -> None:
    session = new_session()
    first = _ready(backend, session)
    assert first.ledger_epoch is not None
    assert _EPOCH.fullmatch(first.ledger_epoch)
    assert isinstance(_start(backend, first.sandbox_id, "true"), Started)
    wait(backend, first.sandbox_id)
    assert _ready(backend, session).ledger_epoch == first.ledger_epoch
    as_root(server, first.sandbox_id, _WIPE)
    # The next answer of the launcher tells the backend (a read, here).
    wait(backend, first.sandbox_id, _task(), seconds=0)
    after = _ready(backend, session).ledger_epoch
    assert after is not None
    assert after != first.ledger_epoch
    with E2BBackend(**server.sdk_options) as restarted:
        assert _ready(restarted, session).ledger_epoch == after


def test_c2_a_start_without_its_claim_launches_only_under_the_current_claim_epoch(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """The launcher's rule, as the simulator's ``_never_claimed`` states it."""
    ready = _ready(backend, new_session())
    sandbox_id, epoch = ready.sandbox_id, ready.ledger_epoch
    stale = "0" * 32
    cases = [
        ({"expect_claim": False, "claim_epoch": None}, True),
        ({"expect_claim": False, "claim_epoch": epoch}, True),
        ({"expect_claim": True, "claim_epoch": epoch}, True),
        ({"expect_claim": True, "claim_epoch": None}, False),
        ({"expect_claim": True, "claim_epoch": stale}, False),
        ({"expect_claim": False, "claim_epoch": stale}, False),
        ({"expect_claim": True, "claim_epoch": "not-an-epoch"}, False),
    ]
    for fields, launches in cases:
        mark = _mark()
        outcome = _start(backend, sandbox_id, server.mark(mark), task_id=_task(), **fields)
        if launches:
            assert isinstance(outcome, Started), (fields, outcome)
            assert outcome.first_launch, (fields, outcome)
        else:
            assert outcome == StartRefused(reason="claim_lost"), (fields, outcome)
        assert server.truth().marked(mark) == 0 or launches


def test_c2_a_task_logged_without_its_directory_stays_claim_lost_for_any_start(
    server: LocalE2B, backend: E2BBackend
) -> None:
    ready = _ready(backend, new_session())
    assert isinstance(_start(backend, ready.sandbox_id, "true"), Started)
    wait(backend, ready.sandbox_id)
    as_root(server, ready.sandbox_id, f"rm -rf {LEDGER}/tasks/{TASK}")
    for fields in ({"expect_claim": False}, {"claim_epoch": ready.ledger_epoch}):
        refused = _start(backend, ready.sandbox_id, "true", **fields)
        assert refused == StartRefused(reason="claim_lost")


def test_c2_a_late_copy_of_a_first_start_after_the_ledger_was_lost_never_launches(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """A double launch: the first start is held in
    the network, its retry (expecting the claim) launches, a command wipes
    the ledger, then the held first start arrives. It carries the epoch it
    was sent under, which the ledger no longer has: nothing launches."""
    ready = _ready(backend, new_session())
    mark = _mark()
    command = server.mark(mark)
    first = Start(**start_fields(ready.sandbox_id, command, claim_epoch=ready.ledger_epoch))
    retry = _start(
        backend, ready.sandbox_id, command, expect_claim=True, claim_epoch=ready.ledger_epoch
    )
    assert isinstance(retry, Started)
    assert retry.first_launch
    wait(backend, ready.sandbox_id)
    as_root(server, ready.sandbox_id, _WIPE)
    assert run(backend(first)) == StartRefused(reason="claim_lost")
    assert server.truth().marked(mark) == 1


def test_c2_a_restarted_harness_with_a_durable_record_launches_a_start_that_never_arrived(
    server: LocalE2B,
) -> None:
    """The epoch is in the durable record, not in the backend: a new backend
    (a restarted harness) proves the first start never arrived and
    launches, decisively."""
    durable: dict[str, OwnedCommand] = {}

    def harness(backend: E2BBackend) -> sandrail.ToolPort:
        return port_on(
            backend,
            session,
            resolve_owned_command=lambda request, task: durable.get(task),
            remember_owned_command=lambda request, owned: durable.__setitem__(owned.task_id, owned),
        )

    session = new_session()
    mark = _mark()
    with E2BBackend(**server.sdk_options, request_timeout_seconds=2) as first:
        port = harness(first)
        warm = port.execute_sync(request(port, "run_command", "warm", command="true"))
        assert warm.status == "ok", warm.content
        fault = WireFault(kind=WireFaultKind.DROP_BEFORE_READ, route=Route.START, match=" start ")
        with server.fault(fault):
            lost = port.execute_sync(request(port, "run_command", "op", command=server.mark(mark)))
        assert lost.status == "uncertain", lost.content
    (owned,) = [record for record in durable.values() if record.operation_key == "op"]
    assert owned.launched
    assert owned.ledger_epoch is not None
    with E2BBackend(**server.sdk_options, request_timeout_seconds=2) as restarted:
        port = harness(restarted)
        retry = port.execute_sync(request(port, "run_command", "op", command=server.mark(mark)))
    assert (retry.status, retry.content["deduplicated"]) == ("ok", False), retry.content
    assert server.truth().marked(mark) == 1


# -- the races behind the flaky failure-table tests -------------------------------


def _launcher(server: LocalE2B, sandbox_id: str) -> tuple[Any, str]:
    box = e2b.Sandbox.connect(sandbox_id, **server.sdk_options)
    return box, f"bash {LEDGER}/bin/{LAUNCHER_NAME}"


def _stage(box: Any, task: str, nonce: int, digest: str) -> None:
    staged = f"{LEDGER}/inbox/{task}.{nonce}"
    fields = [("digest", digest), ("command", "true"), ("timeout", "30")]
    fields += [(f"padding-{n}", "x") for n in range(16)]  # a slower file-by-file delete
    box.files.write_files([{"path": f"{staged}/{k}", "data": v} for k, v in fields], user="root")


def test_c2_c3_a_discard_racing_its_start_never_leaves_a_claim_without_its_digest(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """Root cause of the flake: a start whose answer was lost had its staged
    request deleted file by file by the files API while the launcher, still
    running, took it; the claim lacked its digest, and the retry read as a
    conflict (7 of 40 such races on the old design). Now only the
    launcher's own rename takes a request: the start gets it whole or not
    at all. Bounded: 20 races."""
    ready = _ready(backend, new_session())
    box, launcher = _launcher(server, ready.sandbox_id)
    digest = "d" * 64
    seen: dict[str, int] = {}

    async def race(task: str, nonce: int) -> str:
        async_box = await e2b.AsyncSandbox.connect(ready.sandbox_id, **server.sdk_options)

        async def call(what: str) -> str:
            try:
                result = await async_box.commands.run(
                    f"{launcher} {what} {task} {nonce}", user="root", timeout=30
                )
            except e2b.CommandExitException as exc:
                return str(exc.stdout).strip()
            return str(result.stdout).split("\n")[0]

        started, discarded = await asyncio.gather(call("start"), call("discard"))
        assert discarded == "discarded"
        return started

    for _ in range(20):
        task, nonce = _task(), secrets.randbits(40)
        _stage(box, task, nonce, digest)
        answer = run(race(task, nonce))
        seen[answer] = seen.get(answer, 0) + 1
        kept = as_root(server, ready.sandbox_id, f"cat {LEDGER}/tasks/{task}/digest 2>&1; true")
        if answer == "started 1":
            assert kept.strip() == digest
        else:
            assert answer == "sandrail-error no-request", answer
            assert "No such file" in kept
    assert set(seen) <= {"started 1", "sandrail-error no-request"}


def test_c2_a_launcher_killed_at_any_moment_leaves_each_claim_whole_or_absent(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """A claim is built in the taken request and renamed into place: killed
    anywhere (a deadline, SIGKILL), the launcher leaves either no claim, or
    one with its digest and command. Bounded: 24 kills at spread moments."""
    ready = _ready(backend, new_session())
    box, launcher = _launcher(server, ready.sandbox_id)
    digest = "e" * 64
    for n in range(24):
        task, nonce = _task(), secrets.randbits(40)
        _stage(box, task, nonce, digest)
        delay = f"0.{n * 2:03d}"
        as_root(
            server,
            ready.sandbox_id,
            f"{launcher} start {task} {nonce} >/dev/null 2>&1 & sleep {delay}; kill -KILL $!; "
            "wait; true",
        )
        claim = as_root(
            server,
            ready.sandbox_id,
            f"cd {LEDGER}/tasks/{task} 2>/dev/null && cat digest command; true",
        )
        assert claim in ("", f"{digest}true"), (delay, claim)
