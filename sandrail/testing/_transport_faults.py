"""Fault plans on a launcher transport: the same fault table, struck where a
backend built on :mod:`sandrail.interpreters.launcher` meets its sandboxes.

:class:`FaultyTransport` wraps a backend's
:class:`~sandrail.interpreters.launcher.Transport` and strikes the
``occurrence``-th decisive call of the effect a :class:`Fault` names: the
launcher line that ``Ensure`` (``init``), ``Publish``, ``Start``, ``Wait``,
``Read`` or ``Cancel`` runs. It is a :class:`~sandrail.testing.FaultyBackend`
whose "effects" are those calls (:class:`TransportCall`), so every kind does
what its row of the fault table says, as in the simulator and in front of a
backend; only where it strikes differs. File writes (staging a request,
uploading the launcher) and a failed start's ``discard`` pass through: a
failure of theirs leaves nothing launched, and the launcher already treats
it as ``not_sent``.

A struck failure is the table's :class:`~sandrail.core.EffectFailure`;
:meth:`FaultyTransport.classify` answers it as itself (the kit knows whether
the request left), and passes every other exception to the backend's own
``classify``. A ``Wait`` or ``Read`` the launcher answers from its cache makes
no call, so it is not counted.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs

from sandrail.core import EffectFailure
from sandrail.interpreters.launcher import Transport
from sandrail.interpreters.simulator import FaultPlan, SimulatedHarness

from ._faults import FaultyBackend
from ._truth import Target

__all__ = ["FaultyTransport", "TransportCall", "effect_of", "handle_id"]

_LINE = re.compile(r"(?:exec )?bash \S+ (init|publish|start|wait|read|cancel|discard)(?: |$)")
_EFFECT_OF = {
    "init": "Ensure",
    "publish": "Publish",
    "start": "Start",
    "wait": "Wait",
    "read": "Read",
    "cancel": "Cancel",
}


def effect_of(line: str) -> str | None:
    """The effect whose decisive call the launcher line ``line`` is, or
    ``None`` (a ``discard``, or not a launcher line)."""
    found = _LINE.match(line)
    return None if found is None else _EFFECT_OF.get(found.group(1))


def handle_id(handle: Any) -> str | None:
    """A transport handle's sandbox id: the handle itself if it is a
    ``str``, its ``sandbox_id`` attribute if that is one, or the first item
    of a tuple if that is one; else ``None`` (unknown)."""
    if isinstance(handle, tuple) and handle:
        handle = handle[0]
    if isinstance(handle, str):
        return handle
    found = getattr(handle, "sandbox_id", None)
    return found if isinstance(found, str) else None


@attrs.frozen
class TransportCall:
    """One decisive call of the launcher: the effect it decides, the
    sandbox (the transport's handle and its id) and the line."""

    effect: str
    sandbox: Any
    sandbox_id: str | None
    line: str
    timeout: float
    request_timeout: float


class FaultyTransport(FaultyBackend):
    """``transport`` with ``plan``'s faults struck on the launcher's decisive
    calls (see the module doc); itself a
    :class:`~sandrail.interpreters.launcher.Transport`.

    ``sandbox_id(handle)`` names the sandbox of a transport handle (the
    :attr:`~sandrail.interpreters.launcher.Box.sandbox` the backend made;
    by default :func:`handle_id`), which ``SANDBOX_DIES`` and
    ``LEDGER_WIPED`` faults need, with the ``controls`` target's
    ``kill_sandbox`` and ``wipe_ledger``. ``harness``,
    ``hang_seconds`` and the attributes it keeps (:attr:`faults_fired`,
    :attr:`held`, :attr:`late_deliveries`, :attr:`applied`) are
    :class:`~sandrail.testing.FaultyBackend`'s.
    """

    def __init__(
        self,
        transport: Transport,
        plan: FaultPlan | None = None,
        *,
        sandbox_id: Callable[[Any], str | None] | None = None,
        controls: Target | None = None,
        harness: SimulatedHarness | None = None,
        hang_seconds: float = 30.0,
    ) -> None:
        if not isinstance(transport, Transport):
            raise TypeError(
                "FaultyTransport wraps a launcher Transport (run, write_files, "
                f"exit_status, classify), not {type(transport).__name__}"
            )
        self.transport = transport
        self._sandbox_id = handle_id if sandbox_id is None else sandbox_id
        self._struck: list[EffectFailure] = []
        super().__init__(
            self._apply, plan, controls=controls, harness=harness, hang_seconds=hang_seconds
        )

    async def _apply(self, call: TransportCall) -> str:
        return await self.transport.run(
            call.sandbox, call.line, timeout=call.timeout, request_timeout=call.request_timeout
        )

    def _effect_name(self, effect: Any) -> str:
        """A transport call is known by the effect it serves."""
        return effect.effect if isinstance(effect, TransportCall) else type(effect).__name__

    # -- the Transport ----------------------------------------------------------------

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        """Run ``line`` through the transport, striking a planned fault on
        it if it is the decisive call of an effect."""
        name = effect_of(line)
        if name is None:
            return await self.transport.run(
                sandbox, line, timeout=timeout, request_timeout=request_timeout
            )
        call = TransportCall(
            effect=name,
            sandbox=sandbox,
            sandbox_id=self._sandbox_id(sandbox),
            line=line,
            timeout=timeout,
            request_timeout=request_timeout,
        )
        try:
            # The fault table's steps, on a call in place of an effect.
            answer: str = await self._call_async(call)  # type: ignore[arg-type]
        except EffectFailure as failure:
            self._struck.append(failure)
            raise
        return answer

    async def write_files(
        self, sandbox: Any, files: list[tuple[str, bytes]], *, request_timeout: float
    ) -> None:
        """Write through the transport (never struck)."""
        await self.transport.write_files(sandbox, files, request_timeout=request_timeout)

    def exit_status(self, exc: BaseException) -> tuple[int, str] | None:
        """``None`` for a struck failure, else the transport's answer."""
        return None if self._was_struck(exc) else self.transport.exit_status(exc)

    def classify(self, exc: BaseException, what: str) -> EffectFailure:
        """A struck failure as the fault table says, else the transport's
        own failure table."""
        if isinstance(exc, EffectFailure) and self._was_struck(exc):
            return EffectFailure(exc.delivery, f"{what}: {exc.detail}", aborted=exc.aborted)
        return self.transport.classify(exc, what)

    def _was_struck(self, exc: BaseException) -> bool:
        return any(exc is failure for failure in self._struck)
