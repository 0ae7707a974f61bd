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
import threading
import uuid
from typing import Any

import pytest

import sandrail
from sandrail.core import OwnedCommand
from sandrail.core._effects import Ensure, SandboxReady, Started, StartRefused
from sandrail.interpreters._launcher_answers import NOT_STARTED_REFUSAL, parse_start
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
    # What a wipe runs (the claim gone, the claim log emptied).
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
    """Wipes of the ledger (root in the sandbox, a template with
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


# -- C6, C7: never ok for output that is not there -----------------------------------

_OUT, _ERR = "out-1\n", "err-22\n"
_PRINTS = f"printf {_OUT!r}; printf {_ERR!r} >&2"
"""A command whose two streams differ in size (a swap would show)."""

_DAMAGE = {
    # Root deletes one claim's output files.
    "stdout-deleted": "rm -f {task}/stdout",
    "stderr-deleted": "rm -f {task}/stderr",
    "both-deleted": "rm -f {task}/stdout {task}/stderr",
    # Or cuts one below the size it had when the command ended (the exit
    # record keeps those sizes).
    "stdout-emptied": ": > {task}/stdout",
    "stderr-cut": "truncate -s 2 {task}/stderr",
    "stdout-replaced-by-a-shorter-file": "printf o > {task}/new && mv -f {task}/new {task}/stdout",
}


class _Harness:
    """A harness whose ownership record survives its restarts: each
    :meth:`port` is a new backend (a new harness process) on the same
    durable record."""

    def __init__(self, server: LocalE2B) -> None:
        self.server = server
        self.session = new_session()
        self.durable: dict[str, OwnedCommand] = {}

    def call(self, tool: str, key: str, **arguments: Any) -> sandrail.ToolResult:
        with E2BBackend(**self.server.sdk_options, request_timeout_seconds=30) as restarted:
            port = port_on(
                restarted,
                self.session,
                resolve_owned_command=lambda request, task: self.durable.get(task),
                remember_owned_command=lambda request, owned: self.durable.__setitem__(
                    owned.task_id, owned
                ),
            )
            return port.execute_sync(request(port, tool, key, **arguments))


def _task_dir(result: sandrail.ToolResult) -> str:
    return f"{LEDGER}/tasks/{result.content['task_id']}"


def _sized(server: LocalE2B, result: sandrail.ToolResult) -> None:
    """Until the launched task's exit record holds the streams' final sizes
    (the supervisor adds them a moment after the command ended; a cut made
    before cannot be told from the command's own output). Bounded: 30 s,
    then the test fails saying so (a loaded machine can take seconds)."""
    said = as_root(
        server,
        result.content["sandbox_id"],
        "for i in $(seq 600); do "
        f'read -r s c o e < {_task_dir(result)}/exit 2>/dev/null; [ -n "$e" ] && break; '
        'sleep 0.05; done; [ -n "$e" ] && echo sized || echo unsized',
    )
    assert said.strip() == "sized", "the exit record never got the streams' sizes"


def _uncertain(result: sandrail.ToolResult) -> None:
    assert result.status == "uncertain", result.content
    assert result.content["error_type"] == _EVIDENCE_INCOMPLETE, result.content
    assert result.content["evidence_incomplete"] is True
    assert "stdout" not in result.content
    assert "stderr" not in result.content


@pytest.mark.parametrize("damage", sorted(_DAMAGE))
def test_c6_a_retry_after_roots_deleted_output_file_is_uncertain_not_ok(
    server: LocalE2B, damage: str
) -> None:
    """Root deletes (or cuts) one claim's output, and a
    restarted harness retries the key. The output existed and is gone, so
    the retry, a read and a stop of the task are ``uncertain``
    (evidence incomplete), never ``ok`` with empty or partial output; and
    nothing launches again (C2)."""
    harness = _Harness(server)
    mark = _mark()
    command = f"{server.mark(mark)}; {_PRINTS}"
    first = harness.call("run_command", "op", command=command)
    assert (first.status, first.content["stdout"], first.content["stderr"]) == ("ok", _OUT, _ERR)
    _sized(server, first)
    as_root(server, first.content["sandbox_id"], _DAMAGE[damage].format(task=_task_dir(first)))
    for attempt in range(2):
        _uncertain(harness.call("run_command", "op", command=command, call_id=f"retry-{attempt}"))
    _uncertain(harness.call("read_command_output", "read", task_id=first.content["task_id"]))
    _uncertain(harness.call("stop_command", "stop", task_id=first.content["task_id"]))
    assert server.truth().marked(mark) == 1


def test_c7_the_same_harness_answers_a_retry_from_the_output_it_saw_never_empty(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """A backend keeps an ended command's whole output once it has seen it
    (it can no longer change): a retry after root deleted the files is
    answered from that, the command's true output, deduplicated."""
    port = _durable_port(backend, new_session())
    command = f"{_PRINTS}"
    first = port.execute_sync(request(port, "run_command", "op", command=command))
    assert first.status == "ok", first.content
    as_root(server, first.content["sandbox_id"], f"rm -f {_task_dir(first)}/stdout")
    retry = port.execute_sync(request(port, "run_command", "op", command=command))
    assert (retry.status, retry.content["deduplicated"]) == ("ok", True), retry.content
    assert (retry.content["stdout"], retry.content["stderr"]) == (_OUT, _ERR)


@pytest.mark.parametrize("damage", ["stdout-deleted", "stderr-cut"])
def test_c6_the_same_harness_never_reports_output_it_did_not_see_after_root_damaged_it(
    server: LocalE2B, backend: E2BBackend, damage: str
) -> None:
    """Output the backend never held whole (too big for a wait to bring
    back; a background command never read) is read from the sandbox again:
    once root deleted or cut it, the foreground retry and the reads are
    ``uncertain``. A background retry still acknowledges its one launch
    (``ok``, deduplicated), with the state ``unknown``."""
    port = _durable_port(backend, new_session())
    big = "head -c 40000 /dev/zero | tr '\\0' o; head -c 40000 /dev/zero | tr '\\0' e >&2"
    first = port.execute_sync(request(port, "run_command", "big", command=big))
    assert (first.status, first.content["stdout_bytes"]) == ("ok", 40_000), first.content
    background = port.execute_sync(
        request(port, "run_command", "bg", command=_PRINTS, background=True)
    )
    assert background.status == "ok", background.content
    for launched in (first, background):
        _sized(server, launched)
        as_root(
            server, launched.content["sandbox_id"], _DAMAGE[damage].format(task=_task_dir(launched))
        )
    _uncertain(port.execute_sync(request(port, "run_command", "big", command=big)))
    for launched in (first, background):
        _uncertain(
            port.execute_sync(
                request(port, "read_command_output", "read", task_id=launched.content["task_id"])
            )
        )
    again = port.execute_sync(request(port, "run_command", "bg", command=_PRINTS, background=True))
    assert again.status == "ok", again.content
    assert (again.content["deduplicated"], again.content["command_status"]) == (True, "unknown")


def test_c6_an_exit_record_without_sizes_is_still_read(server: LocalE2B) -> None:
    """Launchers before this one wrote ``<status> <code>`` alone, and a
    sandbox keeps its ledger across launcher versions (and the sizes join
    a record a moment after it is written): such a record is read as before
    (no size to compare), never as damage."""
    harness = _Harness(server)
    first = harness.call("run_command", "op", command=_PRINTS)
    assert first.status == "ok", first.content
    _sized(server, first)
    as_root(server, first.content["sandbox_id"], f"echo 'exited 0' > {_task_dir(first)}/exit")
    retry = harness.call("run_command", "op", command=_PRINTS)
    assert (retry.status, retry.content["deduplicated"]) == ("ok", True), retry.content
    assert (retry.content["stdout"], retry.content["stderr"]) == (_OUT, _ERR)


_WATCHER = (
    "nohup bash -c 'looked=0; n=0; "
    "while [ ! -e /root/watch.stop ] && (( n++ < 20000 )); do "
    f'for claim in {LEDGER}/tasks/*/; do [ -d "$claim" ] || continue; '
    "looked=$(( looked + 1 )); "
    '[ -e "$claim/stdout" ] && [ -e "$claim/stderr" ] || echo "missing $claim"; '
    'done; sleep 0.002; done > /root/watch.out; echo "looked $looked" >> /root/watch.out; '
    "mv /root/watch.out /root/watch.log' >/dev/null 2>&1 &"
)
"""As root, until told to stop (bounded): every claim it sees, and whether
it lacks an output file. Writes ``/root/watch.log`` last, whole."""


def test_c6_fresh_tasks_under_concurrency_are_never_unknown(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """The rule cannot touch a healthy task: a claim becomes visible only
    by the rename that moves its already-made output files with it, so
    there is no moment a fresh task lacks them. 20 quick tasks from 4
    threads, half in the background read at once (while their supervisor
    starts): every answer is ``ok``, none ``unknown``, every output whole;
    and a root watcher looking at every claim all the while never sees one
    without both files."""
    port = _durable_port(backend, new_session())
    warm = port.execute_sync(request(port, "run_command", "warm", command="true"))
    assert warm.status == "ok", warm.content
    sandbox_id = warm.content["sandbox_id"]
    as_root(server, sandbox_id, _WATCHER)
    results: dict[int, list[sandrail.ToolResult]] = {}

    def task(n: int) -> None:
        command = f"printf 'o{n}\\n'; printf 'e{n}\\n' >&2"
        background = n % 2 == 1
        launched = port.execute_sync(
            request(port, "run_command", f"op-{n}", command=command, background=background)
        )
        results[n] = [launched]
        if background and launched.status == "ok":
            for wait_seconds in (0, 20):
                results[n].append(
                    port.execute_sync(
                        request(
                            port,
                            "read_command_output",
                            f"read-{n}-{wait_seconds}",
                            task_id=launched.content["task_id"],
                            wait_seconds=wait_seconds,
                        )
                    )
                )

    def worker(first: int) -> None:
        for n in range(first, 20, 4):
            task(n)

    threads = [threading.Thread(target=worker, args=(first,)) for first in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    as_root(server, sandbox_id, ": > /root/watch.stop")
    seen = as_root(
        server,
        sandbox_id,
        "for i in $(seq 200); do grep -q '^looked' /root/watch.log && break; sleep 0.05; done; "
        "cat /root/watch.log",
    )
    assert seen.startswith("looked "), seen  # no "missing" line before it
    assert int(seen.split()[1]) >= 20, seen
    assert sorted(results) == list(range(20))
    for n, answers in results.items():
        assert [a.status for a in answers] == ["ok"] * len(answers), [a.content for a in answers]
        assert "unknown" not in [a.content["command_status"] for a in answers], n
        last = answers[-1].content
        assert (last["command_status"], last["stdout"], last["stderr"]) == (
            "exited",
            f"o{n}\n",
            f"e{n}\n",
        )
