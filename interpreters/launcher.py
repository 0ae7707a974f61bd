"""The at-most-once launcher, for any backend with a shell and a files API.

A sandbox provider rarely offers an idempotency key for commands. The
launcher makes the sandbox its own ledger: a bash script
(:data:`LAUNCHER`, the package file ``_launcher.sh``), uploaded once per
sandbox and run as ``root``, claims each task under a root-only ledger,
keeps the keyed request digest and the highest fence, runs the command as
``user`` detached in its own session under an in-sandbox deadline, and
answers starts, waits, reads and cancels in one round trip each. What the
model supplies (command, cwd, env) travels as staged files, never in shell
text. The protocol (the ledger's layout, the claim, the epoch proof a lost
claim needs, staging and discarding requests) is documented in
``_launcher_script``; how it keeps a launch at most once, in
``docs/explanation/ledger.md``.

A backend reuses it in three parts:

- a :class:`Transport`: how to run a bash line as ``root`` in one of its
  sandboxes and get its stdout, how to write files there as ``root``, and
  its failure table (whether a failed call's request may have left);
- the sandboxes: its own ``Inspect`` and ``Ensure`` (find or create the
  session's sandbox, a :class:`Box` per sandbox, :meth:`Launcher.install`
  during ``Ensure`` so that it reports the ledger's epoch);
- a :class:`Launcher` built on both, which answers every other sandbox
  effect: ``Publish``, ``Start``, ``Wait``, ``Read`` and ``Cancel``.

The E2B interpreter (:mod:`sandrail.interpreters.e2b`) is one such
backend, with the e2b SDK as its transport. What a sandbox must offer: a
``root`` that runs the launcher, a ``user`` account (home ``/home/user``)
that runs the commands, and ``bash``, ``flock``, ``setpriv``, ``setsid``.

Errors keep the reference port's names (``e2b_command_*``, see
:class:`~sandrail.core.ErrorCode`): harnesses match on them, whatever the
backend.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, overload, runtime_checkable

import attrs

from sandrail.core import (
    Cancel,
    CancelRequested,
    CommandState,
    Delivery,
    EffectFailure,
    OutputChunk,
    Publish,
    Published,
    Read,
    Start,
    Started,
    StartRefused,
    Wait,
    staged_suffix,
)

from ._launcher_answers import Malformed, RawRead, chunk_of, parse_cancel, parse_read, parse_start
from ._launcher_calls import Box, LauncherCalls, launcher_missing, launcher_refused
from ._launcher_request import request_files, shell_int, utf8
from ._launcher_script import LAUNCHER, LAUNCHER_NAME, LEDGER

__all__ = [
    "LAUNCHER",
    "LAUNCHER_NAME",
    "LEDGER",
    "Box",
    "Launcher",
    "LauncherEffect",
    "LauncherOutcome",
    "Malformed",
    "NotLauncherEffectError",
    "Transport",
    "launcher_missing",
    "launcher_refused",
]

_TASK_ID = re.compile(r"[0-9a-f]{64}")
_MIN_READ_BYTES: Final = 4
_READ_CAP_BYTES: Final = 4 * 1024 * 1024
"""At most this much of each stream per round trip; a bigger read returns
less and says ``more`` (the core reads on by cursor)."""
WAIT_PREFETCH_BYTES: Final = 32 * 1024
"""A wait brings back both streams whole when together they are at most
this big (an output that fits the default budget of 24,000 bytes, read
later without a round trip), and nothing but their sizes otherwise: a big
output moves only the two ends the core reads (≤ 2 × the budget for
16 MiB)."""
_CACHED_TASKS: Final = 64
_CANCEL_GRACE_SECONDS: Final = 5


@runtime_checkable
class Transport(Protocol):
    """How the launcher reaches a backend's sandboxes. ``sandbox`` is the
    backend's handle of one (its :attr:`Box.sandbox`).

    Every method raises the transport's own exceptions for a failed call;
    :meth:`classify` says what such a failure means for the decisive call
    of an effect, and :meth:`exit_status` whether it was the line exiting
    non-zero (the launcher's refusals and a missing launcher are told by
    their exit status: 3 and 126 or 127).
    """

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        """Run the bash ``line`` as ``root`` in ``sandbox``, ended after
        ``timeout`` seconds (each request of it times out after
        ``request_timeout``), and return its stdout. A line that exits
        non-zero raises (with its exit status and stdout, for
        :meth:`exit_status`)."""

    async def write_files(
        self, sandbox: Any, files: list[tuple[str, bytes]], *, request_timeout: float
    ) -> None:
        """Write each ``(path, bytes)`` as ``root``, making parent folders."""

    def exit_status(self, exc: BaseException) -> tuple[int, str] | None:
        """``(exit status, stdout)`` if ``exc`` is a line of :meth:`run`
        that exited non-zero, else ``None``."""

    def classify(self, exc: BaseException, what: str) -> EffectFailure:
        """The failure of the decisive call of the effect ``what`` that
        raised ``exc``: ``not_sent`` only when the request surely did not
        leave (a refused connection, the launcher's refusal, a missing
        launcher), ``maybe_sent`` otherwise. The kit's faults never reach
        it; :func:`sandrail.testing.check_transport` checks it on a live
        sandbox (``docs/howto/test-your-harness.md``)."""


LauncherEffect = Publish | Start | Wait | Read | Cancel
"""The sandbox effects a :class:`Launcher` answers (a backend answers
``Inspect`` and ``Ensure`` itself)."""

LauncherOutcome = Published | StartRefused | Started | CommandState | OutputChunk | CancelRequested
"""What a :class:`Launcher` answers them with."""

_SERVED: Final = (Publish, Start, Wait, Read, Cancel)


class NotLauncherEffectError(TypeError):
    """An effect the launcher does not serve (``Inspect``, ``Ensure``, or
    not a sandbox effect at all) was given to :meth:`Launcher.cached` or
    :meth:`Launcher.answer`: the backend answers those itself."""

    def __init__(self, effect: object) -> None:
        super().__init__(
            f"the launcher does not answer {type(effect).__name__}: it answers "
            "Publish, Start, Wait, Read and Cancel (a backend answers Inspect and Ensure itself)"
        )
        self.effect = effect


class Launcher:
    """The sandbox effects the launcher answers (``Publish``, ``Start``,
    ``Wait``, ``Read``, ``Cancel``), for a backend (see the module doc).

    - ``transport``: the backend's :class:`Transport`;
    - ``request_timeout``: bounds every transport call (waits add their own
      duration);
    - ``box(sandbox_id)``: the connected sandbox (a :class:`Box`), raising
      :class:`~sandrail.core.EffectFailure` ``not_sent`` when it cannot be
      reached;
    - ``ledger_key()``: the key of the request digests kept in sandboxes
      (the sandbox never sees it);
    - ``max_command_seconds()``: the longest in-sandbox deadline a command
      gets;
    - ``note_gone(sandbox_id, exc)``, ``is_dead(sandbox_id)``: every
      exception that may say a sandbox is gone, and whether one was.

    Malformed launcher answers are ``maybe_sent`` failures (``not_sent``
    where nothing could have run); a backend that catches
    :class:`Malformed` itself may say more.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        request_timeout: float,
        box: Callable[[str], Awaitable[Box]],
        ledger_key: Callable[[], bytes],
        max_command_seconds: Callable[[], int],
        note_gone: Callable[[str, BaseException], None],
        is_dead: Callable[[str], bool],
    ) -> None:
        self.calls = LauncherCalls(transport, request_timeout, note_gone=note_gone, is_dead=is_dead)
        self._box = box
        self._ledger_key = ledger_key
        self._max_command_seconds = max_command_seconds
        self._final: OrderedDict[tuple[str, str], RawRead] = OrderedDict()

    async def install(self, box: Box, *, fresh: bool) -> None:
        """Install the launcher in ``box`` and learn its ledger's epoch
        (``box.epoch``); ``fresh``: the sandbox was just created. Raises
        what the transport raises; nothing here can launch a task."""
        await self.calls.install(box, fresh=fresh)

    # -- launches --------------------------------------------------------------

    async def publish(self, effect: Publish) -> Published | StartRefused:
        """Write the snippet file of ``effect`` (``publish_conflict`` for
        other source already there)."""
        suffix = staged_suffix(effect)
        box = await self._box(effect.sandbox_id)
        answer = await self.calls.staged_call(
            box,
            effect.task_id,
            [("source", utf8(effect.source))],
            f"publish {suffix}",
            "Publish",
        )
        line = answer.strip()
        if line == "published":
            return Published(path=effect.path)
        if line == "refused publish_conflict":
            return StartRefused(reason="publish_conflict")
        raise Malformed("bad publish answer")

    async def start(self, effect: Start) -> Started | StartRefused:
        """Claim and launch the task of ``effect``, at most once (C2)."""
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Start: the task id is malformed")
        files = request_files(
            effect, ledger_key=self._ledger_key, max_seconds=self._max_command_seconds()
        )
        box = await self._box(effect.sandbox_id)
        answer = await self.calls.staged_call(box, effect.task_id, files, "start", "Start")
        parsed = parse_start(answer, effect.task_id)
        box.heard(parsed.epoch)
        return parsed.outcome

    # -- observing -------------------------------------------------------------

    def _remember(self, sandbox_id: str, task_id: str, raw: RawRead) -> None:
        """Keep an ended command's whole output: it can no longer change."""
        ended = raw.state.status in ("exited", "timed_out", "canceled")
        whole = len(raw.stdout) == raw.stdout_size and len(raw.stderr) == raw.stderr_size
        if ended and whole:
            self._final[(sandbox_id, task_id)] = raw
            while len(self._final) > _CACHED_TASKS:
                self._final.popitem(last=False)

    @overload
    def cached(self, effect: Wait) -> CommandState | None: ...
    @overload
    def cached(self, effect: Read) -> OutputChunk | None: ...
    @overload
    def cached(self, effect: Publish | Start | Cancel) -> None: ...
    @overload
    def cached(self, effect: LauncherEffect) -> CommandState | OutputChunk | None: ...
    def cached(self, effect: LauncherEffect) -> CommandState | OutputChunk | None:
        """The outcome of a wait or read of an ended command whose whole
        output this launcher holds, computed here (it can no longer change),
        or ``None``. Pure: safe from any thread.

        Only ``Wait`` and ``Read`` are ever answered from the cache;
        ``Publish``, ``Start`` and ``Cancel`` act on the sandbox, so for them
        this is always ``None``. Any other effect (``Inspect``, ``Ensure``:
        the backend's own) is :class:`NotLauncherEffectError`.
        """
        if not isinstance(effect, _SERVED):
            raise NotLauncherEffectError(effect)
        if not isinstance(effect, Wait | Read):
            return None
        cached = self._final.get((effect.sandbox_id, effect.task_id))
        if cached is None or not _TASK_ID.fullmatch(effect.task_id):
            return None
        if isinstance(effect, Wait):
            return cached.state
        if (
            effect.max_bytes < _MIN_READ_BYTES
            or min(effect.stdout_cursor, effect.stderr_cursor) < 0
        ):
            return None
        size = min(effect.max_bytes, _READ_CAP_BYTES)
        raw = attrs.evolve(
            cached,
            stdout=cached.stdout[effect.stdout_cursor : effect.stdout_cursor + size + 4],
            stderr=cached.stderr[effect.stderr_cursor : effect.stderr_cursor + size + 4],
        )
        return chunk_of(raw, effect.stdout_cursor, effect.stderr_cursor, size)

    async def wait(self, effect: Wait) -> CommandState:
        """The task's state once it ended or ``effect.timeout_seconds`` passed."""
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Wait: the task id is malformed")
        cached = self.cached(effect)
        if cached is not None:
            return cached
        box = await self._box(effect.sandbox_id)
        await self.calls.prepare(box, [])
        seconds = max(0.0, float(effect.timeout_seconds))
        millis = int(seconds * 1000)
        answer = await self.calls.decisive(
            box,
            f"wait {effect.task_id} {millis} {WAIT_PREFETCH_BYTES}",
            "Wait",
            seconds=seconds,
        )
        raw = parse_read(answer)
        box.heard(raw.epoch)
        self._remember(effect.sandbox_id, effect.task_id, raw)
        return raw.state

    async def read(self, effect: Read) -> OutputChunk:
        """Both streams of the task from the effect's cursors."""
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Read: the task id is malformed")
        if effect.max_bytes < _MIN_READ_BYTES:
            raise EffectFailure(Delivery.NOT_SENT, f"Read: max_bytes must be >= {_MIN_READ_BYTES}")
        out, err = shell_int(effect.stdout_cursor), shell_int(effect.stderr_cursor)
        size = min(effect.max_bytes, _READ_CAP_BYTES)
        cached = self.cached(effect)
        if cached is not None:
            return cached
        box = await self._box(effect.sandbox_id)
        await self.calls.prepare(box, [])
        answer = await self.calls.decisive(box, f"read {effect.task_id} {out} {err} {size}", "Read")
        raw = parse_read(answer)
        box.heard(raw.epoch)
        if effect.stdout_cursor == 0 and effect.stderr_cursor == 0:
            self._remember(effect.sandbox_id, effect.task_id, raw)
        return chunk_of(raw, effect.stdout_cursor, effect.stderr_cursor, size)

    async def cancel(self, effect: Cancel) -> CancelRequested:
        """Signal the task's whole session to end (C18)."""
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Cancel: the task id is malformed")
        box = await self._box(effect.sandbox_id)
        await self.calls.prepare(box, [])
        answer = await self.calls.decisive(
            box, f"cancel {effect.task_id}", "Cancel", seconds=_CANCEL_GRACE_SECONDS
        )
        cancelled = parse_cancel(answer)
        box.heard(cancelled.epoch)
        return CancelRequested(state=cancelled.state)

    async def answer(self, effect: LauncherEffect) -> LauncherOutcome:
        """Answer any effect the launcher serves (``Publish``, ``Start``,
        ``Wait``, ``Read``, ``Cancel``), from the cache when it can; any
        other effect is :class:`NotLauncherEffectError`."""
        if isinstance(effect, Publish):
            return await self.publish(effect)
        if isinstance(effect, Start):
            return await self.start(effect)
        if isinstance(effect, Wait):
            return await self.wait(effect)
        if isinstance(effect, Read):
            return await self.read(effect)
        if isinstance(effect, Cancel):
            return await self.cancel(effect)
        raise NotLauncherEffectError(effect)
