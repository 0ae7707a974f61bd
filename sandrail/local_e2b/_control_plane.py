"""The control plane: E2B's sandbox REST API (JSON over HTTP), as an ASGI app.

Every request must carry ``X-API-KEY`` equal to this server's key (401
otherwise). Routes and answers are the ones the e2b SDK parses:

=======================================  ======================================
``POST /v2/sandboxes``                   201 ``Sandbox`` (``Idempotency-Key``)
``POST /v2/sandboxes/{id}/connect``      200 ``Sandbox``; 404
``GET /v2/sandboxes``                    200 ``[ListedSandbox]``, ``x-next-token``
``GET /sandboxes/{id}``                  200 ``SandboxDetail``; 404
``DELETE /sandboxes/{id}``               204; 404
``POST /sandboxes/{id}/timeout``         204; 404
``GET /sandboxes/{id}/metrics``          200 ``[SandboxMetric]``; 404
=======================================  ======================================

Every other route of E2B's API (pause, resume, fork, snapshots, logs,
network updates, templates, volumes, secrets...) answers ``501 {"message":
"local-e2b does not support ..."}``, which the SDK raises as a
``SandboxException`` carrying that text: never a 404, which the SDK would
report as "sandbox not found" about a sandbox that runs (an operation on a
sandbox that does not exist is a 404, as on E2B).

Errors answer ``{"code": status, "message": text}``.
"""

from __future__ import annotations

import re
import secrets
import time
import traceback
from typing import Any
from urllib.parse import parse_qsl, unquote

from ._asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    TooLarge,
    TrackedReceive,
    after_body,
    header,
    query,
    read_body,
    send_json,
)
from ._faults import Route, route_of
from ._json_guard import TooDeep, loads
from ._options import DEFAULT_TIMEOUT, MAX_TIMEOUT
from ._sandboxes import Sandbox, SandboxError, Sandboxes, parse_time
from ._unsupported import unsupported_api

__all__ = ["ControlPlane"]

_BODY_LIMIT = 1024 * 1024
_SANDBOX_OPERATION = re.compile(r"^/(?:v2/)?sandboxes/([^/]+)/.+")


def _metadata_filter(raw: str | None) -> dict[str, str]:
    """The SDK sends ``metadata=urlencode({quote(k): quote(v)})`` (so the
    pairs arrive encoded twice): decode the pairs, then each key and value."""
    if not raw:
        return {}
    return {unquote(key): unquote(value) for key, value in parse_qsl(raw, keep_blank_values=True)}


def _timeout(body: dict[str, Any], default: int | None = None) -> int:
    value = body.get("timeout", default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIMEOUT:
        raise SandboxError(400, f"timeout must be an integer from 0 to {MAX_TIMEOUT} seconds")
    return value


class ControlPlane:
    """The ASGI app of the control plane."""

    def __init__(self, sandboxes: Sandboxes, api_key: str) -> None:
        self._sandboxes = sandboxes
        self._key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        tracked = TrackedReceive(receive)
        receive, send = tracked, after_body(tracked, send)
        try:
            status, value, headers = await self._serve(scope, receive)
        except ClientGone:
            return  # no one to answer
        except SandboxError as exc:
            status, value, headers = exc.status, {"code": exc.status, "message": str(exc)}, []
        except TooLarge as exc:
            status, value, headers = 413, {"code": 413, "message": str(exc)}, []
        except Exception as exc:  # an answer the SDK can parse, and the trace on stderr
            traceback.print_exc()
            status, value, headers = (
                500,
                {"code": 500, "message": f"{type(exc).__name__}: {exc}"},
                [],
            )
        await send_json(send, status, value, headers)

    async def _body(self, receive: Receive) -> dict[str, Any]:
        raw = await read_body(receive, _BODY_LIMIT)
        try:
            body = loads(raw or b"{}")
        except TooDeep as exc:
            raise SandboxError(400, str(exc)) from exc
        except ValueError as exc:
            raise SandboxError(400, f"the body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise SandboxError(400, "the body must be a JSON object")
        return body

    async def _serve(
        self, scope: Scope, receive: Receive
    ) -> tuple[int, Any, list[tuple[str, str]]]:
        given = header(scope, "x-api-key") or ""
        if not secrets.compare_digest(given.encode(), self._key.encode()):
            raise SandboxError(401, "Invalid API key")
        path = scope["path"]
        if scope["method"] == "GET" and path.rstrip("/") == "/sandboxes/metrics":
            # Not the metrics of a sandbox named "metrics": E2B's batch route.
            raise SandboxError(501, unsupported_api("GET", path))
        route = route_of(scope["method"], path)
        sandbox_id = path.rstrip("/").split("/")[3 if path.startswith("/v2/") else 2 :][:1]
        boxes = self._sandboxes
        if route is Route.CREATE:
            key = header(scope, "idempotency-key")
            sandbox = await boxes.create(await self._body(receive), key)
            return 201, sandbox.created(), []
        if route is Route.LIST:
            return self._list(scope)
        if route is None or not sandbox_id:
            raise self._unsupported(scope["method"], path)
        if route is Route.CONNECT:
            body = await self._body(receive)
            sandbox = boxes.require(sandbox_id[0])
            # ``memory`` only matters to a paused sandbox, and none ever is.
            if body.get("memory") not in (None, True, False):
                raise SandboxError(400, "memory must be a boolean")
            # E2B: an omitted timeout is 300 s; connect only ever extends.
            boxes.extend(sandbox, _timeout(body, DEFAULT_TIMEOUT))
            return 200, sandbox.created(), []
        if route is Route.INFO:
            sandbox = boxes.require(sandbox_id[0])
            return 200, {**sandbox.detail(), **sandbox.created()}, []
        if route is Route.KILL:
            await boxes.end(boxes.require(sandbox_id[0]), "killed")
            return 204, None, []
        if route is Route.METRICS:
            return 200, self._metrics(scope, boxes.require(sandbox_id[0])), []
        if route is Route.SET_TIMEOUT:
            body = await self._body(receive)
            boxes.set_timeout(boxes.require(sandbox_id[0]), _timeout(body))
            return 204, None, []
        raise self._unsupported(scope["method"], path)

    def _unsupported(self, method: str, path: str) -> SandboxError:
        """501 naming what is not supported; but 404 for an operation on a
        sandbox that does not exist (E2B's answer, and true)."""
        on_sandbox = _SANDBOX_OPERATION.match(path)
        if on_sandbox is not None:
            self._sandboxes.require(on_sandbox.group(1))
        return SandboxError(501, unsupported_api(method, path))

    def _metrics(self, scope: Scope, sandbox: Sandbox) -> list[dict[str, Any]]:
        """Measure now, then every sample from ``start`` (default: the
        sandbox's start) to ``end`` (default: now), in Unix seconds."""
        params = query(scope)
        sandbox.meter.sample()
        try:
            start = int(params.get("start") or int(sandbox.started_at))
            end = int(params.get("end") or int(time.time()))
        except ValueError as exc:
            raise SandboxError(400, "start and end must be Unix seconds") from exc
        return [sample.to_json() for sample in sandbox.meter.between(start, end)]

    def _list(self, scope: Scope) -> tuple[int, Any, list[tuple[str, str]]]:
        params = query(scope)
        states = None
        if params.get("state"):
            states = {state.strip() for state in params["state"].split(",")}
            if not states <= {"running", "paused"}:
                raise SandboxError(400, "state must be running or paused (comma-separated)")
        try:
            limit = int(params.get("limit") or 100)
        except ValueError as exc:
            raise SandboxError(400, "limit must be an integer") from exc
        if not 1 <= limit <= 100:
            raise SandboxError(400, "limit must be from 1 to 100")
        order = params.get("order") or "desc"  # E2B lists the newest first
        if order not in ("asc", "desc"):
            raise SandboxError(400, "order must be asc or desc")
        after = params.get("startedAfter")
        page, token = self._sandboxes.listing(
            metadata=_metadata_filter(params.get("metadata")),
            states=states,
            started_after=None if not after else parse_time(after),
            template=params.get("template") or None,
            limit=limit,
            next_token=params.get("nextToken") or None,
            descending=order == "desc",
        )
        headers = [("x-next-token", token)] if token else []
        return 200, [sandbox.listed() for sandbox in page], headers
