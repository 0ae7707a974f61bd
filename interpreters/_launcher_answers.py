"""Reading the launcher's answers (see :mod:`._launcher_script` for the protocol).

Strategy: an answer is parsed line by line, and each line only as far as
the outcome needs it. A start's first line is decisive (``started 1|0`` or
``refused <reason>``): the lines after it (the ledger epoch, the state)
refine the outcome but can never turn a decisive answer into a malformed
one. The ``epoch`` line that ends the other answers is read when it is
there and well-formed (``None`` otherwise: no proof). Anything else that is
not the protocol raises :class:`Malformed`.
"""

from __future__ import annotations

import base64
import re
from typing import Final, Literal

import attrs

from sandrail.core import CommandState, CommandStatus, OutputChunk, Started, StartRefused

__all__ = [
    "NOT_STARTED_REFUSAL",
    "CancelAnswer",
    "InitAnswer",
    "Malformed",
    "NotStarted",
    "RawRead",
    "StartAnswer",
    "chunk_of",
    "parse_cancel",
    "parse_init",
    "parse_read",
    "parse_start",
    "parse_state",
    "utf8_slice",
]

_STATUSES: Final[frozenset[str]] = frozenset(
    {"running", "exited", "timed_out", "canceled", "unknown"}
)
_EPOCH = re.compile(r"[0-9a-f]{32}")
_NATURAL = re.compile(r"[0-9]{1,18}")
_REASONS: Final = ("conflict", "stale_fence", "claim_lost")
_NOT_STARTED: Final = ("cwd", "e2big")


class Malformed(Exception):
    """The launcher answered something this module cannot parse."""


def _natural(word: str) -> int:
    if not _NATURAL.fullmatch(word):
        raise Malformed("not a natural number")
    return int(word)


def parse_state(line: str) -> CommandState:
    """A ``state <status> <code> <stdout_bytes> <stderr_bytes>`` line."""
    words = line.split(" ")
    if len(words) != 5 or words[0] != "state" or words[1] not in _STATUSES:
        raise Malformed("bad state line")
    status: CommandStatus = words[1]  # type: ignore[assignment]
    code = None if words[2] == "-" else _natural(words[2])
    if status in ("running", "unknown"):
        code = None
    return CommandState(
        status=status,
        exit_code=code,
        stdout_bytes=_natural(words[3]),
        stderr_bytes=_natural(words[4]),
    )


@attrs.frozen(kw_only=True)
class InitAnswer:
    """What installing the launcher reported: the ledger's epoch (``None``
    when it has none that can prove anything) and whether ``user`` is
    another uid than root."""

    epoch: str | None
    separated: bool


def parse_init(text: str) -> InitAnswer:
    words = text.strip().split(" ")
    if len(words) != 3 or words[0] != "ready" or words[2] not in ("0", "1"):
        raise Malformed("bad init answer")
    epoch = words[1] if _EPOCH.fullmatch(words[1]) else None
    return InitAnswer(epoch=epoch, separated=words[2] == "1")


NotStarted = Literal["cwd", "e2big"]
"""Why the launcher could not begin a claimed command: its cwd is missing,
not a directory or not enterable by ``user`` (``cwd``); Linux would refuse
the exec, the command's argument and environment being too big
(``e2big``)."""

NOT_STARTED_REFUSAL: Final = StartRefused(reason="not_started")
"""The core outcome of a start whose command could not begin: ``error``,
``executed: false`` (``e2b_command_not_started``), nothing ran and, the claim
being consumed, nothing will under this operation key. See
:attr:`StartAnswer.not_started`."""


@attrs.frozen(kw_only=True)
class StartAnswer:
    """A start's outcome and the ledger epoch it reported (``None`` if none
    could be read). ``not_started`` says why, when the launcher claimed the
    task but could not begin its command (the outcome is then
    :data:`NOT_STARTED_REFUSAL`, on the first start and on every retry)."""

    outcome: Started | StartRefused
    epoch: str | None
    not_started: NotStarted | None = None


def _epoch(line: str | None) -> str | None:
    """The epoch an ``epoch <epoch>`` line names, or ``None``."""
    words = (line or "").split(" ")
    if len(words) == 2 and words[0] == "epoch" and _EPOCH.fullmatch(words[1]):
        return words[1]
    return None


def parse_start(text: str, task_id: str) -> StartAnswer:
    """The decisive first line, then the epoch and state lines if readable.
    A first launch whose state line cannot be read is ``running`` (it was
    claimed and launched just now); a retry's is ``unknown``."""
    lines = text.strip("\n").split("\n")
    head = lines[0].split(" ")
    epoch = _epoch(lines[1] if len(lines) > 1 else None)
    if len(head) == 2 and head[0] == "refused" and head[1] in _REASONS:
        return StartAnswer(outcome=StartRefused(reason=head[1]), epoch=epoch)  # type: ignore[arg-type]
    if len(head) == 3 and head[:2] == ["refused", "not_started"] and head[2] in _NOT_STARTED:
        why: NotStarted = head[2]  # type: ignore[assignment]
        return StartAnswer(outcome=NOT_STARTED_REFUSAL, epoch=epoch, not_started=why)
    if len(head) != 2 or head[0] != "started" or head[1] not in ("0", "1"):
        raise Malformed("bad start answer")
    first = head[1] == "1"
    try:
        state = parse_state(lines[2]) if len(lines) > 2 else None
    except Malformed:
        state = None
    if state is None:
        state = CommandState(status="running" if first else "unknown")
    return StartAnswer(
        outcome=Started(task_id=task_id, first_launch=first, state=state), epoch=epoch
    )


@attrs.frozen(kw_only=True)
class CancelAnswer:
    """What a cancel observed, and the ledger epoch it reported."""

    state: CommandState
    epoch: str | None


def parse_cancel(text: str) -> CancelAnswer:
    """A state line, then the epoch line if readable."""
    lines = text.strip("\n").split("\n")
    return CancelAnswer(
        state=parse_state(lines[0]), epoch=_epoch(lines[1] if len(lines) > 1 else None)
    )


@attrs.frozen(kw_only=True)
class RawRead:
    """One read as the launcher answered it: raw bytes from the cursors.
    A wait's answer whose output was too big to prefetch carries no bytes
    (only the sizes)."""

    state: CommandState
    stdout: bytes
    stderr: bytes
    stdout_size: int
    stderr_size: int
    epoch: str | None = None


class _Lines:
    """A cursor over an answer: lines, and raw byte-counted text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def optional_line(self) -> str | None:
        """The next line, or ``None`` at the end of the answer."""
        return self.line() if self.text.find("\n", self.at) >= 0 else None

    def line(self) -> str:
        end = self.text.find("\n", self.at)
        if end < 0:
            raise Malformed("short answer")
        line = self.text[self.at : end]
        self.at = end + 1
        return line

    def raw(self, count: int) -> str:
        end = self.at + count
        if self.text[end : end + 1] != "\n":
            raise Malformed("text shorter than its count")
        raw = self.text[self.at : end]
        self.at = end + 1
        return raw


def _stream(lines: _Lines, tag: str) -> bytes:
    """``<tag> <base64>``, or ``<tag>:text <n>`` and n bytes of ASCII text."""
    words = lines.line().split(" ")
    if len(words) == 2 and words[0] == f"{tag}:text":
        raw = lines.raw(_natural(words[1]))
        if not raw.isascii():
            raise Malformed(f"{tag} text is not ASCII")
        return raw.encode("ascii")
    if words[0] != tag or len(words) > 2:
        raise Malformed(f"bad {tag} line")
    try:
        return base64.b64decode(words[1] if len(words) > 1 else "", validate=True)
    except ValueError as exc:
        raise Malformed(f"bad {tag} data") from exc


def parse_read(text: str) -> RawRead:
    """A read (or wait) answer: state, out, err and size lines, then the
    epoch line if there is one."""
    lines = _Lines(text)
    state = parse_state(lines.line())
    stdout = _stream(lines, "out")
    stderr = _stream(lines, "err")
    size = lines.line().split(" ")
    if len(size) != 3 or size[0] != "size":
        raise Malformed("bad size line")
    stdout_size, stderr_size = _natural(size[1]), _natural(size[2])
    return RawRead(
        state=attrs.evolve(state, stdout_bytes=stdout_size, stderr_bytes=stderr_size),
        stdout=stdout,
        stderr=stderr,
        stdout_size=stdout_size,
        stderr_size=stderr_size,
        epoch=_epoch(lines.optional_line()),
    )


def _continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def utf8_slice(data: bytes, cursor: int, max_bytes: int) -> tuple[str, int]:
    """Text of at most ``max_bytes`` from ``data`` (the bytes at ``cursor``
    onward, possibly a few more than ``max_bytes``), never ending inside a
    UTF-8 character; a cursor inside one moves to the next boundary. Returns
    the text and the next cursor. The text decodes the bytes exactly: bytes
    that are not UTF-8 become lone surrogates (``surrogateescape``), which the
    port's masked reads turn into U+FFFD after masking (C17 needs exact byte
    positions; see :mod:`sandrail.core._masking`)."""
    if not data:
        return "", cursor
    start = 0
    while start < min(len(data), 3) and _continuation(data[start]):
        start += 1
    end = min(start + max_bytes, len(data))
    backed = 0
    while end < len(data) and _continuation(data[end]) and backed < 3 and end > start + 1:
        end -= 1
        backed += 1
    return data[start:end].decode("utf-8", errors="surrogateescape"), cursor + end


def chunk_of(raw: RawRead, stdout_cursor: int, stderr_cursor: int, max_bytes: int) -> OutputChunk:
    """The :class:`OutputChunk` a read of ``raw`` from these cursors gives."""
    stdout, next_out = utf8_slice(raw.stdout, stdout_cursor, max_bytes)
    stderr, next_err = utf8_slice(raw.stderr, stderr_cursor, max_bytes)
    return OutputChunk(
        stdout=stdout,
        stderr=stderr,
        next_stdout_cursor=next_out,
        next_stderr_cursor=next_err,
        more=raw.stdout_size > next_out or raw.stderr_size > next_err,
        state=raw.state,
    )
