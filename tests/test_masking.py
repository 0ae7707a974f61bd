"""Masking secrets across page boundaries (C17).

The unit under test is :mod:`sandrail.core._masking` driven by the port's
layer :func:`sandrail.interpreters._masking.masked_reads` over a small exact
interpreter of one growing stream pair (bytes, some of them not UTF-8).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandrail.core import (
    REDACTED,
    CommandState,
    EffectFailure,
    MaskingError,
    NeedMoreOutput,
    OutputChunk,
    Read,
    Redactions,
    mask_chunk,
    mask_text,
    widen,
)
from sandrail.core._budget import parse_omissions
from sandrail.interpreters._drivers import drive, drive_async
from sandrail.interpreters._masking import masked_reads

TASK = "a" * 64


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def exact_read(data: bytes, cursor: int, max_bytes: int) -> tuple[str, int]:
    """What an interpreter must answer: an exact slice, cursor moved forward
    off a continuation byte, end backed off one, undecodable bytes as
    surrogates (the E2B interpreter's rule)."""
    if cursor >= len(data):
        return "", cursor
    start = cursor
    while start < min(len(data), cursor + 3) and _continuation(data[start]):
        start += 1
    end = min(start + max_bytes, len(data))
    while start + 1 < end < len(data) and _continuation(data[end]):
        end -= 1
    return data[start:end].decode("utf-8", "surrogateescape"), end


class Stream:
    """One task's output: stdout grows as the test appends; stderr stays."""

    def __init__(self, stderr: bytes = b"") -> None:
        self.stdout = b""
        self.stderr = stderr
        self.ended = False
        self.reads = 0

    def state(self) -> CommandState:
        return CommandState(
            status="exited" if self.ended else "running",
            exit_code=0 if self.ended else None,
            stdout_bytes=len(self.stdout),
            stderr_bytes=len(self.stderr),
        )

    def __call__(self, effect: Any) -> OutputChunk:
        assert isinstance(effect, Read)
        self.reads += 1
        out, next_out = exact_read(self.stdout, effect.stdout_cursor, effect.max_bytes)
        err, next_err = exact_read(self.stderr, effect.stderr_cursor, effect.max_bytes)
        return OutputChunk(
            stdout=out,
            stderr=err,
            next_stdout_cursor=next_out,
            next_stderr_cursor=next_err,
            more=len(self.stdout) > next_out or len(self.stderr) > next_err,
            state=self.state(),
        )


def reading(asked: Read, secrets: Redactions) -> Any:
    """A program that reads ``asked`` once and returns the page it got, in
    the masking layer."""

    def program() -> Any:
        return (yield asked)

    return masked_reads(program(), lambda: secrets)


def read(stream: Stream, secrets: Redactions, cursor: int, max_bytes: int) -> OutputChunk:
    asked = Read(
        sandbox_id="sbx-1", task_id=TASK, stdout_cursor=cursor, stderr_cursor=0, max_bytes=max_bytes
    )
    chunk = drive(reading(asked, secrets), stream)
    assert isinstance(chunk, OutputChunk)
    return chunk


def inside(position: int, intervals: list[tuple[int, int]]) -> bool:
    return any(low < position < high for low, high in intervals)


# -- strategies ---------------------------------------------------------------

secret_text = st.text(alphabet=st.sampled_from("ab-Zé€😀"), min_size=8, max_size=14).filter(
    lambda value: len(value) >= 8
)
noise = st.one_of(
    st.text(alphabet=st.sampled_from("ab-Zé €\n"), max_size=12).map(lambda t: t.encode()),
    # Not UTF-8. (A lone continuation byte where a page starts is skipped, as
    # a cursor inside a character is, masked or not: left out here.)
    st.sampled_from([b"\xff", b"\xfe\xfe", b"\xe2\x82", b"\xf0\x9f\x98"]),
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[str], list[bytes]]:
    """Secrets, and stdout as a list of appended pieces: noise, secrets,
    and secrets' prefixes (output that looks like a secret starting)."""
    secrets = draw(st.lists(secret_text, min_size=1, max_size=3, unique=True))
    piece = st.one_of(
        noise,
        st.sampled_from(secrets).map(str.encode),
        st.tuples(st.sampled_from(secrets), st.integers(1, 7)).map(
            lambda pair: pair[0][: pair[1]].encode()
        ),
    )
    return secrets, draw(st.lists(piece, max_size=14))


# -- properties ---------------------------------------------------------------


@given(streams(), st.lists(st.integers(4, 40), min_size=1, max_size=40), st.data())
def test_c17_pages_of_a_growing_stream_never_show_a_secret_even_in_pieces(
    drawn: tuple[list[str], list[bytes]], sizes: list[int], data: st.DataObject
) -> None:
    """Read a stream page by page while it grows: every page boundary lies
    outside every masked interval of the final stream, each page is the
    masked text of its bytes, and the pages together are the masked stream."""
    secrets, pieces = drawn
    redactions = Redactions(secrets)
    stream = Stream()
    cursor = 0
    pages: list[tuple[int, str, int]] = []
    pending = list(pieces)
    for size in sizes * 3:
        if pending and data.draw(st.booleans()):
            stream.stdout += pending.pop(0)
        if not pending and data.draw(st.booleans()):
            stream.ended = True
        chunk = read(stream, redactions, cursor, size)
        pages.append((cursor, chunk.stdout, chunk.next_stdout_cursor))
        assert chunk.next_stdout_cursor >= cursor
        assert chunk.stdout_start is not None
        assert cursor <= chunk.stdout_start <= chunk.next_stdout_cursor
        if not chunk.stdout:
            assert chunk.stdout_start == chunk.next_stdout_cursor
        cursor = chunk.next_stdout_cursor
    stream.stdout += b"".join(pending)
    stream.ended = True
    for _ in range(len(stream.stdout) + 2):
        chunk = read(stream, redactions, cursor, 16)
        pages.append((cursor, chunk.stdout, chunk.next_stdout_cursor))
        cursor = chunk.next_stdout_cursor
        if not chunk.more:
            break
    assert cursor == len(stream.stdout)  # an ended stream is read to its end
    final = stream.stdout
    intervals = redactions.intervals(final)
    for cursor, text, end in pages:
        assert not inside(end, intervals)
        if text:
            begin = _page_start(final, cursor, intervals)
            assert text == redactions.mask(final[begin:end]).decode("utf-8", "replace")
    joined = "".join(text for _start, text, _end in pages)
    assert joined == redactions.mask(final).decode("utf-8", "replace")
    for secret in secrets:
        assert secret not in joined


def _page_start(data: bytes, cursor: int, intervals: list[tuple[int, int]]) -> int:
    """Where a page asked at ``cursor`` starts: off continuation bytes, and
    past a masked interval it lands in."""
    start = cursor
    while start < min(len(data), cursor + 3) and _continuation(data[start]):
        start += 1
    for low, high in intervals:
        if low < start < high:
            start = high
    return start


@given(streams(), st.integers(0, 200), st.integers(4, 64))
def test_c17_a_guessed_cursor_inside_a_secret_shows_no_piece_of_it(
    drawn: tuple[list[str], list[bytes]], guess: int, size: int
) -> None:
    """A model that computes a cursor inside a masked secret gets the output
    after it, never the secret's tail."""
    secrets, pieces = drawn
    redactions = Redactions(secrets)
    stream = Stream()
    stream.stdout = b"".join(pieces)
    stream.ended = True
    intervals = redactions.intervals(stream.stdout)
    chunk = read(stream, redactions, min(guess, len(stream.stdout)), size)
    start = _page_start(stream.stdout, min(guess, len(stream.stdout)), intervals)
    end = chunk.next_stdout_cursor
    assert not inside(end, intervals)
    if chunk.stdout:
        assert chunk.stdout_start == start
        expected = redactions.mask(stream.stdout[start:end]).decode("utf-8", "replace")
        assert chunk.stdout == expected


def test_c17_two_small_pages_do_not_show_the_value() -> None:
    """A whole read shows AAAA<redacted>BBBB; two pages with
    a small max_bytes showed the value split across them in clear."""
    secret = "tok-12345678"
    redactions = Redactions([secret])
    stream = Stream()
    stream.stdout = f"AAAA{secret}BBBB".encode()
    stream.ended = True
    whole = read(stream, redactions, 0, 65536)
    assert whole.stdout == f"AAAA{REDACTED}BBBB"
    first = read(stream, redactions, 0, 8)
    second = read(stream, redactions, first.next_stdout_cursor, 8)
    assert (first.stdout, second.stdout) == (f"AAAA{REDACTED}", "BBBB")
    assert "tok" not in first.stdout + second.stdout


def test_c17_a_secret_still_being_written_is_held_back_then_masked_whole() -> None:
    secret = "tok-12345678"
    redactions = Redactions([secret])
    stream = Stream()
    stream.stdout = b"ready tok-123"
    page = read(stream, redactions, 0, 4096)
    assert (page.stdout, page.next_stdout_cursor, page.more) == ("ready ", 6, True)
    stream.stdout += b"45678 done"
    page = read(stream, redactions, 6, 4096)
    assert page.stdout == f"{REDACTED} done"


def test_c17_a_prefix_at_the_end_of_finished_output_is_just_text() -> None:
    redactions = Redactions(["tok-12345678"])
    stream = Stream()
    stream.stdout = b"ends with tok-1"
    stream.ended = True
    page = read(stream, redactions, 0, 4096)
    assert (page.stdout, page.more) == ("ends with tok-1", False)


def test_undecodable_bytes_read_as_replacement_characters() -> None:
    stream = Stream()
    stream.stdout = b"ok \xff\xfe done"
    stream.ended = True
    page = read(stream, Redactions(), 0, 4096)
    assert page.stdout == "ok \ufffd\ufffd done"
    page = read(stream, Redactions(["a-secret-value"]), 0, 4096)
    assert page.stdout == "ok \ufffd\ufffd done"


def test_an_inexact_answer_is_refused_not_guessed() -> None:
    """An interpreter that replaces bad bytes with U+FFFD (3 bytes for 1)
    breaks the positions masking relies on: the read fails, closed."""
    asked = Read(sandbox_id="s", task_id=TASK, stdout_cursor=0, stderr_cursor=0, max_bytes=64)
    redactions = Redactions(["tok-12345678"])
    widened = widen(asked, redactions)
    lying = OutputChunk(
        stdout="\ufffd\ufffd",
        stderr="",
        next_stdout_cursor=2,
        next_stderr_cursor=0,
        more=False,
        state=CommandState(status="exited", exit_code=0, stdout_bytes=2, stderr_bytes=0),
    )
    with pytest.raises(MaskingError):
        mask_chunk(asked, widened, lying, redactions)

    def backend(effect: Any) -> OutputChunk:
        return lying

    with pytest.raises(EffectFailure):
        drive(reading(asked, redactions), backend)


def test_a_page_that_needs_more_bytes_asks_for_them() -> None:
    asked = Read(sandbox_id="s", task_id=TASK, stdout_cursor=0, stderr_cursor=0, max_bytes=4)
    redactions = Redactions(["tok-12345678"])
    widened = attrs_evolve(widen(asked, redactions), max_bytes=8)
    chunk = OutputChunk(
        stdout="tok-1234",
        stderr="",
        next_stdout_cursor=8,
        next_stderr_cursor=0,
        more=True,
        state=CommandState(status="running", stdout_bytes=30, stderr_bytes=0),
    )
    answer = mask_chunk(asked, widened, chunk, redactions)
    assert isinstance(answer, NeedMoreOutput)
    assert answer.max_bytes > widened.max_bytes


def attrs_evolve(read: Read, **changes: Any) -> Read:
    import attrs

    return attrs.evolve(read, **changes)


def test_redactions_ignore_short_and_unencodable_values() -> None:
    redactions = Redactions(["short", "\ud800-not-text", "long-enough"])
    assert redactions.longest == len("long-enough")
    assert mask_text("a long-enough b", redactions) == f"a {REDACTED} b"
    assert not Redactions(["short"])


def test_one_layer_masks_for_async_backends_too() -> None:
    import asyncio

    stream = Stream()
    stream.stdout = b"x tok-12345678 y"
    stream.ended = True

    async def backend(effect: Any) -> OutputChunk:
        return stream(effect)

    asked = Read(sandbox_id="s", task_id=TASK, stdout_cursor=0, stderr_cursor=0, max_bytes=64)
    chunk = asyncio.run(drive_async(reading(asked, Redactions(["tok-12345678"])), backend))
    assert chunk.stdout == f"x {REDACTED} y"


def _naive_intervals(redactions: Redactions, data: bytes) -> list[tuple[int, int]]:
    spans = []
    for secret in redactions._encoded:
        for at in range(len(data) - len(secret) + 1):
            if data[at : at + len(secret)] == secret:
                spans.append((at, at + len(secret)))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _naive_pending(redactions: Redactions, data: bytes, low: int) -> int | None:
    candidates = [
        at
        for secret in redactions._encoded
        for at in range(max(low, len(data) - len(secret) + 1), len(data))
        if secret.startswith(data[at:])
    ]
    return min(candidates, default=None)


periodic = st.builds(
    lambda unit, times: unit * times,
    st.text(alphabet="ab", min_size=1, max_size=3),
    st.integers(3, 12),
).filter(lambda value: len(value) >= 8)


@given(
    st.lists(periodic | secret_text, min_size=1, max_size=3),
    st.text(alphabet="abZ", max_size=80),
    st.integers(0, 80),
)
def test_c17_intervals_and_held_tails_agree_with_a_plain_scan(
    secrets: list[str], text: str, low: int
) -> None:
    """The one-pass automaton over all values finds exactly what a scan at
    every offset finds, periodic values included."""
    redactions = Redactions(secrets)
    data = text.encode()
    # Before the set has its automaton, a text few values fit in is searched
    # value by value; after, through the automaton: both as the scan.
    assert redactions.intervals(data) == _naive_intervals(redactions, data)
    assert redactions.pending_prefix(data, low) == _naive_pending(redactions, data, low)
    redactions._search()
    assert redactions.intervals(data) == _naive_intervals(redactions, data)


def test_c17_a_session_that_keeps_adding_env_values_is_refused_past_the_cap() -> None:
    from sandrail.core import MAX_MASKED_BYTES
    from tests.rig import Rig

    big = {f"V{n}": chr(0x4E00 + n) * 31_990 for n in range(30)}  # about 96 KB a value
    rig = Rig()
    calls = MAX_MASKED_BYTES // (30 * 96_000) + 2
    statuses = []
    for n in range(calls):
        env = {name: value + str(n) for name, value in big.items()}
        result = rig.run("run_command", {"command": "true", "env": env}, key=f"op-{n}")
        statuses.append(result.status)
    assert statuses[0] == "ok"
    assert statuses[-1] == "error"
    assert "mask more than" in json.dumps(result.content)


shared_prefix_values = st.lists(
    st.builds(
        lambda head, tail: head + tail,
        st.sampled_from(["", "aaaaaaa", "abababa", "aaaaaaaaaaaa", "a" * 40, "ab" * 20]),
        st.text(alphabet="abé", min_size=1, max_size=6),
    ).filter(lambda value: len(value) >= 8),
    min_size=1,
    max_size=16,
)


runs_of_output = st.lists(
    st.sampled_from(["a", "b", "é", "Z", "a" * 17, "a" * 45, "ab" * 9]), max_size=12
).map("".join)


@given(
    shared_prefix_values,
    st.text(alphabet="abéZ", max_size=120) | runs_of_output,
    st.integers(0, 120),
)
def test_c17_one_pass_over_many_values_sharing_prefixes_agrees_with_a_plain_scan(
    secrets: list[str], text: str, low: int
) -> None:
    """C17 at the schema's largest env: many values that
    share long prefixes (``'a' * k + X``) are searched in one pass over the
    output, and that pass finds exactly what a scan for each value at every
    offset finds, held tails included."""
    redactions = Redactions(secrets)
    data = text.encode()
    # Before the set has its automaton, a text few values fit in is searched
    # value by value; after, through the automaton: both as the scan.
    assert redactions.intervals(data) == _naive_intervals(redactions, data)
    assert redactions.pending_prefix(data, low) == _naive_pending(redactions, data, low)
    redactions._search()
    assert redactions.intervals(data) == _naive_intervals(redactions, data)


def test_c17_masking_builds_one_automaton_per_set_of_values() -> None:
    """C17 cost: a port makes a ``Redactions`` per call and
    per read; every one of the same values shares the automaton built for the
    first, so a read costs a pass over its bytes, never a rebuild per value."""
    values = [f"{'a' * 40}{chr(0x4E00 + n)}" for n in range(64)]
    first, second = Redactions(values), Redactions(list(reversed(values)))
    data = ("a" * 200 + values[7] + "a" * 50).encode()
    assert first.intervals(data) == second.intervals(data) == [(200, 243)]
    assert first._search() is second._search()
    assert first.pending_prefix(b"xx" + b"a" * 45, 0) == 2 + 45 - 40


def test_c17_a_short_text_is_searched_without_building_the_automaton() -> None:
    """C17 cost: a reason or an identity checked against a call's own env
    values (one of them long) needs no automaton over every value's bytes;
    what it finds is what the automaton finds."""
    values = ["k" * 40_000, "secret-1", "secret-12", "cret-1xy"]
    redactions = Redactions(values)
    data = b"a secret-12 and secret-1xy, secret-1"
    found = redactions.intervals(data)
    assert redactions._prepared.automaton is None
    assert found == _naive_intervals(redactions, data) == [(2, 11), (16, 26), (28, 36)]
    redactions._search()
    assert redactions.intervals(data) == found


def _over_budget(text: str, env: dict[str, str] | None) -> dict[str, Any]:
    import sandrail
    from sandrail.interpreters.simulator import Script, Simulator

    toolset = sandrail.Toolset(
        backend=Simulator(scripts={"c": Script.prints(text)}),
        session_id="s",
        owner=sandrail.AgentOwner(agent_id="a"),
        authorize=lambda request: sandrail.ALLOW,
        assert_authority=lambda request: True,
    )
    arguments: dict[str, Any] = {"command": "c", **({"env": env} if env else {})}
    result = toolset.call_sync("run_command", arguments, call_id="c", operation_key="k")
    content: dict[str, Any] = json.loads(result.to_json())
    return content


def test_c12_c17_over_budget_output_with_a_masked_value_is_a_cut_string() -> None:
    """Output over the budget, read at its two
    ends, whose pages held a masked value came back as a JSON array
    ``[head, tail, omitted]``: its masked ends were small enough to pass the
    fits-as-it-is check, which never cut the excerpt. It is a string cut
    with its marker, the budget note says so, and no value shows."""
    secret = "tok_live_4f9a8b7c6d"
    content = _over_budget(f"{secret}\n" * 3000, {"V": secret})
    stdout = content["stdout"]
    assert isinstance(stdout, str)
    (marker,) = parse_omissions(stdout)
    assert marker.omitted_bytes > 0
    assert content["output_budget"]["truncated"] is True
    assert secret not in json.dumps(content)


def test_c12_c17_ends_that_met_across_a_masked_value_are_the_whole_stream() -> None:
    """The head's page could not end inside a masked value that ran to the
    tail's start: the two reads are consecutive pages, so the result is the
    whole masked stream, not an excerpt with "0 bytes omitted"."""
    content = _over_budget("ab" * 30000 + "\n", {"V": "abababab"})
    assert content["stdout"] == REDACTED + "\n"
    assert "output_budget" not in content


_IN_THE_MARKER = st.sampled_from(["redacted", "<redacte", "edacted>", "<redacted>", "<redacted"])


@given(
    st.lists(_IN_THE_MARKER | st.text(alphabet="ab", min_size=8, max_size=10), min_size=1),
    st.lists(
        st.sampled_from(["a", "b ", REDACTED, "redacted", "<redacte", "d>", "<"]), max_size=10
    ),
)
def test_c17_masked_text_masked_again_is_unchanged_whatever_the_values(
    values: list[str], pieces: list[str]
) -> None:
    """A value that is part of the marker never masks a marker: text masked
    once and masked again reads the same, so what a result shows of a value
    (the marker) never depends on it, even where output is masked twice."""
    redactions = Redactions(values)
    text = "".join(pieces) + " " + " ".join(values)
    once = mask_text(text, redactions)
    assert mask_text(once, redactions) == once
    for value in values:
        if value not in REDACTED:
            assert value not in once


def test_c17_a_value_inside_the_marker_shows_as_the_marker_alone() -> None:
    for value in ("redacted", "<redacte", "edacted>"):
        redactions = Redactions([value])
        once = mask_text(f"with {value}\n", redactions)
        assert once == f"with {REDACTED}\n"
        assert mask_text(once, redactions) == once
