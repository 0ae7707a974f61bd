"""Attacks on at-most-once and masking, against the real launcher: real
bash, real users (``root`` and ``user``) and real wire faults on local-e2b. The judge is the
server's ground truth: a command counts its own runs with a mark the
sandbox cannot take back (``server.mark``).

Each test names the contract line it proves; the same
attacks on the simulator and the port are in ``test_adversarial.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import sandrail
from sandrail.core import OwnedCommand
from sandrail.core._effects import Delivery, EffectFailure, Start
from sandrail.interpreters._launcher_script import LEDGER
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B, Route, WireFault, WireFaultKind, serve
from tests.e2b_world import (
    as_root,
    as_user,
    ensure,
    failure,
    needs_root,
    new_session,
    port_on,
    request,
    run,
    server_fixture,
    start_fields,
)

pytestmark = needs_root
server = server_fixture()

_START = " start "
CLEANUPS = {
    "rm-tmp": "rm -rf /tmp/* /tmp/.[!.]* 2>/dev/null",
    "find-delete": "find / -xdev -user user -delete 2>/dev/null",
    "pkill": "pkill -u user",
}
"""What a model's own cleanup might run (as ``user``, as E2B's commands do)."""

ROOT_WIPE = f"rm -rf {LEDGER}"
"""What only root can do (a template whose ``user`` has sudo): lose the ledger."""


class Recording:
    asynchronous = True

    def __init__(self, inner: E2BBackend) -> None:
        self.inner = inner
        self.failures: list[EffectFailure] = []

    async def __call__(self, effect: Any) -> Any:
        try:
            return await self.inner(effect)
        except EffectFailure as failed:
            self.failures.append(failed)
            raise


@pytest.fixture
def backend(server: LocalE2B) -> Iterator[E2BBackend]:
    with E2BBackend(**server.sdk_options, request_timeout_seconds=2) as fresh:
        yield fresh
    server.clear_faults()


def _run(port: sandrail.ToolPort, key: str, command: str, **more: Any) -> sandrail.ToolResult:
    return port.execute_sync(request(port, "run_command", key, command=command, **more))


def _mark() -> str:
    return f"m-{uuid.uuid4().hex[:10]}"


def _lost_start(server: LocalE2B, port: sandrail.ToolPort, command: str) -> str:
    """Run ``command`` in the background with its Start's answer lost after
    the launcher acted (held past the client's timeout); its sandbox id."""
    warm = _run(port, f"warm-{uuid.uuid4().hex[:6]}", "true")
    assert warm.status == "ok", warm.content
    with server.fault(
        WireFault(kind=WireFaultKind.DELAY, route=Route.START, match=_START, seconds=3)
    ):
        lost = _run(port, "op", command, background=True)
    assert lost.status == "uncertain", lost.content
    return str(warm.content["sandbox_id"])


# -- C2: cleanup between a lost answer and the retry -------------


@pytest.mark.long
@pytest.mark.parametrize("cleanup", sorted(CLEANUPS))
def test_c2_a_user_cleanup_after_a_lost_answer_never_makes_the_retry_launch_again(
    server: LocalE2B, backend: E2BBackend, cleanup: str
) -> None:
    """The claim is out of the command's reach: the retry on the same port
    finds it (deduplicated), whatever the model's cleanup did."""
    port = port_on(backend, new_session())
    mark = _mark()
    command = f"{server.mark(mark)}; sleep 2"
    sandbox_id = _lost_start(server, port, command)
    assert _run(port, "cleanup", CLEANUPS[cleanup]).status == "ok"
    as_user(server, sandbox_id, CLEANUPS[cleanup])
    retry = _run(port, "op", command, background=True)
    assert (retry.status, retry.content["deduplicated"]) == ("ok", True), retry.content
    assert server.truth().marked(mark) == 1


def test_c2_a_ledger_wiped_by_root_after_a_lost_answer_is_claim_lost_never_a_relaunch(
    server: LocalE2B, backend: E2BBackend
) -> None:
    port = port_on(backend, new_session())
    mark = _mark()
    command = f"{server.mark(mark)}; sleep 2"
    sandbox_id = _lost_start(server, port, command)
    assert server.truth().marked(mark) == 1 or _eventually_marked(server, mark)
    as_root(server, sandbox_id, ROOT_WIPE)
    for attempt in range(3):
        retry = _run(port, "op", command, background=True, call_id=f"retry-{attempt}")
        assert retry.status == "uncertain", retry.content
    assert server.truth().marked(mark) == 1


def _eventually_marked(server: LocalE2B, mark: str) -> bool:
    until = time.monotonic() + 5
    while time.monotonic() < until:
        if server.truth().marked(mark):
            return True
        time.sleep(0.05)
    return False


def test_c2_a_start_that_never_arrived_is_launched_by_the_retry_despite_a_cleanup(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """The epoch proof: the ledger is the one the first start was sent to,
    and it never logged the task, so the retry launches, decisively."""
    port = port_on(backend, new_session())
    warm = _run(port, "warm", "true")
    mark = _mark()
    with server.fault(
        WireFault(kind=WireFaultKind.DROP_BEFORE_READ, route=Route.START, match=_START)
    ):
        lost = _run(port, "op", server.mark(mark))
    assert lost.status == "uncertain"
    as_user(server, warm.content["sandbox_id"], CLEANUPS["rm-tmp"])
    retry = _run(port, "op", server.mark(mark))
    assert (retry.status, retry.content["deduplicated"]) == ("ok", False), retry.content
    assert server.truth().marked(mark) == 1


def test_c2_a_start_that_never_arrived_into_a_wiped_ledger_is_claim_lost(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """With the ledger gone since the first start was sent, the sandbox can
    no longer prove it never claimed the task: nothing launches."""
    port = port_on(backend, new_session())
    warm = _run(port, "warm", "true")
    mark = _mark()
    with server.fault(
        WireFault(kind=WireFaultKind.DROP_BEFORE_READ, route=Route.START, match=_START)
    ):
        _run(port, "op", server.mark(mark))
    as_root(server, warm.content["sandbox_id"], ROOT_WIPE)
    for attempt in range(2):  # the first retry may find the launcher gone and reinstall it
        retry = _run(port, "op", server.mark(mark), call_id=f"retry-{attempt}")
        assert retry.status == "uncertain", retry.content
    assert server.truth().marked(mark) == 0


@pytest.mark.parametrize("wipe", ["user-cleanup", "root-wipe"])
def test_c2_a_restarted_harness_with_a_durable_record_never_relaunches(
    server: LocalE2B, wipe: str
) -> None:
    durable: dict[str, OwnedCommand] = {}

    def harness(backend: E2BBackend, session: str) -> sandrail.ToolPort:
        return port_on(
            backend,
            session,
            resolve_owned_command=lambda request, task: durable.get(task),
            remember_owned_command=lambda request, owned: durable.__setitem__(owned.task_id, owned),
        )

    session = new_session()
    mark = _mark()
    command = f"{server.mark(mark)}; sleep 2"
    with E2BBackend(**server.sdk_options, request_timeout_seconds=2) as first:
        sandbox_id = _lost_start(server, harness(first, session), command)
    if wipe == "root-wipe":
        as_root(server, sandbox_id, ROOT_WIPE)
    else:
        for cleanup in CLEANUPS.values():
            as_user(server, sandbox_id, cleanup)
    with E2BBackend(**server.sdk_options, request_timeout_seconds=2) as restarted:
        port = harness(restarted, session)
        retries = [_run(port, "op", command, background=True) for _ in range(2)]
    if wipe == "root-wipe":
        assert [r.status for r in retries] == ["uncertain", "uncertain"], [
            r.content for r in retries
        ]
    else:
        assert all(r.status == "ok" and r.content["deduplicated"] for r in retries)
    assert server.truth().marked(mark) == 1


def test_c2_answers_stay_well_formed_while_files_are_deleted_under_them(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """A command deleting files raced the launcher's size lookup and
    a start answer read as malformed. Now nothing the launcher answers from
    is reachable by ``user``; even root deleting task files in a loop (worse
    than any user command) leaves every answer well-formed, and lost answers
    never relaunch. An answer is ``ok`` with the command's true output, or,
    its output deleted, ``uncertain`` (C6): never ``ok`` with output that is
    not there. Bounded: 12 trials."""
    recording = Recording(backend)
    port = port_on(recording, new_session())
    warm = _run(port, "warm", "true")
    sandbox_id = warm.content["sandbox_id"]
    churn = (
        "for i in $(seq 4000); do rm -rf /tmp/* /home/user/* "
        f"{LEDGER}/tasks/*/stdout {LEDGER}/tasks/*/stderr 2>/dev/null; sleep 0.001; done "
        ">/dev/null 2>&1 &"
    )
    as_root(server, sandbox_id, churn)
    as_user(server, sandbox_id, "for i in $(seq 4000); do rm -rf /tmp/* 2>/dev/null; done &")
    marks = [_mark() for _ in range(12)]
    try:
        for n, mark in enumerate(marks):
            command = f"{server.mark(mark)}; echo out; echo err >&2"
            first = _run(port, f"trial-{n}", command)
            again = _run(port, f"trial-{n}", command)
            for result in (first, again):
                if result.status == "ok":
                    assert (result.content["stdout"], result.content["stderr"]) == (
                        "out\n",
                        "err\n",
                    )
                else:
                    assert result.status == "uncertain", result.content
                    assert result.content["error_type"] == "e2b_command_evidence_incomplete"
            assert again.status == "uncertain" or again.content["deduplicated"] is True
    finally:
        as_root(server, sandbox_id, "pkill -f 'seq 4000'; true")
    assert not [f for f in recording.failures if "malformed" in f.detail]
    truth = server.truth()
    assert [truth.marked(mark) for mark in marks] == [1] * len(marks)


# -- C17: staged env values and digests --------------------------


def test_c17_a_staged_request_whose_start_failed_is_deleted_and_never_readable(
    server: LocalE2B, backend: E2BBackend
) -> None:
    port = port_on(backend, new_session())
    sandbox_id = _run(port, "warm", "true").content["sandbox_id"]
    secret = f"staged-{uuid.uuid4().hex}"
    with server.fault(WireFault(kind=WireFaultKind.STATUS_429, route=Route.START, match=_START)):
        refused = _run(port, "op", "true", env={"TOKEN": secret})
    assert refused.status == "uncertain"
    assert as_root(server, sandbox_id, f"ls -A {LEDGER}/inbox") == ""
    places = "/root /tmp /home /dev/shm"  # all a sandbox may write; the rest is read-only
    assert as_root(server, sandbox_id, f"grep -rl {secret} {places} 2>/dev/null; true") == ""


def test_c17_no_user_command_ever_sees_another_tasks_staged_env(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """A watcher running as ``user`` searches every file it may read while
    tasks with a secret are staged and started: it never finds it. (While a
    task runs, its own environment is readable by every ``user`` process
    through /proc, as on E2B; these tasks exit at once.)"""
    port = port_on(backend, new_session())
    sandbox_id = _run(port, "warm", "true").content["sandbox_id"]
    secret = f"watched-{uuid.uuid4().hex}"
    found: list[str] = []
    watcher = threading.Thread(
        target=lambda: found.append(
            as_user(
                server,
                sandbox_id,
                f"for i in $(seq 40); do grep -rls {secret} /root /tmp /home /dev/shm /run "
                "2>/dev/null; done; true",
            )
        )
    )
    watcher.start()
    for n in range(8):
        assert _run(port, f"op-{n}", "true", env={"TOKEN": secret}).status == "ok"
    watcher.join(60)
    assert found == [""]


def test_c17_no_root_process_ever_holds_a_commands_env(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """The env is exported only after the drop to ``user``: no root process
    (the launcher, the supervisor, setsid, setpriv) runs with it, so a name
    the loader acts on (had a caller skipped the core's name rule) could
    never reach a root program."""
    sandbox_id = ensure(backend)
    secret = f"environ-{uuid.uuid4().hex}"
    run(backend(Start(**start_fields(sandbox_id, "sleep 5", env={"TOKEN": secret}))))
    holders = ""
    for _ in range(20):  # until the command is running (a loaded machine is slow to exec)
        holders = as_root(
            server,
            sandbox_id,
            "for p in /proc/[0-9]*; do "
            f'if grep -qa {secret} "$p/environ" 2>/dev/null; then stat -c %U "$p"; fi; done',
        )
        if holders.split():
            break
        time.sleep(0.2)
    assert holders.split() == ["user"], holders


def test_c17_the_digest_is_keyed_and_unreadable_by_user_commands(
    server: LocalE2B, backend: E2BBackend
) -> None:
    """``PIN=4821`` was recovered from the stored digest and the
    command. The digest is now out of reach of ``user``, and keyed by a key
    the sandbox never sees: even root, reading it, has nothing to test
    guesses against."""
    sandbox_id = ensure(backend)
    digest = hashlib.sha256(b"run_command\0echo hi\0PIN=4821").hexdigest()
    run(backend(Start(**start_fields(sandbox_id, "echo hi", request_digest=digest))))
    seen = as_user(server, sandbox_id, f"cat {LEDGER}/tasks/*/digest")
    assert "Permission denied" in seen
    assert digest not in seen
    stored = as_root(server, sandbox_id, f"cat {LEDGER}/tasks/*/digest").strip()
    key = backend._ledger_key()
    assert stored == hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()
    assert stored != digest
    assert key.hex() not in as_root(server, sandbox_id, f"cat -v {LEDGER}/*/* 2>/dev/null; true")


# -- hostile env names and values in real bash (C16, C17) ---------------------


NAMES = [
    "PATH",
    "HOME",
    "IFS",
    "ENV",
    "PROMPT_COMMAND",
    "TMPDIR",
    "POSIXLY_CORRECT",
    "_X",
    "x" * 64,
]
VALUES = [
    "plain-value-123",
    "with spaces and 'quotes' and \"doubles\"",
    "$(touch /tmp/pwned) `touch /tmp/pwned` ${HOME}",
    "new\nlines\n\n",
    "=starts-with-equals",
    "-e -n --",
    "ünïcødé ✓ 🎉 value",
]


@pytest.mark.parametrize("name", NAMES)
def test_c16_c17_hostile_env_names_and_values_reach_the_command_exactly(
    server: LocalE2B, backend: E2BBackend, name: str
) -> None:
    port = port_on(backend, new_session())
    env = {name: VALUES[len(name) % len(VALUES)], "OTHER": "\n".join(VALUES)}
    # The command prints digests, never the values (results mask values).
    command = (
        f'printf %s "${{{name}}}" | sha256sum | cut -c1-64; '
        'printf %s "$OTHER" | sha256sum | cut -c1-64'
    )
    result = _run(port, "op", command, env=env)
    if name in ("PATH", "IFS"):
        # A login shell resets PATH, and bash never takes IFS from its
        # environment (as with E2B's commands.run): only the other value is
        # compared.
        assert result.status == "ok", result.content
        expected = [hashlib.sha256(env["OTHER"].encode()).hexdigest()]
        assert result.content["stdout"].split()[1:] == expected
        return
    assert result.status == "ok", result.content
    assert result.content["stdout"].split() == [
        hashlib.sha256(env[name].encode()).hexdigest(),
        hashlib.sha256(env["OTHER"].encode()).hexdigest(),
    ]
    sandbox_id = result.content["sandbox_id"]
    assert "pwned" not in as_root(server, sandbox_id, "ls -A /tmp /home/user")


def test_c17_env_names_the_launcher_uses_itself_are_refused_before_sending(
    backend: E2BBackend,
) -> None:
    sandbox_id = ensure(backend)
    failed = failure(
        backend(Start(**start_fields(sandbox_id, "true", env={"__sandrail_entry": "x"})))
    )
    assert failed.delivery is Delivery.NOT_SENT


# -- concurrent duplicates -------------------------------------------


def test_c2_duplicates_from_threads_and_tasks_of_two_harnesses_launch_once(
    server: LocalE2B,
) -> None:
    """Two harness processes (two backends) on one session, each driving its
    port from four threads at once, plus a late straggler: one sandbox, one
    launch."""
    session = new_session()
    mark = _mark()
    sandboxes_before = len(server.truth().sandboxes)
    results: list[sandrail.ToolResult] = []
    with (
        E2BBackend(**server.sdk_options) as first,
        E2BBackend(**server.sdk_options) as second,
    ):
        ports = [port_on(first, session), port_on(second, session)]
        barrier = threading.Barrier(8)

        def call(n: int) -> None:
            port = ports[n % 2]
            made = request(port, "run_command", "op", call_id=f"c{n}", command=server.mark(mark))
            barrier.wait()
            results.append(port.execute_sync(made))

        workers = [threading.Thread(target=call, args=(n,)) for n in range(8)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        results.append(_run(ports[1], "op", server.mark(mark)))
    assert len(server.truth().sandboxes) - sandboxes_before == 1
    assert server.truth().marked(mark) == 1
    assert all(r.status in ("ok", "uncertain") for r in results), [r.content for r in results]
    assert sum(r.status == "ok" and not r.content["deduplicated"] for r in results) <= 1
    assert results[-1].status == "ok"


# -- where the sandbox cannot separate users -----------------------------------


def test_c2_without_user_separation_no_proof_is_accepted() -> None:
    """local-e2b's userns mode: ``root`` and ``user`` are one uid, so commands
    can reach the ledger. The backend says so, and a missing expected claim
    is always ``claim_lost`` (even one the harness could otherwise prove)."""
    with (
        serve(isolation="userns", signal_scope="process") as shared,
        E2BBackend(**shared.sdk_options, request_timeout_seconds=2) as backend,
    ):
        port = port_on(backend, new_session())
        warm = _run(port, "warm", "true")
        assert warm.status == "ok", warm.content
        assert backend.separated(warm.content["sandbox_id"]) is False
        mark = _mark()
        with shared.fault(
            WireFault(kind=WireFaultKind.DROP_BEFORE_READ, route=Route.START, match=_START)
        ):
            _run(port, "op", shared.mark(mark))
        retry = _run(port, "op", shared.mark(mark))
        assert retry.status == "uncertain", retry.content
        assert shared.truth().marked(mark) == 0
        fresh = _run(port, "other", "echo fine")
        assert (fresh.status, fresh.content["stdout"]) == ("ok", "fine\n")
