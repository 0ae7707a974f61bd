"""The E2B interpreter's failure table: what a failed SDK call says about
whether its request left (C5); and the SDK as the launcher's transport
(:class:`E2BTransport`, see :mod:`sandrail.interpreters.launcher`).

Calls that only prepare (listing sandboxes, connecting to a known one,
installing the launcher, staging a request file) cannot launch anything: any
failure there is ``not_sent``. For the decisive call of a side effect (create,
``start``, ``publish``, ``cancel``) and for reads, the exception and its
``__cause__``/``__context__`` chain are matched against :data:`FAILURE_TABLE`,
first row first; no row matching means ``maybe_sent``. Each row is proven by
a test that produces the SDK's real exception chain through local-e2b
(``tests/test_e2b_failures.py``); the chains seen are noted.

Rows, first to last (``name``: delivery; what matches; the real chains seen):

- ``connection dropped``: maybe_sent. Anywhere in the chain:
  ``httpx.ReadError``/``WriteError``/``RemoteProtocolError``,
  ``pyqwest.ReadError``/``WriteError``/``RemoteProtocolError``,
  ``ConnectionResetError``, ``BrokenPipeError``: a write or read had begun.
  An envd request dropped before it was read OR after its effect gives the
  same raw ``connectrpc.ConnectError`` ← ``pyqwest.WriteError`` (the two
  cannot be told apart); a create dropped after its effect,
  ``httpx.WriteError`` ← ``pyqwest.WriteError`` (the sandbox exists); the
  server killed mid-stream, ``SandboxUnreachableException`` ←
  ``ConnectError`` ← ``pyqwest.RemoteProtocolError``.
- ``connect failed``: not_sent. Anywhere in the chain: ``httpx.ConnectError``,
  ``httpx.ConnectTimeout``, exactly the builtin ``ConnectionError`` (pyqwest
  raises it only before writing), ``ConnectionRefusedError``,
  ``socket.gaierror``: no connection, so no request. Control plane refused:
  ``httpx.ConnectError`` ← ``ConnectionError``; envd refused:
  ``SandboxUnreachableException`` ← ``ConnectError`` ← ``ConnectionError``.
- ``refused by E2B``: not_sent. Top: ``AuthenticationException`` (a bad key:
  alone), ``RateLimitException`` (429 on envd: ← ``ConnectError``; on the
  control plane, after its own retries: alone), ``ServiceBusyException``,
  ``InvalidArgumentException``, ``TemplateException``: refused before acting.
- ``launcher refused its arguments``: not_sent. Top: ``CommandExitException``,
  exit 3, stdout ``sandrail-error ...``: the launcher refused before it
  claimed anything (a staged request that was gone, say).
- ``launcher missing``: not_sent. Top: ``CommandExitException``, exit 126 or
  127: the launcher file is gone (it is installed again next time).
- ``cancelled inside the SDK``: maybe_sent. Top: ``CancelledError`` that
  nobody cancelling sandrail's call raised: the SDK gave up on a request it
  had sent.
- ``sandbox not found``: maybe_sent. Top: ``SandboxNotFoundException``,
  ``SandboxNotRunningException``: the sandbox vanished; the request may have
  run first. A 502 "not found" and a sandbox killed mid-stream give the same
  chain, ``SandboxNotRunningException`` ← ``ConnectError``.
- ``unreachable mid-request``: maybe_sent. Top:
  ``SandboxUnreachableException`` (with no connect failure beneath): a stream
  cut after it started, with no cause at all (also from a background
  handle's ``wait()``).
- ``timed out``: maybe_sent. Top: ``TimeoutException``,
  ``httpx.TimeoutException``, ``TimeoutError``: sent, answer not seen. The
  server's command deadline: ``TimeoutException`` alone; an answer held past
  ``request_timeout``: ``TimeoutException`` ← ``ConnectError`` ←
  ``CancelledError``; a create answered late: ``httpx.ReadTimeout`` ←
  ``TimeoutError`` ← ``CancelledError`` (the sandbox exists).
- anything else: maybe_sent (``unknown``): assume it left.

The two connection rows look at the whole chain, the dropped one first: any
sign that a request was being written or answered outweighs a failed
connect beneath it. The other rows look at the top exception, in order
(``SandboxUnreachableException`` and ``SandboxNotRunningException`` are
``TimeoutException`` subclasses, so they come first). A ``CancelledError``
in a cause chain is the SDK's own timeout machinery, never taken for a
cancellation of sandrail's call.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

import attrs

from sandrail.core import Delivery, EffectFailure

from ._launcher_calls import launcher_missing as _missing
from ._launcher_calls import launcher_refused as _refused

__all__ = [
    "FAILURE_TABLE",
    "E2BTransport",
    "FailureRule",
    "classify",
    "classify_failure",
    "launcher_missing",
    "launcher_refused",
    "refused_credentials",
    "sdk_call",
    "sdk_types",
]

T = TypeVar("T")

_ROOT: Final = "root"


@attrs.frozen(kw_only=True)
class FailureRule:
    """One row of :data:`FAILURE_TABLE`."""

    name: str
    delivery: Delivery
    matches: Callable[[BaseException, tuple[BaseException, ...]], bool]
    """``matches(top, chain)``: whether the row applies."""


def _chain(exc: BaseException) -> tuple[BaseException, ...]:
    """``exc`` and its causes, as a traceback would show them."""
    links: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in links:
        links.append(current)
        if current.__cause__ is not None:
            current = current.__cause__
        elif current.__suppress_context__:
            current = None
        else:
            current = current.__context__
    return tuple(links)


def sdk_types(*names: str) -> tuple[type[BaseException], ...]:
    """The named exception classes of the SDK and its transports that are installed."""
    found: list[type[BaseException]] = []
    for name in names:
        module_name, _, attribute = name.rpartition(".")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        value = getattr(module, attribute, None)
        if isinstance(value, type) and issubclass(value, BaseException):
            found.append(value)
    return tuple(found)


def _top(*names: str) -> Callable[[BaseException, tuple[BaseException, ...]], bool]:
    def matches(top: BaseException, _chain: tuple[BaseException, ...]) -> bool:
        return isinstance(top, sdk_types(*names))

    return matches


def _connect_failed(_top: BaseException, chain: tuple[BaseException, ...]) -> bool:
    connect = sdk_types("httpx.ConnectError", "httpx.ConnectTimeout")
    return any(
        isinstance(link, (ConnectionRefusedError, socket.gaierror, *connect))
        or type(link) is ConnectionError
        for link in chain
    )


def _dropped(_top: BaseException, chain: tuple[BaseException, ...]) -> bool:
    dropped: tuple[type[BaseException], ...] = (
        ConnectionResetError,
        BrokenPipeError,
        *sdk_types(
            "httpx.ReadError",
            "httpx.WriteError",
            "httpx.RemoteProtocolError",
            "pyqwest.ReadError",
            "pyqwest.WriteError",
            "pyqwest.RemoteProtocolError",
        ),
    )
    return any(isinstance(link, dropped) for link in chain)


def exit_status(top: BaseException) -> tuple[int, str] | None:
    """``(exit status, stdout)`` of a command the SDK says exited non-zero
    (``CommandExitException``), else ``None``."""
    if not isinstance(top, sdk_types("e2b.CommandExitException")):
        return None
    code = getattr(top, "exit_code", None)
    stdout = getattr(top, "stdout", None)
    return (code, stdout if isinstance(stdout, str) else "") if isinstance(code, int) else None


def launcher_refused(top: BaseException, _chain: tuple[BaseException, ...]) -> bool:
    """Whether ``top`` is the launcher refusing its arguments (exit 3,
    ``sandrail-error ...``): it touched no claim."""
    return _refused(exit_status(top))


def launcher_missing(top: BaseException, _chain: tuple[BaseException, ...]) -> bool:
    """Whether ``top`` says the launcher file is gone (exit 126 or 127)."""
    return _missing(exit_status(top))


FAILURE_TABLE: Final[tuple[FailureRule, ...]] = (
    FailureRule(name="connection dropped", delivery=Delivery.MAYBE_SENT, matches=_dropped),
    FailureRule(name="connect failed", delivery=Delivery.NOT_SENT, matches=_connect_failed),
    FailureRule(
        name="refused by E2B",
        delivery=Delivery.NOT_SENT,
        matches=_top(
            "e2b.AuthenticationException",
            "e2b.RateLimitException",
            "e2b.exceptions.ServiceBusyException",
            "e2b.InvalidArgumentException",
            "e2b.TemplateException",
        ),
    ),
    FailureRule(
        name="launcher refused its arguments",
        delivery=Delivery.NOT_SENT,
        matches=launcher_refused,
    ),
    FailureRule(name="launcher missing", delivery=Delivery.NOT_SENT, matches=launcher_missing),
    FailureRule(
        name="cancelled inside the SDK",
        delivery=Delivery.MAYBE_SENT,
        matches=lambda top, _chain: isinstance(top, asyncio.CancelledError),
    ),
    FailureRule(
        name="sandbox not found",
        delivery=Delivery.MAYBE_SENT,
        matches=_top("e2b.SandboxNotFoundException", "e2b.exceptions.SandboxNotRunningException"),
    ),
    FailureRule(
        name="unreachable mid-request",
        delivery=Delivery.MAYBE_SENT,
        matches=_top("e2b.exceptions.SandboxUnreachableException"),
    ),
    FailureRule(
        name="timed out",
        delivery=Delivery.MAYBE_SENT,
        matches=lambda top, _chain: isinstance(
            top, (TimeoutError, *sdk_types("e2b.TimeoutException", "httpx.TimeoutException"))
        ),
    ),
)
"""The one table from SDK and transport exceptions to a delivery (see the
module doc). First matching row wins; no match is ``maybe_sent``."""


def classify_failure(exc: BaseException) -> tuple[Delivery, str]:
    """The delivery of a failed decisive call and the name of the row that
    decided it (``"unknown"`` when none did)."""
    chain = _chain(exc)
    for rule in FAILURE_TABLE:
        if rule.matches(exc, chain):
            return rule.delivery, rule.name
    return Delivery.MAYBE_SENT, "unknown"


def refused_credentials(exc: BaseException) -> bool:
    """Whether ``exc`` is E2B refusing the API key (``AuthenticationException``,
    a 401): a refusal no retry gets past, unlike a 429 or a busy service."""
    return isinstance(exc, sdk_types("e2b.AuthenticationException"))


def _failure(exc: BaseException, what: str) -> EffectFailure:
    delivery, row = classify_failure(exc)
    # Name the exception type only: SDK messages can echo request contents.
    # The launcher's own refusals are fixed words, safe to repeat.
    if launcher_refused(exc, ()):
        row = str(getattr(exc, "stdout", "")).strip()
    return EffectFailure(
        delivery,
        f"{what}: {row} ({type(exc).__name__})",
        refused=delivery is Delivery.NOT_SENT and refused_credentials(exc),
    )


class _SdkCancelled(Exception):
    """The SDK raised ``CancelledError`` although nobody cancelled sandrail's
    task: it gave up on a request of its own. Carried as an ordinary
    exception so it is classified like any other failure."""


async def sdk_call(call: Coroutine[Any, Any, T]) -> T:
    """Await one SDK call. A ``CancelledError`` that is not a cancellation
    of the calling task becomes :class:`_SdkCancelled` (chained)."""
    try:
        return await call
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise _SdkCancelled("the SDK cancelled its own request") from exc


def classify(exc: BaseException, what: str) -> EffectFailure:
    """The :class:`EffectFailure` of a failed decisive call (``what`` names
    the effect in its detail); an :func:`sdk_call` that the SDK cancelled
    itself is classified by what it cancelled."""
    if isinstance(exc, _SdkCancelled) and exc.__cause__ is not None:
        return _failure(exc.__cause__, what)
    return _failure(exc, what)


class E2BTransport:
    """The e2b SDK as the launcher's transport: a line runs through
    ``commands.run`` and files go through ``files.write_files``, both as
    ``root``; a failed decisive call is classified by :data:`FAILURE_TABLE`.
    Its ``sandbox`` handles are the SDK's ``AsyncSandbox`` objects."""

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        result = await sdk_call(
            sandbox.commands.run(line, user=_ROOT, timeout=timeout, request_timeout=request_timeout)
        )
        stdout: str = result.stdout
        return stdout

    async def write_files(
        self, sandbox: Any, files: list[tuple[str, bytes]], *, request_timeout: float
    ) -> None:
        entries: list[dict[str, str | bytes]] = [
            {"path": path, "data": data} for path, data in files
        ]
        await sdk_call(
            sandbox.files.write_files(entries, user=_ROOT, request_timeout=request_timeout)
        )

    def exit_status(self, exc: BaseException) -> tuple[int, str] | None:
        return exit_status(exc)

    def classify(self, exc: BaseException, what: str) -> EffectFailure:
        return classify(exc, what)
