"""C17, as a property over everything sandrail writes or shows: no stored or
shown byte is a function of a secret.

The same calls are run twice, with different secret values (of the same
length, and of other lengths), placed where a harness puts them: an env
value that the command text repeats, a ``redact=`` value in the command
text, an env value of an earlier call that a later command repeats, an env
value inside a snippet's source. Every durable or visible output of the two
runs must then be identical, wherever sandrail writes it: the ownership
record's rows (SQLite and PostgreSQL) and files, the cassette, the record
``sandrail run --record`` writes, spans, metrics, debug logs, results, MCP
fallback keys and the command line's output. Where a value is masked, the
marker stands in both runs. (Output that *prints* a masked value shows its
length in byte counts and cursors: a stated limit, see
``docs/explanation/limits.md``; the commands here print none.)

Each secret begins with a letter of its own that no other secret and no
command text holds, so no secret is part of another or of the text around
it: what is masked is exactly what was placed.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sandrail
from sandrail.cli import main as cli
from sandrail.core import PolicyDecision
from sandrail.interpreters.replay import Recorder
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Script, Simulator
from sandrail.records import OwnershipRecord, PostgresRecord, SQLiteRecord
from tests.postgres_server import PostgresServer
from tests.test_tracing import Telemetered

ROLES = "QXZJ"
"""The first letter of each secret: env value, redact= value, earlier
call's env value, snippet's env value."""
_TAIL = "0123456789ABCDEFGHKLMNPRSTUVWY"  # no role letter, nothing of the templates


def _secret(role: str, length: int, draw: Any) -> str:
    return role + draw(st.text(alphabet=_TAIL, min_size=length - 1, max_size=length - 1))


@st.composite
def secret_pairs(draw: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Two sets of the four secrets, one for each run: for each role, either
    of the same length or of lengths drawn independently (8 to 40)."""
    first, second = [], []
    for role in ROLES:
        length = draw(st.integers(8, 40))
        other = length if draw(st.booleans()) else draw(st.integers(8, 40))
        first.append(_secret(role, length, draw))
        second.append(_secret(role, other, draw))
    return tuple(first), tuple(second)


def _scripts() -> dict[str, Script]:
    return {"true": Script.prints("")}


# ---------------------------------------------------------------------------
# One run: the calls, and everything they leave behind


class Outputs(Telemetered):
    """What one run leaves behind, in comparable form."""

    def __init__(self) -> None:
        super().__init__()
        self.log = io.StringIO()
        self.found: dict[str, Any] = {}

    @contextlib.contextmanager
    def logging(self) -> Iterator[None]:
        handler = logging.StreamHandler(self.log)
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        logger = logging.getLogger("sandrail")
        level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)

    def telemetry(self) -> dict[str, Any]:
        spans = []
        for span in self.spans.get_finished_spans():
            spans.append(
                {
                    "name": span.name,
                    "attributes": dict(span.attributes or {}),
                    "events": [(e.name, dict(e.attributes or {})) for e in span.events],
                    "status": str(span.status.status_code),
                }
            )
        points = []
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        points.append((metric.name, dict(point.attributes), point.count))
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        return {"spans": spans, "metrics": sorted(points, key=repr), "logs": self.log.getvalue()}


def _policy(request: sandrail.ToolRequest) -> PolicyDecision:
    """Allow, but ask a person about ``./approve.sh`` (its question and the
    decision are kept in the record too)."""
    command = request.call.arguments.get("command", "")
    if isinstance(command, str) and command.startswith("./approve.sh"):
        return sandrail.ApprovalRequired(interaction_id="ask-1")
    return sandrail.ALLOW


def _toolset(backend: Any, record: OwnershipRecord, out: Outputs, redact: str, **kw: Any) -> Any:
    return sandrail.Toolset(
        backend=backend,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=_policy,
        assert_authority=lambda request: True,
        record=record,
        redact=[redact],
        run_id="run-1",
        tracer_provider=out.tracer_provider,
        meter_provider=out.meter_provider,
        **kw,
    )


def run_calls(secrets: tuple[str, ...], record: OwnershipRecord, where: Path) -> Outputs:
    """The calls of one run, on ``record``; everything they left behind."""
    env_value, redacted, earlier, snippet = secrets
    out = Outputs()
    results: list[str] = []
    # A Start whose answer is lost: its call is uncertain and noted for the
    # operator (the record's answers), its retry deduplicated.
    plan = FaultPlan((Fault(effect="Start", occurrence=2, kind=FaultKind.RESPONSE_LOST),))
    sim = Simulator(scripts=_scripts(), plan=plan)
    with out.logging():
        commands = Recorder(sim, where / "commands.jsonl")
        tools = _toolset(commands, record, out, redacted, tools=("command",))
        deploy = {"command": f"./deploy.sh --token {env_value}", "env": {"T": env_value}}
        calls: list[tuple[str, dict[str, Any], str]] = [
            ("run_command", deploy, "k1"),
            ("run_command", {"command": f"curl -H 'auth: {redacted}' x"}, "k2"),
            ("run_command", {"command": f"./up.sh {env_value}", "env": {"T": env_value}}, "k3"),
            ("run_command", {"command": "true", "env": {"EARLY": earlier}}, "k4"),
            ("run_command", {"command": f"./login.sh {earlier}"}, "k5"),
            # Retries: the same call (deduplicated), the lost one (reconciled),
            # and a visible change under a used key (a conflict, C3).
            ("run_command", deploy, "k1"),
            ("run_command", {"command": f"./up.sh {env_value}", "env": {"T": env_value}}, "k3"),
            ("run_command", {"command": f"./login.sh --v {earlier}"}, "k5"),
        ]
        for number, (name, arguments, key) in enumerate(calls, start=1):
            result = tools.call_sync(name, arguments, call_id=f"c{number}", operation_key=key)
            results.append(result.to_json())
        assert [json.loads(r)["status"] for r in results] == [
            "ok",
            "ok",
            "uncertain",
            "ok",
            "ok",
            "ok",
            "ok",
            "error",
        ], results
        # A person is asked about a call holding the redact= value, and approves it.
        approve = {"command": f"./approve.sh {redacted}"}
        for approved in (False, True):
            result = tools.call_sync(
                "run_command", approve, call_id="c10", operation_key="k10", approved=approved
            )
            results.append(result.to_json())
        assert [json.loads(r)["status"] for r in results[-2:]] == ["approval_required", "ok"]
        commands.close()
        code = Recorder(Simulator(), where / "code.jsonl")
        coder = _toolset(code, record, out, redacted, tools=("code",))
        result = coder.call_sync(
            "run_code",
            {"code": f"print(len('{snippet}'))", "env": {"S": snippet}},
            call_id="c9",
            operation_key="k9",
        )
        results.append(result.to_json())
        code.close()
    out.found["results"] = results
    out.found["cassettes"] = [
        (where / name).read_text(encoding="utf-8") for name in ("commands.jsonl", "code.jsonl")
    ]
    out.found.update(out.telemetry())
    return out


def _sqlite_rows(path: Path) -> dict[str, Any]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        listed = db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        tables = [name for (name,) in listed]
        return {table: _rows(db.execute(f"SELECT * FROM {table}")) for table in sorted(tables)}


def _rows(cursor: Any) -> list[dict[str, Any]]:
    names = [column[0] for column in cursor.description]
    rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    for row in rows:
        if "updated_at" in row:  # the database's clock: no function of a secret
            row["updated_at"] = "<time>"
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True, default=str))


def _file_bytes(directory: Path) -> bytes:
    """Every byte of every file the run left (the database and its journal
    included: a freed page may still hold what a row once did)."""
    return b"".join(path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file())


def _cli(secrets: tuple[str, ...], where: Path) -> dict[str, Any]:
    """The command line: ``run`` and ``code`` with ``--record``, then
    ``uncertain`` (lines, ``--json``, ``--reconcile``) over the record the
    library calls left."""
    env_value, _, _, snippet = secrets
    runner = CliRunner()
    record = str(where / "cli.sqlite")
    shown = []
    for arguments in (
        [
            "run",
            "--backend",
            "simulator",
            "--record",
            record,
            "--operation-key",
            "cli-1",
            "--env",
            f"T={env_value}",
            "--",
            "./deploy.sh",
            "--token",
            env_value,
        ],
        [
            "code",
            "--backend",
            "simulator",
            "--record",
            record,
            "--operation-key",
            "cli-2",
            "--env",
            f"S={snippet}",
            "--language",
            "python",
            f"print('{snippet}' == '')",
        ],
    ):
        done = runner.invoke(cli, arguments, catch_exceptions=False)
        shown.append(_untimed_all((done.exit_code, done.stdout, done.stderr)))
    for arguments in (
        ["uncertain", "--record", str(where / "library.sqlite")],
        ["uncertain", "--record", str(where / "library.sqlite"), "--json"],
        [
            "uncertain",
            "--record",
            str(where / "library.sqlite"),
            "--reconcile",
            "--backend",
            "simulator",
        ],
    ):
        done = runner.invoke(cli, arguments, catch_exceptions=False)
        shown.append(_untimed_all((done.exit_code, done.stdout, done.stderr)))
    rows = json.loads(_untimed(json.dumps(_sqlite_rows(Path(record)))))
    return {"shown": shown, "rows": rows}


def _untimed(text: str) -> str:
    """``text`` without the clock's readings and the command line's random
    call ids (``cli-`` and 12 hex digits): neither is a function of a secret."""
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?", "<time>", text)
    return re.sub(r"cli-[0-9a-f]{12}\b", "cli-<call>", text)


def _untimed_all(item: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_untimed(part) if isinstance(part, str) else part for part in item)


def one_run_on_sqlite(secrets: tuple[str, ...]) -> tuple[dict[str, Any], bytes]:
    with tempfile.TemporaryDirectory(prefix="sandrail-c17-") as name:
        where = Path(name)
        record = SQLiteRecord(where / "library.sqlite")
        try:
            out = run_calls(secrets, record, where)
        finally:
            record.close()
        out.found["rows"] = _sqlite_rows(where / "library.sqlite")
        out.found["cli"] = _cli(secrets, where)
        return out.found, _file_bytes(where)


def _assert_same(first: dict[str, Any], second: dict[str, Any]) -> None:
    for part in first:
        assert first[part] == second[part], f"the {part} differ with the secrets"


def _assert_absent(secrets: tuple[str, ...], *outputs: bytes) -> None:
    for secret in secrets:
        for output in outputs:
            assert secret.encode() not in output


@settings(max_examples=12, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(pair=secret_pairs())
def test_c17_no_output_on_sqlite_is_a_function_of_a_secret(
    pair: tuple[tuple[str, ...], tuple[str, ...]],
) -> None:
    first, first_files = one_run_on_sqlite(pair[0])
    second, second_files = one_run_on_sqlite(pair[1])
    _assert_same(first, second)
    _assert_absent(pair[0], first_files, json.dumps(first).encode())
    _assert_absent(pair[1], second_files, json.dumps(second).encode())


def _postgres_rows(server: PostgresServer, database: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(server.conninfo(database), autocommit=True) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        ]
        return {table: _rows(conn.execute(f"SELECT * FROM {table}")) for table in sorted(tables)}


@pytest.mark.long
@settings(
    max_examples=6,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    deadline=None,
)
@given(pair=secret_pairs())
def test_c17_no_output_on_postgresql_is_a_function_of_a_secret(
    postgres: PostgresServer, pair: tuple[tuple[str, ...], tuple[str, ...]]
) -> None:
    found = []
    for secrets in pair:
        database = postgres.fresh_database()
        record = PostgresRecord(postgres.url(database))
        with tempfile.TemporaryDirectory(prefix="sandrail-c17-pg-") as name:
            try:
                out = run_calls(secrets, record, Path(name))
            finally:
                record.close()
        out.found["rows"] = _postgres_rows(postgres, database)
        found.append(out.found)
    _assert_same(found[0], found[1])
    for secrets, output in zip(pair, found, strict=True):
        _assert_absent(secrets, json.dumps(output).encode())


# ---------------------------------------------------------------------------
# MCP fallback keys


async def _mcp_keys(secrets: tuple[str, ...]) -> list[Any]:
    from mcp import Client

    from sandrail.adapters.mcp import OPERATION_KEY_META, server

    env_value, redacted, earlier, _ = secrets
    tools = sandrail.Toolset(
        backend=Simulator(scripts=_scripts()),
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        redact=[redacted],
        run_id="run-1",
    )
    shown = []
    async with Client(server(tools)) as client:
        for name, arguments in (
            ("run_command", {"command": f"./a.sh {env_value}", "env": {"T": env_value}}),
            ("run_command", {"command": f"./b.sh {redacted}"}),
            ("run_command", {"command": "true", "env": {"E": earlier}}),
            ("run_command", {"command": f"./c.sh {earlier}"}),
        ):
            result = await client.call_tool(name, arguments)
            shown.append((result.meta[OPERATION_KEY_META], result.content[0].text))
    return shown


class _Fixed:
    """Stands in for the MCP server's randomness (its epoch and key), which
    is no function of a secret but differs from one run to the next."""

    @staticmethod
    def token_bytes(n: int) -> bytes:
        return b"k" * n

    class _Hex:
        hex = "e" * 32

    @classmethod
    def uuid4(cls) -> Any:
        return cls._Hex()


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pair=secret_pairs())
def test_c17_mcp_fallback_keys_are_no_function_of_a_secret(
    monkeypatch: pytest.MonkeyPatch, pair: tuple[tuple[str, ...], tuple[str, ...]]
) -> None:
    import sandrail.adapters.mcp as mcp_adapter

    monkeypatch.setattr(mcp_adapter, "secrets", _Fixed)
    monkeypatch.setattr(mcp_adapter, "uuid", _Fixed)
    first = asyncio.run(_mcp_keys(pair[0]))
    second = asyncio.run(_mcp_keys(pair[1]))
    assert first == second
    keys = [key for key, _ in first]
    assert len(set(keys)) == len(keys)


async def _two_env_values(values: tuple[str, str]) -> list[str]:
    from mcp import Client

    from sandrail.adapters.mcp import OPERATION_KEY_META, server

    tools = sandrail.Toolset(
        backend=Simulator(plan=FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),))),
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    keys = []
    async with Client(server(tools)) as client:
        for value in values:
            result = await client.call_tool("run_command", {"command": "./x", "env": {"T": value}})
            keys.append(result.meta[OPERATION_KEY_META])
    return keys


def test_c2_mcp_calls_that_differ_only_in_an_env_value_still_get_keys_of_their_own() -> None:
    """The key is of the call as shown (the env value as the marker), yet
    two calls that differ only there are not one call: the first is left
    uncertain, and the second, with another value, gets a key of its own."""
    first, second = asyncio.run(_two_env_values(("Q" + "1" * 12, "Q" + "2" * 12)))
    assert first != second


# ---------------------------------------------------------------------------
# C2 and C3 across a restart, decided without a secret-derived byte

TOKEN = "Q" + "7" * 15


def _restarted(sim: Simulator) -> Any:
    """The same sandboxes seen by a new process: a backend object of its
    own, so nothing the first life masked is remembered."""

    def backend(effect: Any) -> Any:
        return sim(effect)

    return backend


def _life(backend: Any, record: OwnershipRecord, redact: tuple[str, ...] = ()) -> Any:
    return sandrail.Toolset(
        backend=backend,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        record=record,
        redact=redact,
        tools=("command",),
    )


def _starts(sim: Simulator) -> int:
    return sum(1 for effect in sim.effects_seen if type(effect).__name__ == "Start")


@pytest.fixture
def record(tmp_path: Path) -> Iterator[SQLiteRecord]:
    opened = SQLiteRecord(tmp_path / "owned.sqlite")
    yield opened
    opened.close()


def _first_life(record: OwnershipRecord) -> Simulator:
    """A first life that launched ``deploy --token TOKEN`` (TOKEN in env and
    in the text) and ``login TOKEN`` (TOKEN known from the earlier call)."""
    sim = Simulator(scripts=_scripts())
    first = _life(_restarted(sim), record)
    deploy = {"command": f"./deploy.sh --token {TOKEN}", "env": {"T": TOKEN}}
    assert first.call_sync("run_command", deploy, call_id="c1", operation_key="k1").status == "ok"
    login = {"command": f"./login.sh {TOKEN}"}
    assert first.call_sync("run_command", login, call_id="c2", operation_key="k2").status == "ok"
    return sim


def test_c2_after_a_restart_the_same_calls_are_deduplicated_from_the_record(
    record: SQLiteRecord,
) -> None:
    sim = _first_life(record)
    again = _life(_restarted(sim), record, redact=(TOKEN,))  # handed back, as documented
    deploy = {"command": f"./deploy.sh --token {TOKEN}", "env": {"T": TOKEN}}
    login = {"command": f"./login.sh {TOKEN}"}
    for key, arguments in (("k1", deploy), ("k2", login)):
        result = again.call_sync("run_command", arguments, call_id="r", operation_key=key)
        assert (result.status, result.content["deduplicated"]) == ("ok", True), result.content
    assert sum(sim.launches.values()) == 2


def test_c3_after_a_restart_a_visible_change_under_one_key_is_refused_before_any_start(
    record: SQLiteRecord,
) -> None:
    """What the result shows of the command changed: the record alone tells
    it, so the start never leaves (the first one may still arrive)."""
    sim = _first_life(record)
    starts = _starts(sim)
    again = _life(_restarted(sim), record, redact=(TOKEN,))
    changed = {"command": f"./deploy.sh --force --token {TOKEN}", "env": {"T": TOKEN}}
    result = again.call_sync("run_command", changed, call_id="r", operation_key="k1")
    assert result.content["error_type"] == "e2b_command_operation_conflict"
    assert result.content["executed"] is False
    assert _starts(sim) == starts  # decided from the record: nothing sent
    assert sum(sim.launches.values()) == 2


def test_c3_after_a_restart_a_change_inside_a_masked_value_is_refused_by_the_sandbox(
    record: SQLiteRecord,
) -> None:
    """Only the masked value changed (the env value, and the same value in
    the text): the record holds nothing that could tell it (that would be a
    digest of the value); the sandbox's claim, keyed where it rests, does."""
    sim = _first_life(record)
    other = "Q" + "8" * 15
    again = _life(_restarted(sim), record)
    changed = {"command": f"./deploy.sh --token {other}", "env": {"T": other}}
    result = again.call_sync("run_command", changed, call_id="r", operation_key="k1")
    assert result.content["error_type"] == "e2b_command_operation_conflict"
    assert result.content["executed"] is False
    assert sum(sim.launches.values()) == 2


# ---------------------------------------------------------------------------
# The digest a record keeps, directly


@pytest.mark.parametrize("strict", [False, True])
def test_c17_the_recorded_digest_is_of_the_call_as_shown(strict: bool) -> None:
    """Of the call as its result shows it: the same whatever the masked
    value (env, ``redact=``, in the text, in a strict profile's env list),
    and another for any change that shows."""
    from sandrail.core import REDACTED, recorded_digest, shown_arguments

    def call(value: str, command: str = "./deploy.sh --token {}") -> dict[str, Any]:
        env: Any = [{"name": "T", "value": value}] if strict else {"T": value}
        return {"command": command.format(value), "env": env, "cwd": f"/w/{value}"}

    one, two = "Q" + "1" * 9, "Q" + "2" * 20
    shown = shown_arguments(call(one), ["X" * 10])
    assert one not in json.dumps(shown)
    assert shown["command"] == f"./deploy.sh --token {REDACTED}"
    assert shown == shown_arguments(call(two), ["X" * 10])
    assert recorded_digest("run_command", call(one)) == recorded_digest("run_command", call(two))
    changed = call(one, "./deploy.sh --force {}")
    assert recorded_digest("run_command", changed) != recorded_digest("run_command", call(one))
    named = {"command": "curl " + "X" * 10, "args": ("X" * 10, 1)}
    assert shown_arguments(named, ["X" * 10]) == {
        "command": f"curl {REDACTED}",
        "args": [REDACTED, 1],
    }
