"""``python -m sandrail.local_e2b --state-dir DIR [...]``: run a server and
print one JSON line when it is ready (``ServerInfo``, or ``{"error": ...}``
and exit status 2 if sandboxes cannot be isolated here). This is how
``serve()`` starts its server; people use ``sandrail local-e2b``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from ._isolation import IsolationError
from ._server import ServerInfo, ServerOptions, run_server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandrail.local_e2b")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--isolation", default="auto", choices=["auto", "root", "userns"])
    parser.add_argument("--keepalive-seconds", type=float, default=None)
    parser.add_argument("--signal-scope", default="group", choices=["group", "process"])
    parser.add_argument("--max-upload-bytes", type=int, default=256 * 1024 * 1024)
    parser.add_argument("--stop-on-stdin-eof", action="store_true")
    args = parser.parse_args(argv)
    options = ServerOptions(
        state_dir=args.state_dir,
        isolation=args.isolation,
        keepalive_seconds=args.keepalive_seconds,
        signal_scope=args.signal_scope,
        max_upload_bytes=args.max_upload_bytes,
        stop_on_stdin_eof=args.stop_on_stdin_eof,
    )

    def ready(info: ServerInfo) -> None:
        print(json.dumps(info.to_dict()), flush=True)

    try:
        asyncio.run(run_server(options, ready))
    except IsolationError as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
