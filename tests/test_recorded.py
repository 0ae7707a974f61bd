"""What an ownership record keeps of a launch and what a retry is against it
(:mod:`sandrail.core._recorded`): a value masked after the call, or masked
in one life and not the next, never turns the same call into a conflict
(C2, C6), and a visible change stays one, decided from the record (C3)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sandrail
from sandrail.core import (
    REDACTED,
    Effect,
    Start,
    StartRefused,
    recorded_digest,
    recorded_match,
)
from sandrail.core._recorded import MASKED_SUFFIX, MAX_SUBSET_VALUES
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan, Script, Simulator
from sandrail.records import OwnershipRecord, SQLiteRecord
from sandrail.testing import World

TOKEN = "tok_live_4f9a8b7c6d"
OTHER = "tok_live_0000000000"
COMMAND = {"command": f"printf %s {TOKEN} > /tmp/x"}


# ---------------------------------------------------------------------------
# The digest and the match, directly


def test_c17_the_recorded_digest_is_marked_only_when_its_text_shows_a_session_mask() -> None:
    plain = recorded_digest("run_command", COMMAND)
    assert not plain.endswith(MASKED_SUFFIX)
    masked = recorded_digest("run_command", COMMAND, [TOKEN])
    assert masked.endswith(MASKED_SUFFIX)
    # The same whatever the value (the mark says where a marker stands).
    assert masked == recorded_digest(
        "run_command", {"command": f"printf %s {OTHER} > /tmp/x"}, [OTHER]
    )
    # Its own env value in the text is masked in every life: no mark.
    own = {"command": f"./deploy.sh {TOKEN}", "env": {"T": TOKEN}}
    assert not recorded_digest("run_command", own, [TOKEN]).endswith(MASKED_SUFFIX)
    # A session value the text does not hold: no mark.
    assert recorded_digest("run_command", {"command": "true"}, [TOKEN]) == recorded_digest(
        "run_command", {"command": "true"}
    )


def test_c2_a_value_masked_after_the_call_still_matches_its_recorded_digest() -> None:
    first = recorded_digest("run_command", COMMAND)  # TOKEN not yet masked
    assert recorded_match(first, "run_command", COMMAND, [TOKEN, "x" * 12]) == "same"
    assert recorded_match(first, "run_command", COMMAND) == "same"
    assert recorded_match(None, "run_command", {"command": "other"}) == "same"


def test_c3_a_visible_change_is_changed_whatever_the_masks_of_now() -> None:
    first = recorded_digest("run_command", COMMAND)
    changed = {"command": f"printf %s {TOKEN} > /tmp/y"}
    assert recorded_match(first, "run_command", changed) == "changed"
    assert recorded_match(first, "run_command", changed, [TOKEN]) == "changed"
    own = {"command": f"./deploy.sh {TOKEN}", "env": {"T": TOKEN}}
    kept = recorded_digest("run_command", own, [TOKEN])
    forced = {"command": f"./deploy.sh --force {TOKEN}", "env": {"T": TOKEN}}
    assert recorded_match(kept, "run_command", forced, [TOKEN]) == "changed"


def test_c6_a_value_masked_then_and_not_now_leaves_the_record_unable_to_tell() -> None:
    first = recorded_digest("run_command", COMMAND, [TOKEN])
    assert recorded_match(first, "run_command", COMMAND, [TOKEN]) == "same"
    assert recorded_match(first, "run_command", COMMAND) == "unknown"
    # Even a visible change: the record alone cannot tell it from masking.
    assert recorded_match(first, "run_command", {"command": "printf %s other"}) == "unknown"


def test_c2_more_masked_values_than_are_tried_still_never_give_a_wrong_answer() -> None:
    values = [f"value-{n:04d}-secret" for n in range(MAX_SUBSET_VALUES + 1)]
    arguments = {"command": "echo " + " ".join(values)}
    first = recorded_digest("run_command", arguments, values[:1])
    assert first.endswith(MASKED_SUFFIX)
    # Too many subsets to try: the record cannot tell, it never says "changed".
    assert recorded_match(first, "run_command", arguments, values) == "unknown"
    # A first call that masked nothing is still told from the text alone.
    unmasked = recorded_digest("run_command", arguments)
    assert recorded_match(unmasked, "run_command", arguments, values) == "same"
    other = {"command": "echo " + " ".join(reversed(values))}
    assert recorded_match(unmasked, "run_command", other, values) == "changed"


# ---------------------------------------------------------------------------
# One life: a value masked after the call


def test_c2_an_uncertain_call_whose_value_a_later_call_masks_is_deduplicated_on_retry() -> None:
    """The call's command holds a value that a later call passes in env:
    its retry under the same key is the same call (deduplicated, nothing
    launched again), never a conflict that says nothing ran."""
    lost = [Fault(effect="Start", occurrence=0, kind=FaultKind.RESPONSE_LOST)]
    scripts = {COMMAND["command"]: Script.prints(""), "true": Script.prints("")}
    with World.simulated(lost, scripts=scripts) as world:
        tools = world.toolset()
        first = tools.call_sync("run_command", COMMAND, call_id="c1", operation_key="run:c1")
        assert first.status == "uncertain"
        env = {"command": "true", "env": {"TOK": TOKEN}}
        later = tools.call_sync("run_command", env, call_id="c2", operation_key="run:c2")
        assert later.status == "ok"
        again = tools.call_sync("run_command", COMMAND, call_id="c1", operation_key="run:c1")
        assert (again.status, again.content["deduplicated"]) == ("ok", True), again.content
        assert again.content["command"] == f"printf %s {REDACTED} > /tmp/x"
        assert world.launched_commands()[COMMAND["command"]] == 1
        world.assert_contract()


# ---------------------------------------------------------------------------
# Across a restart, with a durable record


class _Backend:
    """The same sandboxes seen by a new process: a backend object of its
    own (nothing the first life masked is remembered), counting starts."""

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.starts: list[Start] = []

    def __call__(self, effect: Effect) -> Any:
        if isinstance(effect, Start):
            self.starts.append(effect)
        return self.sim(effect)


def _life(backend: Any, record: OwnershipRecord, redact: tuple[str, ...] = ()) -> Any:
    return sandrail.Toolset(
        backend=backend,
        session_id="session-1",
        owner=sandrail.AgentOwner(agent_id="agent-1"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
        record=record,
        redact=redact,
        tools=("command",),
    )


@pytest.fixture
def record(tmp_path: Path) -> Iterator[SQLiteRecord]:
    opened = SQLiteRecord(tmp_path / "owned.sqlite")
    yield opened
    opened.close()


def _sim(fault: FaultKind = FaultKind.RESPONSE_LOST) -> Simulator:
    plan = FaultPlan((Fault(effect="Start", occurrence=0, kind=fault),))
    return Simulator(
        scripts={COMMAND["command"]: Script.prints(""), "true": Script.prints("")}, plan=plan
    )


def test_c2_after_a_restart_a_value_handed_back_that_was_learned_later_deduplicates(
    record: SQLiteRecord,
) -> None:
    """As ``docs/howto/secrets.md`` prescribes: the value became masked
    after the call (a later call passed it in env), the restarted harness
    hands it back with ``redact=``, and retries the uncertain call."""
    sim = _sim()
    first = _life(_Backend(sim), record)
    assert first.call_sync("run_command", COMMAND, call_id="c1", operation_key="k1").status == (
        "uncertain"
    )
    env = {"command": "true", "env": {"TOK": TOKEN}}
    assert first.call_sync("run_command", env, call_id="c2", operation_key="k2").status == "ok"
    again = _life(_Backend(sim), record, redact=(TOKEN,))
    result = again.call_sync("run_command", COMMAND, call_id="c1", operation_key="k1")
    assert (result.status, result.content["deduplicated"]) == ("ok", True), result.content
    assert sum(sim.launches.values()) == 2  # the command once, and `true`


def test_c6_after_a_restart_a_value_not_handed_back_leaves_the_sandbox_to_decide(
    record: SQLiteRecord,
) -> None:
    """The first life masked the value (``redact=``) in the call's text;
    the restarted harness does not hand it back. The record cannot tell
    the retry from another call: the start goes to the sandbox, whose
    ledger deduplicates the same call and refuses another (C3); a start
    the ledger never saw launches nothing (uncertain, C6)."""
    sim = _sim()
    first = _life(_Backend(sim), record, redact=(TOKEN,))
    assert first.call_sync("run_command", COMMAND, call_id="c1", operation_key="k1").status == (
        "uncertain"
    )
    again = _Backend(sim)
    second = _life(again, record)
    same = second.call_sync("run_command", COMMAND, call_id="c1", operation_key="k1")
    assert (same.status, same.content["deduplicated"]) == ("ok", True), same.content
    assert again.starts[-1].claim_epoch is None  # no proof: the ledger decides
    other = {"command": f"printf %s {TOKEN} > /tmp/y"}
    refused = second.call_sync("run_command", other, call_id="c3", operation_key="k1")
    assert refused.content["error_type"] == "e2b_command_operation_conflict"
    assert isinstance(sim(again.starts[-1]), StartRefused)
    assert sum(sim.launches.values()) == 1


def test_c6_after_a_restart_a_retry_the_record_cannot_tell_launches_nothing_unclaimed(
    record: SQLiteRecord,
) -> None:
    """The first start never arrived, so the ledger holds no claim: with no
    epoch to prove it never did, the retry is ``uncertain`` with its
    locator, not a conflict, and nothing launches."""
    sim = _sim(FaultKind.NOT_DELIVERED)
    first = _life(_Backend(sim), record, redact=(TOKEN,))
    first.call_sync("run_command", COMMAND, call_id="c1", operation_key="k1")
    second = _life(_Backend(sim), record)
    result = second.call_sync("run_command", COMMAND, call_id="c1", operation_key="k1")
    assert result.status == "uncertain", result.content
    assert result.content["operation_key"] == "k1"
    assert "task_id" in result.content
    assert sum(sim.launches.values()) == 0


def test_c6_on_local_e2b_a_retry_the_record_cannot_tell_is_decided_by_the_launcher(
    tmp_path: Path,
) -> None:
    """The same, through the E2B backend and its launcher on local-e2b: the
    first life masked the value (``redact=``), the restarted one does not.
    The launcher's ledger deduplicates the same call and refuses another;
    the command ran once."""
    from sandrail.interpreters.e2b import E2BBackend
    from sandrail.local_e2b import serve

    with serve() as server, SQLiteRecord(tmp_path / "owned.sqlite") as kept:
        command = {"command": f"{server.mark('deploy')}; echo deploying with {TOKEN}"}
        with E2BBackend(**server.sdk_options) as backend:
            first = _life(backend, kept, redact=(TOKEN,))
            done = first.call_sync("run_command", command, call_id="c1", operation_key="k1")
            assert done.status == "ok", done.content
        with E2BBackend(**server.sdk_options) as backend:
            second = _life(backend, kept)
            same = second.call_sync("run_command", command, call_id="c1", operation_key="k1")
            assert (same.status, same.content["deduplicated"]) == ("ok", True), same.content
            other = {"command": f"{server.mark('deploy')}; echo other {TOKEN}"}
            refused = second.call_sync("run_command", other, call_id="c2", operation_key="k1")
            assert refused.content["error_type"] == "e2b_command_operation_conflict"
        assert server.truth().marked("deploy") == 1
