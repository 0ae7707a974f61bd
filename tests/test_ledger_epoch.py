"""C2 by ledger epoch: a sandbox without a task's claim launches only when it
can prove it never held one, from the epoch of its ledger that the task's
first start was sent under (carried by the start, kept in the durable
ownership record). Decisive retries after a start that never
arrived, even across a harness restart, and never a second launch."""

from __future__ import annotations

import asyncio

import pytest

from sandrail.core import Ensure, OwnedCommand, SandboxReady, Start, Started, StartRefused
from sandrail.testing import SCRIPTS, Fault, FaultKind, Simulator, World

NEVER_ARRIVES = [
    Fault(effect="Start", kind=FaultKind.NOT_DELIVERED),
    Fault(effect="Start", kind=FaultKind.HANG, when="before"),
    Fault(effect="Start", kind=FaultKind.ABORT, when="before"),
    Fault(effect="Start", kind=FaultKind.DELIVERED_LATE),
]


def _start(sandbox: str, **fields: object) -> Start:
    values: dict[str, object] = {
        "sandbox_id": sandbox,
        "task_id": "a" * 64,
        "request_digest": "d",
        "command": "true",
        "cwd": None,
        "env": None,
        "timeout_seconds": 30,
    }
    values.update(fields)
    return Start(**values)  # type: ignore[arg-type]


def _ready(sim: Simulator, session: str = "s") -> SandboxReady:
    ready = sim(Ensure(session_id=session, owner_key="o"))
    assert isinstance(ready, SandboxReady)
    return ready


def test_ensure_reports_a_ledger_epoch_that_changes_only_when_the_ledger_is_lost() -> None:
    sim = Simulator()
    first = _ready(sim)
    assert first.ledger_epoch == _ready(sim).ledger_epoch
    sim.wipe_ledger(first.sandbox_id)
    after = _ready(sim)
    assert after.ledger_epoch is not None
    assert after.ledger_epoch != first.ledger_epoch


def test_c2_a_start_launches_only_under_the_epoch_it_was_sent_for() -> None:
    sim = Simulator()
    ready = _ready(sim)
    epoch = ready.ledger_epoch
    sim.wipe_ledger(ready.sandbox_id)
    # Sent under the old epoch: a claim may have been made and lost since.
    refused = sim(_start(ready.sandbox_id, claim_epoch=epoch))
    assert refused == StartRefused(reason="claim_lost")
    refused = sim(_start(ready.sandbox_id, expect_claim=True, claim_epoch=epoch))
    assert refused == StartRefused(reason="claim_lost")
    # Without an epoch, only a start that expects no claim may launch.
    assert sim(_start(ready.sandbox_id, expect_claim=True)) == StartRefused(reason="claim_lost")
    now = _ready(sim).ledger_epoch
    launched = sim(_start(ready.sandbox_id, expect_claim=True, claim_epoch=now))
    assert isinstance(launched, Started)
    assert launched.first_launch
    assert sim.launches == {"a" * 64: 1}


def test_c2_an_epoch_of_another_sandbox_proves_nothing() -> None:
    sim = Simulator()
    one = _ready(sim, "s1")
    two = _ready(sim, "s2")
    refused = sim(_start(two.sandbox_id, expect_claim=True, claim_epoch=one.ledger_epoch))
    assert refused == StartRefused(reason="claim_lost")


@pytest.mark.parametrize("fault", NEVER_ARRIVES, ids=lambda f: f"{f.kind.value}-{f.when}")
def test_c2_a_start_that_never_arrived_is_launched_by_the_retry_after_a_restart(
    fault: Fault,
) -> None:
    """The proof travels in the durable record, not the backend's memory: a
    restarted harness (new ports) still retries decisively."""
    with World.simulated([fault], scripts=SCRIPTS) as world:
        first = world.command_tools(durable_ownership=True)
        lost = world.call(first, "run_command", {"command": "echo once"}, key="k1")
        assert lost.status == "uncertain"
        restarted = world.command_tools(durable_ownership=True)
        retry = world.call(restarted, "run_command", {"command": "echo once"}, key="k1")
        assert retry.status == "ok", retry.content
        assert retry.content["stdout"] == "once\n"
        world.assert_contract()
        assert world.launches_of(restarted, "k1") == 1


def test_c2_a_late_first_start_after_a_wipe_never_launches_twice() -> None:
    """Regression (found while building the kit): the retry of a start held
    in the network launched (the sandbox proved it never held the claim);
    then a command wiped the ledger, and the held first start arrived and
    launched the task again. Now the held start carries the epoch it was
    sent under, and a ledger lost since makes it launch nothing."""
    with World.simulated([Fault(effect="Start", kind=FaultKind.DELIVERED_LATE)]) as world:
        port = world.command_tools()
        assert world.call(port, "run_command", {"command": "echo once"}, key="k1").status == (
            "uncertain"
        )
        assert world.call(port, "run_command", {"command": "echo once"}, key="k1").status == "ok"
        assert world.sim is not None
        world.sim.wipe_ledger("sbx-1")
        world.deliver_held()
        assert world.launches_of(port, "k1") == 1
        (late,) = world.sim.late_deliveries
        assert late[1] == StartRefused(reason="claim_lost")
        world.assert_contract()


def test_c2_a_wipe_before_the_retry_is_uncertain_even_after_a_restart() -> None:
    with World.simulated([Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)]) as world:
        first = world.command_tools(durable_ownership=True)
        assert world.call(first, "run_command", {"command": "echo 1"}, key="k1").status == (
            "uncertain"
        )
        assert world.sim is not None
        world.sim.wipe_ledger("sbx-1")
        restarted = world.command_tools(durable_ownership=True)
        retry = world.call(restarted, "run_command", {"command": "echo 1"}, key="k1")
        assert retry.status == "uncertain"
        assert world.launches_of(first, "k1") == 1
        world.assert_contract()


def test_c2_concurrent_calls_of_one_key_keep_the_first_epoch() -> None:
    """Two calls of one key on one port: the record keeps the epoch of the
    first start that may have left, whatever order they finish in."""
    with World.simulated(
        [Fault(effect="Start", kind=FaultKind.RESPONSE_LOST)], scripts=SCRIPTS
    ) as world:
        port = world.command_tools(interleave=True)
        requests = [
            world.request(port, "run_command", {"command": "echo 2"}, key="k1", call_id=f"c{n}")
            for n in (1, 2)
        ]
        world.call_concurrently(port, requests)
        (record,) = port.owned_commands.values()
        assert isinstance(record, OwnedCommand)
        assert record.ledger_epoch == "sbx-1/ledger-0"
        assert world.launches_of(port, "k1") == 1
        world.assert_contract()


def test_the_async_driver_carries_the_epoch_too() -> None:
    with World.simulated([Fault(effect="Start", kind=FaultKind.HANG)], scripts=SCRIPTS) as world:
        port = world.command_tools(interleave=True)

        async def twice() -> list[str]:
            statuses: list[str] = []
            for number in (1, 2):
                request = world.request(
                    port, "run_command", {"command": "echo 3"}, key="k1", call_id=f"c{number}"
                )
                statuses.append((await port.execute(request)).status)
            return statuses

        assert asyncio.run(twice()) == ["uncertain", "ok"]
        world.assert_contract()


def test_c9_a_read_that_finds_no_record_still_asks_about_authority() -> None:
    """Regression (a 20,000-schedule hunt, seed 11): a read of a task whose
    record a command deleted answers "unknown"; the call returned uncertain
    at once, skipping the guard after the read, though the caller had lost
    its authority before anything was dispatched (C9: error)."""
    plan = [Fault(effect="Read", occurrence=1, kind=FaultKind.AUTHORITY_LOST, when="after")]
    with World.simulated(plan, scripts=SCRIPTS) as world:
        port = world.command_tools(durable_ownership=True)
        world.call(port, "run_command", {"command": "echo hi"}, key="k1")
        world.wipe_ledger()
        task = world.task_of(port, "k1")
        result = world.call(port, "read_command_output", {"task_id": task}, key="r1")
        assert (result.status, result.content["error_type"]) == (
            "error",
            "e2b_command_authority_unproven",
        )
        world.assert_contract()
        again = world.call(port, "read_command_output", {"task_id": task}, key="r2")
        assert again.status == "uncertain"  # no record: the read cannot tell
