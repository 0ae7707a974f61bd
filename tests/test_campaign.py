"""The campaign's checker is itself tested (issue 6): every mutant is caught
by its named check, a clean core passes, a failing plan round-trips through
its saved recording, and ``sandrail simulate`` reports and exits as promised."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from click.testing import CliRunner

from sandrail._campaign import (
    CONTRACT_LINES,
    MUTANTS,
    Mutant,
    random_schedule,
    run_campaign,
    run_mutant,
    run_schedule,
    run_workload,
    workloads,
)
from sandrail._campaign import _runner as runner
from sandrail.cli import main
from sandrail.interpreters.replay import ResultEntry, load_cassette, replay_file
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_is_caught_by_its_named_check(mutant: Mutant) -> None:
    """C2, C4, C5, C9, C10, C14: each broken core trips the line it breaks."""
    result = run_mutant(mutant)
    assert result.caught_by == mutant.expected, result


def test_mutants_are_restored_after_their_run() -> None:
    """A mutant's patch ends with its run: the core is clean again."""
    workload = workloads("agent")[0]
    plan = FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),))
    for mutant in MUTANTS:
        run_mutant(mutant)
    assert run_workload(workload, plan).violations == ()


def test_clean_core_passes() -> None:
    """Every single-fault plan and a few schedules: no violation at all."""
    report = run_campaign(schedules=20, mutants=False)
    assert report.calls > 5_000
    assert not sum(report.violations.values()), report.failures


def test_c9_regression_authority_lost_during_a_refused_start_is_uncertain() -> None:
    """The first campaign run's minimal failing plan, pasted back in: the
    sandbox refused the Start (same key, other arguments) while the caller
    lost its authority; the guard after that step must report uncertain."""
    workload = next(w for w in workloads("agent") if w.name == "run_command foreground")
    plan = FaultPlan(
        (Fault(effect="Start", occurrence=2, kind=FaultKind.AUTHORITY_LOST, when="before"),)
    )
    assert run_workload(workload, plan).violations == ()


@contextlib.contextmanager
def _mutant(name: str) -> Iterator[None]:
    with next(m for m in MUTANTS if m.name == name).patch():
        yield


def test_failing_plan_round_trips_through_its_recording(tmp_path: Path) -> None:
    """A plan that breaks C5 (under a mutant) is saved as cassettes that
    replay_file re-runs to the very same results."""
    workload = workloads("agent")[0]
    plan = FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),))
    with _mutant("maybe_sent_not_executed"):
        outcome = run_workload(workload, plan, record_dir=tmp_path)
        assert "C5" in {v.line for v in outcome.violations}
        recordings = sorted(tmp_path.iterdir())
        assert recordings
        for path in recordings:
            report = replay_file(path)
            recorded = [r.result["status"] for r in load_cassette(path).calls if r.result]
            replayed = [
                entry.result["status"]
                for entry in report.transcript
                if isinstance(entry, ResultEntry)
            ]
            assert replayed == recorded
    assert "error" in recorded  # the C5 lie: error, though the command launched


def test_schedules_are_fixed_by_their_seed() -> None:
    """The same seed and index give the same schedule and the same verdict."""
    first, again = random_schedule(7, 3), random_schedule(7, 3)
    assert first == again
    assert run_schedule(first).violations == run_schedule(again).violations
    assert random_schedule(8, 3) != first


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["simulate", *args])
    return result.exit_code, result.output


def test_json_output_shape() -> None:
    code, output = _invoke("--json", "--schedules", "3", "--seed", "5")
    report = json.loads(output)
    assert set(report) >= {
        "passed",
        "seed",
        "schedules",
        "plans",
        "calls",
        "violations",
        "coverage",
        "reconciled",
        "mutants",
        "failures",
        "elapsed_seconds",
    }
    assert report["seed"] == 5
    assert report["schedules"] == 3
    assert list(report["violations"]) == list(CONTRACT_LINES)
    assert set(report["coverage"]) == {kind.value for kind in FaultKind}
    assert report["mutants"]["caught"] == report["mutants"]["total"] == len(MUTANTS)
    assert code == (0 if report["passed"] else 1)


def test_exit_status_is_one_when_a_mutant_survives() -> None:
    """A mutant that breaks nothing survives: the campaign fails."""
    harmless = Mutant("harmless", "changes nothing", "C2", contextlib.nullcontext)
    with mock.patch.object(runner, "MUTANTS", (harmless,)):
        code, output = _invoke("--json", "--schedules", "0")
    report = json.loads(output)
    assert report["mutants"]["results"][0]["caught_by"] is None
    assert code == 1


def test_a_violation_prints_its_plan_and_replay_command(tmp_path: Path) -> None:
    """Exit 1, the minimal plan, and a cassette path ``sandrail replay`` accepts."""
    with _mutant("relaunch_after_uncertain"):
        code, output = _invoke("--schedules", "0", "--failures-dir", str(tmp_path))
    assert code == 1
    assert "C2 violated" in output
    assert "minimal failing plan" in output
    assert "sandrail replay" in output
    assert any(tmp_path.rglob("*.jsonl"))


def test_c6_an_error_after_a_stop_that_may_have_arrived_is_caught() -> None:
    """The review's case: a Cancel whose answer was lost may have killed the
    command; under the maybe_sent_not_executed mutant the stop reports an
    error, and the C6 check says so (no launch is involved, so C5 cannot)."""
    workload = next(w for w in workloads("agent") if w.name == "run_command background")
    plan = FaultPlan((Fault(effect="Cancel", kind=FaultKind.RESPONSE_LOST),))
    assert run_workload(workload, plan).violations == ()
    with _mutant("maybe_sent_not_executed"):
        lines = {v.line for v in run_workload(workload, plan).violations}
    assert "C6" in lines


def test_a_run_without_mutants_does_not_pass() -> None:
    """A campaign that never showed its checks can fail proves nothing:
    --no-mutants reports passed false and exits 1."""
    result = CliRunner().invoke(main, ["simulate", "--no-mutants", "--schedules", "1", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["passed"] is False
