"""The values a port masks in all its output (C17).

A port masks every env value it passed to a command, for the rest of its
life, and every value the harness named (``redact=``). A
:class:`~sandrail.Toolset` gives all its ports one :class:`Masks`, so a
value one port passed is masked in what another shows (outside attack 3: a
file the command port's env was written to, printed by the code port of the
same toolset). The values live in memory only: never in an effect or a
recording.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from sandrail.core import (
    MIN_REDACTED_LENGTH,
    ArgumentProblem,
    Redactions,
    mask_text,
    redaction_secrets,
)

__all__ = ["Masks", "checked_redact", "is_text", "masked_problems"]


class Masks:
    """A growing set of values to mask, safe to share between threads.

    :attr:`secrets` and :attr:`redactions` are replaced whole, never changed
    in place, so a reader needs no lock.
    """

    def __init__(self, values: frozenset[str] = frozenset()) -> None:
        self._lock = threading.Lock()
        self.secrets: frozenset[str] = frozenset()
        self.redactions = Redactions(frozenset())
        self.learn(values)

    def learn(self, values: frozenset[str]) -> None:
        """Mask ``values`` from now on, in every call of every port sharing this."""
        if values <= self.secrets:
            return
        with self._lock:
            self.secrets = self.secrets | values
            self.redactions = Redactions(self.secrets)


def is_text(text: str) -> bool:
    """Whether ``text`` is valid Unicode (no lone surrogates): JSON can carry it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def checked_redact(values: Iterable[str]) -> frozenset[str]:
    """``redact=`` as a set of values to mask; ``TypeError`` or ``ValueError``
    for anything but strings of at least ``MIN_REDACTED_LENGTH`` characters
    of valid Unicode (a shorter one would mask ordinary text)."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise TypeError("redact must be an iterable of strings (a list of values to mask)")
    found: set[str] = set()
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"redact holds a {type(value).__name__}; values to mask are strings")
        if len(value) < MIN_REDACTED_LENGTH:
            raise ValueError(
                f"redact holds a value of {len(value)} characters; values to mask need at "
                f"least {MIN_REDACTED_LENGTH} (a shorter one would mask ordinary text)"
            )
        if not is_text(value):
            raise ValueError("redact holds a value that is not valid Unicode text")
        found.add(value)
    return frozenset(found)


def masked_problems(
    problems: Iterable[ArgumentProblem], masked: frozenset[str], arguments: object
) -> list[ArgumentProblem]:
    """``problems`` with the session's values (``masked``) and this call's
    env values masked: a model may write a value into a field name it gets
    back (C17). Masked before the budget fits them (a mask can be longer
    than the value)."""
    secrets = set(masked)
    env = arguments.get("env") if isinstance(arguments, Mapping) else None
    if isinstance(env, list):  # the strict profiles' {name, value} entries
        env = {
            str(index): entry.get("value")
            for index, entry in enumerate(env)
            if isinstance(entry, Mapping)
        }
    secrets |= redaction_secrets(env)
    if not secrets:
        return list(problems)
    redactions = Redactions(secrets)
    return [
        ArgumentProblem(mask_text(problem.path, redactions), mask_text(problem.reason, redactions))
        for problem in problems
    ]
