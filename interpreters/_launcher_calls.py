"""Calling the launcher: a backend's round trips into one sandbox, through
its :class:`~sandrail.interpreters.launcher.Transport`.

Every call runs the launcher (:mod:`._launcher_script`) as ``root`` with
arguments that are only task ids, nonces and integers; what the model
supplies travels in staged request files (:mod:`._launcher_request`). Calls
that only prepare (installing the launcher, staging a request) cannot
launch anything, so their failures are ``not_sent``; the decisive call of
an effect is classified by the transport's failure table. A staged request
whose decisive call failed is discarded by the launcher, by the same rename
a start takes it with.

The backend owns the sandboxes and tells these calls two things about them:
``note_gone(sandbox_id, exc)`` is called with every exception that may say
a sandbox is gone, and ``is_dead(sandbox_id)`` says whether one was seen
gone (a dead sandbox's staged request is not discarded: nothing answers).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs

from sandrail.core import Delivery, EffectFailure

from ._launcher_answers import Malformed, parse_init
from ._launcher_script import LAUNCHER, LAUNCHER_NAME, LEDGER

if TYPE_CHECKING:
    from .launcher import Transport

__all__ = ["Box", "LauncherCalls", "launcher_missing", "launcher_refused"]

_BIN: Final = f"{LEDGER}/bin"
_INBOX: Final = f"{LEDGER}/inbox"
_DISCARD_TIMEOUT_SECONDS: Final = 5.0
_LAUNCHER_REFUSED: Final = 3
"""The launcher's exit status when it refused its arguments, touching no claim."""


def launcher_refused(exit_status: tuple[int, str] | None) -> bool:
    """Whether a line's exit (status, stdout) is the launcher refusing its
    arguments (exit 3, ``sandrail-error ...``): it touched no claim."""
    return (
        exit_status is not None
        and exit_status[0] == _LAUNCHER_REFUSED
        and exit_status[1].startswith("sandrail-error ")
    )


def launcher_missing(exit_status: tuple[int, str] | None) -> bool:
    """Whether a line's exit says the launcher file is gone (126 or 127)."""
    return exit_status is not None and exit_status[0] in (126, 127)


@attrs.define
class Box:
    """A sandbox a backend is connected to, and what it knows of the
    launcher there. ``sandbox`` is the transport's handle of it."""

    sandbox: Any
    sandbox_id: str
    refreshed_at: float = 0.0
    """When the backend last refreshed the sandbox's lifetime (a backend
    whose sandboxes expire keeps it here)."""
    installed: bool = False
    epoch: str | None = None
    """The ledger epoch last reported by the launcher (``None``: unknown)."""
    separated: bool = True
    """Whether ``user`` is another uid than root in this sandbox."""

    def heard(self, epoch: str | None) -> None:
        """The launcher reported ``epoch`` in an answer: the one ``Ensure``
        reports from now on. An answer without a readable epoch changes
        nothing (an epoch that no longer holds only makes starts
        ``claim_lost``, never a second launch)."""
        if epoch is not None:
            self.epoch = epoch


class LauncherCalls:
    """The round trips that run the launcher in a :class:`Box` (see the
    module doc). ``request_timeout`` bounds every transport call (waits add
    their own duration)."""

    def __init__(
        self,
        transport: Transport,
        request_timeout: float,
        *,
        note_gone: Callable[[str, BaseException], None],
        is_dead: Callable[[str], bool],
    ) -> None:
        self._transport = transport
        self._request_timeout = request_timeout
        self._note_gone = note_gone
        self._is_dead = is_dead

    async def staged_call(
        self,
        box: Box,
        task_id: str,
        files: list[tuple[str, bytes]],
        command: str,
        what: str,
    ) -> str:
        """Stage ``files`` as a request of ``task_id`` and run the launcher's
        ``command`` on it (``command <task> <nonce>``, then any words of
        ``what``'s own); a staged request whose call failed is discarded."""
        nonce = secrets.randbits(59)
        staged = f"{_INBOX}/{task_id}.{nonce}"
        entries = [(f"{staged}/{name}", data) for name, data in files]
        verb, _, extra = command.partition(" ")
        args = f"{verb} {task_id} {nonce}" + (f" {extra}" if extra else "")
        try:
            await self.prepare(box, entries)
            return await self.decisive(box, args, what)
        except EffectFailure:
            if not self._is_dead(box.sandbox_id):
                await self.discard(box, task_id, nonce)
            raise

    async def run(self, box: Box, args: str, *, seconds: float = 0) -> str:
        """Run the launcher as root with ``args`` (task ids, nonces and
        integers only) and return its stdout. Raises what the transport
        raises."""
        # ``exec``: a transport may run the line in a login shell, which bash
        # never replaces by its last command itself; one process fewer to end
        # before the answer (a wait's answer is on the exit-to-result path).
        return await self._as_root(
            box, f"exec bash {_BIN}/{LAUNCHER_NAME} {args}", seconds + self._request_timeout
        )

    async def install(self, box: Box, *, fresh: bool) -> None:
        """Install the launcher and learn the ledger's epoch (``init``).
        ``fresh``: the sandbox was just created (write the launcher at once);
        otherwise try the copy a former harness may have left first (one
        round trip), writing it only when it is missing. Raises what the
        transport raises; nothing here can launch a task."""
        answer: str | None = None
        init_seconds = 2 * self._request_timeout
        if not fresh:
            try:
                answer = await self._as_root(
                    box, f"bash {_BIN}/{LAUNCHER_NAME} init {LAUNCHER_NAME}", init_seconds
                )
            except Exception as exc:
                if not launcher_missing(self._transport.exit_status(exc)):
                    raise
        if answer is None:
            staged = f"{_BIN}/.{LAUNCHER_NAME}.{secrets.randbits(59)}"
            await self._transport.write_files(
                box.sandbox,
                [(staged, LAUNCHER.encode())],
                request_timeout=self._request_timeout,
            )
            answer = await self._as_root(box, f"bash {staged} init {LAUNCHER_NAME}", init_seconds)
        init = parse_init(answer)
        box.installed, box.epoch, box.separated = True, init.epoch, init.separated

    async def prepare(self, box: Box, files: list[tuple[str, bytes]]) -> None:
        """Install the launcher if needed, then stage ``files`` (as root).
        A request is staged only into a ledger the launcher has made private
        (installed first: a files API may make directories 0755). Nothing
        here can launch a task, so every failure is not_sent."""
        try:
            if not box.installed:
                await self.install(box, fresh=False)
            if files:
                await self._transport.write_files(
                    box.sandbox, files, request_timeout=self._request_timeout
                )
        except Exception as exc:
            self._note_gone(box.sandbox_id, exc)
            exit_status = self._transport.exit_status(exc)
            detail = (
                exit_status[1] if exit_status is not None and launcher_refused(exit_status) else ""
            )
            what = detail.strip() or type(exc).__name__
            raise EffectFailure(Delivery.NOT_SENT, f"staging failed ({what}); nothing ran") from exc

    async def decisive(self, box: Box, args: str, what: str, *, seconds: float = 0) -> str:
        """The launcher's answer to the decisive call of the effect ``what``
        (``seconds``: how long the launcher may take beyond a request). A
        failure is :class:`EffectFailure`: a malformed answer ``maybe_sent``,
        anything else as the transport's failure table says; a missing
        launcher is installed again by the next call."""
        try:
            return await self.run(box, args, seconds=seconds)
        except Malformed as exc:
            raise EffectFailure(Delivery.MAYBE_SENT, f"{what}: malformed answer") from exc
        except Exception as exc:
            self._note_gone(box.sandbox_id, exc)
            if launcher_missing(self._transport.exit_status(exc)):
                box.installed = False
            raise self._transport.classify(exc, what) from exc

    async def discard(self, box: Box, task_id: str, nonce: int) -> None:
        """Discard a staged request whose decisive call failed (best effort),
        and with it any env value it holds. The launcher takes it by the same
        atomic rename a start takes it with, so this never touches a request
        a start is using (deleting it file by file could leave that start a
        request without its digest: see :mod:`._launcher_script`)."""
        # What this cannot discard, the launcher's sweep deletes later.
        seconds = min(self._request_timeout, _DISCARD_TIMEOUT_SECONDS)
        with contextlib.suppress(Exception):
            await self._as_root(
                box,
                f"bash {_BIN}/{LAUNCHER_NAME} discard {task_id} {nonce}",
                seconds,
                request_timeout=seconds,
            )

    async def _as_root(
        self, box: Box, line: str, seconds: float, *, request_timeout: float | None = None
    ) -> str:
        """Run the shell ``line`` as root in ``box``, ended after ``seconds``;
        each request of it times out after ``request_timeout`` (default: the
        backend's). Returns its stdout; raises what the transport raises
        (:class:`Malformed` for an answer without stdout)."""
        stdout = await self._transport.run(
            box.sandbox,
            line,
            timeout=seconds,
            request_timeout=self._request_timeout if request_timeout is None else request_timeout,
        )
        if not isinstance(stdout, str):
            raise Malformed("no stdout")
        return stdout
