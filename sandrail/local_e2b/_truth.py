"""Ground truth: what the server really did, for tests to judge by.

The server appends one JSON object per event to ``truth.jsonl`` in its state
directory (flushed line by line), so the record survives even a server that
was killed mid-stream. :func:`load_truth` folds the events into records.

Events: ``sandbox_created``, ``sandbox_ended``, ``process_started``,
``process_signalled``, ``process_ended`` (with the first bytes of the
process's stdout), ``request``, ``answered`` (the bytes the server sent for
a request, once its answer is over) and ``mark`` (a line a command sent to
the server's mark listener: see ``LocalE2B.mark``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import attrs

__all__ = [
    "GroundTruth",
    "MarkRecord",
    "ProcessRecord",
    "RequestRecord",
    "SandboxRecord",
    "SignalRecord",
    "TruthLog",
    "TruthReader",
    "load_truth",
]


@attrs.frozen(kw_only=True)
class SandboxRecord:
    """A sandbox the server created. ``ended_at``/``end_reason`` are ``None``
    while it lives; ``end_reason`` is ``"killed"`` (the API's DELETE),
    ``"expired"`` (its lifetime ran out) or ``"server_stopped"``."""

    sandbox_id: str
    template_id: str
    metadata: Mapping[str, str]
    env_vars: Mapping[str, str]
    idempotency_key: str | None
    timeout_seconds: int
    uid: int
    created_at: float
    own_network: bool = False
    """Whether it had a network namespace of its own with only loopback
    (created without internet access)."""
    ended_at: float | None = None
    end_reason: str | None = None


@attrs.frozen(kw_only=True)
class SignalRecord:
    """A signal the server sent to a process: ``reason`` is ``"request"``
    (SendSignal / ``commands.kill``), ``"deadline"`` (the command's
    Connect-Timeout-Ms ran out) or ``"sandbox_ended"``."""

    signal: int
    reason: str
    at: float


@attrs.frozen(kw_only=True)
class ProcessRecord:
    """A process the server started in a sandbox. ``command`` is the shell
    text when the process is ``bash -c TEXT`` (as ``commands.run`` sends it),
    else the joined argv. Exit fields are ``None`` while it runs."""

    sandbox_id: str
    pid: int
    user: str
    uid: int
    argv: tuple[str, ...]
    command: str
    cwd: str
    tag: str | None
    started_at: float
    signals: tuple[SignalRecord, ...] = ()
    ended_at: float | None = None
    exit_code: int | None = None
    status: str | None = None
    stdout_head: str = ""
    """The first 256 bytes of its stdout (UTF-8, errors replaced), known
    once it ended: what it answered even if no client got the answer."""

    @property
    def running(self) -> bool:
        """Whether the process had not ended when the truth was taken."""
        return self.ended_at is None


@attrs.frozen(kw_only=True)
class RequestRecord:
    """One request as the server's front door saw it: ``route`` is the
    :class:`Route` value (``None`` for a path the SDK never uses), ``status``
    the HTTP status answered (``None`` when no answer was sent), ``fault`` the
    :class:`WireFaultKind` value that struck it, if any."""

    listener: str
    method: str
    path: str
    route: str | None
    sandbox_id: str | None
    status: int | None
    fault: str | None
    at: float
    number: int = 0
    """Its number among the requests of its listener, from 1."""
    sent_bytes: int = 0
    """Every byte the server wrote to the client for it (status line,
    headers, body; a stream's whole body), once its answer is over."""


@attrs.frozen(kw_only=True)
class MarkRecord:
    """One line a process sent to the mark listener (``LocalE2B.mark``): it
    ran, whatever later happened to the files of its sandbox."""

    text: str
    at: float


@attrs.frozen(kw_only=True)
class GroundTruth:
    """Everything the server recorded, oldest first."""

    sandboxes: tuple[SandboxRecord, ...]
    processes: tuple[ProcessRecord, ...]
    requests: tuple[RequestRecord, ...]
    marks: tuple[MarkRecord, ...] = ()

    def marked(self, text: str) -> int:
        """How many times a process sent the mark ``text``."""
        return sum(1 for record in self.marks if record.text == text)

    def sandbox(self, sandbox_id: str) -> SandboxRecord:
        """The record of ``sandbox_id``; ``KeyError`` if it was never created."""
        for record in self.sandboxes:
            if record.sandbox_id == sandbox_id:
                return record
        raise KeyError(sandbox_id)

    def processes_in(self, sandbox_id: str) -> tuple[ProcessRecord, ...]:
        """The processes started in ``sandbox_id``, oldest first."""
        return tuple(record for record in self.processes if record.sandbox_id == sandbox_id)

    def launches(self, text: str) -> tuple[ProcessRecord, ...]:
        """The processes whose command contains ``text``."""
        return tuple(record for record in self.processes if text in record.command)

    def bytes_sent(self, sandbox_id: str, listener: str = "envd") -> int:
        """Every byte the server sent to clients for requests about
        ``sandbox_id`` on ``listener`` (``"envd"``: what left the sandbox)."""
        return sum(
            record.sent_bytes
            for record in self.requests
            if record.sandbox_id == sandbox_id and record.listener == listener
        )


class TruthLog:
    """The server side: appends events to the log file, thread-safe."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._file: TextIO = path.open("a", encoding="utf-8")

    def write(self, event: str, **fields: Any) -> None:
        """Append one event, stamped with the wall clock, and flush it."""
        line = json.dumps({"event": event, "at": time.time(), **fields}, ensure_ascii=False)
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class _Fold:
    """The records so far, folded from events one line at a time."""

    def __init__(self) -> None:
        self.sandboxes: dict[str, SandboxRecord] = {}
        self.processes: dict[tuple[str, int, float], ProcessRecord] = {}
        self.live: dict[tuple[str, int], tuple[str, int, float]] = {}
        self.requests: list[RequestRecord] = []
        self.numbered: dict[tuple[str, int], int] = {}
        self.marks: list[MarkRecord] = []

    def add(self, line: str) -> None:
        if not line.endswith("}"):
            return  # a line cut by a killed server
        event = json.loads(line)
        kind = event.pop("event")
        at = event.pop("at")
        if kind == "sandbox_created":
            self.sandboxes[event["sandbox_id"]] = SandboxRecord(created_at=at, **event)
        elif kind == "sandbox_ended" and event["sandbox_id"] in self.sandboxes:
            old = self.sandboxes[event["sandbox_id"]]
            self.sandboxes[old.sandbox_id] = attrs.evolve(
                old, ended_at=at, end_reason=event["reason"]
            )
        elif kind == "process_started":
            key = (event["sandbox_id"], event["pid"], at)
            self.live[(event["sandbox_id"], event["pid"])] = key
            self.processes[key] = ProcessRecord(
                started_at=at, **{**event, "argv": tuple(event["argv"])}
            )
        elif kind in ("process_signalled", "process_ended"):
            found = self.live.get((event["sandbox_id"], event["pid"]))
            if found is None:
                return
            old_process = self.processes[found]
            if kind == "process_signalled":
                signal = SignalRecord(signal=event["signal"], reason=event["reason"], at=at)
                self.processes[found] = attrs.evolve(
                    old_process, signals=(*old_process.signals, signal)
                )
            else:
                self.processes[found] = attrs.evolve(
                    old_process,
                    ended_at=at,
                    exit_code=event["exit_code"],
                    status=event["status"],
                    stdout_head=event.get("stdout_head", ""),
                )
        elif kind == "request":
            record = RequestRecord(at=at, **event)
            self.numbered[(record.listener, record.number)] = len(self.requests)
            self.requests.append(record)
        elif kind == "answered":
            index = self.numbered.get((event["listener"], event["number"]))
            if index is not None:
                self.requests[index] = attrs.evolve(self.requests[index], sent_bytes=event["bytes"])
        elif kind == "mark":
            self.marks.append(MarkRecord(at=at, text=event["text"]))

    def result(self) -> GroundTruth:
        return GroundTruth(
            sandboxes=tuple(self.sandboxes.values()),
            processes=tuple(self.processes.values()),
            requests=tuple(self.requests),
            marks=tuple(self.marks),
        )


class TruthReader:
    """Reads a server's event log as it grows: each :meth:`read` parses only
    the complete lines appended since the last (the log is append-only), so
    reading ground truth after every step of a long run stays cheap.
    Thread-safe."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._offset = 0
        self._fold = _Fold()

    def read(self) -> GroundTruth:
        """Everything recorded so far (an absent log is empty)."""
        with self._lock:
            try:
                with self._path.open("rb") as log:
                    log.seek(self._offset)
                    data = log.read()
            except FileNotFoundError:
                data = b""
            end = data.rfind(b"\n") + 1
            for line in data[:end].decode("utf-8").splitlines():
                self._fold.add(line)
            self._offset += end
            return self._fold.result()


def load_truth(path: Path) -> GroundTruth:
    """Fold the event log at ``path`` into records (an absent log is empty)."""
    return TruthReader(path).read()
