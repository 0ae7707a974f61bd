"""Port semantics of an ownership record:
what a port does when its durable record cannot be written or read, how a
race of two writers is settled, and what the record holds (C2, C3, C5, C6,
C17)."""

from __future__ import annotations

from typing import Any

from sandrail import ErrorCode
from sandrail.core import OwnedCommand, Start
from sandrail.interpreters.simulator import FaultKind
from tests.rig import Rig
from tests.test_adversarial import one_fault

SECRET = "hunter2-swordfish"


def durable_pair(store: dict[str, OwnedCommand]) -> dict[str, Any]:
    return {
        "resolve_owned_command": lambda request, task: store.get(task),
        "remember_owned_command": lambda request, owned: store.__setitem__(owned.task_id, owned),
    }


def test_c2_an_unreadable_record_after_a_restart_never_relaunches() -> None:
    """A ``resolve_owned_command`` that raises was taken as "no
    record", so a restarted harness whose sandbox was lost launched the task
    a second time in a new sandbox. It must be ``uncertain``, launching nothing."""
    durable: dict[str, OwnedCommand] = {}
    first = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), **durable_pair(durable))
    assert first.run("run_command", {"command": "echo once"}).status == "uncertain"
    first.sim.kill_sandbox("sbx-1")

    def unreadable(request: Any, task: str) -> OwnedCommand | None:
        raise OSError("the database is down")

    second = Rig(sim=first.sim, resolve_owned_command=unreadable)
    retry = second.run("run_command", {"command": "echo once"}, call_id="after-restart")
    assert retry.status == "uncertain", retry.content
    assert retry.content["error_type"] == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value
    assert retry.content["task_id"] == first.task_id()
    assert first.sim.launches[first.task_id()] == 1


def test_c5_an_unwritable_record_means_the_start_never_leaves() -> None:
    """A record that cannot be written before a start would leave:
    the start never leaves, and the call says so (``error``, ``executed: false``)."""

    def unwritable(request: Any, owned: OwnedCommand) -> None:
        raise OSError("disk full")

    rig = Rig(remember_owned_command=unwritable)
    result = rig.run("run_command", {"command": "echo once"})
    assert result.status == "error", result.content
    assert result.content["executed"] is False
    assert result.content["error_type"] == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value
    assert not any(isinstance(effect, Start) for effect in rig.sim.effects_seen)
    assert rig.sim.launches == {}


def test_c6_an_unwritable_record_on_a_retry_of_a_launched_key_is_uncertain() -> None:
    """C6: when an earlier call of the key may have launched, "nothing ran"
    would be false for the task: a record that cannot be written then is
    ``uncertain`` with the locator, never ``executed: false``."""
    durable: dict[str, OwnedCommand] = {}
    rig = Rig(plan=one_fault("Start", FaultKind.RESPONSE_LOST), **durable_pair(durable))
    assert rig.run("run_command", {"command": "echo once"}).status == "uncertain"

    def unwritable(request: Any, owned: OwnedCommand) -> None:
        raise OSError("disk full")

    again = Rig(
        sim=rig.sim,
        resolve_owned_command=lambda request, task: durable.get(task),
        remember_owned_command=unwritable,
    )
    retry = again.run("run_command", {"command": "echo once"}, call_id="retry")
    assert retry.status == "uncertain", retry.content
    assert retry.content["task_id"] == rig.task_id()
    assert rig.sim.launches[rig.task_id()] == 1


def test_c4_an_unreadable_record_refuses_a_read_naming_the_record() -> None:
    """A read or stop whose ownership cannot be checked is refused before any
    sandbox call, and says the record was unavailable (not "not owned")."""
    durable: dict[str, OwnedCommand] = {}
    rig = Rig(**durable_pair(durable))
    launched = rig.run("run_command", {"command": "echo once", "background": True})
    assert launched.status == "ok"

    def unreadable(request: Any, task: str) -> OwnedCommand | None:
        raise OSError("the database is down")

    other = Rig(sim=rig.sim, resolve_owned_command=unreadable)
    before = len(rig.sim.effects_seen)
    read = other.run("read_command_output", {"task_id": rig.task_id()}, call_id="read")
    assert read.status == "error"
    assert read.content["executed"] is False
    assert read.content["error_type"] == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value
    assert len(rig.sim.effects_seen) == before


def test_c17_no_unkeyed_digest_of_env_values_reaches_the_record() -> None:
    """What reaches ``remember_owned_command`` (and so any
    durable record) holds no digest over the env values: its launch digest
    is the same whatever the value, so a wordlist has nothing to test against."""
    seen: list[OwnedCommand] = []
    digests = []
    for value in (SECRET, "another-value-123"):
        rig = Rig(remember_owned_command=lambda request, owned: seen.append(owned))
        arguments = {"command": "echo once", "env": {"API_TOKEN": value}}
        assert rig.run("run_command", arguments).status == "ok"
        digests.append(seen[-1].launch_digest)
    assert digests[0] == digests[1]
    assert digests[0] is not None


def test_c3_other_env_values_under_one_key_are_still_a_conflict() -> None:
    """C3 still holds for env values the record cannot tell apart: the
    sandbox's claim keeps the full request digest, so a retry of the key with
    another env value is a conflict, nothing launched a second time."""
    durable: dict[str, OwnedCommand] = {}
    rig = Rig(**durable_pair(durable))
    first = rig.run("run_command", {"command": "echo once", "env": {"API_TOKEN": SECRET}})
    assert first.status == "ok"
    other = {"command": "echo once", "env": {"API_TOKEN": "another-value-123"}}
    second = rig.run("run_command", other, call_id="c2")
    assert second.status == "error", second.content
    assert second.content["error_type"] == ErrorCode.OPERATION_CONFLICT.value
    assert rig.sim.launches[rig.task_id()] == 1


def test_c2_a_record_that_settles_a_race_makes_the_loser_expect_the_winner() -> None:
    """Two workers race one key: the record keeps the first start's ledger
    epoch, and answers the loser's write with it. When the sandbox's ledger
    was lost in between, the loser's start expects the winner's claim and
    launches nothing (``uncertain``), where a write that replaced the row
    would have launched a second time."""
    durable: dict[str, OwnedCommand] = {}
    winner = Rig(**durable_pair(durable))
    assert winner.run("run_command", {"command": "echo once"}).status == "ok"
    winner.sim.wipe_ledger("sbx-1")
    # The loser read the record before the winner wrote it (it saw no row),
    # and writes after: the record answers with the row as it stands.
    answered: list[OwnedCommand] = []

    def settle(request: Any, owned: OwnedCommand) -> OwnedCommand:
        known = durable.get(owned.task_id)
        from sandrail.records import merge_owned

        kept = merge_owned(known, owned)
        durable[owned.task_id] = kept
        answered.append(kept)
        return kept

    loser = Rig(
        sim=winner.sim,
        resolve_owned_command=lambda request, task: None,
        remember_owned_command=settle,
    )
    result = loser.run("run_command", {"command": "echo once"}, call_id="loser")
    assert answered, "the loser wrote its record"
    assert result.status == "uncertain", result.content
    assert winner.sim.launches[winner.task_id()] == 1


# -- the record's faults in the testing kit and the campaign ----------------------------


def test_c2_c5_the_judge_catches_a_launch_after_a_record_fault() -> None:
    """A database down under the world's durable record: the port keeps the
    contract, and the judge's record check would catch a core that launched
    after an unreadable record, or started after an unwritten one."""
    from sandrail.testing import World
    from sandrail.testing._record_faults import RecordFault, RecordFaultPlan, check_record_faults

    with World.simulated() as world:
        world.strike_record(RecordFaultPlan((RecordFault(occurrence=0, kind="record_down"),)))
        port = world.command_tools(durable_ownership=True)
        result = world.call(port, "run_command", {"command": "echo hi"}, key="op-1")
        assert result.status == "uncertain"
        assert world.violations() == []
        struck = world.calls[-1]
        assert struck.record_faults == [("resolve", "record_down")]
        struck.launched["task"] += 1  # as a core that launched anyway would have
        assert [v.line for v in check_record_faults(world, struck)] == ["C2"]
        struck.launched.clear()
        struck.record_faults.append(("remember", "record_down"))
        start = Start(
            sandbox_id="sbx-1",
            task_id="a" * 64,
            request_digest="d",
            command="echo hi",
            cwd=None,
            env=None,
            timeout_seconds=30,
            fence=None,
            expect_claim=False,
            claim_epoch=None,
        )
        struck.effects.append((start, None))
        assert [v.line for v in check_record_faults(world, struck)] == ["C5"]


def test_c2_every_record_fault_of_the_campaign_keeps_the_contract() -> None:
    """The campaign's record plans (each record operation of each workload,
    each kind): no violation, and every retry of an uncertain call decisive."""
    from sandrail._campaign._records import record_fault_runs, run_record_plan

    runs = record_fault_runs()
    assert {fault.kind for _, fault in runs} == {"record_down", "record_dropped", "record_slow"}
    retries = []
    for workload, fault in runs[::3]:
        outcome = run_record_plan(workload, fault)
        assert outcome.violations == (), (workload.name, fault, outcome.violations)
        retries += outcome.retries
    after_record_faults = [r for r in retries if r.kind.startswith("record_")]
    assert after_record_faults
    assert all(retry.status in ("ok", "error") for retry in after_record_faults)
