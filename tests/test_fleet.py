"""The fleet tested for real: several worker processes share one
ownership record (a real PostgreSQL, or SQLite on this machine) and one
local-e2b server, run the same operation keys interleaved, and are SIGKILLed
and restarted at random moments (and, with PostgreSQL, the database is
restarted under them). Launches are counted from inside the sandbox (each
command sends a mark to the server's ground truth): exactly one per key, no
key lost, and the calls a restarted worker makes are decisive (>= 99%
``ok``/``error``, less the answers the database's own restart left
``uncertain``: the record could not be read). A worker whose execution
fence a newer one superseded is refused inside the sandbox (C10).

The CI profile keeps each fleet to about twenty seconds; ``HYPOTHESIS_PROFILE=
campaign`` runs a bigger one. The figures are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

import sandrail
from sandrail import ErrorCode
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B, serve
from sandrail.records import PostgresRecord, SQLiteRecord, unresolved
from sandrail.testing import native_identity
from tests.postgres_server import PostgresServer

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="local-e2b user separation needs root"),
    pytest.mark.long,
]

REPO = Path(__file__).resolve().parent.parent
CAMPAIGN = os.environ.get("HYPOTHESIS_PROFILE") == "campaign"


@attrs.frozen
class FleetSize:
    workers: int
    keys: int
    seconds: float


SIZE = FleetSize(workers=6, keys=60, seconds=90.0) if CAMPAIGN else FleetSize(3, 16, 16.0)


@attrs.frozen
class Figures:
    """What one fleet did, for the report."""

    workers: int
    kills: int
    database_restarts: int
    keys: int
    launches: dict[str, int]
    calls: int
    after_restart: int
    decisive_after_restart: int
    statuses: dict[str, int]
    database_restarted: tuple[float, float] | None = None
    """When the database's restart began and ended, in seconds from the
    fleet's start."""
    uncertain_after_restart: tuple[tuple[str | None, float], ...] = ()
    """Each undecided answer a restarted worker got: its error type and
    when, in seconds from the fleet's start."""

    @property
    def decisive_share(self) -> float:
        """The share of a restarted worker's answers that are decisive, less
        those the database's own restart made undecided (the record could
        not be read, so ``uncertain`` is the answer: C6)."""
        counted = self.after_restart - len(self.record_down_answers)
        return self.decisive_after_restart / counted if counted else 1.0

    @property
    def record_down_answers(self) -> tuple[tuple[str | None, float], ...]:
        """The undecided answers a restarted worker got for an unreadable
        record while the database restarted (or within ten seconds after,
        while its connections came back)."""
        window = self.database_restarted
        if window is None:
            return ()
        return tuple(
            (error, at)
            for error, at in self.uncertain_after_restart
            if error == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value
            and window[0] <= at <= window[1] + 10.0
        )

    def summary(self) -> str:
        launched = Counter(self.launches.values())
        return (
            f"workers={self.workers} kills={self.kills} db_restarts={self.database_restarts} "
            f"keys={self.keys} launches_per_key={dict(launched)} calls={self.calls} "
            f"statuses={self.statuses} after_restart={self.after_restart} "
            f"decisive_share={self.decisive_share:.4f} "
            f"record_down={len(self.record_down_answers)} "
            f"database_restarted={self.database_restarted} "
            f"uncertain_after_restart={self.uncertain_after_restart}"
        )


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve(signal_scope="process") as running:
        yield running


def run_fleet(
    server: LocalE2B,
    record: str,
    out: Path,
    *,
    seed: int,
    restart_database: PostgresServer | None = None,
) -> Figures:
    """Run the fleet (see the module doc) and gather its figures."""
    rng = random.Random(seed)
    began = time.time()
    session = f"fleet-{uuid.uuid4().hex[:10]}"
    prefix = session
    keys = [f"k{n:03d}" for n in range(SIZE.keys)]
    env = {
        **os.environ,
        **server.env,
        "FLEET_MARK_COMMAND": server.mark("MARK").replace("MARK", "{mark}"),
    }
    restarted: set[str] = set()
    logs: list[Path] = []

    def spawn(slot: int) -> subprocess.Popen[bytes]:
        order = keys[:]
        rng.shuffle(order)
        log = out / f"worker-{slot}-{len(logs)}.jsonl"
        logs.append(log)
        return subprocess.Popen(
            [sys.executable, "-m", "tests.fleet_worker", record, session, str(log), prefix, *order],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    workers = {slot: spawn(slot) for slot in range(SIZE.workers)}
    log_of = {worker.pid: logs[slot] for slot, worker in workers.items()}

    def _working(worker: subprocess.Popen[bytes]) -> bool:
        log = log_of.get(worker.pid)
        return log is not None and log.exists() and log.stat().st_size > 0

    kills = database_restarts = 0
    database_restarted: tuple[float, float] | None = None
    deadline = time.monotonic() + SIZE.seconds
    database_at = time.monotonic() + SIZE.seconds / 2
    # Past the deadline only while no kill has landed yet (a slow machine
    # whose workers were still starting), and never for long.
    while time.monotonic() < deadline or (not kills and time.monotonic() < deadline + 60):
        time.sleep(rng.uniform(1.0, 2.5))
        if (
            restart_database is not None
            and not database_restarts
            and time.monotonic() > database_at
        ):
            down = time.time() - began
            restart_database.restart()  # immediate: as a crash would
            database_restarted = (round(down, 1), round(time.time() - began, 1))
            database_restarts += 1
            continue
        # A worker at work (it has answered a call, so it is past its start-up).
        busy = [
            slot for slot, worker in workers.items() if worker.poll() is None and _working(worker)
        ]
        if not busy:
            continue
        slot = rng.choice(busy)
        workers[slot].send_signal(signal.SIGKILL)
        workers[slot].wait(30)
        kills += 1
        restarted.add(str(len(logs)))  # the log the restarted worker writes
        workers[slot] = spawn(slot)
        log_of[workers[slot].pid] = logs[-1]
    for worker in workers.values():
        try:
            worker.wait(180)
        except subprocess.TimeoutExpired:
            worker.kill()
            raise
    lines = []
    for number, log in enumerate(logs):
        if log.exists():
            for text in log.read_text().splitlines():
                lines.append((str(number), json.loads(text)))
    truth = server.truth()
    after = [line for number, line in lines if number in restarted]
    return Figures(
        workers=SIZE.workers,
        kills=kills,
        database_restarts=database_restarts,
        keys=len(keys),
        launches={key: truth.marked(f"{prefix}.{key}") for key in keys},
        calls=len(lines),
        after_restart=len(after),
        decisive_after_restart=sum(line["status"] in ("ok", "error") for line in after),
        statuses=dict(Counter(line["status"] for _, line in lines)),
        database_restarted=database_restarted,
        uncertain_after_restart=tuple(
            (line["error_type"], round(line["time"] - began, 1))
            for line in after
            if line["status"] not in ("ok", "error")
        ),
    )


def check(figures: Figures) -> None:
    print(f"\nfleet figures: {figures.summary()}")
    assert figures.kills >= 1
    assert set(figures.launches.values()) == {1}, figures.launches  # C2; no key lost
    assert figures.after_restart > 0
    assert figures.decisive_share >= 0.99, figures.summary()


def test_c2_a_fleet_on_postgres_killed_at_random_launches_each_key_once(
    server: LocalE2B, postgres: PostgresServer, tmp_path: Path
) -> None:
    database = postgres.fresh_database()
    figures = run_fleet(
        server, postgres.url(database), tmp_path, seed=17, restart_database=postgres
    )
    check(figures)
    assert figures.database_restarts == 1
    # Every worker that was not killed ended with decisive answers: the
    # fleet's record lists nothing uncertain but what a kill interrupted.
    with PostgresRecord(postgres.conninfo(database)) as record:
        assert all(answer.status == "uncertain" for answer in unresolved(record))


def test_c2_a_fleet_on_sqlite_killed_at_random_launches_each_key_once(
    server: LocalE2B, tmp_path: Path
) -> None:
    figures = run_fleet(server, str(tmp_path / "owned.sqlite"), tmp_path, seed=20)
    check(figures)


def test_c10_a_worker_whose_fence_was_superseded_is_refused_inside_the_sandbox(
    server: LocalE2B, tmp_path: Path
) -> None:
    """A lease taken over: the newer worker launches with fence 2; the old
    worker, still at fence 1, tries a new key: the sandbox refuses it
    (``e2b_command_fence_stale``, nothing ran), counted from inside."""
    session = f"fence-{uuid.uuid4().hex[:10]}"
    owner = sandrail.NativeOwner(scope={"tenant": "fleet"})
    path = tmp_path / "owned.sqlite"

    def worker() -> tuple[E2BBackend, sandrail.ToolPort]:
        backend = E2BBackend(**server.sdk_options)
        port = sandrail.command_tools(
            backend=backend,
            session_id=session,
            owner=owner,
            authorize=lambda request: sandrail.ALLOW,
            assert_authority=lambda request: True,
            record=SQLiteRecord(path),
        )
        return backend, port

    def call(port: sandrail.ToolPort, key: str, fence: int) -> sandrail.ToolResult:
        identity = native_identity(fence=fence, scope={"tenant": "fleet"})
        return port.execute_sync(
            sandrail.ToolRequest(
                call=sandrail.ToolCall(
                    name="run_command",
                    call_id=f"c-{key}",
                    arguments={"command": server.mark(f"{session}.{key}")},
                ),
                operation_key=key,
                session_id=session,
                definition=port.definition("run_command"),
                identity=identity,
            )
        )

    (old_backend, old), (new_backend, new) = worker(), worker()
    try:
        assert call(old, "a1", fence=1).status == "ok"
        assert call(new, "b1", fence=2).status == "ok"  # the lease moves on
        stale = call(old, "a2", fence=1)
    finally:
        old_backend.close()
        new_backend.close()
    assert stale.status == "error", stale.content
    assert stale.content["executed"] is False
    assert stale.content["error_type"] == ErrorCode.FENCE_STALE.value
    truth = server.truth()
    assert [truth.marked(f"{session}.{key}") for key in ("a1", "b1", "a2")] == [1, 1, 0]
