"""The launcher script on its own: each answer it gives, run directly under
bash in a temporary directory, without root.

One test per answer or state, in the order of the protocol in
:mod:`sandrail.interpreters._launcher_script`. Each checks the answer's text
and reads it with the harness's own parser, so an answer the harness could
not read fails here too. The same answers through the E2B backend, the SDK
and local-e2b (with real user separation) are in ``test_e2b*.py``.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandrail.core._effects import Started, StartRefused
from sandrail.interpreters._launcher_answers import (
    parse_cancel,
    parse_init,
    parse_read,
    parse_start,
)
from tests.launcher_rig import LauncherRig, run_init, task_id

EPOCH = re.compile(r"[0-9a-f]{32}")
TASK = task_id(0xC0FFEE)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[LauncherRig]:
    launcher = LauncherRig(tmp_path)
    yield launcher
    launcher.close()


@pytest.fixture
def shared_rig(tmp_path: Path) -> Iterator[LauncherRig]:
    """A ledger whose ``user`` is root: no user separation."""
    launcher = LauncherRig(tmp_path, separated=False)
    yield launcher
    launcher.close()


def _claimed(rig: LauncherRig, task: str = TASK, **request: str | bytes) -> str:
    """Start ``task`` (a new claim) and return the ledger's epoch."""
    answer = rig.start(task, **request)
    assert answer.lines[0] == "started 1", answer
    return rig.epoch()


# -- arguments ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "what"),
    [
        ((), "bad-subcommand"),
        (("launch", TASK, "1"), "bad-subcommand"),
        (("start", "XYZ", "1"), "bad-task-id"),
        (("start", TASK.upper(), "1"), "bad-task-id"),
        (("start", TASK, "1; reboot"), "bad-integer"),
        (("wait", TASK, "-1", "0"), "bad-integer"),
        (("read", TASK, "0", "0", "1" * 19), "bad-integer"),
        (("discard", TASK), "bad-integer"),
        (("publish", TASK, "1", "PY"), "bad-ext"),
        (("publish", TASK, "1", "../x"), "bad-ext"),
    ],
)
def test_c2_bad_arguments_are_refused_before_any_claim(
    rig: LauncherRig, args: tuple[str, ...], what: str
) -> None:
    """Exit 3 with ``sandrail-error <what>``: the failure table's "launcher
    refused its arguments" row (not_sent); nothing is claimed."""
    answer = rig.run(*args)
    assert (answer.status, answer.stdout) == (3, f"sandrail-error {what}\n")
    assert list(rig.tasks.iterdir()) == []


# -- init -----------------------------------------------------------------------


@pytest.mark.parametrize(("uid", "separated"), [(1000, "1"), (0, "0")])
def test_c2_init_installs_the_launcher_and_reports_the_ledger_epoch(
    tmp_path: Path, uid: int, separated: str
) -> None:
    """``ready <epoch> <separated>``: the copy moved to its name, the ledger
    made private, the ``user`` file written, a first epoch sealed."""
    answer, ledger = run_init(tmp_path, user_uid=uid)
    assert answer.status == 0, answer
    ready, epoch, flag = answer.stdout.split()
    assert (ready, flag) == ("ready", separated)
    assert EPOCH.fullmatch(epoch)
    assert parse_init(answer.stdout).separated is (flag == "1")
    assert (ledger / "seal").read_text() == f"{epoch} 0\n"
    assert (ledger / f"claims.{epoch}").is_dir()
    assert sorted(p.name for p in (ledger / "bin").iterdir()) == ["launcher-0123456789abcdef.sh"]
    for directory in (ledger, ledger / "bin", ledger / "tasks", ledger / "inbox"):
        assert directory.stat().st_mode & 0o777 == 0o700
    assert (ledger / "user").read_text().split()[:2] == [str(uid), str(uid)]


def test_init_without_a_user_account_is_refused(tmp_path: Path) -> None:
    answer, _ = run_init(tmp_path, user_uid=None)
    assert (answer.status, answer.stdout) == (3, "sandrail-error no-user\n")


def test_init_not_as_root_is_refused(tmp_path: Path) -> None:
    answer, _ = run_init(tmp_path, user_uid=1000, as_root=False)
    assert (answer.status, answer.stdout) == (3, "sandrail-error not-root\n")


def test_init_under_a_name_that_is_not_a_launcher_name_is_refused(rig: LauncherRig) -> None:
    answer = rig.run("init", "launcher.sh")
    assert (answer.status, answer.stdout) == (3, "sandrail-error bad-name\n")


# -- start: a new claim -----------------------------------------------------------


def test_c2_a_first_start_claims_logs_and_launches(rig: LauncherRig) -> None:
    """``started 1``, the epoch, the state at launch; the claim is in place
    whole (digest, both streams), logged in the epoch's claim log, and the
    seal counts it."""
    answer = rig.start(TASK, command="echo hi")
    epoch = rig.epoch()
    assert answer.stdout == f"started 1\nepoch {epoch}\nstate running - 0 0\n"
    parsed = parse_start(answer.stdout, TASK)
    assert parsed.outcome == Started(task_id=TASK, first_launch=True, state=parsed.outcome.state)
    assert parsed.epoch == epoch
    claim = rig.claim(TASK)
    assert (claim / "digest").read_text() == "d" * 64
    assert (claim / "stdout").exists()
    assert (claim / "stderr").exists()
    assert (rig.ledger / f"claims.{epoch}" / TASK).exists()
    assert (rig.ledger / "seal").read_text() == f"{epoch} 1\n"
    assert list(rig.inbox.iterdir()) == []
    assert rig.ended(TASK) == "exited 0 3 0\n"


def test_c2_a_retry_with_the_same_digest_is_started_0_with_the_state(rig: LauncherRig) -> None:
    epoch = _claimed(rig, command="printf abc")
    rig.ended(TASK)
    answer = rig.start(TASK, nonce=2, command="printf abc")
    assert answer.stdout == f"started 0\nepoch {epoch}\nstate exited 0 3 0\n"
    outcome = parse_start(answer.stdout, TASK).outcome
    assert isinstance(outcome, Started)
    assert (outcome.first_launch, outcome.state.status, outcome.state.exit_code) == (
        False,
        "exited",
        0,
    )
    assert list(rig.inbox.iterdir()) == []


def test_c3_a_retry_with_another_digest_is_a_conflict(rig: LauncherRig) -> None:
    epoch = _claimed(rig)
    answer = rig.start(TASK, nonce=2, digest="e" * 64)
    assert answer.stdout == f"refused conflict\nepoch {epoch}\n"
    assert parse_start(answer.stdout, TASK).outcome == StartRefused(reason="conflict")
    assert (rig.claim(TASK) / "digest").read_text() == "d" * 64


def test_c10_a_start_below_the_highest_fence_is_stale(rig: LauncherRig) -> None:
    epoch = _claimed(rig, fence="5")
    answer = rig.start(task_id(2), fence="4")
    assert answer.stdout == f"refused stale_fence\nepoch {epoch}\n"
    assert parse_start(answer.stdout, task_id(2)).outcome == StartRefused(reason="stale_fence")
    assert not rig.claim(task_id(2)).exists()
    assert (rig.ledger / "fence").read_text() == "5\n"


def test_c2_a_stale_retry_of_a_claimed_task_is_answered_from_its_claim(rig: LauncherRig) -> None:
    epoch = _claimed(rig, fence="3")
    _claimed(rig, task=task_id(2), fence="5")
    retry = rig.start(TASK, nonce=2, fence="3")
    assert retry.lines[:2] == ["started 0", f"epoch {epoch}"], retry
    other = rig.start(TASK, nonce=3, fence="3", digest="e" * 64)
    assert other.stdout == f"refused stale_fence\nepoch {epoch}\n"
    assert (rig.ledger / "fence").read_text() == "5\n"
    assert list(rig.inbox.iterdir()) == []


# -- start: the epoch proof (C2) ----------------------------------------------------


def test_c2_an_expected_claim_with_the_current_epoch_launches(rig: LauncherRig) -> None:
    """The proof: a start that may have been sent before, carrying the
    epoch its record holds, finds the ledger whole in that epoch and no
    entry of the task: it never arrived, so this start launches."""
    epoch = _claimed(rig, task=task_id(9))
    answer = rig.start(TASK, expect="1", epoch=epoch)
    assert answer.lines[:2] == ["started 1", f"epoch {epoch}"]


@pytest.mark.parametrize(
    ("request_fields", "why"),
    [
        ({"expect": "1"}, "expected, with no epoch to prove it never arrived"),
        ({"expect": "1", "epoch": "0" * 32}, "an epoch this ledger no longer has"),
        ({"epoch": "-"}, "no launcher's epoch"),
    ],
)
def test_c2_a_claim_that_cannot_be_proven_absent_is_claim_lost(
    rig: LauncherRig, request_fields: dict[str, str], why: str
) -> None:
    epoch = _claimed(rig, task=task_id(9))
    answer = rig.start(TASK, **request_fields)
    assert answer.stdout == f"refused claim_lost\nepoch {epoch}\n", why
    assert parse_start(answer.stdout, TASK).outcome == StartRefused(reason="claim_lost")
    assert not rig.claim(TASK).exists()


def test_c2_without_user_separation_an_expected_claim_is_always_lost(
    shared_rig: LauncherRig,
) -> None:
    """Where ``user`` is root it could have deleted the claim and its log
    entry: no proof is taken, even with the current epoch."""
    epoch = _claimed(shared_rig, task=task_id(9))
    answer = shared_rig.start(TASK, expect="1", epoch=epoch)
    assert answer.stdout == f"refused claim_lost\nepoch {epoch}\n"


def test_c2_a_claim_deleted_while_its_log_entry_stays_is_lost(rig: LauncherRig) -> None:
    epoch = _claimed(rig)
    rig.ended(TASK)
    for path in rig.claim(TASK).iterdir():
        path.unlink()
    rig.claim(TASK).rmdir()
    answer = rig.start(TASK, nonce=2, epoch=epoch)
    assert answer.stdout == f"refused claim_lost\nepoch {epoch}\n"


def test_c2_a_claim_without_its_digest_is_lost_not_a_conflict(rig: LauncherRig) -> None:
    epoch = _claimed(rig)
    (rig.claim(TASK) / "digest").unlink()
    answer = rig.start(TASK, nonce=2)
    assert answer.stdout == f"refused claim_lost\nepoch {epoch}\n"


def test_c2_a_deleted_seal_voids_the_epoch_and_its_claims_stay_claimed(rig: LauncherRig) -> None:
    """The ledger no longer proves its epoch: the next answer seals a new
    one, the old claim log is kept as ``void.*``, and a start that carries
    the old epoch is ``claim_lost``, never a second launch. A task of the
    voided log whose claim is gone too stays claimed: ``claim_lost`` even
    with the new epoch."""
    old = _claimed(rig, task=task_id(9))
    rig.ended(task_id(9))
    (rig.ledger / "seal").unlink()
    answer = rig.start(TASK, expect="1", epoch=old)
    new = rig.epoch()
    assert new != old
    assert answer.stdout == f"refused claim_lost\nepoch {new}\n"
    voided = [p.name for p in rig.ledger.iterdir() if p.name.startswith("void.")]
    assert len(voided) == 1
    assert voided[0].startswith(f"void.{old}.")
    for path in rig.claim(task_id(9)).iterdir():
        path.unlink()
    rig.claim(task_id(9)).rmdir()
    again = rig.start(task_id(9), nonce=3, epoch=new)
    assert again.stdout == f"refused claim_lost\nepoch {new}\n"


# -- start: a command that cannot begin (C7) --------------------------------------------


@pytest.mark.parametrize("cwd", ["missing", "a-file"])
def test_c7_a_cwd_the_command_cannot_enter_is_not_started_on_every_retry(
    rig: LauncherRig, cwd: str
) -> None:
    (rig.home / "a-file").write_text("x")
    answer = rig.start(TASK, command="echo ran", cwd=cwd, check="1")
    epoch = rig.epoch()
    assert answer.stdout == f"refused not_started cwd\nepoch {epoch}\n"
    parsed = parse_start(answer.stdout, TASK)
    assert (parsed.outcome, parsed.not_started) == (StartRefused(reason="not_started"), "cwd")
    retry = rig.start(TASK, nonce=2, command="echo ran", cwd=cwd, check="1")
    assert retry.stdout == answer.stdout
    assert (rig.claim(TASK) / "stdout").read_text() == ""


def test_c7_a_home_the_user_may_not_enter_waits_to_learn_whether_it_began(
    rig: LauncherRig,
) -> None:
    """With the default cwd, a start answered at once
    while ``user``'s home could not be entered (``chmod 000 ~``): ``ok``,
    ``exit_code: 1``, nothing ran. Unless the home is surely enterable, the
    start waits for the verdict: ``refused not_started cwd``, every retry."""
    rig.home.rmdir()
    answer = rig.start(TASK, command="echo ran")
    assert answer.stdout == f"refused not_started cwd\nepoch {rig.epoch()}\n"
    retry = rig.start(TASK, nonce=2, command="echo ran")
    assert retry.stdout == answer.stdout


def test_c7_only_a_home_surely_enterable_is_answered_at_once(rig: LauncherRig) -> None:
    """Owned by ``user`` with its owner's search bit, the
    home needs no wait (the start stays one answer, no process more than a
    ``stat``); without that bit, or owned by another, the start waits."""
    uid = int((rig.ledger / "user").read_text().split()[0])
    if os.getuid() == 0:
        os.chown(rig.home, uid, -1)
    _claimed(rig, TASK, command="true")
    assert not (rig.claim(TASK) / "check").exists()
    rig.home.chmod(0o600)
    other = task_id(2)
    rig.start(other, command="true")
    assert (rig.claim(other) / "check").exists()


def test_c7_a_command_that_never_began_after_a_fast_answer_has_no_exit_code(
    shared_rig: LauncherRig,
) -> None:
    """A start answered at once (no ``check``) whose
    command then could not begin (here: an environment Linux would not
    exec) has the state ``unknown``, never the wrapper's exit code, and
    every retry is ``refused not_started``."""
    env = {f"BIG{n}": "x" * 120_000 for n in range(80)}
    answer = shared_rig.start(TASK, command="echo ran", env=env)
    assert answer.lines[0] == "started 1"
    waited = shared_rig.wait(TASK)
    assert waited.lines[0] == "state unknown - 0 0", waited
    assert parse_read(waited.stdout).state.status == "unknown"
    retry = shared_rig.start(TASK, nonce=2, command="echo ran", env=env)
    assert retry.stdout == f"refused not_started e2big\nepoch {shared_rig.epoch()}\n"
    assert shared_rig.read(TASK).lines[0] == "state unknown - 0 0"


def test_c7_a_relative_cwd_is_entered_from_home(rig: LauncherRig) -> None:
    (rig.home / "work").mkdir()
    answer = rig.start(TASK, command="pwd", cwd="work", check="1")
    assert answer.lines[0] == "started 1"
    rig.ended(TASK)
    assert (rig.claim(TASK) / "stdout").read_text() == f"{rig.home / 'work'}\n"


def test_c7_an_environment_linux_would_not_exec_is_not_started(rig: LauncherRig) -> None:
    """``e2big``: the argument and environment are over Linux's limit (each
    entry is under 128 KiB; together they are over ARG_MAX)."""
    env = {f"BIG{n}": "x" * 120_000 for n in range(80)}
    answer = rig.start(TASK, command="echo ran", env=env, check="1")
    assert answer.stdout == f"refused not_started e2big\nepoch {rig.epoch()}\n"
    assert parse_start(answer.stdout, TASK).not_started == "e2big"


def test_c17_env_values_reach_the_command_and_leave_no_file(rig: LauncherRig) -> None:
    answer = rig.start(TASK, command='printf %s "$PIN"', env={"PIN": "4821"})
    assert answer.lines[0] == "started 1"
    rig.ended(TASK)
    assert (rig.claim(TASK) / "stdout").read_text() == "4821"
    assert not (rig.claim(TASK) / "env").exists()


# -- start: requests it cannot take --------------------------------------------------


def test_c2_a_start_whose_request_is_not_staged_is_refused(rig: LauncherRig) -> None:
    answer = rig.run("start", TASK, "7")
    assert (answer.status, answer.stdout) == (3, "sandrail-error no-request\n")


@pytest.mark.parametrize(
    ("field", "value", "what"),
    [("digest", "not-a-digest", "bad-request"), ("fence", "x1", "bad-fence")],
)
def test_c2_a_malformed_request_is_refused_and_dropped(
    rig: LauncherRig, field: str, value: str, what: str
) -> None:
    answer = rig.start(TASK, **{field: value})
    assert (answer.status, answer.stdout) == (3, f"sandrail-error {what}\n")
    assert list(rig.inbox.iterdir()) == []
    assert not rig.claim(TASK).exists()


# -- wait and read (C5, C6) ------------------------------------------------------------


def test_c6_a_wait_answers_an_ended_command_with_its_whole_output(rig: LauncherRig) -> None:
    epoch = _claimed(rig, command="printf hi; printf err >&2; exit 3")
    answer = rig.wait(TASK)
    assert answer.stdout == (
        f"state exited 3 2 3\nout:text 2\nhi\nerr:text 3\nerr\nsize 2 3\nepoch {epoch}\n"
    )
    raw = parse_read(answer.stdout)
    assert (raw.state.status, raw.state.exit_code, raw.stdout, raw.stderr) == (
        "exited",
        3,
        b"hi",
        b"err",
    )
    assert raw.epoch == epoch


def test_c5_a_wait_that_runs_out_answers_running(rig: LauncherRig) -> None:
    _claimed(rig, command="sleep 30")
    answer = rig.wait(TASK, millis=200)
    raw = parse_read(answer.stdout)
    assert answer.lines[0] == "state running - 0 0"
    assert (raw.state.status, raw.state.exit_code) == ("running", None)


def test_c5_a_command_past_its_deadline_is_timed_out(rig: LauncherRig) -> None:
    _claimed(rig, command="sleep 30", timeout="1")
    answer = rig.wait(TASK)
    assert answer.lines[0] == "state timed_out 124 0 0"
    assert parse_read(answer.stdout).state.status == "timed_out"


def test_c11_cancel_ends_the_command_and_answers_canceled(rig: LauncherRig) -> None:
    epoch = _claimed(rig, command="sleep 30")
    answer = rig.run("cancel", TASK)
    assert answer.stdout == f"state canceled 143 0 0\nepoch {epoch}\n"
    cancelled = parse_cancel(answer.stdout)
    assert (cancelled.state.status, cancelled.state.exit_code) == ("canceled", 143)
    assert rig.wait(TASK).lines[0] == "state canceled 143 0 0"


def test_c11_cancel_of_an_ended_command_answers_its_state(rig: LauncherRig) -> None:
    epoch = _claimed(rig, command="printf done")
    rig.ended(TASK)
    answer = rig.run("cancel", TASK)
    assert answer.stdout == f"state exited 0 4 0\nepoch {epoch}\n"


def test_c14_a_wait_over_its_prefetch_limit_brings_only_the_sizes(rig: LauncherRig) -> None:
    epoch = _claimed(rig, command="head -c 5000 /dev/zero | tr '\\0' a")
    answer = rig.wait(TASK, limit=4096)
    assert answer.stdout == f"state exited 0 5000 0\nout \nerr \nsize 5000 0\nepoch {epoch}\n"
    raw = parse_read(answer.stdout)
    assert (raw.stdout, raw.stdout_size) == (b"", 5000)


def test_c14_a_read_from_a_cursor_brings_max_plus_four_bytes(rig: LauncherRig) -> None:
    _claimed(rig, command="printf 0123456789abcdef")
    rig.ended(TASK)
    answer = rig.read(TASK, out=3, err=0, size=4)
    assert answer.lines[:3] == ["state exited 0 16 0", "out:text 8", "3456789a"]
    raw = parse_read(answer.stdout)
    assert (raw.stdout, raw.stderr, raw.stdout_size) == (b"3456789a", b"", 16)


def test_c14_bytes_that_are_not_plain_ascii_are_read_as_base64(rig: LauncherRig) -> None:
    _claimed(rig, command="printf 'caf\\303\\251\\0!'")
    rig.ended(TASK)
    answer = rig.read(TASK)
    data = "café".encode() + b"\0!"
    assert f"out {base64.b64encode(data).decode()}" in answer.lines
    assert parse_read(answer.stdout).stdout == data


@pytest.mark.parametrize("damage", ["stdout deleted", "stderr deleted", "stdout cut"])
def test_c6_output_that_is_gone_makes_the_state_unknown(rig: LauncherRig, damage: str) -> None:
    """A stream missing, or shorter than the exit record says it was: what
    the command printed is not known, so neither is its state (never ``ok``
    with empty or partial output)."""
    epoch = _claimed(rig, command="printf 0123456789")
    assert rig.ended(TASK) == "exited 0 10 0\n"
    stream = rig.claim(TASK) / damage.split()[0]
    if damage.endswith("cut"):
        stream.write_text("01234")
    else:
        stream.unlink()
    for answer in (rig.wait(TASK), rig.read(TASK)):
        assert answer.stdout == f"state unknown - 0 0\nout \nerr \nsize 0 0\nepoch {epoch}\n"
        assert parse_read(answer.stdout).state.status == "unknown"


def test_c6_a_task_never_claimed_is_unknown(rig: LauncherRig) -> None:
    answer = rig.read(TASK)
    epoch = rig.epoch()
    assert answer.stdout == f"state unknown - 0 0\nout \nerr \nsize 0 0\nepoch {epoch}\n"


def test_c2_an_answer_remakes_a_lost_claim_log_and_reports_the_new_epoch(
    rig: LauncherRig,
) -> None:
    old = _claimed(rig, command="printf x")
    rig.ended(TASK)
    claims = rig.ledger / f"claims.{old}"
    (claims / TASK).unlink()
    claims.rmdir()
    answer = rig.wait(TASK)
    new = rig.epoch()
    assert new != old
    assert answer.lines[-1] == f"epoch {new}"
    assert answer.lines[0] == "state exited 0 1 0"


# -- publish and discard ------------------------------------------------------------------


def test_c16_publish_puts_the_snippet_in_place_for_user_to_read_not_write(
    rig: LauncherRig,
) -> None:
    """The snippet is the launcher's (root's), readable
    by ``user``'s group only; no command of ``user`` can change it."""
    rig.stage(TASK, 1, source="print('hi')\n")
    answer = rig.run("publish", TASK, "1", "py")
    assert (answer.status, answer.stdout) == (0, "published\n")
    target = rig.shared / "code" / f"{TASK}.py"
    assert target.read_text() == "print('hi')\n"
    assert target.stat().st_mode & 0o777 == 0o440
    gid = int((rig.ledger / "user").read_text().split()[1])
    assert (target.stat().st_uid, target.stat().st_gid) == (os.getuid(), gid)
    for directory in (rig.shared, rig.shared / "code"):
        assert directory.stat().st_mode & 0o777 == 0o711
    assert list(rig.inbox.iterdir()) == []


def test_c3_publishing_the_same_snippet_again_is_published_another_is_a_conflict(
    rig: LauncherRig,
) -> None:
    rig.stage(TASK, 1, source="print(1)\n")
    assert rig.run("publish", TASK, "1", "py").stdout == "published\n"
    rig.stage(TASK, 2, source="print(1)\n")
    assert rig.run("publish", TASK, "2", "py").stdout == "published\n"
    rig.stage(TASK, 3, source="print(2)\n")
    assert rig.run("publish", TASK, "3", "py").stdout == "refused publish_conflict\n"
    assert (rig.shared / "code" / f"{TASK}.py").read_text() == "print(1)\n"


@pytest.mark.parametrize("now", ["rewritten", "deleted"])
def test_c7_a_claimed_tasks_publish_is_answered_from_the_claim(rig: LauncherRig, now: str) -> None:
    """Once the task is claimed, its start answers from
    the claim (whose digest covers the source): the published file, changed
    or gone since, decides nothing, so a retry is never a false conflict."""
    rig.stage(TASK, 1, source="echo one\n")
    assert rig.run("publish", TASK, "1", "sh").stdout == "published\n"
    _claimed(rig, command=f"bash {rig.shared}/code/{TASK}.sh")
    target = rig.shared / "code" / f"{TASK}.sh"
    target.chmod(0o640)
    if now == "rewritten":
        target.write_text("echo tampered\n")
    else:
        target.unlink()
    rig.stage(TASK, 2, source="echo one\n")
    assert rig.run("publish", TASK, "2", "sh").stdout == "published\n"
    retry = rig.start(TASK, nonce=3, command=f"bash {rig.shared}/code/{TASK}.sh")
    assert retry.lines[0] == "started 0"


def test_c2_publish_without_a_staged_snippet_is_refused(rig: LauncherRig) -> None:
    answer = rig.run("publish", TASK, "1", "py")
    assert (answer.status, answer.stdout) == (3, "sandrail-error no-request\n")
    rig.stage(TASK, 2)  # a request with no source
    answer = rig.run("publish", TASK, "2", "py")
    assert (answer.status, answer.stdout) == (3, "sandrail-error no-request\n")


def test_c2_publish_moves_aside_a_code_directory_it_does_not_own(rig: LauncherRig) -> None:
    """In sticky /tmp a user could make the name first: theirs is moved
    aside, never written into."""
    rig.shared.mkdir()
    (rig.shared / "code").symlink_to(rig.root)
    rig.stage(TASK, 1, source="x = 1\n")
    assert rig.run("publish", TASK, "1", "py").stdout == "published\n"
    code = rig.shared / "code"
    assert code.is_dir()
    assert not code.is_symlink()
    assert any(p.name.startswith("code.moved.") for p in rig.shared.iterdir())
    assert not (rig.root / f"{TASK}.py").exists()


def test_c17_discard_drops_a_staged_request_and_its_env(rig: LauncherRig) -> None:
    rig.stage(TASK, 4, env={"PIN": "4821"})
    answer = rig.run("discard", TASK, "4")
    assert (answer.status, answer.stdout) == (0, "discarded\n")
    assert list(rig.inbox.iterdir()) == []
    assert rig.run("discard", TASK, "4").stdout == "discarded\n"
    assert rig.run("start", TASK, "4").stdout == "sandrail-error no-request\n"


def test_the_rig_runs_the_script_as_shipped_but_for_its_two_places(rig: LauncherRig) -> None:
    """The copy differs from the shipped script in the two assignment lines
    the rig rewrites, and nowhere else."""
    from sandrail.interpreters._launcher_script import LAUNCHER

    shipped = LAUNCHER.splitlines()
    copy = rig.script.read_text().splitlines()
    changed = [(a, b) for a, b in zip(shipped, copy, strict=True) if a != b]
    assert changed == [
        ("SHARED=/tmp/sandrail", f"SHARED={rig.shared}"),
        ("USER_HOME=/home/user", f"USER_HOME={rig.home}"),
    ]
    assert os.access(rig.script, os.R_OK)
