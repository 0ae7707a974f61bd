"""Faults on the write that stages a launch request, struck on the wire by
local-e2b through the unmodified SDK.

Before it starts anything the launcher needs the request written into its
ledger (``POST /files``): the command, its cwd and its env values travel
there, never in shell text. That write cannot launch anything, so any way
it fails (dropped before or after the server took it, answered too late,
rate limited, answered "sandbox not found") nothing runs. The call comes
after the sandbox was ensured (a side effect), so it still answers
``uncertain`` with its locator, as every failure after a side effect does;
the staged files (an env value among them) are discarded, and the repeat
the answer asks for launches once (see docs/explanation/contract.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

import sandrail
from sandrail.interpreters.e2b import E2BBackend
from sandrail.local_e2b import LocalE2B, Route, WireFault, WireFaultKind
from tests.e2b_world import (
    LEDGER,
    as_root,
    needs_root,
    new_session,
    port_on,
    request,
    server_fixture,
)

server = server_fixture()
pytestmark = needs_root

_REQUEST_TIMEOUT = 2.0


@pytest.fixture
def port(server: LocalE2B) -> Iterator[sandrail.ToolPort]:
    """A fresh backend and session (a fault may mark a sandbox gone), its
    sandbox made and its launcher installed."""
    with E2BBackend(**server.sdk_options, request_timeout_seconds=_REQUEST_TIMEOUT) as backend:
        port = port_on(backend, new_session())
        warm = port.execute_sync(request(port, "run_command", "warm", command="true"))
        assert warm.status == "ok", warm.content
        yield port
    server.clear_faults()


_KINDS = [
    WireFault(kind=WireFaultKind.DROP_BEFORE_READ, route=Route.WRITE_FILE),
    WireFault(kind=WireFaultKind.DROP_AFTER_EFFECT, route=Route.WRITE_FILE),
    WireFault(kind=WireFaultKind.DELAY, route=Route.WRITE_FILE, seconds=2 * _REQUEST_TIMEOUT),
    WireFault(kind=WireFaultKind.STATUS_429, route=Route.WRITE_FILE),
    WireFault(kind=WireFaultKind.STATUS_502_NOT_FOUND, route=Route.WRITE_FILE),
]


@pytest.mark.parametrize("fault", _KINDS, ids=[fault.kind.value for fault in _KINDS])
def test_c2_c6_c17_a_failed_staging_write_leaves_no_env_value_and_a_repeat_launches_once(
    server: LocalE2B, port: sandrail.ToolPort, fault: WireFault
) -> None:
    mark = f"m-{uuid.uuid4().hex[:10]}"
    secret = f"tok-{uuid.uuid4().hex}"
    command = server.mark(mark)
    env = {"API_TOKEN": secret}
    sandbox_id = port.execute_sync(request(port, "sandbox_status", "status")).content["sandbox_id"]
    server.inject(WireFault(kind=fault.kind, route=fault.route, match=mark, seconds=fault.seconds))

    failed = port.execute_sync(request(port, "run_command", "op", command=command, env=env))

    assert failed.status == "uncertain", failed.to_json()
    assert failed.content["task_id"]
    assert failed.content["sandbox_id"] == sandbox_id
    assert server.truth().marked(mark) == 0
    # The staged files were discarded (the write may have landed whole):
    # no env value is left anywhere in the ledger.
    assert as_root(server, sandbox_id, f"ls -A {LEDGER}/inbox") == ""
    left = as_root(server, sandbox_id, f"grep -rl {secret} {LEDGER} /tmp 2>/dev/null; true")
    assert left == ""
    assert secret not in failed.to_json()

    retry = port.execute_sync(request(port, "run_command", "op", command=command, env=env))

    assert retry.status == "ok", retry.content
    assert retry.content["deduplicated"] is False
    assert server.truth().marked(mark) == 1
    again = port.execute_sync(request(port, "run_command", "op", command=command, env=env))
    assert (again.status, again.content["deduplicated"]) == ("ok", True)
    assert server.truth().marked(mark) == 1


def test_c2_c6_a_failed_snippet_write_runs_nothing_and_a_repeat_runs_it_once(
    server: LocalE2B,
) -> None:
    """A snippet is published through the same staged write: struck, its
    file is never run, and the repeat publishes and runs it once."""
    mark = f"m-{uuid.uuid4().hex[:10]}"
    code = f"import subprocess\nsubprocess.run(['bash', '-c', {server.mark(mark)!r}])\n"
    with E2BBackend(**server.sdk_options, request_timeout_seconds=_REQUEST_TIMEOUT) as backend:
        port = port_on(backend, new_session(), code=True)
        warm = {"code": "print(1)", "language": "python"}
        warmed = port.execute_sync(request(port, "sandbox_run_code", "warm", **warm))
        assert warmed.status == "ok", warmed.content
        server.inject(
            WireFault(kind=WireFaultKind.DROP_AFTER_EFFECT, route=Route.WRITE_FILE, match=mark)
        )
        snippet = {"code": code, "language": "python"}
        failed = port.execute_sync(request(port, "sandbox_run_code", "op", **snippet))
        assert failed.status == "uncertain", failed.to_json()
        assert server.truth().marked(mark) == 0
        repeat = port.execute_sync(request(port, "sandbox_run_code", "op", **snippet))
        assert (repeat.status, repeat.content["deduplicated"]) == ("ok", False), repeat.content
        assert server.truth().marked(mark) == 1
    server.clear_faults()


def test_c2_c6_a_failed_launcher_install_in_a_new_sandbox_makes_no_second_sandbox(
    server: LocalE2B,
) -> None:
    """The first write into a new sandbox installs the launcher: struck, the
    call is uncertain (a sandbox was made), and its repeat finds that very
    sandbox again, installs the launcher there and launches once."""
    mark = f"m-{uuid.uuid4().hex[:10]}"
    with E2BBackend(**server.sdk_options, request_timeout_seconds=_REQUEST_TIMEOUT) as backend:
        port = port_on(backend, new_session())
        before = len(server.truth().sandboxes)
        server.inject(WireFault(kind=WireFaultKind.DROP_AFTER_EFFECT, route=Route.WRITE_FILE))
        failed = port.execute_sync(request(port, "run_command", "op", command=server.mark(mark)))
        assert failed.status == "uncertain", failed.to_json()
        assert server.truth().marked(mark) == 0
        repeat = port.execute_sync(request(port, "run_command", "op", command=server.mark(mark)))
        assert repeat.status == "ok", repeat.to_json()
        # The uncertain answer could name no sandbox (the Ensure that made it
        # was never answered); the repeat found it by its metadata.
        assert len(server.truth().sandboxes) == before + 1
        assert server.truth().marked(mark) == 1
    server.clear_faults()
