"""Routes of the E2B wire and the faults a test can switch on for them.

Pure data and matching: the proxy (``_proxy``) asks a :class:`FaultBook`
which fault, if any, strikes a request, and carries it out.

Strategy: a fault is a plain value (:class:`WireFault`) so a test can build it,
print it and compare it. The book holds armed faults in order; the first
armed fault whose route and body text match a request strikes it and uses up
one of its ``times``. Refusing connections is not per request (the route is
unknown before a connection is accepted), so it is a per-listener switch.
"""

from __future__ import annotations

import enum
import re
import threading
from collections.abc import Mapping
from typing import Any

import attrs

__all__ = [
    "LISTENERS",
    "FaultBook",
    "Listener",
    "Route",
    "WireFault",
    "WireFaultKind",
    "route_of",
]

Listener = str
"""``"api"`` (the control plane) or ``"envd"`` (every sandbox's daemon)."""

LISTENERS: tuple[Listener, ...] = ("api", "envd")


class Route(enum.StrEnum):
    """Every request the e2b SDK makes that the server answers, named by
    method and path (ids shown as ``{id}``). ``ANY`` matches them all."""

    CREATE = "POST /v2/sandboxes"
    CONNECT = "POST /v2/sandboxes/{id}/connect"
    LIST = "GET /v2/sandboxes"
    INFO = "GET /sandboxes/{id}"
    KILL = "DELETE /sandboxes/{id}"
    SET_TIMEOUT = "POST /sandboxes/{id}/timeout"
    METRICS = "GET /sandboxes/{id}/metrics"
    HEALTH = "GET /health"
    READ_FILE = "GET /files"
    WRITE_FILE = "POST /files"
    START = "POST /process.Process/Start"
    CONNECT_PROCESS = "POST /process.Process/Connect"
    LIST_PROCESSES = "POST /process.Process/List"
    SEND_SIGNAL = "POST /process.Process/SendSignal"
    SEND_INPUT = "POST /process.Process/SendInput"
    STREAM_INPUT = "POST /process.Process/StreamInput"
    CLOSE_STDIN = "POST /process.Process/CloseStdin"
    UPDATE = "POST /process.Process/Update"
    STAT = "POST /filesystem.Filesystem/Stat"
    LIST_DIR = "POST /filesystem.Filesystem/ListDir"
    MAKE_DIR = "POST /filesystem.Filesystem/MakeDir"
    REMOVE = "POST /filesystem.Filesystem/Remove"
    MOVE = "POST /filesystem.Filesystem/Move"
    WATCH_DIR = "POST /filesystem.Filesystem/WatchDir"
    ANY = "*"

    @property
    def listener(self) -> Listener:
        """The listener that serves this route (``ANY`` has none of its own)."""
        return "api" if "sandboxes" in self.value else "envd"


_ID = re.compile(r"^/(v2/)?sandboxes/([^/]+)(/connect|/timeout|/metrics)?$")
_BY_TEXT = {route.value: route for route in Route}


def route_of(method: str, path: str) -> Route | None:
    """The :class:`Route` of a request, or ``None`` for a path the SDK never
    uses. ``path`` excludes the query string."""
    match = _ID.match(path)
    if match is not None:
        path = f"/{match.group(1) or ''}sandboxes/{{id}}{match.group(3) or ''}"
    return _BY_TEXT.get(f"{method.upper()} {path}")


class WireFaultKind(enum.StrEnum):
    """What a fault does to the request it strikes.

    - ``DROP_BEFORE_READ``: the connection is reset as soon as the request
      head arrives; the request never reaches the sandbox (nothing happened).
    - ``DROP_AFTER_EFFECT``: the request is served (the side effect happened:
      a process started, a sandbox was created), then the connection is reset
      before the answer is sent.
    - ``DELAY``: the request is served at once; its answer is held for
      ``seconds`` (past a client's timeout, say).
    - ``CUT_STREAM``: the answer is forwarded up to ``after_events`` Connect
      stream messages (1 = just the start event), then the connection is
      closed mid-body.
    - ``STATUS_429``: answered ``429`` (rate limited) without being served.
    - ``STATUS_502_NOT_FOUND``: answered ``502`` with the edge's "sandbox was
      not found" message, without being served.
    - ``KILL_SERVER``: like ``CUT_STREAM``, but then the whole server process
      dies (SIGKILL). Every later call is refused.
    """

    DROP_BEFORE_READ = "drop_before_read"
    DROP_AFTER_EFFECT = "drop_after_effect"
    DELAY = "delay"
    CUT_STREAM = "cut_stream"
    STATUS_429 = "status_429"
    STATUS_502_NOT_FOUND = "status_502_not_found"
    KILL_SERVER = "kill_server"


def _positive(instance: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen(kw_only=True)
class WireFault:
    """One armed wire fault.

    ``route`` picks the requests it may strike (``Route.ANY`` for all);
    ``match``, if given, must occur in the request body as text (a word of a
    command, a file path); ``times`` is how many matching requests it strikes
    before it disarms itself. ``seconds`` is the hold of a ``DELAY``;
    ``after_events`` the stream messages let through by ``CUT_STREAM`` and
    ``KILL_SERVER``.
    """

    kind: WireFaultKind = attrs.field(converter=WireFaultKind)
    route: Route = attrs.field(default=Route.ANY, converter=Route)
    match: str | None = None
    times: int = attrs.field(default=1, validator=_positive)
    seconds: float = attrs.field(default=5.0, validator=_positive)
    after_events: int = attrs.field(default=1, validator=_positive)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (what the server's admin channel carries)."""
        return {
            "kind": self.kind.value,
            "route": self.route.value,
            "match": self.match,
            "times": self.times,
            "seconds": self.seconds,
            "after_events": self.after_events,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WireFault:
        """The inverse of :meth:`to_dict`; raises ``ValueError`` or
        ``TypeError`` for a malformed value."""
        return cls(**{key: data[key] for key in data if key in attrs.fields_dict(cls)})


@attrs.define
class _Armed:
    fault: WireFault
    left: int


class FaultBook:
    """The faults armed on one server and the listeners told to refuse.

    Thread-safe: the admin channel arms faults while the proxy consults them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: list[_Armed] = []
        self._refusing: set[Listener] = set()

    def arm(self, fault: WireFault) -> None:
        """Arm ``fault`` after those already armed."""
        with self._lock:
            self._armed.append(_Armed(fault, fault.times))

    def clear(self) -> None:
        """Disarm every fault and stop refusing connections."""
        with self._lock:
            self._armed.clear()
            self._refusing.clear()

    def refuse(self, listener: Listener, refusing: bool = True) -> None:
        """Make ``listener`` refuse connections (or stop refusing)."""
        if listener not in LISTENERS:
            raise ValueError(f"listener must be one of {LISTENERS}, got {listener!r}")
        with self._lock:
            if refusing:
                self._refusing.add(listener)
            else:
                self._refusing.discard(listener)

    def refusing(self, listener: Listener) -> bool:
        """Whether ``listener`` is told to refuse connections."""
        with self._lock:
            return listener in self._refusing

    def wants_body(self, route: Route | None) -> bool:
        """Whether an armed fault for ``route`` needs the request body to decide."""
        with self._lock:
            return any(
                armed.fault.match is not None and _route_matches(armed.fault.route, route)
                for armed in self._armed
            )

    def strike(self, route: Route | None, body: bytes | None) -> WireFault | None:
        """The fault that strikes this request, using up one of its times,
        or ``None``. ``body`` is the request body, or ``None`` when it was not
        read (then a fault with ``match`` cannot strike)."""
        text = None if body is None else body.decode("utf-8", "replace")
        with self._lock:
            for armed in self._armed:
                fault = armed.fault
                if not _route_matches(fault.route, route):
                    continue
                if fault.match is not None and (text is None or fault.match not in text):
                    continue
                armed.left -= 1
                if armed.left == 0:
                    self._armed.remove(armed)
                return fault
        return None

    def pending(self) -> list[tuple[WireFault, int]]:
        """Armed faults with the number of strikes each has left."""
        with self._lock:
            return [(armed.fault, armed.left) for armed in self._armed]


def _route_matches(wanted: Route, route: Route | None) -> bool:
    return wanted is Route.ANY or wanted is route
