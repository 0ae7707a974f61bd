"""Reading the launcher's answers: every field well-formed or refused, and a
decisive first line never turned into a malformed answer."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandrail.core._effects import CommandState, Started, StartRefused
from sandrail.interpreters._launcher_answers import (
    Malformed,
    parse_cancel,
    parse_init,
    parse_read,
    parse_start,
    utf8_slice,
)

TASK = "a" * 64
EPOCH = "0123456789abcdef" * 2


@pytest.mark.parametrize(
    "tail",
    ["", "epoch x\n", "epoch " + EPOCH + "\nstate running  0 0\n", "epoch " + EPOCH + "\nstate"],
)
def test_c2_a_decisive_start_stays_decisive_whatever_follows(tail: str) -> None:
    """A state line emptied by a race (the review's `size_of` break) made the
    whole answer malformed, and a lost answer then relaunched. The first line
    decides; a bad state line only loses the state."""
    launched = parse_start("started 1\n" + tail, TASK).outcome
    assert launched == Started(
        task_id=TASK, first_launch=True, state=CommandState(status="running")
    )
    retried = parse_start("started 0\n" + tail, TASK).outcome
    assert retried == Started(
        task_id=TASK, first_launch=False, state=CommandState(status="unknown")
    )
    for reason in ("conflict", "stale_fence", "claim_lost"):
        assert parse_start(f"refused {reason}\n" + tail, TASK).outcome == StartRefused(
            reason=reason  # type: ignore[arg-type]
        )


def test_a_start_reports_the_ledger_epoch() -> None:
    answer = parse_start(f"started 1\nepoch {EPOCH}\nstate running - 0 0\n", TASK)
    assert answer.epoch == EPOCH
    assert parse_start("refused claim_lost\nepoch -\n", TASK).epoch is None


def test_reads_waits_and_cancels_report_the_ledger_epoch_when_readable() -> None:
    """Every answer ends with the epoch line; one missing or garbled is no
    epoch (no proof), never a malformed answer."""
    read = "state exited 0 3 0\nout:text 3\nhi\n\nerr \nsize 3 0\n"
    assert parse_read(read + f"epoch {EPOCH}\n").epoch == EPOCH
    for tail in ("", "epoch -\n", "epoch x y\n", "epoch " + EPOCH[:-1] + "\n"):
        assert parse_read(read + tail).epoch is None
    cancelled = parse_cancel(f"state canceled 143 0 0\nepoch {EPOCH}\n")
    assert (cancelled.state.status, cancelled.epoch) == ("canceled", EPOCH)
    assert parse_cancel("state canceled 143 0 0\n").epoch is None


def test_a_wait_whose_output_was_too_big_to_prefetch_brings_only_sizes() -> None:
    raw = parse_read(f"state exited 0 16777216 0\nout \nerr \nsize 16777216 0\nepoch {EPOCH}\n")
    assert (raw.stdout, raw.stdout_size, raw.state.stdout_bytes) == (b"", 16777216, 16777216)


@pytest.mark.parametrize("head", ["", "started", "started 2", "refused maybe", "ok"])
def test_a_start_without_a_decisive_first_line_is_malformed(head: str) -> None:
    with pytest.raises(Malformed):
        parse_start(head + "\n", TASK)


def test_init_answers() -> None:
    assert parse_init(f"ready {EPOCH} 1\n").separated is True
    shared = parse_init("ready - 0\n")
    assert (shared.epoch, shared.separated) == (None, False)
    with pytest.raises(Malformed):
        parse_init("ready\n")


def _read_answer(out: bytes, err: bytes, *, text: bool) -> str:
    if text:
        fields = f"out:text {len(out)}\n{out.decode()}\nerr:text {len(err)}\n{err.decode()}\n"
    else:
        b64 = base64.b64encode
        fields = f"out {b64(out).decode()}\nerr {b64(err).decode()}\n"
    return f"state exited 0 {len(out)} {len(err)}\n{fields}size {len(out)} {len(err)}\n"


@given(
    out=st.text(st.characters(max_codepoint=127), max_size=60).map(str.encode),
    err=st.text(st.characters(max_codepoint=127), max_size=60).map(str.encode),
    text=st.booleans(),
)
def test_read_answers_give_back_exact_bytes_as_text_or_base64(
    out: bytes, err: bytes, text: bool
) -> None:
    raw = parse_read(_read_answer(out, err, text=text))
    assert (raw.stdout, raw.stderr, raw.stdout_size, raw.stderr_size) == (
        out,
        err,
        len(out),
        len(err),
    )
    assert raw.state == CommandState(
        status="exited", exit_code=0, stdout_bytes=len(out), stderr_bytes=len(err)
    )


@pytest.mark.parametrize(
    "answer",
    [
        "state exited 0 3 0\nout:text 5\nabc\nerr \nsize 3 0\n",  # text shorter than its count
        "state exited 0 3 0\nout:text 2\nabc\nerr \nsize 3 0\n",  # no newline after the count
        "state exited 0 3 0\nout:text 3\nabé\nerr \nsize 3 0\n",  # text that is not ASCII
        "state exited 0 3 0\nout !!!\nerr \nsize 3 0\n",  # not base64
        "state exited 0 3 0\nout \nerr \nsize 3\n",
        "state exited x 3 0\nout \nerr \nsize 3 0\n",
        "state gone 0 0 0\nout \nerr \nsize 0 0\n",
        "state exited 0 0 0\nout \nerr \n",
        "",
    ],
)
def test_malformed_read_answers_are_refused(answer: str) -> None:
    with pytest.raises(Malformed):
        parse_read(answer)


@given(data=st.binary(max_size=40), cursor=st.integers(0, 8), size=st.integers(4, 12))
def test_utf8_slices_decode_their_bytes_exactly(data: bytes, cursor: int, size: int) -> None:
    """C17's masking needs exact byte positions: the text of a slice encodes
    back (surrogateescape) to exactly the bytes between the cursors."""
    window = data[cursor:]
    text, next_cursor = utf8_slice(window, cursor, size)
    end = next_cursor - cursor
    encoded = text.encode("utf-8", "surrogateescape")
    assert 0 <= end <= len(window)
    assert window[:end].endswith(encoded)
    skipped = window[: end - len(encoded)]
    assert len(skipped) <= 3
    assert all(byte & 0xC0 == 0x80 for byte in skipped)
