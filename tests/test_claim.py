"""The at-most-once claim's rule (C2, C3), read whole in
:mod:`sandrail.core._claim`: what a launch claims, what the port's record
keeps, which record answers a launch, and what a sandbox does with a start.
The end-to-end proofs (retries, restarts, wiped ledgers) are in
``test_ledger_epoch.py`` and the campaign; these pin each branch of the rule."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sandrail.core import (
    ClaimProof,
    LaunchClaim,
    OwnedCommand,
    RecordMatch,
    RememberOwned,
    SandboxReady,
    Start,
    claim_verdict,
    known_to_launch,
    launch_claim,
    remembered,
)

TASK = "a" * 64
READY = SandboxReady(sandbox_id="box-1", ledger_epoch="box-1/ledger-0", backend="e2b")


def _record(**changes: object) -> OwnedCommand:
    fields: dict[str, object] = {
        "task_id": TASK,
        "operation_key": "op-1",
        "sandbox_id": "box-1",
        "launched": True,
        "ledger_epoch": "box-1/ledger-0",
        "launch_digest": "digest-1",
    }
    fields.update(changes)
    return OwnedCommand(**fields)  # type: ignore[arg-type]


def _exactly(digest: str) -> Callable[[str | None], RecordMatch]:
    """A match by equality of the recorded digest (a row without one matches)."""

    def match(recorded: str | None) -> RecordMatch:
        return "same" if recorded in (None, digest) else "changed"

    return match


def _start(**changes: object) -> Start:
    fields: dict[str, object] = {
        "sandbox_id": "box-1",
        "task_id": TASK,
        "request_digest": "digest-1",
        "command": "true",
        "cwd": None,
        "env": None,
        "timeout_seconds": 5,
    }
    fields.update(changes)
    return Start(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "known",
    [None, "not a record", _record(task_id="b" * 64), _record(launched=False)],
    ids=["no-record", "junk", "other-task", "not-launched"],
)
def test_c2_a_first_start_claims_anew_under_the_epoch_of_now(known: object) -> None:
    assert launch_claim(known, TASK, READY, _exactly("digest-1")) == LaunchClaim(
        expect_claim=False, claim_epoch="box-1/ledger-0"
    )


def test_c2_a_start_after_one_that_may_have_left_expects_its_claim_under_its_epoch() -> None:
    known = _record(ledger_epoch="box-1/ledger-7")
    assert launch_claim(known, TASK, READY, _exactly("digest-1")) == LaunchClaim(
        expect_claim=True, claim_epoch="box-1/ledger-7"
    )


def test_c2_a_first_start_to_another_sandbox_proves_nothing_here() -> None:
    known = _record(sandbox_id="box-0")
    assert launch_claim(known, TASK, READY, _exactly("digest-1")) == LaunchClaim(
        expect_claim=True, claim_epoch=None
    )


def test_c3_a_start_asking_for_something_else_than_the_first_is_a_conflict() -> None:
    assert launch_claim(_record(), TASK, READY, _exactly("digest-2")) is None
    # A record without a digest (an older harness's) cannot tell: no conflict.
    assert launch_claim(_record(launch_digest=None), TASK, READY, _exactly("digest-2")) is not None


def test_c2_a_start_the_record_cannot_tell_from_the_first_only_expects_its_claim() -> None:
    """The masks changed since the first start was recorded, and no mask of
    now explains the digest (``unknown``): the start expects the first
    one's claim with no epoch to prove it never arrived, so the sandbox
    deduplicates or refuses it and launches nothing without a claim."""
    claim = launch_claim(_record(), TASK, READY, lambda recorded: "unknown")
    assert claim == LaunchClaim(expect_claim=True, claim_epoch=None)
    assert not ClaimProof(expect_claim=True, epoch=None).admits_unclaimed("box-1/ledger-0")


def _remember(**changes: object) -> RememberOwned:
    fields: dict[str, object] = {
        "task_id": TASK,
        "operation_key": "op-1",
        "sandbox_id": "box-1",
        "launched": True,
        "ledger_epoch": "box-1/ledger-9",
        "launch_digest": "digest-9",
    }
    fields.update(changes)
    return RememberOwned(**fields)  # type: ignore[arg-type]


def test_c2_the_record_keeps_the_first_start_s_epoch_and_digest() -> None:
    kept = remembered(_record(), _remember())
    assert (kept.ledger_epoch, kept.launch_digest, kept.launched) == (
        "box-1/ledger-0",
        "digest-1",
        True,
    )


def test_c2_a_launched_record_keeps_its_sandbox_epoch_and_digest() -> None:
    """A write from another sandbox (the first one lost) never moves a
    launched row: it keeps naming where the first start went, with the epoch
    that proves it there, and its digest."""
    first = _record(sandbox_id="box-0")
    kept = remembered(first, _remember())
    assert (kept.sandbox_id, kept.ledger_epoch, kept.launch_digest) == (
        "box-0",
        first.ledger_epoch,
        "digest-1",
    )
    unplaced = remembered(_record(sandbox_id=None), _remember())
    assert (unplaced.sandbox_id, unplaced.ledger_epoch) == ("box-1", "box-1/ledger-9")


def test_c2_launched_never_goes_back_and_a_first_record_is_taken_whole() -> None:
    assert remembered(_record(), _remember(launched=False)).launched is True
    fresh = remembered(None, _remember())
    assert (fresh.ledger_epoch, fresh.launch_digest) == ("box-1/ledger-9", "digest-9")
    unlaunched = remembered(_record(launched=False), _remember())
    assert unlaunched.ledger_epoch == "box-1/ledger-9"


def test_c4_an_ownership_check_is_the_harness_s_to_answer() -> None:
    mine, theirs = _record(), _record(launched=False)
    assert known_to_launch(mine, theirs, for_launch=False) is theirs
    assert known_to_launch(mine, None, for_launch=False) is None
    assert known_to_launch(mine, "junk", for_launch=False) is None


def test_c2_for_a_launch_the_record_that_knows_a_start_may_have_left_answers() -> None:
    mine, theirs = _record(), _record(launched=False)
    assert known_to_launch(mine, theirs, for_launch=True) is mine
    assert known_to_launch(mine, None, for_launch=True) is mine
    assert known_to_launch(None, theirs, for_launch=True) is theirs
    both = _record(ledger_epoch="theirs")
    assert known_to_launch(mine, both, for_launch=True) is both


@pytest.mark.parametrize(
    ("expect_claim", "epoch", "ledger", "admitted"),
    [
        (False, None, "e-1", True),  # a first start: nothing may have left
        (False, "e-1", "e-1", True),  # a first start under the epoch of now
        (False, "e-1", "e-2", False),  # the ledger was lost since: a held copy
        (True, "e-1", "e-1", True),  # expected, and the ledger proves it never came
        (True, "e-1", "e-2", False),  # expected, and the proof is gone
        (True, None, "e-1", False),  # expected, and no proof at all
        (True, "e-1", None, False),  # a sandbox that cannot tell its epoch
    ],
)
def test_c2_a_sandbox_launches_an_unclaimed_task_only_with_proof(
    expect_claim: bool, epoch: str | None, ledger: str | None, admitted: bool
) -> None:
    proof = ClaimProof(expect_claim=expect_claim, epoch=epoch)
    assert proof.admits_unclaimed(ledger) is admitted
    start = _start(expect_claim=expect_claim, claim_epoch=epoch)
    assert claim_verdict(start, None, ledger) == ("launch" if admitted else "claim_lost")


def test_c2_c3_a_claimed_task_is_a_retry_or_a_conflict_whatever_the_proof() -> None:
    start = _start(expect_claim=True, claim_epoch=None)
    assert claim_verdict(start, "digest-1", "e-1") == "deduplicated"
    assert claim_verdict(start, "digest-2", "e-1") == "conflict"
