"""local-e2b's control plane behaves as E2B's: listing order and
filters, every create option honoured or refused by name, unsupported
routes answered as such (never "not found"), metrics, and no egress for a
sandbox created without internet access.

Driven by the unmodified e2b SDK; one server for the module.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import e2b
import httpx
import pytest

from sandrail.local_e2b import LocalE2B, serve

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="these tests assume real root (as CI)")


@pytest.fixture(scope="module")
def server() -> Iterator[LocalE2B]:
    with serve() as running:
        yield running


def _ids(paginator: Any) -> list[str]:
    found = []
    while paginator.has_next:
        found += [info.sandbox_id for info in paginator.next_items()]
    return found


# -- listing ----------------------------------------------------


def test_list_is_newest_first_and_filters_by_start_and_template(
    server: LocalE2B,
) -> None:
    tag = {"run": uuid.uuid4().hex}
    older = e2b.Sandbox.create(metadata=tag, **server.sdk_options)
    newer = e2b.Sandbox.create(metadata=tag, **server.sdk_options)
    try:
        query = e2b.SandboxQuery(metadata=tag)
        assert _ids(e2b.Sandbox.list(query=query, **server.sdk_options)) == [
            newer.sandbox_id,
            older.sandbox_id,
        ]
        paged = e2b.Sandbox.list(query=query, limit=1, **server.sdk_options)
        assert [info.sandbox_id for info in paged.next_items()] == [newer.sandbox_id]
        assert [info.sandbox_id for info in paged.next_items()] == [older.sandbox_id]
        assert not paged.has_next
        ascending = e2b.Sandbox.list(query=query, order="asc", **server.sdk_options)
        assert _ids(ascending) == [older.sandbox_id, newer.sandbox_id]

        started = newer.get_info().started_at
        since = e2b.SandboxQuery(metadata=tag, started_after=started)
        assert _ids(e2b.Sandbox.list(query=since, **server.sdk_options)) == [newer.sandbox_id]
        later = e2b.SandboxQuery(metadata=tag, started_after=started + timedelta(microseconds=1))
        assert _ids(e2b.Sandbox.list(query=later, **server.sdk_options)) == []

        base = e2b.SandboxQuery(metadata=tag, template="base")
        assert len(_ids(e2b.Sandbox.list(query=base, **server.sdk_options))) == 2
        other = e2b.SandboxQuery(metadata=tag, template="unknown-template")
        assert _ids(e2b.Sandbox.list(query=other, **server.sdk_options)) == []
    finally:
        older.kill()
        newer.kill()


def test_a_malformed_started_after_is_refused(server: LocalE2B) -> None:
    answer = httpx.get(
        f"{server.api_url}/v2/sandboxes",
        params={"startedAfter": "yesterday"},
        headers={"X-API-KEY": server.api_key},
    )
    assert answer.status_code == 400
    assert "ISO 8601" in answer.json()["message"]
    naive = httpx.get(
        f"{server.api_url}/v2/sandboxes",
        params={"startedAfter": "2026-01-01T00:00:00"},
        headers={"X-API-KEY": server.api_key},
    )
    assert naive.status_code == 400


# -- routes local-e2b does not serve -------------------------------------


def test_unserved_operations_say_so_and_never_not_found(
    server: LocalE2B, sandbox: e2b.Sandbox
) -> None:
    attempts = {
        "pausing sandboxes": sandbox.pause,
        "forking sandboxes": lambda: sandbox.fork(),
        "snapshots": sandbox.create_snapshot,
        "changing a sandbox's network": lambda: sandbox.update_network({"deny_out": ["8.8.8.8"]}),
    }
    for feature, attempt in attempts.items():
        with pytest.raises(e2b.SandboxException) as raised:
            attempt()
        assert not isinstance(raised.value, e2b.SandboxNotFoundException), feature
        assert f"local-e2b does not support {feature}" in str(raised.value)
        assert "501" in str(raised.value)
    assert sandbox.is_running()  # none of them touched it


def test_an_unserved_operation_on_a_gone_sandbox_is_not_found(
    server: LocalE2B,
) -> None:
    gone = e2b.Sandbox.create(**server.sdk_options)
    gone.kill()
    with pytest.raises(e2b.SandboxNotFoundException):
        gone.pause()
    with pytest.raises(e2b.SandboxNotFoundException):
        gone.fork()


def test_an_unknown_route_is_named_on_both_listeners(
    server: LocalE2B, sandbox: e2b.Sandbox
) -> None:
    api = httpx.get(
        f"{server.api_url}/sandboxes/{sandbox.sandbox_id}/logs",
        headers={"X-API-KEY": server.api_key},
    )
    assert api.status_code == 501
    assert api.json()["message"].startswith("local-e2b does not support sandbox logs")
    token = sandbox.connection_config.sandbox_headers["X-Access-Token"]
    envd = httpx.get(
        f"{server.sandbox_url}/metrics",
        headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "X-Access-Token": token},
    )
    assert envd.status_code == 501
    assert "local-e2b does not support GET /metrics" in envd.json()["message"]


# -- every create option honoured or refused ------------------------------


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"lifecycle": {"on_timeout": "pause"}}, "pausing sandboxes"),
        ({"lifecycle": {"on_timeout": "pause", "auto_resume": True}}, "pausing sandboxes"),
        ({"template": "code-interpreter-v1"}, "templates"),
        ({"network": {"allow_out": ["1.1.1.1"]}}, "allowed egress destinations"),
        ({"network": {"deny_out": ["10.0.0.0/8"]}}, "egress rules short of all traffic"),
        ({"volume_mounts": {"/mnt/data": "data"}}, "volumes"),
    ],
)
def test_options_it_cannot_honour_are_refused_by_name(
    server: LocalE2B, options: dict[str, Any], refusal: str
) -> None:
    before = len(server.truth().sandboxes)
    with pytest.raises(e2b.SandboxException) as raised:
        e2b.Sandbox.create(**options, **server.sdk_options)
    assert f"local-e2b does not support {refusal}" in str(raised.value)
    assert len(server.truth().sandboxes) == before  # nothing was made


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"templateID": "base", "someFutureOption": 1}, "create option(s) someFutureOption"),
        ({"templateID": "base", "iam": {"tokens": {"aws": {}}}}, "workload identity"),
        ({"templateID": "base", "allow_internet_access": "no"}, "must be a boolean"),
        ({"templateID": "base", "network": {"egressProxy": {"url": "x"}}}, "egress proxy"),
        ({"templateID": "base", "network": {"unknownKnob": 1}}, "network option(s)"),
        ({"templateID": "base", "autoResume": {"enabled": "yes"}}, "boolean 'enabled'"),
        ({"templateID": "base", "timeout": -1}, "non-negative integer"),
        ({"templateID": "base", "metadata": {"a": 1}}, "object of strings"),
    ],
)
def test_bad_or_unknown_create_fields_are_refused_by_name(
    server: LocalE2B, body: dict[str, Any], message: str
) -> None:
    answer = httpx.post(
        f"{server.api_url}/v2/sandboxes", json=body, headers={"X-API-KEY": server.api_key}
    )
    assert answer.status_code == 400
    assert message in answer.json()["message"]


def test_what_it_honours_shows_in_the_sandbox_info(server: LocalE2B) -> None:
    made = e2b.Sandbox.create(
        allow_internet_access=False,
        network={"allow_public_traffic": False},
        lifecycle={"on_timeout": "kill"},
        **server.sdk_options,
    )
    try:
        info = made.get_info()
        assert info.allow_internet_access is False
        assert info.lifecycle == {"on_timeout": "kill", "auto_resume": False}
        assert info.cpu_count == os.cpu_count()
        assert info.envd_version == "0.6.4"
        assert server.truth().sandbox(made.sandbox_id).own_network is True
    finally:
        made.kill()


def test_connect_without_timeout_extends_to_five_minutes_never_shortens(
    server: LocalE2B,
) -> None:
    made = e2b.Sandbox.create(timeout=30, **server.sdk_options)
    try:
        e2b.Sandbox.connect(made.sandbox_id, **server.sdk_options)
        left = made.get_info().end_at.timestamp() - time.time()
        assert 290 < left <= 300
        e2b.Sandbox.connect(made.sandbox_id, timeout=10, **server.sdk_options)
        assert made.get_info().end_at.timestamp() - time.time() > 280
    finally:
        made.kill()


# -- metrics (served, not refused) ----------------------------------------


def test_metrics_are_measured_when_asked_within_the_range(
    server: LocalE2B, sandbox: e2b.Sandbox
) -> None:
    sandbox.commands.run("head -c 3000000 /dev/zero > /tmp/fill")
    (metric,) = sandbox.get_metrics()
    assert metric.cpu_count == os.cpu_count()
    assert 0 <= metric.cpu_used_pct <= 100
    assert metric.disk_used >= 3_000_000
    assert 0 < metric.mem_used < metric.mem_total
    assert len(sandbox.get_metrics()) == 2  # one more sample, both in range
    before = sandbox.get_info().started_at - timedelta(hours=1)
    assert sandbox.get_metrics(start=before, end=before + timedelta(minutes=1)) == []
    answer = httpx.get(
        f"{server.api_url}/sandboxes/{sandbox.sandbox_id}/metrics",
        params={"start": "soon"},
        headers={"X-API-KEY": server.api_key},
    )
    assert answer.status_code == 400


# -- no egress without internet access ------------------------------------


def test_without_internet_access_nothing_of_the_host_is_reachable(
    server: LocalE2B,
) -> None:
    """Judged by this machine's loopback (this machine has no internet): a
    listener on the host's 127.0.0.1 is reached from a default sandbox and
    not from one created without internet access, whose own loopback works
    and whose commands still reach the server's mark listener."""
    host = socket.create_server(("127.0.0.1", 0))
    port = host.getsockname()[1]
    probe = f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo reached || echo blocked"
    shut = e2b.Sandbox.create(allow_internet_access=False, **server.sdk_options)
    denied = e2b.Sandbox.create(network={"deny_out": ["0.0.0.0/0"]}, **server.sdk_options)
    open_ = e2b.Sandbox.create(**server.sdk_options)
    try:
        assert open_.commands.run(probe).stdout == "reached\n"
        assert shut.commands.run(probe).stdout == "blocked\n"
        assert denied.commands.run(probe).stdout == "blocked\n"
        interfaces = "awk -F: 'NR > 2 {gsub(/ /, \"\", $1); print $1}' /proc/net/dev"
        assert shut.commands.run(interfaces).stdout == "lo\n"
        inside = "python3 -m http.server 8765 -b 127.0.0.1 >/dev/null 2>&1 & sleep 0.5; " + (
            "(exec 3<>/dev/tcp/127.0.0.1/8765) && echo served; kill %1"
        )
        assert shut.commands.run(inside).stdout == "served\n"
        assert shut.commands.run(server.mark("from-no-egress")).exit_code == 0
        assert server.truth().marked("from-no-egress") == 1
    finally:
        host.close()
        for box in (shut, denied, open_):
            box.kill()
