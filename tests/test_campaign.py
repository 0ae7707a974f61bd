"""The campaign's checker is itself tested (issues 6, 12): every mutant is
caught by its named check, a clean core passes with decisive retries, a
failing plan round-trips through its saved recording, shards and workers add
up to the same campaign, and ``sandrail simulate`` reports and exits as
promised."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from click.testing import CliRunner

from sandrail import replay_file
from sandrail._campaign import (
    DECISIVE_GOAL,
    MUTANTS,
    CampaignReport,
    MergeError,
    Mutant,
    merge_reports,
    random_schedule,
    run_campaign,
    run_mutant,
    run_schedule,
    run_workload,
    total_steps,
    workloads,
)
from sandrail._campaign import _runner as runner
from sandrail.cli import main
from sandrail.core import TOOLS
from sandrail.interpreters.replay import ResultEntry, load_cassette
from sandrail.interpreters.simulator import Fault, FaultKind, FaultPlan
from sandrail.testing import CONTRACT_LINES, TRANSIENT_KINDS


def test_the_campaign_calls_every_tool_the_records_define() -> None:
    """A tool added to the table is not left out of the fault campaign: some
    workload of an owner mode calls it (a launching tool no written workload
    calls gets one from its record; any other tool's calls are asked for
    here)."""
    called = {
        step.tool
        for mode in ("agent", "native")
        for workload in workloads(mode)  # type: ignore[arg-type]
        for step in workload.steps
        if step.action == "call"
    }
    assert set(TOOLS) <= called, sorted(set(TOOLS) - called)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_each_mutant_is_caught_by_its_named_check(mutant: Mutant) -> None:
    """C2, C4, C5, C9, C10, C13, C14, C17, C18, and decisiveness: each broken
    core trips the line it breaks."""
    result = run_mutant(mutant)
    assert result.caught_by == mutant.expected, result


@pytest.mark.untraced
def test_mutants_are_restored_after_their_run() -> None:
    """A mutant's patch ends with its run: the core is clean again."""
    workload = workloads("agent")[0]
    plan = FaultPlan((Fault(effect="Start", kind=FaultKind.RESPONSE_LOST),))
    for mutant in MUTANTS:
        run_mutant(mutant)
    assert run_workload(workload, plan).violations == ()


@pytest.mark.untraced
def test_clean_core_passes_with_decisive_retries() -> None:
    """Every single-fault plan and a few schedules: no violation at all, and
    every retry after a transient fault says ok or error (C2: a retry with
    the same key returns the state of the first launch)."""
    report = run_campaign(schedules=20, mutants=False)
    assert report.calls > 5_000
    assert not sum(report.violations.values()), report.failures
    good, total = report.decisive()
    assert total > 500
    assert good == total, report.retry_reasons
    # Every transient kind leaves some call to reconcile (its retry then
    # decides it); a kind that never does is not exercised by a retry at all.
    for kind in TRANSIENT_KINDS:
        reconciled = report.reconciled.get(kind.value, {})
        assert sum(reconciled.values()) > 0, f"{kind}: no call it struck was reconciled"
    # Only the faults that destroy the evidence leave retries uncertain: a
    # wiped ledger, and a dead sandbox (whose launched tasks are uncertain,
    # never "nothing ran").
    assert set(report.retry_reasons) <= {
        FaultKind.LEDGER_WIPED.value,
        FaultKind.SANDBOX_DIES.value,
    }


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
    result = CliRunner().invoke(main, ["simulate", "--workers", "1", *args])
    return result.exit_code, result.output


def test_json_output_shape() -> None:
    # One shard of many keeps it quick; the shape is the same.
    code, output = _invoke("--json", "--schedules", "3", "--seed", "5", "--shard", "0/20")
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
        "decisive",
        "retry_steps",
        "uncertain_retries",
        "shard",
        "workers",
        "mutants",
        "failures",
        "elapsed_seconds",
    }
    assert report["seed"] == 5
    assert report["schedules"] == 3
    assert list(report["violations"]) == list(CONTRACT_LINES)
    # The record's faults are kinds of the campaign too.
    assert set(report["coverage"]) == {kind.value for kind in FaultKind} | {
        "record_down",
        "record_dropped",
        "record_slow",
    }
    assert report["shard"] == [0, 20]
    assert report["mutants"]["caught"] == report["mutants"]["total"] == 1
    assert report["mutants"]["expected"] == 1
    assert code == (0 if report["passed"] else 1)


@pytest.mark.untraced
def test_exit_status_is_one_when_a_mutant_survives() -> None:
    """A mutant that breaks nothing survives: the campaign fails."""
    harmless = Mutant("harmless", "changes nothing", "C2", contextlib.nullcontext)
    with mock.patch.object(runner, "MUTANTS", (harmless,)):
        code, output = _invoke("--json", "--schedules", "0", "--shard", "0/40")
    report = json.loads(output)
    assert report["mutants"]["results"][0]["caught_by"] is None
    assert code == 1


def test_a_violation_prints_its_plan_and_replay_command(tmp_path: Path) -> None:
    """Exit 1, the minimal plan, and a cassette path ``sandrail replay`` accepts."""
    with _mutant("relaunch_after_uncertain"):
        code, output = _invoke(
            "--schedules", "0", "--no-mutants", "--shard", "0/4", "--failures-dir", str(tmp_path)
        )
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
    code, output = _invoke("--no-mutants", "--schedules", "1", "--json", "--shard", "0/40")
    assert code == 1
    assert json.loads(output)["passed"] is False


def _counts(report: CampaignReport) -> tuple[object, ...]:
    return (
        report.plans,
        report.single_fault_plans,
        report.calls,
        dict(report.violations),
        report.coverage,
        report.reconciled,
        report.retry_steps,
        sorted(m.name for m in report.mutants),
    )


@pytest.mark.untraced
@pytest.mark.parametrize("count", [1, 2, 3, 7, 5_000])
def test_shards_cover_the_campaign_exactly_once(count: int) -> None:
    """--shard I/N: the N parts are disjoint and together are the whole
    campaign, in sizes that differ by at most one item."""
    items = runner._items(40, mutants=True)
    parts = [runner._shard_items(items, (index, count)) for index in range(count)]
    assert sorted(item for part in parts for item in part) == sorted(items)
    assert len({item for part in parts for item in part}) == len(items)
    sizes = [len(part) for part in parts]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.untraced
def test_merged_shards_report_what_the_whole_campaign_reports() -> None:
    """End to end, on a campaign cut short to keep it quick: the shards of a
    shard, merged, count exactly what that shard counts."""
    whole = run_campaign(schedules=40, mutants=False, shard=(0, 10))
    parts = [run_campaign(schedules=40, mutants=False, shard=(i, 30)) for i in (0, 10, 20)]
    for number, part in enumerate(parts):
        part.shard = (number, 3)
    assert _counts(merge_reports(parts)) == _counts(whole)


@pytest.mark.untraced
def test_workers_give_the_same_campaign() -> None:
    """Worker processes change the wall time, never the counts."""
    one = run_campaign(schedules=30, mutants=False, shard=(0, 8))
    two = run_campaign(schedules=30, mutants=False, shard=(0, 8), workers=2)
    assert _counts(one) == _counts(two)


def test_progress_counts_every_step() -> None:
    steps: list[int] = []
    report = run_campaign(schedules=4, mutants=False, shard=(1, 10), advance=steps.append)
    assert sum(steps) == total_steps(4, mutants=False, shard=(1, 10)) == report.plans


def test_merge_of_json_reports_round_trips(tmp_path: Path) -> None:
    """`simulate --shard I/N --json` reports, merged by `simulate --merge`:
    the counts add up, the verdict is the whole's, and the JSON reads back."""
    paths, parts = [], []
    for index in range(2):
        report = run_campaign(schedules=6, shard=(index * 20, 40))
        report.shard = (index, 2)
        path = tmp_path / f"shard-{index}.json"
        path.write_text(json.dumps(report.to_json()))
        paths.append(path)
        parts.append(report)
    code, output = _invoke("--merge", str(paths[0]), "--merge", str(paths[1]), "--json")
    merged = json.loads(output)
    assert merged["plans"] == sum(part.plans for part in parts)
    assert merged["calls"] == sum(part.calls for part in parts)
    assert merged["mutants"]["total"] == merged["mutants"]["expected"] == 1
    assert merged["passed"] == all(part.passed for part in parts)
    assert code == (0 if merged["passed"] else 1)
    again = CampaignReport.from_json(merged)
    assert again.to_json() | {"elapsed_seconds": 0} == merged | {"elapsed_seconds": 0}
    code, output = _invoke("--merge", str(paths[0]), "--merge", str(paths[1]))
    assert "decisive retries" in output


def test_merge_refuses_what_is_not_one_campaign(tmp_path: Path) -> None:
    """Missing or foreign shards are a usage error (exit 2), never a pass."""
    first = run_campaign(schedules=2, mutants=False, shard=(0, 50))
    other_seed = run_campaign(seed=1, schedules=2, mutants=False, shard=(1, 50))
    first.shard, other_seed.shard = (0, 2), (1, 2)
    with pytest.raises(MergeError):
        merge_reports([first])
    with pytest.raises(MergeError):
        merge_reports([first, other_seed])
    path = tmp_path / "part.json"
    path.write_text(json.dumps(first.to_json()))
    code, output = _invoke("--merge", str(path))
    assert code == 2
    assert "shard" in output
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    assert _invoke("--merge", str(junk))[0] == 2


@pytest.mark.parametrize("shard", ["2/2", "x/3", "1/0", "-1/2"])
def test_bad_shard_is_a_usage_error(shard: str) -> None:
    code, output = _invoke("--shard", shard)
    assert code == 2
    assert "I/N" in output


def test_the_decisive_goal_is_part_of_the_verdict() -> None:
    """A campaign whose retries after transient faults stay uncertain fails,
    even with no contract line broken."""
    report = CampaignReport(seed=0, schedules=0, mutants_expected=0)
    report.reconciled[FaultKind.RESPONSE_LOST.value] = Counter(ok=100)
    assert report.passed
    report.reconciled[FaultKind.RESPONSE_LOST.value]["uncertain"] += 10_000
    assert report.decisive_share < DECISIVE_GOAL
    assert not report.passed
