"""A real PostgreSQL server for the record and fleet tests.

The ``postgres`` fixture (session scope: the suite pays the start once)
makes a fresh data directory with ``initdb``, starts ``postgres`` on a unix
socket in a temporary directory (no TCP port at all), and stops it at the
end. PostgreSQL refuses to run as root, so under root the server runs as the
``postgres`` user (or ``nobody``) through ``runuser``; otherwise as whoever
runs the tests. Each test that writes takes a database of its own
(:meth:`PostgresServer.fresh_database`), so tests never see each other's rows.

The tests skip, saying why, only where no PostgreSQL binaries exist; CI has
PostgreSQL 15 and runs them.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["Blackhole", "PostgresServer", "find_bindir", "frozen", "postgres", "private_server"]


def find_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``: Debian's versioned one,
    newest first, else whatever ``PATH`` has."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "initdb").is_file() and Path(candidate, "pg_ctl").is_file():
            return Path(candidate)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _server_user() -> str | None:
    """Whom to run the server as: ``None`` for this process's own user."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root, and neither a postgres nor a nobody user exists")


class PostgresServer:
    """One PostgreSQL server on a unix socket in ``root``."""

    def __init__(self, bindir: Path, root: Path) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.socket_dir = root / "socket"
        self.log = root / "server.log"
        self.user = _server_user()
        self.role = "sandrail"
        self.socket_dir.mkdir()
        if self.user is not None:
            record = pwd.getpwnam(self.user)
            for path in (root, self.socket_dir):
                os.chown(path, record.pw_uid, record.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            self.role,
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )

    def _run(self, program: str, *arguments: str) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / program), *arguments]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(
            command, check=True, capture_output=True, text=True, timeout=120, cwd=self.root
        )

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off "
            "-c max_connections=100 -c shared_buffers=16MB"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: as a crash would, no shutdown checkpoint)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self.stop("immediate")
        self.start()

    def conninfo(self, dbname: str = "postgres") -> str:
        """A libpq connection string for ``dbname`` over the socket."""
        return f"host={self.socket_dir} user={self.role} dbname={dbname}"

    def url(self, dbname: str = "postgres") -> str:
        """The same as a ``postgresql://`` URL (what ``--record`` takes)."""
        return f"postgresql://{self.role}@/{dbname}?host={self.socket_dir}"

    def sql(self, statement: str, dbname: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement as the superuser role, autocommit; its rows."""
        import psycopg

        with psycopg.connect(self.conninfo(dbname), autocommit=True) as conn:
            cursor = conn.execute(statement.encode())
            return cursor.fetchall() if cursor.description else []

    def processes(self) -> list[int]:
        """The pids of this server: its postmaster and every child of it."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        found = [postmaster]
        for stat in glob.glob("/proc/[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(stat).read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:
                    found.append(int(Path(stat).parent.name))
        return found

    def fresh_database(self) -> str:
        """A new, empty database; its name."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        self.sql(f"CREATE DATABASE {name}")
        return name


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A running PostgreSQL server for the whole test session."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed here (no initdb/pg_ctl found)")
    root = Path(tempfile.mkdtemp(prefix="sandrail-pg-"))
    server = PostgresServer(bindir, root)
    server.start()
    try:
        yield server
    finally:
        try:
            server.stop("immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def private_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the calling test's own (one it may freeze or
    stop without touching the session's), stopped at the end."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed here (no initdb/pg_ctl found)")
    root = Path(tempfile.mkdtemp(prefix="sandrail-pg-private-"))
    try:
        server = PostgresServer(bindir, root)
        server.start()
        try:
            yield server
        finally:
            for pid in server.processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def frozen(server: PostgresServer) -> Iterator[None]:
    """``server`` (a :func:`private_server`) SIGSTOPped, every process of it,
    as a host that froze would be; SIGCONT at the end."""
    pids = server.processes()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


class Blackhole:
    """A loopback TCP proxy to ``server``'s unix socket that can turn into a
    black hole: after :meth:`freeze` it holds every byte and every new
    connection, answering nothing and closing nothing (a partition that
    drops packets: no RST, no FIN; the kernel still acknowledges)."""

    def __init__(self, server: PostgresServer) -> None:
        self._target = str(server.socket_dir / ".s.PGSQL.5432")
        self._frozen = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def conninfo(self, dbname: str, role: str = "sandrail") -> str:
        return f"host=127.0.0.1 port={self.port} user={role} dbname={dbname}"

    def freeze(self) -> None:
        self._frozen.set()

    def close(self) -> None:
        self._closed.set()
        for sock in [self._listener, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self._frozen.is_set():
                continue  # held open, never answered
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self._target)
            self._sockets.append(upstream)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self._frozen.is_set():
                    self._closed.wait()  # hold the bytes for good
                    return
                sink.sendall(data)
