"""How a sandbox is kept apart on this machine: its directories, its mount
namespace, its users.

Two modes, chosen once per server (``detect_isolation``):

- ``root`` (the server runs as real root): each sandbox gets a private mount
  namespace in which its own directories lie over ``/tmp`` (mode 1777),
  ``/home/user`` and ``/root``, and the rest of this machine's filesystem is
  read-only. ``user`` runs as an unprivileged uid/gid of its own (one per
  sandbox, named ``user`` in the sandbox's ``/etc/passwd``); ``root`` runs as
  root.
- ``userns`` (no root, but unprivileged user namespaces work): the same
  mounts inside ``unshare --user --map-root-user``, but only one uid exists:
  ``root`` and ``user`` are the SAME uid (this server's), so a ``user``
  command can read and delete everything ``root`` wrote.

Anything else is refused (``IsolationError``): a plain directory with path
rewriting would give commands a different ``/tmp`` than the file API, and
silently let every sandbox see every other one.

Each sandbox has an IPC namespace of its own too: the SysV shared memory,
queues and semaphores its commands make are invisible to this machine and
to other sandboxes, and end with it.

A sandbox created without internet access (``allow_internet_access=False``)
also gets a network namespace of its own, holding only loopback: it reaches
nothing of this machine's network, its loopback included, but the server's
mark listener (see ``_anchor``).

Strategy: a sandbox's namespaces are held by a small anchor process
(``_anchor.py``); commands enter them with ``nsenter`` (and drop to the
sandbox user with ``setpriv``), files are reached through
``/proc/<anchor>/root``. Every process of a sandbox, wherever it wandered,
is found again by its mount namespace, which is how a sandbox is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import attrs

from ._anchor import TEMPLATE_BIN
from ._reaper import Exit, Reaper

__all__ = [
    "Isolation",
    "IsolationError",
    "IsolationMode",
    "Mark",
    "SandboxRoot",
    "User",
    "detect_isolation",
    "kill_namespaces",
    "processes_in_namespace",
]

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ANCHOR = Path(__file__).with_name("_anchor.py")
_UID_BASE = 200_000 + (os.getpid() % 100) * 1_000


class IsolationError(RuntimeError):
    """The machine cannot isolate sandboxes in the mode asked for."""


class IsolationMode(enum.StrEnum):
    ROOT = "root"
    USERNS = "userns"


@attrs.frozen(kw_only=True)
class Isolation:
    """The isolation in force and the tools it runs."""

    mode: IsolationMode
    unshare: str
    nsenter: str
    setpriv: str

    @property
    def description(self) -> str:
        """One line saying exactly what is in force."""
        if self.mode is IsolationMode.ROOT:
            return (
                "root: a private mount and IPC namespace per sandbox (its own /tmp, "
                "/home/user, /root, /dev/shm, SysV IPC; the rest of this machine "
                "read-only); 'user' runs as an unprivileged uid of its own per sandbox, "
                "'root' as root; same process table as this machine, and its network "
                "unless created without internet access"
            )
        return (
            "userns: a private user+mount+IPC namespace per sandbox (its own /tmp, "
            "/home/user, /root, /dev/shm, SysV IPC; the rest of this machine read-only); "
            "NO USER SEPARATION: "
            f"'root' and 'user' are the same uid ({os.geteuid()}), so a 'user' command can "
            "read and delete what 'root' wrote; same process table as this machine, and its "
            "network unless created without internet access"
        )


def _tool(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", DEFAULT_PATH) + ":" + DEFAULT_PATH)
    if found is None:
        raise IsolationError(f"local-e2b needs `{name}` (util-linux) on PATH")
    return found


def _probe(argv: Sequence[str]) -> str | None:
    """``None`` if ``argv`` succeeds, else what went wrong."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    return done.stderr.strip() or f"exit status {done.returncode}"


def detect_isolation(requested: str = "auto") -> Isolation:
    """The isolation to use: ``"root"``, ``"userns"`` or ``"auto"`` (root
    when this process is real root, else userns). Raises
    :class:`IsolationError` with the reason when the mode cannot work here."""
    if requested not in ("auto", "root", "userns"):
        raise IsolationError(f"isolation must be auto, root or userns, not {requested!r}")
    tools = {"unshare": _tool("unshare"), "nsenter": _tool("nsenter"), "setpriv": _tool("setpriv")}
    mode = IsolationMode.ROOT if os.geteuid() == 0 else IsolationMode.USERNS
    if requested != "auto":
        mode = IsolationMode(requested)
    if mode is IsolationMode.ROOT and os.geteuid() != 0:
        raise IsolationError("isolation 'root' needs the server to run as real root")
    probe = [tools["unshare"], "--mount", "--propagation", "private"]
    if mode is IsolationMode.USERNS:
        probe[1:1] = ["--user", "--map-root-user"]
    failure = _probe([*probe, "true"])
    if failure is not None:
        raise IsolationError(
            f"local-e2b cannot isolate sandboxes here ({' '.join(probe[1:])} failed: {failure}). "
            "It needs real root, or unprivileged user namespaces; it will not run commands "
            "without a private /tmp and /home/user per sandbox."
        )
    return Isolation(mode=mode, **tools)


@attrs.frozen
class User:
    """A sandbox user: its name, ids as this machine sees them, and home."""

    name: str
    uid: int
    gid: int
    home: str


def _passwd_lines(path: str, drop: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as source:
            return [line for line in source.read().splitlines() if not line.startswith(drop + ":")]
    except OSError:
        return []


class SandboxRoot:
    """One sandbox's directories and mount namespace (held by its anchor).

    Create with :meth:`start`; :meth:`destroy` kills every process in the
    namespace and removes the directories. ``mark_port`` (not 0) gives the
    sandbox a network namespace of its own with only loopback, on whose port
    ``mark_port`` :attr:`mark_listener` listens once started.
    """

    def __init__(
        self,
        isolation: Isolation,
        directory: Path,
        number: int,
        reaper: Reaper,
        mark_port: int = 0,
    ) -> None:
        self.isolation = isolation
        self.directory = directory
        self.own_network = bool(mark_port)
        self.mark_listener: socket.socket | None = None
        self._mark_port = mark_port
        self._reaper = reaper
        own = os.geteuid(), os.getegid()
        if isolation.mode is IsolationMode.ROOT:
            uid = gid = _UID_BASE + number % 1_000
            self.users = {
                "user": User("user", uid, gid, "/home/user"),
                "root": User("root", 0, 0, "/root"),
            }
            self._inside = {"user": (uid, gid), "root": (0, 0)}
        else:
            self.users = {
                "user": User("user", *own, "/home/user"),
                "root": User("root", *own, "/root"),
            }
            self._inside = {"user": (0, 0), "root": (0, 0)}
        self.anchor_pid = 0
        self.namespace: tuple[int, int] = (0, 0)
        self.mark: Mark = (0, 0, 0, 0)
        self.root_fd = -1
        self._anchor_stdin = -1
        self._anchor_exit: asyncio.Future[Exit] | None = None

    def _lay_out(self) -> None:
        user = self.users["user"]
        self.directory.mkdir(mode=0o700)
        for name, mode, owner in (
            ("tmp", 0o1777, (self.users["root"].uid, self.users["root"].gid)),
            ("home", 0o755, (user.uid, user.gid)),
            ("root", 0o700, (self.users["root"].uid, self.users["root"].gid)),
        ):
            path = self.directory / name
            path.mkdir()
            os.chown(path, *owner)
            path.chmod(mode)
        inside_uid, inside_gid = self._inside["user"]
        passwd = _passwd_lines("/etc/passwd", "user")
        passwd.append(f"user:x:{inside_uid}:{inside_gid}::/home/user:/bin/bash")
        group = _passwd_lines("/etc/group", "user")
        group.append(f"user:x:{inside_gid}:")
        (self.directory / "passwd").write_text("\n".join(passwd) + "\n", encoding="utf-8")
        (self.directory / "group").write_text("\n".join(group) + "\n", encoding="utf-8")

    async def start(self, timeout: float = 10.0) -> None:
        """Lay out the directories and start the anchor; raises
        :class:`IsolationError` if the namespace could not be made."""
        self._lay_out()
        argv = [self.isolation.unshare, "--mount", "--ipc", "--propagation", "private"]
        if self.isolation.mode is IsolationMode.USERNS:
            argv[1:1] = ["--user", "--map-root-user"]
        if self.own_network:
            argv.insert(-2, "--net")
        argv += ["--", sys.executable, "-I", "-S", str(_ANCHOR), str(self.directory)]
        if self.own_network:
            argv.append(str(self._mark_port))
        stdin_r, stdin_w = os.pipe()
        channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            pid, exited = self._reaper.spawn(
                argv,
                {"PATH": DEFAULT_PATH},
                stdin=stdin_r,
                stdout=theirs.fileno(),
                stderr=theirs.fileno(),
            )
        except BaseException:
            os.close(stdin_w)
            channel.close()
            raise
        finally:
            os.close(stdin_r)
            theirs.close()
        self.anchor_pid, self._anchor_stdin, self._anchor_exit = pid, stdin_w, exited
        said, passed = await asyncio.to_thread(_first_message, channel, timeout)
        if said != b"ready\n" or len(passed) != int(self.own_network):
            for fd in passed:
                os.close(fd)
            await self.destroy()
            raise IsolationError(f"the sandbox namespace failed: {said.decode(errors='replace')}")
        if passed:
            self.mark_listener = socket.socket(fileno=passed[0])
        stat = os.stat(f"/proc/{pid}/ns/mnt")
        self.namespace = (stat.st_dev, stat.st_ino)
        tmp = os.stat(self.directory / "tmp")
        self.mark = (stat.st_dev, stat.st_ino, tmp.st_dev, tmp.st_ino)
        self.root_fd = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY)

    def argv(self, user: str, cwd: str, cmd: str, args: Sequence[str]) -> list[str]:
        """The argv that runs ``cmd args`` as ``user`` in ``cwd`` inside the sandbox."""
        iso = self.isolation
        enter = [iso.nsenter]
        if iso.mode is IsolationMode.USERNS:
            enter.append(f"--user=/proc/{self.anchor_pid}/ns/user")
        enter.append(f"--mount=/proc/{self.anchor_pid}/ns/mnt")
        enter.append(f"--ipc=/proc/{self.anchor_pid}/ns/ipc")
        if self.own_network:
            enter.append(f"--net=/proc/{self.anchor_pid}/ns/net")
        enter += [f"--wdns={cwd}", "--"]
        if iso.mode is IsolationMode.ROOT and user != "root":
            uid, gid = self._inside[user]
            enter += [iso.setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
        return [*enter, cmd, *args]

    def environment(self, user: str, *layers: Mapping[str, str]) -> dict[str, str]:
        """A process's environment as envd builds it: PATH, HOME, USER,
        LOGNAME, then each layer (sandbox variables, then the request's)."""
        env = {
            "PATH": f"{DEFAULT_PATH}:{TEMPLATE_BIN}",
            "HOME": self.users[user].home,
            "USER": user,
            "LOGNAME": user,
        }
        for layer in layers:
            env.update(layer)
        return env

    def processes(self) -> list[int]:
        """Every process now in this sandbox's namespace (its anchor included)."""
        return list(processes_in_namespace(self.namespace)) if self.namespace[1] else []

    async def destroy(self) -> None:
        """Kill every process in the sandbox, stop the anchor, remove the
        directories. Idempotent."""
        if self.namespace[1]:
            kill_namespaces([self.mark])
        if self._anchor_stdin >= 0:
            os.close(self._anchor_stdin)
            self._anchor_stdin = -1
        if self.anchor_pid and self._anchor_exit is not None and not self._anchor_exit.done():
            _kill(self.anchor_pid)
            await asyncio.wait([self._anchor_exit], timeout=5)
        if self.root_fd >= 0:
            os.close(self.root_fd)
            self.root_fd = -1
        if self.mark_listener is not None:
            self.mark_listener.close()
            self.mark_listener = None
        await asyncio.to_thread(shutil.rmtree, self.directory, True)


def _first_message(channel: socket.socket, timeout: float) -> tuple[bytes, list[int]]:
    """The anchor's first line on ``channel`` and the descriptors passed
    with it (all it wrote, if it ended without a newline); closes
    ``channel``. Blocking: run it in a thread."""
    data, passed = b"", list[int]()
    deadline = time.monotonic() + timeout
    try:
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                return b"(no answer in time)", passed
            channel.settimeout(left)
            chunk, fds, _, _ = socket.recv_fds(channel, 65_536, 1)
            passed += fds
            if not chunk:
                break
            data += chunk
        if data != b"ready\n":
            channel.settimeout(2)
            with contextlib.suppress(OSError):
                data += channel.recv(65_536)
        return data, passed
    except TimeoutError:
        return data or b"(no answer in time)", passed
    finally:
        channel.close()


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


Mark = tuple[int, int, int, int]
"""A sandbox's namespace, as ``kill_namespaces`` recognises it: the mount
namespace's ``(st_dev, st_ino)`` and its ``/tmp``'s ``(st_dev, st_ino)``."""


def processes_in_namespace(namespace: tuple[int, int]) -> Iterator[int]:
    """The pids of every process whose mount namespace is ``(st_dev, st_ino)``."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = os.stat(f"/proc/{name}/ns/mnt")
        except OSError:
            continue
        if (stat.st_dev, stat.st_ino) == namespace:
            yield int(name)


def _marked(pid: str, wanted: set[tuple[int, int]], marks: set[Mark]) -> bool:
    try:
        ns = os.stat(f"/proc/{pid}/ns/mnt")
        if (ns.st_dev, ns.st_ino) not in wanted:
            return False
        tmp = os.stat(f"/proc/{pid}/root/tmp")
    except OSError:
        return False
    return (ns.st_dev, ns.st_ino, tmp.st_dev, tmp.st_ino) in marks


def kill_namespaces(marks: Sequence[Mark], rounds: int = 20) -> None:
    """SIGKILL every process in these sandboxes' mount namespaces, again and
    again until none is left (a process forking as it is killed adds new
    ones).

    Strategy: a namespace's inode number is reused once the namespace is
    gone, by any new namespace on this machine (another server's sandbox,
    say), so the namespace alone does not name a sandbox after its end: a
    process is killed only if its ``/tmp`` is also the sandbox's own. A mark
    naming the caller's own mount namespace is ignored."""
    own = os.stat("/proc/self/ns/mnt")
    # A sandbox never lives in this process's own namespace: a mark naming it
    # is a mistake that would kill every process of this machine.
    chosen = {mark for mark in marks if (mark[0], mark[1]) != (own.st_dev, own.st_ino)}
    wanted = {(mark[0], mark[1]) for mark in chosen}
    me = os.getpid()
    for _ in range(rounds):
        found = False
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != me and _marked(name, wanted, chosen):
                found = True
                _kill(int(name))
        if not found:
            return
