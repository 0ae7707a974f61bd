"""What a session masks in all output (C17), and the identity values its
results showed (``docs/howto/secrets.md``).

A port masks every env value it passed to a command, for good, and every
value the harness named (``redact=``); it refuses an env value that results
show whole elsewhere (:mod:`sandrail.core._shown`). Both are facts about
the session, not about one port: a web harness that builds a port per
request, on one backend, must not forget between requests what the session
masks (else a second port could read the task the first
launched with env and show the value in clear), and a value one port of
a :class:`~sandrail.Toolset` passed is masked in what another shows
(say a file the command port's env was written to, printed by the code
port of the same toolset).

So there is one :class:`Masks` per backend object and session id
(:func:`masks_for`), kept for as long as that backend object lives (as long
as it holds the session: the E2B backend keeps its sessions' sandboxes),
never for the whole process: another backend object, or another session,
starts with nothing. Across a restart a harness hands the values back with
``redact=``. A backend that cannot be referenced weakly (a callable of a
built-in type) gets a :class:`Masks` per port (a toolset's ports still share
theirs); a bound method is keyed by its object, and a
:class:`~sandrail.interpreters.replay.Recorder` by the backend it wraps
(it passes every effect there: a Recorder put around a session's backend
mid-session put the values that session masks in clear in its cassette).
The values live in memory only: never in an effect
or a recording.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Iterable, Mapping

from sandrail.core import (
    MAX_SHOWN_BYTES,
    MIN_REDACTED_LENGTH,
    NOTHING_SHOWN,
    ArgumentProblem,
    Redactions,
    ShownIdentities,
    joined,
    mask_text,
    redaction_secrets,
)
from sandrail.interpreters.replay import Recorder

__all__ = ["Masks", "checked_redact", "holder_of", "is_text", "masked_problems", "masks_for"]


class Masks:
    """A session's values to mask and identity values shown, safe to share
    between threads and ports.

    :attr:`secrets` and :attr:`redactions` are replaced whole, never changed
    in place, so a reader needs no lock.
    """

    def __init__(self, values: frozenset[str] = frozenset()) -> None:
        self._lock = threading.Lock()
        self.secrets: frozenset[str] = frozenset()
        self.redactions = Redactions(frozenset())
        self._shown: dict[str, None] = {}
        self._shown_bytes = 0
        self._overflowed = False
        self._joined: ShownIdentities | None = NOTHING_SHOWN
        self.learn(values)

    def learn(self, values: frozenset[str]) -> None:
        """Mask ``values`` from now on, in every call of every port sharing this."""
        if values <= self.secrets:
            return
        with self._lock:
            self.secrets = self.secrets | values
            self.redactions = Redactions(self.secrets)

    def saw(self, values: Iterable[str]) -> None:
        """Note identity values a result showed whole. Past
        :data:`~sandrail.core._shown.MAX_SHOWN_BYTES` of them, the record
        says it is incomplete."""
        with self._lock:
            for value in values:
                if value in self._shown or self._overflowed:
                    continue
                size = len(value.encode("utf-8", "surrogatepass"))
                if self._shown_bytes + size > MAX_SHOWN_BYTES:
                    self._overflowed = True
                else:
                    self._shown[value] = None
                    self._shown_bytes += size
                self._joined = None

    def shown(self) -> ShownIdentities:
        """The identity values noted so far (built when asked, then kept
        until another is noted: only calls with env values ask)."""
        with self._lock:
            if self._joined is None:
                self._joined = ShownIdentities(joined(self._shown), self._overflowed)
            return self._joined


_MEMORIES: dict[int, dict[str, Masks]] = {}
# Re-entrant: a backend collected while the lock is held (a garbage
# collection can run at any allocation) forgets its memories under it.
_LOCK = threading.RLock()


def masks_for(backend: object, session_id: str) -> Masks:
    """The :class:`Masks` of ``session_id`` on ``backend`` (see the module doc)."""
    holder = holder_of(backend)
    try:
        weakref.ref(holder)
    except TypeError:
        return Masks()  # not weakly referable: a memory of its own
    with _LOCK:
        sessions = _MEMORIES.get(id(holder))
        if sessions is None:
            # Keyed by identity, and forgotten when the backend is collected
            # (before its id can be another object's).
            sessions = _MEMORIES[id(holder)] = {}
            weakref.finalize(holder, _forget, id(holder))
        masks = sessions.get(session_id)
        if masks is None:
            masks = sessions[session_id] = Masks()
        return masks


def holder_of(backend: object) -> object:
    """The object that holds ``backend``'s sessions: a bound method's
    object, and what a Recorder wraps (however deep; a Recorder that wraps
    itself, through any chain, holds its own)."""
    seen: set[int] = set()
    holder = backend
    while True:
        holder = holder.__self__ if inspect.ismethod(holder) else holder
        if not isinstance(holder, Recorder) or id(holder) in seen:
            return holder
        seen.add(id(holder))
        holder = holder.inner


def _forget(key: int) -> None:
    with _LOCK:
        _MEMORIES.pop(key, None)


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
