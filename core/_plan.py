"""A port's plan: what every call of one session would otherwise compute
again, computed once from the port's settings and the tool records.

Strategy: a call's task id (C1), its admission size (C14) and the guard's
effect differ from call to call only in a few strings (its operation key,
its call id). Everything else in them is fixed for the session: the task
id's frame up to the operation key, the locator's agent and session, each
tool's result shapes. The plan holds those fixed parts already encoded, so
a call encodes only its own strings and hashes once. It is derived, never
stated: each value is the one the general function
(:func:`~sandrail.core.task_id`, :func:`~sandrail.core.admission_size`)
computes, and a property test holds the two to that. A tool's part of the
plan is keyed by its record (the testing kit's mutants may swap a record
for a run: the plan then measures the swapped one).
"""

from __future__ import annotations

import hashlib
from json.encoder import encode_basestring
from typing import Final

from ._admission import _SANDBOX_ENTRY, _TASK_ENTRY, _fixed_overheads, record_admission_size
from ._canonical import canonical_json
from ._identity import _TASK_ID_DOMAIN, AgentIdentity, AgentOwner
from ._snapshot import PortSettings, _Snapshot
from ._tool_record import ToolRecord

__all__ = ["SessionPlan", "session_plan"]

_AGENT_LOCATOR_KEYS: Final = ("agent_id", "session_id", "operation_key", "call_id")


def _json_size(text: str) -> int:
    """Bytes ``text`` takes as a canonical JSON string, quotes included."""
    escaped: str = encode_basestring(text)
    return len(escaped) if escaped.isascii() else len(escaped.encode("utf-8", "surrogatepass"))


class SessionPlan:
    """The fixed parts of every call of one port (see the module doc)."""

    def __init__(self, settings: PortSettings) -> None:
        self._settings = settings
        owner = settings.owner
        frame = canonical_json([_TASK_ID_DOMAIN, settings.session_id, owner.key()])
        self._task_prefix = frame[:-1] + b","
        """The task id's frame up to the operation key: ``[domain,session,owner,``."""
        self._agent_id = owner.agent_id if isinstance(owner, AgentOwner) else None
        self._agent_base: int | None = None
        if self._agent_id is not None:
            # An agent's locator: four entries, two of them fixed for the
            # session (its braces, commas, keys and colons too).
            fixed = sum(_json_size(key) + 1 for key in _AGENT_LOCATOR_KEYS) + 2 + 3
            self._agent_base = fixed + _json_size(self._agent_id) + _json_size(settings.session_id)
        self._admission: dict[ToolRecord, tuple[int | None, int]] = {}

    def task_id(self, operation_key: str) -> str:
        """:func:`~sandrail.core.task_id` of this session's owner and
        ``operation_key``: the one canonical string encoded, one hash.
        Raises ``UnicodeEncodeError`` for a key that is not valid Unicode
        text (the port refuses such a key before it gets here)."""
        key = encode_basestring(operation_key).encode("utf-8")
        return hashlib.sha256(self._task_prefix + key + b"]").hexdigest()

    def admission_size(self, record: ToolRecord, snap: _Snapshot) -> int:
        """:func:`~sandrail.core._admission.record_admission_size` of a call
        of ``record``'s tool: the largest fixed part of its results (C14)."""
        base = self._locator_size(snap)
        if base is None:
            return record_admission_size(record, snap, self._settings)
        sizes = self._admission.get(record)
        if sizes is None:
            sizes = self._admission[record] = self._sizes(record)
        bare, extra = sizes
        size = base + extra
        return size if bare is None or bare < size else bare

    def _sizes(self, record: ToolRecord) -> tuple[int | None, int]:
        """For ``record``'s shapes: the largest without a locator (``None``:
        none), and what the largest with one adds to the locator's size."""
        bare: int | None = None
        extra: int | None = None
        settings = self._settings
        for with_sandbox, overhead in _fixed_overheads(
            record, settings.contract, settings.allow_internet_access
        ):
            if with_sandbox is None:
                bare = overhead if bare is None else max(bare, overhead)
                continue
            added = _TASK_ENTRY + (_SANDBOX_ENTRY if with_sandbox else 0) - 1 + overhead
            extra = added if extra is None else max(extra, added)
        assert extra is not None  # every tool has its uncertain result, which has one
        return bare, extra

    def _locator_size(self, snap: _Snapshot) -> int | None:
        """The canonical size of ``snap``'s locator without its ids, when the
        plan knows its fixed part (an agent's own call), else ``None``."""
        identity = snap.identity
        if (
            self._agent_base is None
            or type(identity) is not AgentIdentity
            or identity.agent_id != self._agent_id
            or snap.session_id != self._settings.session_id
        ):
            return None
        return self._agent_base + _json_size(snap.operation_key) + _json_size(snap.call_id)


def session_plan(settings: PortSettings) -> SessionPlan:
    """The plan of the port ``settings`` belong to: made at the first call,
    then kept with them (settings are immutable)."""
    plan = settings.plan
    if plan is None:
        plan = SessionPlan(settings)
        object.__setattr__(settings, "plan", plan)
    assert isinstance(plan, SessionPlan)
    return plan
