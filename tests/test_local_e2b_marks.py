"""local-e2b: marks (ground truth a command writes outside its sandbox) and
killing a sandbox's processes only while the namespace is still the
sandbox's own."""

from __future__ import annotations

import os
from collections.abc import Iterator

import e2b
import pytest

from sandrail.local_e2b import LocalE2B, _isolation, serve
from sandrail.local_e2b._isolation import kill_namespaces
from tests.local_e2b_helpers import gone, wait_until

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="these tests assume real root (as CI)")


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve() as running:
        yield running


def test_a_mark_is_recorded_once_per_run_whatever_the_sandbox_does_after(
    server: LocalE2B,
) -> None:
    box = e2b.Sandbox.create(**server.sdk_options)
    command = f"{server.mark('ran-once')}; rm -rf /tmp/* /home/user/* 2>/dev/null; echo done"
    assert box.commands.run(command).stdout == "done\n"
    assert box.commands.run(server.mark("ran-twice")).exit_code == 0
    assert box.commands.run(server.mark("ran-twice")).exit_code == 0
    truth = server.truth()
    assert (truth.marked("ran-once"), truth.marked("ran-twice"), truth.marked("never")) == (1, 2, 0)
    box.kill()


@pytest.mark.parametrize("text", ["", "a b", "x;rm", "é", "x" * 201])
def test_a_mark_that_is_not_a_plain_word_is_refused(server: LocalE2B, text: str) -> None:
    with pytest.raises(ValueError, match="mark"):
        server.mark(text)


def test_killing_a_namespace_spares_processes_whose_tmp_is_not_the_sandboxes(
    server: LocalE2B,
) -> None:
    """A mount namespace's inode number is reused once it is gone, by any new
    namespace on the machine; a stale record must not kill what now has it."""
    box = e2b.Sandbox.create(**server.sdk_options)
    sleeper = box.commands.run("sleep 60", background=True)
    own = os.stat("/proc/self/ns/mnt")

    def inside() -> bool:  # the start event can come before nsenter has entered
        ns = os.stat(f"/proc/{sleeper.pid}/ns/mnt")
        return (ns.st_dev, ns.st_ino) != (own.st_dev, own.st_ino)

    assert wait_until(inside)
    ns = os.stat(f"/proc/{sleeper.pid}/ns/mnt")
    tmp = os.stat(f"/proc/{sleeper.pid}/root/tmp")
    assert (tmp.st_dev, tmp.st_ino) != (os.stat("/tmp").st_dev, os.stat("/tmp").st_ino)
    kill_namespaces([(ns.st_dev, ns.st_ino, tmp.st_dev, tmp.st_ino + 1)])
    assert not gone(sleeper.pid)
    kill_namespaces([(ns.st_dev, ns.st_ino, tmp.st_dev, tmp.st_ino)])
    assert wait_until(lambda: gone(sleeper.pid))
    box.kill()


def test_killing_never_reaches_the_callers_own_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mark naming this process's own mount namespace (a mistake) kills
    nothing: it would otherwise kill every process of the machine. (Kills
    are only recorded here, so a regression cannot do that damage.)"""
    killed: list[int] = []
    monkeypatch.setattr(_isolation, "_kill", killed.append)
    own = os.stat("/proc/self/ns/mnt")
    tmp = os.stat("/proc/self/root/tmp")
    kill_namespaces([(own.st_dev, own.st_ino, tmp.st_dev, tmp.st_ino)], rounds=1)
    assert killed == []
