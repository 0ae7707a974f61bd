"""What a session remembers on its backend: the values it masks (C17) and
the identity values its results showed (issue 20, items 3 and 4).

A port masks every env value it passed, for good, and refuses an env value
that results show whole elsewhere (:mod:`sandrail.core._shown`). Both are
facts about the session, not about one port: a web harness that builds a
port per request, on one backend, must not forget between requests what
the session masks (outside attack 3, item 4: a second port read the task
the first launched with env and showed the value in clear). So the memory
is kept per backend object and session id, for as long as that backend
object lives (as long as it holds the session: the E2B backend keeps its
sessions' sandboxes), never for the whole process: another backend object,
or another session, starts with nothing. Across a restart a harness hands
the values back with ``redact=``.

A backend that cannot be referenced weakly (a callable of a built-in type)
gets a memory per port, as before; a bound method is keyed by its object.
The values live in memory only: never in an effect or a recording.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections.abc import Iterable

from sandrail.core._masking import Redactions
from sandrail.core._shown import MAX_SHOWN_BYTES, NOTHING_SHOWN, ShownIdentities, joined

__all__ = ["SessionMemory", "memory_for"]


class SessionMemory:
    """A session's values to mask and identity values shown, safe to share
    between threads and ports.

    :attr:`secrets` and :attr:`redactions` are replaced whole, never changed
    in place, so a reader needs no lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.secrets: frozenset[str] = frozenset()
        self.redactions = Redactions(frozenset())
        self._shown: dict[str, None] = {}
        self._shown_bytes = 0
        self._overflowed = False
        self._joined: ShownIdentities | None = NOTHING_SHOWN

    def learn(self, values: frozenset[str]) -> None:
        """Mask ``values`` from now on, in every call of every port of the session."""
        if values <= self.secrets:
            return
        with self._lock:
            self.secrets = self.secrets | values
            self.redactions = Redactions(self.secrets)

    def saw(self, values: Iterable[str]) -> None:
        """Note identity values a result showed whole. Past
        :data:`MAX_SHOWN_BYTES` of them, the record says it is incomplete."""
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


_MEMORIES: dict[int, dict[str, SessionMemory]] = {}
# Re-entrant: a backend collected while the lock is held (a garbage
# collection can run at any allocation) forgets its memories under it.
_LOCK = threading.RLock()


def memory_for(backend: object, session_id: str) -> SessionMemory:
    """The memory of ``session_id`` on ``backend`` (see the module doc)."""
    holder = backend.__self__ if inspect.ismethod(backend) else backend
    try:
        weakref.ref(holder)
    except TypeError:
        return SessionMemory()  # not weakly referable: a memory of its own
    with _LOCK:
        sessions = _MEMORIES.get(id(holder))
        if sessions is None:
            # Keyed by identity, and forgotten when the backend is collected
            # (before its id can be another object's).
            sessions = _MEMORIES[id(holder)] = {}
            weakref.finalize(holder, _forget, id(holder))
        memory = sessions.get(session_id)
        if memory is None:
            memory = sessions[session_id] = SessionMemory()
        return memory


def _forget(key: int) -> None:
    with _LOCK:
        _MEMORIES.pop(key, None)
