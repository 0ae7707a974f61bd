"""Durable records under faults and hostile input: each case as the test
that pins it.

``timeout_seconds`` bounds a connection that went dead or froze (a
black-holed proxy, a SIGSTOPped server of the test's own). An async call
never blocks its event loop on the record, and a cancel token answers a call
stuck on it (C11). Storage that vanished (a table dropped, the SQLite
file deleted or replaced) never reads as empty. After a sandbox is
lost, the record and every locator keep naming the sandbox where the command
ran.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

import sandrail
from sandrail import ErrorCode
from sandrail.core import Ensure, Inspect, OwnedCommand, SandboxReady, Start
from sandrail.interpreters.simulator import FaultKind, Simulator
from sandrail.records import (
    Answer,
    OwnershipRecord,
    PostgresRecord,
    RecordError,
    SQLiteRecord,
    migrate_json_lines,
    open_record,
    reconcile,
    unresolved,
)
from tests.postgres_server import Blackhole, PostgresServer, frozen, private_server
from tests.rig import Rig
from tests.test_adversarial import one_fault
from tests.test_records import PassThrough, make_record  # noqa: F401 - the fixture, both stores
from tests.test_records_cli import sandrail_cli

RECORD_DOWN = ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value
LIVENESS = 60.0
"""How long a test waits for a call that must end on its own (a bound on a
hang, not a speed goal: the record's timeout is 1 s)."""


def starts_of(rig: Rig, task: str) -> int:
    return sum(
        isinstance(effect, Start) and effect.task_id == task for effect in rig.sim.effects_seen
    )


def run_in_thread(rig: Rig, key: str) -> sandrail.ToolResult | None:
    """``rig.run`` of ``key`` in a thread; ``None`` if it is still running
    after :data:`LIVENESS` seconds (the thread is left to end by itself)."""
    done: list[sandrail.ToolResult] = []
    thread = threading.Thread(
        target=lambda: done.append(rig.run("run_command", {"command": "echo once"}, key=key)),
        daemon=True,
    )
    thread.start()
    thread.join(LIVENESS)
    return done[0] if done else None


# -- a dead or frozen connection ----------------------------------------------------------


def test_c5_timeout_bounds_a_black_holed_postgres_connection(
    postgres: PostgresServer,
) -> None:
    """A partition that drops packets (the kernel still acknowledges, so no
    TCP timeout fires): the next call fails within the record's timeout,
    as ``uncertain`` or ``error``; no start leaves."""
    database = postgres.fresh_database()
    hole = Blackhole(postgres)
    record = PostgresRecord(hole.conninfo(database), timeout_seconds=1)
    try:
        rig = Rig(record=record)
        assert rig.run("run_command", {"command": "echo warm"}, key="warm").status == "ok"
        hole.freeze()
        result = run_in_thread(rig, "op-1")
        assert result is not None, "the call still waits on a black-holed connection"
        assert result.status in ("uncertain", "error"), result.content
        assert result.content["error_type"] == RECORD_DOWN
        assert starts_of(rig, rig.task_id("op-1")) == 0
    finally:
        hole.close()
        record.close()


def test_c5_timeout_bounds_a_frozen_postgres_server() -> None:
    """The server itself SIGSTOPped (this test's own server, nobody
    else's): the call fails within the record's timeout instead of waiting
    out the freeze."""
    with private_server() as server:
        database = server.fresh_database()
        record = PostgresRecord(server.conninfo(database), timeout_seconds=1)
        try:
            rig = Rig(record=record)
            assert rig.run("run_command", {"command": "echo warm"}, key="warm").status == "ok"
            with frozen(server):
                result = run_in_thread(rig, "op-1")
            assert result is not None, "the call waited out the freeze"
            assert result.status in ("uncertain", "error"), result.content
            assert result.content["error_type"] == RECORD_DOWN
            assert starts_of(rig, rig.task_id("op-1")) == 0
        finally:
            record.close()


# -- an async call and a record that blocks ------------------------------------------------


class Stuck(PassThrough):
    """A record whose ``resolve`` blocks its thread until ``release`` is
    set (a database that does not answer), then answers from ``inner``."""

    def __init__(self, inner: OwnershipRecord) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()

    def resolve(self, request: Any, task_id: str) -> OwnedCommand | None:
        self.entered.set()
        if not self.release.wait(LIVENESS):
            raise RecordError("released by nobody: the event loop was blocked")
        return self.inner.resolve(request, task_id)


def test_c11_an_async_call_never_blocks_its_loop_on_the_record(
    tmp_path: Path,
) -> None:
    """While the record blocks a call, other coroutines of the loop run:
    here the one that unblocks it (on a blocked loop it never would)."""
    stuck = Stuck(SQLiteRecord(tmp_path / "owned.sqlite"))
    rig = Rig(record=stuck)

    async def main() -> sandrail.ToolResult:
        call = asyncio.ensure_future(
            rig.port.execute(rig.request("run_command", {"command": "echo once"}))
        )
        while not stuck.entered.is_set():
            await asyncio.sleep(0.01)
        stuck.release.set()  # runs only if the loop is free
        return await call

    try:
        result = asyncio.run(main())
    finally:
        stuck.close()
    assert result.status == "ok", result.content
    assert rig.sim.launches[rig.task_id()] == 1


def test_c11_a_cancel_token_answers_an_async_call_stuck_on_the_record(
    tmp_path: Path,
) -> None:
    """A cancel token that fires while the record does not answer ends the
    call at once (C11): nothing is launched, and the loop is free."""
    stuck = Stuck(SQLiteRecord(tmp_path / "owned.sqlite"))
    rig = Rig(record=stuck)
    token = sandrail.CancelToken()

    async def main() -> sandrail.ToolResult:
        request = rig.request("run_command", {"command": "echo once"}, cancel=token)
        call = asyncio.ensure_future(rig.port.execute(request))
        while not stuck.entered.is_set():
            await asyncio.sleep(0.01)
        token.cancel()
        try:
            return await asyncio.wait_for(call, LIVENESS)
        finally:
            stuck.release.set()  # the record's thread ends before the loop does

    try:
        result = asyncio.run(main())
    finally:
        stuck.release.set()
        stuck.close()
    # A read the abort cut short could hide an earlier start: uncertain,
    # and said as the abort it is, not as a record that failed.
    assert result.status == "uncertain", result.content
    assert result.content["error_type"] == "e2b_command_aborted", result.content
    assert rig.sim.launches == {}


class StuckWrite(PassThrough):
    """A record whose ``remember`` blocks its thread until ``release`` is set."""

    def __init__(self, inner: OwnershipRecord) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()

    def remember(self, request: Any, owned: OwnedCommand) -> OwnedCommand:
        self.entered.set()
        if not self.release.wait(LIVENESS):
            raise RecordError("released by nobody: the event loop was blocked")
        return self.inner.remember(request, owned)


def test_c11_a_cancel_that_strikes_the_first_record_write_is_canceled_not_a_record_failure(
    tmp_path: Path,
) -> None:
    """The cancel fires while the record keeps the claim of a first start:
    no start has left, so the call is ``canceled`` (nothing ran), never
    "the ownership record could not be written"."""
    stuck = StuckWrite(SQLiteRecord(tmp_path / "owned.sqlite"))
    rig = Rig(record=stuck)
    token = sandrail.CancelToken()

    async def main() -> sandrail.ToolResult:
        request = rig.request("run_command", {"command": "echo once"}, cancel=token)
        call = asyncio.ensure_future(rig.port.execute(request))
        while not stuck.entered.is_set():
            await asyncio.sleep(0.01)
        token.cancel()
        try:
            return await asyncio.wait_for(call, LIVENESS)
        finally:
            stuck.release.set()

    try:
        result = asyncio.run(main())
    finally:
        stuck.release.set()
        stuck.close()
    assert (result.status, result.content["error_type"]) == ("error", "canceled"), result.content
    assert result.content["executed"] is False
    assert rig.sim.launches == {}


def test_c11_the_callers_cancellation_reaches_a_call_stuck_on_the_record(
    tmp_path: Path,
) -> None:
    """``asyncio`` cancellation of a call stuck on the record goes through
    to the caller (the loop is not held by the record)."""
    stuck = Stuck(SQLiteRecord(tmp_path / "owned.sqlite"))
    rig = Rig(record=stuck)

    async def main() -> bool:
        call = asyncio.ensure_future(
            rig.port.execute(rig.request("run_command", {"command": "echo once"}))
        )
        while not stuck.entered.is_set():
            await asyncio.sleep(0.01)
        call.cancel()
        try:
            await asyncio.wait_for(call, LIVENESS)
        except asyncio.CancelledError:
            return True
        finally:
            stuck.release.set()  # the record's thread ends before the loop does
        return False

    try:
        assert asyncio.run(main()) is True
    finally:
        stuck.release.set()
        stuck.close()
    assert rig.sim.launches == {}


# -- storage that vanished -----------------------------------------------------------------


def launched_then_lost(record: OwnershipRecord) -> Rig:
    """A first call whose start's answer was lost (so it may have run),
    then its sandbox lost: only the record can now stop a second launch."""
    first = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), record=record)
    assert first.run("run_command", {"command": "echo once"}).status == "uncertain"
    first.sim.kill_sandbox("sbx-1")
    return first


@pytest.mark.parametrize(
    "drop",
    [
        ["DROP TABLE sandrail_owned"],
        ["DROP TABLE sandrail_answers"],
        ["DROP TABLE sandrail_owned", "DROP TABLE sandrail_answers", "DROP TABLE sandrail_meta"],
    ],
)
def test_c2_a_sqlite_record_whose_tables_were_dropped_is_refused(
    tmp_path: Path, drop: list[str]
) -> None:
    """Tables dropped while the record says schema 1 (or all of them): a
    restarted harness is refused the record, never given an empty one."""
    path = tmp_path / "owned.sqlite"
    first = launched_then_lost(SQLiteRecord(path))
    with sqlite3.connect(path) as db:
        for statement in drop:
            db.execute(statement)
    with pytest.raises(RecordError, match=r"dropped|missing|lost"):
        SQLiteRecord(path)
    assert first.sim.launches[first.task_id()] == 1


@pytest.mark.parametrize("drop", ["sandrail_owned", "sandrail_meta"])
def test_c2_a_postgres_record_whose_table_was_dropped_is_uncertain(
    postgres: PostgresServer, drop: str
) -> None:
    """The same on PostgreSQL: the retry after a restart is ``uncertain``,
    the table is not created again, nothing launches a second time."""
    database = postgres.fresh_database()
    record = PostgresRecord(postgres.conninfo(database), timeout_seconds=5)
    try:
        first = launched_then_lost(record)
    finally:
        record.close()
    postgres.sql(f"DROP TABLE {drop}", database)
    restarted = PostgresRecord(postgres.conninfo(database), timeout_seconds=5)
    try:
        with pytest.raises(RecordError, match=r"dropped|missing|lost"):
            restarted.check()
        second = Rig(sim=first.sim, record=restarted)
        retry = second.run("run_command", {"command": "echo once"}, call_id="retry")
    finally:
        restarted.close()
    assert retry.status == "uncertain", retry.content
    assert retry.content["error_type"] == RECORD_DOWN
    assert first.sim.launches[first.task_id()] == 1
    assert (drop,) not in postgres.sql(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'", database
    )


def _swap_with_text(path: Path) -> None:
    path.write_text("not a database\n")


def _swap_with_other_sqlite(path: Path) -> None:
    other = path.with_name("other.sqlite")
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    other.replace(path)


def _swap_with_directory(path: Path) -> None:
    path.mkdir()


@pytest.mark.parametrize(
    "swap", [_swap_with_text, _swap_with_other_sqlite, _swap_with_directory, None]
)
def test_c5_a_sqlite_file_deleted_or_replaced_under_a_live_record_is_refused(
    tmp_path: Path, swap: Any
) -> None:
    """The file deleted (``None``) or replaced under an open record: the
    record notices (its identity changed) and refuses every use, so no
    start leaves on a record nobody will find again."""
    path = tmp_path / "owned.sqlite"
    record = SQLiteRecord(path)
    try:
        rig = Rig(record=record)
        assert rig.run("run_command", {"command": "echo warm"}, key="warm").status == "ok"
        for leftover in list(tmp_path.iterdir()):
            leftover.unlink()
        if swap is not None:
            swap(path)
        result = rig.run("run_command", {"command": "echo once"}, key="op-1")
        assert result.status in ("uncertain", "error"), result.content
        assert result.content["error_type"] == RECORD_DOWN
        assert starts_of(rig, rig.task_id("op-1")) == 0
        with pytest.raises(RecordError, match="deleted or replaced"):
            record.resolve(rig.request("run_command", {}), rig.task_id("warm"))
        with pytest.raises(RecordError, match="deleted or replaced"):
            record.unresolved()
    finally:
        record.close()


# -- a lost sandbox --------------------------------------------------------------------------


class Replacing:
    """A provider that gives a session whose sandbox was lost a new one:
    ``Ensure`` goes to a second simulator, whose sandboxes are named
    ``new-...``; every effect on a sandbox goes to the simulator it lives in."""

    def __init__(self, lost: Simulator) -> None:
        self.lost, self.new = lost, Simulator(harness=lost.harness)

    def __call__(self, effect: Any) -> Any:
        if isinstance(effect, Ensure | Inspect):
            answer = self.new(effect)
            if isinstance(answer, SandboxReady):
                epoch = answer.ledger_epoch
                answer = attrs.evolve(
                    answer,
                    sandbox_id=f"new-{answer.sandbox_id}",
                    ledger_epoch=None if epoch is None else f"new-{epoch}",
                )
            return answer
        sandbox_id = getattr(effect, "sandbox_id", None)
        if isinstance(sandbox_id, str) and sandbox_id.startswith("new-"):
            return self.new(attrs.evolve(effect, sandbox_id=sandbox_id.removeprefix("new-")))
        return self.lost(effect)


def test_c6_a_lost_sandbox_stays_named_by_the_record_and_every_locator(
    make_record: Any,  # noqa: F811 - the fixture
) -> None:
    """The command may have run in sbx-1, which was lost; the retries run in
    a new sandbox, yet the record's row, each retry's ``uncertain`` answer,
    the operator's list and reconcile all name sbx-1, where it ran."""
    record = make_record()
    first = launched_then_lost(record)
    task = first.task_id()
    before = record.resolve(first.request("run_command", {}), task)
    assert before is not None
    assert before.sandbox_id == "sbx-1"
    provider = Replacing(first.sim)
    after = Rig(sim=first.sim, record=record)
    after.port = sandrail.command_tools(
        backend=provider,
        session_id=after.session_id,
        owner=after.owner,
        authorize=after.harness.authorize,
        assert_authority=after.harness.assert_authority,
        record=record,
    )
    for attempt in range(2):
        retry = after.run("run_command", {"command": "echo once"}, call_id=f"retry-{attempt}")
        assert retry.status == "uncertain", retry.content
        assert retry.content["sandbox_id"] == "sbx-1", retry.content
    assert provider.new.effects_seen, "the retries never reached the new sandbox"
    row = record.resolve(first.request("run_command", {}), task)
    assert row == before
    (answer,) = unresolved(make_record())
    assert answer.locator["sandbox_id"] == "sbx-1"
    (found,) = reconcile(make_record(), provider)
    assert found.verdict == "still_uncertain"
    assert found.answer.locator["sandbox_id"] == "sbx-1"
    assert first.sim.launches[task] == 1
    assert provider.new.launches == {}


# -- an uncertain answer the record could not take -----------------------------------------


class Outage(PassThrough):
    """A record that is down (every method raises) while ``down`` is set."""

    def __init__(self, inner: OwnershipRecord) -> None:
        super().__init__(inner)
        self.down = False

    def _up(self) -> None:
        if self.down:
            raise RecordError("the database is down")

    def remember(self, request: Any, owned: OwnedCommand) -> OwnedCommand:
        self._up()
        return self.inner.remember(request, owned)

    def resolve(self, request: Any, task_id: str) -> OwnedCommand | None:
        self._up()
        return self.inner.resolve(request, task_id)

    def note(self, answer: Answer) -> None:
        self._up()
        self.inner.note(answer)

    def unresolved(self, *, limit: int = 1000) -> list[Answer]:
        self._up()
        return self.inner.unresolved(limit=limit)


def test_c6_an_uncertain_answer_during_a_record_outage_is_listed_once_it_is_back(
    tmp_path: Path,
) -> None:
    """A retry that is ``uncertain`` because the record is down cannot be
    noted then; once the record is back, the worker notes it by itself (no
    other call needed), so the operator's list shows it (before: never)."""
    outage = Outage(SQLiteRecord(tmp_path / "owned.sqlite"))
    rig = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), record=outage)
    assert rig.run("run_command", {"command": "echo once"}).status == "uncertain"
    rig.run("read_command_output", {"task_id": rig.task_id()}, call_id="settle")
    outage.down = True
    retry = rig.run("run_command", {"command": "echo once"}, call_id="retry")
    assert retry.status == "uncertain"
    assert retry.content["error_type"] == RECORD_DOWN
    outage.down = False
    listed: list[Answer] = []
    give_up = time.monotonic() + LIVENESS
    while not listed and time.monotonic() < give_up:
        time.sleep(0.1)
        listed = unresolved(outage)
    assert [(a.task_id, a.error_type) for a in listed] == [(rig.task_id(), RECORD_DOWN)]
    outage.close()


def test_c6_a_kept_answer_is_noted_before_the_next_one(tmp_path: Path) -> None:
    """Kept answers go before the next call's own, so a later ``ok`` of the
    task settles the kept ``uncertain`` instead of being overtaken by it."""
    outage = Outage(SQLiteRecord(tmp_path / "owned.sqlite"))
    rig = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), record=outage)
    assert rig.run("run_command", {"command": "echo once"}).status == "uncertain"
    outage.down = True
    assert rig.run("run_command", {"command": "echo once"}, call_id="r1").status == "uncertain"
    outage.down = False
    again = rig.run("run_command", {"command": "echo once"}, call_id="r2")
    assert again.status == "ok", again.content
    assert unresolved(outage) == []
    outage.close()


# -- one unreadable answer row -----------------------------------------------------------


def _two_answers(path: Path, bad: str) -> None:
    """A good uncertain answer and one whose column ``bad`` was edited."""
    SQLiteRecord(path).close()
    locator = '{"operation_key": "k", "sandbox_id": "sbx-1", "session_id": "s", "task_id": "%s"}'
    with sqlite3.connect(path) as db:
        for task, owner, where in (
            ("good", '{"agent_id": "a"}', locator % "good"),
            ("bad", '{"agent_id": "a"}', locator % "bad"),
        ):
            db.execute(
                "INSERT INTO sandrail_answers (session_id, task_id, status, error_type, tool, "
                "owner, locator) VALUES ('s', ?, 'uncertain', 'x', 'run_command', ?, ?)",
                (task, owner, where),
            )
        db.execute(f"UPDATE sandrail_answers SET {bad} WHERE task_id = 'bad'")


@pytest.mark.parametrize(
    "bad", ["owner = '{oops'", "owner = '[1]'", "locator = 'nope'", "tool = x'00ff'"]
)
def test_one_unreadable_answer_row_never_hides_the_others(tmp_path: Path, bad: str) -> None:
    """The good row is listed; the bad one is named by its keys with why,
    in the API, ``sandrail uncertain`` (and --json, --reconcile), which
    exits 1."""
    path = tmp_path / "owned.sqlite"
    _two_answers(path, bad)
    with SQLiteRecord(path) as record:
        listed = {answer.task_id: answer for answer in unresolved(record)}
        assert listed["good"].unreadable is None
        assert listed["good"].locator["sandbox_id"] == "sbx-1"
        assert listed["bad"].unreadable is not None
        found = {item.answer.task_id: item for item in reconcile(record, Simulator())}
        assert found["bad"].verdict == "still_uncertain"
    from tests.test_records_cli import sandrail_cli

    plain = sandrail_cli("uncertain", "--record", str(path))
    assert plain.returncode == 1, plain.stderr
    assert "task_id=good" in plain.stdout
    assert "unreadable answer row: session_id=s task_id=bad" in plain.stderr
    as_json = sandrail_cli("uncertain", "--record", str(path), "--json")
    assert as_json.returncode == 1
    assert '"good"' in as_json.stdout
    assert '"unreadable"' in as_json.stdout
    reconciled = sandrail_cli(
        "uncertain", "--record", str(path), "--reconcile", "--backend", "simulator"
    )
    assert reconciled.returncode == 1
    assert "task_id=good" in reconciled.stdout
    assert "task_id=bad" in reconciled.stderr
    for done in (plain, as_json, reconciled):
        assert "Traceback" not in done.stderr


# -- migrate-record on hostile files ---------------------------------------------------


def _line(**changes: Any) -> str:
    task = sandrail.task_id("cli-session", sandrail.AgentOwner(agent_id="cli-agent"), "op-1")
    row: dict[str, Any] = {
        "task_id": task,
        "operation_key": "op-1",
        "sandbox_id": "sbx-1",
        "launched": True,
        "ledger_epoch": "sbx-1/ledger-0",
        "launch_digest": None,
    }
    row.update(changes)
    return json.dumps(row)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[" * 100_000 + "]" * 100_000, "line 1: not an ownership record"),
        ('{"a":' * 50_000 + "1" + "}" * 50_000, "line 1: not an ownership record"),
        (_line(ledger_epoch=float("nan")), "line 1: ledger_epoch is not a text"),
        (_line(launched="false"), "line 1: launched is not true or false"),
        (_line(launched=1), "line 1: launched is not true or false"),
        (_line(sandbox_id="sbx\x00-1"), "line 1: sandbox_id is longer"),
        (_line(sandbox_id="sbx\r\n-1"), "line 1: sandbox_id is longer"),
        (_line(sandbox_id="s" * 1_000_000), "line 1: sandbox_id is longer"),
        (_line(task_id=None), "line 1: task_id is not a task id"),
    ],
)
def test_c2_migrate_refuses_a_malformed_line_naming_it(
    tmp_path: Path, text: str, says: str
) -> None:
    """Deeply nested JSON, a NaN epoch, a launched that is not a boolean, a
    sandbox id with NUL or CRLF or of a megabyte: one line error, nothing
    moved, no traceback (API and CLI)."""
    old = tmp_path / "owned.jsonl"
    old.write_text(text + "\n")
    with SQLiteRecord(tmp_path / "api.sqlite") as record:
        with pytest.raises(RecordError, match=re.escape(says)):
            migrate_json_lines(old, record)
        assert unresolved(record) == []
    from tests.test_records_cli import sandrail_cli

    done = sandrail_cli("migrate-record", str(old), str(tmp_path / "cli.sqlite"))
    assert done.returncode == 1
    assert says in done.stderr
    assert "Traceback" not in done.stderr


def test_c2_migrate_never_downgrades_a_launched_task(tmp_path: Path) -> None:
    """Two lines of one task, launched in sbx-1 then not launched in sbx-2:
    the moved row keeps launched, its sandbox and epoch, so a retry expects
    the first start's claim."""
    old = tmp_path / "owned.jsonl"
    old.write_text(
        _line() + "\n" + _line(launched=False, sandbox_id="sbx-2", ledger_epoch=None) + "\n"
    )
    with SQLiteRecord(tmp_path / "owned.sqlite") as record:
        moved = migrate_json_lines(old, record)
        assert (moved.moved, moved.other_sessions) == (1, 0)
        task = sandrail.task_id("cli-session", sandrail.AgentOwner(agent_id="cli-agent"), "op-1")
        request = sandrail.ToolRequest(
            call=sandrail.ToolCall(name="run_command", call_id="c", arguments={}),
            operation_key="op-1",
            session_id="cli-session",
            definition=None,
            identity=sandrail.AgentIdentity(agent_id="cli-agent"),
        )
        row = record.resolve(request, task)
    assert row is not None
    assert (row.sandbox_id, row.launched, row.ledger_epoch) == ("sbx-1", True, "sbx-1/ledger-0")


def test_migrate_names_a_sqlite_file_and_an_empty_session(tmp_path: Path) -> None:
    """Nits of the attack: OLD that is already a SQLite record says so (not
    a codec error); an empty --session is refused; tasks not moved are not
    all called another session's."""
    from tests.test_records_cli import sandrail_cli

    sqlite_old = tmp_path / "already.sqlite"
    SQLiteRecord(sqlite_old).close()
    done = sandrail_cli("migrate-record", str(sqlite_old), str(tmp_path / "new.sqlite"))
    assert done.returncode == 1
    assert "already a SQLite record" in done.stderr
    old = tmp_path / "owned.jsonl"
    old.write_text(_line() + "\n")
    empty = sandrail_cli("migrate-record", str(old), str(tmp_path / "n2.sqlite"), "--session", "")
    assert empty.returncode == 2
    assert "--session" in empty.stderr
    other = sandrail_cli("migrate-record", str(old), str(tmp_path / "n3.sqlite"), "--session", "x")
    assert other.returncode == 0
    assert "task id is not the one --session x derives" in other.stderr


# -- record names and a server gone after first use ---------- -------------------


@pytest.mark.parametrize(
    "spec",
    [
        "postgresql://sandrail:S3cr3tPassw0rd%@127.0.0.1:1/rec",  # a bad percent escape
        "postgresql://sandrail:S3cr3tPassw0rd@[::1/rec",  # an unclosed IPv6 bracket
        "POSTGRESQL://sandrail:S3cr3tPassw0rd%@127.0.0.1:1/rec",  # the scheme in capitals
    ],
)
def test_c17_a_malformed_postgres_url_never_shows_its_password(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Psycopg's parse error quoted the text, password
    and all; upper-case schemes were taken for a file name."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecordError) as raised:
        open_record(spec)
    assert "S3cr3tPassw0rd" not in str(raised.value)
    assert "could not be parsed" in str(raised.value)
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after it
    done = sandrail_cli("run", "--record", spec, "--", "true")
    assert done.returncode == 2
    assert "S3cr3tPassw0rd" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_c2_a_keyword_connection_string_is_a_postgres_record(
    postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``open_record("host=... dbname=...")``, the form
    PostgresRecord documents, made a local SQLite file named after the
    string (password included), so a fleet configured that way shared no
    record at all."""
    monkeypatch.chdir(tmp_path)
    database = postgres.fresh_database()
    with open_record(postgres.conninfo(database)) as record:
        assert isinstance(record, PostgresRecord)
    with pytest.raises(RecordError, match="cannot use"):
        open_record(f"host={postgres.socket_dir} dbname=nowhere user=sandrail password=Xy9")
    assert list(tmp_path.iterdir()) == []
    with open_record("./name=value.sqlite") as local:  # a path, written as one
        assert isinstance(local, SQLiteRecord)


def test_c5_check_after_first_use_asks_the_server_again() -> None:
    """``check()`` after first use answered at once that
    all was well while the server was down."""
    with private_server() as server:
        record = PostgresRecord(server.conninfo(server.fresh_database()), timeout_seconds=2)
        try:
            record.check()
            server.stop("immediate")
            with pytest.raises(RecordError, match="cannot use"):
                record.check()
            server.start()
            record.check()
        finally:
            record.close()


@pytest.mark.parametrize(
    "spec",
    [
        " postgresql://sandrail:Hunter2Xyzzy@127.0.0.1:1/db",  # a stray leading space
        "postgresql+psycopg://sandrail:Hunter2Xyzzy@127.0.0.1:1/db",  # SQLAlchemy's form
        "postgresql:/sandrail:Hunter2Xyzzy@127.0.0.1:1/db",  # one slash
        "pgsql://sandrail:Hunter2Xyzzy@127.0.0.1:1/db",
        "postgresql:sandrail:Hunter2Xyzzy@127.0.0.1",  # no slashes at all
        "mysql://sandrail:Hunter2Xyzzy@127.0.0.1/db",  # another kind of URL
    ],
)
def test_c17_a_near_postgres_url_is_refused_never_a_file_or_a_shown_password(
    spec: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """These were read as SQLite paths; the error named the
    path, password and all, or a file named after it was made."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecordError) as raised:
        open_record(spec)
    shown = str(raised.value) + repr(raised.value.__context__) + repr(raised.value.__cause__)
    assert "Hunter2Xyzzy" not in shown
    assert list(tmp_path.iterdir()) == []


def test_c17_an_unparsable_url_keeps_no_password_in_the_exception_chain() -> None:
    with pytest.raises(RecordError) as raised:
        PostgresRecord("postgresql://sandrail:Hunter2Xyzzy%@127.0.0.1:1/db")
    assert raised.value.__context__ is None
    assert raised.value.__cause__ is None


def test_c2_a_scheme_in_capitals_opens_the_database(
    postgres: PostgresServer,
) -> None:
    """The docstring says any case: ``POSTGRESQL://`` was recognised, then
    handed to libpq as it was, which refused it."""
    url = postgres.url(postgres.fresh_database())
    for spec in (url.replace("postgresql://", "POSTGRESQL://"), "  " + url + "\n"):
        with open_record(spec) as record:
            assert isinstance(record, PostgresRecord)
