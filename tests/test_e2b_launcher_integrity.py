"""The launcher against what root can do to its ledger (C2, C3) and against
commands it claims but cannot begin (C7). Real bash, real users, the
unmodified SDK on local-e2b; launches counted by marks in the server's
ground truth.

C2: any partial deletion of the ledger voids its epoch (the seal names the
epoch and counts its claims), so a retry whose claim is gone is
``uncertain`` (``claim_lost``), never a second launch, and a claim that lost
its digest is never read as another request's (no false conflict).

C7: ``ok`` for a launch means the user's command began. A cwd that ``user``
cannot enter, or an exec Linux refuses as too big, is a decisive
``error`` with ``executed: false`` on the first start and on every retry
(the claim is consumed), and no launcher internals reach any result.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

import sandrail
from sandrail.core import OwnedCommand
from sandrail.core._effects import Ensure, SandboxReady, Started, StartRefused
from sandrail.interpreters._e2b_answers import NOT_STARTED_REFUSAL, parse_start
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B
from tests.e2b_world import (
    LEDGER,
    TASK,
    as_root,
    needs_root,
    new_session,
    port_on,
    request,
    run,
    server_fixture,
    start,
    wait,
)

pytestmark = needs_root
server = server_fixture()

_EVIDENCE_INCOMPLETE = "e2b_command_evidence_incomplete"
_NOT_STARTED_ERROR = "e2b_command_not_started"
"""What the core makes of :data:`NOT_STARTED_REFUSAL`."""


@pytest.fixture
def backend(server: LocalE2B) -> Any:
    with E2BBackend(**server.sdk_options, request_timeout_seconds=10) as fresh:
        yield fresh
    server.clear_faults()


def _mark() -> str:
    return f"i-{uuid.uuid4().hex[:10]}"


def _durable_port(backend: E2BBackend, session: str) -> sandrail.ToolPort:
    durable: dict[str, OwnedCommand] = {}
    return port_on(
        backend,
        session,
        resolve_owned_command=lambda request, task: durable.get(task),
        remember_owned_command=lambda request, owned: durable.__setitem__(owned.task_id, owned),
    )


def _no_internals(result: sandrail.ToolResult) -> None:
    text = json.dumps(result.content)
    assert "sandrail:" not in text, text
    assert "line " not in text, text


# -- C2: a partly deleted ledger voids its epoch ---------------------------------

_PARTIAL_WIPES = [
    # What the outside attack ran (the claim gone, the claim log emptied).
    (f"rm -rf {LEDGER}/*/*", "uncertain"),
    (f"rm -rf {LEDGER}/tasks/* {LEDGER}/claims.*/*", "uncertain"),
    # Every file: the claim's digest too (a false conflict before).
    (f"find {LEDGER} -type f -delete", "uncertain"),
    (f"rm -rf {LEDGER}/tasks/* {LEDGER}/seal", "uncertain"),
    # Only the seal: the claim is whole, so the retry is still decisive.
    (f"rm -f {LEDGER}/seal", "ok"),
]


@pytest.mark.parametrize(("wipe", "retried"), _PARTIAL_WIPES)
def test_c2_any_partial_deletion_of_the_ledger_voids_its_epoch_and_no_retry_relaunches(
    server: LocalE2B, backend: E2BBackend, wipe: str, retried: str
) -> None:
    """The outside attack's wipes (root in the sandbox, a template with
    sudo): a retry with the same key whose claim is gone or damaged is
    ``uncertain``, never a second launch and never a false conflict; one
    whose claim is whole is deduplicated; the ledger gets a new epoch."""
    session = new_session()
    port = _durable_port(backend, session)
    mark = _mark()
    command = f"{server.mark(mark)}; echo hi"
    first = port.execute_sync(request(port, "run_command", "op", command=command))
    assert first.status == "ok", first.content
    sandbox_id = first.content["sandbox_id"]
    ensure = Ensure(session_id=session, owner_key=port.settings.owner_key)
    before = run(backend(ensure))
    assert isinstance(before, SandboxReady)
    assert before.sandbox_id == sandbox_id
    as_root(server, sandbox_id, wipe)
    for _ in range(3):
        retry = port.execute_sync(request(port, "run_command", "op", command=command))
        assert retry.status == retried, retry.content
        if retried == "uncertain":
            assert retry.content["error_type"] == _EVIDENCE_INCOMPLETE, retry.content
        else:
            assert retry.content["deduplicated"] is True, retry.content
    assert server.truth().marked(mark) == 1
    after = run(backend(ensure))
    assert isinstance(after, SandboxReady)
    assert after.ledger_epoch is not None
    assert after.ledger_epoch != before.ledger_epoch
    # The backend heard the new epoch: a new key launches, decisively.
    fresh = port.execute_sync(request(port, "run_command", "op-2", command="echo again"))
    assert (fresh.status, fresh.content.get("stdout")) == ("ok", "again\n"), fresh.content


def test_c2_one_claim_log_entry_deleted_voids_the_epoch_for_every_task(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """The seal counts the claims: a log with fewer entries than counted
    proves nothing, so even a task whose entry is gone (its directory too)
    is ``claim_lost`` under its old epoch."""
    session = new_session()
    ready = run(backend(Ensure(session_id=session, owner_key="o1")))
    assert isinstance(ready, SandboxReady)
    mark = _mark()
    outcome = start(backend, ready.sandbox_id, server.mark(mark), claim_epoch=ready.ledger_epoch)
    assert isinstance(outcome, Started)
    wait(backend, ready.sandbox_id)
    as_root(server, ready.sandbox_id, f"rm -rf {LEDGER}/tasks/{TASK} {LEDGER}/claims.*/{TASK}")
    retry = start(
        backend,
        ready.sandbox_id,
        server.mark(mark),
        expect_claim=True,
        claim_epoch=ready.ledger_epoch,
    )
    assert retry == StartRefused(reason="claim_lost")
    assert server.truth().marked(mark) == 1


def test_c3_a_claim_that_lost_its_digest_is_claim_lost_not_a_conflict(
    server: LocalE2B, backend: E2BBackend
) -> None:
    ready = run(backend(Ensure(session_id=new_session(), owner_key="o1")))
    assert isinstance(ready, SandboxReady)
    assert isinstance(start(backend, ready.sandbox_id, "true"), Started)
    wait(backend, ready.sandbox_id)
    as_root(server, ready.sandbox_id, f"rm -f {LEDGER}/tasks/{TASK}/digest")
    for digest in ("d1", "d2"):
        refused = start(
            backend,
            ready.sandbox_id,
            "true",
            request_digest=digest,
            expect_claim=True,
            claim_epoch=ready.ledger_epoch,
        )
        assert refused == StartRefused(reason="claim_lost"), digest


# -- C7: ok means the user's command began ------------------------------------------


def test_c7_parse_start_reads_a_claimed_command_that_could_not_begin() -> None:
    epoch = "0123456789abcdef" * 2
    for why in ("cwd", "e2big"):
        answer = parse_start(f"refused not_started {why}\nepoch {epoch}\n", TASK)
        assert (answer.outcome, answer.not_started, answer.epoch) == (
            NOT_STARTED_REFUSAL,
            why,
            epoch,
        )


@pytest.mark.parametrize(
    ("prepare", "cwd"),
    [
        ("", "/does/not/exist"),
        ("echo x > /tmp/a-file", "/tmp/a-file"),
        ("mkdir -p /root/closed && chmod 700 /root/closed", "/root/closed"),
        ("", "relative/missing"),
    ],
)
@pytest.mark.parametrize("background", [False, True])
def test_c7_a_cwd_user_cannot_enter_is_an_error_that_ran_nothing_on_every_retry(
    server: LocalE2B, backend: E2BBackend, prepare: str, cwd: str, background: bool
) -> None:
    session = new_session()
    port = _durable_port(backend, session)
    warm = port.execute_sync(request(port, "run_command", "warm", command="true"))
    assert warm.status == "ok", warm.content
    if prepare:
        as_root(server, warm.content["sandbox_id"], prepare)
    mark = _mark()
    arguments: dict[str, Any] = {"command": f"{server.mark(mark)}; echo hi", "cwd": cwd}
    if background:
        arguments["background"] = True
    for _ in range(2):
        result = port.execute_sync(request(port, "run_command", "op", **arguments))
        assert result.status == "error", result.content
        assert result.content["executed"] is False
        assert result.content["error_type"] == _NOT_STARTED_ERROR
        _no_internals(result)
    assert server.truth().marked(mark) == 0


def test_c7_an_exec_too_big_for_linux_is_an_error_that_ran_nothing_on_every_retry(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """The schema's largest env is far over Linux's limit for one exec."""
    session = new_session()
    port = _durable_port(backend, session)
    mark = _mark()
    env = {f"V{index}": "x" * 32_000 for index in range(120)}
    command = f"{server.mark(mark)}; echo hi"
    for _ in range(2):
        result = port.execute_sync(request(port, "run_command", "op", command=command, env=env))
        assert result.status == "error", result.content
        assert result.content["executed"] is False
        _no_internals(result)
    assert server.truth().marked(mark) == 0


def test_c7_a_large_env_that_linux_can_exec_still_runs_once(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """The exec probe (over 16,384 characters) refuses only what Linux
    refuses."""
    port = _durable_port(backend, new_session())
    env = {f"V{index}": "y" * 1_000 for index in range(40)}
    result = port.execute_sync(
        request(port, "run_command", "op", command='printf %s "${#V39}"', env=env)
    )
    assert (result.status, result.content["stdout"]) == ("ok", "1000"), result.content


def test_c7_a_command_that_fails_its_own_cd_is_ok_with_its_exit_code(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """Only the launcher's start is judged: a command that began and then
    failed is the command's outcome."""
    port = _durable_port(backend, new_session())
    result = port.execute_sync(request(port, "run_command", "op", command="cd /does/not/exist"))
    assert (result.status, result.content["exit_code"]) == ("ok", 1), result.content


def test_c7_the_backend_maps_a_start_that_could_not_begin_to_the_not_started_refusal(
    server: LocalE2B, backend: E2BBackend
) -> None:
    ready = run(backend(Ensure(session_id=new_session(), owner_key="o1")))
    assert isinstance(ready, SandboxReady)
    mark = _mark()
    for _ in range(2):
        outcome = start(backend, ready.sandbox_id, server.mark(mark), cwd="/nowhere")
        assert outcome == NOT_STARTED_REFUSAL
    assert server.truth().marked(mark) == 0
