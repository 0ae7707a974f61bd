"""The ownership records, SQLite and a real PostgreSQL, each test
run on both (the ``postgres`` fixture starts its own server), plus their
faults: a database that is down, slow, restarted or edited by hand."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import sandrail
from sandrail import ErrorCode
from sandrail.core import OwnedCommand, Start, recorded_digest
from sandrail.interpreters.simulator import FaultKind, Script
from sandrail.records import (
    Answer,
    OwnershipRecord,
    PostgresRecord,
    RecordError,
    SQLiteRecord,
    merge_owned,
    migrate_json_lines,
    open_record,
    reconcile,
    unresolved,
)
from tests.postgres_server import PostgresServer
from tests.rig import Rig
from tests.test_adversarial import one_fault

SECRET = "hunter2-swordfish"
TASK = "a" * 64


@pytest.fixture(params=["sqlite", "postgres"])
def make_record(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A factory of records on one fresh store: every record it makes (a
    restarted harness, another worker) shares the rows."""
    made: list[OwnershipRecord] = []
    if request.param == "sqlite":
        path = tmp_path / "owned.sqlite"

        def make() -> OwnershipRecord:
            made.append(SQLiteRecord(path))
            return made[-1]

    else:
        server: PostgresServer = request.getfixturevalue("postgres")
        database = server.fresh_database()

        def make() -> OwnershipRecord:
            made.append(PostgresRecord(server.conninfo(database), timeout_seconds=5))
            return made[-1]

    yield make
    for record in made:
        record.close()


def owned(**changes: Any) -> OwnedCommand:
    base = OwnedCommand(
        task_id=TASK,
        operation_key="op-1",
        sandbox_id="sbx-1",
        launched=True,
        ledger_epoch="sbx-1/ledger-0",
        launch_digest="d" * 64,
    )
    return attrs.evolve(base, **changes)


def request_of(session: str = "session-1") -> sandrail.ToolRequest:
    return sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c1", arguments={}),
        operation_key="op-1",
        session_id=session,
        definition=None,
        identity=sandrail.AgentIdentity(agent_id="agent-1"),
    )


# -- the protocol ---------------------------------------------------------------------


def test_both_records_satisfy_the_protocol(make_record: Any) -> None:
    assert isinstance(make_record(), OwnershipRecord)


def test_c2_a_row_survives_a_restart_and_is_filed_by_session(make_record: Any) -> None:
    first = make_record()
    assert first.remember(request_of(), owned()) == owned()
    first.close()
    again = make_record()
    assert again.resolve(request_of(), TASK) == owned()
    assert again.resolve(request_of("session-2"), TASK) is None  # C4: another session's


def test_c2_the_first_start_keeps_its_epoch_and_digest(make_record: Any) -> None:
    """The merge rule: a later writer of a launched task (same sandbox) does
    not replace the epoch the first start was sent under, nor its digest;
    ``remember`` answers with the row as it stands."""
    record = make_record()
    record.remember(request_of(), owned())
    later = owned(ledger_epoch="sbx-1/ledger-1", launch_digest="e" * 64)
    kept = record.remember(request_of(), later)
    assert kept == owned()
    assert kept == merge_owned(owned(), later)
    assert record.resolve(request_of(), TASK) == owned()
    # Another sandbox (the first one lost): the row keeps naming the sandbox
    # where the first start went, with its proof.
    moved = record.remember(request_of(), owned(sandbox_id="sbx-2", ledger_epoch="sbx-2/e"))
    assert moved == owned()
    assert moved == merge_owned(owned(), owned(sandbox_id="sbx-2", ledger_epoch="sbx-2/e"))


def test_c2_two_threads_racing_one_key_keep_one_row(make_record: Any) -> None:
    """Writers racing one task through one database: every answer is the
    one row the database settled on (the first launched writer's epoch)."""
    record = make_record()
    answers: list[OwnedCommand] = []
    barrier = threading.Barrier(8)

    def write(n: int) -> None:
        barrier.wait()
        answers.append(record.remember(request_of(), owned(ledger_epoch=f"sbx-1/ledger-{n}")))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == 8
    stored = record.resolve(request_of(), TASK)
    assert stored is not None
    assert {answer.ledger_epoch for answer in answers[1:]} <= {stored.ledger_epoch}


# -- through a port -----------------------------------------------------------------------


def test_c2_a_restarted_port_on_the_record_never_relaunches(make_record: Any) -> None:
    """The README's restart, on a real record: a start whose answer was
    lost, the ledger wiped, a new port on a new record object: ``uncertain``,
    one launch."""
    first = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), record=make_record())
    assert first.run("run_command", {"command": "echo once"}).status == "uncertain"
    first.sim.wipe_ledger("sbx-1")
    second = Rig(sim=first.sim, record=make_record())
    retry = second.run("run_command", {"command": "echo once"}, call_id="after-restart")
    assert retry.status == "uncertain", retry.content
    assert first.sim.launches[first.task_id()] == 1


def test_c2_a_start_that_never_arrived_is_launched_after_a_restart(
    make_record: Any,
) -> None:
    """Decisive, too: the record keeps the epoch, so a restarted harness
    proves a start that never arrived and launches it, once."""
    first = Rig(plan=one_fault("Start", FaultKind.HANG), record=make_record())
    assert first.run("run_command", {"command": "echo once"}).status == "uncertain"
    second = Rig(sim=first.sim, record=make_record())
    retry = second.run("run_command", {"command": "echo once"}, call_id="after-restart")
    assert retry.status == "ok", retry.content
    assert first.sim.launches[first.task_id()] == 1


def test_c2_two_workers_racing_one_key_after_a_wipe_launch_once(make_record: Any) -> None:
    """Two workers, one key, one database: the loser, which read no row
    before the winner wrote, gets the winner's row back from its own write
    and expects its claim; the wiped ledger cannot show it, so the loser is
    ``uncertain``, never a second launch."""
    winner = Rig(record=make_record())
    assert winner.run("run_command", {"command": "echo once"}).status == "ok"
    winner.sim.wipe_ledger("sbx-1")
    shared = make_record()
    loser = Rig(
        sim=winner.sim,
        resolve_owned_command=lambda request, task: None,  # it read before the winner wrote
        remember_owned_command=shared.remember,
    )
    result = loser.run("run_command", {"command": "echo once"}, call_id="loser")
    assert result.status == "uncertain", result.content
    assert winner.sim.launches[winner.task_id()] == 1


def test_c17_the_record_holds_no_env_value_nor_a_plain_digest_of_one(
    make_record: Any, tmp_path: Path
) -> None:
    """The row's launch digest is over the request with env
    values redacted; nothing in the store holds the value."""
    record = make_record()
    rig = Rig(record=record)
    arguments = {"command": "echo $API_TOKEN", "env": {"API_TOKEN": SECRET}}
    assert rig.run("run_command", arguments).status == "ok"
    row = record.resolve(rig.request("run_command", {}), rig.task_id())
    assert row is not None
    assert row.launch_digest == recorded_digest("run_command", arguments)
    assert row.launch_digest != sandrail.core.launch_digest("run_command", arguments)
    dumped = json.dumps(attrs.asdict(row))
    assert SECRET not in dumped
    if isinstance(record, SQLiteRecord):
        record.close()
        assert SECRET.encode() not in Path(record.path).read_bytes()


# -- faults of the database ------------------------------------------------------------


class PassThrough:
    """A record that hands every call to ``inner``: the base of the doubles
    below, each of which overrides only where its database misbehaves."""

    def __init__(self, inner: OwnershipRecord) -> None:
        self.inner = inner

    def remember(self, request: Any, owned: OwnedCommand) -> OwnedCommand:
        return self.inner.remember(request, owned)

    def resolve(self, request: Any, task_id: str) -> OwnedCommand | None:
        return self.inner.resolve(request, task_id)

    def note(self, answer: Answer) -> None:
        self.inner.note(answer)

    def unresolved(self, *, limit: int = 1000) -> list[Answer]:
        return self.inner.unresolved(limit=limit)

    def close(self) -> None:
        self.inner.close()


class Broken(PassThrough):
    """A record whose reads or writes fail (a database down or too slow)."""

    def __init__(self, inner: OwnershipRecord, *, reads: bool = False, writes: bool = False):
        super().__init__(inner)
        self.reads, self.writes = reads, writes

    def remember(self, request: Any, owned: OwnedCommand) -> OwnedCommand:
        if self.writes:
            raise RecordError("the database is down")
        return self.inner.remember(request, owned)

    def resolve(self, request: Any, task_id: str) -> OwnedCommand | None:
        if self.reads:
            raise RecordError("the database is down")
        return self.inner.resolve(request, task_id)


def test_c5_postgres_down_before_the_first_start_sends_nothing(
    postgres: PostgresServer,
) -> None:
    """A server that cannot be reached: the launch reads the record first,
    so it is ``uncertain`` (the record might hold an earlier start) and no
    start leaves; no traceback, within the timeout."""
    record = PostgresRecord(
        f"host={postgres.socket_dir} port=1 user=sandrail dbname=postgres", timeout_seconds=1
    )
    try:
        rig = Rig(record=record)
        result = rig.run("run_command", {"command": "echo once"})
    finally:
        record.close()
    assert result.status == "uncertain", result.content
    assert result.content["error_type"] == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value
    assert not any(isinstance(effect, Start) for effect in rig.sim.effects_seen)


def test_c5_a_row_locked_past_the_timeout_means_the_start_never_leaves(
    postgres: PostgresServer,
) -> None:
    """A slow database: another session holds the task's row; the write
    waits ``timeout_seconds``, fails, and the start never leaves."""
    import psycopg

    database = postgres.fresh_database()
    record = PostgresRecord(postgres.conninfo(database), timeout_seconds=1)
    rig = Rig(record=record)
    record.remember(rig.request("run_command", {}), owned(task_id=rig.task_id(), launched=False))
    with psycopg.connect(postgres.conninfo(database)) as blocker:
        blocker.execute("SELECT * FROM sandrail_owned FOR UPDATE").fetchall()
        result = rig.run("run_command", {"command": "echo once"})
    record.close()
    assert (result.status, result.content["executed"]) == ("error", False), result.content
    assert result.content["error_type"] == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value
    assert rig.sim.launches == {}


def test_c2_a_restarted_server_and_cut_connections_are_survived(
    postgres: PostgresServer,
) -> None:
    """The pool checks each connection before lending it: after every
    session was cut, and after a restart of the whole server, the next call
    goes through, and a retry finds the first launch."""
    database = postgres.fresh_database()
    record = PostgresRecord(postgres.conninfo(database), timeout_seconds=5)
    try:
        rig = Rig(record=record)
        assert rig.run("run_command", {"command": "echo once"}).status == "ok"
        postgres.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{database}' AND pid <> pg_backend_pid()"
        )
        again = rig.run("run_command", {"command": "echo once"}, call_id="c2")
        assert again.status == "ok"
        assert again.content["deduplicated"] is True
        postgres.restart()
        restarted = Rig(sim=rig.sim, record=record)
        third = restarted.run("run_command", {"command": "echo once"}, call_id="c3")
        assert third.status == "ok", third.content
        assert rig.sim.launches[rig.task_id()] == 1
    finally:
        record.close()


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE sandrail_owned SET operation_key = ''",
        "UPDATE sandrail_owned SET launched = 7",
        "UPDATE sandrail_owned SET sandbox_id = x'00ff'",
    ],
)
def test_c2_a_row_edited_by_hand_is_uncertain_never_a_launch(tmp_path: Path, edit: str) -> None:
    """A record table edited into something that is not an ownership record:
    the retry cannot trust it, so it is ``uncertain`` and launches nothing."""
    path = tmp_path / "owned.sqlite"
    first = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), record=SQLiteRecord(path))
    assert first.run("run_command", {"command": "echo once"}).status == "uncertain"
    first.sim.kill_sandbox("sbx-1")
    with sqlite3.connect(path) as db:
        db.execute(edit)
    second = Rig(sim=first.sim, record=SQLiteRecord(path))
    retry = second.run("run_command", {"command": "echo once"}, call_id="retry")
    assert retry.status == "uncertain", retry.content
    assert retry.content["error_type"] == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value
    assert first.sim.launches[first.task_id()] == 1


def test_c2_a_row_deleted_by_hand_is_the_sandbox_ledgers_to_defend(
    tmp_path: Path,
) -> None:
    """The record is half of the proof: with its row deleted, the sandbox's
    claim still refuses a second launch while the sandbox lives."""
    path = tmp_path / "owned.sqlite"
    first = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), record=SQLiteRecord(path))
    assert first.run("run_command", {"command": "echo once"}).status == "uncertain"
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM sandrail_owned")
    second = Rig(sim=first.sim, record=SQLiteRecord(path))
    retry = second.run("run_command", {"command": "echo once"}, call_id="retry")
    assert retry.status == "ok"
    assert retry.content["deduplicated"] is True
    assert first.sim.launches[first.task_id()] == 1


# -- bad input ------------------------------------------------------------------------------


def test_sqlite_refuses_what_is_not_a_record(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="does not exist"):
        SQLiteRecord(tmp_path / "missing" / "owned.sqlite")
    with pytest.raises(RecordError, match="not a regular file"):
        SQLiteRecord(tmp_path)
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    with pytest.raises(RecordError, match="not a SQLite database"):
        SQLiteRecord(text)


def test_a_port_takes_a_record_or_the_callbacks_not_both(tmp_path: Path) -> None:
    record = SQLiteRecord(tmp_path / "owned.sqlite")
    with pytest.raises(TypeError, match="not both"):
        Rig(record=record, resolve_owned_command=lambda request, task: None)
    with pytest.raises(TypeError, match="OwnershipRecord"):
        Rig(record=object())


def test_postgres_refuses_a_malformed_conninfo_without_showing_it() -> None:
    with pytest.raises(RecordError, match="not a PostgreSQL connection string") as caught:
        PostgresRecord("host=x password=s3cr3t-value = =")
    assert "s3cr3t-value" not in str(caught.value)
    assert "s3cr3t" not in repr(PostgresRecord("host=db password=s3cr3t-value dbname=x"))


# -- the old JSON-lines record ------------------------------------------------------------


def test_an_old_json_lines_record_is_refused_saying_how_to_move_it(
    tmp_path: Path,
) -> None:
    old = tmp_path / "owned.jsonl"
    cli_task = sandrail.task_id("cli-session", sandrail.AgentOwner(agent_id="cli-agent"), "op-1")
    old.write_text(json.dumps(attrs.asdict(owned(task_id=cli_task))) + "\n")
    with pytest.raises(RecordError, match="sandrail migrate-record"):
        SQLiteRecord(old)
    new = SQLiteRecord(tmp_path / "owned.sqlite")
    other = json.dumps(attrs.asdict(owned(task_id="b" * 64, operation_key="op-2")))
    old.write_text(old.read_text() + other + "\n")
    moved = migrate_json_lines(old, new)
    assert (moved.moved, moved.other_sessions) == (1, 1)
    assert new.resolve(request_of("cli-session"), cli_task) == owned(task_id=cli_task)
    old.write_text("not json\n")
    with pytest.raises(RecordError, match="line 1"):
        migrate_json_lines(old, new)


# -- unresolved outcomes, for an operator ---------------------------------------------


def test_uncertain_tasks_are_listed_and_reconciled_without_a_launch(
    make_record: Any,
) -> None:
    """Every task whose last answer was ``uncertain`` is listed with its
    locator, and reconciling reads its state from the sandbox: the list
    empties, the launch count stays one, no start is sent."""
    record = make_record()
    rig = Rig(
        plan=one_fault("Wait", FaultKind.RESPONSE_LOST),
        scripts={"work": Script.prints("done\n")},
        record=record,
    )
    result = rig.run("run_command", {"command": "work"})
    assert result.status == "uncertain"
    listed = unresolved(make_record())
    assert [answer.task_id for answer in listed] == [rig.task_id()]
    (answer,) = listed
    assert answer.locator["operation_key"] == result.content["operation_key"]
    assert answer.locator["sandbox_id"] == "sbx-1"
    assert answer.owner == {"agent_id": "agent-1"}
    starts = sum(isinstance(effect, Start) for effect in rig.sim.effects_seen)
    (found,) = reconcile(make_record(), rig.sim)
    assert found.verdict == "resolved"
    assert (found.status, found.exit_code) == ("exited", 0)
    assert sum(isinstance(effect, Start) for effect in rig.sim.effects_seen) == starts
    assert unresolved(record) == []
    assert rig.sim.launches[rig.task_id()] == 1


def test_an_uncertain_task_whose_start_never_left_reconciles_as_never_launched(
    make_record: Any,
) -> None:
    record = make_record()
    rig = Rig(plan=one_fault("Ensure", FaultKind.RESPONSE_LOST), record=record)
    assert rig.run("run_command", {"command": "echo once"}).status == "uncertain"
    (found,) = reconcile(record, rig.sim)
    assert found.verdict == "never_launched"
    assert unresolved(record) == []
    assert rig.sim.launches == {}


def test_a_settled_retry_clears_the_task_from_the_list(make_record: Any) -> None:
    record = make_record()
    rig = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), record=record)
    assert rig.run("run_command", {"command": "echo once"}).status == "uncertain"
    assert len(unresolved(record)) == 1
    assert rig.run("run_command", {"command": "echo once"}, call_id="c2").status == "ok"
    assert unresolved(record) == []


def test_native_owner_answers_reconcile_with_their_identity(make_record: Any) -> None:
    record = make_record()
    rig = Rig(mode="native", plan=one_fault("Wait", FaultKind.RESPONSE_LOST), record=record)
    assert rig.run("run_command", {"command": "echo once"}).status == "uncertain"
    (answer,) = unresolved(record)
    assert answer.owner_object() == rig.owner
    (found,) = reconcile(record, rig.sim)
    assert found.verdict == "resolved"


def test_open_record_picks_the_store_by_its_name(tmp_path: Path, postgres: PostgresServer) -> None:
    sqlite_record = open_record(tmp_path / "owned.sqlite")
    assert isinstance(sqlite_record, SQLiteRecord)
    sqlite_record.close()
    pg = open_record(postgres.url(postgres.fresh_database()))
    assert isinstance(pg, PostgresRecord)
    pg.close()
    with pytest.raises(RecordError, match="cannot use"):
        open_record(f"postgresql://sandrail@/nowhere?host={postgres.socket_dir}")


def test_c5_a_database_that_is_not_there_fails_the_first_use_at_once(
    postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's own reason at once, not the pool retrying in the
    background until ``timeout_seconds`` and logging every retry (a
    usage error in the command line used to take 10 s and 8 log lines)."""
    record = PostgresRecord(
        f"postgresql://sandrail@/nowhere?host={postgres.socket_dir}", timeout_seconds=3600
    )
    failed: list[BaseException] = []

    def first_use() -> None:
        try:
            record.check()
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=first_use, daemon=True)
    worker.start()
    worker.join(60)  # far below the hour the pool would wait
    try:
        assert not worker.is_alive(), "the first use waits for the pool's timeout"
        (error,) = failed
        assert isinstance(error, RecordError)
        assert 'database "nowhere" does not exist' in str(error)
        assert not [r for r in caplog.records if "error connecting" in r.getMessage()]
    finally:
        record.close()


# -- the docs' examples ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "number"),
    [("records-and-fleet.md", 0), ("traces.md", 0)],
)
def test_the_docs_offline_examples_run(
    page: str, number: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The how-to pages' examples that need no account or collector run."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "howto" / page).read_text()
    block = re.findall(r"```python\n(.*?)```", text, re.S)[number]
    exec(compile(block, page, "exec"), {"__name__": "docs_example"})
    if page == "records-and-fleet.md":
        assert capsys.readouterr().out == "ok\n"


def test_c2_a_record_names_the_sandbox_of_a_sessions_launches_for_its_owner(
    make_record: Any,
) -> None:
    """What a restarted port hands its backend so that a session whose
    sandbox is gone gets no second one: the sandbox its owner's launches went
    to, the latest first; never another session's, nor another owner's of
    the same session (rows are filed by session; a row is an owner's when its
    task id is the one its key derives for that owner)."""
    record = make_record()
    mine, theirs = sandrail.AgentOwner(agent_id="agent-1"), sandrail.AgentOwner(agent_id="agent-2")
    assert record.session_sandbox("session-1", mine) is None
    for owner, key, sandbox in ((theirs, "op-9", "sbx-theirs"), (mine, "op-1", "sbx-mine")):
        task = sandrail.task_id("session-1", owner, key)
        row = owned(task_id=task, operation_key=key, sandbox_id=sandbox)
        record.remember(request_of(), row)
    unlaunched = sandrail.task_id("session-1", mine, "op-2")
    record.remember(request_of(), owned(task_id=unlaunched, operation_key="op-2", launched=False))
    assert record.session_sandbox("session-1", mine) == "sbx-mine"
    assert record.session_sandbox("session-1", theirs) == "sbx-theirs"
    assert record.session_sandbox("session-2", mine) is None


@pytest.mark.parametrize("where", ["operation_key", "call_id"])
def test_c5_a_nul_in_a_key_is_refused_alike_on_every_record(make_record: Any, where: str) -> None:
    """A NUL character in an operation key (or call id): SQLite could keep
    it, PostgreSQL text cannot. Every record answers the same clear error
    before anything is asked or kept: nothing reaches the sandbox."""
    from sandrail.interpreters.simulator import Simulator

    sim = Simulator()
    record = make_record()
    tools = sandrail.Toolset(
        backend=sim,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        record=record,
    )
    ids = {"operation_key": "k1", "call_id": "c1", where: "nul-\x00-key"}
    result = tools.call_sync("run_command", {"command": "echo hi"}, **ids)
    assert (result.status, result.content["executed"]) == ("error", False)
    code = (
        ErrorCode.OPERATION_KEY_REQUIRED if where == "operation_key" else ErrorCode.REQUEST_UNBOUND
    )
    assert result.content["error_type"] == code.value
    assert "without NUL characters" in result.content["instruction"]
    assert sim.effects_seen == []


def test_c5_a_nul_in_a_session_or_agent_id_is_refused_at_construction() -> None:
    """The same for the identity a port is made with: refused at once."""
    from sandrail.interpreters.simulator import Simulator

    for session, agent in (("s-\x00", "a1"), ("s1", "a-\x00")):
        with pytest.raises(ValueError, match="without NUL characters"):
            sandrail.Toolset(
                backend=Simulator(),
                session_id=session,
                owner=sandrail.AgentOwner(agent_id=agent),
                authorize=lambda request: sandrail.ALLOW,
                assert_authority=lambda request: True,
            )
