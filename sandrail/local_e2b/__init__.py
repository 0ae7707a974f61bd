"""A local, wire-compatible E2B: control plane and envd on 127.0.0.1 that the
unmodified e2b SDK talks to over HTTP, running real processes on this
machine (``docs/howto/local-e2b.md``). A development and test tool, not a security boundary.

::

    from sandrail.local_e2b import WireFault, WireFaultKind, Route, serve

    with serve() as server:
        sandbox = e2b.Sandbox.create(**server.sdk_options)
        sandbox.commands.run("echo hi").stdout          # 'hi\\n'
        with server.fault(WireFault(kind=WireFaultKind.CUT_STREAM, route=Route.START)):
            ...                                           # the SDK's real exception
        server.truth().processes                         # what really ran

``sandrail local-e2b`` runs the same server in the foreground.

``e2b_target(server)`` is the E2B interpreter on the server as a
``sandrail.testing`` target (its ground truth counts real launches per task
id): ``check_backend(lambda: e2b_target(server))``. ``LaunchTruth`` is that
ground truth, for a backend of your own on the server: the marks its
commands send, counted per task id.
"""

from typing import TYPE_CHECKING, Any

from ._admin import AdminError
from ._faults import Route, WireFault, WireFaultKind
from ._isolation import IsolationError
from ._serve import LocalE2B, serve
from ._truth import (
    GroundTruth,
    MarkRecord,
    ProcessRecord,
    RequestRecord,
    SandboxRecord,
    SignalRecord,
)

if TYPE_CHECKING:  # imported on first use at run time (see __getattr__)
    from ._kit import LaunchTruth, e2b_target, kill_sandboxes, run_as_root, server_target

__all__ = [
    "AdminError",
    "GroundTruth",
    "IsolationError",
    "LaunchTruth",
    "LocalE2B",
    "MarkRecord",
    "ProcessRecord",
    "RequestRecord",
    "Route",
    "SandboxRecord",
    "SignalRecord",
    "WireFault",
    "WireFaultKind",
    "e2b_target",
    "kill_sandboxes",
    "run_as_root",
    "serve",
    "server_target",
]


def __getattr__(name: str) -> Any:
    """The testing kit's target, imported on first use (the server itself
    never needs the kit)."""
    if name in ("e2b_target", "LaunchTruth", "kill_sandboxes", "run_as_root", "server_target"):
        from . import _kit

        return getattr(_kit, name)
    raise AttributeError(f"module 'sandrail.local_e2b' has no attribute {name!r}")
