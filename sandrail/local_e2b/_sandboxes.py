"""Sandboxes: creation (idempotent by key), lifetimes, listing, kill.

A sandbox lives from ``create`` until it is killed, its lifetime runs out, or
the server stops; then its processes die, its directories are removed and it
is gone: the control plane answers 404 for it, envd 502 "not found".

Strategy: creation by idempotency key is single-flight: the first request
with a key registers a future before it awaits anything, and every request
with the same key (concurrent or later) gets that sandbox while it lives.
Once it is gone the key is free again. Lifetimes are one ``call_at`` timer
per sandbox, moved by ``set_timeout`` and ``connect``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import secrets
import string
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from connectrpc.code import Code

from ._fsview import FsView
from ._isolation import Isolation, SandboxRoot
from ._marks import Marks
from ._metrics import HOST, Meter
from ._options import MAX_TIMEOUT, CreateOptions, OptionError, parse_create
from ._processes import ProcessTable, RunningProcess
from ._reaper import Reaper
from ._truth import TruthLog
from ._watch import Watcher, WatchError

__all__ = ["ENVD_VERSION", "LOCAL_TEAM_ID", "MAX_TIMEOUT", "Sandbox", "SandboxError", "Sandboxes"]

ENVD_VERSION = "0.6.4"
"""Reported to the SDK, which gates features by it: file metadata (0.6.2),
watch events with entry info (0.6.3) and watches that may cross network
mounts (0.6.4) are all served, as is everything older."""

LOCAL_TEAM_ID = "00000000-0000-4000-8000-00000000e2b0"
"""The team every sandbox of local-e2b belongs to (``E2B_TEAM_ID``): E2B's
are UUIDs; there is no team here."""
_ID_CHARS = string.ascii_lowercase + string.digits
_OWN = ("tmp", "home", "root")
_MIB = 1024 * 1024


class SandboxError(Exception):
    """A control-plane request that cannot be served: ``status`` is the HTTP
    status to answer, the message its text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Sandbox:
    """One live sandbox: its identity, lifetime, files and processes."""

    def __init__(
        self,
        *,
        sandbox_id: str,
        options: CreateOptions,
        root: SandboxRoot,
        truth: TruthLog,
        reaper: Reaper,
        group_signals: bool,
    ) -> None:
        self.sandbox_id = sandbox_id
        self.options = options
        self.template_id = options.template_id
        self.metadata = dict(options.metadata)
        self.env_vars = dict(options.env_vars)
        self.access_token = secrets.token_urlsafe(24)
        self.client_id = secrets.token_hex(4)
        # Whole microseconds: the start the API reports is the one it filters by.
        self.started_us = time.time_ns() // 1000
        self.started_at = self.started_us / 1e6
        self.end_at = self.started_at + options.timeout
        self.root = root
        self.alive = True
        self.files = FsView(
            root.root_fd,
            {user.uid: user.name for user in reversed(root.users.values())},
            f"/proc/{root.anchor_pid}/mountinfo",
        )
        self.processes = ProcessTable(reaper, self._process_ended, group_signals)
        self.meter = Meter(root.processes, [root.directory / name for name in _OWN])
        self.marks: asyncio.Server | None = None
        """The mark listener on the sandbox's own loopback (no egress)."""
        self.watches: set[Watcher] = set()
        """Every live directory watch (streamed or polled)."""
        self.polled_watches: dict[str, tuple[Watcher, list[Any]]] = {}
        """The watches of ``CreateWatcher``, by id, with their events so far."""
        self._truth = truth
        self._timer: asyncio.TimerHandle | None = None

    @property
    def default_env(self) -> dict[str, str]:
        """The variables E2B sets in every sandbox ("Knowing if you are
        inside a sandbox"); the sandbox's and a command's own come after
        and win."""
        return {
            "E2B_SANDBOX": "true",
            "E2B_SANDBOX_ID": self.sandbox_id,
            "E2B_TEAM_ID": LOCAL_TEAM_ID,
            "E2B_TEMPLATE_ID": self.template_id,
        }

    def _process_ended(self, process: RunningProcess) -> None:
        assert process.exit is not None
        self._truth.write(
            "process_ended",
            sandbox_id=self.sandbox_id,
            pid=process.pid,
            exit_code=process.exit.exit_code,
            status=process.exit.status,
            stdout_head=bytes(process.stdout_head).decode("utf-8", "replace"),
        )

    @property
    def disk_size(self) -> int:
        """Bytes of the filesystem its directories are on."""
        try:
            disk = os.statvfs(self.root.directory)
        except OSError:
            return 0
        return disk.f_blocks * disk.f_frsize

    def pump_watches(self) -> None:
        """Let every watch take the events queued so far (see ``_watch``)."""
        for watcher in list(self.watches):
            watcher.pump()

    def listed(self) -> dict[str, Any]:
        """The control plane's ``ListedSandbox`` body."""
        return {
            **self.created(),
            "startedAt": _iso_us(self.started_us),
            "endAt": _iso(self.end_at),
            # It shares this machine: its sizes are the machine's.
            "cpuCount": HOST.cpu_count,
            "memoryMB": HOST.mem_total // _MIB,
            "diskSizeMB": self.disk_size // _MIB,
            "state": "running",
            "metadata": self.metadata,
        }

    def detail(self) -> dict[str, Any]:
        """The control plane's ``SandboxDetail`` body: the listed fields and
        the lifecycle and network the sandbox was created with."""
        detail = {
            **self.listed(),
            "lifecycle": {"autoResume": False, "onTimeout": "kill"},
            # What is in force: ``denyOut`` of all traffic closes it too.
            "allowInternetAccess": (
                False if self.options.isolated_network else self.options.allow_internet_access
            ),
        }
        if self.options.network is not None:
            detail["network"] = dict(self.options.network)
        return detail

    def created(self) -> dict[str, Any]:
        """The control plane's ``Sandbox`` body (create and connect)."""
        return {
            "templateID": self.template_id,
            "sandboxID": self.sandbox_id,
            "clientID": self.client_id,
            "envdVersion": ENVD_VERSION,
            "envdAccessToken": self.access_token,
            "domain": None,
        }


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _iso_us(microseconds: int) -> str:
    return _iso_of(_EPOCH + timedelta(microseconds=microseconds))


def _iso_of(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def parse_time(text: str) -> int:
    """Microseconds since the epoch of an ISO 8601 time with a zone (what
    the SDK sends as ``startedAfter``); ``SandboxError`` 400 otherwise."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise SandboxError(400, f"not an ISO 8601 time: {text!r}") from exc
    if moment.tzinfo is None:
        raise SandboxError(400, f"a time needs its zone: {text!r}")
    return (moment - _EPOCH) // timedelta(microseconds=1)


class Sandboxes:
    """Every sandbox of one server."""

    def __init__(
        self,
        *,
        isolation: Isolation,
        directory: Path,
        reaper: Reaper,
        truth: TruthLog,
        group_signals: bool,
        marks: Marks,
    ) -> None:
        self._isolation = isolation
        self._directory = directory
        self._reaper = reaper
        self._truth = truth
        self._marks = marks
        self._group = group_signals
        self._live: dict[str, Sandbox] = {}
        self._by_key: dict[str, tuple[str, asyncio.Future[Sandbox]]] = {}
        self._count = 0

    def get(self, sandbox_id: str) -> Sandbox | None:
        """The live sandbox ``sandbox_id``, or ``None``."""
        return self._live.get(sandbox_id)

    def live(self) -> list[Sandbox]:
        """Every live sandbox."""
        return list(self._live.values())

    def require(self, sandbox_id: str) -> Sandbox:
        sandbox = self._live.get(sandbox_id)
        if sandbox is None:
            raise SandboxError(
                404, f"sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it"
            )
        return sandbox

    async def create(self, body: Mapping[str, Any], idempotency_key: str | None) -> Sandbox:
        """A new sandbox from a ``NewSandboxV2`` body, or the live one made
        with the same idempotency key (same body). Raises :class:`SandboxError`
        (400 for an option local-e2b refuses: see ``_options``)."""
        try:
            options = parse_create(body)
        except OptionError as exc:
            raise SandboxError(400, str(exc)) from exc
        fingerprint = repr(sorted((str(k), repr(v)) for k, v in body.items()))
        if idempotency_key is not None:
            known = self._by_key.get(idempotency_key)
            if known is not None:
                known_print, future = known
                if known_print != fingerprint:
                    raise SandboxError(
                        409, "the Idempotency-Key was used before with a different request"
                    )
                sandbox = await asyncio.shield(future)
                if sandbox.alive:
                    return sandbox
            future = asyncio.get_running_loop().create_future()
            self._by_key[idempotency_key] = (fingerprint, future)
        try:
            sandbox = await self._make(options, idempotency_key)
        except BaseException as exc:
            if idempotency_key is not None:
                self._by_key.pop(idempotency_key, None)
                future.set_exception(exc if isinstance(exc, Exception) else RuntimeError(exc))
                future.exception()  # retrieved: a lone failed create is not an error to log
            raise
        if idempotency_key is not None:
            future.set_result(sandbox)
        return sandbox

    async def _make(self, options: CreateOptions, idempotency_key: str | None) -> Sandbox:
        sandbox_id = "i" + "".join(secrets.choice(_ID_CHARS) for _ in range(19))
        self._count += 1
        root = SandboxRoot(
            self._isolation,
            self._directory / sandbox_id,
            self._count,
            self._reaper,
            mark_port=self._marks.port if options.isolated_network else 0,
        )
        await root.start()
        sandbox = Sandbox(
            sandbox_id=sandbox_id,
            options=options,
            root=root,
            truth=self._truth,
            reaper=self._reaper,
            group_signals=self._group,
        )
        if root.mark_listener is not None:
            sandbox.marks = await self._marks.serve(root.mark_listener)
        self._live[sandbox_id] = sandbox
        self._arm(sandbox)
        with (self._directory / "namespaces").open("a", encoding="utf-8") as namespaces:
            namespaces.write(" ".join(map(str, root.mark)) + "\n")
        self._truth.write(
            "sandbox_created",
            sandbox_id=sandbox_id,
            template_id=options.template_id,
            metadata=dict(options.metadata),
            env_vars=dict(options.env_vars),
            idempotency_key=idempotency_key,
            timeout_seconds=options.timeout,
            uid=root.users["user"].uid,
            own_network=options.isolated_network,
        )
        return sandbox

    def _arm(self, sandbox: Sandbox) -> None:
        if sandbox._timer is not None:
            sandbox._timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(0.0, sandbox.end_at - time.time())
        sandbox._timer = loop.call_later(
            delay, lambda: loop.create_task(self.end(sandbox, "expired"))
        )

    def set_timeout(self, sandbox: Sandbox, seconds: int) -> None:
        """The sandbox now ends ``seconds`` from now."""
        sandbox.end_at = time.time() + seconds
        self._arm(sandbox)

    def extend(self, sandbox: Sandbox, seconds: int) -> None:
        """Connect's rule: move the end only if it becomes later."""
        if time.time() + seconds > sandbox.end_at:
            self.set_timeout(sandbox, seconds)

    async def end(self, sandbox: Sandbox, reason: str) -> None:
        """Kill every process of ``sandbox`` and remove it. Idempotent."""
        if not sandbox.alive:
            return
        sandbox.alive = False
        self._live.pop(sandbox.sandbox_id, None)
        if sandbox._timer is not None:
            sandbox._timer.cancel()
        for process in sandbox.processes.running():
            self._truth.write(
                "process_signalled",
                sandbox_id=sandbox.sandbox_id,
                pid=process.pid,
                signal=9,
                reason="sandbox_ended",
            )
        sandbox.processes.kill_all()
        for watcher in list(sandbox.watches):
            watcher.close(WatchError(f"the sandbox {sandbox.sandbox_id} ended", Code.UNAVAILABLE))
        sandbox.watches.clear()
        sandbox.polled_watches.clear()
        if sandbox.marks is not None:
            sandbox.marks.close()
        await sandbox.root.destroy()
        # Its namespace's inode number, and soon its /tmp's, are free for any
        # new sandbox on this machine (another server's too): the server's
        # final sweep must not take a new sandbox with the same mark for it.
        with (self._directory / "namespaces").open("a", encoding="utf-8") as namespaces:
            namespaces.write("ended " + " ".join(map(str, sandbox.root.mark)) + "\n")
        self._truth.write("sandbox_ended", sandbox_id=sandbox.sandbox_id, reason=reason)

    def listing(
        self,
        *,
        metadata: Mapping[str, str],
        states: set[str] | None,
        started_after: int | None,
        template: str | None,
        limit: int,
        next_token: str | None,
        descending: bool,
    ) -> tuple[list[Sandbox], str | None]:
        """A page of live sandboxes matching every metadata pair, started at
        or after ``started_after`` (microseconds), of ``template``; ordered by start time
        (newest first when ``descending``, as E2B by default), after the
        cursor ``next_token``; and the next cursor."""
        if states is not None and "running" not in states:
            return [], None
        found = [
            sandbox
            for sandbox in self._live.values()
            if all(sandbox.metadata.get(key) == value for key, value in metadata.items())
            and (started_after is None or sandbox.started_us >= started_after)
            and (template is None or sandbox.template_id == template)
        ]
        found.sort(key=lambda s: (s.started_at, s.sandbox_id), reverse=descending)
        if next_token is not None:
            cursor = _decode_cursor(next_token)
            found = [
                sandbox
                for sandbox in found
                if ((sandbox.started_at, sandbox.sandbox_id) < cursor) == descending
                and (sandbox.started_at, sandbox.sandbox_id) != cursor
            ]
        page = found[:limit]
        if len(found) <= limit:
            return page, None
        last = page[-1]
        token = base64.urlsafe_b64encode(f"{last.started_at!r} {last.sandbox_id}".encode())
        return page, token.decode()

    async def end_all(self, reason: str) -> None:
        for sandbox in list(self._live.values()):
            await self.end(sandbox, reason)


def _decode_cursor(token: str) -> tuple[float, str]:
    try:
        started, sandbox_id = base64.urlsafe_b64decode(token.encode()).decode().split(" ", 1)
        return float(started), sandbox_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise SandboxError(400, "nextToken is not a token this server gave") from exc
