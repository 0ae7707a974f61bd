"""Durable ownership records on the command line: ``--record PATH`` (SQLite) or
``--record postgresql://...`` on ``run``, ``code`` and ``mcp``; ``sandrail
uncertain``; ``sandrail migrate-record`` for the old JSON-lines record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs

import sandrail
from sandrail.core import OwnedCommand
from sandrail.records import SQLiteRecord
from tests.postgres_server import PostgresServer

CLI_OWNER = sandrail.AgentOwner(agent_id="cli-agent")


def sandrail_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandrail", *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )


def seed_launched(path: Path, key: str) -> str:
    """A row saying a start of ``key`` (the command line's session and
    owner) may have left, to a sandbox since lost; the task id."""
    task = sandrail.task_id("cli-session", CLI_OWNER, key)
    record = SQLiteRecord(path)
    request = sandrail.ToolRequest(
        call=sandrail.ToolCall(name="run_command", call_id="c", arguments={}),
        operation_key=key,
        session_id="cli-session",
        definition=None,
    )
    row = OwnedCommand(task_id=task, operation_key=key, sandbox_id="sbx-lost", launched=True)
    record.remember(request, row)
    record.close()
    return task


def test_c2_run_with_a_sqlite_record_never_relaunches_in_a_later_invocation(
    tmp_path: Path,
) -> None:
    """Each ``sandrail run`` is a restart: the record says a start of the key
    left to a sandbox since lost, so the retry expects a claim no sandbox can
    show: ``uncertain`` (exit 3), never a launch; ``sandrail uncertain`` then
    lists it with its locator (exit 3)."""
    path = tmp_path / "owned.sqlite"
    task = seed_launched(path, "deploy-1")
    record = str(path)
    retry = sandrail_cli("run", "--operation-key", "deploy-1", "--record", record, "--", "true")
    assert retry.returncode == 3, retry.stdout
    result = json.loads(retry.stdout)
    assert (result["status"], result["content"]["task_id"]) == ("uncertain", task)
    listed = sandrail_cli("uncertain", "--record", record, "--json")
    assert listed.returncode == 3, listed.stderr
    (found,) = json.loads(listed.stdout)["uncertain"]
    assert found["task_id"] == task
    assert found["locator"]["operation_key"] == "deploy-1"
    lines = sandrail_cli("uncertain", "--record", record)
    assert task in lines.stdout
    assert "1 task(s) uncertain" in lines.stderr


def test_uncertain_reconcile_reads_and_never_launches(tmp_path: Path) -> None:
    """``--reconcile`` only reads: where the sandbox is gone the task stays
    uncertain (exit 3) with the reason, and nothing was started."""
    path = tmp_path / "owned.sqlite"
    seed_launched(path, "op-1")
    record = str(path)
    retry = sandrail_cli("run", "--operation-key", "op-1", "--record", record, "--", "true")
    assert retry.returncode == 3
    done = sandrail_cli(
        "uncertain", "--record", record, "--reconcile", "--backend", "simulator", "--json"
    )
    assert done.returncode == 3, done.stderr
    (item,) = json.loads(done.stdout)["reconciled"]
    assert item["verdict"] == "still_uncertain"
    assert item["reason"] is not None


def test_no_uncertain_task_exits_0(tmp_path: Path) -> None:
    record = str(tmp_path / "owned.sqlite")
    assert sandrail_cli("run", "--record", record, "--", "true").returncode == 0
    done = sandrail_cli("uncertain", "--record", record)
    assert (done.returncode, done.stdout) == (0, "")


def test_run_and_code_take_a_postgresql_record(postgres: PostgresServer) -> None:
    database = postgres.fresh_database()
    url = postgres.url(database)
    ran = sandrail_cli("run", "--operation-key", "op-1", "--record", url, "--", "echo", "hi")
    assert ran.returncode == 0, ran.stderr
    coded = sandrail_cli("code", "--operation-key", "op-2", "--record", url, "-", stdin="print(2)")
    assert coded.returncode == 0, coded.stderr
    rows = postgres.sql("SELECT operation_key FROM sandrail_owned ORDER BY 1", database)
    assert rows == [("op-1",), ("op-2",)]


def test_a_record_that_cannot_be_used_is_a_usage_error(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """Nothing runs and no traceback: a PostgreSQL that is not there, an old
    JSON-lines record (the message says how to move it), an empty name."""
    old = tmp_path / "owned.jsonl"
    old.write_text("{}\n")
    nowhere = f"postgresql://sandrail@/nowhere?host={postgres.socket_dir}"
    for command in (("run", "--", "true"), ("mcp", "--backend", "simulator")):
        for spec, says in ((nowhere, "cannot use"), (str(old), "migrate-record"), (" ", "must")):
            done = sandrail_cli(command[0], "--record", spec, *command[1:])
            assert done.returncode == 2, (command, spec, done.stderr)
            assert says in done.stderr
            assert "Traceback" not in done.stderr
    assert sandrail_cli("uncertain", "--record", nowhere).returncode == 2


def test_migrate_record_moves_an_old_json_lines_record_once(tmp_path: Path) -> None:
    old = tmp_path / "owned.jsonl"
    task = sandrail.task_id("cli-session", CLI_OWNER, "deploy-1")
    row = OwnedCommand(task_id=task, operation_key="deploy-1", sandbox_id="sbx-1", launched=True)
    old.write_text(json.dumps(attrs.asdict(row)) + "\n")
    new = str(tmp_path / "owned.sqlite")
    moved = sandrail_cli("migrate-record", str(old), new)
    assert moved.returncode == 0, moved.stderr
    assert "moved 1 task(s)" in moved.stdout
    # The moved row protects the retry: the start may have left, so it is
    # uncertain (a fresh simulator cannot show the claim), never a launch.
    retry = sandrail_cli("run", "--operation-key", "deploy-1", "--record", new, "--", "true")
    assert retry.returncode == 3, retry.stdout
    again = sandrail_cli("migrate-record", str(old), str(old))
    assert again.returncode == 2
    old.write_text("garbage\n")
    broken = sandrail_cli("migrate-record", str(old), new)
    assert broken.returncode == 1
    assert "line 1: not an ownership record" in broken.stderr
    assert "Traceback" not in broken.stderr


HOSTILE_KEYS = (
    "k1\n2026-01-01 run_command forged session_id=s operation_key=ok",  # a forged line
    "k2\rhidden",  # a carriage return rewrites the line
    "k3\x1b]52;c;ZWNobyBwd25lZA==\x07",  # OSC 52: a clipboard write
    "k4\u202eevil\u2066",  # bidirectional override and isolate
    "k5\x9b31m",  # a C1 control (CSI)
    "k6 sandbox_id=forged",  # a forged field
)


def test_c6_uncertain_lines_escape_what_a_terminal_would_act_on(tmp_path: Path) -> None:
    """Stored operation keys come from clients (an MCP client sends any key in
    ``_meta``): the human listing prints every one on its own line, with no
    control, format or line-breaking character and no forged field."""
    from click.testing import CliRunner

    from sandrail.cli import main

    path = tmp_path / "owned.sqlite"
    record = str(path)
    runner = CliRunner()
    for key in HOSTILE_KEYS:
        seed_launched(path, key)
        ran = runner.invoke(main, ["run", "--operation-key", key, "--record", record, "--", "true"])
        assert ran.exit_code == 3, ran.output
    listed = runner.invoke(main, ["uncertain", "--record", record])
    assert listed.exit_code == 3
    lines = listed.stdout.splitlines()
    assert len(lines) == len(HOSTILE_KEYS)
    for line in lines:
        assert line.isprintable(), repr(line)
        assert line.count(" sandbox_id=") == 1
        assert line.count(" operation_key=") == 1
    assert any('operation_key="k1\\x0a2026-01-01\\x20run_command' in line for line in lines)
    assert any('"k3\\x1b]52;c;ZWNobyBwd25lZA==\\x07"' in line for line in lines)
    assert any('"k4\\u202eevil\\u2066"' in line for line in lines)
    assert any('"k5\\x9b31m"' in line for line in lines)
    # The JSON listing was already safe, and still holds each key exactly.
    as_json = runner.invoke(main, ["uncertain", "--record", record, "--json"])
    keys = {found["locator"]["operation_key"] for found in json.loads(as_json.stdout)["uncertain"]}
    assert keys == set(HOSTILE_KEYS)
