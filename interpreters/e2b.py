"""The E2B interpreter: sandbox effects on real E2B sandboxes.

:class:`E2BBackend` is an asynchronous interpreter (``asynchronous = True``):
``await backend(effect)`` returns the effect's outcome or raises
:class:`~sandrail.core.EffectFailure`. Pinned to ``e2b>=2.63,<3`` (tested with
2.63.0 through the unmodified SDK against ``sandrail local-e2b``); the SDK is
imported lazily.

Strategy: E2B has no idempotency key for commands, so the sandbox itself is
the ledger: the E2B interpreter is one backend of the launcher
(:mod:`sandrail.interpreters.launcher`), with the e2b SDK as its transport
(``commands.run`` and ``files.write_files`` as ``root``, and the failure table
of :mod:`._e2b_failures`). This module keeps what is E2B's own: finding and
creating the session's sandbox, its lifetime, connecting, and the thread its
SDK calls run on. The launcher (:mod:`._launcher_script`, which documents the
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
:data:`~sandrail.interpreters.launcher.WAIT_PREFETCH_BYTES` (then reads of
it cost no round trip; a bigger output is left where it is, and the core
reads only the two ends a result can show). A foreground ``run_command``
whose output is that small is therefore 3. A failed start adds one
best-effort call that discards its staged request.

Failures are classified by the one table in :mod:`._e2b_failures`
(:data:`FAILURE_TABLE`, re-exported here with :func:`classify_failure`):
calls that only prepare are ``not_sent``; a decisive call is matched
against the table's rows, and no row matching means ``maybe_sent``.

The parts live in private modules, one concern each: the failure table and
the SDK transport in ``_e2b_failures``, and the event loop every SDK call
runs on in ``_e2b_loop``; the launcher's in :mod:`sandrail.interpreters.launcher`
(the script and its protocol in ``_launcher_script``, the script itself
``_launcher.sh``, package data; the round trips that run it in
``_launcher_calls``; the files a start stages in ``_launcher_request``;
reading its answers in ``_launcher_answers``). This module is the one to
import from.

Known limits
------------

- The ledger is out of reach of ``user`` commands, not of ``root``: a
  template that gives ``user`` sudo lets a command read or delete it. A
  deleted ledger still never causes a second launch (the epoch proof), and
  the keyed digest gives a reader nothing to test guesses against; an
  output file deleted, or cut below its size at the command's end, makes
  the task's state ``unknown`` (never ``ok`` with empty or partial output;
  :mod:`._launcher_script`). But such a command can read the env values of
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
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

from sandrail.core import (
    Cancel,
    Delivery,
    Effect,
    EffectFailure,
    Ensure,
    Inspect,
    Outcome,
    Publish,
    Read,
    SandboxPhase,
    SandboxReady,
    SandboxState,
    Start,
    Wait,
)

from ._e2b_failures import (
    FAILURE_TABLE,
    E2BTransport,
    FailureRule,
    classify,
    classify_failure,
    refused_credentials,
    sdk_call,
    sdk_types,
)
from ._e2b_loop import LoopClosedError, LoopThread
from .launcher import Box, Launcher, Malformed, Transport

__all__ = ["FAILURE_TABLE", "E2BBackend", "FailureRule", "classify_failure"]

_SANDBOX_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_LIFETIME_MARGIN_SECONDS: Final = 60
_DRAIN_SECONDS: Final = 0.05
"""How long a closing backend's loop keeps running after its last SDK call,
so callbacks the SDK's transport (pyqwest, on its own Rust threads) still
delivers to it land while the interpreter is alive."""
_KEY_LABEL: Final = b"sandrail ledger key v1"


_OPEN: weakref.WeakSet[E2BBackend] = weakref.WeakSet()


@atexit.register
def _close_open_backends() -> None:
    for backend in list(_OPEN):
        backend.close()


class E2BBackend:
    """Sandbox effects on E2B (see the module doc for the strategy and the
    threading rule, and :mod:`._e2b_failures` for the failure table).

    - ``api_key``: passed to every SDK call (``None``: the SDK reads
      ``E2B_API_KEY``; with neither, ``ValueError`` at once). ``api_url``,
      ``sandbox_url``: where the control plane and envd are (``None``: the
      SDK reads ``E2B_API_URL`` and ``E2B_SANDBOX_URL``, else E2B's cloud);
      a local server (``sandrail local-e2b``) gives both.
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
    - ``wrap_transport``: for testing, a function given the E2B transport
      the launcher calls (:class:`E2BTransport`) that returns the one it is
      to call instead: the testing kit's ``strike``, so that its faults
      strike the launcher's calls through the SDK (see
      ``docs/howto/test-your-harness.md``). Default: the transport itself.

    Bad settings raise ``TypeError``/``ValueError`` at once.
    """

    asynchronous = True
    backend_label = "e2b"
    """What this backend is (see :attr:`Simulator.backend_label
    <sandrail.interpreters.simulator.Simulator.backend_label>`)."""
    boundary = "Remote E2B sandbox; the host's files are not shared with it."
    """The boundary in words, which every ``Inspect`` answer states (with
    ``isolated=True``) and ``sandbox_status`` shows."""
    sandbox_description = "a remote E2B sandbox"
    """Where the commands run, in the words every tool description ends with
    (see :attr:`Simulator.sandbox_description
    <sandrail.interpreters.simulator.Simulator.sandbox_description>`)."""

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
        wrap_transport: Callable[[Transport], Transport] | None = None,
    ) -> None:
        if wrap_transport is not None and not callable(wrap_transport):
            raise TypeError("wrap_transport must be a function from a Transport to a Transport")
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
        if api_key is None and not os.environ.get("E2B_API_KEY", "").strip():
            # Refused here, not call by call: every call would otherwise read
            # as a sandbox that could not be reached, which a retry loop
            # retries forever.
            raise ValueError(
                "E2BBackend needs an E2B API key: pass api_key=... or set E2B_API_KEY "
                "(for a local server, `sandrail local-e2b` prints the three variables "
                "to export); nothing can run without one"
            )
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
        self._sandboxes: dict[str, Box] = {}
        self._sessions: dict[tuple[str, str], str] = {}
        # Written by adopt_session from any thread (one dict store), read on the loop.
        self._adopted: dict[tuple[str, str], str] = {}
        self._dead: set[str] = set()
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        transport: Transport = E2BTransport()
        self._launcher = Launcher(
            transport if wrap_transport is None else wrap_transport(transport),
            request_timeout=self._request_timeout,
            box=self._box,
            ledger_key=self._ledger_key,
            max_command_seconds=lambda: self.max_command_seconds,
            note_gone=self._note_gone,
            is_dead=self._dead.__contains__,
        )
        _OPEN.add(self)

    @property
    def allow_internet_access(self) -> bool:
        """Whether the sandboxes this backend creates may reach the internet:
        what a port on it reports in ``sandbox_status`` (a port given another
        value is refused when it is made)."""
        return self._allow_internet

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

    def adopt_session(self, session_id: str, owner_key: str, sandbox_id: str) -> None:
        """Take ``sandbox_id`` as the sandbox of ``session_id`` (of the owner
        ``owner_key``): a durable record says the session's launches went
        there (a port hands it over before its first ``Ensure``). ``Ensure``
        then connects to it and, should it be gone, fails ``not_sent`` and
        makes no other: its tasks could relaunch in a new one, after a
        restart as within one process (``docs/explanation/limits.md``). A
        sandbox this backend already found for the session stays; a
        malformed id is ignored."""
        if (
            isinstance(sandbox_id, str)
            and _SANDBOX_ID.fullmatch(sandbox_id)
            and isinstance(session_id, str)
            and isinstance(owner_key, str)
        ):
            self._adopted.setdefault((session_id, owner_key), sandbox_id)

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

    def _known(self, sandbox_id: str) -> Box | None:
        if not isinstance(sandbox_id, str) or not _SANDBOX_ID.fullmatch(sandbox_id):
            raise EffectFailure(Delivery.NOT_SENT, "the sandbox id is malformed")
        if sandbox_id in self._dead:
            # Seen gone once: ask the control plane again (connect) rather
            # than believe one answer forever; a proxy's 502 is not a death.
            return None
        return self._sandboxes.get(sandbox_id)

    async def _box(self, sandbox_id: str) -> Box:
        """The connected sandbox ``sandbox_id`` (connecting, without a lifetime
        change, if this backend has not seen it yet). Failures are not_sent."""
        box = self._known(sandbox_id)
        if box is not None:
            return box
        try:
            sandbox = await sdk_call(self._sdk.AsyncSandbox.connect(sandbox_id, **self._api()))
        except Exception as exc:
            self._note_gone(sandbox_id, exc)
            raise EffectFailure(
                Delivery.NOT_SENT, f"could not connect to sandbox {sandbox_id}"
            ) from exc
        self._dead.discard(sandbox_id)
        box = self._sandboxes.get(sandbox_id)
        if box is None:
            box = self._sandboxes[sandbox_id] = Box(
                sandbox=sandbox, sandbox_id=sandbox_id, refreshed_at=time.monotonic()
            )
        return box

    def _note_gone(self, sandbox_id: str, exc: BaseException) -> None:
        gone = sdk_types(
            "e2b.SandboxNotFoundException", "e2b.exceptions.SandboxNotRunningException"
        )
        if isinstance(exc, gone):
            self._dead.add(sandbox_id)
            self._sandboxes.pop(sandbox_id, None)

    # -- the interpreter ---------------------------------------------------------

    async def __call__(self, effect: Effect) -> Outcome:
        """Answer one sandbox effect or raise :class:`EffectFailure`."""
        if self._loop.closed:
            raise EffectFailure(Delivery.NOT_SENT, "the E2B backend is closed")
        if isinstance(effect, Wait | Read):
            # An ended command's whole output is known: no hop to the loop.
            cached = self._launcher.cached(effect)
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
                    return await self._launcher.publish(effect)
                case Start():
                    return await self._launcher.start(effect)
                case Wait():
                    return await self._launcher.wait(effect)
                case Read():
                    return await self._launcher.read(effect)
                case Cancel():
                    return await self._launcher.cancel(effect)
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
            found.extend(await sdk_call(paginator.next_items()))
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

    def _state(self, sandbox_id: str | None, phase: SandboxPhase) -> SandboxState:
        return SandboxState(
            sandbox_id=sandbox_id,
            phase=phase,
            backend=self.backend_label,
            isolated=True,
            boundary=self.boundary,
        )

    async def _inspect(self, effect: Inspect) -> SandboxState:
        key = (effect.session_id, effect.owner_key)
        known = self._sessions.get(key) or self._adopted.get(key)
        try:
            sandbox_id = await self._find(self._metadata(*key))
        except Exception as exc:
            raise EffectFailure(
                Delivery.NOT_SENT,
                f"Inspect: could not list sandboxes ({type(exc).__name__})",
                refused=refused_credentials(exc),
            ) from exc
        if sandbox_id is None:
            if known is not None:
                return self._state(known, "closed")
            return self._state(None, "absent")
        return self._state(sandbox_id, "ready")

    async def _ensure(self, effect: Ensure) -> SandboxReady:
        key = (effect.session_id, effect.owner_key)
        async with self._lock(key):
            known = self._sessions.get(key) or self._adopted.get(key)
            if known is not None:
                box = await self._box(known)
                self._sessions[key] = known
                await self._refresh(box)
                if not box.installed:
                    await self._ready(box, created=False)
                return SandboxReady(
                    sandbox_id=known, ledger_epoch=box.epoch, backend=self.backend_label
                )
            metadata = self._metadata(*key)
            sandbox: Any = None
            try:
                found = await self._find(metadata)
                if found is not None:
                    sandbox = await sdk_call(
                        self._sdk.AsyncSandbox.connect(found, **self._api(timeout=self._lifetime))
                    )
            except Exception as exc:
                raise EffectFailure(
                    Delivery.NOT_SENT,
                    f"Ensure: lookup failed ({type(exc).__name__})",
                    refused=refused_credentials(exc),
                ) from exc
            created = sandbox is None
            if created:
                digest = hashlib.sha256("\0".join(key).encode("utf-8", "surrogatepass"))
                try:
                    sandbox = await sdk_call(
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
                    raise classify(exc, "Ensure: create") from exc
            sandbox_id = sandbox.sandbox_id
            if not isinstance(sandbox_id, str) or not _SANDBOX_ID.fullmatch(sandbox_id):
                raise EffectFailure(Delivery.MAYBE_SENT, "Ensure: malformed sandbox id")
            made = self._sandboxes.get(sandbox_id)
            if made is None:
                made = self._sandboxes[sandbox_id] = Box(
                    sandbox=sandbox, sandbox_id=sandbox_id, refreshed_at=time.monotonic()
                )
            self._sessions[key] = sandbox_id
            if not made.installed:
                await self._ready(made, created=created)
            return SandboxReady(
                sandbox_id=sandbox_id, ledger_epoch=made.epoch, backend=self.backend_label
            )

    async def _ready(self, box: Box, *, created: bool) -> None:
        """Install the launcher during ``Ensure``, so that it reports the
        ledger's epoch. A failure is ``not_sent`` when this ``Ensure``
        created nothing, else ``maybe_sent`` (a sandbox was made; a retry
        finds it again by its metadata)."""
        try:
            await self._launcher.install(box, fresh=created)
        except Exception as exc:
            self._note_gone(box.sandbox_id, exc)
            delivery = Delivery.MAYBE_SENT if created else Delivery.NOT_SENT
            raise EffectFailure(
                delivery, f"Ensure: installing the launcher failed ({type(exc).__name__})"
            ) from exc

    async def _refresh(self, box: Box) -> None:
        if time.monotonic() - box.refreshed_at < self._refresh_every:
            return
        try:
            await sdk_call(
                box.sandbox.set_timeout(self._lifetime, request_timeout=self._request_timeout)
            )
        except Exception as exc:
            self._note_gone(box.sandbox_id, exc)
            raise EffectFailure(
                Delivery.NOT_SENT, f"Ensure: lifetime refresh failed ({type(exc).__name__})"
            ) from exc
        box.refreshed_at = time.monotonic()
