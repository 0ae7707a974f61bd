"""One worker of the fleet test: a harness process that runs a
list of operation keys through a port on E2B (a local-e2b server, named by
the E2B_* variables) with a shared ownership record, retrying each key with
the same operation key until its answer is decisive, as a harness should.

``python -m tests.fleet_worker RECORD SESSION OUT MARK_PREFIX KEY...`` appends
one JSON line per call to OUT (flushed at once, so a worker killed mid-way
leaves every answer it got). The command of a key records the mark
``MARK_PREFIX.KEY`` in the server's ground truth, so the test counts its
launches from inside the sandbox, then sleeps a little (so kills land
mid-call too).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

import sandrail
from sandrail.interpreters.e2b import E2BBackend
from sandrail.records import open_record

MAX_ATTEMPTS = 8


def main(argv: list[str]) -> int:
    record_spec, session, out, prefix, *keys = argv
    mark_command = os.environ["FLEET_MARK_COMMAND"]  # shell text with {mark} to fill in
    record = open_record(record_spec)
    backend = E2BBackend(
        api_key=os.environ["E2B_API_KEY"],
        api_url=os.environ["E2B_API_URL"],
        sandbox_url=os.environ["E2B_SANDBOX_URL"],
    )
    port = sandrail.command_tools(
        backend=backend,
        session_id=session,
        owner=sandrail.AgentOwner(agent_id="fleet-agent"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        record=record,
    )
    incarnation = uuid.uuid4().hex[:8]
    with open(out, "a", encoding="utf-8") as log:
        for key in keys:
            command = mark_command.format(mark=f"{prefix}.{key}") + "; sleep 0.3"
            for attempt in range(MAX_ATTEMPTS):
                request = sandrail.ToolRequest(
                    call=sandrail.ToolCall(
                        name="run_command",
                        call_id=f"{incarnation}-{key}-{attempt}",
                        arguments={"command": command, "timeout": 60},
                    ),
                    operation_key=key,
                    session_id=session,
                    definition=port.definition("run_command"),
                    identity=sandrail.AgentIdentity(agent_id="fleet-agent"),
                )
                result = port.execute_sync(request)
                line = {
                    "pid": os.getpid(),
                    "incarnation": incarnation,
                    "key": key,
                    "attempt": attempt,
                    "status": result.status,
                    "error_type": result.content.get("error_type"),
                    "deduplicated": result.content.get("deduplicated"),
                    "time": time.time(),
                }
                log.write(json.dumps(line) + "\n")
                log.flush()
                if result.status != "uncertain":
                    break
                time.sleep(0.25 * (attempt + 1))  # the database may be restarting
    backend.close()
    record.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
