"""Calling the launcher: the E2B backend's round trips into one sandbox.

Every call runs the launcher (:mod:`._e2b_launcher`) as ``root`` with
arguments that are only task ids, nonces and integers; what the model
supplies travels in staged request files (:mod:`._e2b_request`). Calls that
only prepare (installing the launcher, staging a request) cannot launch
anything, so their failures are ``not_sent``; the decisive call of an effect
is classified by the failure table (:mod:`._e2b_failures`). A staged request
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
from typing import Any, Final

import attrs

from sandrail.core import Delivery, EffectFailure

from ._e2b_answers import Malformed, parse_init
from ._e2b_failures import classify, launcher_missing, launcher_refused, sdk_call
from ._e2b_launcher import LAUNCHER, LAUNCHER_NAME, LEDGER

__all__ = ["Box", "LauncherCalls"]

_BIN: Final = f"{LEDGER}/bin"
_INBOX: Final = f"{LEDGER}/inbox"
_ROOT: Final = "root"
_DISCARD_TIMEOUT_SECONDS: Final = 5.0


@attrs.define
class Box:
    """A sandbox the backend is connected to, and what it knows of the
    launcher there."""

    sandbox: Any
    refreshed_at: float
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
    module doc). ``request_timeout`` bounds every SDK call (waits add their
    own duration)."""

    def __init__(
        self,
        request_timeout: float,
        *,
        note_gone: Callable[[str, BaseException], None],
        is_dead: Callable[[str], bool],
    ) -> None:
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
        entries: list[dict[str, str | bytes]] = [
            {"path": f"{staged}/{name}", "data": data} for name, data in files
        ]
        verb, _, extra = command.partition(" ")
        args = f"{verb} {task_id} {nonce}" + (f" {extra}" if extra else "")
        try:
            await self.prepare(box, entries)
            return await self.decisive(box, args, what)
        except EffectFailure:
            if not self._is_dead(box.sandbox.sandbox_id):
                await self.discard(box, task_id, nonce)
            raise

    async def run(self, box: Box, args: str, *, seconds: float = 0) -> str:
        """Run the launcher as root with ``args`` (task ids, nonces and
        integers only) and return its stdout. Raises what the SDK raises."""
        # ``exec``: E2B runs the line in a login shell, which bash never
        # replaces by its last command itself; one process fewer to end
        # before the answer (a wait's answer is on the exit-to-result path).
        result = await self._as_root(
            box, f"exec bash {_BIN}/{LAUNCHER_NAME} {args}", seconds + self._request_timeout
        )
        stdout = result.stdout
        if not isinstance(stdout, str):
            raise Malformed("no stdout")
        return stdout

    async def install(self, box: Box, *, fresh: bool) -> None:
        """Install the launcher and learn the ledger's epoch (``init``).
        ``fresh``: the sandbox was just created (write the launcher at once);
        otherwise try the copy a former harness may have left first (one
        round trip), writing it only when it is missing. Raises what the SDK
        raises; nothing here can launch a task."""
        answer: Any = None
        init_seconds = 2 * self._request_timeout
        if not fresh:
            try:
                answer = await self._as_root(
                    box, f"bash {_BIN}/{LAUNCHER_NAME} init {LAUNCHER_NAME}", init_seconds
                )
            except Exception as exc:
                if not launcher_missing(exc, ()):
                    raise
        if answer is None:
            staged = f"{_BIN}/.{LAUNCHER_NAME}.{secrets.randbits(59)}"
            await sdk_call(
                box.sandbox.files.write_files(
                    [{"path": staged, "data": LAUNCHER}],
                    user=_ROOT,
                    request_timeout=self._request_timeout,
                )
            )
            answer = await self._as_root(box, f"bash {staged} init {LAUNCHER_NAME}", init_seconds)
        init = parse_init(str(answer.stdout))
        box.installed, box.epoch, box.separated = True, init.epoch, init.separated

    async def prepare(self, box: Box, files: list[dict[str, str | bytes]]) -> None:
        """Install the launcher if needed, then stage ``files`` (as root).
        A request is staged only into a ledger the launcher has made private
        (installed first: the files API makes directories 0755). Nothing here
        can launch a task, so every failure is not_sent."""
        try:
            if not box.installed:
                await self.install(box, fresh=False)
            if files:
                await sdk_call(
                    box.sandbox.files.write_files(
                        files, user=_ROOT, request_timeout=self._request_timeout
                    )
                )
        except Exception as exc:
            self._note_gone(box.sandbox.sandbox_id, exc)
            detail = getattr(exc, "stdout", "") if launcher_refused(exc, ()) else ""
            what = str(detail).strip() or type(exc).__name__
            raise EffectFailure(Delivery.NOT_SENT, f"staging failed ({what}); nothing ran") from exc

    async def decisive(self, box: Box, args: str, what: str, *, seconds: float = 0) -> str:
        """The launcher's answer to the decisive call of the effect ``what``
        (``seconds``: how long the launcher may take beyond a request). A
        failure is :class:`EffectFailure`: a malformed answer ``maybe_sent``,
        anything else as the failure table says; a missing launcher is
        installed again by the next call."""
        try:
            return await self.run(box, args, seconds=seconds)
        except Malformed as exc:
            raise EffectFailure(Delivery.MAYBE_SENT, f"{what}: malformed answer") from exc
        except Exception as exc:
            self._note_gone(box.sandbox.sandbox_id, exc)
            if launcher_missing(exc, ()):
                box.installed = False
            raise classify(exc, what) from exc

    async def discard(self, box: Box, task_id: str, nonce: int) -> None:
        """Discard a staged request whose decisive call failed (best effort),
        and with it any env value it holds. The launcher takes it by the same
        atomic rename a start takes it with, so this never touches a request
        a start is using (deleting it file by file could leave that start a
        request without its digest: see :mod:`._e2b_launcher`)."""
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
    ) -> Any:
        """Run the shell ``line`` as root in ``box``, ended after ``seconds``;
        each request of it times out after ``request_timeout`` (default: the
        backend's). Returns the SDK's result; raises what the SDK raises."""
        return await sdk_call(
            box.sandbox.commands.run(
                line,
                user=_ROOT,
                timeout=seconds,
                request_timeout=self._request_timeout
                if request_timeout is None
                else request_timeout,
            )
        )
