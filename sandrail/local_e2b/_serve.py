"""``serve()``: a local E2B server in a child process, for tests and users.

Strategy: the server runs in its own process (``python -m
sandrail.local_e2b``) so that it can be the child subreaper of everything
its sandboxes start without reaping the caller's children, and so a
``KILL_SERVER`` fault can really kill it. The handle talks to it over its
private admin socket and reads ground truth from its event log. On exit it
stops the server (SIGTERM, then SIGKILL), and then kills every process still
in any of its sandboxes' mount namespaces, whether or not the server got to
do so, and removes the state directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._admin import admin_call
from ._faults import Listener, WireFault
from ._isolation import IsolationError, Mark, kill_namespaces
from ._truth import GroundTruth, TruthReader

__all__ = ["LocalE2B", "serve"]


class LocalE2B:
    """A running local E2B server (see :func:`serve`).

    ``api_url``, ``sandbox_url`` and ``api_key`` are what the e2b SDK needs
    (``api_url=``/``sandbox_url=``/``api_key=``, or :attr:`env` as
    ``E2B_API_URL``/``E2B_SANDBOX_URL``/``E2B_API_KEY``); ``isolation`` says
    in one line which isolation is in force (``mode`` is ``"root"`` or
    ``"userns"``).
    """

    def __init__(self, process: subprocess.Popen[bytes], info: dict[str, Any], home: Path) -> None:
        self._process = process
        self._home = home
        self.api_url: str = info["api_url"]
        self.sandbox_url: str = info["sandbox_url"]
        self.api_key: str = info["api_key"]
        self.isolation: str = info["isolation"]
        self.mode: str = info["mode"]
        self.mark_port: int = info["mark_port"]
        self._state = Path(info["state_dir"])
        self._truth = TruthReader(self._state / "truth.jsonl")

    @property
    def env(self) -> dict[str, str]:
        """The three environment variables that point the e2b SDK here."""
        return {
            "E2B_API_URL": self.api_url,
            "E2B_SANDBOX_URL": self.sandbox_url,
            "E2B_API_KEY": self.api_key,
        }

    @property
    def sdk_options(self) -> dict[str, str]:
        """The same as keyword arguments of ``Sandbox.create``/``connect``/``list``."""
        return {"api_url": self.api_url, "sandbox_url": self.sandbox_url, "api_key": self.api_key}

    @property
    def pid(self) -> int:
        """The server process's pid."""
        return self._process.pid

    @property
    def alive(self) -> bool:
        """Whether the server process still runs (a ``KILL_SERVER`` fault ends it)."""
        return self._process.poll() is None

    def mark(self, text: str) -> str:
        """Shell text (bash) that records the mark ``text`` in this server's
        ground truth (``truth().marked(text)``) before it goes on: put it in
        a command to count how many times that command really ran. ``text``
        is 1 to 200 of ``A-Za-z0-9_.:-``."""
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,200}", text):
            raise ValueError("a mark is 1 to 200 of A-Za-z0-9_.:-")
        return (
            f"(exec 3<>/dev/tcp/127.0.0.1/{self.mark_port}; "
            f"printf '%s\\n' {text} >&3; read -r _ <&3)"
        )

    def truth(self) -> GroundTruth:
        """Everything the server has done so far: sandboxes, processes
        (with signals and exits), requests (with the fault that struck each)."""
        return self._truth.read()

    def _admin(self, request: dict[str, Any]) -> dict[str, Any]:
        return admin_call(self._state / "admin.sock", request)

    def inject(self, fault: WireFault) -> None:
        """Arm ``fault``: it strikes the next ``fault.times`` matching requests."""
        self._admin({"op": "arm", "fault": fault.to_dict()})

    @contextlib.contextmanager
    def fault(self, fault: WireFault) -> Iterator[None]:
        """Arm ``fault`` for the ``with`` block; every fault is cleared after it."""
        self.inject(fault)
        try:
            yield
        finally:
            if self.alive:
                self.clear_faults()

    def refuse(self, listener: Listener, refusing: bool = True) -> None:
        """Make ``"api"`` or ``"envd"`` refuse connections (ECONNREFUSED)
        until ``refuse(listener, False)`` or :meth:`clear_faults`."""
        self._admin({"op": "refuse", "listener": listener, "on": refusing})

    def clear_faults(self) -> None:
        """Disarm every fault and listen again on both listeners."""
        self._admin({"op": "clear"})

    def pending_faults(self) -> list[tuple[WireFault, int]]:
        """Armed faults and how many more requests each will strike."""
        answer = self._admin({"op": "pending"})
        return [(WireFault.from_dict(raw), left) for raw, left in answer["faults"]]

    def stop(self) -> None:
        """Stop the server and every process it started; remove its files.
        Idempotent; also runs when the ``with`` block of :func:`serve` ends."""
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for pipe in (self._process.stdout, self._process.stdin):
            if pipe is not None:
                pipe.close()
        _sweep(self._state)
        shutil.rmtree(self._home, ignore_errors=True)


def _sweep(state: Path) -> None:
    """Kill whatever is left in the sandboxes the server recorded and did
    not end itself. An ended sandbox's mark is skipped: the kernel hands its
    namespace inode number to the next new namespace, and its ``/tmp``
    inode number can follow, so the mark may by now name a live sandbox of
    another server on this machine."""
    try:
        lines = (state / "sandboxes" / "namespaces").read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    marks: dict[Mark, int] = {}
    for line in lines:
        fields = line.split()
        ended = fields[:1] == ["ended"]
        numbers = fields[1:] if ended else fields
        if len(numbers) == 4 and all(field.isdigit() for field in numbers):
            dev, ino, tmp_dev, tmp_ino = map(int, numbers)
            mark = (dev, ino, tmp_dev, tmp_ino)
            # One server can make two sandboxes with one mark (one after the
            # other ended): a mark is left only while more began than ended.
            marks[mark] = marks.get(mark, 0) + (-1 if ended else 1)
    kill_namespaces([mark for mark, live in marks.items() if live > 0])


def _ready_line(process: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([process.stdout], [], [], left)[0]:
            raise RuntimeError(f"the local-e2b server did not start within {timeout} s")
        chunk = os.read(process.stdout.fileno(), 65_536)
        if not chunk:
            raise RuntimeError(
                f"the local-e2b server exited at start (status {process.wait()}); see its stderr"
            )
        data += chunk
    info: dict[str, Any] = json.loads(data.splitlines()[0])
    return info


@contextlib.contextmanager
def serve(
    *,
    isolation: str = "auto",
    keepalive_seconds: float | None = None,
    signal_scope: str = "group",
    max_upload_bytes: int = 256 * 1024 * 1024,
    startup_timeout: float = 30.0,
) -> Iterator[LocalE2B]:
    """Run a local E2B server on free loopback ports for the ``with`` block.

    A development and test tool, not a security boundary. The unmodified
    e2b SDK talks to it over HTTP: pass ``server.env`` as environment (or
    ``**server.sdk_options``). It starts in about a second and, when the
    block ends, stops, killing every process it started.

    - ``isolation``: ``"auto"`` (``"root"`` when run as root, else
      ``"userns"``), ``"root"`` or ``"userns"``; ``server.isolation`` says
      what is in force. Raises :class:`IsolationError` when sandboxes cannot
      be isolated here (it never falls back to plain directories).
    - ``keepalive_seconds``: send stream keepalives this often instead of
      the client's ``Keepalive-Ping-Interval`` (50 s from the SDK).
    - ``signal_scope``: ``"group"`` (kills and command deadlines reach the
      command's whole process group) or ``"process"`` (only its own process,
      as E2B's envd does).
    - ``max_upload_bytes``: the largest file body ``POST /files`` accepts
      (413 beyond).

    Ground truth: ``server.truth()``. Wire faults: ``server.inject(WireFault(...))``
    or ``with server.fault(WireFault(...)):``, ``server.refuse("api")``,
    ``server.clear_faults()``.
    """
    home = Path(tempfile.mkdtemp(prefix="sandrail-local-e2b-"))
    argv = [
        sys.executable,
        "-m",
        "sandrail.local_e2b",
        "--state-dir",
        str(home / "server"),
        "--isolation",
        isolation,
        "--signal-scope",
        signal_scope,
        "--max-upload-bytes",
        str(max_upload_bytes),
        "--stop-on-stdin-eof",
    ]
    if keepalive_seconds is not None:
        argv += ["--keepalive-seconds", str(keepalive_seconds)]
    # The server stops when its stdin closes: if this process dies, so does it.
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.PIPE)
    try:
        info = _ready_line(process, startup_timeout)
    except BaseException:
        process.kill()
        process.wait()
        shutil.rmtree(home, ignore_errors=True)
        raise
    if "error" in info:
        process.wait()
        shutil.rmtree(home, ignore_errors=True)
        raise IsolationError(info["error"])
    server = LocalE2B(process, info, home)
    try:
        yield server
    finally:
        server.stop()
