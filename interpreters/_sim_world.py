"""The simulator's world: sandboxes, their files, and launched tasks.

Strategy: a task never runs "in the background". Its whole life is a function
of the virtual clock: it starts at ``started_at`` and ends at the earliest of
its natural exit, its in-sandbox deadline and the moment it was killed. Its
state and visible output at any instant are computed from that, so advancing
the clock needs no scheduler and re-reading the past gives the same bytes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import Literal

import attrs

from sandrail.core import CommandState, CommandStatus, Start

from ._sim_scripts import Script, Stream

__all__ = [
    "CANCELED_EXIT_CODE",
    "TIMED_OUT_EXIT_CODE",
    "SandboxFile",
    "SimSandbox",
    "SimTask",
    "read_utf8",
]

TIMED_OUT_EXIT_CODE = 124
"""Exit code of a command killed at its in-sandbox deadline (as ``timeout(1)``)."""

CANCELED_EXIT_CODE = 143
"""Exit code of a canceled command (128 + SIGTERM)."""

Kill = Literal["canceled", "unknown"]


@attrs.frozen(kw_only=True)
class SandboxFile:
    """A file in a simulated sandbox."""

    source: str
    mode: int


@attrs.frozen
class _Stream:
    """One stream's whole output: the bytes, and when each part of it shows
    (``times[i]``: the moment the first ``sizes[i]`` bytes are written)."""

    data: bytes
    times: tuple[float, ...]
    sizes: tuple[int, ...]

    @classmethod
    def of(cls, chunks: Iterable[tuple[float, bytes]]) -> _Stream:
        parts, times, sizes, total = [], [], [], 0
        for at, data in chunks:
            parts.append(data)
            total += len(data)
            times.append(at)
            sizes.append(total)
        return cls(b"".join(parts), tuple(times), tuple(sizes))

    def size_at(self, moment: float) -> int:
        """Bytes written by ``moment`` (chunks written at it included)."""
        shown = bisect.bisect_right(self.times, moment)
        return self.sizes[shown - 1] if shown else 0


@attrs.define(kw_only=True)
class SimTask:
    """One launched command: the request that launched it and its script."""

    request: Start
    script: Script
    started_at: float
    killed_at: float | None = None
    killed_as: Kill | None = None
    _streams: dict[str, _Stream] = attrs.field(factory=dict, init=False, repr=False, eq=False)

    def ending(self) -> tuple[float, CommandStatus, int | None]:
        """When the task ends (``inf``: not yet known), how, and its exit code."""
        if self.killed_at is not None and self.killed_as is not None:
            code = CANCELED_EXIT_CODE if self.killed_as == "canceled" else None
            return self.killed_at, self.killed_as, code
        natural = (
            math.inf if self.script.exit_code is None else self.started_at + self.script.duration
        )
        deadline = self.started_at + self.request.timeout_seconds
        if natural <= deadline:
            return natural, "exited", self.script.exit_code
        return deadline, "timed_out", TIMED_OUT_EXIT_CODE

    def running(self, now: float) -> bool:
        return now < self.ending()[0]

    def output(self, now: float, stream: Stream) -> bytes:
        """Everything ``stream`` holds at ``now``, as UTF-8."""
        data = self._stream(stream)
        size = data.size_at(min(now, self.ending()[0]))
        # All of it (an ended command's): the bytes themselves, not a copy.
        return data.data if size >= len(data.data) else data.data[:size]

    def state(self, now: float) -> CommandState:
        end, status, code = self.ending()
        until = min(now, end)
        stdout = self._stream("stdout").size_at(until)
        stderr = self._stream("stderr").size_at(until)
        if now < end:
            return CommandState(status="running", stdout_bytes=stdout, stderr_bytes=stderr)
        return CommandState(status=status, exit_code=code, stdout_bytes=stdout, stderr_bytes=stderr)

    def _stream(self, stream: Stream) -> _Stream:
        # Encoded once per task: a 16 MiB output is not re-encoded on every
        # state query or read.
        found = self._streams.get(stream)
        if found is None:
            found = self._streams[stream] = _Stream.of(
                (self.started_at + chunk.offset, chunk.text.encode("utf-8"))
                for chunk in self.script.chunks
                if chunk.stream == stream
            )
        return found

    def live_processes(self, now: float) -> int:
        """The command and its children while it runs; nothing once it ended."""
        return 1 + self.script.children if self.running(now) else 0

    def kill(self, now: float, how: Kill) -> None:
        """End the whole process group now, if it still runs."""
        if self.running(now):
            self.killed_at = now
            self.killed_as = how


@attrs.define(kw_only=True)
class SimSandbox:
    """One simulated sandbox. ``highest_fence`` is the highest execution fence
    any launch carried here (C10)."""

    sandbox_id: str
    files: dict[str, SandboxFile] = attrs.field(factory=dict)
    tasks: dict[str, SimTask] = attrs.field(factory=dict)
    """The ledger: each launched task's claim, with its output and state."""
    highest_fence: int | None = None
    dead: bool = False
    ledger_epoch: int = 0
    """Changes whenever the ledger is lost (:meth:`wipe_ledger`)."""

    @property
    def epoch_token(self) -> str:
        """The ledger epoch as the sandbox reports it (``SandboxReady``):
        opaque, and never equal to another sandbox's."""
        return f"{self.sandbox_id}/ledger-{self.ledger_epoch}"

    lost: list[SimTask] = attrs.field(factory=list)
    """Tasks whose claims a lost ledger took with it; they run on."""

    def wipe_ledger(self) -> None:
        """Lose the task claims, as a command deleting them would: every
        claim, its output and its state go (the processes run on, unseen),
        and the ledger starts a new epoch. The highest fence is kept (it
        lives beside the claims, and losing it too takes deleting the whole
        ledger, which the E2B launcher keeps out of the commands' reach)."""
        self.lost.extend(self.tasks.values())
        self.tasks.clear()
        self.ledger_epoch += 1

    def die(self, now: float) -> None:
        """Kill the sandbox: every running task ends with status ``unknown``."""
        self.dead = True
        for task in (*self.tasks.values(), *self.lost):
            task.kill(now, "unknown")


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def read_utf8(data: bytes, cursor: int, max_bytes: int) -> tuple[str, int]:
    """Read at most ``max_bytes`` of valid UTF-8 ``data`` from ``cursor``.

    Returns the text and the cursor just past it. The text never ends inside
    a character: the read backs off to the last boundary (``max_bytes >= 4``
    guarantees a character always fits). A cursor inside a character is moved
    forward to the next boundary first, so the text is always an exact slice
    of the output (the partial character is skipped, never replaced). A
    cursor at or past the end reads nothing and stays where it is.
    """
    if cursor >= len(data):
        return "", cursor
    start = cursor
    while start < len(data) and _continuation(data[start]):
        start += 1
    end = min(start + max_bytes, len(data))
    while end < len(data) and _continuation(data[end]):
        end -= 1
    return str(memoryview(data)[start:end], "utf-8"), end
