"""Conformance through the kit: ``sandrail.testing``'s scenarios and its
small fault campaign, judged against each world's ground truth, on the
simulator and on the E2B interpreter through the unmodified SDK against
local-e2b (real HTTP, real bash), each scenario in both owner modes.

Fidelity: every scenario's results on E2B must equal the simulator's, call
by call, status and content, with one field set aside:

- ``sandbox_id``: the simulator names sandboxes ``sbx-1``, ``sbx-2``, ...;
  E2B gives random ids. Both are opaque handles the harness only echoes
  back. One thing depends on them: the byte budget (C12) counts the id, so
  where presentation text is cut to fit, E2B's longer id leaves exactly
  that many bytes less of it
  (:func:`test_c12_big_output_is_cut_to_the_budget_alike` checks that, and
  nothing more, differs).

One scenario, ``c2_no_fresh_sandbox_after_the_old_one_died``, also sets
aside the ``error_type`` of an ``uncertain`` result: it says where the
sandbox's death was noticed. The simulator knows at once, so the repeat's
``Ensure`` fails (``e2b_sandbox_outcome_unknown``); a real backend learns it
when a call there fails, after its ``Ensure`` (``e2b_command_evidence_incomplete``).
Both are ``uncertain`` with the same instruction; the status and the rest
are compared.

No timing field exists in these results, so nothing else is set aside. The
simulator plays the kit's commands from ``sandrail.testing.SCRIPTS`` (what
real bash prints); the E2B run checks that claim. E2B's ground truth counts
real launches per task id by marks its commands send to the server
(``sandrail.local_e2b.e2b_target``). Live E2B is ``test_e2b_live.py``'s.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

import sandrail
from sandrail.core._budget import parse_omissions
from sandrail.interpreters.e2b import E2BTransport
from sandrail.local_e2b import LocalE2B, e2b_target
from sandrail.testing import BackendConformance, Strike, Target, World, simulator_target
from sandrail.testing._calls import Mode
from sandrail.testing._scenarios import Scenario
from sandrail.testing.conformance import run_scenario
from tests.e2b_world import needs_root, server_fixture

SET_ASIDE = ("sandbox_id", "backend")
"""Fields compared by presence only (see the module doc)."""

server = server_fixture()

View = tuple[str, dict[str, Any], dict[str, Any] | None]


def view(result: sandrail.ToolResult) -> View:
    """The result as compared: ids set aside keep only their presence."""
    content = {
        key: ("<set aside>" if key in SET_ASIDE and value else value)
        for key, value in result.content.items()
    }
    ref = result.background_command_ref
    return result.status, content, None if ref is None else dict(ref.to_dict())


def views(world: World, *, uncertain_why: bool = True) -> list[View]:
    """Every result's view; without ``uncertain_why``, an ``uncertain``
    result's ``error_type`` set aside too (see the module doc)."""
    results = [record.result for record in world.calls]
    assert all(result is not None for result in results)
    found = [view(result) for result in results if result is not None]
    if uncertain_why:
        return found
    return [
        (
            status,
            {**content, "error_type": "<set aside>"} if status == "uncertain" else content,
            ref,
        )
        for status, content, ref in found
    ]


NOTICED_LATER = frozenset({"c2_no_fresh_sandbox_after_the_old_one_died"})
"""Scenarios where a real backend notices a killed sandbox later than the
simulator (see the module doc)."""


class TestSimulatorConformance(BackendConformance):
    """The reference: the kit's scenarios and campaign on the simulator."""

    def make_target(self) -> Target:
        return simulator_target()


@needs_root
class TestE2BConformance(BackendConformance):
    """The E2B interpreter on local-e2b: the kit's scenarios (both owner
    modes), each also compared with the simulator's results (fidelity), and
    a small campaign of the kit's faults in front of it (the wire campaign,
    ``sandrail simulate --backend local-e2b``, strikes the wire itself)."""

    campaign_plans: ClassVar[int | None] = 16
    server: LocalE2B

    @pytest.fixture(autouse=True)
    def _on(self, server: LocalE2B) -> None:
        self.server = server

    def make_target(self) -> Target:
        return e2b_target(self.server, request_timeout_seconds=5)

    def check_scenario(self, scenario: Scenario, owner: Mode, world: World) -> None:
        reference = run_scenario(simulator_target, scenario, owner=owner)
        why = scenario.name not in NOTICED_LATER
        assert views(world, uncertain_why=why) == views(reference, uncertain_why=why), (
            f"local-e2b differs from the simulator ({owner})"
        )


@needs_root
class TestE2BTransportUnderFaults(BackendConformance):
    """The scenarios and a campaign with the kit's faults struck on the E2B
    transport itself (``wrap_transport``: the launcher's calls through the
    SDK), so E2B's own failure handling meets every kind of fault, and the
    transport's failure table answers failures made for real in a local-e2b
    sandbox."""

    campaign_plans: ClassVar[int | None] = 16
    server: LocalE2B

    @pytest.fixture(autouse=True)
    def _on(self, server: LocalE2B) -> None:
        self.server = server

    def make_target(self, strike: Strike) -> Target:
        return e2b_target(self.server, strike, request_timeout_seconds=5)

    def test_the_faults_strike_the_e2b_transport_itself(self) -> None:
        struck: list[object] = []

        def strike(upstream: Any) -> Any:
            struck.append(upstream)
            return upstream

        e2b_target(self.server, strike).close()
        assert [type(upstream) for upstream in struck] == [E2BTransport]


@needs_root
@pytest.mark.parametrize("mode", ["agent", "native"])
def test_c12_big_output_is_cut_to_the_budget_alike(server: LocalE2B, mode: Mode) -> None:
    """The one difference the sandbox id makes: the cut keeps as many
    bytes fewer of the output as E2B's id is longer; the rest agrees."""
    full = "".join(f"{n}\n" for n in range(1, 20001))
    seen: dict[str, View] = {}
    ids: dict[str, str] = {}
    for name, target in (
        ("simulator", simulator_target),
        ("local-e2b", lambda: e2b_target(server)),
    ):
        with World.on(target) as world:
            port = world.command_tools(owner=mode, max_output_bytes=4_000)
            result = world.call(port, "run_command", {"command": "seq 20000"}, key="k1")
            world.assert_contract()
        ids[name] = result.content["sandbox_id"] + result.content["backend"]
        assert len(sandrail.core.canonical_json(result.content)) <= 4_000
        seen[name] = view(result)
    kept: dict[str, int] = {}
    for name, (status, content, _) in seen.items():
        assert (status, content["stdout_bytes"]) == ("ok", len(full))
        shown = content.pop("stdout")
        (marker,) = parse_omissions(shown)
        head, omitted, tail = shown[: marker.start], marker.omitted_bytes, shown[marker.end :]
        assert full.startswith(head)
        assert full.endswith(tail)
        assert len(head) + int(omitted) + len(tail) == len(full)
        kept[name] = len(sandrail.core.canonical_json(head + tail))
    assert seen["simulator"] == seen["local-e2b"]
    # Counted as the budget counts (canonical JSON: a newline is 2 bytes); a
    # cut never splits an escape, so the text may keep 1 byte less still.
    # (The id and the backend label together: both count in the budget.)
    longer = len(ids["local-e2b"]) - len(ids["simulator"])
    assert longer <= kept["simulator"] - kept["local-e2b"] <= longer + 1
