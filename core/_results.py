"""Tool results, their statuses, error codes, and the references they carry."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

import attrs

from ._canonical import canonical_json

__all__ = [
    "AgentCommandRef",
    "ArtifactRef",
    "BackgroundCommandRef",
    "ErrorCode",
    "NativeCommandRef",
    "Status",
    "ToolResult",
    "error_result",
]

Status = Literal["ok", "error", "uncertain", "approval_required"]
"""What a result means for the world:

- ``ok``: the step happened as reported (for a launch: exactly one launch, C7).
- ``error``: no side effect happened and none will (``executed: false``, C5).
- ``uncertain``: a request may have reached the sandbox; ``content`` holds the
  full locator to reconcile it (C6). Never retried silently.
- ``approval_required``: the harness policy wants a human first; nothing ran.
"""


class ErrorCode(StrEnum):
    """Every ``error_type`` sandrail writes. Names follow the reference port so a
    harness that already knows them keeps working."""

    # Request shape, refused before anything else happens.
    REQUEST_INVALID = "e2b_command_request_invalid"
    REQUEST_UNBOUND = "e2b_command_request_unbound"
    OPERATION_KEY_REQUIRED = "e2b_command_operation_key_required"
    TOOL_UNBOUND = "e2b_command_tool_unbound"
    DEFINITION_UNBOUND = "e2b_command_definition_unbound"
    SIGNAL_UNBOUND = "e2b_command_signal_unbound"
    SESSION_UNBOUND = "e2b_command_session_unbound"
    SCOPE_UNBOUND = "e2b_command_scope_unbound"
    IDENTITY_REQUIRED = "e2b_command_identity_required"
    PARENT_RUN_ID_INVALID = "e2b_command_parent_run_id_invalid"
    FENCE_REQUIRED = "e2b_command_fence_required"
    ARGUMENTS_INVALID = "e2b_command_arguments_invalid"
    BUDGET_BELOW_MINIMUM_IDENTITY = "e2b_command_budget_below_minimum_identity"
    UNSUPPORTED_LANGUAGE = "unsupported_language"
    COMMAND_REQUIRED = "command_required"
    BACKGROUND_TIMEOUT_REQUIRES_BACKGROUND = "background_timeout_requires_background"
    SYNC_CONTRACT_INVALID = "e2b_command_sync_contract_invalid"
    # Policy, authority, drift, abort (C8, C9, C11).
    POLICY_DENIED = "policy_denied"
    CANCELED = "canceled"
    ABORTED = "e2b_command_aborted"
    REQUEST_DRIFTED = "e2b_command_request_drifted"
    AUTHORITY_UNPROVEN = "e2b_command_authority_unproven"
    AUTHORITY_LOST = "e2b_command_authority_lost"
    HARNESS_CALLBACK_FAILED = "e2b_command_harness_callback_failed"
    # Ownership and idempotence (C3, C4, C10).
    NOT_OWNED = "e2b_command_not_owned"
    OWNED_OPERATION_MISMATCH = "e2b_command_owned_operation_mismatch"
    OPERATION_CONFLICT = "e2b_command_operation_conflict"
    FENCE_STALE = "e2b_command_fence_stale"
    COMMAND_NOT_STARTED = "e2b_command_not_started"
    TASK_NOT_FOUND = "e2b_command_task_not_found"
    OWNERSHIP_RECORD_UNAVAILABLE = "e2b_command_ownership_record_unavailable"
    # Outcomes the sandbox left unknown (C6).
    SANDBOX_OUTCOME_UNKNOWN = "e2b_sandbox_outcome_unknown"
    EVIDENCE_INCOMPLETE = "e2b_command_evidence_incomplete"
    SANDBOX_UNAVAILABLE = "e2b_sandbox_unavailable"
    READ_FAILED = "e2b_command_read_failed"
    INTERNAL = "e2b_command_error"


@attrs.frozen(kw_only=True)
class ArtifactRef:
    """Where the full, uncut content of a result was stored (C15)."""

    uri: str
    size_bytes: int
    media_type: str = "application/json"

    def to_dict(self) -> dict[str, Any]:
        return {"uri": self.uri, "size_bytes": self.size_bytes, "media_type": self.media_type}


@attrs.frozen(kw_only=True)
class NativeCommandRef:
    """How a native-owner harness finds a background command again."""

    task_id: str
    source_run_id: str
    operation_key: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "source_run_id": self.source_run_id,
            "operation_key": self.operation_key,
        }


@attrs.frozen(kw_only=True)
class AgentCommandRef:
    """How an agent-owner harness finds a background command again."""

    task_id: str
    agent_id: str
    session_id: str
    source_call_id: str
    operation_key: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "agent_id": self.agent_id,
            "session_id": self.session_id,
            "source_call_id": self.source_call_id,
            "operation_key": self.operation_key,
        }


BackgroundCommandRef = NativeCommandRef | AgentCommandRef


@attrs.frozen(kw_only=True)
class ToolResult:
    """What a tool call returns to the harness.

    ``content`` is a JSON object with snake_case keys; unless the runtime
    governs results, its canonical JSON is within the port's
    ``max_output_bytes`` (C12). Treat it as read-only.
    """

    status: Status
    content: Mapping[str, Any]
    background_command_ref: BackgroundCommandRef | None = None
    artifact_refs: tuple[ArtifactRef, ...] = ()

    @property
    def is_error(self) -> bool:
        """Whether the call did not do what was asked: ``error``, ``uncertain``
        or ``approval_required`` (the content says which, and what to do).
        Frameworks that flag failed tool calls to the model (MCP ``isError``,
        Anthropic ``is_error``) take this."""
        return self.status != "ok"

    def to_json(self) -> str:
        """What the model is sent: the canonical JSON of ``content`` (RFC
        8785: sorted keys, no spaces, text as UTF-8, never a ``\\u`` escape
        but for control characters), the form the budget measures. So unless
        the runtime governs results, ``len(result.to_json().encode())`` is at
        most the port's ``max_output_bytes`` (C12) as sent, which
        ``json.dumps`` (ASCII escapes, spaces) does not keep. Send this text
        as it is; never the result object or its repr.

        Raises ``CanonicalJSONError`` only for content no port returns (a
        hand-built result holding non-JSON data).
        """
        return canonical_json(self.content).decode("utf-8")

    @property
    def error_type(self) -> str | None:
        """The ``error_type`` of an ``error`` or ``uncertain`` result, else ``None``."""
        value = self.content.get("error_type")
        return value if isinstance(value, str) else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (used by the command line and recordings)."""
        return {
            "status": self.status,
            "content": dict(self.content),
            "background_command_ref": (
                None
                if self.background_command_ref is None
                else self.background_command_ref.to_dict()
            ),
            "artifact_refs": [ref.to_dict() for ref in self.artifact_refs],
        }


def error_result(code: ErrorCode, **extra: Any) -> ToolResult:
    """An ``error`` result: nothing happened and nothing will (``executed: false``)."""
    content: dict[str, Any] = {"ok": False, "error_type": code.value, "executed": False}
    content.update(extra)
    return ToolResult(status="error", content=content)
