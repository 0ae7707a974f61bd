"""Tool results, their statuses, error codes, and the references they carry."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final, Literal

import attrs

from ._canonical import canonical_json

__all__ = [
    "APPROVAL_REJECTED_INSTRUCTION",
    "AgentCommandRef",
    "ArtifactRef",
    "BackgroundCommandRef",
    "ErrorCode",
    "NativeCommandRef",
    "Status",
    "ToolResult",
    "error_result",
    "next_step",
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
    TIMEOUT_REQUIRES_FOREGROUND = "timeout_requires_foreground"
    SYNC_CONTRACT_INVALID = "e2b_command_sync_contract_invalid"
    # Policy, approval, authority, drift, abort (C8, C9, C11).
    POLICY_DENIED = "policy_denied"
    APPROVAL_REJECTED = "approval_rejected"
    APPROVAL_MISMATCH = "approval_mismatch"
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
    BACKEND_REFUSED = "e2b_backend_refused"
    READ_FAILED = "e2b_command_read_failed"
    INTERNAL = "e2b_command_error"


@attrs.frozen(kw_only=True)
class ArtifactRef:
    """Where the full, uncut content of a result was stored (C15)."""

    uri: str
    size_bytes: int
    media_type: str = "application/json"

    def to_dict(self) -> dict[str, Any]:
        """The reference as results show it: ``uri``, ``size_bytes``, ``media_type``."""
        return {"uri": self.uri, "size_bytes": self.size_bytes, "media_type": self.media_type}


@attrs.frozen(kw_only=True)
class NativeCommandRef:
    """How a native-owner harness finds a background command again."""

    task_id: str
    source_run_id: str
    operation_key: str

    def to_dict(self) -> dict[str, Any]:
        """The reference as results show it, every field whole."""
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
        """The reference as results show it, every field whole."""
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
    ``max_output_bytes`` (C12). Treat it as read-only. Every result the port
    returns says its own ``status`` in ``content`` too (what the model
    reads), and a command's state under ``command_status``.

    The typed accessors read ``content`` the way the frameworks' own results
    read: each returns ``None`` when the result does not carry that field (a
    refusal has no ``stdout``; a result cut to fit its budget keeps the
    identity fields whole, C13).
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

    @property
    def is_uncertain(self) -> bool:
        """``status == "uncertain"``: something may have run; reconcile it
        (the same operation key, or ``read_command_output`` on
        :attr:`task_id`), never run it anew."""
        return self.status == "uncertain"

    @property
    def needs_approval(self) -> bool:
        """``status == "approval_required"``: nothing ran; a person decides."""
        return self.status == "approval_required"

    @property
    def executed(self) -> bool | None:
        """``False`` when nothing ran and nothing will (every ``error`` and
        ``approval_required`` result); ``None`` when the content does not say
        (``ok`` and ``uncertain`` results)."""
        return self._flag("executed")

    @property
    def command_status(self) -> str | None:
        """The command's own state: ``running``, ``exited``, ``timed_out``,
        ``canceled`` (launches, reads and stops that observed it)."""
        return self._text("command_status")

    @property
    def exit_code(self) -> int | None:
        """The command's exit code, once the sandbox observed one."""
        return self._integer("exit_code")

    @property
    def stdout(self) -> str | None:
        """The command's standard output as shown (env values masked; cut
        around a marker when it did not fit the budget)."""
        return self._text("stdout")

    @property
    def stderr(self) -> str | None:
        """The command's standard error as shown (see :attr:`stdout`)."""
        return self._text("stderr")

    @property
    def task_id(self) -> str | None:
        """The task id of the command this result concerns."""
        return self._text("task_id")

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox the command ran in, once known."""
        return self._text("sandbox_id")

    @property
    def operation_key(self) -> str | None:
        """The operation key the call ran under (every result with a locator)."""
        return self._text("operation_key")

    @property
    def instruction(self) -> str | None:
        """What the model (or the harness) can do next, in words."""
        return self._text("instruction")

    @property
    def deduplicated(self) -> bool | None:
        """For a launch: ``True`` when this call found its task already
        launched (a retry) and nothing new ran."""
        return self._flag("deduplicated")

    @property
    def truncated(self) -> bool:
        """Whether output was cut to fit the budget (see ``output_budget``)."""
        note = self.content.get("output_budget")
        return isinstance(note, Mapping) and note.get("truncated") is True

    def _text(self, key: str) -> str | None:
        value = self.content.get(key)
        return value if isinstance(value, str) else None

    def _flag(self, key: str) -> bool | None:
        value = self.content.get(key)
        return value if isinstance(value, bool) else None

    def _integer(self, key: str) -> int | None:
        value = self.content.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

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


APPROVAL_REJECTED_INSTRUCTION: Final = (
    "A person rejected this call; nothing ran. Do not repeat it or work around it with "
    "another call; ask the user what to do instead."
)
"""What the model reads when a person rejected a call it made."""


def error_result(code: ErrorCode, **extra: Any) -> ToolResult:
    """An ``error`` result: nothing happened and nothing will (``executed: false``).

    Its content says ``status: "error"`` and carries an ``instruction``: the
    one in ``extra``, else what :func:`next_step` says for ``code``."""
    content: dict[str, Any] = {
        "status": "error",
        "ok": False,
        "error_type": code.value,
        "executed": False,
    }
    content.update(extra)
    content.setdefault("instruction", next_step(code))
    return ToolResult(status="error", content=content)


def next_step(code: ErrorCode) -> str:
    """The instruction an ``error`` with ``code`` carries when its builder
    gave none: what the model can do with the tools it has."""
    return _NEXT_STEP.get(code, _NOTHING_RAN)


_NOTHING_RAN: Final = "Nothing ran. Fix the call as the other fields say, then call again."
_NEXT_STEP: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.BUDGET_BELOW_MINIMUM_IDENTITY: "Nothing ran: the harness's result budget "
    "(max_output_bytes) is too small for this call's identity; the harness must raise it.",
    ErrorCode.TOOL_UNBOUND: "Nothing ran: there is no tool of that name. Use one of "
    "available_tools.",
    ErrorCode.APPROVAL_REJECTED: APPROVAL_REJECTED_INSTRUCTION,
    ErrorCode.APPROVAL_MISMATCH: "Nothing ran: this call is not the one a person approved "
    "(another tool or other arguments under its operation key). Do not repeat it; ask the "
    "user what to do.",
    ErrorCode.POLICY_DENIED: "Nothing ran: the harness's policy does not allow this call. "
    "Do not repeat it or work around it with another call.",
}
