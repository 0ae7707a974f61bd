"""The E2B launcher script run directly under bash, in a temporary directory,
as the test's own user: no root, no sandbox, no SDK.

Strategy: the launcher keeps its ledger where the script is
(``L/bin/<name>``), so a copy under ``tmp/ledger/bin`` keeps its ledger in
``tmp/ledger``. The two other places it names (``SHARED``, where snippets
are published, and ``USER_HOME``, a command's default cwd) are each one
assignment line at the top of the script; :class:`LauncherRig` rewrites
those two lines to point into its directory, and fails loudly if either
line is not there exactly once. Nothing else of the script changes.

``init`` needs root and a ``user`` account, so the rig writes what it would
(the ``user`` file) itself; :func:`run_init` runs ``init`` in a user
namespace instead. The ``user`` file names the tool that drops to ``user``:
a separated rig names a stand-in that drops nothing (only root could), so
the command runs as the test's user, and the ledger says ``user`` is
another uid than root, as on E2B.

Every answer is the launcher's stdout and exit status, unparsed
(:class:`Answer`); tests read it with the harness's own parsers
(:mod:`sandrail.interpreters._launcher_answers`) as well as by its text.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import attrs

from sandrail.interpreters._launcher_script import LAUNCHER

__all__ = ["Answer", "LauncherRig", "run_init", "task_id"]

_SEAMS = {"SHARED=/tmp/sandrail\n": "SHARED", "USER_HOME=/home/user\n": "USER_HOME"}
_NAME = "launcher-0123456789abcdef.sh"
"""A name of the shape ``init`` takes (the real one is the content's hash;
this copy's content differs by its two rewritten lines)."""

_FAKE_SETPRIV = """#!/bin/sh
# Stands in for setpriv in a separated test ledger: drops nothing (only root
# could), runs what follows `--` as the test's own user.
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do shift; done
shift
exec "$@"
"""


def task_id(n: int) -> str:
    """A well-formed task id (64 hex digits)."""
    return f"{n:064x}"


@attrs.frozen
class Answer:
    """What one launcher run printed and how it exited."""

    status: int
    stdout: str

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


def _script(shared: Path, home: Path) -> str:
    text = LAUNCHER
    for line, name in _SEAMS.items():
        assert text.count(line) == 1, f"the launcher no longer assigns {name} on one line"
        value = shared if name == "SHARED" else home
        text = text.replace(line, f"{name}={value}\n")
    return text


def _environment() -> dict[str, str]:
    # What E2B gives the launcher's root shell, as far as it matters here.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}


class LauncherRig:
    """The launcher in ``root`` (a fresh directory): its ledger in
    ``root/ledger``, ``user``'s home in ``root/home``, published snippets in
    ``root/shared/code``. ``separated``: the ledger says ``user`` is another
    uid than root (as on E2B), else that ``user`` is root (local-e2b's
    userns mode). Call :meth:`close` to end what the launcher started."""

    def __init__(self, root: Path, *, separated: bool = True) -> None:
        self.root = root
        self.ledger = root / "ledger"
        self.home = root / "home"
        self.shared = root / "shared"
        self.tasks = self.ledger / "tasks"
        self.inbox = self.ledger / "inbox"
        for directory in (self.ledger / "bin", self.tasks, self.inbox, self.home):
            directory.mkdir(parents=True, mode=0o700)
        self.script = self.ledger / "bin" / _NAME
        self.script.write_text(_script(self.shared, self.home), encoding="utf-8")
        setsid = shutil.which("setsid")
        assert setsid is not None, "the launcher needs setsid (util-linux)"
        if separated:
            tool = root / "setpriv"
            tool.write_text(_FAKE_SETPRIV, encoding="utf-8")
            tool.chmod(0o700)
            # Root can chown a published snippet to any uid; anyone else,
            # only to their own.
            uid, gid = (os.getuid(), os.getgid()) if os.getuid() else (1000, 1000)
            user = f"{uid} {gid} {tool} {setsid}\n"
        else:
            user = f"0 0 {shutil.which('setpriv') or '/usr/bin/setpriv'} {setsid}\n"
        (self.ledger / "user").write_text(user, encoding="utf-8")

    # -- running it -----------------------------------------------------------

    def run(self, *args: str, timeout: float = 30) -> Answer:
        """Run ``bash <script> args...`` as the harness does (as ``exec bash``)."""
        done = subprocess.run(
            ["bash", str(self.script), *args],
            capture_output=True,
            text=True,
            env=_environment(),
            timeout=timeout,
            check=False,
        )
        return Answer(done.returncode, done.stdout)

    def stage(
        self,
        task: str,
        nonce: int = 1,
        *,
        command: str | bytes = "true",
        digest: str = "d" * 64,
        timeout: str = "30",
        env: Mapping[str, str] | None = None,
        **files: str | bytes,
    ) -> Path:
        """Write a staged request as the harness writes it through the files
        API (one field a file; see ``_launcher_request``); ``files`` adds or
        replaces fields (``cwd``, ``fence``, ``expect``, ``epoch``,
        ``check``, ``long``, ``source``...)."""
        staged = self.inbox / f"{task}.{nonce}"
        staged.mkdir(mode=0o700)
        fields: dict[str, str | bytes] = {
            "digest": digest,
            "command": command,
            "timeout": timeout,
            **files,
        }
        if env is not None:
            fields["env"] = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
        for name, data in fields.items():
            path = staged / name
            if isinstance(data, bytes):
                path.write_bytes(data)
            else:
                path.write_text(data, encoding="utf-8")
        return staged

    def start(self, task: str, nonce: int = 1, **request: str | bytes) -> Answer:
        """Stage a request (see :meth:`stage`) and run ``start`` on it."""
        self.stage(task, nonce, **request)
        return self.run("start", task, str(nonce))

    def wait(self, task: str, millis: int = 20_000, limit: int = 32 * 1024) -> Answer:
        return self.run("wait", task, str(millis), str(limit))

    def read(self, task: str, out: int = 0, err: int = 0, size: int = 4096) -> Answer:
        return self.run("read", task, str(out), str(err), str(size))

    # -- the ledger -----------------------------------------------------------

    def epoch(self) -> str:
        """The epoch the seal names (the ledger must have one)."""
        return (self.ledger / "seal").read_text().split()[0]

    def claim(self, task: str) -> Path:
        return self.tasks / task

    def ended(self, task: str, seconds: float = 10) -> str:
        """The task's exit record once its stream sizes are in it (the
        supervisor adds them a moment after the command ended)."""
        deadline = time.monotonic() + seconds
        record = self.claim(task) / "exit"
        while time.monotonic() < deadline:
            with_sizes = record.exists() and len(record.read_text().split()) == 4
            if with_sizes:
                return record.read_text()
            time.sleep(0.02)
        raise AssertionError(f"task {task[-4:]} has no sized exit record")

    def close(self) -> None:
        """End every process the launcher started for this rig: each task is
        cancelled as the harness would, then what is left in the session of
        each supervisor and of each command (their ids are in the claims) is
        killed, by process id, until none is left (a supervisor may fork
        while it is being killed)."""
        for claim in self.tasks.iterdir():
            self.run("cancel", claim.name)
        deadline = time.monotonic() + 10
        while members := _members(self._sessions()):
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            assert time.monotonic() < deadline, f"processes left: {members}"
            time.sleep(0.01)

    def _sessions(self) -> set[int]:
        sessions: set[int] = set()
        for claim in self.tasks.iterdir():
            for name in ("supervisor", "pgid"):
                with contextlib.suppress(OSError):
                    text = (claim / name).read_text().strip()
                    if text.isdigit():
                        sessions.add(int(text))
        return sessions


def _members(sessions: set[int]) -> list[int]:
    """The live processes (not zombies) whose session is one of ``sessions``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name, which is in parentheses: state,
        # ppid, pgrp, session, ...
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) in sessions:
            found.append(int(entry.name))
    return found


def run_init(root: Path, *, user_uid: int | None, as_root: bool = True) -> tuple[Answer, Path]:
    """Run ``init`` on a freshly written copy in ``root/ledger/bin``, in a
    user namespace (``unshare``): as its root with a ``user`` account of
    ``user_uid`` (``None``: no such account) in a private ``/etc/passwd``
    bound over the real one, or (``as_root=False``) as an unmapped user.
    Returns the answer and the ledger."""
    ledger = root / "ledger"
    (ledger / "bin").mkdir(parents=True, mode=0o700)
    copy = ledger / "bin" / ".staged"
    copy.write_text(_script(root / "shared", root / "home"), encoding="utf-8")
    passwd = root / "passwd"
    group = root / "group"
    lines = [
        line
        for line in Path("/etc/passwd").read_text().splitlines()
        if not line.startswith("user:")
    ]
    groups = [
        line for line in Path("/etc/group").read_text().splitlines() if not line.startswith("user:")
    ]
    if user_uid is not None:
        lines.append(f"user:x:{user_uid}:{user_uid}::/home/user:/bin/bash")
        groups.append(f"user:x:{user_uid}:")
    passwd.write_text("\n".join(lines) + "\n")
    group.write_text("\n".join(groups) + "\n")
    launch = f'exec bash "{copy}" init {_NAME}'
    if as_root:
        command = [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "bash",
            "-c",
            f'mount --bind "{passwd}" /etc/passwd && mount --bind "{group}" /etc/group && {launch}',
        ]
    else:
        command = ["unshare", "--user", "bash", "-c", launch]
    done = subprocess.run(
        command, capture_output=True, text=True, env=_environment(), timeout=30, check=False
    )
    assert "unshare:" not in done.stderr, done.stderr
    return Answer(done.returncode, done.stdout), ledger
