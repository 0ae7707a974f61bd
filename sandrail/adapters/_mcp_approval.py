"""Asking a person through an MCP client: elicitation, in both protocol eras.

When the harness's policy answers ``ApprovalRequired`` for a call, the MCP
server (:func:`sandrail.adapters.mcp.server`) asks the person at the client
whether to run it, when the client can be asked (``docs/howto/approval.md``):

- On a handshake-era connection (protocol up to 2025-11-25: stdio and
  stateful streamable HTTP, what desktop clients speak) whose client
  declared the ``elicitation`` capability, the server sends an
  ``elicitation/create`` request on the call's own stream and waits for the
  answer.
- On a 2026-07-28 connection whose request declared that capability, the
  call returns an ``InputRequiredResult`` holding the same question and a
  ``requestState`` naming the call's operation key; the client retries the
  call with the answer. The SDK's request-state boundary seals that state
  and binds it to the tool and its arguments, so an answer can only approve
  the very call it was asked about.

The form has one boolean field, ``approve``. ``accept`` with ``approve:
true`` runs the call once under its own operation key; ``decline``, or
``accept`` with ``approve: false``, runs nothing and the model reads
``approval_rejected``; ``cancel`` (the person closed the form) decides
nothing: the model reads the ``approval_required`` result. A client that
cannot be asked gets the ``approval_required`` result too; its
``instruction`` and ``_meta["sandrail/next"]`` say to call again once the
person approved, which the harness's own policy must then allow (a key-less
client's identical call keeps its fallback key while the call is
unsettled, so it runs under the same key).

The question shows the tool and its arguments with every env value masked
(C17), wherever it appears (in the command or cwd too), cut to a readable
length.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from sandrail.adapters.kit import shown_arguments

__all__ = [
    "APPROVAL_INPUT",
    "APPROVAL_STATE",
    "Answer",
    "answer_of",
    "can_ask",
    "question",
    "schema",
]

Answer = Literal["approve", "reject", "undecided"]

APPROVAL_INPUT: Final = "sandrail/approval"
"""The key of the approval question in an ``InputRequiredResult``."""
APPROVAL_STATE: Final = "sandrail/approval:"
"""The ``requestState`` of an approval question: this prefix and the key."""


def schema() -> dict[str, Any]:
    """The form a person fills in: one boolean, ``approve``."""
    return {
        "type": "object",
        "properties": {
            "approve": {
                "type": "boolean",
                "title": "Run this call",
                "description": "true runs the call once; false runs nothing.",
                "default": False,
            }
        },
        "required": ["approve"],
    }


def question(name: str, arguments: object, where: str, interaction_id: object) -> str:
    """What the person is asked: the call, env values masked, and where it
    would run."""
    shown = shown_arguments(arguments)
    asked = f"The agent asks to run {name} {shown} on {where}. Nothing runs unless you approve."
    if isinstance(interaction_id, str) and interaction_id:
        asked += f" (approval {interaction_id[:200]})"
    return asked


def can_ask(ctx: Any) -> bool:
    """Whether the request's client declared form elicitation."""
    try:
        capabilities = ctx.session.client_capabilities
        elicitation = getattr(capabilities, "elicitation", None)
    except Exception:
        return False
    if elicitation is None:
        return False
    # An empty capability object (2025-06-18) means form mode.
    form, url = getattr(elicitation, "form", None), getattr(elicitation, "url", None)
    return form is not None or url is None


def answer_of(result: object) -> Answer:
    """What an ``ElicitResult`` decides (anything else decides nothing)."""
    action = getattr(result, "action", None)
    if action == "decline":
        return "reject"
    if action != "accept":
        return "undecided"
    content = getattr(result, "content", None)
    approve = content.get("approve") if isinstance(content, Mapping) else None
    if approve is True:
        return "approve"
    return "reject" if approve is False else "undecided"
