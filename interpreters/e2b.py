"""The E2B interpreter: sandbox effects on real E2B sandboxes (DESIGN §5).

:class:`E2BBackend` is an asynchronous interpreter (``asynchronous = True``):
``await backend(effect)`` returns the effect's outcome or raises
:class:`~sandrail.core.EffectFailure`. Pinned to ``e2b>=2.63,<3`` (tested with
2.63.0 through the unmodified SDK against ``sandrail local-e2b``); the SDK is
imported lazily.

Strategy: E2B has no idempotency key for commands, so the sandbox itself is
the ledger. A small bash launcher (:mod:`._e2b_launcher`, which documents the
ledger, the claim and the epoch proof), uploaded once per sandbox and run as
``root``, claims each task under a root-only ledger, keeps the keyed request
digest and the highest fence, runs the command as ``user`` detached in its
own session under an in-sandbox deadline, and answers waits and reads in one
round trip each. Everything the model supplies (command, cwd, env) travels
as files written through the files API into that ledger; the only variables
in shell text this module composes are the validated task id, a nonce and
integers.

The proof a lost claim needs (C2) travels in the effects, not in this
backend: ``Ensure`` reports the ledger epoch the launcher last reported
(:attr:`~sandrail.core.SandboxReady.ledger_epoch`; the launcher is installed
during ``Ensure`` when this backend has not yet, and every launcher answer
reports the epoch again), the core keeps it in the (durable) ownership
record before the task's first start may leave, and every ``Start`` carries
it as ``claim_epoch``. The launcher compares it under its lock: a sandbox
without the task's claim launches only if its ledger is still of that epoch
and never logged the task. So a retry after a start that never arrived is
decisive, also after a harness restart with a durable record; a wiped
ledger never causes a second launch, neither by a retry nor by a late copy
of the first start; and concurrent duplicates carry the same epoch (the
first one's record), so they are decisive too.

Threads and event loops: every SDK call runs on one event loop owned by the
backend, on a thread of its own (:mod:`._e2b_loop`); callers on any thread
or loop await a bridged future. A backend may be shared by ports used from
many threads and loops at once. :meth:`E2BBackend.close` (or ``aclose``, or
``with``) cancels what still runs, closes what the SDK opened for it and
stops that thread; a backend left open is closed at interpreter exit.

Round trips on a warm sandbox: ``Ensure`` 0 (the lifetime is refreshed at
most every ``refresh`` seconds; on a sandbox this backend has not yet
installed its launcher in, 1 or 2 more), ``Start`` 2 (write the staged
request, run ``start``), ``Wait`` 1, ``Read`` 1. A wait brings back the
whole output of an ended command when both streams together are at most
:data:`_WAIT_PREFETCH_BYTES` (then reads of it cost no round trip; a bigger
output is left where it is, and the core reads only the two ends a result
can show). A foreground ``run_command`` whose output is that small is
therefore 3. A failed start adds one best-effort call that discards its
staged request.

Failure classification
----------------------

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

Known limits
------------

- The ledger is out of reach of ``user`` commands, not of ``root``: a
  template that gives ``user`` sudo lets a command read or delete it. A
  deleted ledger still never causes a second launch (the epoch proof), and
  the keyed digest gives a reader nothing to test guesses against; an
  output file deleted, or cut below its size at the command's end, makes
  the task's state ``unknown`` (never ``ok`` with empty or partial output;
  :mod:`._e2b_launcher`). But such a command can read the env values of
  tasks being staged or running, and root can forge a consistent ledger,
  or an output no shorter than the real one.
- Env values reach the command's environment, which other processes of
  ``user`` can read (``/proc/<pid>/environ``) while it runs: E2B runs every
  command as the same ``user``.
- Where ``user`` is root (local-e2b's userns mode), there is no separation:
  commands can read and delete the ledger; no epoch proof is accepted, so
  every missing expected claim is ``claim_lost`` (:meth:`E2BBackend.separated`
  says which sandboxes these are).
- ``Ensure`` reports the epoch the launcher last reported to this backend
  (asking would cost a round trip per call). A ledger lost where no answer
  of this backend saw it (a root command run outside it, another harness)
  leaves that epoch stale until the next answer: the next new task's first
  start is then ``claim_lost`` (``uncertain``), and as its record holds the
  stale epoch, so are its retries; a new operation key launches. Never a
  second launch, but not decisive.
- A sandbox that died is remembered only by this backend instance (a later
  ``Ensure`` for its session fails ``not_sent`` instead of creating a second
  sandbox that could relaunch its tasks; the core then answers a retry of a
  task it started ``uncertain``, never "nothing ran"); after a harness
  restart, E2B's create idempotency key and a durable ownership record are
  the guards. One answer that the sandbox is gone (a 502 "not found") is
  checked again with the control plane on the next call (a reconnect),
  never believed for good: a proxy's 502 is not a death.
- A process that starts a session of its own (``setsid``) leaves the
  command's process group and session, so stop and the deadline cannot reach
  it; processes that only change their process group are reached through the
  session.
- The control plane retries 502/503/504 itself; a create whose first try was
  answered 504 after it acted and whose retry could not connect is reported
  ``not_sent`` though a sandbox exists (found again by its key and metadata).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import hmac
import importlib
import os
import re
import secrets
import socket
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final, TypeVar, overload

import attrs

from sandrail.core._effects import (
    Cancel,
    CancelRequested,
    CommandState,
    Delivery,
    Effect,
    EffectFailure,
    Ensure,
    Inspect,
    Outcome,
    OutputChunk,
    Publish,
    Published,
    Read,
    SandboxReady,
    SandboxState,
    Start,
    Started,
    StartRefused,
    Wait,
)

from ._e2b_answers import (
    Malformed,
    RawRead,
    chunk_of,
    parse_cancel,
    parse_init,
    parse_read,
    parse_start,
)
from ._e2b_launcher import LAUNCHER, LAUNCHER_NAME, LEDGER
from ._e2b_loop import LoopClosedError, LoopThread

__all__ = ["FAILURE_TABLE", "E2BBackend", "FailureRule", "classify_failure"]

T = TypeVar("T")

_BIN: Final = f"{LEDGER}/bin"
_INBOX: Final = f"{LEDGER}/inbox"
_ROOT: Final = "root"
_TASK_ID = re.compile(r"[0-9a-f]{64}")
_SANDBOX_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SNIPPET_PATH = re.compile(r"/tmp/sandrail/code/([0-9a-f]{64})\.([a-z]{1,8})")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED_ENV_PREFIX: Final = "__sandrail"
"""The launcher's own shell variables (it exports the env with them)."""
_LAUNCHER_REFUSED: Final = 3
_MIN_READ_BYTES: Final = 4
_READ_CAP_BYTES: Final = 4 * 1024 * 1024
"""At most this much of each stream per round trip; a bigger read returns
less and says ``more`` (the core reads on by cursor)."""
_WAIT_PREFETCH_BYTES: Final = 32 * 1024
"""A wait brings back both streams whole when together they are at most
this big (an output that fits the default budget of 24,000 bytes, read
later without a round trip), and nothing but their sizes otherwise: a big
output moves only the two ends the core reads (issue 10: ≤ 2 × the budget
for 16 MiB)."""
_CACHED_TASKS: Final = 64
_ARG_LIMIT: Final = 131_072
"""Linux refuses to exec with one argument or environment string this long
(MAX_ARG_STRLEN)."""
_CHECK_BYTES: Final = 16_384
"""A start with a cwd, or whose argument and env are this big, waits in
the launcher until its command began or could not (``refused
not_started``): see :mod:`._e2b_launcher`. Others answer at once."""
_LIFETIME_MARGIN_SECONDS: Final = 60
_CANCEL_GRACE_SECONDS: Final = 5
_DISCARD_TIMEOUT_SECONDS: Final = 5.0
_DRAIN_SECONDS: Final = 0.05
"""How long a closing backend's loop keeps running after its last SDK call,
so callbacks the SDK's transport (pyqwest, on its own Rust threads) still
delivers to it land while the interpreter is alive (issue 9, item 13)."""
_KEY_LABEL: Final = b"sandrail ledger key v1"
_EPOCH = re.compile(r"[0-9a-f]{32}")
_NO_EPOCH: Final = "-"
"""Sent for a claim epoch that is no launcher's: it never matches."""


# ---------------------------------------------------------------------------
# Failure classification


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


def _sdk_types(*names: str) -> tuple[type[BaseException], ...]:
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
        return isinstance(top, _sdk_types(*names))

    return matches


def _connect_failed(_top: BaseException, chain: tuple[BaseException, ...]) -> bool:
    connect = _sdk_types("httpx.ConnectError", "httpx.ConnectTimeout")
    return any(
        isinstance(link, (ConnectionRefusedError, socket.gaierror, *connect))
        or type(link) is ConnectionError
        for link in chain
    )


def _dropped(_top: BaseException, chain: tuple[BaseException, ...]) -> bool:
    dropped: tuple[type[BaseException], ...] = (
        ConnectionResetError,
        BrokenPipeError,
        *_sdk_types(
            "httpx.ReadError",
            "httpx.WriteError",
            "httpx.RemoteProtocolError",
            "pyqwest.ReadError",
            "pyqwest.WriteError",
            "pyqwest.RemoteProtocolError",
        ),
    )
    return any(isinstance(link, dropped) for link in chain)


def _exit_code(top: BaseException) -> int | None:
    if not isinstance(top, _sdk_types("e2b.CommandExitException")):
        return None
    code = getattr(top, "exit_code", None)
    return code if isinstance(code, int) else None


def _launcher_refused(top: BaseException, _chain: tuple[BaseException, ...]) -> bool:
    stdout = getattr(top, "stdout", None)
    return (
        _exit_code(top) == _LAUNCHER_REFUSED
        and isinstance(stdout, str)
        and stdout.startswith("sandrail-error ")
    )


def _launcher_missing(top: BaseException, _chain: tuple[BaseException, ...]) -> bool:
    return _exit_code(top) in (126, 127)


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
        matches=_launcher_refused,
    ),
    FailureRule(name="launcher missing", delivery=Delivery.NOT_SENT, matches=_launcher_missing),
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
            top, (TimeoutError, *_sdk_types("e2b.TimeoutException", "httpx.TimeoutException"))
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


def _failure(exc: BaseException, what: str) -> EffectFailure:
    delivery, row = classify_failure(exc)
    # Name the exception type only: SDK messages can echo request contents.
    # The launcher's own refusals are fixed words, safe to repeat.
    if _launcher_refused(exc, ()):
        row = str(getattr(exc, "stdout", "")).strip()
    return EffectFailure(delivery, f"{what}: {row} ({type(exc).__name__})")


class _SdkCancelled(Exception):
    """The SDK raised ``CancelledError`` although nobody cancelled sandrail's
    task: it gave up on a request of its own. Carried as an ordinary
    exception so it is classified like any other failure."""


async def _sdk(call: Coroutine[Any, Any, T]) -> T:
    """Await one SDK call. A ``CancelledError`` that is not a cancellation
    of the calling task becomes :class:`_SdkCancelled` (chained)."""
    try:
        return await call
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise _SdkCancelled("the SDK cancelled its own request") from exc


def _classify(exc: BaseException, what: str) -> EffectFailure:
    if isinstance(exc, _SdkCancelled) and exc.__cause__ is not None:
        return _failure(exc.__cause__, what)
    return _failure(exc, what)


# ---------------------------------------------------------------------------
# The backend


@attrs.define
class _Sandbox:
    sandbox: Any
    refreshed_at: float
    installed: bool = False
    epoch: str | None = None
    """The ledger epoch last reported by the launcher (``None``: unknown)."""
    separated: bool = True
    """Whether ``user`` is another uid than root in this sandbox."""


_OPEN: weakref.WeakSet[E2BBackend] = weakref.WeakSet()


@atexit.register
def _close_open_backends() -> None:
    for backend in list(_OPEN):
        backend.close()


class E2BBackend:
    """Sandbox effects on E2B (see the module doc for the strategy, the
    threading rule and the failure table).

    - ``api_key``: passed to every SDK call (``None``: the SDK reads
      ``E2B_API_KEY``). ``api_url``, ``sandbox_url``: where the control
      plane and envd are (``None``: the SDK reads ``E2B_API_URL`` and
      ``E2B_SANDBOX_URL``, else E2B's cloud); a local server
      (``sandrail local-e2b``) gives both.
    - ``ledger_key``: the key of the request digests kept in sandboxes (an
      HMAC key the sandbox never sees). Default: derived from the API key,
      so every harness of one E2B account agrees on it. Change it and
      retries of tasks launched before are refused as conflicts.
    - ``template``, ``allow_internet_access``: for sandboxes this backend
      creates.
    - ``sandbox_timeout_seconds``: the sandbox lifetime, refreshed by
      ``Ensure`` at most every ``min(300, lifetime // 4)`` seconds. A
      command's in-sandbox deadline is capped below what is left of it
      (:attr:`max_command_seconds`), so a command never outlives its sandbox
      unobserved.
    - ``request_timeout_seconds``: the explicit timeout of every SDK call
      (waits add their own duration).

    Bad settings raise ``TypeError``/``ValueError`` at once.
    """

    asynchronous = True
    backend_label = "e2b"
    """What this backend is (see :attr:`Simulator.backend_label
    <sandrail.interpreters.simulator.Simulator.backend_label>`)."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        template: str = "base",
        sandbox_timeout_seconds: int = 3600,
        allow_internet_access: bool = False,
        request_timeout_seconds: float = 30,
        api_url: str | None = None,
        sandbox_url: str | None = None,
        ledger_key: str | bytes | None = None,
    ) -> None:
        if isinstance(sandbox_timeout_seconds, bool) or not isinstance(
            sandbox_timeout_seconds, int
        ):
            raise TypeError("sandbox_timeout_seconds must be an integer")
        if not 300 <= sandbox_timeout_seconds <= 86_400:
            raise ValueError("sandbox_timeout_seconds must be from 300 to 86400")
        if (
            isinstance(request_timeout_seconds, bool)
            or not isinstance(request_timeout_seconds, int | float)
            or not (0 < request_timeout_seconds <= 600)
        ):
            raise ValueError("request_timeout_seconds must be a number from 0 (excluded) to 600")
        if not isinstance(template, str) or not template:
            raise ValueError("template must be a non-empty string")
        for name, value in (
            ("api_key", api_key),
            ("api_url", api_url),
            ("sandbox_url", sandbox_url),
        ):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string or None")
        if ledger_key is not None and (
            not isinstance(ledger_key, str | bytes) or len(ledger_key) < 16
        ):
            raise ValueError("ledger_key must be a string or bytes of at least 16 characters")
        self._api_key = api_key
        self._api_url = api_url
        self._sandbox_url = sandbox_url
        self._key: bytes | None = (
            ledger_key.encode("utf-8", "surrogatepass")
            if isinstance(ledger_key, str)
            else ledger_key
        )
        self._template = template
        self._lifetime = sandbox_timeout_seconds
        self._refresh_every = min(300, sandbox_timeout_seconds // 4)
        self._allow_internet = bool(allow_internet_access)
        self._request_timeout = float(request_timeout_seconds)
        self._loop = LoopThread("sandrail-e2b")
        # Everything below is touched only on the backend's own loop.
        self._sdk_module: Any = None
        self._sandboxes: dict[str, _Sandbox] = {}
        self._sessions: dict[tuple[str, str], str] = {}
        self._dead: set[str] = set()
        self._final: OrderedDict[tuple[str, str], RawRead] = OrderedDict()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        _OPEN.add(self)

    @property
    def max_command_seconds(self) -> int:
        """The longest in-sandbox deadline a command gets."""
        return self._lifetime - self._refresh_every - _LIFETIME_MARGIN_SECONDS

    def separated(self, sandbox_id: str) -> bool | None:
        """Whether ``user`` commands in ``sandbox_id`` are another uid than
        the launcher's root (``None``: this backend has not installed its
        launcher there). ``False`` means commands can reach the ledger, and
        missing expected claims are always ``claim_lost``."""
        box = self._sandboxes.get(sandbox_id)
        return None if box is None or not box.installed else box.separated

    # -- lifetime --------------------------------------------------------------

    def close(self) -> None:
        """Cancel calls still running (they fail ``maybe_sent``), close what
        the SDK opened for this backend and stop its thread. Idempotent;
        later calls fail ``not_sent``. Must not be called from a coroutine
        running on the backend's own loop."""
        if self._loop.closed:
            return
        _OPEN.discard(self)
        with contextlib.suppress(LoopClosedError, TimeoutError):
            self._loop.call(self._release, timeout=10 + self._request_timeout)
        self._loop.stop()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the calling event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> E2BBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> E2BBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _release(self) -> None:
        me = asyncio.current_task()
        running = [task for task in asyncio.all_tasks() if task is not me]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for box in self._sandboxes.values():
            client = getattr(box.sandbox, "_envd_api", None)
            close = getattr(client, "aclose", None)
            if callable(close):
                # Best effort: the loop stops anyway.
                with contextlib.suppress(Exception):
                    await close()
        self._sandboxes.clear()
        await asyncio.sleep(_DRAIN_SECONDS)

    # -- plumbing --------------------------------------------------------------

    @property
    def _sdk(self) -> Any:
        if self._sdk_module is None:
            try:
                self._sdk_module = importlib.import_module("e2b")
            except ImportError:
                raise EffectFailure(
                    Delivery.NOT_SENT,
                    "the e2b SDK is not installed: pip install 'sandrail[e2b]'",
                ) from None
        return self._sdk_module

    def _api(self, **extra: Any) -> dict[str, Any]:
        """Keyword arguments every control-plane call carries."""
        options: dict[str, Any] = {"request_timeout": self._request_timeout, **extra}
        for name, value in (
            ("api_key", self._api_key),
            ("api_url", self._api_url),
            ("sandbox_url", self._sandbox_url),
        ):
            if value is not None:
                options[name] = value
        return options

    def _ledger_key(self) -> bytes:
        if self._key is None:
            api_key = self._api_key or os.environ.get("E2B_API_KEY", "")
            if not api_key:
                raise EffectFailure(
                    Delivery.NOT_SENT,
                    "no ledger key: pass api_key= or ledger_key=, or set E2B_API_KEY",
                )
            self._key = hmac.new(api_key.encode(), _KEY_LABEL, hashlib.sha256).digest()
        return self._key

    def _lock(self, key: tuple[str, str]) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _known(self, sandbox_id: str) -> _Sandbox | None:
        if not isinstance(sandbox_id, str) or not _SANDBOX_ID.fullmatch(sandbox_id):
            raise EffectFailure(Delivery.NOT_SENT, "the sandbox id is malformed")
        if sandbox_id in self._dead:
            # Seen gone once: ask the control plane again (connect) rather
            # than believe one answer forever; a proxy's 502 is not a death.
            return None
        return self._sandboxes.get(sandbox_id)

    async def _box(self, sandbox_id: str) -> _Sandbox:
        """The connected sandbox ``sandbox_id`` (connecting, without a lifetime
        change, if this backend has not seen it yet). Failures are not_sent."""
        box = self._known(sandbox_id)
        if box is not None:
            return box
        try:
            sandbox = await _sdk(self._sdk.AsyncSandbox.connect(sandbox_id, **self._api()))
        except Exception as exc:
            self._note_gone(sandbox_id, exc)
            raise EffectFailure(
                Delivery.NOT_SENT, f"could not connect to sandbox {sandbox_id}"
            ) from exc
        self._dead.discard(sandbox_id)
        box = self._sandboxes.get(sandbox_id)
        if box is None:
            box = self._sandboxes[sandbox_id] = _Sandbox(
                sandbox=sandbox, refreshed_at=time.monotonic()
            )
        return box

    def _note_gone(self, sandbox_id: str, exc: BaseException) -> None:
        gone = _sdk_types(
            "e2b.SandboxNotFoundException", "e2b.exceptions.SandboxNotRunningException"
        )
        if isinstance(exc, gone):
            self._dead.add(sandbox_id)
            self._sandboxes.pop(sandbox_id, None)

    async def _run(self, box: _Sandbox, args: str, *, seconds: float = 0) -> str:
        """Run the launcher as root with ``args`` (task ids, nonces and
        integers only) and return its stdout. Raises what the SDK raises."""
        # ``exec``: E2B runs the line in a login shell, which bash never
        # replaces by its last command itself; one process fewer to end
        # before the answer (a wait's answer is on the exit-to-result path).
        result = await _sdk(
            box.sandbox.commands.run(
                f"exec bash {_BIN}/{LAUNCHER_NAME} {args}",
                user=_ROOT,
                timeout=seconds + self._request_timeout,
                request_timeout=self._request_timeout,
            )
        )
        stdout = result.stdout
        if not isinstance(stdout, str):
            raise Malformed("no stdout")
        return stdout

    async def _install(self, box: _Sandbox, *, fresh: bool) -> None:
        """Install the launcher and learn the ledger's epoch (``init``).
        ``fresh``: the sandbox was just created (write the launcher at once);
        otherwise try the copy a former harness may have left first (one
        round trip), writing it only when it is missing. Raises what the SDK
        raises; nothing here can launch a task."""
        answer: Any = None
        if not fresh:
            try:
                answer = await _sdk(
                    box.sandbox.commands.run(
                        f"bash {_BIN}/{LAUNCHER_NAME} init {LAUNCHER_NAME}",
                        user=_ROOT,
                        timeout=2 * self._request_timeout,
                        request_timeout=self._request_timeout,
                    )
                )
            except Exception as exc:
                if not _launcher_missing(exc, ()):
                    raise
        if answer is None:
            staged = f"{_BIN}/.{LAUNCHER_NAME}.{secrets.randbits(59)}"
            await _sdk(
                box.sandbox.files.write_files(
                    [{"path": staged, "data": LAUNCHER}],
                    user=_ROOT,
                    request_timeout=self._request_timeout,
                )
            )
            answer = await _sdk(
                box.sandbox.commands.run(
                    f"bash {staged} init {LAUNCHER_NAME}",
                    user=_ROOT,
                    timeout=2 * self._request_timeout,
                    request_timeout=self._request_timeout,
                )
            )
        init = parse_init(str(answer.stdout))
        box.installed, box.epoch, box.separated = True, init.epoch, init.separated

    async def _prepare(self, box: _Sandbox, files: list[dict[str, str | bytes]]) -> None:
        """Install the launcher if needed, then stage ``files`` (as root).
        A request is staged only into a ledger the launcher has made private
        (installed first: the files API makes directories 0755). Nothing here
        can launch a task, so every failure is not_sent."""
        try:
            if not box.installed:
                await self._install(box, fresh=False)
            if files:
                await _sdk(
                    box.sandbox.files.write_files(
                        files, user=_ROOT, request_timeout=self._request_timeout
                    )
                )
        except Exception as exc:
            self._note_gone(box.sandbox.sandbox_id, exc)
            detail = getattr(exc, "stdout", "") if _launcher_refused(exc, ()) else ""
            what = str(detail).strip() or type(exc).__name__
            raise EffectFailure(Delivery.NOT_SENT, f"staging failed ({what}); nothing ran") from exc

    async def _decisive(self, box: _Sandbox, args: str, what: str, *, seconds: float = 0) -> str:
        try:
            return await self._run(box, args, seconds=seconds)
        except Malformed as exc:
            raise EffectFailure(Delivery.MAYBE_SENT, f"{what}: malformed answer") from exc
        except Exception as exc:
            self._note_gone(box.sandbox.sandbox_id, exc)
            if _launcher_missing(exc, ()):
                box.installed = False
            raise _classify(exc, what) from exc

    async def _discard(self, box: _Sandbox, task_id: str, nonce: int) -> None:
        """Discard a staged request whose decisive call failed (best effort),
        and with it any env value it holds. The launcher takes it by the same
        atomic rename a start takes it with, so this never touches a request
        a start is using (deleting it file by file could leave that start a
        request without its digest: see :mod:`._e2b_launcher`)."""
        # What this cannot discard, the launcher's sweep deletes later.
        with contextlib.suppress(Exception):
            await _sdk(
                box.sandbox.commands.run(
                    f"bash {_BIN}/{LAUNCHER_NAME} discard {task_id} {nonce}",
                    user=_ROOT,
                    timeout=min(self._request_timeout, _DISCARD_TIMEOUT_SECONDS),
                    request_timeout=min(self._request_timeout, _DISCARD_TIMEOUT_SECONDS),
                )
            )

    def _heard(self, box: _Sandbox, epoch: str | None) -> None:
        """The launcher reported ``epoch`` in an answer: the one ``Ensure``
        reports from now on. An answer without a readable epoch changes
        nothing (an epoch that no longer holds only makes starts
        ``claim_lost``, never a second launch)."""
        if epoch is not None:
            box.epoch = epoch

    # -- the interpreter ---------------------------------------------------------

    async def __call__(self, effect: Effect) -> Outcome:
        """Answer one sandbox effect or raise :class:`EffectFailure`."""
        if self._loop.closed:
            raise EffectFailure(Delivery.NOT_SENT, "the E2B backend is closed")
        if isinstance(effect, Wait | Read):
            # An ended command's whole output is known: no hop to the loop.
            cached = self._cached(effect)
            if cached is not None:
                return cached
        try:
            return await self._loop.run(lambda: self._interpret(effect))
        except LoopClosedError:
            if isinstance(effect, Inspect | Wait | Read):
                delivery = Delivery.NOT_SENT
            else:
                delivery = Delivery.MAYBE_SENT
            raise EffectFailure(delivery, "the E2B backend was closed during the call") from None

    async def _interpret(self, effect: Effect) -> Outcome:
        try:
            match effect:
                case Inspect():
                    return await self._inspect(effect)
                case Ensure():
                    return await self._ensure(effect)
                case Publish():
                    return await self._publish(effect)
                case Start():
                    return await self._start(effect)
                case Wait():
                    return await self._wait(effect)
                case Read():
                    return await self._read(effect)
                case Cancel():
                    return await self._cancel(effect)
                case _:
                    raise TypeError(f"not a sandbox effect: {type(effect).__name__}")
        except (Malformed, ValueError, IndexError) as exc:
            delivery = Delivery.NOT_SENT if isinstance(effect, Inspect) else Delivery.MAYBE_SENT
            raise EffectFailure(delivery, f"{type(effect).__name__}: malformed answer") from exc

    # -- sandboxes -------------------------------------------------------------

    def _metadata(self, session_id: str, owner_key: str) -> dict[str, str]:
        session = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return {"sandrail_session": session, "sandrail_owner": owner_key}

    async def _find(self, metadata: Mapping[str, str]) -> str | None:
        """The oldest live sandbox with this metadata. Raises what the SDK raises."""
        sdk = self._sdk
        paginator = sdk.AsyncSandbox.list(
            query=sdk.SandboxQuery(metadata=dict(metadata)), **self._api()
        )
        found: list[Any] = []
        while paginator.has_next:
            found.extend(await _sdk(paginator.next_items()))
        live = [
            info
            for info in found
            if str(getattr(info.state, "value", info.state)) in ("running", "paused")
        ]
        if not live:
            return None
        live.sort(key=lambda info: (str(getattr(info, "started_at", "")), info.sandbox_id))
        sandbox_id: str = live[0].sandbox_id
        return sandbox_id

    async def _inspect(self, effect: Inspect) -> SandboxState:
        key = (effect.session_id, effect.owner_key)
        known = self._sessions.get(key)
        try:
            sandbox_id = await self._find(self._metadata(*key))
        except Exception as exc:
            raise EffectFailure(
                Delivery.NOT_SENT, f"Inspect: could not list sandboxes ({type(exc).__name__})"
            ) from exc
        if sandbox_id is None:
            if known is not None:
                return SandboxState(sandbox_id=known, phase="closed")
            return SandboxState(sandbox_id=None, phase="absent")
        return SandboxState(sandbox_id=sandbox_id, phase="ready")

    async def _ensure(self, effect: Ensure) -> SandboxReady:
        key = (effect.session_id, effect.owner_key)
        async with self._lock(key):
            known = self._sessions.get(key)
            if known is not None:
                box = await self._box(known)
                await self._refresh(box)
                if not box.installed:
                    await self._ready(box, created=False)
                return SandboxReady(sandbox_id=known, ledger_epoch=box.epoch)
            metadata = self._metadata(*key)
            sandbox: Any = None
            try:
                found = await self._find(metadata)
                if found is not None:
                    sandbox = await _sdk(
                        self._sdk.AsyncSandbox.connect(found, **self._api(timeout=self._lifetime))
                    )
            except Exception as exc:
                raise EffectFailure(
                    Delivery.NOT_SENT, f"Ensure: lookup failed ({type(exc).__name__})"
                ) from exc
            created = sandbox is None
            if created:
                digest = hashlib.sha256("\0".join(key).encode("utf-8", "surrogatepass"))
                try:
                    sandbox = await _sdk(
                        self._sdk.AsyncSandbox.create(
                            template=self._template,
                            timeout=self._lifetime,
                            metadata=metadata,
                            allow_internet_access=self._allow_internet,
                            idempotency_key="sandrail-" + digest.hexdigest()[:48],
                            **self._api(),
                        )
                    )
                except Exception as exc:
                    raise _classify(exc, "Ensure: create") from exc
            sandbox_id = sandbox.sandbox_id
            if not isinstance(sandbox_id, str) or not _SANDBOX_ID.fullmatch(sandbox_id):
                raise EffectFailure(Delivery.MAYBE_SENT, "Ensure: malformed sandbox id")
            made = self._sandboxes.get(sandbox_id)
            if made is None:
                made = self._sandboxes[sandbox_id] = _Sandbox(
                    sandbox=sandbox, refreshed_at=time.monotonic()
                )
            self._sessions[key] = sandbox_id
            if not made.installed:
                await self._ready(made, created=created)
            return SandboxReady(sandbox_id=sandbox_id, ledger_epoch=made.epoch)

    async def _ready(self, box: _Sandbox, *, created: bool) -> None:
        """Install the launcher during ``Ensure``, so that it reports the
        ledger's epoch. A failure is ``not_sent`` when this ``Ensure``
        created nothing, else ``maybe_sent`` (a sandbox was made; a retry
        finds it again by its metadata)."""
        try:
            await self._install(box, fresh=created)
        except Exception as exc:
            self._note_gone(box.sandbox.sandbox_id, exc)
            delivery = Delivery.MAYBE_SENT if created else Delivery.NOT_SENT
            raise EffectFailure(
                delivery, f"Ensure: installing the launcher failed ({type(exc).__name__})"
            ) from exc

    async def _refresh(self, box: _Sandbox) -> None:
        if time.monotonic() - box.refreshed_at < self._refresh_every:
            return
        try:
            await _sdk(
                box.sandbox.set_timeout(self._lifetime, request_timeout=self._request_timeout)
            )
        except Exception as exc:
            self._note_gone(box.sandbox.sandbox_id, exc)
            raise EffectFailure(
                Delivery.NOT_SENT, f"Ensure: lifetime refresh failed ({type(exc).__name__})"
            ) from exc
        box.refreshed_at = time.monotonic()

    # -- launches --------------------------------------------------------------

    async def _staged_call(
        self,
        box: _Sandbox,
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
            await self._prepare(box, entries)
            return await self._decisive(box, args, what)
        except EffectFailure:
            if box.sandbox.sandbox_id not in self._dead:
                await self._discard(box, task_id, nonce)
            raise

    async def _publish(self, effect: Publish) -> Published | StartRefused:
        match = _SNIPPET_PATH.fullmatch(effect.path)
        if match is None or match.group(1) != effect.task_id:
            raise EffectFailure(Delivery.NOT_SENT, "Publish: the snippet path is not sandrail's")
        box = await self._box(effect.sandbox_id)
        answer = await self._staged_call(
            box,
            effect.task_id,
            [("source", _utf8(effect.source))],
            f"publish {match.group(2)}",
            "Publish",
        )
        line = answer.strip()
        if line == "published":
            return Published(path=effect.path)
        if line == "refused publish_conflict":
            return StartRefused(reason="publish_conflict")
        raise Malformed("bad publish answer")

    async def _start(self, effect: Start) -> Started | StartRefused:
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Start: the task id is malformed")
        files = self._request_files(effect)
        box = await self._box(effect.sandbox_id)
        answer = await self._staged_call(box, effect.task_id, files, "start", "Start")
        parsed = parse_start(answer, effect.task_id)
        self._heard(box, parsed.epoch)
        return parsed.outcome

    def _request_files(self, effect: Start) -> list[tuple[str, bytes]]:
        """The staged request, one field a file. Refuses (not_sent) what bash
        cannot carry exactly: NUL bytes, and env names that are not shell
        identifiers. Error details never repeat a value (C17)."""
        if "\0" in effect.command:
            raise EffectFailure(Delivery.NOT_SENT, "Start: the command contains a NUL character")
        deadline = max(1, min(effect.timeout_seconds, self.max_command_seconds))
        digest = hmac.new(
            self._ledger_key(),
            effect.request_digest.encode("utf-8", "surrogatepass"),
            hashlib.sha256,
        ).hexdigest()
        command = _utf8(effect.command)
        files: list[tuple[str, bytes]] = [
            ("digest", digest.encode()),
            ("command", command),
            ("timeout", str(deadline).encode()),
        ]
        if len(command) >= _ARG_LIMIT:
            files.append(("long", b"1"))
        if effect.fence is not None:
            files.append(("fence", _shell_int(effect.fence).encode()))
        if effect.expect_claim:
            files.append(("expect", b"1"))
        if effect.claim_epoch is not None:
            epoch = effect.claim_epoch
            valid = isinstance(epoch, str) and _EPOCH.fullmatch(epoch) is not None
            files.append(("epoch", (epoch if valid else _NO_EPOCH).encode()))
        checked = 0 if len(command) >= _ARG_LIMIT else len(command)
        if effect.cwd is not None:
            if "\0" in effect.cwd:
                raise EffectFailure(Delivery.NOT_SENT, "Start: cwd contains a NUL character")
            files.append(("cwd", _utf8(effect.cwd)))
            checked = _CHECK_BYTES
        if effect.env:
            entries = bytearray()
            for name, value in effect.env.items():
                if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                    raise EffectFailure(
                        Delivery.NOT_SENT, "Start: an env name is not a shell identifier"
                    )
                if name.startswith(_RESERVED_ENV_PREFIX):
                    raise EffectFailure(
                        Delivery.NOT_SENT,
                        f"Start: env names starting with {name[:10]} are sandrail's",
                    )
                if not isinstance(value, str) or "\0" in value:
                    raise EffectFailure(
                        Delivery.NOT_SENT, f"Start: env {name} holds a NUL character"
                    )
                entry = _utf8(f"{name}={value}")
                if len(entry) >= _ARG_LIMIT:
                    raise EffectFailure(
                        Delivery.NOT_SENT,
                        f"Start: env {name} is too long (Linux allows under 128 KiB per variable)",
                    )
                entries += entry + b"\0"
            files.append(("env", bytes(entries)))
            checked += len(entries)
        if checked >= _CHECK_BYTES:
            # The start answers once the command began or could not.
            files.append(("check", b"1"))
        return files

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
    def _cached(self, effect: Wait) -> CommandState | None: ...
    @overload
    def _cached(self, effect: Read) -> OutputChunk | None: ...
    def _cached(self, effect: Wait | Read) -> CommandState | OutputChunk | None:
        """The outcome of a wait or read of an ended command whose whole
        output this backend holds, computed here (it can no longer change),
        or ``None``. Pure: safe from any thread."""
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

    async def _wait(self, effect: Wait) -> CommandState:
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Wait: the task id is malformed")
        cached = self._cached(effect)
        if cached is not None:
            return cached
        box = await self._box(effect.sandbox_id)
        await self._prepare(box, [])
        seconds = max(0.0, float(effect.timeout_seconds))
        millis = int(seconds * 1000)
        answer = await self._decisive(
            box,
            f"wait {effect.task_id} {millis} {_WAIT_PREFETCH_BYTES}",
            "Wait",
            seconds=seconds,
        )
        raw = parse_read(answer)
        self._heard(box, raw.epoch)
        self._remember(effect.sandbox_id, effect.task_id, raw)
        return raw.state

    async def _read(self, effect: Read) -> OutputChunk:
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Read: the task id is malformed")
        if effect.max_bytes < _MIN_READ_BYTES:
            raise EffectFailure(Delivery.NOT_SENT, f"Read: max_bytes must be >= {_MIN_READ_BYTES}")
        out, err = _shell_int(effect.stdout_cursor), _shell_int(effect.stderr_cursor)
        size = min(effect.max_bytes, _READ_CAP_BYTES)
        cached = self._cached(effect)
        if cached is not None:
            return cached
        box = await self._box(effect.sandbox_id)
        await self._prepare(box, [])
        answer = await self._decisive(box, f"read {effect.task_id} {out} {err} {size}", "Read")
        raw = parse_read(answer)
        self._heard(box, raw.epoch)
        if effect.stdout_cursor == 0 and effect.stderr_cursor == 0:
            self._remember(effect.sandbox_id, effect.task_id, raw)
        return chunk_of(raw, effect.stdout_cursor, effect.stderr_cursor, size)

    async def _cancel(self, effect: Cancel) -> CancelRequested:
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Cancel: the task id is malformed")
        box = await self._box(effect.sandbox_id)
        await self._prepare(box, [])
        answer = await self._decisive(
            box, f"cancel {effect.task_id}", "Cancel", seconds=_CANCEL_GRACE_SECONDS
        )
        cancelled = parse_cancel(answer)
        self._heard(box, cancelled.epoch)
        return CancelRequested(state=cancelled.state)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise EffectFailure(Delivery.NOT_SENT, "a value is not valid Unicode text") from None


def _shell_int(value: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EffectFailure(Delivery.NOT_SENT, "a launcher argument is not a natural number")
    return str(value)
