"""The wire campaign (``sandrail simulate --backend local-e2b``): single
faults struck on the wire between the unmodified SDK and local-e2b, judged
by the server's ground truth with the kit's judge. A small campaign runs
here, through the command line; ``sandrail simulate --backend local-e2b``
runs the default (240 plans) by hand (README: how long it takes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from click.testing import CliRunner

from sandrail._campaign._wire import (
    NO_WIRE_EQUIVALENT,
    TRANSIENT_WIRE_KINDS,
    WIRE_KINDS,
    WireKind,
    WirePlan,
    wire_plans,
)
from sandrail.cli.simulate import simulate
from sandrail.interpreters.simulator import FaultKind
from sandrail.testing import TRANSIENT_KINDS
from sandrail.testing._plans import workloads
from tests.e2b_world import needs_root

SLOTS = {
    ("agent", "run_command foreground"): (("Ensure", 0), ("Start", 0), ("Wait", 0)),
    ("native", "run_command background"): (("Start", 0), ("Read", 1), ("Cancel", 0)),
}


def test_every_campaign_kind_is_struck_on_the_wire_or_says_why_not() -> None:
    mapped = {mapping.stands_for for mapping in WIRE_KINDS.values()}
    assert mapped | set(NO_WIRE_EQUIVALENT) == set(FaultKind)
    assert not mapped & set(NO_WIRE_EQUIVALENT)
    assert set(WIRE_KINDS) == set(WireKind)
    # A wire kind is held to decisiveness exactly when the kind it stands
    # for is (a dead sandbox or a lost ledger take the evidence with them).
    for kind, mapping in WIRE_KINDS.items():
        assert (kind in TRANSIENT_WIRE_KINDS) == (mapping.stands_for in TRANSIENT_KINDS)


def test_plans_are_reproducible_and_every_kind_takes_its_turn() -> None:
    every = wire_plans(SLOTS, count=None)
    assert len(every) == 6 * (len(WireKind) + 1)  # a wipe before and after
    drawn = wire_plans(SLOTS, count=20, seed=3)
    assert drawn == wire_plans(SLOTS, count=20, seed=3)
    assert drawn != wire_plans(SLOTS, count=20, seed=4)
    assert len(set(drawn)) == 20
    turns = Counter(plan.fault.kind for plan in drawn)
    assert set(turns) == set(WireKind)
    assert max(turns.values()) - min(turns.values()) <= 1
    assert all(isinstance(plan, WirePlan) for plan in drawn)


@pytest.mark.parametrize(
    "arguments",
    [
        ["--backend", "local-e2b", "--schedules", "5"],
        ["--backend", "local-e2b", "--shard", "0/2"],
        ["--backend", "local-e2b", "--no-mutants"],
        ["--plans", "5"],
    ],
)
def test_options_of_the_other_backend_are_a_usage_error(arguments: list[str]) -> None:
    result = CliRunner().invoke(simulate, arguments)
    assert result.exit_code == 2
    assert "only" in result.output


@needs_root
@pytest.mark.long
def test_a_small_wire_campaign_has_no_violation_and_decisive_retries() -> None:
    """C2-C18 on the wire: 12 plans (every wire kind takes its turn), every
    call judged by the server's ground truth; retries after transient faults
    decisive. Two workers, as on CI's two cores (about half a minute)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("E2B_")}
    done = subprocess.run(
        [
            *(sys.executable, "-m", "sandrail", "simulate", "--backend", "local-e2b"),
            *("--plans", "12", "--workers", "2", "--seed", "1", "--json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    report = json.loads(done.stdout)
    assert done.returncode == 0, (report["violations"], report["failures"], done.stderr[-2000:])
    assert report["passed"] is True
    assert report["planned"] == 12
    assert report["plans"] >= 11, report  # a plan whose fault never struck is counted apart
    # One fault-free run of every workload, in each owner mode.
    assert report["fault_free_runs"] == len(workloads("agent")) + len(workloads("native"))
    assert sum(report["violations"].values()) == 0
    struck = {kind for kind, cells in report["coverage"].items() if sum(cells.values())}
    assert len(struck) >= len(WireKind) - 1, struck
    assert report["decisive"]["share"] >= 0.99, report["undecided_plans"]
