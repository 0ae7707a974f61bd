"""A launcher transport's own failure table, checked on a live sandbox.

The kit's faults (:class:`~sandrail.testing.FaultyTransport`) are struck
above a transport's ``classify``: a struck failure is answered as the fault
table says, so a transport whose ``classify`` calls every failure
``not_sent`` still passes every scenario and the campaign. The launcher
trusts that answer: a ``Start`` whose failure is called ``not_sent`` is
retried as if nothing had launched (C5), and a failure table that lies there
launches twice.

:func:`failure_table_problems` makes the transport fail for real, in a
sandbox it reached, in ways whose answer is known without knowing the
transport's exceptions, and asks its ``exit_status`` and ``classify``:

- the launcher refusing (exit 3, stdout ``sandrail-error ...``) and a
  missing launcher (exit 127) are ``not_sent``, with that exit status;
- a line that ran and exited non-zero is ``maybe_sent``, with its status;
- a line still running past its ``timeout`` (it left a mark first, so the
  request surely left) is ``maybe_sent``, and is no refusal. When no mark
  proves such a line started (tried with longer and longer timeouts), that
  is a problem too: the one check that matters most did not run.

What it cannot make happen portably stays the author's to test: a failure
before the request left (a refused connection, a bad credential) is the only
other ``not_sent``; calling it ``maybe_sent`` is safe, only less decisive
(see ``docs/howto/test-your-harness.md``).

:class:`ProbedTransport` runs it inside a backend's own loop, on the first
sandbox the launcher publishes or starts in (the launcher installed there);
:func:`check_transport` does so for a target factory that strikes a
transport.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from sandrail.core import Delivery, EffectFailure
from sandrail.interpreters.launcher import Transport, launcher_missing, launcher_refused

from ._commands import SECRET
from ._scenarios import SCENARIOS
from ._transport_faults import effect_of
from ._truth import Strike, Target, TargetFactory, takes_strike
from ._world import World

__all__ = ["ProbedTransport", "check_transport", "failure_table_problems"]

_PROBED_EFFECTS = ("Publish", "Start")
_HANG_ATTEMPTS = 3
"""Tries at a line that times out after it started, each timeout twice the last."""
_WHAT = "Probe"


async def failure_table_problems(
    transport: Transport, sandbox: Any, *, hang_seconds: float = 2.0
) -> list[str]:
    """What ``transport``'s ``exit_status`` and ``classify`` answer wrong for
    failures made in ``sandbox`` (its handle of a live sandbox; see the
    module doc); empty when every answer is right. Each line runs as the
    launcher's lines do, with ``hang_seconds`` bounding the one that hangs."""
    problems: list[str] = []

    async def failed(line: str, timeout: float) -> BaseException | None:
        try:
            await transport.run(sandbox, line, timeout=timeout, request_timeout=timeout)
        except Exception as exc:  # the transport's own exceptions
            return exc
        problems.append(f"`{line}` raised nothing: a line exiting non-zero must raise")
        return None

    def judged(exc: BaseException, line: str, wanted: Delivery, why: str) -> None:
        try:
            failure = transport.classify(exc, _WHAT)
        except Exception as error:
            problems.append(f"classify raised {type(error).__name__} for `{line}`")
            return
        if failure.delivery is not wanted:
            problems.append(
                f"classify said {failure.delivery.value} for `{line}` "
                f"({type(exc).__name__}): {why}, so it is {wanted.value}"
            )

    def exit_of(exc: BaseException, line: str, status: int) -> tuple[int, str] | None:
        try:
            found = transport.exit_status(exc)
        except Exception as error:
            problems.append(f"exit_status raised {type(error).__name__} for `{line}`")
            return None
        if found is None or found[0] != status:
            problems.append(f"exit_status said {found!r} for `{line}`: it exited {status}")
            return None
        return found

    step = hang_seconds * 5
    refusal = "echo 'sandrail-error probe'; exit 3"
    exc = await failed(refusal, step)
    if exc is not None:
        found = exit_of(exc, refusal, 3)
        if found is not None and not launcher_refused(found):
            problems.append(f"exit_status lost the stdout of `{refusal}`: {found[1]!r}")
        judged(exc, refusal, Delivery.NOT_SENT, "the launcher refused before claiming")
    for line, status, wanted, why in (
        ("exit 127", 127, Delivery.NOT_SENT, "a missing launcher runs nothing"),
        ("echo ran; exit 5", 5, Delivery.MAYBE_SENT, "the line ran"),
    ):
        exc = await failed(line, step)
        if exc is not None:
            exit_of(exc, line, status)
            judged(exc, line, wanted, why)
    for attempt in range(_HANG_ATTEMPTS):
        if await _timed_out_after_start(
            transport, sandbox, hang_seconds * 2**attempt, step, failed, judged, problems
        ):
            return problems
    problems.append(
        f"no line was seen to start and then time out ({_HANG_ATTEMPTS} tries, the last "
        f"with a {hang_seconds * 2 ** (_HANG_ATTEMPTS - 1):g} s timeout), so what classify "
        "says for a timeout after the request left is unchecked: give a larger hang_seconds"
    )
    return problems


async def _timed_out_after_start(
    transport: Transport,
    sandbox: Any,
    hang_seconds: float,
    step: float,
    failed: Callable[[str, float], Awaitable[BaseException | None]],
    judged: Callable[[BaseException, str, Delivery, str], None],
    problems: list[str],
) -> bool:
    """Run a line that leaves a mark, then hangs past ``hang_seconds``; judge
    the timeout's failure when the mark proves the line started. False
    when nothing proves it did (not judged: a timeout before the request
    left may rightly be ``not_sent``)."""
    mark = f"/tmp/sandrail-probe-{secrets.token_hex(8)}"
    hang = f"echo ran > {mark}; sleep {int(max(step, hang_seconds) * 3)}"
    exc = await failed(hang, hang_seconds)
    if exc is None:
        return True  # already a problem: the line raised nothing
    found_exit = transport.exit_status(exc)
    if launcher_refused(found_exit) or launcher_missing(found_exit):
        problems.append(
            f"exit_status said {found_exit!r} for a line past its timeout: "
            "the launcher would take it for its refusal or a missing launcher"
        )
    try:
        left = await transport.run(
            sandbox, f"cat {mark}; rm -f {mark}", timeout=step, request_timeout=step
        )
    except Exception:  # no proof the request left
        return False
    if left.strip() != "ran":
        return False
    judged(exc, hang, Delivery.MAYBE_SENT, "it timed out after the line had started")
    return True


class ProbedTransport:
    """``transport`` (a launcher :class:`Transport`, itself one) that runs
    :func:`failure_table_problems` once, on the first sandbox the launcher
    publishes or starts in, before that call; then passes every call
    through. :attr:`problems` holds what it found, :attr:`probed` whether
    it ran."""

    def __init__(self, transport: Transport, *, hang_seconds: float = 2.0) -> None:
        if not isinstance(transport, Transport):
            raise TypeError(
                "ProbedTransport wraps a launcher Transport (run, write_files, "
                f"exit_status, classify), not {type(transport).__name__}"
            )
        self.transport = transport
        self.hang_seconds = hang_seconds
        self.probed = False
        self.problems: list[str] = []

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        """Probe first if this is the first publish or start, then run ``line``."""
        if not self.probed and effect_of(line) in _PROBED_EFFECTS:
            self.probed = True
            self.problems = await failure_table_problems(
                self.transport, sandbox, hang_seconds=self.hang_seconds
            )
        return await self.transport.run(
            sandbox, line, timeout=timeout, request_timeout=request_timeout
        )

    async def write_files(
        self, sandbox: Any, files: list[tuple[str, bytes]], *, request_timeout: float
    ) -> None:
        """Write through the transport."""
        await self.transport.write_files(sandbox, files, request_timeout=request_timeout)

    def exit_status(self, exc: BaseException) -> tuple[int, str] | None:
        """The transport's answer."""
        return self.transport.exit_status(exc)

    def classify(self, exc: BaseException, what: str) -> EffectFailure:
        """The transport's answer."""
        return self.transport.classify(exc, what)


def check_transport(make_target: TargetFactory, *, hang_seconds: float = 2.0) -> list[str] | None:
    """The problems of the failure table of the launcher transport that
    ``make_target`` strikes (see :func:`failure_table_problems`), found by
    running one ``echo`` through a fresh target with that transport probed;
    ``None`` when the factory strikes no launcher :class:`Transport` (it
    takes no ``strike``, or strikes an interpreter)."""
    if not takes_strike(make_target):
        return None
    probes: list[ProbedTransport] = []

    def probed(strike: Strike) -> Target:
        def wrap(upstream: Any, /) -> Any:
            if isinstance(upstream, Transport):
                probe = ProbedTransport(upstream, hang_seconds=hang_seconds)
                probes.append(probe)
                return strike(probe)
            return strike(upstream)

        factory: Callable[[Strike], Target] = make_target  # type: ignore[assignment]
        return factory(wrap)

    echo = next(scenario for scenario in SCENARIOS if scenario.name == "echo")
    with World.on(probed, secrets=[SECRET]) as world:
        echo.run(world)
        world.assert_contract()
    if not probes:
        return None
    problems = [problem for probe in probes for problem in probe.problems]
    if not any(probe.probed for probe in probes):
        problems.append("the launcher never published or started through the transport")
    return problems
