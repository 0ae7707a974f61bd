"""Owners, the identities requests carry, and task ids (C1)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import attrs

from ._canonical import canonical_json

__all__ = [
    "AgentIdentity",
    "AgentOwner",
    "NativeIdentity",
    "NativeOwner",
    "Owner",
    "OwnerIdentity",
    "task_id",
]

_TASK_ID_DOMAIN = "sandrail.task-id/v1"


@attrs.frozen(kw_only=True)
class NativeOwner:
    """A native harness owner, bound by its ``scope`` (a JSON object)."""

    scope: Mapping[str, Any]

    def key(self) -> dict[str, Any]:
        """The owner as plain data (``kind`` and ``scope``), as records and
        recordings keep it."""
        return {"kind": "native", "scope": self.scope}


@attrs.frozen(kw_only=True)
class AgentOwner:
    """An agent owner, bound by its ``agent_id``."""

    agent_id: str

    def key(self) -> dict[str, Any]:
        """The owner as plain data (``kind`` and ``agent_id``), as records and
        recordings keep it."""
        return {"kind": "agent", "agent_id": self.agent_id}


Owner = NativeOwner | AgentOwner


@attrs.frozen(kw_only=True)
class NativeIdentity:
    """What a native harness states about itself on every request.

    All fields are identity: they appear byte-identical in every result's
    locator and are never cut to fit a budget (C13).
    """

    scope: Mapping[str, Any]
    run_id: str
    turn_id: str
    build_id: str
    task_chain_id: str
    parent_run_id: str | None
    execution_fence: int

    def locator(self) -> dict[str, Any]:
        """The fields that locate this caller's calls in a result (scope, run,
        turn, build and task-chain ids)."""
        return {
            "scope": self.scope,
            "run_id": self.run_id,
            "turn_id": self.turn_id,
            "build_id": self.build_id,
            "task_chain_id": self.task_chain_id,
            "parent_run_id": self.parent_run_id,
            "execution_fence": self.execution_fence,
        }


@attrs.frozen(kw_only=True)
class AgentIdentity:
    """What an agent harness states about itself on every request."""

    agent_id: str

    def locator(self) -> dict[str, Any]:
        """The fields that locate this caller's calls in a result (``agent_id``)."""
        return {"agent_id": self.agent_id}


OwnerIdentity = NativeIdentity | AgentIdentity


def task_id(session_id: str, owner: Owner, operation_key: str) -> str:
    """The task id of an operation (C1): 64 lowercase hex, a pure function of
    (session, owner, operation key).

    The inputs are framed as canonical JSON before hashing, so distinct inputs
    never share a preimage: different sessions or owners get different ids
    unless SHA-256 collides.
    """
    frame = [_TASK_ID_DOMAIN, session_id, owner.key(), operation_key]
    return hashlib.sha256(canonical_json(frame)).hexdigest()
