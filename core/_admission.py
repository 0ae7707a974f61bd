"""Admission (C14): how many bytes the fixed part of a call's largest result
needs, measured before anything runs.

Strategy: a result's fixed part is its locator plus fields that do not
depend on who asked. The size of a JSON object is the sum of its parts'
sizes (keys are distinct), so the identity-free remainder of each result
shape a tool's record names is measured once per tool and cached; a call
then costs one measurement of its own locator.
"""

from __future__ import annotations

import functools
from typing import Final

from ._budget import fixed_size
from ._canonical import canonical_json
from ._contents import (
    LONGEST_SANDBOX_ID,
    LONGEST_TASK_ID,
    UNCERTAIN_REASONS,
    _uncertain_content,
)
from ._identity import AgentIdentity, AgentOwner, NativeIdentity
from ._snapshot import PortSettings, _Snapshot
from ._tool_record import ToolRecord
from ._tools import tool_record

__all__ = ["admission_size", "minimum_output_bytes", "record_admission_size"]


def admission_size(snap: _Snapshot, settings: PortSettings) -> int:
    """Bytes the largest fixed part of any result of this call needs (C14).

    Measures the minimal ``uncertain`` result with the full identity and the
    longest legal sandbox and task ids, and the fixed part of the tool's
    ``ok`` results (its record's ``result_shapes``) with their largest legal
    numbers and a cut-output note. Only shrinkable text can give way later,
    so a call whose fixed part cannot fit is refused before any side effect.
    Raises :class:`~sandrail.core.UnknownToolError` for a tool without a
    record.
    """
    return record_admission_size(tool_record(snap.tool), snap, settings)


def record_admission_size(record: ToolRecord, snap: _Snapshot, settings: PortSettings) -> int:
    """:func:`admission_size` of a call of ``record``'s tool."""
    sizes = []
    base: int | None = None
    for with_sandbox, overhead in _fixed_overheads(
        record, settings.contract, settings.allow_internet_access
    ):
        if with_sandbox is None:
            sizes.append(overhead)
            continue
        if base is None:
            # The locator without its ids, measured once; each id adds its
            # entry (a comma, the key, a colon, the value: keys are distinct).
            base = len(canonical_json(snap.locator()))
        size = base + _TASK_ENTRY + (_SANDBOX_ENTRY if with_sandbox else 0)
        sizes.append(size - 1 + overhead)
    return max(sizes)


def minimum_output_bytes(
    settings: PortSettings,
    tool: str,
    identity: AgentIdentity | NativeIdentity | None = None,
    *,
    call_id: str = "c",
    operation_key: str = "k",
) -> int:
    """The smallest ``max_output_bytes`` with which a call of ``tool`` with
    ``call_id`` and ``operation_key`` can be admitted (C14):
    :func:`admission_size` of such a call. By default one-character ids, so
    no call of ``tool`` at all can be admitted below it (longer ids need
    more, byte for byte).

    ``identity`` is the one calls will state; ``None`` measures the shortest
    one the owner allows (for a native owner whose identity is only known
    call by call: its scope, one-character ids, fence 0). Raises
    :class:`~sandrail.core.UnknownToolError` for a tool without a record.
    """
    record = tool_record(tool)
    if identity is None:
        owner = settings.owner
        if isinstance(owner, AgentOwner):
            identity = AgentIdentity(agent_id=owner.agent_id)
        else:
            identity = NativeIdentity(
                scope=owner.scope,
                run_id="r",
                turn_id="t",
                build_id="b",
                task_chain_id="c",
                parent_run_id="p",
                execution_fence=0,
            )
    snap = _Snapshot(
        tool=tool,
        call_id=call_id,
        operation_key=operation_key,
        session_id=settings.session_id,
        identity=identity,
        arguments={},
        digest="",
        governed=False,
    )
    return record_admission_size(record, snap, settings)


def _entry_size(key: str, value: str) -> int:
    """Bytes an entry adds to a non-empty object's canonical JSON."""
    return 1 + len(canonical_json(key)) + 1 + len(canonical_json(value))


_TASK_ENTRY: Final = _entry_size("task_id", LONGEST_TASK_ID)
_SANDBOX_ENTRY: Final = _entry_size("sandbox_id", LONGEST_SANDBOX_ID)


@functools.lru_cache(maxsize=64)
def _fixed_overheads(
    record: ToolRecord, contract: str, allow_internet_access: bool
) -> tuple[tuple[bool | None, int], ...]:
    """For each result shape of ``record``'s tool (its ``uncertain`` result
    and its record's ``result_shapes``): whether its locator names the
    sandbox (``None``: it has no locator), and the size of its fixed part
    less its locator (plus one, for the brace the two share)."""
    snap = _Snapshot(
        tool=record.name,
        call_id="",
        operation_key="",
        session_id="",
        identity=AgentIdentity(agent_id=""),
        arguments={},
        digest="",
        governed=False,
    )
    settings = PortSettings(
        session_id="",
        owner=AgentOwner(agent_id=""),
        definitions=(),
        contract=contract,
        allow_internet_access=allow_internet_access,
    )
    sandbox_id, task = LONGEST_SANDBOX_ID, LONGEST_TASK_ID
    reason = max(UNCERTAIN_REASONS, key=lambda code: len(code.value))
    uncertain = _uncertain_content(
        snap, reason, "timed_out", sandbox_id, task, record.uncertain_words(readable=True)
    )
    shapes = [(True, uncertain), *record.result_shapes(snap, settings)]
    overheads: list[tuple[bool | None, int]] = []
    for with_sandbox, content in shapes:
        size = fixed_size(content)
        if with_sandbox is not None:
            locator = snap.locator(sandbox_id if with_sandbox else None, task)
            size -= len(canonical_json(locator)) - 1
        overheads.append((with_sandbox, size))
    return tuple(overheads)
