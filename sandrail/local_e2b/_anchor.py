"""The anchor of one sandbox: run inside a fresh mount namespace, it lays the
sandbox's own directories over ``/tmp``, ``/home/user`` and ``/root``, binds
the sandbox's ``/etc/passwd`` and ``/etc/group``, makes the rest of this
machine's filesystem read-only, prints ``ready`` and then waits for its
standard input to close (the server ending the sandbox, or dying), then
kills every process left in the namespace. While it lives, the server enters its namespace
(``/proc/<pid>/ns/mnt``) to start commands and reads the sandbox's files
through ``/proc/<pid>/root``.

Run as ``python -I -S _anchor.py SANDBOX_DIR [MARK_PORT]`` under ``unshare
--mount --propagation private`` (plus ``--user --map-root-user`` without
root): it imports nothing outside the standard library, so it starts in
milliseconds. Its standard output is a Unix socket to the server. A
``MARK_PORT`` means the sandbox has no egress (``unshare --net`` too): the
anchor brings up the loopback of its fresh network namespace and passes the
server, with ``ready`` (``SCM_RIGHTS``), a socket listening on that port of
the sandbox's loopback: the server's mark listener, reachable from inside
where the server's own loopback is not. Exit status 3 and a message on stderr when a step fails.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys

__all__ = ["main"]

_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_NOATIME = 0x400
_MS_NODIRATIME = 0x800
_MS_BIND = 0x1000
_MS_RELATIME = 0x200000
_MS_STRICTATIME = 0x1000000

_KEEP = {
    "nosuid": _MS_NOSUID,
    "nodev": _MS_NODEV,
    "noexec": _MS_NOEXEC,
    "noatime": _MS_NOATIME,
    "nodiratime": _MS_NODIRATIME,
    "relatime": _MS_RELATIME,
    "strictatime": _MS_STRICTATIME,
}
_OWN = ("/tmp", "/home", "/root", "/dev/shm")
_WRITABLE = ("/dev/pts",)

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    result = _libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _unescape(field: str) -> str:
    """A mountinfo path: spaces and the like are written as octal escapes."""
    parts = field.split("\\")
    out = parts[0]
    for part in parts[1:]:
        out += chr(int(part[:3], 8)) + part[3:] if part[:3].isdigit() else "\\" + part
    return out


def _read_only_rest() -> None:
    """Remount every mount but the sandbox's own and /dev/pts read-only
    (/proc, /sys and /dev included: device nodes still work), keeping the
    per-mount flags a user namespace locks. Raises ``OSError`` if ``/``
    itself stays writable; other mounts are best effort."""
    with open("/proc/self/mountinfo", encoding="utf-8") as mountinfo:
        lines = mountinfo.read().splitlines()
    for line in lines:
        fields = line.split()
        point = _unescape(fields[4])
        options = fields[5].split(",")
        if "ro" in options:
            continue
        if any(point == own or point.startswith(own + "/") for own in _OWN + _WRITABLE):
            continue
        flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
        for option in options:
            flags |= _KEEP.get(option, 0)
        try:
            _mount(None, point, None, flags)
        except OSError:
            if point == "/":
                raise
            # A mount hidden under another cannot be reached; it stays as it is.


TEMPLATE_BIN = "/home/.local-e2b/bin"
"""Programs E2B's base template has and this machine may lack under that
name (``python``), as links to what it has; last on every command's PATH."""

_SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _template_programs() -> None:
    """Link the programs (see :data:`TEMPLATE_BIN`), and put that directory
    last on a login shell's PATH too: the sandbox's ``/etc/profile.d`` is
    this machine's plus one script (a login shell's ``/etc/profile`` sets
    PATH afresh, and E2B runs commands in one)."""
    os.makedirs(TEMPLATE_BIN, mode=0o755)
    profile = os.path.join(os.path.dirname(TEMPLATE_BIN), "profile.d")
    os.mkdir(profile, 0o755)
    if os.path.isdir("/etc/profile.d"):
        for name in os.listdir("/etc/profile.d"):
            source = os.path.join("/etc/profile.d", name)
            if os.path.isfile(source):
                with open(source, "rb") as src, open(os.path.join(profile, name), "wb") as dst:
                    dst.write(src.read())
        with open(os.path.join(profile, "zz-local-e2b.sh"), "w") as script:
            script.write(f'PATH="$PATH:{TEMPLATE_BIN}"\n')
        _mount(profile, "/etc/profile.d", None, _MS_BIND)
    for name, stand_ins in (("python", ("python3",)), ("node", ("nodejs",))):
        if any(os.access(os.path.join(d, name), os.X_OK) for d in _SYSTEM_PATH):
            continue
        for stand_in in stand_ins:
            found = [os.path.join(d, stand_in) for d in _SYSTEM_PATH]
            found = [path for path in found if os.access(path, os.X_OK)]
            if found:
                os.symlink(found[0], os.path.join(TEMPLATE_BIN, name))
                break


_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1


def _loopback_up() -> None:
    """Bring ``lo`` up: a fresh network namespace has it, down."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def _ready(mark_port: int) -> None:
    """Tell the server the sandbox is ready, with the mark listener if asked."""
    with socket.socket(fileno=os.dup(1)) as channel:
        if not mark_port:
            channel.sendall(b"ready\n")
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", mark_port))
        listener.listen(64)
        socket.send_fds(channel, [b"ready\n"], [listener.fileno()])
        listener.close()


def main(sandbox_dir: str, mark_port: int = 0) -> int:
    try:
        _mount("tmpfs", "/home", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=755")
        os.mkdir("/home/user")
        _template_programs()
        _mount(f"{sandbox_dir}/home", "/home/user", None, _MS_BIND)
        _mount(f"{sandbox_dir}/root", "/root", None, _MS_BIND)
        _mount(f"{sandbox_dir}/passwd", "/etc/passwd", None, _MS_BIND)
        _mount(f"{sandbox_dir}/group", "/etc/group", None, _MS_BIND)
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
        # Last: the sources above may live under this machine's /tmp.
        _mount(f"{sandbox_dir}/tmp", "/tmp", None, _MS_BIND)
        _read_only_rest()
        if mark_port:
            _loopback_up()
        _ready(mark_port)
    except Exception as exc:  # any failure is reported to the server as text
        print(f"local-e2b anchor: {exc}", file=sys.stderr, flush=True)
        return 3
    sys.stdin.buffer.read()
    _end_sandbox()
    return 0


def _end_sandbox() -> None:
    """Kill every process left in this mount namespace. The server closes
    the anchor's standard input when it ends the sandbox, and the kernel
    does when the server dies (killed, crashed): either way no process of
    the sandbox outlives it. A process forking as it is killed adds new
    ones, so again until none is left."""
    own = os.stat("/proc/self/ns/mnt")
    me = os.getpid()
    for _ in range(20):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                namespace = os.stat(f"/proc/{name}/ns/mnt")
            except OSError:
                continue
            if (namespace.st_dev, namespace.st_ino) == (own.st_dev, own.st_ino):
                found = True
                try:
                    os.kill(int(name), signal.SIGKILL)
                except OSError:
                    continue
        if not found:
            return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0))
