"""What local-e2b says about a route of E2B's API that it does not serve.

Strategy: the SDK turns a 404 on a sandbox's route into "sandbox not found",
which would be a lie about a sandbox that runs. So every route the server
does not serve is answered 501 with a message naming the feature, which the
SDK surfaces verbatim in the exception it raises (``SandboxException: 501:
local-e2b does not support pausing sandboxes (POST /sandboxes/.../pause)``).
"""

from __future__ import annotations

import re

__all__ = ["unsupported_api"]

_FEATURES: tuple[tuple[str, str], ...] = (
    (r"POST /sandboxes/[^/]+/pause", "pausing sandboxes"),
    (r"POST /sandboxes/[^/]+/resume", "resuming paused sandboxes"),
    (r"POST /sandboxes/[^/]+/fork", "forking sandboxes"),
    (r"\w+ /sandboxes/[^/]+/snapshots|\w+ /snapshots(/.*)?", "snapshots"),
    (r"GET /sandboxes/metrics", "metrics of many sandboxes at once (ask each sandbox)"),
    (r"GET (/v2)?/sandboxes/[^/]+/logs", "sandbox logs"),
    (r"PUT /sandboxes/[^/]+/network", "changing a sandbox's network (update_network)"),
    (r"POST /sandboxes/[^/]+/refreshes", "refreshes (set_timeout does the same)"),
    # delete_snapshot deletes through the templates route.
    (r"DELETE (/v\d)?/templates/[^/]+", "snapshots or templates (it has neither to delete)"),
    (r"\w+ (/v\d)?/(default-)?templates(/.*)?", "templates (it has only 'base')"),
    (r"\w+ /volumes(/.*)?", "volumes"),
    (r"\w+ /secrets(/.*)?", "secrets"),
    (
        r"\w+ /sandboxes(/[^/]+/connect)?",
        "the e2b SDK's older sandbox API (it serves the API of the e2b SDK 2.63 and later)",
    ),
)
_COMPILED = tuple((re.compile(pattern), what) for pattern, what in _FEATURES)


def unsupported_api(method: str, path: str) -> str:
    """The message for ``method path``, a control-plane route not served."""
    request = f"{method.upper()} {path}"
    for pattern, what in _COMPILED:
        if pattern.fullmatch(request):
            return f"local-e2b does not support {what} ({request})"
    return f"local-e2b does not support {request}"
