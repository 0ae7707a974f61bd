"""A local stand-in for the part of the ``e2b`` SDK that ``E2BBackend`` uses.

Test code only: it runs commands on the host, which is what sandrail exists
to prevent, so it lives in ``tests/`` and is never importable as a backend
from the package.

Each sandbox is a temporary folder; ``commands.run`` runs real ``bash`` in it.
Path mapping: the sandbox paths sandrail uses all live under
``/tmp/sandrail``. Wherever text crosses the SDK surface into the sandbox
(command text, file paths, and the contents of written files) the stand-in
rewrites the prefix ``/tmp/sandrail`` to ``<folder>/tmp/sandrail``. The
launcher derives its root from its own path, so it needs no rewriting
beyond that. Commands start in ``<folder>/home/user`` (E2B's default cwd is
``/home/user``). A value that itself contains ``/tmp/sandrail`` is rewritten
too; tests avoid that.

Differences from E2B, on purpose: commands run as ``bash -c`` (E2B uses
``bash -l -c``); no network, users, templates or pause.

Faults (:class:`Fault`) strike SDK calls by method name (and optionally a
word in the command): ``drop`` (the request never leaves:
``httpx.ConnectError``), ``lose`` (it runs, the answer is lost:
``httpx.RemoteProtocolError``), ``timeout`` (it runs, the answer comes too
late: ``e2b.TimeoutException``), ``kill`` (the sandbox dies, then
``SandboxNotRunningException``).

:attr:`StandInSDK.calls` counts every SDK call (round trips).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import e2b
import httpx
from e2b.exceptions import SandboxNotRunningException

__all__ = ["Fault", "StandInSDK"]

PREFIX = "/tmp/sandrail"

FaultKind = Literal["drop", "lose", "timeout", "kill"]


@attrs.define(kw_only=True)
class Fault:
    """Strike the next ``times`` calls of ``method`` (e.g. ``"commands.run"``,
    ``"files.write_files"``, ``"create"``) whose command contains ``word``."""

    method: str
    kind: FaultKind
    word: str | None = None
    times: int = 1


@attrs.define(kw_only=True)
class _Box:
    sandbox_id: str
    folder: Path
    metadata: dict[str, str]
    idempotency_key: str | None
    alive: bool = True
    timeout: int | None = None

    def map(self, text: str) -> str:
        return text.replace(PREFIX, f"{self.folder}{PREFIX}")

    @property
    def home(self) -> Path:
        return self.folder / "home" / "user"


@attrs.define(kw_only=True)
class _Info:
    sandbox_id: str
    metadata: dict[str, str]
    state: e2b.SandboxState
    started_at: str


class StandInSDK:
    """Pass as ``E2BBackend(sdk=...)``. Call :meth:`close` when done (it
    kills every process the sandboxes started)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sandrail-standin-")) if root is None else root
        self.boxes: dict[str, _Box] = {}
        self.faults: list[Fault] = []
        self.calls: list[str] = []
        self._ids = itertools.count(1)
        sdk = self

        class AsyncSandbox(_StandInSandbox):
            _sdk = sdk

        self.AsyncSandbox = AsyncSandbox
        self.SandboxQuery = e2b.SandboxQuery

    # -- test helpers -----------------------------------------------------------

    def path(self, sandbox_id: str, sandbox_path: str) -> Path:
        """The host path of a path inside the sandbox."""
        return Path(self.boxes[sandbox_id].map(sandbox_path))

    def home(self, sandbox_id: str) -> Path:
        """The host folder commands start in (the sandbox's ``/home/user``)."""
        return self.boxes[sandbox_id].home

    def count(self, method: str) -> int:
        return sum(1 for call in self.calls if call == method)

    def kill_sandbox(self, sandbox_id: str) -> None:
        box = self.boxes[sandbox_id]
        box.alive = False
        _kill_all(box.folder)

    def close(self) -> None:
        for box in self.boxes.values():
            _kill_all(box.folder)
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the call boundary ------------------------------------------------------

    def _fault(self, method: str, text: str = "") -> Fault | None:
        for fault in self.faults:
            if fault.method == method and (fault.word is None or fault.word in text.split()):
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
                return fault
        return None

    def _before(self, method: str, box: _Box | None, text: str = "") -> Fault | None:
        self.calls.append(method)
        if box is not None and not box.alive:
            raise SandboxNotRunningException(f"sandbox {box.sandbox_id} was not found")
        fault = self._fault(method, text)
        if fault is not None and fault.kind == "drop":
            raise httpx.ConnectError("connection refused")
        return fault

    def _after(self, fault: Fault | None, box: _Box | None) -> None:
        if fault is None:
            return
        if fault.kind == "lose":
            raise httpx.RemoteProtocolError("connection dropped")
        if fault.kind == "timeout":
            raise e2b.TimeoutException("Request timed out")
        if fault.kind == "kill" and box is not None:
            self.kill_sandbox(box.sandbox_id)
            raise SandboxNotRunningException(f"sandbox {box.sandbox_id} was not found")

    def _create(self, metadata: dict[str, str], key: str | None, timeout: int | None) -> _Box:
        for box in self.boxes.values():
            if key is not None and box.idempotency_key == key and box.alive:
                return box
        sandbox_id = f"standin{next(self._ids)}"
        folder = self.root / sandbox_id
        (folder / "home" / "user").mkdir(parents=True)
        box = _Box(
            sandbox_id=sandbox_id,
            folder=folder,
            metadata=dict(metadata),
            idempotency_key=key,
            timeout=timeout,
        )
        self.boxes[sandbox_id] = box
        return box


def _kill_all(folder: Path) -> None:
    """Kill every supervisor and command the launcher recorded: their process
    groups and their sessions (a process may leave its group, not its
    session), so no test leaves processes behind."""
    for name in ("pgid", "supervisor"):
        for record in folder.glob(f"tmp/sandrail/tasks/*/{name}"):
            try:
                pid = int(record.read_text().strip())
            except (ValueError, OSError):
                continue
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            subprocess.run(["pkill", "-KILL", "-s", str(pid)], check=False, capture_output=True)


class _Paginator:
    def __init__(self, items: list[_Info]) -> None:
        self._items: list[_Info] | None = items

    @property
    def has_next(self) -> bool:
        return self._items is not None

    async def next_items(self) -> list[_Info]:
        items, self._items = self._items or [], None
        return items


class _Commands:
    def __init__(self, sdk: StandInSDK, box: _Box) -> None:
        self._sdk = sdk
        self._box = box

    async def run(
        self, cmd: str, *, timeout: float | None = 60, request_timeout: float | None = None
    ) -> e2b.CommandResult:
        box = self._box
        fault = self._sdk._before("commands.run", box, cmd)
        process = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            box.map(cmd),
            cwd=box.home,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), timeout or None)
        except TimeoutError:
            _killpg(process.pid)
            raise e2b.TimeoutException("context deadline exceeded") from None
        except asyncio.CancelledError:
            _killpg(process.pid)
            raise
        self._sdk._after(fault, box)
        stdout = out.decode("utf-8", errors="replace")
        stderr = err.decode("utf-8", errors="replace")
        code = process.returncode or 0
        if code != 0:
            raise e2b.CommandExitException(stderr=stderr, stdout=stdout, exit_code=code, error=None)
        return e2b.CommandResult(stderr=stderr, stdout=stdout, exit_code=0, error=None)


def _killpg(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


class _Files:
    def __init__(self, sdk: StandInSDK, box: _Box) -> None:
        self._sdk = sdk
        self._box = box

    async def write_files(
        self, files: Sequence[dict[str, Any]], *, request_timeout: float | None = None
    ) -> list[None]:
        box = self._box
        fault = self._sdk._before("files.write_files", box)
        for entry in files:
            target = Path(box.map(entry["path"]))
            target.parent.mkdir(parents=True, exist_ok=True)
            data = entry["data"]
            raw = data.encode() if isinstance(data, str) else bytes(data)
            target.write_bytes(raw.replace(PREFIX.encode(), box.map(PREFIX).encode()))
        self._sdk._after(fault, box)
        return [None for _ in files]


class _StandInSandbox:
    _sdk: StandInSDK

    def __init__(self, box: _Box) -> None:
        self._box = box
        self.commands = _Commands(self._sdk, box)
        self.files = _Files(self._sdk, box)

    @property
    def sandbox_id(self) -> str:
        return self._box.sandbox_id

    @classmethod
    async def create(
        cls,
        *,
        template: str | None = None,
        timeout: int | None = None,
        metadata: dict[str, str] | None = None,
        allow_internet_access: bool | None = None,
        idempotency_key: str | None = None,
        request_timeout: float | None = None,
        api_key: str | None = None,
    ) -> _StandInSandbox:
        fault = cls._sdk._before("create", None)
        box = cls._sdk._create(metadata or {}, idempotency_key, timeout)
        cls._sdk._after(fault, None)
        return cls(box)

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        *,
        timeout: int | None = None,
        request_timeout: float | None = None,
        api_key: str | None = None,
    ) -> _StandInSandbox:
        box = cls._sdk.boxes.get(sandbox_id)
        if box is None:
            cls._sdk.calls.append("connect")
            raise e2b.SandboxNotFoundException(f"sandbox {sandbox_id} not found")
        fault = cls._sdk._before("connect", box)
        cls._sdk._after(fault, box)
        return cls(box)

    @classmethod
    def list(
        cls,
        *,
        query: e2b.SandboxQuery | None = None,
        request_timeout: float | None = None,
        api_key: str | None = None,
    ) -> _Paginator:
        cls._sdk._before("list", None)
        wanted = (query.metadata if query is not None else None) or {}
        return _Paginator(
            [
                _Info(
                    sandbox_id=box.sandbox_id,
                    metadata=dict(box.metadata),
                    state=e2b.SandboxState.RUNNING,
                    started_at=f"{index:08d}",
                )
                for index, box in enumerate(cls._sdk.boxes.values())
                if box.alive and all(box.metadata.get(k) == v for k, v in wanted.items())
            ]
        )

    async def set_timeout(self, timeout: int, *, request_timeout: float | None = None) -> None:
        fault = self._sdk._before("set_timeout", self._box)
        self._box.timeout = timeout
        self._sdk._after(fault, self._box)
