"""The toolset's ownership record, and a call whose key already launched.

:func:`shared_record` is the one record of what a toolset's ports launched
(they share task ids), written through to the harness's durable one.

Why a refusal may not say "nothing ran":
A person's rejection, or a policy that now refuses, may meet a call whose
key already started a command: approved once, then rejected on a resumed
copy; allowed once, then denied on a retry. Telling the model "nothing ran"
(``executed: false``) would license a retry with any key (C5) while the
first start may have run (C6). So the toolset asks its ownership record
first (:func:`launched_row`) and answers such a refusal with the core's
:func:`~sandrail.core.refused_after_launch`: ``uncertain``, the task's
locator, nothing more sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from sandrail._options import RememberOwnedCallback, ResolveOwnedCallback
from sandrail.core import (
    OwnedCommand,
    Owner,
    ToolCall,
    ToolDefinition,
    ToolKind,
    ToolRequest,
    recorded_match,
    task_id,
    tool_record,
)

__all__ = ["alike", "launched_row", "lookup", "shared_record"]

Resolve = Callable[[ToolRequest, str], OwnedCommand | None]


def launched_row(
    resolve: Resolve,
    definitions: Mapping[str, ToolDefinition],
    session_id: str,
    owner: Owner,
    name: str,
    operation_key: str,
) -> OwnedCommand | None:
    """The record's row when a start of launch tool ``name`` under
    ``operation_key`` may already have left, else ``None`` (also for a tool
    that launches nothing, and a record that cannot be read: the answer
    then stands as it was)."""
    definition = definitions.get(name)
    if definition is None or not isinstance(operation_key, str):
        return None
    if tool_record(name).kind is not ToolKind.LAUNCHES:
        return None
    try:
        # Inside: a key that is not valid text has no task id (the port
        # refuses it), and neither has a launch.
        wanted = task_id(session_id, owner, operation_key)
        known = resolve(lookup(definition, session_id, operation_key), wanted)
    except Exception:
        return None
    if isinstance(known, OwnedCommand) and known.task_id == wanted and known.launched:
        return known
    return None


def alike(
    known: OwnedCommand, name: str, arguments: object, secrets: frozenset[str] = frozenset()
) -> bool:
    """Whether ``arguments`` (the port's form) may ask for the launch
    ``known`` recorded: anything but a visible change against its digest
    (:func:`~sandrail.core.recorded_match` with ``secrets``, the values the
    session masks now; a row without one matches). A digest the masks of
    now cannot explain, where the first call's masks may (``unknown``),
    counts as alike: its start may have run, so nothing here says it did
    not (C6)."""
    try:
        match = recorded_match(known.launch_digest, name, arguments, secrets)  # type: ignore[arg-type]
    except Exception:
        return False
    return match != "changed"


def lookup(
    definition: ToolDefinition,
    session_id: str,
    operation_key: str,
    call_id: str | None = None,
    identity: Any = None,
) -> ToolRequest:
    """A request naming ``operation_key``'s call, for a record lookup (a
    harness's ``resolve_owned_command`` takes one) or a refusal's locator."""
    return ToolRequest(
        call=ToolCall(name=definition.name, call_id=call_id or operation_key, arguments={}),
        operation_key=operation_key,
        session_id=session_id,
        definition=definition,
        identity=identity,
    )


def shared_record(
    remember: RememberOwnedCallback | None, resolve: ResolveOwnedCallback | None
) -> tuple[RememberOwnedCallback, ResolveOwnedCallback]:
    """One ownership record for the ports of a toolset (they share task ids),
    written through to the harness's durable one when it gives one."""
    record: dict[str, OwnedCommand] = {}
    lock = threading.Lock()

    def remember_here(request: ToolRequest, owned: OwnedCommand) -> OwnedCommand:
        stored = remember(request, owned) if remember is not None else None
        # A record that settles races answers with its row.
        kept = stored if isinstance(stored, OwnedCommand) else owned
        with lock:
            record[owned.task_id] = kept
        return kept

    def resolve_here(request: ToolRequest, task: str) -> OwnedCommand | None:
        found = resolve(request, task) if resolve is not None else None
        if isinstance(found, OwnedCommand):
            return found
        with lock:
            return record.get(task)

    return remember_here, resolve_here
