"""What a replay ran: the transcript entries and the :class:`ReplayReport`.

Data only. :mod:`._replayer` writes the entries as it answers effects, and
:class:`~sandrail.interpreters._divergence.DivergenceError` carries the
report of the replay so far; both import it from here, so neither imports
the other's module back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["CallEntry", "Entry", "ReplayReport", "ResultEntry", "StepEntry"]


@attrs.frozen(kw_only=True)
class StepEntry:
    """One replayed effect and the recorded answer it got."""

    call: int
    step: int
    effect: Mapping[str, Any]
    outcome: Mapping[str, Any] | None
    failure: Mapping[str, Any] | None


@attrs.frozen(kw_only=True)
class CallEntry:
    """A replayed call begins: its request (as recorded, redacted)."""

    call: int
    request: Mapping[str, Any]


@attrs.frozen(kw_only=True)
class ResultEntry:
    """The result a replayed call ended with (equal to the recorded one)."""

    call: int
    result: Mapping[str, Any]


Entry = CallEntry | StepEntry | ResultEntry


@attrs.frozen(kw_only=True)
class ReplayReport:
    """What a replay ran: the header and a transcript in order."""

    source: str
    header: Mapping[str, Any]
    transcript: tuple[Entry, ...]
    complete: bool = True
    """False when the recording has no end line: it may have been cut short."""

    @property
    def calls(self) -> int:
        """How many calls were replayed."""
        return sum(isinstance(entry, ResultEntry) for entry in self.transcript)

    @property
    def steps(self) -> int:
        """How many effects were replayed."""
        return sum(isinstance(entry, StepEntry) for entry in self.transcript)
