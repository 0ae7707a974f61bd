"""The E2B interpreter: sandbox effects on real E2B sandboxes (DESIGN §5).

:class:`E2BBackend` is an asynchronous interpreter (``asynchronous = True``):
``await backend(effect)`` returns the effect's outcome or raises
:class:`~sandrail.core.EffectFailure`. Pinned to ``e2b>=2.63,<3`` (tested with
2.63.0); the SDK is imported lazily, only when no ``sdk`` is injected.

Strategy: E2B has no idempotency key for commands, so the sandbox itself is
the ledger. A small bash launcher (:mod:`._e2b_launcher`), uploaded once per
sandbox, claims each task directory atomically, keeps the request digest and
the highest fence, runs the command detached in its own process group under
an in-sandbox deadline, and answers waits and reads in one round trip each.
Everything the model supplies (command, cwd, env) travels as files written
through the files API; the only variables in shell text this module composes
are the validated task id, a nonce and integers.

Round trips on a warm sandbox: ``Ensure`` 0 (the lifetime is refreshed at
most every ``refresh`` seconds), ``Start`` 2 (write the staged request, run
``start``), ``Wait`` 1 (it also brings back the first output chunk of an
ended command), ``Read`` 1, or 0 when the ended command's whole output came
back with the wait. A foreground ``run_command`` is therefore 3.

Known limits
------------

- The ledger lives in ``/tmp/sandrail`` inside the sandbox, owned by the same
  user as the model's commands, so a command can delete it (``rm -rf
  /tmp/*``). A port that saw a task launch sends ``expect_claim`` on a retry,
  and a sandbox without the claim then launches nothing (``claim_lost``,
  reported ``uncertain``). A harness restarted with the default in-memory
  ledger no longer knows, so there a wiped ledger can let a retry launch
  again; a durable ``resolve_owned_command`` that keeps ``launched`` closes
  that, and so would a ledger the command's user cannot write (launcher as
  root, command dropped to ``user``), which is not done yet.
- A process that starts a session of its own (``setsid``) leaves the
  command's process group and session, so stop and the deadline cannot reach
  it. Processes that only change their process group are reached through
  the session.

Failure classification
----------------------

Calls that only prepare (listing sandboxes, connecting to a known one,
uploading the launcher, staging a request file) cannot launch anything: any
failure there is ``not_sent``. For the decisive call of a side effect (create,
``start``, ``publish``, ``cancel``) and for reads, the exception and its
``__cause__``/``__context__`` chain are matched against :data:`FAILURE_TABLE`,
first row first; no row matching means ``maybe_sent``:

=================================================  ============  ==========================
exception (anywhere in the chain unless noted)     delivery      why
=================================================  ============  ==========================
``httpx.ConnectError``, ``httpx.ConnectTimeout``,  not_sent      no connection was made,
builtin ``ConnectionError`` (exactly: pyqwest's                  so no request left
connect failure), ``ConnectionRefusedError``,
``socket.gaierror``
``AuthenticationException`` (top)                  not_sent      the API refused the key
``RateLimitException`` (top)                       not_sent      refused before acting
``ServiceBusyException`` (top)                     not_sent      "nothing was changed"
``InvalidArgumentException`` (top)                 not_sent      refused before acting
``TemplateException`` (top)                        not_sent      refused before acting
``CommandExitException`` exit 3 ``sandrail-error`` not_sent      the launcher refused its
(top)                                                            arguments before any claim
``CommandExitException`` exit 126/127 (top)        not_sent      the launcher is missing
``SandboxNotFoundException``,                      maybe_sent    the sandbox vanished; the
``SandboxNotRunningException`` (top)                             request may have run first
``TimeoutException`` (read timeout, top)           maybe_sent    the request was sent
``httpx.TimeoutException``, ``TimeoutError``       maybe_sent    sent, answer not seen
``ConnectionResetError``, ``BrokenPipeError``,     maybe_sent    dropped mid-request
``httpx.ReadError`` / ``WriteError`` /
``RemoteProtocolError``
anything else                                      maybe_sent    unknown: assume it left
=================================================  ============  ==========================

The not_sent connection rows are checked over the whole chain first (the SDK
wraps a failed connect in ``SandboxUnreachableException`` or
``SandboxNotRunningException``); everything else looks at the top exception.

Known limits: a sandbox that died is remembered only by this backend
instance (a later ``Ensure`` for its session fails ``not_sent`` instead of
creating a second sandbox that could relaunch its tasks); after a harness
restart, E2B's create idempotency key is the only guard. Processes that call
``setsid`` themselves leave the command's process group and survive a stop.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import re
import secrets
import socket
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from sandrail.core._effects import (
    Cancel,
    CancelRequested,
    CommandState,
    CommandStatus,
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

from ._e2b_launcher import LAUNCHER, LAUNCHER_NAME

__all__ = ["FAILURE_TABLE", "E2BBackend", "FailureRule", "classify_failure"]

ROOT: Final = "/tmp/sandrail"
_BIN: Final = f"{ROOT}/bin"
_INBOX: Final = f"{ROOT}/inbox"
_TASK_ID = re.compile(r"[0-9a-f]{64}")
_SANDBOX_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_SNIPPET_PATH = re.compile(rf"{re.escape(ROOT)}/code/([0-9a-f]{{64}})\.([a-z]{{1,8}})")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STATUSES: Final[frozenset[str]] = frozenset(
    {"running", "exited", "timed_out", "canceled", "unknown"}
)
_LAUNCHER_REFUSED: Final = 3
_MIN_READ_BYTES: Final = 4
_READ_CAP_BYTES: Final = 4 * 1024 * 1024
"""At most this much of each stream per round trip; a bigger read returns
less and says ``more`` (the core reads on by cursor)."""
_WAIT_PREFETCH_BYTES: Final = 256 * 1024
"""A wait brings back this much of each stream; an ended command whose
output fits is read without another round trip."""
_CACHED_TASKS: Final = 64
_ENV_ENTRY_LIMIT: Final = 131_072
"""Linux refuses to exec with one environment string this long (MAX_ARG_STRLEN)."""
_LIFETIME_MARGIN_SECONDS: Final = 60
_CANCEL_GRACE_SECONDS: Final = 5


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
    """The named exception classes of ``e2b`` and ``httpx`` that are installed."""
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


def _in_chain(*names: str) -> Callable[[BaseException, tuple[BaseException, ...]], bool]:
    def matches(_top: BaseException, chain: tuple[BaseException, ...]) -> bool:
        types = _sdk_types(*names)
        return any(isinstance(link, types) for link in chain)

    return matches


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
        name="sandbox not found",
        delivery=Delivery.MAYBE_SENT,
        matches=_top("e2b.SandboxNotFoundException", "e2b.exceptions.SandboxNotRunningException"),
    ),
    FailureRule(
        name="timed out",
        delivery=Delivery.MAYBE_SENT,
        matches=lambda top, _chain: isinstance(
            top, (TimeoutError, *_sdk_types("e2b.TimeoutException", "httpx.TimeoutException"))
        ),
    ),
    FailureRule(
        name="connection dropped",
        delivery=Delivery.MAYBE_SENT,
        matches=lambda top, _chain: isinstance(
            top,
            (
                ConnectionResetError,
                BrokenPipeError,
                *_sdk_types("httpx.ReadError", "httpx.WriteError", "httpx.RemoteProtocolError"),
            ),
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


# ---------------------------------------------------------------------------
# Launcher answers


class _Malformed(Exception):
    """The launcher answered something this module cannot parse."""


def _state(words: list[str]) -> CommandState:
    if len(words) != 5 or words[0] != "state" or words[1] not in _STATUSES:
        raise _Malformed("bad state line")
    status: CommandStatus = words[1]  # type: ignore[assignment]
    code = None if words[2] == "-" else int(words[2])
    if status in ("running", "unknown"):
        code = None
    return CommandState(
        status=status, exit_code=code, stdout_bytes=int(words[3]), stderr_bytes=int(words[4])
    )


@attrs.frozen(kw_only=True)
class _Raw:
    """One read as the launcher answered it: raw bytes from the cursors."""

    state: CommandState
    stdout: bytes
    stderr: bytes
    stdout_size: int
    stderr_size: int


def _parse_read(text: str) -> _Raw:
    lines = text.split("\n")
    if len(lines) < 4:
        raise _Malformed("short read answer")
    state = _state(lines[0].split(" "))
    out = lines[1].split(" ")
    err = lines[2].split(" ")
    size = lines[3].split(" ")
    if out[0] != "out" or err[0] != "err" or size[0] != "size" or len(size) != 3:
        raise _Malformed("bad read answer")
    stdout_size, stderr_size = int(size[1]), int(size[2])
    return _Raw(
        state=attrs.evolve(state, stdout_bytes=stdout_size, stderr_bytes=stderr_size),
        stdout=base64.b64decode(out[1] if len(out) > 1 else "", validate=True),
        stderr=base64.b64decode(err[1] if len(err) > 1 else "", validate=True),
        stdout_size=stdout_size,
        stderr_size=stderr_size,
    )


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def _utf8_slice(data: bytes, cursor: int, max_bytes: int) -> tuple[str, int]:
    """Text of at most ``max_bytes`` from ``data`` (the bytes at ``cursor``
    onward, possibly a few more than ``max_bytes``), never ending inside a
    UTF-8 character; a cursor inside one moves to the next boundary. Returns
    the text and the next cursor. The text decodes the bytes exactly: bytes
    that are not UTF-8 become lone surrogates (``surrogateescape``), which the
    port's masked reads turn into U+FFFD after masking (C17 needs exact byte
    positions; see :mod:`sandrail.core._masking`)."""
    if not data:
        return "", cursor
    start = 0
    while start < min(len(data), 3) and _continuation(data[start]):
        start += 1
    end = min(start + max_bytes, len(data))
    backed = 0
    while end < len(data) and _continuation(data[end]) and backed < 3 and end > start + 1:
        end -= 1
        backed += 1
    return data[start:end].decode("utf-8", errors="surrogateescape"), cursor + end


def _chunk(raw: _Raw, stdout_cursor: int, stderr_cursor: int, max_bytes: int) -> OutputChunk:
    stdout, next_out = _utf8_slice(raw.stdout, stdout_cursor, max_bytes)
    stderr, next_err = _utf8_slice(raw.stderr, stderr_cursor, max_bytes)
    return OutputChunk(
        stdout=stdout,
        stderr=stderr,
        next_stdout_cursor=next_out,
        next_stderr_cursor=next_err,
        more=raw.stdout_size > next_out or raw.stderr_size > next_err,
        state=raw.state,
    )


def _shell_int(value: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EffectFailure(Delivery.NOT_SENT, "a launcher argument is not a natural number")
    return str(value)


# ---------------------------------------------------------------------------
# The backend


@attrs.define
class _Sandbox:
    sandbox: Any
    refreshed_at: float
    installed: bool = False


class E2BBackend:
    """Sandbox effects on E2B (see the module doc for the strategy and the
    failure table).

    - ``api_key``: passed to every SDK call (``None``: the SDK reads
      ``E2B_API_KEY``).
    - ``template``, ``allow_internet_access``: for sandboxes this backend
      creates.
    - ``sandbox_timeout_seconds``: the sandbox lifetime, refreshed by
      ``Ensure`` at most every ``min(300, lifetime // 4)`` seconds. A
      command's in-sandbox deadline is capped below what is left of it
      (:attr:`max_command_seconds`), so a command never outlives its sandbox
      unobserved.
    - ``request_timeout_seconds``: the explicit timeout of every SDK call
      (waits add their own duration).
    - ``sdk``: the module or object providing ``AsyncSandbox`` and
      ``SandboxQuery`` (a stand-in in tests); the real ``e2b`` by default.
    """

    asynchronous = True

    def __init__(
        self,
        *,
        api_key: str | None = None,
        template: str = "base",
        sandbox_timeout_seconds: int = 3600,
        allow_internet_access: bool = False,
        request_timeout_seconds: float = 30,
        sdk: Any = None,
    ) -> None:
        if isinstance(sandbox_timeout_seconds, bool) or not isinstance(
            sandbox_timeout_seconds, int
        ):
            raise TypeError("sandbox_timeout_seconds must be an integer")
        if not 300 <= sandbox_timeout_seconds <= 86_400:
            raise ValueError("sandbox_timeout_seconds must be from 300 to 86400")
        if not isinstance(request_timeout_seconds, int | float) or not (
            0 < request_timeout_seconds <= 600
        ):
            raise ValueError("request_timeout_seconds must be a number from 0 (excluded) to 600")
        if not isinstance(template, str) or not template:
            raise ValueError("template must be a non-empty string")
        self._api_key = api_key
        self._template = template
        self._lifetime = sandbox_timeout_seconds
        self._refresh_every = min(300, sandbox_timeout_seconds // 4)
        self._allow_internet = bool(allow_internet_access)
        self._request_timeout = float(request_timeout_seconds)
        self._sdk_given = sdk
        self._sandboxes: dict[str, _Sandbox] = {}
        self._sessions: dict[tuple[str, str], str] = {}
        self._dead: set[str] = set()
        self._final: OrderedDict[tuple[str, str], _Raw] = OrderedDict()
        self._locks: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, str], asyncio.Lock]
        ] = weakref.WeakKeyDictionary()

    @property
    def max_command_seconds(self) -> int:
        """The longest in-sandbox deadline a command gets."""
        return self._lifetime - self._refresh_every - _LIFETIME_MARGIN_SECONDS

    # -- plumbing --------------------------------------------------------------

    @property
    def _sdk(self) -> Any:
        if self._sdk_given is None:
            try:
                self._sdk_given = importlib.import_module("e2b")
            except ImportError:
                raise EffectFailure(
                    Delivery.NOT_SENT,
                    "the e2b SDK is not installed: pip install 'sandrail[e2b]'",
                ) from None
        return self._sdk_given

    def _api(self, **extra: Any) -> dict[str, Any]:
        """Keyword arguments every control-plane call carries."""
        options: dict[str, Any] = {"request_timeout": self._request_timeout, **extra}
        if self._api_key is not None:
            options["api_key"] = self._api_key
        return options

    def _lock(self, key: tuple[str, str]) -> asyncio.Lock:
        # asyncio locks belong to one loop; execute_sync runs a loop per call.
        per_loop = self._locks.setdefault(asyncio.get_running_loop(), {})
        return per_loop.setdefault(key, asyncio.Lock())

    def _known(self, sandbox_id: str) -> _Sandbox | None:
        if not isinstance(sandbox_id, str) or not _SANDBOX_ID.fullmatch(sandbox_id):
            raise EffectFailure(Delivery.NOT_SENT, "the sandbox id is malformed")
        if sandbox_id in self._dead:
            raise EffectFailure(Delivery.NOT_SENT, f"sandbox {sandbox_id} is gone")
        return self._sandboxes.get(sandbox_id)

    async def _box(self, sandbox_id: str) -> _Sandbox:
        """The connected sandbox ``sandbox_id`` (connecting, without a lifetime
        change, if this backend has not seen it yet). Failures are not_sent."""
        box = self._known(sandbox_id)
        if box is not None:
            return box
        try:
            sandbox = await self._sdk.AsyncSandbox.connect(sandbox_id, **self._api())
        except Exception as exc:
            self._note_gone(sandbox_id, exc)
            raise EffectFailure(
                Delivery.NOT_SENT, f"could not connect to sandbox {sandbox_id}"
            ) from exc
        box = _Sandbox(sandbox=sandbox, refreshed_at=time.monotonic())
        self._sandboxes[sandbox_id] = box
        return box

    def _note_gone(self, sandbox_id: str, exc: BaseException) -> None:
        gone = _sdk_types(
            "e2b.SandboxNotFoundException", "e2b.exceptions.SandboxNotRunningException"
        )
        if isinstance(exc, gone):
            self._dead.add(sandbox_id)
            self._sandboxes.pop(sandbox_id, None)

    async def _run(self, box: _Sandbox, args: str, *, seconds: float = 0) -> str:
        """Run the launcher with ``args`` (task ids, nonces and integers only)
        and return its stdout. Raises what the SDK raises."""
        result = await box.sandbox.commands.run(
            f"bash {_BIN}/{LAUNCHER_NAME} {args}",
            timeout=seconds + self._request_timeout,
            request_timeout=self._request_timeout,
        )
        stdout = result.stdout
        if not isinstance(stdout, str):
            raise _Malformed("no stdout")
        return stdout

    async def _prepare(self, box: _Sandbox, files: list[dict[str, str | bytes]]) -> None:
        """Install the launcher if needed and stage ``files``. Nothing here can
        launch a task, so every failure is not_sent."""
        try:
            if not box.installed:
                staged = f"{_BIN}/.{LAUNCHER_NAME}.{secrets.randbits(59)}"
                await box.sandbox.files.write_files(
                    [{"path": staged, "data": LAUNCHER}], request_timeout=self._request_timeout
                )
                await box.sandbox.commands.run(
                    f"bash {staged} init {LAUNCHER_NAME}",
                    timeout=2 * self._request_timeout,
                    request_timeout=self._request_timeout,
                )
                box.installed = True
            if files:
                await box.sandbox.files.write_files(files, request_timeout=self._request_timeout)
        except Exception as exc:
            self._note_gone(box.sandbox.sandbox_id, exc)
            raise EffectFailure(
                Delivery.NOT_SENT, f"staging failed ({type(exc).__name__}); nothing ran"
            ) from exc

    async def _decisive(self, box: _Sandbox, args: str, what: str, *, seconds: float = 0) -> str:
        try:
            return await self._run(box, args, seconds=seconds)
        except _Malformed as exc:
            raise EffectFailure(Delivery.MAYBE_SENT, f"{what}: malformed answer") from exc
        except Exception as exc:
            self._note_gone(box.sandbox.sandbox_id, exc)
            if _launcher_missing(exc, ()):
                box.installed = False
            raise _failure(exc, what) from exc

    # -- the interpreter ---------------------------------------------------------

    async def __call__(self, effect: Effect) -> Outcome:
        """Answer one sandbox effect or raise :class:`EffectFailure`."""
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
        except (_Malformed, ValueError, IndexError) as exc:
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
            found.extend(await paginator.next_items())
        live = [
            info
            for info in found
            if str(getattr(info.state, "value", info.state)) in ("running", "paused")
            and info.sandbox_id not in self._dead
        ]
        if not live:
            return None
        live.sort(key=lambda info: (str(getattr(info, "started_at", "")), info.sandbox_id))
        sandbox_id: str = live[0].sandbox_id
        return sandbox_id

    async def _inspect(self, effect: Inspect) -> SandboxState:
        key = (effect.session_id, effect.owner_key)
        known = self._sessions.get(key)
        if known is not None and known in self._dead:
            return SandboxState(sandbox_id=known, phase="closed")
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
                return SandboxReady(sandbox_id=known)
            metadata = self._metadata(*key)
            sandbox: Any = None
            try:
                found = await self._find(metadata)
                if found is not None:
                    sandbox = await self._sdk.AsyncSandbox.connect(
                        found, **self._api(timeout=self._lifetime)
                    )
            except Exception as exc:
                raise EffectFailure(
                    Delivery.NOT_SENT, f"Ensure: lookup failed ({type(exc).__name__})"
                ) from exc
            if sandbox is None:
                digest = hashlib.sha256("\0".join(key).encode("utf-8", "surrogatepass"))
                try:
                    sandbox = await self._sdk.AsyncSandbox.create(
                        template=self._template,
                        timeout=self._lifetime,
                        metadata=metadata,
                        allow_internet_access=self._allow_internet,
                        idempotency_key="sandrail-" + digest.hexdigest()[:48],
                        **self._api(),
                    )
                except Exception as exc:
                    raise _failure(exc, "Ensure: create") from exc
            sandbox_id = sandbox.sandbox_id
            if not isinstance(sandbox_id, str) or not _SANDBOX_ID.fullmatch(sandbox_id):
                raise EffectFailure(Delivery.MAYBE_SENT, "Ensure: malformed sandbox id")
            self._sandboxes[sandbox_id] = _Sandbox(sandbox=sandbox, refreshed_at=time.monotonic())
            self._sessions[key] = sandbox_id
            return SandboxReady(sandbox_id=sandbox_id)

    async def _refresh(self, box: _Sandbox) -> None:
        if time.monotonic() - box.refreshed_at < self._refresh_every:
            return
        try:
            await box.sandbox.set_timeout(self._lifetime, request_timeout=self._request_timeout)
        except Exception as exc:
            self._note_gone(box.sandbox.sandbox_id, exc)
            raise EffectFailure(
                Delivery.NOT_SENT, f"Ensure: lifetime refresh failed ({type(exc).__name__})"
            ) from exc
        box.refreshed_at = time.monotonic()

    # -- launches --------------------------------------------------------------

    async def _publish(self, effect: Publish) -> Published | StartRefused:
        match = _SNIPPET_PATH.fullmatch(effect.path)
        if match is None or match.group(1) != effect.task_id:
            raise EffectFailure(Delivery.NOT_SENT, "Publish: the snippet path is not sandrail's")
        box = await self._box(effect.sandbox_id)
        nonce = secrets.randbits(59)
        await self._prepare(
            box,
            [{"path": f"{_INBOX}/{effect.task_id}.{nonce}/source", "data": _utf8(effect.source)}],
        )
        answer = await self._decisive(
            box, f"publish {effect.task_id} {nonce} {match.group(2)}", "Publish"
        )
        line = answer.strip()
        if line == "published":
            return Published(path=effect.path)
        if line == "refused publish_conflict":
            return StartRefused(reason="publish_conflict")
        raise _Malformed("bad publish answer")

    async def _start(self, effect: Start) -> Started | StartRefused:
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Start: the task id is malformed")
        files = self._request_files(effect)
        box = await self._box(effect.sandbox_id)
        nonce = secrets.randbits(59)
        staged = f"{_INBOX}/{effect.task_id}.{nonce}"
        await self._prepare(
            box, [{"path": f"{staged}/{name}", "data": data} for name, data in files]
        )
        answer = await self._decisive(box, f"start {effect.task_id} {nonce}", "Start")
        lines = answer.strip().split("\n")
        head = lines[0].split(" ")
        reasons = ("conflict", "stale_fence", "claim_lost")
        if head[0] == "refused" and len(head) == 2 and head[1] in reasons:
            return StartRefused(reason=head[1])  # type: ignore[arg-type]
        if head[0] != "started" or len(head) != 2 or head[1] not in ("0", "1") or len(lines) < 2:
            raise _Malformed("bad start answer")
        return Started(
            task_id=effect.task_id, first_launch=head[1] == "1", state=_state(lines[1].split(" "))
        )

    def _request_files(self, effect: Start) -> list[tuple[str, bytes]]:
        """The staged request, one field a file. Refuses (not_sent) what bash
        cannot carry exactly: NUL bytes, and env names that are not shell
        identifiers. Error details never repeat a value (C17)."""
        if "\0" in effect.command:
            raise EffectFailure(Delivery.NOT_SENT, "Start: the command contains a NUL character")
        deadline = max(1, min(effect.timeout_seconds, self.max_command_seconds))
        files: list[tuple[str, bytes]] = [
            ("digest", _utf8(effect.request_digest)),
            ("command", _utf8(effect.command)),
            ("timeout", str(deadline).encode()),
        ]
        if effect.fence is not None:
            files.append(("fence", _shell_int(effect.fence).encode()))
        if effect.expect_claim:
            files.append(("expect", b"1"))
        if effect.cwd is not None:
            if "\0" in effect.cwd:
                raise EffectFailure(Delivery.NOT_SENT, "Start: cwd contains a NUL character")
            files.append(("cwd", _utf8(effect.cwd)))
        if effect.env:
            entries = bytearray()
            for name, value in effect.env.items():
                if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                    raise EffectFailure(
                        Delivery.NOT_SENT, "Start: an env name is not a shell identifier"
                    )
                if not isinstance(value, str) or "\0" in value:
                    raise EffectFailure(
                        Delivery.NOT_SENT, f"Start: env {name} holds a NUL character"
                    )
                entry = _utf8(f"{name}={value}")
                if len(entry) >= _ENV_ENTRY_LIMIT:
                    raise EffectFailure(
                        Delivery.NOT_SENT,
                        f"Start: env {name} is too long (Linux allows under 128 KiB per variable)",
                    )
                entries += entry + b"\0"
            files.append(("env", bytes(entries)))
        return files

    # -- observing -------------------------------------------------------------

    def _remember(self, sandbox_id: str, task_id: str, raw: _Raw) -> None:
        """Keep an ended command's whole output: it can no longer change."""
        ended = raw.state.status in ("exited", "timed_out", "canceled")
        whole = len(raw.stdout) == raw.stdout_size and len(raw.stderr) == raw.stderr_size
        if ended and whole:
            self._final[(sandbox_id, task_id)] = raw
            while len(self._final) > _CACHED_TASKS:
                self._final.popitem(last=False)

    async def _wait(self, effect: Wait) -> CommandState:
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Wait: the task id is malformed")
        cached = self._final.get((effect.sandbox_id, effect.task_id))
        if cached is not None:
            return cached.state
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
        raw = _parse_read(answer)
        self._remember(effect.sandbox_id, effect.task_id, raw)
        return raw.state

    async def _read(self, effect: Read) -> OutputChunk:
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Read: the task id is malformed")
        if effect.max_bytes < _MIN_READ_BYTES:
            raise EffectFailure(Delivery.NOT_SENT, f"Read: max_bytes must be >= {_MIN_READ_BYTES}")
        out, err = _shell_int(effect.stdout_cursor), _shell_int(effect.stderr_cursor)
        size = min(effect.max_bytes, _READ_CAP_BYTES)
        cached = self._final.get((effect.sandbox_id, effect.task_id))
        if cached is not None:
            raw = attrs.evolve(
                cached,
                stdout=cached.stdout[effect.stdout_cursor : effect.stdout_cursor + size + 4],
                stderr=cached.stderr[effect.stderr_cursor : effect.stderr_cursor + size + 4],
            )
            return _chunk(raw, effect.stdout_cursor, effect.stderr_cursor, size)
        box = await self._box(effect.sandbox_id)
        await self._prepare(box, [])
        answer = await self._decisive(box, f"read {effect.task_id} {out} {err} {size}", "Read")
        raw = _parse_read(answer)
        if effect.stdout_cursor == 0 and effect.stderr_cursor == 0:
            self._remember(effect.sandbox_id, effect.task_id, raw)
        return _chunk(raw, effect.stdout_cursor, effect.stderr_cursor, size)

    async def _cancel(self, effect: Cancel) -> CancelRequested:
        if not _TASK_ID.fullmatch(effect.task_id):
            raise EffectFailure(Delivery.NOT_SENT, "Cancel: the task id is malformed")
        box = await self._box(effect.sandbox_id)
        await self._prepare(box, [])
        answer = await self._decisive(
            box, f"cancel {effect.task_id}", "Cancel", seconds=_CANCEL_GRACE_SECONDS
        )
        return CancelRequested(state=_state(answer.strip().split("\n")[0].split(" ")))


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise EffectFailure(Delivery.NOT_SENT, "a value is not valid Unicode text") from None
