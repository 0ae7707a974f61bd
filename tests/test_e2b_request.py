"""The files a ``Start`` stages for the launcher (``_launcher_request``), without a
sandbox: what each field becomes, and every refusal ``not_sent`` with a
detail that never repeats a value (C16, C17). The same requests through the
launcher are in ``test_e2b_launcher_script.py``, and through the SDK in
``test_e2b.py``."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import pytest

from sandrail.core._effects import Delivery, EffectFailure, Start
from sandrail.interpreters._launcher_request import request_files, shell_int, utf8

KEY = b"k" * 32
SECRET = "hunter2-hunter2"


def _files(max_seconds: int = 3000, **fields: Any) -> dict[str, bytes]:
    start: dict[str, Any] = {
        "sandbox_id": "sbx",
        "task_id": "a" * 64,
        "request_digest": "digest-of-the-request",
        "command": "echo hi",
        "cwd": None,
        "env": None,
        "timeout_seconds": 30,
    }
    start.update(fields)
    staged = request_files(Start(**start), ledger_key=lambda: KEY, max_seconds=max_seconds)
    names = [name for name, _ in staged]
    assert len(names) == len(set(names))
    return dict(staged)


def test_c3_the_digest_is_keyed_and_the_plain_fields_are_files() -> None:
    files = _files()
    expected = hmac.new(KEY, b"digest-of-the-request", hashlib.sha256).hexdigest()
    assert files == {
        "digest": expected.encode(),
        "command": b"echo hi",
        "timeout": b"30",
    }


def test_c5_the_deadline_is_capped_by_what_the_sandbox_has_left() -> None:
    assert _files(max_seconds=100, timeout_seconds=86_400)["timeout"] == b"100"
    assert _files(timeout_seconds=0)["timeout"] == b"1"


def test_c2_fence_expect_and_epoch_are_staged_when_given() -> None:
    files = _files(fence=7, expect_claim=True, claim_epoch="f" * 32)
    assert (files["fence"], files["expect"], files["epoch"]) == (b"7", b"1", b"f" * 32)


@pytest.mark.parametrize("epoch", ["F" * 32, "f" * 31, "-", "", "f" * 32 + "\n"])
def test_c2_an_epoch_that_is_no_launchers_is_sent_as_one_that_never_matches(epoch: str) -> None:
    assert _files(claim_epoch=epoch)["epoch"] == b"-"


def test_c7_a_cwd_or_a_big_request_waits_for_the_command_to_begin() -> None:
    assert _files(cwd="work")["check"] == b"1"
    assert "check" not in _files(command="x" * 16_000)
    assert _files(command="x" * 16_384)["check"] == b"1"
    assert _files(env={"BIG": "x" * 16_384})["check"] == b"1"


def test_c7_a_command_over_the_argument_limit_is_read_from_its_file() -> None:
    files = _files(command="x" * 131_072)
    assert files["long"] == b"1"
    assert "check" not in files


def test_c17_env_entries_are_nul_separated_in_their_own_file() -> None:
    files = _files(env={"A": "1", "PIN": SECRET})
    assert files["env"] == f"A=1\0PIN={SECRET}\0".encode()
    assert all(SECRET.encode() not in data for name, data in files.items() if name != "env")


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"command": f"echo {SECRET}\0"}, "Start: the command contains a NUL character"),
        ({"cwd": f"/{SECRET}\0"}, "Start: cwd contains a NUL character"),
        ({"command": f"echo {SECRET}\udcff"}, "a value is not valid Unicode text"),
        ({"env": {"BAD-NAME": SECRET}}, "Start: an env name is not a shell identifier"),
        ({"env": {"1X": SECRET}}, "Start: an env name is not a shell identifier"),
        ({"env": {"__sandrail_x": SECRET}}, "Start: env names starting with __sandrail are"),
        ({"env": {"PIN": f"{SECRET}\0"}}, "Start: env PIN holds a NUL character"),
        ({"env": {"PIN": SECRET * 9_000}}, "Start: env PIN is too long"),
        ({"fence": -1}, "a launcher argument is not a natural number"),
        ({"fence": True}, "a launcher argument is not a natural number"),
    ],
)
def test_c16_what_bash_cannot_carry_exactly_is_refused_not_sent_without_its_value(
    fields: dict[str, Any], detail: str
) -> None:
    with pytest.raises(EffectFailure) as refused:
        _files(**fields)
    assert refused.value.delivery is Delivery.NOT_SENT
    assert refused.value.detail.startswith(detail)
    assert SECRET not in refused.value.detail


def test_c2_a_refused_command_never_asks_for_the_ledger_key() -> None:
    """A command bash cannot carry is refused before the key is derived (a
    missing key is a failure of its own, reported only for a request that
    could be sent)."""

    def no_key() -> bytes:
        raise AssertionError("the key was asked for")

    start = Start(
        sandbox_id="sbx",
        task_id="a" * 64,
        request_digest="d",
        command="\0",
        cwd=None,
        env=None,
        timeout_seconds=30,
    )
    with pytest.raises(EffectFailure, match="NUL"):
        request_files(start, ledger_key=no_key, max_seconds=30)


def test_shell_int_and_utf8_take_what_the_launcher_takes() -> None:
    assert shell_int(0) == "0"
    assert utf8("café") == "café".encode()
    for bad in (-1, True, 1.0, "1"):
        with pytest.raises(EffectFailure):
            shell_int(bad)  # type: ignore[arg-type]
