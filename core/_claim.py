"""The at-most-once claim (C2): the whole rule, in one place.

A task (one operation key of one session and owner) may launch at most
once, ever: across retries, concurrent duplicates, a start held in the
network and delivered late, harness restarts, and a command that deletes
the sandbox's ledger. Two ledgers keep that promise together:

- **the ownership record**, on the harness's side: the port's own, and the
  harness's durable one when it keeps one (``remember_owned_command`` /
  ``resolve_owned_command``). Before a start may leave, the launch program
  records that it may (``launched``), with the sandbox's **ledger epoch** at
  that moment and what the start asks for (its launch digest). The first
  such record of a task is never replaced by a later one
  (:func:`remembered`): the epoch and the digest stay those of the first
  start that may have left.
- **the sandbox's ledger** of claims: a start claims its task atomically; a
  second start of the same task finds the claim and launches nothing
  (the same digest: the first launch's state; another: ``conflict``, C3).

The ownership record is trusted only as far as it answers: a record that
cannot be read could hide a start that may have left, so the launch is then
``uncertain``, never a launch; one that cannot be written means the start
never leaves. And a record that settles races (one row per task, many
workers) answers the write with its row as it stands: a start another
writer recorded first is expected like one read (:func:`settled_claim`).

The epoch closes the gap between them. Once a start may have left, every
later start of the task expects its claim (:func:`launch_claim`). A sandbox
that holds no claim of the task launches it only if it can prove its ledger
never held one (:meth:`ClaimProof.admits_unclaimed`): its ledger is still of
the epoch the first start was sent under (a claim made since would still be
there), or, without an epoch, no start may have left before. Otherwise it
launches nothing (``claim_lost``) and the call is ``uncertain``: a lost
answer, a crash or a wiped ledger never turns a retry, or a late copy of
the first start, into a second launch.

Who calls what: the launch program (:mod:`._launch`) asks
:func:`launch_claim` before every start, and :func:`settled_claim` once the
record answered; the port answers ``ResolveOwned``
and ``RememberOwned`` with :func:`known_to_launch` and :func:`remembered`
(:func:`merged` is also every durable record's rule, :mod:`sandrail.records`);
a sandbox answers a start with :func:`claim_verdict` (the simulator) or
applies the same :class:`ClaimProof` in its own launcher (the E2B backend,
whose launcher is a shell program in the sandbox).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs

from ._effects import OwnedCommand, RememberOwned, SandboxReady, Start
from ._recorded import RecordMatch

__all__ = [
    "ClaimProof",
    "ClaimVerdict",
    "LaunchClaim",
    "asked",
    "claim_proof",
    "claim_verdict",
    "known_to_launch",
    "launch_claim",
    "merged",
    "remembered",
    "settled_claim",
]


@attrs.frozen
class LaunchClaim:
    """What a start of a task must carry: whether a start of it may already
    have left (``expect_claim``) and the ledger epoch that can prove it never
    arrived (``claim_epoch``; ``None``: no proof here)."""

    expect_claim: bool
    claim_epoch: str | None


def launch_claim(
    known: object,
    task_id: str,
    ready: SandboxReady,
    match: Callable[[str | None], RecordMatch],
) -> LaunchClaim | None:
    """The claim the next start of ``task_id`` makes in the sandbox
    ``ready``, given what the ownership record ``known`` says and what
    ``match`` makes of its recorded digest (:func:`~sandrail.core._recorded.record_match`
    of the call's arguments); ``None`` when the task's first start visibly
    asked for something else (``changed``; C3: a conflict, refused before
    anything is sent, since that start may still arrive).

    - No start may have left: the claim is new, proven by the sandbox's
      epoch of now.
    - One may have: expect its claim; the first start's epoch proves it
      never arrived, if it went to this very sandbox (else no proof).
    - One may have, and the record cannot tell whether it asked for this
      call (``unknown``: the masks changed): expect its claim with no
      proof, so the sandbox's ledger decides (the same call deduplicated,
      another a conflict) and launches nothing without a claim.
    """
    launched = known if isinstance(known, OwnedCommand) and known.task_id == task_id else None
    if launched is None or not launched.launched:
        return LaunchClaim(expect_claim=False, claim_epoch=ready.ledger_epoch)
    verdict = match(launched.launch_digest)
    if verdict == "changed":
        return None
    same_sandbox = launched.sandbox_id == ready.sandbox_id
    epoch = launched.ledger_epoch if same_sandbox and verdict == "same" else None
    return LaunchClaim(expect_claim=True, claim_epoch=epoch)


def settled_claim(
    claim: LaunchClaim,
    kept: object,
    task_id: str,
    ready: SandboxReady,
    match: Callable[[str | None], RecordMatch],
) -> LaunchClaim | None:
    """``claim`` once the record answered its write with ``kept`` (its row
    as it stands, or ``None``): when another writer's start of the task was
    recorded first, in another sandbox or under another epoch, that start
    is expected as one read would be (:func:`launch_claim` of ``kept``;
    ``None``: a conflict, C3)."""
    if (
        isinstance(kept, OwnedCommand)
        and kept.task_id == task_id
        and kept.launched
        and (kept.sandbox_id, kept.ledger_epoch) != (ready.sandbox_id, claim.claim_epoch)
    ):
        return launch_claim(kept, task_id, ready, match)
    return claim


def known_to_launch(
    mine: OwnedCommand | None, theirs: object, *, for_launch: bool
) -> OwnedCommand | None:
    """The record that answers ``ResolveOwned``: ``mine`` is the port's own,
    ``theirs`` what the harness's ``resolve_owned_command`` returned.

    An ownership check (``for_launch`` false) is the harness's to answer.
    For a launch, whether a start may have left is the port's knowledge as
    much as the harness's: the record that knows more (it says
    ``launched`` where the other does not, or the other has none) answers.
    """
    owned = theirs if isinstance(theirs, OwnedCommand) else None
    if not for_launch or mine is None:
        return owned
    knows_more = owned is None or (mine.launched and not owned.launched)
    return mine if knows_more else owned


def merged(known: OwnedCommand | None, new: OwnedCommand) -> OwnedCommand:
    """The row a record keeps when ``new`` is written over ``known`` (the
    port's own record, and every durable one, :mod:`sandrail.records`):
    once a start of the task may have left, the ledger epoch it was sent
    under stays while the sandbox stays the same, and so does what it asked
    for (its launch digest): a later or concurrent writer must not replace
    the proof the first start carries (C2) nor its arguments (C3).
    ``launched`` never goes back to false. Nor does the sandbox it went
    to: a retry in a new sandbox (the first one lost) cannot launch there
    (its start expects the claim), so the row keeps naming the sandbox where
    the command may have run, for the locator and the operator."""
    if known is None or not known.launched:
        return new
    stays = known.sandbox_id is not None or new.sandbox_id is None
    sandbox_id = known.sandbox_id if stays else new.sandbox_id
    epoch = known.ledger_epoch if stays else new.ledger_epoch
    digest = known.launch_digest if known.launch_digest is not None else new.launch_digest
    return OwnedCommand(
        task_id=new.task_id,
        operation_key=new.operation_key,
        sandbox_id=sandbox_id,
        launched=True,
        ledger_epoch=epoch,
        launch_digest=digest,
    )


def asked(effect: RememberOwned) -> OwnedCommand:
    """The row ``effect`` asks a record to keep, as it asks for it."""
    return OwnedCommand(
        task_id=effect.task_id,
        operation_key=effect.operation_key,
        sandbox_id=effect.sandbox_id,
        launched=effect.launched,
        ledger_epoch=effect.ledger_epoch,
        launch_digest=effect.launch_digest,
    )


def remembered(known: OwnedCommand | None, effect: RememberOwned) -> OwnedCommand:
    """The row to keep after ``effect`` where ``known`` is the one kept so
    far: :func:`merged` of what it asks."""
    return merged(known, asked(effect))


@attrs.frozen
class ClaimProof:
    """What a start tells the sandbox about its task's claim (from
    :func:`claim_proof`): whether a start of it may already have left, and
    the ledger epoch under which the first one did."""

    expect_claim: bool
    epoch: str | None

    def admits_unclaimed(self, ledger_epoch: str | None) -> bool:
        """Whether a sandbox whose ledger holds no claim of the task, and is
        of epoch ``ledger_epoch``, may launch it: only if that proves the
        ledger never held one. The E2B launcher applies this same rule in
        the sandbox (its ``never_claimed``)."""
        if self.epoch is not None:
            return self.epoch == ledger_epoch
        return not self.expect_claim


def claim_proof(start: Start) -> ClaimProof:
    """The proof ``start`` carries (see :class:`ClaimProof`)."""
    return ClaimProof(expect_claim=start.expect_claim, epoch=start.claim_epoch)


ClaimVerdict = Literal["launch", "deduplicated", "conflict", "claim_lost"]


def claim_verdict(
    start: Start, claimed_digest: str | None, ledger_epoch: str | None
) -> ClaimVerdict:
    """What a sandbox does with ``start`` (C2, C3), given the digest its
    ledger holds for the task (``None``: no claim) and its ledger's epoch:
    the same digest is a retry (``deduplicated``: nothing runs), another is
    a ``conflict``; no claim launches only when :class:`ClaimProof` admits
    it, else ``claim_lost``."""
    if claimed_digest is not None:
        return "deduplicated" if claimed_digest == start.request_digest else "conflict"
    return "launch" if claim_proof(start).admits_unclaimed(ledger_epoch) else "claim_lost"
