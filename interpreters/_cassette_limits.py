"""What a cassette may be: a regular file of bounded size,
holding only outcomes some sandbox could give.

A replay reads a file someone hands it, perhaps a tampered one. Reading
``/dev/zero`` or a 4 GiB sparse file whole took gigabytes in seconds, so a
cassette is read from a regular file only, and only up to a cap. And the
core trusts the numbers an outcome carries as far as its budget does (C12,
C14: admission measures every result with safe integers, sizes and cursors
never negative, sandbox ids of the legal form): an exit code of 2^64, or a
negative size, is no sandbox's answer, so a recording that holds one is
refused at its line instead of replayed as "identical".
"""

from __future__ import annotations

import os
import re
import stat
from typing import Final

from sandrail.core import (
    ArtifactRef,
    CancelRequested,
    CommandState,
    Outcome,
    OutputChunk,
    SandboxReady,
    SandboxState,
    Started,
)

__all__ = ["MAX_CASSETTE_BYTES", "outcome_problem", "read_bounded"]

MAX_CASSETTE_BYTES: Final = 64 * 1024 * 1024
"""The largest cassette read by default (as the command line's ``--record``
caps its record): a replay holds the whole recording in memory."""

_MAX_SAFE: Final = 2**53 - 1
"""The core's bound on every number a result shows (admission, C14)."""
_SANDBOX_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
_TASK_ID: Final = re.compile(r"[0-9a-f]{64}")


class LimitError(ValueError):
    """The file is not one a replay reads: not a regular file, or bigger
    than the cap."""


def read_bounded(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

    Raises :class:`OSError` when it cannot be opened or read, and
    :class:`LimitError` (before reading anything) for a file that is not a
    regular file or is bigger than ``max_bytes``, or (having read one byte
    more) for one that grew past it. A FIFO is refused without waiting for
    a writer: it is opened non-blocking.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(descriptor, "rb") as handle:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise LimitError("not a regular file (a cassette is a file a Recorder wrote)")
        if info.st_size > max_bytes:
            raise LimitError(_over(max_bytes))
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise LimitError(_over(max_bytes))  # it grew while being read
    return data


def _over(max_bytes: int) -> str:
    return (
        f"larger than {max_bytes} bytes, the cap for a cassette (raise it with "
        "load_cassette's max_bytes, or sandrail replay --max-bytes)"
    )


def outcome_problem(outcome: Outcome) -> str | None:
    """Why ``outcome`` is no answer a sandbox (or an artifact store) can
    give, or ``None`` when it is one: a number the core's budget does not
    allow for (an exit code beyond ±(2^53 - 1), a negative or unsafe size or
    cursor), or a sandbox or task id of another form than the core's."""
    match outcome:
        case CommandState():
            return _state_problem(outcome, "")
        case Started():
            if not _TASK_ID.fullmatch(outcome.task_id):
                return "task_id is not 64 lowercase hex digits"
            return _state_problem(outcome.state, "state.")
        case CancelRequested():
            return _state_problem(outcome.state, "state.")
        case OutputChunk():
            for name in ("next_stdout_cursor", "next_stderr_cursor"):
                if not _natural(getattr(outcome, name)):
                    return f"{name} is {getattr(outcome, name)}, not from 0 to 2^53 - 1"
            for name in ("stdout_start", "stderr_start"):
                value = getattr(outcome, name)
                if value is not None and not _natural(value):
                    return f"{name} is {value}, not from 0 to 2^53 - 1"
            return _state_problem(outcome.state, "state.")
        case SandboxReady() | SandboxState():
            sandbox_id = outcome.sandbox_id
            if sandbox_id is not None and not _SANDBOX_ID.fullmatch(sandbox_id):
                return "sandbox_id is not 1 to 128 of A-Z, a-z, 0-9, '_' and '-'"
            return None
        case ArtifactRef():
            # The port drops such a reference from a live store (C12); no
            # store that works reports one.
            if not _natural(outcome.size_bytes):
                return f"size_bytes is {outcome.size_bytes}, not from 0 to 2^53 - 1"
            return None
        case _:
            return None


def _state_problem(state: CommandState, prefix: str) -> str | None:
    code = state.exit_code
    if code is not None and not -_MAX_SAFE <= code <= _MAX_SAFE:
        return f"{prefix}exit_code is {code}, beyond ±(2^53 - 1)"
    for name in ("stdout_bytes", "stderr_bytes"):
        value = getattr(state, name)
        if not _natural(value):
            return f"{prefix}{name} is {value}, not from 0 to 2^53 - 1"
    return None


def _natural(value: int) -> bool:
    return 0 <= value <= _MAX_SAFE
