"""A second backend, built on the launcher by importing it: the exercise of
"add a backend" (``sandrail.interpreters.launcher``).

:class:`ToyShellBackend` knows nothing of the e2b SDK. Its sandboxes are a
local-e2b server's, reached over plain HTTP with httpx: a sandbox is
created by one REST call, a line runs as ``root`` through envd's
``process.Process/Start`` (Connect's JSON streaming, written out here), and
files are written by ``POST /files``. That is the whole transport the
launcher asks for (:class:`ToyTransport`); the backend adds its own
``Inspect`` and ``Ensure``, its label and its boundary, and the
:class:`~sandrail.interpreters.launcher.Launcher` answers every other effect.

The server only provides the world (and its ground truth, through
:func:`toy_target`); nothing here is E2B's SDK.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import threading
from collections.abc import Callable
from typing import Any, Final

import httpx

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
    SandboxReady,
    SandboxState,
    Start,
    Wait,
)
from sandrail.interpreters.launcher import Box, Launcher, Malformed, Transport, launcher_missing
from sandrail.interpreters.launcher import launcher_refused as refused
from sandrail.local_e2b import LocalE2B, server_target
from sandrail.testing import Strike, Target

LABEL: Final = "toy-shell"
BOUNDARY: Final = (
    "A local-e2b sandbox reached over plain HTTP by the toy backend of sandrail's tests."
)


class ShellExit(Exception):
    """A line that exited non-zero: its status and stdout."""

    def __init__(self, status: int, stdout: str) -> None:
        super().__init__(f"exit status {status}")
        self.status, self.stdout = status, stdout


class ToyTransport:
    """The launcher's transport over plain HTTP (see the module doc). Its
    sandbox handles are ``(sandbox_id, envd access token)``."""

    def __init__(self, client: httpx.Client, sandbox_url: str) -> None:
        self._client = client
        self._url = sandbox_url.rstrip("/")

    def _headers(self, handle: tuple[str, str | None]) -> dict[str, str]:
        headers = {"E2b-Sandbox-Id": handle[0]}
        if handle[1]:
            headers["X-Access-Token"] = handle[1]
        return headers

    async def run(self, sandbox: Any, line: str, *, timeout: float, request_timeout: float) -> str:
        return await asyncio.to_thread(self._run, sandbox, line, timeout, request_timeout)

    def _run(self, handle: Any, line: str, timeout: float, request_timeout: float) -> str:
        message = json.dumps(
            {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", line]}, "stdin": False}
        ).encode()
        headers = {
            **self._headers(handle),
            "Content-Type": "application/connect+json",
            "Authorization": "Basic " + base64.b64encode(b"root:").decode(),
            "Connect-Timeout-Ms": str(int(timeout * 1000)),
        }
        body = struct.pack(">BI", 0, len(message)) + message
        stdout, status, ended = bytearray(), 0, False
        with self._client.stream(
            "POST",
            f"{self._url}/process.Process/Start",
            content=body,
            headers=headers,
            timeout=httpx.Timeout(request_timeout, read=timeout + request_timeout),
        ) as response:
            response.raise_for_status()
            for flags, data in _envelopes(response.iter_bytes()):
                payload = json.loads(data or b"{}")
                if flags & 0x02:
                    if "error" in payload:
                        raise TimeoutError(f"the line ended: {payload['error']}")
                    break
                event = payload.get("event", {})
                if "data" in event and "stdout" in event["data"]:
                    stdout += base64.b64decode(event["data"]["stdout"])
                if "end" in event:
                    status, ended = int(event["end"].get("exitCode", 0)), True
        if not ended:
            raise httpx.RemoteProtocolError("the stream ended before the line did")
        text = stdout.decode("utf-8", "surrogateescape")
        if status:
            raise ShellExit(status, text)
        return text

    async def write_files(
        self, sandbox: Any, files: list[tuple[str, bytes]], *, request_timeout: float
    ) -> None:
        await asyncio.to_thread(self._write, sandbox, files, request_timeout)

    def _write(self, handle: Any, files: list[tuple[str, bytes]], request_timeout: float) -> None:
        for path, data in files:
            response = self._client.post(
                f"{self._url}/files",
                params={"path": path, "username": "root"},
                content=data,
                headers={**self._headers(handle), "Content-Type": "application/octet-stream"},
                timeout=request_timeout,
            )
            response.raise_for_status()

    def exit_status(self, exc: BaseException) -> tuple[int, str] | None:
        return (exc.status, exc.stdout) if isinstance(exc, ShellExit) else None

    def classify(self, exc: BaseException, what: str) -> EffectFailure:
        """A toy failure table: no connection, the launcher's refusal or a
        missing launcher left nothing; anything else may have."""
        status = self.exit_status(exc)
        if isinstance(exc, httpx.ConnectError) or refused(status) or launcher_missing(status):
            return EffectFailure(Delivery.NOT_SENT, f"{what}: not sent ({type(exc).__name__})")
        return EffectFailure(Delivery.MAYBE_SENT, f"{what}: maybe sent ({type(exc).__name__})")


def _envelopes(chunks: Any) -> Any:
    """Connect's stream envelopes (flags, data) from a body's chunks."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= 5:
            flags, size = struct.unpack(">BI", buffer[:5])
            if len(buffer) < 5 + size:
                break
            yield flags, buffer[5 : 5 + size]
            buffer = buffer[5 + size :]


class ToyShellBackend:
    """Sandbox effects on local-e2b sandboxes over plain HTTP: ``Inspect``
    and ``Ensure`` its own, every other effect the launcher's."""

    asynchronous = True
    backend_label = LABEL

    def __init__(
        self,
        server: LocalE2B,
        *,
        request_timeout: float = 10.0,
        transport: Callable[[Transport], Transport] = lambda transport: transport,
    ) -> None:
        self._client = httpx.Client()
        self._api = server.api_url.rstrip("/")
        self._key = server.api_key
        self._request_timeout = request_timeout
        self._sessions: dict[tuple[str, str], Box] = {}
        self._boxes: dict[str, Box] = {}
        self._dead: set[str] = set()
        self._failed: set[str] = set()
        """Sandboxes a launcher call failed on: the next Ensure asks whether they are gone."""
        self._lock = threading.Lock()
        self._launcher = Launcher(
            transport(ToyTransport(self._client, server.sandbox_url)),
            request_timeout=request_timeout,
            box=self._box,
            ledger_key=lambda: b"toy-backend ledger key, 32 bytes",
            max_command_seconds=lambda: 3000,
            note_gone=lambda sandbox_id, exc: self._failed.add(sandbox_id),
            is_dead=self._dead.__contains__,
        )

    def close(self) -> None:
        self._client.close()

    async def _box(self, sandbox_id: str) -> Box:
        box = self._boxes.get(sandbox_id)
        if box is None or sandbox_id in self._dead:
            raise EffectFailure(Delivery.NOT_SENT, f"no sandbox {sandbox_id} in this backend")
        return box

    async def __call__(self, effect: Effect) -> Outcome:
        try:
            if isinstance(effect, Inspect):
                box = self._sessions.get((effect.session_id, effect.owner_key))
                return SandboxState(
                    sandbox_id=None if box is None else box.sandbox_id,
                    phase="absent" if box is None else "ready",
                    backend=LABEL,
                    isolated=True,
                    boundary=BOUNDARY,
                )
            if isinstance(effect, Ensure):
                return await self._ensure(effect)
            if isinstance(effect, Publish | Start | Wait | Read | Cancel):
                return await self._launcher.answer(effect)
            raise EffectFailure(Delivery.NOT_SENT, f"{type(effect).__name__}: not a sandbox effect")
        except (Malformed, ValueError, IndexError) as exc:
            raise EffectFailure(
                Delivery.MAYBE_SENT, f"{type(effect).__name__}: malformed answer"
            ) from exc

    async def _ensure(self, effect: Ensure) -> SandboxReady:
        key = (effect.session_id, effect.owner_key)
        box = self._sessions.get(key)
        if (
            box is not None
            and (box.sandbox_id in self._dead or box.sandbox_id in self._failed)
            and await asyncio.to_thread(self._gone, box.sandbox_id)
        ):
            # The session stays bound to its sandbox: a fresh one would hold
            # no claims, and the session's tasks could launch again there.
            self._dead.add(box.sandbox_id)
            raise EffectFailure(
                Delivery.NOT_SENT, f"Ensure: the session's sandbox {box.sandbox_id} is gone"
            )
        if box is None:
            try:
                made = await asyncio.to_thread(self._create)
            except httpx.HTTPError as exc:
                raise EffectFailure(Delivery.MAYBE_SENT, "Ensure: create failed") from exc
            box = Box(sandbox=made, sandbox_id=made[0])
            self._sessions[key] = self._boxes[box.sandbox_id] = box
        if not box.installed:
            try:
                await self._launcher.install(box, fresh=True)
            except Exception as exc:
                raise EffectFailure(Delivery.NOT_SENT, "Ensure: no launcher") from exc
        return SandboxReady(sandbox_id=box.sandbox_id, ledger_epoch=box.epoch, backend=LABEL)

    def _gone(self, sandbox_id: str) -> bool:
        """Whether the control plane says ``sandbox_id`` no longer exists (a
        failure to ask is no proof: the sandbox is taken as alive). Asked
        only after a launcher call failed there, not on every Ensure."""
        if sandbox_id in self._dead:
            return True
        self._failed.discard(sandbox_id)
        try:
            response = self._client.get(
                f"{self._api}/sandboxes/{sandbox_id}",
                headers={"X-API-Key": self._key},
                timeout=self._request_timeout,
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 404

    def _create(self) -> tuple[str, str | None]:
        response = self._client.post(
            f"{self._api}/v2/sandboxes",
            json={"templateID": "base", "timeout": 600},
            headers={"X-API-Key": self._key},
            timeout=self._request_timeout,
        )
        response.raise_for_status()
        body = response.json()
        return body["sandboxID"], body.get("envdAccessToken")


def toy_target(
    server: LocalE2B,
    strike: Strike | None = None,
    *,
    backend_type: type[ToyShellBackend] = ToyShellBackend,
) -> Target:
    """A :class:`sandrail.testing.Target` of a fresh :class:`ToyShellBackend`
    on ``server``: launches counted by the marks its commands send (the
    server's ground truth, as for the E2B interpreter), the kill and wipe
    controls done on the server. With ``strike``, the kit's faults strike
    its transport (the launcher's decisive calls), else in front of it.
    ``backend_type``: a subclass to test instead (a mutant the kit must catch)."""
    backend = backend_type(server) if strike is None else backend_type(server, transport=strike)

    def kill_sandbox(sandbox_id: str) -> None:  # as its provider would: through its API
        backend._client.delete(
            f"{backend._api}/sandboxes/{sandbox_id}", headers={"X-API-Key": backend._key}
        )

    return server_target(server, backend, kill_sandbox=kill_sandbox, prefix="toy")
