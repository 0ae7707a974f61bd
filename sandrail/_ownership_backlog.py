"""Noting each call's answer in the record, even when the record is down.

The answer an operator most needs to see is the ``uncertain`` one a call got
*because* the record was down; and that is just when the record cannot take
it. So a port notes answers through :func:`note_answer`, which never raises.

Strategy: an answer the record cannot take is kept in this process, the
latest per task, up to :data:`MAX_BACKLOG`, and noted before the next answer
of any call on the same record; and a daemon thread per record with a
backlog tries again with backoff (for :data:`RETRY_FOR_SECONDS` at most), so
the operator's list shows it once the record is back, even if no call
follows. Until then, and for good if the process ends first, it is in the
log: a warning on the ``sandrail`` logger naming the task.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any, Final

from sandrail._ownership import Answer, OwnershipRecord
from sandrail.core import ErrorCode, Owner, ToolRequest, ToolResult

__all__ = ["MAX_BACKLOG", "RETRY_FOR_SECONDS", "note_answer"]

MAX_BACKLOG: Final = 10_000
"""Answers a process keeps for a record that could not take them, at most."""

RETRY_FOR_SECONDS: Final = 3600.0
"""How long the background retry of a record's backlog goes on, at most."""

_FIRST_RETRY_SECONDS: Final = 0.5
_LAST_RETRY_SECONDS: Final = 30.0

_log = logging.getLogger("sandrail")
_lock = threading.Lock()


class _Backlog:
    """A record's answers waiting to be noted, and the lock that lets one
    thread at a time note them in order (a kept ``uncertain`` noted after
    the ``ok`` that replaced it would list a settled task again)."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], Answer] = {}
        self.noting = threading.Lock()


_backlogs: weakref.WeakKeyDictionary[Any, _Backlog] = weakref.WeakKeyDictionary()
_retrying: set[int] = set()  # id() of the records whose backlog a thread retries


def note_answer(
    record: OwnershipRecord, request: ToolRequest, owner: Owner, result: ToolResult
) -> None:
    """Note ``result`` as the last answer of the task it names in ``record``
    (what a port with ``record=`` does after every call), with any answer
    kept before for the record (see the module doc). Never raises: the
    result is true whatever the record makes of it. An answer that says the
    record failed this very call is not tried again at once (that would hold
    the call another timeout): it is kept, and retried in the background."""
    answer = Answer.of(request, owner, result)
    with _lock:
        try:
            backlog = _backlogs.setdefault(record, _Backlog())
        except TypeError:  # a record that cannot be weakly referenced: no backlog
            backlog = _Backlog()
        if answer is not None:
            key = (answer.session_id, answer.task_id)
            backlog.answers.pop(key, None)  # the latest answer of a task, last in order
            backlog.answers[key] = answer
        _trim(backlog.answers)
    if answer is not None and answer.error_type == ErrorCode.OWNERSHIP_RECORD_UNAVAILABLE.value:
        _log.warning(
            "the ownership record is unavailable: the %s answer of task %s (session %s) "
            "is kept to note later",
            answer.status,
            answer.task_id,
            answer.session_id,
        )
        _retry_later(record)
        return
    if not _flush(record, backlog, logged=True):
        _retry_later(record)


def _flush(record: OwnershipRecord, backlog: _Backlog, *, logged: bool) -> bool:
    """Note the answers of ``backlog`` in order, each removed once noted;
    ``True`` when none is left."""
    with backlog.noting:
        return _note_waiting(record, backlog.answers, logged=logged)


def _note_waiting(
    record: OwnershipRecord, backlog: dict[tuple[str, str], Answer], *, logged: bool
) -> bool:
    with _lock:
        waiting = list(backlog.values())
    for kept in waiting:
        try:
            record.note(kept)
        except Exception as exc:
            (_log.warning if logged else _log.debug)(
                "could not note the %s answer of task %s (session %s) in the ownership "
                "record, kept to note later: %s",
                kept.status,
                kept.task_id,
                kept.session_id,
                exc,
            )
            return False
        with _lock:
            key = (kept.session_id, kept.task_id)
            if backlog.get(key) is kept:
                del backlog[key]
    with _lock:
        return not backlog


def _trim(backlog: dict[tuple[str, str], Answer]) -> None:
    while len(backlog) > MAX_BACKLOG:
        dropped = backlog.pop(next(iter(backlog)))
        _log.warning(
            "dropped the %s answer of task %s (session %s): too many answers wait for "
            "the ownership record",
            dropped.status,
            dropped.task_id,
            dropped.session_id,
        )


def _retry_later(record: OwnershipRecord) -> None:
    """Start the background retry of ``record``'s backlog, unless one runs."""
    try:
        reference = weakref.ref(record)
    except TypeError:
        return
    with _lock:
        if id(record) in _retrying:
            return
        _retrying.add(id(record))
    threading.Thread(
        target=_retry, args=(reference, id(record)), name="sandrail-record-backlog", daemon=True
    ).start()


def _retry(reference: weakref.ref[Any], ident: int) -> None:
    """Try ``reference``'s backlog again with backoff until it is empty, the
    record is gone, or :data:`RETRY_FOR_SECONDS` passed."""
    try:
        delay, give_up = _FIRST_RETRY_SECONDS, time.monotonic() + RETRY_FOR_SECONDS
        while time.monotonic() < give_up:
            time.sleep(delay)
            delay = min(delay * 2, _LAST_RETRY_SECONDS)
            record = reference()
            if record is None:
                return
            with _lock:
                backlog = _backlogs.get(record)
            if backlog is None or _flush(record, backlog, logged=False):
                return
            del record
        _log.warning("gave up noting answers in the ownership record after %d s", RETRY_FOR_SECONDS)
    finally:
        with _lock:
            _retrying.discard(ident)
